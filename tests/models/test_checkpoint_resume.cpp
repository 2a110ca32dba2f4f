// Checkpoints through the Engine: a run resumed from one continues bit-identically to a run never stopped (tp 1
// and 2, AdamW and SGD, shuffled batches and a cosine schedule, fp8 delayed scaling with its amax history; losses,
// learning rates and every byte of weights, optimizer and scaling state); a tp-2 checkpoint loads at tp 1; eval
// loss is the forward loss and changes nothing; checkpoints of another spec are refused naming the field.
#include <gtest/gtest.h>
#include <teengine/teengine.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli_test.h"
#include "models/safetensors.h"
#include "training_util.h"

namespace te {
namespace {
namespace fs = std::filesystem;
using namespace training_test;

struct ResumeCase {
  std::string recipe, optimizer;
  int tp;
};

class Resume : public ::testing::TestWithParam<ResumeCase> {};

// 6 steps straight == 3 steps (an eval after each), checkpoint, a new engine, resume, 3 steps: the same losses and
// learning rates, and the final checkpoints (weights, optimizer state, delayed-scaling state) byte for byte;
// save_weights files too.
TEST_P(Resume, ContinuesBitIdentically) {
  const ResumeCase c = GetParam();
  const std::string yaml = spec_yaml(c.recipe, c.tp, c.optimizer);
  const Batches d;
  const std::string ck = scratch_path("k.safetensors"), end_a = scratch_path("a.safetensors"),
                    end_b = scratch_path("b.safetensors"), wa = scratch_path("wa.safetensors"),
                    wb = scratch_path("wb.safetensors");
  teengine::Engine a = teengine::Engine::from_yaml_string(yaml);
  const std::vector<float> straight = train_steps(a, d, 1, 6);
  a.save_checkpoint(end_a);
  a.save_weights(wa);
  for (float l : straight) EXPECT_TRUE(std::isfinite(l));
  EXPECT_LT(straight.back(), straight.front());  // it learns

  {
    teengine::Engine first = teengine::Engine::from_yaml_string(yaml);
    const std::vector<float> head = train_steps(first, d, 1, 3, /*eval_between=*/true);
    EXPECT_EQ(head, std::vector<float>(straight.begin(), straight.begin() + 3));
    first.save_checkpoint(ck, {{"note", "kept"}});
  }
  teengine::Engine b = teengine::Engine::from_yaml_string(yaml);
  const auto md = b.load_checkpoint(ck);
  EXPECT_EQ(md.at("step"), "3");
  EXPECT_EQ(md.at("note"), "kept");
  EXPECT_EQ(b.step(), 3);
  const std::vector<float> tail = train_steps(b, d, 4, 6);
  EXPECT_EQ(tail, std::vector<float>(straight.begin() + 3, straight.end()));
  EXPECT_DOUBLE_EQ(b.last_lr(), a.last_lr());
  b.save_checkpoint(end_b);
  b.save_weights(wb);
  expect_same_tensors(end_a, end_b);
  EXPECT_EQ(slurp(wa), slurp(wb));
  SafetensorsReader r = SafetensorsReader::open(end_b);
  EXPECT_TRUE(r.contains(c.optimizer == "adamw" ? "optimizer.exp_avg_sq.layers.1.mlp.fc2_weight"
                                                : "optimizer.momentum.layers.1.mlp.fc2_weight"));
  if (c.recipe == "fp8_delayed") {
    // Six steps through a history of four: the count and the wrapped history are state, and they were restored.
    const std::vector<float> count = r.read("quantizer.layers.0.qkv.weight.input.history_count").to_f32_vector();
    EXPECT_EQ(count[0], 6.0f);
    EXPECT_TRUE(r.contains("quantizer.layers.1.mlp.fc2_weight.grad.amax_history"));
  }
  const nlohmann::json ma = nlohmann::json::parse(a.metrics_json()), mb = nlohmann::json::parse(b.metrics_json());
  EXPECT_EQ(mb["first_step"], 3);
  ASSERT_EQ(mb["lr"].size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(mb["lr"][i].get<double>(), ma["lr"][i + 3].get<double>()) << i;
  for (const auto& f : {ck, end_a, end_b, wa, wb}) fs::remove(f);
}

INSTANTIATE_TEST_SUITE_P(Cases, Resume,
                         ::testing::Values(ResumeCase{"none", "adamw", 1}, ResumeCase{"none", "sgd", 1},
                                           ResumeCase{"none", "adamw", 2}, ResumeCase{"none", "sgd", 2},
                                           ResumeCase{"fp8_delayed", "adamw", 1}, ResumeCase{"fp8_delayed", "adamw", 2},
                                           ResumeCase{"fp8_block", "sgd", 2}),
                         [](const auto& info) {
                           return info.param.recipe + "_" + info.param.optimizer + "_tp" +
                                  std::to_string(info.param.tp);
                         });

TEST(Checkpoint, WrittenAtTp2LoadsAtTp1WithTheSameGlobalState) {
  const Batches d;
  const std::string k2 = scratch_path("tp2.safetensors"), k1 = scratch_path("tp1.safetensors");
  teengine::Engine e2 = teengine::Engine::from_yaml_string(spec_yaml("fp8_delayed", 2, "adamw"));
  train_steps(e2, d, 1, 3);
  e2.save_checkpoint(k2);
  teengine::Engine e1 = teengine::Engine::from_yaml_string(spec_yaml("fp8_delayed", 1, "adamw"));
  e1.load_checkpoint(k2);
  e1.save_checkpoint(k1);
  expect_same_tensors(k1, k2);  // sharded, gathered, sharded back and gathered again: nothing moved
  EXPECT_TRUE(std::isfinite(train_steps(e1, d, 4, 4)[0]));
  fs::remove(k1);
  fs::remove(k2);
}

// eval_loss is the loss the training forward gives on the same state: train_step's loss on that batch, bit for
// bit (before its update), under every recipe kind that keeps state (delayed scaling) or none.
TEST(EvalLoss, IsTheForwardLossOfTheSameState) {
  for (const std::string recipe : {"none", "fp8_delayed", "fp8_block"})
    for (int tp : {1, 2}) {
      const Batches d;
      teengine::Engine e = teengine::Engine::from_yaml_string(spec_yaml(recipe, tp, "adamw"));
      train_steps(e, d, 1, 2);
      for (size_t b = 0; b < 2; ++b) {
        const teengine::StagedTensor x = e.stage(d.x[b]), y = e.stage(d.y[b]);
        const float eval = e.eval_loss(x, y);
        EXPECT_EQ(eval, e.train_step(x, y)) << recipe << " tp " << tp << " batch " << b;
      }
    }
}

// The eval loss against an inference engine on the trained weights: mean((forward(x) − y)²) over all elements,
// y in the model dtype.
TEST(EvalLoss, MatchesTheInferenceForwardOnTheTrainedWeights) {
  const Batches d;
  const std::string w = scratch_path("eval_w.safetensors");
  teengine::Engine t = teengine::Engine::from_yaml_string(spec_yaml("none", 2, "adamw"));
  train_steps(t, d, 1, 3);
  t.save_weights(w);
  std::string infer = spec_yaml("none", 2, "adamw");
  infer.replace(infer.find("mode: train"), 11, "mode: infer");
  teengine::Engine f = teengine::Engine::from_yaml_string(infer + "weights: " + w + "\n");
  for (size_t b = 0; b < 4; ++b) {
    const std::vector<float> out = f.forward(d.x[b]).to_floats();
    // The loss compares with the target as staged: in the model dtype.
    const std::vector<float> y = Tensor::from_f32(d.y[b].to_floats(), {kTokens, kHidden}, DType::bf16).to_f32_vector();
    ASSERT_EQ(out.size(), y.size());
    double sum = 0;
    for (size_t i = 0; i < out.size(); ++i) sum += (static_cast<double>(out[i]) - y[i]) * (out[i] - y[i]);
    const double mse = sum / static_cast<double>(out.size());
    const float eval = t.eval_loss(t.stage(d.x[b]), t.stage(d.y[b]));
    EXPECT_NEAR(eval, mse, 1e-5 * mse) << "batch " << b;
  }
  fs::remove(w);
}

TEST(Checkpoint, OfAnotherSpecOrNotACheckpointIsRefusedNamingTheFileAndField) {
  const Batches d;
  const std::string k = scratch_path("other.safetensors"), w = scratch_path("weights.safetensors");
  teengine::Engine e = teengine::Engine::from_yaml_string(spec_yaml("none", 1, "adamw"));
  train_steps(e, d, 1, 1);
  e.save_checkpoint(k);
  e.save_weights(w);
  auto refused = [&](const std::string& yaml, const std::string& path, const std::string& what) {
    teengine::Engine o = teengine::Engine::from_yaml_string(yaml);
    try {
      o.load_checkpoint(path);
      ADD_FAILURE() << "loaded " << path;
    } catch (const teengine::Error& err) {
      EXPECT_TRUE(err.is_input_error());
      EXPECT_NE(std::string(err.what()).find(path), std::string::npos) << err.what();
      EXPECT_NE(std::string(err.what()).find(what), std::string::npos) << err.what();
    }
    EXPECT_EQ(o.step(), 0);
  };
  refused(spec_yaml("fp8_delayed", 1, "adamw"), k, "precision.recipe is none in the checkpoint but fp8_delayed");
  refused(spec_yaml("none", 1, "sgd"), k, "run.optimizer.type is adamw in the checkpoint but sgd");
  std::string wider = spec_yaml("none", 1, "adamw");
  wider.replace(wider.find("ffn: 128"), 8, "ffn: 256");
  refused(wider, k, "model.block is");
  std::string deeper = spec_yaml("none", 1, "adamw");
  deeper.replace(deeper.find("layers: 2"), 9, "layers: 3");
  refused(deeper, k, "model.layers is 2 in the checkpoint but 3 in the spec");
  refused(spec_yaml("none", 1, "adamw"), w, "is not a teengine checkpoint");
  // Another learning rate only warns: the checkpoint loads.
  std::string faster = spec_yaml("none", 1, "adamw");
  faster.replace(faster.find("lr: 0.004"), 9, "lr: 0.008");
  teengine::Engine ok = teengine::Engine::from_yaml_string(faster);
  EXPECT_EQ(ok.load_checkpoint(k).at("run.optimizer.lr"), "0.004");
  EXPECT_EQ(ok.step(), 1);
  // An inference engine has no training state to restore.
  std::string infer = spec_yaml("none", 1, "adamw");
  infer.replace(infer.find("mode: train"), 11, "mode: infer");
  teengine::Engine inf = teengine::Engine::from_yaml_string(infer);
  try {
    inf.load_checkpoint(k);
    ADD_FAILURE() << "an inference engine loaded a checkpoint";
  } catch (const teengine::Error& err) {
    EXPECT_TRUE(err.is_input_error()) << err.what();
    EXPECT_NE(std::string(err.what()).find("run.mode: train"), std::string::npos) << err.what();
  }
  fs::remove(k);
  fs::remove(w);
}

}  // namespace
}  // namespace te
