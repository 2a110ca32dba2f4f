// Model spec: the shipped YAML files parse; column/row assignment and parameter lists; every bad-input case is a
// te::InputError whose message names the location (file:line:col or the --set argument), the field path, what is
// wrong, and whose hint says what to do.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "engine/error.h"
#include "models/spec.h"
#include "common/model_path.h"

namespace te {
namespace {

// A complete spec with comments, as a user would write it.
const char* kExample = R"(name: tiny
model:
  hidden: 256
  layers: 2
  dtype: bf16                 # f32 | bf16 | f16: parameters and activations
  norm: {type: layernorm, eps: 1.0e-5}   # layernorm | rmsnorm
  block:                      # residual branches, applied in order: x = x + branch(x)
    - [ {layernorm_linear: {name: qkv, out: 768}}, {linear: {name: proj, out: 256}} ]
    - [ {layernorm_mlp: {name: mlp, ffn: 1024, activation: gelu}} ]   # gelu | swiglu | relu
parallel: {tp: 4, sequence_parallel: true, comm: auto}   # comm: auto | local | nccl
precision: {recipe: fp8_block}   # none | fp8_delayed | fp8_current | fp8_block | mxfp8 | nvfp4, + options
run: {mode: infer, device: auto, tokens: 1000, steps: 1, seed: 1234,
      optimizer: {type: adamw, lr: 1.0e-3}}   # mode: infer | train
weights: null                 # safetensors path (global tensors); null → seeded init
)";

TEST(Spec, ExampleParsesWithColumnRowAssignment) {
  ModelSpec s = parse_spec(kExample, "example.yaml");
  EXPECT_EQ(s.name, "tiny");
  EXPECT_EQ(s.model.hidden, 256);
  EXPECT_EQ(s.model.layers, 2);
  EXPECT_EQ(s.model.dtype, DType::bf16);
  EXPECT_EQ(s.model.norm, NormType::layernorm);
  EXPECT_DOUBLE_EQ(s.model.eps, 1e-5);
  ASSERT_EQ(s.model.block.size(), 2u);
  ASSERT_EQ(s.model.block[0].size(), 2u);
  const LayerSpec &qkv = s.model.block[0][0], &proj = s.model.block[0][1], &mlp = s.model.block[1][0];
  EXPECT_EQ(qkv.mode, ParallelMode::column);
  EXPECT_EQ(qkv.in, 256);
  EXPECT_EQ(qkv.out, 768);
  EXPECT_EQ(proj.mode, ParallelMode::row);
  EXPECT_EQ(proj.in, 768);
  EXPECT_EQ(proj.out, 256);
  EXPECT_EQ(mlp.kind, LayerKind::layernorm_mlp);
  EXPECT_EQ(mlp.ffn, 1024);
  EXPECT_EQ(mlp.out, 256);
  EXPECT_EQ(s.parallel.tp, 4);
  EXPECT_TRUE(s.parallel.sequence_parallel);
  EXPECT_EQ(s.parallel.comm, CommBackend::automatic);
  EXPECT_EQ(s.precision.recipe, Recipe::fp8_block);
  EXPECT_TRUE(s.precision.pow2_scales);          // TE's Float8BlockScaling default
  EXPECT_EQ(s.precision.fp8_format, Fp8Format::e4m3);
  EXPECT_EQ(s.run.mode, RunMode::infer);
  EXPECT_EQ(s.run.tokens, 1000);
  EXPECT_EQ(s.run.seed, 1234u);
  EXPECT_EQ(s.run.optimizer.type, OptimizerType::adamw);
  EXPECT_DOUBLE_EQ(s.run.optimizer.lr, 1e-3);
  EXPECT_TRUE(s.weights.empty());
}

TEST(Spec, ParameterNamesShapesAndShards) {
  ModelSpec s = parse_spec(kExample, "example.yaml");
  const auto params = parameter_specs(s);
  // Per layer: qkv (ln w, ln b, w, b) + proj (w, b) + mlp (ln w, ln b, fc1 w, fc1 b, fc2 w, fc2 b) = 12.
  ASSERT_EQ(params.size(), 24u);
  struct Row {
    const char* name;
    Shape shape;
    int shard_dim;
  };
  const Row expect[] = {
      {"layers.0.qkv.layer_norm_weight", {256}, -1}, {"layers.0.qkv.layer_norm_bias", {256}, -1},
      {"layers.0.qkv.weight", {768, 256}, 0},        {"layers.0.qkv.bias", {768}, 0},
      {"layers.0.proj.weight", {256, 768}, 1},       {"layers.0.proj.bias", {256}, -1},
      {"layers.0.mlp.layer_norm_weight", {256}, -1}, {"layers.0.mlp.layer_norm_bias", {256}, -1},
      {"layers.0.mlp.fc1_weight", {1024, 256}, 0},   {"layers.0.mlp.fc1_bias", {1024}, 0},
      {"layers.0.mlp.fc2_weight", {256, 1024}, 1},   {"layers.0.mlp.fc2_bias", {256}, -1},
  };
  for (size_t i = 0; i < 12; ++i) {
    SCOPED_TRACE(expect[i].name);
    EXPECT_EQ(params[i].name, expect[i].name);
    EXPECT_EQ(params[i].shape, expect[i].shape);
    EXPECT_EQ(params[i].shard_dim, expect[i].shard_dim);
    EXPECT_EQ(params[i + 12].name.substr(0, 9), "layers.1.");
  }
  EXPECT_EQ(local_shape(params[2], 4), (Shape{192, 256}));
  EXPECT_EQ(local_shape(params[4], 4), (Shape{256, 192}));
  EXPECT_EQ(local_shape(params[5], 4), (Shape{256}));
}

TEST(Spec, SwigluRmsnormAndNoBias) {
  ModelSpec s = parse_spec(R"(
model: {hidden: 64, norm: rmsnorm,
        block: [[{layernorm_mlp: {name: m, ffn: 128, activation: swiglu, bias: false}}]]}
)",
                           "dir/x.yaml");
  EXPECT_EQ(s.name, "x");
  const auto p = parameter_specs(s);
  ASSERT_EQ(p.size(), 3u);  // rmsnorm: no layer_norm_bias; bias: false
  EXPECT_EQ(p[0].name, "layers.0.m.layer_norm_weight");
  EXPECT_EQ(p[1].name, "layers.0.m.fc1_weight");
  EXPECT_EQ(p[1].shape, (Shape{256, 64}));
  EXPECT_TRUE(p[1].gated_halves);
  EXPECT_EQ(p[2].shape, (Shape{64, 128}));
}

