// A transformer layer with attention (LN → qkv → rotary → attention → proj → residual → LN → MLP → residual) on the
// CPU: the forward against a float64 composition of the same weights (tests/common/attention_reference.h for the
// attention), tensor parallelism with and without sequence parallelism against one rank, training (the loss falls
// and tp 2 follows tp 1 within the parity bounds of docs/NUMERICS.md), the plan in --explain, token counts that
// are not whole sequences, and the spec's attention keys.
#include <gtest/gtest.h>
#include <teengine/teengine.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "common/attention_reference.h"
#include "common/gpu.h"
#include "engine/compare.h"
#include "engine/error.h"
#include "models/safetensors.h"
#include "models/spec.h"
#include "training_util.h"

namespace te {
namespace {
using namespace training_test;

constexpr int64_t kSeq = 16;

// hidden 64; 4 query heads in 2 key/value groups of head_dim 32 (QKV out 8 · 32 = 256), sequences of 16 tokens.
std::string attention_yaml(int tp, bool sp, const std::string& recipe, const std::string& mode, int64_t tokens,
                           const std::string& dtype = "bf16", bool mlp = true, int64_t layers = 2) {
  return "name: attn\nmodel:\n  hidden: 64\n  layers: " + std::to_string(layers) + "\n  dtype: " + dtype +
         "\n  block:\n"
         "    - [ {layernorm_linear: {name: layernorm_qkv, out: 256}},\n"
         "        {attention: {name: attn, heads: 4, kv_heads: 2, seq_len: 16, rotary: true}},\n"
         "        {linear: {name: proj, out: 64}} ]\n" +
         (mlp ? "    - [ {layernorm_mlp: {name: mlp, ffn: 128, activation: gelu}} ]\n" : "") +
         "parallel: {tp: " + std::to_string(tp) + ", sequence_parallel: " + (sp ? "true" : "false") +
         ", comm: local}\nprecision: {recipe: " + recipe + "}\nrun: {mode: " + mode +
         ", device: cpu, tokens: " + std::to_string(tokens) +
         ", steps: 6, seed: 11, optimizer: {type: adamw, lr: 0.004}}\n";
}

std::vector<double> f64(const Tensor& t) {
  const std::vector<float> v = t.to_f32_vector();
  return {v.begin(), v.end()};
}

// x + proj(attention(rope(qkv(LN(x))))) in float64 from the saved weights: [tokens, 64].
std::vector<double> reference_layer(const SafetensorsReader& w, const std::vector<double>& x, int64_t tokens) {
  const int64_t H = 64, Q = 256, O = 128;
  const std::vector<double> g = f64(w.read("layers.0.layernorm_qkv.layer_norm_weight")),
                            b = f64(w.read("layers.0.layernorm_qkv.layer_norm_bias")),
                            wq = f64(w.read("layers.0.layernorm_qkv.weight")),
                            bq = f64(w.read("layers.0.layernorm_qkv.bias")), wo = f64(w.read("layers.0.proj.weight")),
                            bo = f64(w.read("layers.0.proj.bias"));
  std::vector<double> qkv(static_cast<size_t>(tokens * Q)), y(x);
  for (int64_t t = 0; t < tokens; ++t) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < H; ++i) mean += x[t * H + i] / H;
    for (int64_t i = 0; i < H; ++i) var += (x[t * H + i] - mean) * (x[t * H + i] - mean) / H;
    std::vector<double> n(H);
    for (int64_t i = 0; i < H; ++i) n[i] = (x[t * H + i] - mean) / std::sqrt(var + 1e-5) * g[i] + b[i];
    for (int64_t o = 0; o < Q; ++o) {
      double s = bq[o];
      for (int64_t i = 0; i < H; ++i) s += n[i] * wq[o * H + i];
      qkv[t * Q + o] = s;
    }
  }
  const std::vector<double> a = attention_reference::forward({tokens / kSeq, kSeq, 4, 2, 32, true, 10000}, qkv);
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t o = 0; o < H; ++o) {
      double s = bo[o];
      for (int64_t i = 0; i < O; ++i) s += a[t * O + i] * wo[o * O + i];
      y[t * H + o] += s;
    }
  return y;
}

std::vector<float> forward_of(teengine::Engine& e, const Tensor& x) {
  return e.forward(to_host_tensor(x)).to_floats();
}

