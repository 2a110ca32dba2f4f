// Helpers of the training-run tests: a small training spec, seeded batches, the order `teengine run` visits them
// in, and byte-for-byte comparison of safetensors files. Names live in te::training_test (the sanitizer builds
// compile several test files as one unit, so helpers in anonymous namespaces must not repeat).
#pragma once
#include <gtest/gtest.h>
#include <teengine/teengine.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/tensor.h"
#include "models/batch_order.h"
#include "models/dataset.h"
#include "models/safetensors.h"
#include "tests/models/test_spec_yaml.h"

namespace te::training_test {

inline constexpr int64_t kTokens = 32, kHidden = 64;

// Two layers at hidden 64, tp `tp` with sequence parallelism on the local communicator, the optimizer with a
// warm-up of 2 and a cosine decay over 4 steps.
inline std::string spec_yaml(const std::string& recipe, int tp, const std::string& optimizer, int64_t steps = 6) {
  const std::string opt = optimizer == "sgd" ? "{type: sgd, lr: 0.05, momentum: 0.9, weight_decay: 0.01"
                                             : "{type: adamw, lr: 0.004, weight_decay: 0.01";
  const std::string schedule = ", schedule: {type: cosine, warmup_steps: 2, decay_steps: 4, min_lr: 0.0001}}";
  return test::SmallSpec{.name = "trainrun",
                         .hidden = kHidden,
                         .layers = 2,
                         .qkv = 128,
                         .ffn = 128,
                         .tp = tp,
                         .recipe = recipe,
                         .recipe_options = recipe == "fp8_delayed" ? ", amax_history_len: 4" : "",
                         .mode = "train",
                         .device = "cpu",
                         .tokens = kTokens,
                         .steps = steps,
                         .seed = 11,
                         .optimizer = opt + schedule}
      .yaml();
}

inline Tensor seeded_normal(Shape shape, uint64_t seed) {
  Tensor t = Tensor::empty(std::move(shape), DType::f32);
  t.fill_normal(seed);
  return t;
}

inline Tensor halved(const Tensor& t) {  // the targets of the CLI tests' data: 0.5·x
  std::vector<float> v = t.to_f32_vector();
  for (float& f : v) f *= 0.5f;
  return Tensor::from_f32(v, t.shape(), DType::f32);
}

inline teengine::HostTensor to_host_tensor(const Tensor& t) {
  teengine::HostTensor h;
  h.shape.assign(t.shape().begin(), t.shape().end());
  h.bytes.resize(static_cast<size_t>(t.nbytes()));
  std::memcpy(h.bytes.data(), t.data_ptr(), h.bytes.size());
  return h;
}

// Four batches (target 0.5·x + 0.1); step s trains on the batch BatchOrder gives it (shuffled, seed 11), as
// `teengine run` does.
struct Batches {
  std::vector<teengine::HostTensor> x, y;
  Batches() {
    for (uint64_t b = 0; b < 4; ++b) {
      Tensor in = seeded_normal({kTokens, kHidden}, 100 + b);
      std::vector<float> v = in.to_f32_vector();
      for (float& f : v) f = 0.5f * f + 0.1f;
      x.push_back(to_host_tensor(in));
      y.push_back(to_host_tensor(Tensor::from_f32(v, in.shape(), DType::f32)));
    }
  }
};

// Steps from … to; with `eval_between` an eval of another batch follows each step (twice): it must change nothing.
inline std::vector<float> train_steps(teengine::Engine& e, const Batches& d, int64_t from, int64_t to,
                                      bool eval_between = false) {
  BatchOrder order(4, true, 11);
  std::vector<float> losses;
  for (int64_t s = from; s <= to; ++s) {
    const int64_t b = order.at(s).batch;
    losses.push_back(e.train_step(d.x[static_cast<size_t>(b)], d.y[static_cast<size_t>(b)]));
    if (eval_between) {
      const size_t o = static_cast<size_t>((b + 1) % 4);
      const teengine::StagedTensor ex = e.stage(d.x[o]), ey = e.stage(d.y[o]);
      EXPECT_TRUE(std::isfinite(e.eval_loss(ex, ey)));
      (void)e.eval_loss(ex, ey);
    }
  }
  return losses;
}

inline std::string scratch_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("te_trainrun_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

// Every tensor of two safetensors files, byte for byte (metadata aside).
inline void expect_same_tensors(const std::string& a, const std::string& b) {
  SafetensorsReader ra = SafetensorsReader::open(a), rb = SafetensorsReader::open(b);
  ASSERT_EQ(ra.entries().size(), rb.entries().size());
  for (const SafetensorsEntry& e : ra.entries()) {
    ASSERT_TRUE(rb.contains(e.name)) << e.name;
    Tensor ta = ra.read(e.name), tb = rb.read(e.name);
    ASSERT_EQ(ta.shape(), tb.shape()) << e.name;
    EXPECT_EQ(0, std::memcmp(ta.data_ptr(), tb.data_ptr(), static_cast<size_t>(ta.nbytes()))) << e.name;
  }
}

}  // namespace te::training_test