TEST(Spec, ShippedModelsParse) {
  for (const char* f : {"tiny.yaml", "sp-fallback.yaml", "h200-mlp.yaml", "transformer.yaml"}) {
    SCOPED_TRACE(f);
    ModelSpec s = load_spec_file(test::model_path(f));
    EXPECT_FALSE(parameter_specs(s).empty());
  }
  ModelSpec tiny = load_spec_file(test::model_path("tiny.yaml"));
  EXPECT_EQ(tiny.parallel.tp, 2);
  EXPECT_TRUE(tiny.parallel.sequence_parallel);
  EXPECT_EQ(tiny.precision.recipe, Recipe::fp8_block);
  ModelSpec sp = load_spec_file(test::model_path("sp-fallback.yaml"));
  EXPECT_EQ(sp.parallel.tp, 4);
  EXPECT_NE((sp.run.tokens / sp.parallel.tp) % 128, 0);  // the point of the file
  ModelSpec big = load_spec_file(test::model_path("h200-mlp.yaml"));
  EXPECT_EQ(big.model.hidden, 4096);
  EXPECT_EQ(big.model.block[0][0].ffn, 16384);
  EXPECT_EQ(big.run.tokens, 8192);
  ModelSpec tf = load_spec_file(test::model_path("transformer.yaml"));
  const AttentionSpec& a = tf.model.block[0][1].attention;
  EXPECT_EQ(tf.model.block[0][1].kind, LayerKind::attention);
  EXPECT_EQ(a.head_dim, 32);  // from the QKV projection's 512 = (8 + 2·4)·32
  EXPECT_DOUBLE_EQ(a.rotary_base, 10000.0);
  EXPECT_EQ(tf.model.block[0][2].in, 256);  // proj reads 8 heads of 32
  EXPECT_EQ(sequence_multiple(tf), 128);
  EXPECT_TRUE(a.deterministic);  // the default
  ModelSpec fast =
      load_spec_file(test::model_path("transformer.yaml"), {"model.block[0][1].attention.deterministic=false"});
  EXPECT_FALSE(fast.model.block[0][1].attention.deterministic);
}