TEST(AttentionModel, ForwardMatchesAFloat64LayerAtEveryParallelLayout) {
  const int64_t tokens = 3 * kSeq;
  const std::string w = scratch_path("attn_layer.safetensors");
  const Tensor x = seeded_normal({tokens, 64}, 5);
  teengine::Engine one = teengine::Engine::from_yaml_string(attention_yaml(1, false, "none", "infer", tokens, "f32",
                                                                           false, 1));
  one.save_weights(w);
  const std::vector<double> ref = reference_layer(SafetensorsReader::open(w), f64(x), tokens);
  EXPECT_LE(rel_l2(forward_of(one, x), ref), 1e-5);
  // The residual dominates the output: the branch alone must match too.
  std::vector<double> branch_ref(ref), xs = f64(x);
  std::vector<float> branch = forward_of(one, x);
  for (size_t i = 0; i < ref.size(); ++i) {
    branch_ref[i] -= xs[i];
    branch[i] -= static_cast<float>(xs[i]);
  }
  EXPECT_LE(rel_l2(branch, branch_ref), 1e-4);
  for (bool sp : {false, true}) {
    teengine::Engine two = teengine::Engine::from_yaml_string(
        attention_yaml(2, sp, "none", "infer", tokens, "f32", false, 1) + "weights: " + w + "\n");
    EXPECT_LE(rel_l2(forward_of(two, x), ref), 1e-5) << "sp " << sp;
  }
  std::filesystem::remove(w);
}

// Each rank runs whole key/value groups, so the attention of a head is the same bytes at tp 1 and 2; the layer's
// outputs differ only by the row-parallel sums (f32: rounding only).
TEST(AttentionModel, Tp2MatchesTp1InF32ForEveryRecipe) {
  for (const char* recipe : {"none", "fp8_block", "mxfp8", "fp8_current"}) {
    const Tensor x = seeded_normal({2 * kSeq, 64}, 6);
    teengine::Engine one = teengine::Engine::from_yaml_string(attention_yaml(1, false, recipe, "infer", 2 * kSeq,
                                                                             "f32"));
    teengine::Engine two = teengine::Engine::from_yaml_string(attention_yaml(2, true, recipe, "infer", 2 * kSeq,
                                                                             "f32"));
    const std::vector<float> a = forward_of(one, x), b = forward_of(two, x);
    EXPECT_LE(rel_l2(b, std::vector<double>(a.begin(), a.end())), 1e-5) << recipe;
  }
}

TEST(AttentionModel, TrainsAndTp2FollowsTp1) {
  const Batches d;  // 32 tokens: two sequences of 16
  for (const char* recipe : {"none", "fp8_block"}) {
    teengine::Engine one = teengine::Engine::from_yaml_string(attention_yaml(1, false, recipe, "train", kTokens));
    teengine::Engine two = teengine::Engine::from_yaml_string(attention_yaml(2, true, recipe, "train", kTokens));
    const std::vector<float> l1 = train_steps(one, d, 1, 8), l2 = train_steps(two, d, 1, 8);
    EXPECT_LT(l1.back(), 0.8f * l1.front()) << recipe;
    const double bound = std::string(recipe) == "none" ? 1e-2 : 3e-2;
    for (size_t s = 0; s < l1.size(); ++s)
      EXPECT_NEAR(l2[s], l1[s], bound * std::fabs(l1[s])) << recipe << " step " << s + 1;
  }
}

// The same layer on the GPU (the CUDA attention between cuBLASLt GEMMs, one rank, and two ranks sharing the GPU with
// sequence parallelism) against the CPU from the same weights: the forward within bf16's tolerance, and training
// steps whose losses fall and follow the CPU's within the parity bounds above.
std::string on_gpu(std::string yaml) { return yaml.replace(yaml.find("device: cpu"), 11, "device: cuda"); }

