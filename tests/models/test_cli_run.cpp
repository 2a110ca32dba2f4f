// `teengine run` end to end through the built binary: the JSON contract, --output/--save-weights round trips,
// a non-finite loss stopping training with its step number, and bad input exiting 2.
#include <cmath>
#include <cstring>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "cli_test.h"
#include "models/safetensors.h"

namespace te {
namespace {

class RunCli : public CliTest {
 protected:
  std::string fast() const { return " --set run.tokens=64 --set run.device=cpu "; }
};

TEST_F(RunCli, InferenceWritesOutputAndTheJsonContract) {
  const std::string out = (dir_ / "out.safetensors").string(), js = (dir_ / "m.json").string();
  Result r = run("run " + model() + fast() + "--output " + out + " --json " + js);
  ASSERT_EQ(r.code, 0) << r.err;
  SafetensorsReader rd = SafetensorsReader::open(out);
  EXPECT_EQ(rd.entry("output").shape, (Shape{64, 256}));
  EXPECT_EQ(rd.entry("output").dtype, DType::bf16);
  auto j = nlohmann::json::parse(slurp(js));
  for (const char* k : {"model", "mode", "device", "world_size", "recipe", "tokens", "steps", "step_ms",
                        "tokens_per_s", "peak_bytes", "loss", "comm", "device_ms", "peak_rss_bytes"})
    EXPECT_TRUE(j.contains(k)) << k;
  // Wall time (the whole call) and device time (the ranks' work) per step, both positive, device within wall.
  ASSERT_EQ(j["step_ms"].size(), 1u);
  ASSERT_EQ(j["device_ms"].size(), 1u);
  EXPECT_GT(j["device_ms"][0].get<double>(), 0.0);
  EXPECT_LE(j["device_ms"][0].get<double>(), j["step_ms"][0].get<double>());
  EXPECT_NE(r.out.find("ms/step wall"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ms/step device"), std::string::npos) << r.out;
  EXPECT_EQ(j["world_size"], 2);
  EXPECT_EQ(j["recipe"], "fp8_block");
  EXPECT_GT(j["comm"]["gather"]["quantized"]["calls"].get<int>(), 0);
  EXPECT_TRUE(j["comm"]["gather"]["fallback"].contains("bytes"));
  EXPECT_TRUE(j["comm"]["reduce_scatter"].contains("calls"));
  EXPECT_TRUE(j["comm"]["all_reduce"].contains("bytes"));
}

TEST_F(RunCli, SavedWeightsReproduceTheOutputBitExactly) {
  const std::string w = (dir_ / "w.safetensors").string(), a = (dir_ / "a.safetensors").string(),
                    b = (dir_ / "b.safetensors").string();
  Result t = run("run " + model() + fast() + "--set run.mode=train --set run.steps=3 --save-weights " + w +
                 " --output " + a);
  ASSERT_EQ(t.code, 0) << t.err;
  Result i = run("run " + model() + fast() + "--set weights=" + w + " --output " + b);
  ASSERT_EQ(i.code, 0) << i.err;
  Tensor ta = SafetensorsReader::open(a).read("output"), tb = SafetensorsReader::open(b).read("output");
  ASSERT_EQ(ta.nbytes(), tb.nbytes());
  EXPECT_EQ(0, std::memcmp(ta.data_ptr(), tb.data_ptr(), ta.nbytes()));
}

TEST_F(RunCli, NonFiniteLossStopsWithTheStepNumberAndSavesTheLastGoodWeights) {
  const std::string w = (dir_ / "w.safetensors").string();
  Result r = run("run " + model() + fast() + "--set run.mode=train --set run.steps=6 --set precision.recipe=none " +
                 "--set run.optimizer.lr=1.0e30 --save-weights " + w);
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("loss is not finite at step"), std::string::npos) << r.err;
  ASSERT_TRUE(std::filesystem::exists(w));
  SafetensorsReader rd = SafetensorsReader::open(w);
  for (const auto& e : rd.entries())
    for (float v : rd.read(e.name).to_f32_vector()) ASSERT_TRUE(std::isfinite(v)) << e.name;
}

TEST_F(RunCli, BadInputExitsTwo) {
  std::ofstream(dir_ / "bad.yaml") << "model: {hidden: 256, layerz: 2}\n";
  Result r = run("run " + (dir_ / "bad.yaml").string());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("bad.yaml"), std::string::npos) << r.err;
  EXPECT_EQ(run("run " + model() + " --set parallel.tp=3").code, 2);
  EXPECT_EQ(run("run " + model() + " --bogus").code, 2);
  EXPECT_EQ(run("run /nonexistent.yaml").code, 2);
  const std::string no_out = (dir_ / "never.safetensors").string();
  EXPECT_EQ(run("run " + model() + fast() + "--input /nonexistent.safetensors --output " + no_out).code, 2);
  EXPECT_FALSE(std::filesystem::exists(no_out)) << "no partial output file";
}

// A spec that cannot fit is refused from its fields before anything is allocated, the seeded input included (it
// used to be allocated first: 256 GiB for these sizes, a host out-of-memory error with exit 1).
TEST_F(RunCli, ASpecThatCannotFitExitsTwoBeforeTheInputIsAllocated) {
  const std::string huge =
      " --set run.device=cpu --set model.hidden=1048576 --set run.tokens=65536 "
      "--set model.block[0][0].layernorm_linear.out=1048576 "
      "--set model.block[0][1].linear.out=1048576 --set model.block[1][0].layernorm_mlp.ffn=1048576";
  for (const std::string& sets :
       {huge, fast() + "--set model.layers=100000 --set model.block[1][0].layernorm_mlp.ffn=1048576"}) {
    Result r = run("run " + model() + sets);
    EXPECT_EQ(r.code, 2) << sets << "\n" << r.err;
    EXPECT_NE(r.err.find("the model needs at least"), std::string::npos) << r.err;
    for (const char* field : {"model.hidden", "model.layers", "run.tokens"})
      EXPECT_NE(r.err.find(field), std::string::npos) << field << " in: " << r.err;
  }
}

// A safetensors header nested 60,000 arrays deep (120 KB) as --input or as the spec's weights: one bounded parse
// and an input error, not a stack overflow.
TEST_F(RunCli, DeeplyNestedInputAndWeightsFilesAreInputErrors) {
  const std::string header = "{\"input\":{\"dtype\":\"F32\",\"shape\":" + std::string(60000, '[') +
                             std::string(60000, ']') + ",\"data_offsets\":[0,4]}}";
  std::string len(8, '\0');
  for (int i = 0; i < 8; ++i) len[static_cast<size_t>(i)] = static_cast<char>((header.size() >> (8 * i)) & 0xFF);
  const std::string deep = (dir_ / "deep.safetensors").string();
  std::ofstream(deep, std::ios::binary) << len << header << std::string(4, '\0');
  for (const std::string& args : {"--input " + deep, "--set weights=" + deep}) {
    Result r = run("run " + model() + fast() + args);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.err;
    EXPECT_NE(r.err.find(deep + ": the JSON header nests deeper than 16 levels"), std::string::npos) << r.err;
  }
}

// --explain prints the plan the graph executor runs (the README shows it for the default model): the gathers on the
// comm stream with their path and reason, and the arena against the naive sum; `eager` prints the same plan with
// every node on the compute stream.
TEST_F(RunCli, ExplainPrintsTheForwardPlan) {
  Result r = run("run " + model() + fast() + "--explain");
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* want : {"rank 0 forward plan (32 local tokens; collectives on the comm stream)",
                           "comm    node 1 'layers.0.qkv.gather' (sp_gather)", "gather rowwise: quantized",
                           "held by the op binding", "memory: arena"})
    EXPECT_NE(r.out.find(want), std::string::npos) << want << "\n" << r.out;
  Result e = run("run " + model() + fast() + "--set run.executor=eager --explain");
  ASSERT_EQ(e.code, 0) << e.err;
  for (const char* want : {"rank 0 forward plan (32 local tokens; run.executor: eager, every node in order)",
                           "'layers.0.qkv.gather' (sp_gather)", "gather rowwise: quantized"})
    EXPECT_NE(e.out.find(want), std::string::npos) << want << "\n" << e.out;
  EXPECT_EQ(e.out.find("comm    node"), std::string::npos) << e.out;
  EXPECT_EQ(run("run " + model() + fast() + "--set run.executor=fast").code, 2);
}

// In train mode --explain prints the training step's plan: the weights quantized first, the forward, the backward
// nodes autograd built (on both streams), the backward gathers with their path per usage (32 local tokens: the
// column-wise blocks of 128 fall back), the optimizer, the arena.
TEST_F(RunCli, ExplainPrintsTheTrainingPlan) {
  Result r = run("run " + model() + fast() + "--set run.mode=train --explain");
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* want : {"rank 0 training step plan (32 local tokens; forward, backward, optimizer; collectives",
                           "compute node 0 'weights.quantize' (quantize_weights)",
                           "comm    node 2 'layers.0.qkv.gather' (sp_gather)", "(mse_loss)",
                           "'layers.1.mlp.fc2.reduce_scatter_backward.grad_gather' (grad_gather) [backward]",
                           "'layers.0.qkv.regather' (regather) [backward]", "(layernorm_backward) [backward]",
                           "(wgrad) [backward]", "(dgrad) [backward]", "'optimizer' (optimizer)",
                           "gather columnwise: fallback", "gather rowwise: quantized", "memory: arena", "activations"})
    EXPECT_NE(r.out.find(want), std::string::npos) << want << "\n" << r.out;
  // Backward gathers and reduce-scatters are planned on the comm stream.
  for (const char* want : {"comm    node", "'layers.0.qkv.gather_backward.reduce_scatter' (reduce) [backward]"})
    EXPECT_NE(r.out.find(want), std::string::npos) << want;
  Result e = run("run " + model() + fast() + "--set run.mode=train --set run.executor=eager --explain");
  ASSERT_EQ(e.code, 0) << e.err;
  EXPECT_NE(e.out.find("optimizer; run.executor: eager, every node in order)"), std::string::npos) << e.out;
  EXPECT_EQ(e.out.find("comm    node"), std::string::npos) << e.out;
}

