// `teengine run` training on a dataset: a run stopped at a checkpoint and resumed gives the uninterrupted run's
// losses, learning rates, eval loss and weights byte for byte; the reported eval loss is the forward loss on the
// eval set; bad data, bad checkpoints, --resume without one and bad checkpoint paths exit 2 before any step, naming
// the file or field and the fix; checkpoints leave no temporary file behind.
#include <gtest/gtest.h>
#include <teengine/teengine.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_test.h"
#include "models/safetensors.h"
#include "training_util.h"

namespace te {
namespace {
namespace fs = std::filesystem;
using namespace training_test;

class TrainCli : public CliTest {
 protected:
  // Two shards (3 + 2 batches) and an eval file of 2; a spec training on them with shuffling, the cosine schedule,
  // an eval every 4 steps and a checkpoint every 3. Returns the spec's path.
  std::string setup(const std::string& recipe = "fp8_delayed", int tp = 2) {
    fs::create_directories(dir_ / "data");
    const Tensor a = seeded_normal({3, kTokens, kHidden}, 1), b = seeded_normal({2, kTokens, kHidden}, 2);
    eval_ = seeded_normal({2, kTokens, kHidden}, 3);
    write_safetensors(at("data/a.safetensors"), {{"input", a}, {"target", halved(a)}});
    write_safetensors(at("data/b.safetensors"), {{"input", b}, {"target", halved(b)}});
    write_safetensors(at("eval.safetensors"), {{"input", eval_}, {"target", halved(eval_)}});
    const std::string spec = at("m.yaml");
    std::ofstream(spec) << spec_yaml(recipe, tp, "adamw", 8)
                        << "  data: data\n  eval_data: eval.safetensors\n  eval_every: 4\n  checkpoint_every: 3\n";
    return spec;
  }
  std::string at(const std::string& name) const { return (dir_ / name).string(); }
  nlohmann::json json(const std::string& name) const { return nlohmann::json::parse(slurp(dir_ / name)); }
  // An input error before training: exit 2, the message holds `what` and a hint, and no step ran.
  void expect_refused(const Result& r, const std::string& what) const {
    EXPECT_EQ(r.code, 2) << r.out << r.err;
    EXPECT_NE(r.err.find(what), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("hint:"), std::string::npos) << r.err;
    EXPECT_EQ(r.out.find("step 1/"), std::string::npos) << r.out;
  }
  Tensor eval_;
};

TEST_F(TrainCli, ResumedRunMatchesTheUninterruptedOne) {
  const std::string spec = setup(), d = dir_.string() + "/";
  Result a = run("run " + spec + " --json " + d + "a.json --save-weights " + d + "a.st");
  ASSERT_EQ(a.code, 0) << a.out << a.err;
  EXPECT_NE(a.out.find("step 8/8 loss"), std::string::npos) << a.out;
  EXPECT_NE(a.out.find("tokens/s, ETA"), std::string::npos) << a.out;
  EXPECT_NE(a.out.find("eval step 4/8: loss"), std::string::npos) << a.out;
  EXPECT_NE(a.out.find("trained steps 1-8"), std::string::npos) << a.out;
  Result b = run("run " + spec + " --set run.steps=5 --checkpoint-dir " + d + "ck");
  ASSERT_EQ(b.code, 0) << b.out << b.err;
  EXPECT_TRUE(fs::exists(dir_ / "ck" / "step-00000003.safetensors"));
  EXPECT_TRUE(fs::exists(dir_ / "ck" / "step-00000005.safetensors"));  // after the last step
  for (const auto& e : fs::directory_iterator(dir_ / "ck"))            // no temporary file left
    EXPECT_EQ(e.path().filename().string().rfind("step-", 0), 0u) << e.path();
  Result c = run("run " + spec + " --resume " + d + "ck --json " + d + "c.json --save-weights " + d + "c.st");
  ASSERT_EQ(c.code, 0) << c.out << c.err;
  EXPECT_NE(c.out.find("resumed from " + d + "ck/step-00000005.safetensors at step 5"), std::string::npos) << c.out;
  EXPECT_NE(c.out.find("trained steps 6-8"), std::string::npos) << c.out;
  const nlohmann::json ja = json("a.json"), jc = json("c.json");
  const auto la = ja["loss"].get<std::vector<float>>(), lc = jc["loss"].get<std::vector<float>>();
  ASSERT_EQ(la.size(), 8u);
  EXPECT_EQ(lc, std::vector<float>(la.begin() + 5, la.end()));
  const auto ra = ja["lr"].get<std::vector<double>>(), rc = jc["lr"].get<std::vector<double>>();
  EXPECT_EQ(rc, std::vector<double>(ra.begin() + 5, ra.end()));
  EXPECT_DOUBLE_EQ(ra[0], 0.002);   // warm-up: step 1 of 2 at lr 0.004
  EXPECT_DOUBLE_EQ(ra[1], 0.004);   // the peak
  EXPECT_DOUBLE_EQ(ra[7], 0.0001);  // after warm-up 2 + decay 4: the floor
  EXPECT_EQ(ja["eval"].size(), 2u);
  EXPECT_EQ(ja["eval_loss"].get<float>(), jc["eval_loss"].get<float>());
  EXPECT_EQ(jc["first_step"], 5);
  EXPECT_EQ(slurp(dir_ / "a.st"), slurp(dir_ / "c.st"));
  // Resumed at the end: nothing to train, and the run says so.
  Result e = run("run " + spec + " --set run.steps=5 --resume " + d + "ck");
  ASSERT_EQ(e.code, 0) << e.out << e.err;
  EXPECT_NE(e.out.find("nothing to train: already at step 5"), std::string::npos) << e.out;
}

// The eval loss `teengine run` reports after the last step is the mean, over the eval set, of the MSE of the
// trained model's forward: an inference engine on the saved weights gives it again.
TEST_F(TrainCli, EvalLossIsTheForwardLossOnTheEvalSet) {
  const std::string spec = setup("none", 2), d = dir_.string() + "/";
  Result r = run("run " + spec + " --json " + d + "m.json --save-weights " + d + "w.st");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const float reported = json("m.json")["eval_loss"].get<float>();
  std::string infer = spec_yaml("none", 2, "adamw", 8);
  infer.replace(infer.find("mode: train"), 11, "mode: infer");
  teengine::Engine f = teengine::Engine::from_yaml_string(infer + "weights: " + d + "w.st\n");
  double mean = 0;
  for (int64_t b = 0; b < 2; ++b) {
    const Tensor x = eval_.narrow(0, b, 1).contiguous().reshape({kTokens, kHidden});
    const std::vector<float> out = f.forward(to_host_tensor(x)).to_floats();
    const std::vector<float> y = Tensor::from_f32(halved(x).to_f32_vector(), x.shape(), DType::bf16).to_f32_vector();
    double sum = 0;
    for (size_t i = 0; i < out.size(); ++i) sum += (static_cast<double>(out[i]) - y[i]) * (out[i] - y[i]);
    mean += sum / static_cast<double>(out.size()) / 2;
  }
  EXPECT_NEAR(reported, mean, 1e-5 * mean);
}

TEST_F(TrainCli, BadDataExits2NamingTheFileBeforeAnyStep) {
  const std::string spec = setup(), d = dir_.string() + "/";
  expect_refused(run("run " + spec + " --set run.data=" + d + "nope"), "run.data: " + d + "nope does not exist");
  expect_refused(run("run " + spec + " --set run.eval_data=" + d + "nope.safetensors"),
                 "run.eval_data: " + d + "nope.safetensors does not exist");
  write_safetensors(at("data/c.safetensors"),
                    {{"input", seeded_normal({1, 16, kHidden}, 4)}, {"target", seeded_normal({1, 16, kHidden}, 4)}});
  expect_refused(run("run " + spec), "c.safetensors: `input` has shape [1, 16, 64]");
  Tensor ints = Tensor::empty({kTokens, kHidden}, DType::i32);
  std::memset(ints.data_ptr(), 0, static_cast<size_t>(ints.nbytes()));
  write_safetensors(at("data/c.safetensors"), {{"input", ints}, {"target", ints}});
  expect_refused(run("run " + spec), "c.safetensors: `input` has dtype i32");
  std::ofstream(at("data/c.safetensors"), std::ios::trunc) << "not a safetensors file at all";
  expect_refused(run("run " + spec), "run.data: " + d + "data/c.safetensors");
  fs::remove(dir_ / "data" / "c.safetensors");
  write_safetensors(at("notarget.safetensors"), {{"input", seeded_normal({kTokens, kHidden}, 5)}});
  expect_refused(run("run " + spec + " --set run.data=" + d + "notarget.safetensors"), "target");
  expect_refused(run("run " + spec + " --input " + d + "notarget.safetensors"), "both --input");
}

TEST_F(TrainCli, BadCheckpointsAndResumeWithoutOneExit2) {
  const std::string spec = setup(), d = dir_.string() + "/";
  ASSERT_EQ(run("run " + spec + " --set run.steps=1 --checkpoint-dir " + d + "ck").code, 0);
  const std::string ck = d + "ck/step-00000001.safetensors";
  expect_refused(run("run " + spec + " --set model.layers=3 --resume " + d + "ck"),
                 ck + ": a checkpoint of another spec: model.layers is 2 in the checkpoint but 3 in the spec");
  expect_refused(run("run " + spec + " --set 'precision={recipe: none}' --resume " + ck),
                 "precision.recipe is fp8_delayed in the checkpoint but none in the spec");
  expect_refused(run("run " + spec + " --resume " + d + "data"), "holds no step-N.safetensors checkpoint");
  expect_refused(run("run " + spec + " --resume " + d + "missing"), "--resume " + d + "missing: does not exist");
  expect_refused(run("run " + spec + " --resume " + d + "eval.safetensors"), "is not a teengine checkpoint");
  expect_refused(run("run " + spec + " --set run.mode=infer --resume " + ck), "apply to training");
  // A checkpoint whose tensors were cut short: the file is named, no step runs.
  const std::string bytes = slurp(ck);
  std::ofstream(d + "short.safetensors", std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  expect_refused(run("run " + spec + " --resume " + d + "short.safetensors"), d + "short.safetensors");
}

TEST_F(TrainCli, CheckpointPathsAreCheckedBeforeTheRun) {
  const std::string spec = setup(), d = dir_.string() + "/";
  std::ofstream(at("file")) << "x";
  expect_refused(run("run " + spec + " --checkpoint-dir " + d + "file"), "--checkpoint-dir " + d + "file: is a file");
  fs::create_directories(dir_ / "ck" / "step-00000006.safetensors");  // a directory where a checkpoint goes
  expect_refused(run("run " + spec + " --checkpoint-dir " + d + "ck"),
                 "--checkpoint-dir " + d + "ck/step-00000006.safetensors: is a directory");
  expect_refused(run("run " + spec + " --checkpoint-dir " + d + "data"), "is also a data directory");
  fs::create_directories(dir_ / "ck2");
  expect_refused(
      run("run " + spec + " --checkpoint-dir " + d + "ck2 --save-weights " + d + "ck2/step-00000008.safetensors"),
      "--checkpoint-dir writes the same file");
  EXPECT_TRUE(fs::is_directory(dir_ / "ck" / "step-00000006.safetensors"));  // left as it was
}

}  // namespace
}  // namespace te