TEST(AttentionModel, GpuFollowsTheCpu) {
  TE_REQUIRE_GPU();
  const std::string w = scratch_path("attn_gpu.safetensors");
  const Tensor x = seeded_normal({3 * kSeq, 64}, 8);
  teengine::Engine cpu = teengine::Engine::from_yaml_string(attention_yaml(1, false, "none", "infer", 3 * kSeq));
  cpu.save_weights(w);
  const std::vector<float> want = forward_of(cpu, x);
  for (int tp : {1, 2}) {
    teengine::Engine gpu =
        teengine::Engine::from_yaml_string(on_gpu(attention_yaml(tp, tp == 2, "none", "infer", 3 * kSeq)));
    gpu.load_weights(w);
    EXPECT_LE(rel_l2(forward_of(gpu, x), want), 1e-2) << "tp " << tp;
    const std::string plan = gpu.explain();  // cuDNN where it builds a plan, the own kernels named as the fallback
    EXPECT_NE(plan.find("attention 'attn': cuDNN fused flash attention"), std::string::npos) << plan;
    EXPECT_NE(plan.find("shared-memory tensor-core tiles"), std::string::npos) << plan;
  }
  try {  // the CUDA kernels take bf16/f16: an f32 model on the GPU is refused at start, naming the fix
    teengine::Engine::from_yaml_string(on_gpu(attention_yaml(1, false, "none", "infer", 3 * kSeq, "f32")));
    FAIL() << "an f32 attention model on the GPU";
  } catch (const teengine::Error& err) {
    EXPECT_TRUE(err.is_input_error());
    EXPECT_NE(std::string(err.what()).find("bf16/f16"), std::string::npos) << err.what();
  }
  const Batches d;
  for (const char* recipe : {"none", "fp8_block"}) {
    teengine::Engine ref = teengine::Engine::from_yaml_string(attention_yaml(1, false, recipe, "train", kTokens));
    const std::vector<float> l1 = train_steps(ref, d, 1, 8);
    const double bound = std::string(recipe) == "none" ? 1e-2 : 3e-2;
    for (int tp : {1, 2}) {
      teengine::Engine gpu =
          teengine::Engine::from_yaml_string(on_gpu(attention_yaml(tp, tp == 2, recipe, "train", kTokens)));
      const std::vector<float> l2 = train_steps(gpu, d, 1, 8);
      EXPECT_LT(l2.back(), 0.8f * l2.front()) << recipe << " tp " << tp;
      for (size_t s = 0; s < l1.size(); ++s)
        EXPECT_NEAR(l2[s], l1[s], bound * std::fabs(l1[s])) << recipe << " tp " << tp << " step " << s + 1;
    }
  }
}

TEST(AttentionModel, ExplainShowsTheAttentionNodesForwardAndBackward) {
  teengine::Engine e = teengine::Engine::from_yaml_string(attention_yaml(2, true, "fp8_block", "train", kTokens));
  const std::string plan = e.explain();
  for (const char* node : {"'layers.0.attn.rope' (rope)", "'layers.0.attn' (attention)", "(attention_backward)",
                           "'layers.0.attn.rope_backward' (rope)",
                           "4 heads / 2 kv of 32, seq 16, causal, rotary base 10000",
                           "attention 'attn': CPU reference"})
    EXPECT_NE(plan.find(node), std::string::npos) << "no '" << node << "' in:\n" << plan;
}

TEST(AttentionModel, RefusesTokensThatAreNotWholeSequences) {
  teengine::Engine e = teengine::Engine::from_yaml_string(attention_yaml(2, true, "none", "infer", kTokens));
  EXPECT_EQ(e.token_multiple(), kSeq);
  EXPECT_FALSE(e.tokens_independent());
  try {
    (void)e.forward(to_host_tensor(seeded_normal({24, 64}, 1)));
    FAIL() << "24 tokens are not whole sequences of 16";
  } catch (const teengine::Error& err) {
    EXPECT_TRUE(err.is_input_error());
    EXPECT_NE(std::string(err.what()).find("not whole sequences of 16"), std::string::npos) << err.what();
  }
}

// Sequences are independent: two requests run as one forward give each request's bytes (what batching relies on).
TEST(AttentionModel, SequencesRunTogetherKeepTheirBytes) {
  for (const char* recipe : {"none", "fp8_block", "mxfp8"}) {
    teengine::Engine e = teengine::Engine::from_yaml_string(attention_yaml(2, true, recipe, "infer", kTokens));
    const Tensor a = seeded_normal({kSeq, 64}, 1), b = seeded_normal({2 * kSeq, 64}, 2);
    std::vector<float> both_in = a.to_f32_vector(), bv = b.to_f32_vector();
    both_in.insert(both_in.end(), bv.begin(), bv.end());
    std::vector<float> alone = forward_of(e, a), alone_b = forward_of(e, b);
    alone.insert(alone.end(), alone_b.begin(), alone_b.end());
    EXPECT_EQ(forward_of(e, Tensor::from_f32(both_in, {3 * kSeq, 64}, DType::f32)), alone) << recipe;
  }
}