TEST(Spec, OverridesApplyBeforeValidation) {
  ModelSpec s = parse_spec(kExample, "example.yaml",
                           {"precision.recipe=mxfp8", "run.tokens=2048", "model.block[1][0].layernorm_mlp.ffn=512",
                            "weights=w/x.safetensors", "run.optimizer.betas=[0.8, 0.99]"});
  EXPECT_EQ(s.precision.recipe, Recipe::mxfp8);
  EXPECT_EQ(s.run.tokens, 2048);
  EXPECT_EQ(s.model.block[1][0].ffn, 512);
  EXPECT_EQ(s.weights_path, "w/x.safetensors");  // --set paths are relative to the working directory
  EXPECT_DOUBLE_EQ(s.run.optimizer.beta1, 0.8);
  ModelSpec f = parse_spec(std::string(kExample) + "", "cfg/example.yaml", {});
  ModelSpec g = parse_spec("weights: w.safetensors\nmodel: {hidden: 8, block: [[{layernorm_mlp: {name: m, ffn: 8}}]]}",
                           "cfg/m.yaml");
  EXPECT_EQ(g.weights_path, "cfg/w.safetensors");  // file paths are relative to the spec's directory
}

// ---- bad input -------------------------------------------------------------------------------------------------

struct Bad {
  std::string name;
  std::string yaml;
  std::vector<std::string> sets;
  std::vector<std::string> msg;   // substrings of what()
  std::string hint;               // substring of hint()
};

const std::string kBase = R"(name: t
model:
  hidden: 256
  block:
    - [ {layernorm_linear: {name: qkv, out: 768}}, {linear: {name: proj, out: 256}} ]
    - [ {layernorm_mlp: {name: mlp, ffn: 1024}} ]
parallel: {tp: 4, sequence_parallel: true}
run: {tokens: 1000}
)";

std::string replace(std::string s, const std::string& a, const std::string& b) {
  const size_t i = s.find(a);
  EXPECT_NE(i, std::string::npos) << a;
  return i == std::string::npos ? s : s.replace(i, a.size(), b);
}