// The sequence-parallel simulation bench on the CPU: validated, and the quantized gather moves the bytes of FP8 data
// plus one f32 scale per 128 elements: 1.03125 B/element, 0.515625 of a bf16 gather.
TEST_F(RunCli, BenchSpReportsComputeCommAndGatherBytes) {
  Result r = run("bench sp --device cpu --world 4 --tokens 256 --hidden 256 --ffn 512 --repeats 2 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j["validated"].get<bool>());
  EXPECT_EQ(j["gathers_per_step"].get<int>(), 1);
  EXPECT_EQ(j["gather_bytes_per_step"].get<int64_t>(), 256 * 256 + 256 * 2 * 4);
  EXPECT_DOUBLE_EQ(j["gather_bytes_vs_bf16"].get<double>(), 0.515625);
  EXPECT_GT(j["compute_ms"].get<double>(), 0);
  EXPECT_GT(j["comm_ms"].get<double>(), 0);
  EXPECT_EQ(run("bench sp --device cpu --world 4 --tokens 255").code, 2);  // not divisible: named, exit 2
}

// bench block --profile on the CPU: the training step's nodes by op kind (forward and backward apart) and the slowest
// nodes, beside the validated timing.
TEST_F(RunCli, BenchBlockProfileReportsNodesByOpKind) {
  Result r = run("bench block --device cpu --tokens 64 --hidden 128 --ffn 256 --recipe fp8_block --backward --optimizer "
                 "--profile --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j["validated"].get<bool>());
  const nlohmann::json& p = j["profile"];
  EXPECT_GT(p["compute_stream_ms"].get<double>(), 0);
  std::set<std::pair<std::string, bool>> ops;
  double sum = 0;
  for (const auto& o : p["by_op"]) {
    ops.insert({o["op"].get<std::string>(), o["backward"].get<bool>()});
    EXPECT_GE(o["count"].get<int>(), 1);
    sum += o["ms"].get<double>();
  }
  for (const auto& want : std::vector<std::pair<std::string, bool>>{
           {"column_gemm", false}, {"row_gemm", false}, {"wgrad", true}, {"dgrad", true}, {"optimizer", false}})
    EXPECT_TRUE(ops.count(want)) << want.first << (want.second ? " (backward)" : "") << "\n" << p.dump(1);
  EXPECT_NEAR(sum, p["compute_stream_ms"].get<double>() + p["comm_stream_ms"].get<double>(), 1e-6);
  ASSERT_FALSE(p["slowest"].empty());
  EXPECT_NE(p["slowest"][0]["node"].get<std::string>().find("node "), std::string::npos);
}

}  // namespace
}  // namespace te