// The engine's batcher with attention: requests of whole sequences (15 tokens each) from concurrent callers get
// their bytes alone, the batches padded with whole zero sequences to lcm(tp, seq_len) = 30; a request that is not
// whole sequences is refused alone.
TEST(AttentionModel, BatchedRequestsGetTheirBytesAlone) {
  std::string yaml = attention_yaml(2, true, "fp8_block", "infer", 30);
  yaml.replace(yaml.find("seq_len: 16"), 11, "seq_len: 15");
  teengine::Engine e = teengine::Engine::from_yaml_string(yaml);
  ASSERT_EQ(e.token_multiple(), 30);
  const int n = 12;
  std::vector<teengine::HostTensor> reqs, want;
  for (int i = 0; i < n; ++i) {
    const int64_t tokens = 15 * (1 + i % 3);
    const Tensor x = seeded_normal({tokens, 64}, 300 + static_cast<uint64_t>(i));
    reqs.push_back(to_host_tensor(x));
    // Alone: padded by one zero sequence where needed, the padding's rows dropped.
    std::vector<float> padded = x.to_f32_vector();
    padded.resize(static_cast<size_t>((tokens + 29) / 30 * 30 * 64), 0.f);
    std::vector<float> y = forward_of(e, Tensor::from_f32(padded, {(tokens + 29) / 30 * 30, 64}, DType::f32));
    y.resize(static_cast<size_t>(tokens * 64));
    want.push_back(teengine::HostTensor::from_floats({tokens, 64}, y));
  }
  teengine::BatchingOptions b;
  b.enabled = true;
  b.max_wait_us = 20000;
  e.set_batching(b);
  std::vector<teengine::HostTensor> got(n);
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i)
    threads.emplace_back([&, i] { got[static_cast<size_t>(i)] = e.forward(reqs[static_cast<size_t>(i)]); });
  bool refused = false;
  try {
    (void)e.forward(to_host_tensor(seeded_normal({20, 64}, 9)));
  } catch (const teengine::Error& err) {
    refused = err.is_input_error() && std::string(err.what()).find("whole sequences of 15") != std::string::npos;
  }
  for (auto& t : threads) t.join();
  EXPECT_TRUE(refused);
  for (int i = 0; i < n; ++i)
    EXPECT_EQ(got[static_cast<size_t>(i)].to_floats(), want[static_cast<size_t>(i)].to_floats()) << "request " << i;
}

struct BadAttention {
  const char* name;
  std::string from, to;             // replaced in the layer's YAML
  std::vector<std::string> message;  // each must appear
  std::string hint;
};

class BadAttentionSpec : public ::testing::TestWithParam<BadAttention> {};

TEST_P(BadAttentionSpec, ThrowsInputErrorNamingTheField) {
  const BadAttention& c = GetParam();
  std::string yaml = attention_yaml(2, true, "none", "infer", kTokens);
  ASSERT_NE(yaml.find(c.from), std::string::npos) << c.from;
  yaml.replace(yaml.find(c.from), c.from.size(), c.to);
  try {
    parse_spec(yaml, "a.yaml");
    FAIL() << "accepted:\n" << yaml;
  } catch (const InputError& e) {
    for (const std::string& m : c.message)
      EXPECT_NE(e.message().find(m), std::string::npos) << "no '" << m << "' in: " << e.message();
    EXPECT_NE(e.hint().find(c.hint), std::string::npos) << "hint: " << e.hint();
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, BadAttentionSpec,
    ::testing::Values(
        BadAttention{"FirstInBranch", "{layernorm_linear: {name: layernorm_qkv, out: 256}},", "",
                     {"model.block[0][0]", "must follow the QKV projection"}, "layernorm_linear"},
        BadAttention{"WidthMismatch", "out: 256", "out: 250",
                     {"not a multiple of heads + 2 · kv_heads = 8"}, "e.g. 512"},
        BadAttention{"HeadDimMismatch", "seq_len: 16,", "seq_len: 16, head_dim: 16,",
                     {"model.block[0][1].attention.head_dim", "read 128 QKV features", "gives 256"},
                     "leave head_dim out"},
        BadAttention{"KvHeadsNotDividingHeads", "kv_heads: 2", "kv_heads: 3", {"does not divide heads 4"},
                     "divisor"},
        BadAttention{"KvHeadsNotDividedByTp", "kv_heads: 2", "kv_heads: 1",
                     {"attention.kv_heads", "not divisible by tp 2", "whole key/value groups"}, "multiple"},
        BadAttention{"TokensNotWholeSequences", "tokens: 32", "tokens: 40",
                     {"run.tokens", "tokens 40 are not whole sequences of seq_len 16", "'attn'"}, "tokens 32 or 48"},
        BadAttention{"RotaryBaseWithoutRotary", "rotary: true", "rotary_base: 500",
                     {"attention.rotary_base", "rotary is not"}, "rotary: true"},
        BadAttention{"MissingSeqLen", "seq_len: 16, ", "", {"attention.seq_len"}, "batch × seq_len"},
        BadAttention{"Dropout", "rotary: true", "rotary: true, dropout: 0.1", {"dropout"}, ""},
        BadAttention{"BiasKey", "rotary: true", "rotary: true, bias: false", {"bias"}, ""}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace te
