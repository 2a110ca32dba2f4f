// Training runs: the learning-rate schedule's values, the dataset (files, directories, batch order, errors),
// checkpoints that resume bit-identically (tp 1 and 2, AdamW and SGD, shuffled batches and a cosine schedule,
// fp8 delayed scaling with its amax history), eval loss that leaves the model untouched, a tp-2 checkpoint loaded
// at tp 1, bad checkpoints and spec keys refused with the file and the field, and `teengine run` end to end.
#include <gtest/gtest.h>
#include <teengine/teengine.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "engine/error.h"
#include "models/checkpoint.h"
#include "cli_test.h"
#include "models/dataset.h"
#include "models/lr_schedule.h"
#include "models/safetensors.h"
#include "models/spec.h"

namespace te {
namespace {
namespace fs = std::filesystem;

constexpr int64_t kTokens = 32, kHidden = 64;

std::string spec_yaml(const std::string& recipe, int tp, const std::string& optimizer, int64_t steps = 6) {
  const std::string opt = optimizer == "sgd" ? "{type: sgd, lr: 0.05, momentum: 0.9, weight_decay: 0.01"
                                             : "{type: adamw, lr: 0.004, weight_decay: 0.01";
  return "name: trainrun\n"
         "model:\n  hidden: 64\n  layers: 2\n  dtype: bf16\n"
         "  block:\n"
         "    - [ {layernorm_linear: {name: qkv, out: 128}}, {linear: {name: proj, out: 64}} ]\n"
         "    - [ {layernorm_mlp: {name: mlp, ffn: 128, activation: gelu}} ]\n"
         "parallel: {tp: " + std::to_string(tp) + ", sequence_parallel: true, comm: local}\n"
         "precision: {recipe: " + recipe + (recipe == "fp8_delayed" ? ", amax_history_len: 4" : "") + "}\n"
         "run:\n  mode: train\n  device: cpu\n  tokens: 32\n  steps: " + std::to_string(steps) +
         "\n  seed: 11\n  optimizer: " + opt +
         ", schedule: {type: cosine, warmup_steps: 2, decay_steps: 4, min_lr: 0.0001}}\n";
}

Tensor randn(Shape shape, uint64_t seed) {
  Tensor t = Tensor::empty(std::move(shape), DType::f32);
  t.fill_normal(seed);
  return t;
}

teengine::HostTensor host(const Tensor& t) {
  teengine::HostTensor h;
  h.shape.assign(t.shape().begin(), t.shape().end());
  h.bytes.resize(static_cast<size_t>(t.nbytes()));
  std::memcpy(h.bytes.data(), t.data_ptr(), h.bytes.size());
  return h;
}

// Four batches; step s trains on the batch BatchOrder gives it (shuffled, seed 11), as `teengine run` does.
struct Data {
  std::vector<teengine::HostTensor> x, y;
  Data() {
    for (uint64_t b = 0; b < 4; ++b) {
      Tensor in = randn({kTokens, kHidden}, 100 + b);
      std::vector<float> v = in.to_f32_vector();
      for (float& f : v) f = 0.5f * f + 0.1f;
      x.push_back(host(in));
      y.push_back(host(Tensor::from_f32(v, in.shape(), DType::f32)));
    }
  }
};

std::vector<float> train(teengine::Engine& e, const Data& d, int64_t from, int64_t to, bool eval_between = false) {
  BatchOrder order(4, true, 11);
  std::vector<float> losses;
  for (int64_t s = from; s <= to; ++s) {
    const int64_t b = order.at(s).batch;
    losses.push_back(e.train_step(d.x[b], d.y[b]));
    if (eval_between) {  // eval must change nothing: the losses after it are compared with a run without it
      const teengine::StagedTensor ex = e.stage(d.x[(b + 1) % 4]), ey = e.stage(d.y[(b + 1) % 4]);
      EXPECT_TRUE(std::isfinite(e.eval_loss(ex, ey)));
      (void)e.eval_loss(ex, ey);
    }
  }
  return losses;
}

std::string temp_path(const std::string& name) {
  return (fs::temp_directory_path() / ("te_trainrun_" + std::to_string(::getpid()) + "_" + name)).string();
}

// Every tensor of two safetensors files, byte for byte (metadata aside).
void expect_same_tensors(const std::string& a, const std::string& b) {
  SafetensorsReader ra = SafetensorsReader::open(a), rb = SafetensorsReader::open(b);
  ASSERT_EQ(ra.entries().size(), rb.entries().size());
  for (const SafetensorsEntry& e : ra.entries()) {
    ASSERT_TRUE(rb.contains(e.name)) << e.name;
    Tensor ta = ra.read(e.name), tb = rb.read(e.name);
    ASSERT_EQ(ta.shape(), tb.shape()) << e.name;
    EXPECT_EQ(0, std::memcmp(ta.data_ptr(), tb.data_ptr(), static_cast<size_t>(ta.nbytes()))) << e.name;
  }
}

std::string slurp_file(const std::string& p) { return slurp(p); }

// ---- learning-rate schedule ----------------------------------------------------------------------------------------

TEST(LrSchedule, WarmupThenCosineToTheFloor) {
  OptimizerSpec o;
  o.lr = 1.0;
  o.schedule = {LrScheduleType::cosine, 4, 10, 0.1};
  EXPECT_DOUBLE_EQ(learning_rate(o, 100, 1), 0.25);
  EXPECT_DOUBLE_EQ(learning_rate(o, 100, 4), 1.0);
  EXPECT_DOUBLE_EQ(learning_rate(o, 100, 9), 0.1 + 0.9 * 0.5);  // half-way through the decay: the mid-point
  EXPECT_NEAR(learning_rate(o, 100, 14), 0.1, 1e-15);
  EXPECT_DOUBLE_EQ(learning_rate(o, 100, 50), 0.1);  // after the decay: the floor
  EXPECT_LT(learning_rate(o, 100, 10), learning_rate(o, 100, 6));
  o.schedule.decay_steps = 0;  // the decay runs to run.steps
  EXPECT_DOUBLE_EQ(learning_rate(o, 24, 14), 0.55);
  o.schedule = {LrScheduleType::constant, 0, 0, 0.0};
  EXPECT_DOUBLE_EQ(learning_rate(o, 10, 1), 1.0);
  o.schedule.warmup_steps = 2;
  EXPECT_DOUBLE_EQ(learning_rate(o, 10, 1), 0.5);
  EXPECT_DOUBLE_EQ(learning_rate(o, 10, 7), 1.0);
}

TEST(LrSchedule, SpecKeysAndTheirErrors) {
  const std::string base = spec_yaml("none", 1, "adamw");
  ModelSpec s = parse_spec(base, "t.yaml");
  EXPECT_EQ(s.run.optimizer.schedule.type, LrScheduleType::cosine);
  EXPECT_EQ(s.run.optimizer.schedule.warmup_steps, 2);
  EXPECT_EQ(s.run.optimizer.schedule.decay_steps, 4);
  EXPECT_DOUBLE_EQ(s.run.optimizer.schedule.min_lr, 1e-4);
  auto fails = [&](const std::vector<std::string>& sets, const std::string& field) {
    try {
      parse_spec(base, "t.yaml", sets);
      ADD_FAILURE() << "accepted " << sets[0];
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  };
  fails({"run.optimizer.schedule.min_lr=0.5"}, "run.optimizer.schedule.min_lr");
  fails({"run.optimizer.schedule.type=constant"}, "run.optimizer.schedule.decay_steps");
  fails({"run.optimizer.schedule.kind=cosine"}, "run.optimizer.schedule");
  fails({"run.eval_every=5"}, "run.eval_data");
  fails({"run.checkpoint_every=-1"}, "run.checkpoint_every");
  ModelSpec d = parse_spec(base, "/some/dir/t.yaml", {"run.shuffle=false"});
  EXPECT_FALSE(d.run.shuffle);
  ModelSpec e = parse_spec(base + "  data: [shards, /abs/x.safetensors]\n  eval_data: ev.safetensors\n"
                                  "  eval_every: 3\n  checkpoint_every: 2\n",
                           "/some/dir/t.yaml");
  EXPECT_EQ(e.run.data_paths, (std::vector<std::string>{"/some/dir/shards", "/abs/x.safetensors"}));
  EXPECT_EQ(e.run.eval_data_paths, std::vector<std::string>{"/some/dir/ev.safetensors"});
  EXPECT_EQ(e.run.eval_every, 3);
  EXPECT_EQ(e.run.checkpoint_every, 2);
}

// ---- dataset --------------------------------------------------------------------------------------------------------

TEST(Dataset, ShuffleIsASeededPermutationPerEpoch) {
  uint64_t st = 0;
  EXPECT_EQ(splitmix64(st), 0xE220A8397B1DCDAFull);  // the published first output of splitmix64 from state 0
  const std::vector<int64_t> e0 = epoch_order(10, true, 5, 0), e1 = epoch_order(10, true, 5, 1);
  EXPECT_EQ(e0, epoch_order(10, true, 5, 0));
  EXPECT_NE(e0, e1);
  EXPECT_NE(e0, epoch_order(10, true, 6, 0));
  std::vector<int64_t> sorted = e0;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, epoch_order(10, false, 5, 0));  // a permutation of 0 … 9, the unshuffled order
  BatchOrder order(10, true, 5);
  EXPECT_EQ(order.at(1).batch, e0[0]);
  EXPECT_EQ(order.at(13).epoch, 1);
  EXPECT_EQ(order.at(13).position, 2);
  EXPECT_EQ(order.at(13).batch, e1[2]);
  EXPECT_EQ(order.at(10).batch, e0[9]);  // back to epoch 0 (a resumed run may ask in any order)
}

TEST(Dataset, ReadsBatchesFromFilesAndDirectoriesAndNamesBadFiles) {
  const fs::path dir = temp_path("data");
  fs::remove_all(dir);
  fs::create_directories(dir / "shards");
  Tensor a = randn({3, kTokens, kHidden}, 1), b = randn({kTokens, kHidden}, 2);
  write_safetensors((dir / "shards" / "0.safetensors").string(),
                    {{"input", a}, {"target", Tensor::from_f32(a.to_f32_vector(), a.shape(), DType::bf16)}});
  write_safetensors((dir / "shards" / "1.safetensors").string(), {{"input", b}, {"target", b}});
  Dataset d = Dataset::open({(dir / "shards").string()}, kTokens, kHidden, "run.data");
  EXPECT_EQ(d.batches(), 4);
  EXPECT_EQ(d.files(), 2);
  const Dataset::Batch b1 = d.read(1), b3 = d.read(3);
  EXPECT_EQ(b1.input.shape(), (Shape{kTokens, kHidden}));
  const std::vector<float> av = a.to_f32_vector(), i1 = b1.input.to_f32_vector();
  EXPECT_TRUE(std::equal(i1.begin(), i1.end(), av.begin() + kTokens * kHidden));
  EXPECT_EQ(b3.input.to_f32_vector(), b.to_f32_vector());
  const std::vector<float> t1 = b1.target.to_f32_vector();
  EXPECT_EQ(t1[5], Tensor::from_f32({av[kTokens * kHidden + 5]}, {1}, DType::bf16).to_f32_vector()[0]);

  auto fails = [&](const std::vector<std::string>& paths, const std::string& what) {
    try {
      Dataset::open(paths, kTokens, kHidden, "run.data");
      ADD_FAILURE() << "opened " << paths[0];
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("run.data"), std::string::npos) << e.what();
    }
  };
  fails({(dir / "missing.safetensors").string()}, "missing.safetensors does not exist");
  fs::create_directories(dir / "empty");
  fails({(dir / "empty").string()}, "holds no .safetensors");
  write_safetensors((dir / "short.safetensors").string(), {{"input", randn({2, 16, kHidden}, 3)}, {"target", randn({2, 16, kHidden}, 3)}});
  fails({(dir / "short.safetensors").string()}, "short.safetensors: `input` has shape [2, 16, 64]");
  write_safetensors((dir / "mis.safetensors").string(), {{"input", randn({2, kTokens, kHidden}, 3)}, {"target", randn({3, kTokens, kHidden}, 3)}});
  fails({(dir / "mis.safetensors").string()}, "mis.safetensors: `target`");
  write_safetensors((dir / "notarget.safetensors").string(), {{"input", b}});
  try {
    Dataset::open({(dir / "notarget.safetensors").string()}, kTokens, kHidden, "run.data");
    ADD_FAILURE();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("target"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(Dataset::open({(dir / "notarget.safetensors").string()}, kTokens, kHidden, "--input", true)
                   .read(0).target.defined());
  fs::remove_all(dir);
}

// ---- checkpoints and resume ----------------------------------------------------------------------------------------

struct ResumeCase {
  std::string recipe, optimizer;
  int tp;
};

class Resume : public ::testing::TestWithParam<ResumeCase> {};

// 6 steps straight == 3 steps, checkpoint, a new engine, resume, 3 steps: the same losses, and the final
// checkpoints (weights, optimizer state, delayed-scaling state) byte for byte; --save-weights files too.
TEST_P(Resume, ContinuesBitIdentically) {
  const ResumeCase c = GetParam();
  const std::string yaml = spec_yaml(c.recipe, c.tp, c.optimizer);
  const Data d;
  const std::string ck = temp_path("k.safetensors"), end_a = temp_path("a.safetensors"),
                    end_b = temp_path("b.safetensors"), wa = temp_path("wa.safetensors"),
                    wb = temp_path("wb.safetensors");
  teengine::Engine a = teengine::Engine::from_yaml_string(yaml);
  const std::vector<float> straight = train(a, d, 1, 6);
  a.save_checkpoint(end_a);
  a.save_weights(wa);
  for (float l : straight) EXPECT_TRUE(std::isfinite(l));
  EXPECT_LT(straight.back(), straight.front());  // it learns

  {
    teengine::Engine first = teengine::Engine::from_yaml_string(yaml);
    const std::vector<float> head = train(first, d, 1, 3, /*eval_between=*/true);
    EXPECT_EQ(head, std::vector<float>(straight.begin(), straight.begin() + 3));
    first.save_checkpoint(ck, {{"note", "kept"}});
  }
  teengine::Engine b = teengine::Engine::from_yaml_string(yaml);
  const auto md = b.load_checkpoint(ck);
  EXPECT_EQ(md.at("step"), "3");
  EXPECT_EQ(md.at("note"), "kept");
  EXPECT_EQ(b.step(), 3);
  const std::vector<float> tail = train(b, d, 4, 6);
  EXPECT_EQ(tail, std::vector<float>(straight.begin() + 3, straight.end()));
  EXPECT_DOUBLE_EQ(b.last_lr(), a.last_lr());
  b.save_checkpoint(end_b);
  b.save_weights(wb);
  expect_same_tensors(end_a, end_b);
  EXPECT_EQ(slurp_file(wa), slurp_file(wb));
  SafetensorsReader r = SafetensorsReader::open(end_b);
  EXPECT_TRUE(r.contains(c.optimizer == "adamw" ? "optimizer.exp_avg_sq.layers.1.mlp.fc2_weight"
                                                : "optimizer.momentum.layers.1.mlp.fc2_weight"));
  if (c.recipe == "fp8_delayed") {
    // Six steps through a history of four: the count and the wrapped history are state, and they were restored.
    const std::vector<float> count = r.read("quantizer.layers.0.qkv.weight.input.history_count").to_f32_vector();
    EXPECT_EQ(count[0], 6.0f);
    EXPECT_TRUE(r.contains("quantizer.layers.1.mlp.fc2_weight.grad.amax_history"));
  }
  const nlohmann::json m = nlohmann::json::parse(b.metrics_json());
  EXPECT_EQ(m["first_step"], 3);
  EXPECT_EQ(m["lr"].size(), 3u);
  for (const auto& f : {ck, end_a, end_b, wa, wb}) fs::remove(f);
}

INSTANTIATE_TEST_SUITE_P(Cases, Resume,
                         ::testing::Values(ResumeCase{"none", "adamw", 1}, ResumeCase{"none", "sgd", 1},
                                           ResumeCase{"none", "adamw", 2}, ResumeCase{"none", "sgd", 2},
                                           ResumeCase{"fp8_delayed", "adamw", 1},
                                           ResumeCase{"fp8_delayed", "adamw", 2},
                                           ResumeCase{"fp8_block", "sgd", 2}),
                         [](const auto& info) {
                           return info.param.recipe + "_" + info.param.optimizer + "_tp" +
                                  std::to_string(info.param.tp);
                         });

TEST(Checkpoint, WrittenAtTp2LoadsAtTp1WithTheSameGlobalState) {
  const Data d;
  const std::string k2 = temp_path("tp2.safetensors"), k1 = temp_path("tp1.safetensors");
  teengine::Engine e2 = teengine::Engine::from_yaml_string(spec_yaml("fp8_delayed", 2, "adamw"));
  train(e2, d, 1, 3);
  e2.save_checkpoint(k2);
  teengine::Engine e1 = teengine::Engine::from_yaml_string(spec_yaml("fp8_delayed", 1, "adamw"));
  e1.load_checkpoint(k2);
  e1.save_checkpoint(k1);
  expect_same_tensors(k1, k2);  // sharded, gathered, sharded back and gathered again: nothing moved
  const float loss = train(e1, d, 4, 4)[0];
  EXPECT_TRUE(std::isfinite(loss));
  fs::remove(k1);
  fs::remove(k2);
}

TEST(Checkpoint, OfAnotherSpecOrNotACheckpointIsRefusedNamingTheFile) {
  const Data d;
  const std::string k = temp_path("other.safetensors"), w = temp_path("weights.safetensors");
  teengine::Engine e = teengine::Engine::from_yaml_string(spec_yaml("none", 1, "adamw"));
  train(e, d, 1, 1);
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
  refused(spec_yaml("fp8_delayed", 1, "adamw"), k, "precision.recipe none");
  refused(spec_yaml("none", 1, "sgd"), k, "run.optimizer.type adamw");
  std::string wider = spec_yaml("none", 1, "adamw");
  wider.replace(wider.find("ffn: 128"), 8, "ffn: 256");
  refused(wider, k, "model or precision section");
  refused(spec_yaml("none", 1, "adamw"), w, "is not a teengine checkpoint");
  fs::remove(k);
  fs::remove(w);
}

// ---- teengine run ----------------------------------------------------------------------------------------------------

class TrainRunCli : public CliTest {
 protected:
  // Two shards (3 + 2 batches) and an eval file; a spec training on them with shuffling, the schedule, eval.
  std::string setup() {
    fs::create_directories(dir_ / "data");
    Tensor a = randn({3, kTokens, kHidden}, 1), b = randn({2, kTokens, kHidden}, 2), e = randn({2, kTokens, kHidden}, 3);
    auto half = [](const Tensor& t) {
      std::vector<float> v = t.to_f32_vector();
      for (float& f : v) f *= 0.5f;
      return Tensor::from_f32(v, t.shape(), DType::f32);
    };
    write_safetensors((dir_ / "data" / "a.safetensors").string(), {{"input", a}, {"target", half(a)}});
    write_safetensors((dir_ / "data" / "b.safetensors").string(), {{"input", b}, {"target", half(b)}});
    write_safetensors((dir_ / "eval.safetensors").string(), {{"input", e}, {"target", half(e)}});
    const std::string spec = (dir_ / "m.yaml").string();
    std::ofstream(spec) << spec_yaml("fp8_delayed", 2, "adamw", 8)
                        << "  data: data\n  eval_data: eval.safetensors\n  eval_every: 4\n  checkpoint_every: 3\n";
    return spec;
  }
  nlohmann::json json(const std::string& name) { return nlohmann::json::parse(slurp(dir_ / name)); }
};

TEST_F(TrainRunCli, ResumedRunMatchesTheUninterruptedOne) {
  const std::string spec = setup(), d = dir_.string() + "/";
  Result a = run("run " + spec + " --json " + d + "a.json --save-weights " + d + "a.st");
  ASSERT_EQ(a.code, 0) << a.out << a.err;
  EXPECT_NE(a.out.find("step 8/8 loss"), std::string::npos) << a.out;
  EXPECT_NE(a.out.find("eval step 4/8: loss"), std::string::npos) << a.out;
  EXPECT_NE(a.out.find("trained steps 1-8"), std::string::npos) << a.out;
  Result b = run("run " + spec + " --set run.steps=5 --checkpoint-dir " + d + "ck");
  ASSERT_EQ(b.code, 0) << b.out << b.err;
  EXPECT_TRUE(fs::exists(dir_ / "ck" / "step-00000003.safetensors"));
  EXPECT_TRUE(fs::exists(dir_ / "ck" / "step-00000005.safetensors"));  // after the last step
  Result c = run("run " + spec + " --resume " + d + "ck --json " + d + "c.json --save-weights " + d + "c.st");
  ASSERT_EQ(c.code, 0) << c.out << c.err;
  EXPECT_NE(c.out.find("resumed from " + d + "ck/step-00000005.safetensors at step 5"), std::string::npos) << c.out;
  const nlohmann::json ja = json("a.json"), jc = json("c.json");
  const auto la = ja["loss"].get<std::vector<float>>(), lc = jc["loss"].get<std::vector<float>>();
  ASSERT_EQ(la.size(), 8u);
  EXPECT_EQ(lc, std::vector<float>(la.begin() + 5, la.end()));
  const auto ra = ja["lr"].get<std::vector<double>>(), rc = jc["lr"].get<std::vector<double>>();
  EXPECT_EQ(rc, std::vector<double>(ra.begin() + 5, ra.end()));
  EXPECT_DOUBLE_EQ(ra[0], 0.002);  // warm-up: step 1 of 2
  EXPECT_DOUBLE_EQ(ra[7], 0.0001);  // after warm-up 2 + decay 4: the floor
  EXPECT_EQ(ja["eval"].size(), 2u);
  EXPECT_EQ(ja["eval_loss"].get<float>(), jc["eval_loss"].get<float>());
  EXPECT_EQ(jc["first_step"], 5);
  EXPECT_EQ(slurp(dir_ / "a.st"), slurp(dir_ / "c.st"));
}

TEST_F(TrainRunCli, BadDataAndCheckpointsExit2NamingTheFile) {
  const std::string spec = setup(), d = dir_.string() + "/";
  Result r = run("run " + spec + " --set run.data=" + d + "nope");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("run.data: " + d + "nope does not exist"), std::string::npos) << r.err;
  write_safetensors((dir_ / "data" / "c.safetensors").string(),
                    {{"input", randn({1, 16, kHidden}, 4)}, {"target", randn({1, 16, kHidden}, 4)}});
  r = run("run " + spec);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("c.safetensors: `input` has shape [1, 16, 64]"), std::string::npos) << r.err;
  fs::remove(dir_ / "data" / "c.safetensors");
  ASSERT_EQ(run("run " + spec + " --set run.steps=1 --checkpoint-dir " + d + "ck").code, 0);
  r = run("run " + spec + " --set model.layers=3 --resume " + d + "ck");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("step-00000001.safetensors: checkpoint of another spec"), std::string::npos) << r.err;
  r = run("run " + spec + " --resume " + d + "data");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("holds no step-N.safetensors"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace te