std::vector<Bad> bad_spec_cases() {
  return {
      {"SyntaxError", "model:\n  hidden: 256\n   layers: [1, 2\n", {}, {"s.yaml:3:", "YAML syntax error"}, "syntax"},
      {"UnclosedFlow", "model: {hidden: 3\n", {}, {"s.yaml:", "YAML syntax error"}, "syntax"},
      {"EmptyFile", "", {}, {"s.yaml", "the spec is empty"}, "tiny.yaml"},
      {"NotAMap", "- 1\n- 2\n", {}, {"s.yaml:1:1", "expected a map"}, ""},
      {"UnknownTopKey", kBase + "precison: {recipe: none}\n", {}, {"s.yaml:9:1", "precison", "did you mean 'precision'"},
       "keys allowed in the top level"},
      {"UnknownModelKey", replace(kBase, "hidden: 256", "hiden: 256"), {},
       {"s.yaml:3:3", "model.hiden", "did you mean 'hidden'"}, "hidden"},
      {"UnknownLayerKind", replace(kBase, "{linear: {name: proj", "{liner: {name: proj"), {},
       {"model.block[0][1].liner", "did you mean 'linear'"}, "layernorm_linear"},
      {"UnknownLayerKey", replace(kBase, "{name: proj, out: 256}", "{name: proj, outt: 256}"), {},
       {"model.block[0][1].linear.outt", "did you mean 'out'"}, ""},
      {"DuplicateKey", replace(kBase, "hidden: 256", "hidden: 256\n  hidden: 128"), {},
       {"model.hidden", "appears twice"}, "remove one"},
      {"WrongTypeString", replace(kBase, "hidden: 256", "hidden: big"), {},
       {"s.yaml:3:11", "model.hidden", "expected an integer, got 'big'"}, "model width"},
      {"WrongTypeQuoted", replace(kBase, "hidden: 256", "hidden: \"256\""), {},
       {"model.hidden", "expected an integer, got the string '256'"}, ""},
      {"WrongTypeMap", replace(kBase, "{tp: 4,", "{tp: {a: 1},"), {}, {"parallel.tp", "got a map"}, ""},
      {"WrongTypeBool", replace(kBase, "sequence_parallel: true", "sequence_parallel: maybe"), {},
       {"parallel.sequence_parallel", "expected true or false"}, "true or false"},
      {"FloatForInt", replace(kBase, "ffn: 1024", "ffn: 1024.5"), {},
       {"model.block[1][0].layernorm_mlp.ffn", "expected an integer"}, ""},
      {"ZeroSize", replace(kBase, "hidden: 256", "hidden: 0"), {},
       {"s.yaml:3:11", "model.hidden", "must be a positive integer, got 0"}, ""},
      {"NegativeSize", replace(kBase, "out: 768", "out: -768"), {},
       {"model.block[0][0].layernorm_linear.out", "must be a positive integer, got -768"}, ""},
      {"ZeroLayers", kBase + "", {"model.layers=0"}, {"--set model.layers=0", "model.layers", "positive"}, ""},
      {"TpNotDividingOut", replace(kBase, "out: 768", "out: 770"), {},
       {"s.yaml:5:", "model.block[0][0].layernorm_linear.out", "770", "not divisible by tp 4"}, "multiple of"},
      {"TpNotDividingFfn", replace(kBase, "ffn: 1024", "ffn: 1026"), {},
       {"model.block[1][0].layernorm_mlp.ffn", "not divisible by tp 4", "column-parallel"}, "e.g. 1028"},
      {"TokensNotDivisible", replace(kBase, "tokens: 1000", "tokens: 1002"), {},
       {"s.yaml:8:", "run.tokens", "1002 is not divisible by tp 4", "sequence parallelism"}, "1000 or 1004"},
      {"TokensNotDivisibleBySet", kBase, {"parallel.tp=2", "run.tokens=1001"},
       {"--set run.tokens=1001", "1001 is not divisible by tp 2"}, "1000 or 1002"},
      {"TpNotDividingBySet", kBase, {"parallel.tp=3"}, {"s.yaml:6:", "ffn 1024 is not divisible by tp 3"}, ""},
      {"TooLarge", replace(kBase, "hidden: 256", "hidden: 99999999999"), {}, {"model.hidden", "at most 1048576"}, ""},
      {"IntOverflow", replace(kBase, "hidden: 256", "hidden: 99999999999999999999999"), {}, {"out of range"}, ""},
      {"BranchEndsColumn", replace(kBase, ", {linear: {name: proj, out: 256}}", ""), {},
       {"model.block[0][0]", "ends with column-parallel 'qkv'"}, "out: 256"},
      {"BranchEndsWrongWidth", replace(kBase, "{name: proj, out: 256}", "{name: proj, out: 128}"), {},
       {"model.block[0]", "ends at 128 features", "hidden = 256"}, "set the last layer's out to 256"},
      {"LayernormLinearAsRow", replace(kBase, "{linear: {name: proj", "{layernorm_linear: {name: proj"), {},
       {"model.block[0][1]", "would be row-parallel"}, "use `linear`"},
      {"MlpAfterColumn", replace(kBase, "{linear: {name: proj, out: 256}}", "{layernorm_mlp: {name: m2, ffn: 64}}"),
       {}, {"model.block[0][1]", "follows column-parallel 'qkv'"}, "row-parallel"},
      {"DuplicateLayerName", replace(kBase, "name: mlp", "name: qkv"), {}, {"model.block[1][0]", "used twice"}, ""},
      {"BadLayerName", replace(kBase, "name: mlp", "name: \"m l p\""), {}, {"not a valid layer name"}, "letters"},
      {"BadRecipe", kBase + "precision: {recipe: fp8_blok}\n", {},
       {"s.yaml:9:21", "precision.recipe", "'fp8_blok' is not one of", "did you mean 'fp8_block'"}, "nvfp4"},
      {"BadRecipeBySet", kBase, {"precision.recipe=fp4"}, {"--set precision.recipe=fp4", "precision.recipe"}, "mxfp8"},
      {"OptionForOtherRecipe", kBase + "precision: {recipe: fp8_block, margin: 1}\n", {},
       {"precision.margin", "applies only to recipe fp8_delayed, not fp8_block"}, "remove it"},
      {"HybridForABlockRecipe", kBase + "precision: {recipe: fp8_block, fp8_format: hybrid}\n", {},
       {"precision.fp8_format", "recipe fp8_block takes fp8_format e4m3 only"}, "fp8_current / fp8_delayed"},
      {"AmaxEpsilonNamesEveryOwner", kBase + "precision: {recipe: mxfp8, amax_epsilon: 0.1}\n", {},
       {"precision.amax_epsilon", "applies only to recipe fp8_current | fp8_block, not mxfp8"}, "remove it"},
      {"BadActivation", replace(kBase, "ffn: 1024", "ffn: 1024, activation: gelu2"), {},
       {"activation", "did you mean 'gelu'"}, ""},
      {"BadDType", replace(kBase, "hidden: 256", "hidden: 256\n  dtype: fp8"), {}, {"model.dtype", "'fp8' is not one of"},
       "f32, bf16, f16"},
      {"BadDevice", kBase + "", {"run.device=gpu0"}, {"--set run.device=gpu0", "not a device"}, "cuda:N"},
      {"MomentumWithAdamw", kBase + "", {"run.optimizer.momentum=0.9"},
       {"run.optimizer.momentum", "applies only to optimizer sgd"}, ""},
      {"NegativeLr", kBase + "", {"run.optimizer.lr=-1"}, {"run.optimizer.lr", "must be in (0, inf)"}, ""},
      {"BadSetNoEquals", kBase, {"model.hidden"}, {"--set model.hidden", "expected PATH=VALUE"}, "model.hidden=512"},
      {"BadSetIndex", kBase, {"model.block[9][0].linear.out=3"}, {"--set model.block[9][0]", "out of range"}, ""},
      {"BadSetPath", kBase, {"model..hidden=3"}, {"empty path component"}, "PATH=VALUE"},
      {"BadSetValueYaml", kBase, {"model.hidden=[1"}, {"--set model.hidden=[1", "not valid YAML"}, ""},
      {"BadSetUnknownKey", kBase, {"model.hiden=3"}, {"--set model.hiden=3", "did you mean 'hidden'"}, ""},
      {"BadSetThroughScalar", kBase, {"model.hidden.x=3"}, {"model.hidden is '256', not a map"}, ""},
      {"MissingHidden", "model: {block: [[{layernorm_mlp: {name: m, ffn: 8}}]]}\n", {},
       {"s.yaml:1:8", "model.hidden", "required"}, ""},
      {"EmptyBlock", "model: {hidden: 8, block: []}\n", {}, {"model.block", "non-empty list"}, ""},
      {"WeightsNotString", kBase + "weights: [a]\n", {}, {"weights", "expected a name"}, ""},
  };
}

class BadSpec : public ::testing::TestWithParam<Bad> {};

TEST_P(BadSpec, ThrowsInputErrorWithLocationFieldAndHint) {
  const Bad& c = GetParam();
  try {
    parse_spec(c.yaml, "s.yaml", c.sets);
    FAIL() << "accepted:\n" << c.yaml;
  } catch (const InputError& e) {
    const std::string msg = e.message();
    for (const auto& s : c.msg) EXPECT_NE(msg.find(s), std::string::npos) << "missing '" << s << "' in: " << msg;
    EXPECT_FALSE(e.hint().empty()) << msg;
    if (!c.hint.empty()) {
      EXPECT_NE(e.hint().find(c.hint), std::string::npos) << "hint: " << e.hint();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, BadSpec, ::testing::ValuesIn(bad_spec_cases()),
                         [](const auto& info) { return info.param.name; });

TEST(Spec, MissingFileIsAnInputError) {
  EXPECT_THROW(load_spec_file("/nonexistent/model.yaml"), InputError);
}

}  // namespace
}  // namespace te
