// teengine bench block: a LayerNormMLP / LayerNormLinear / whole block on device-resident tensors (no host copies
// in the timed region), validated against the CPU on a small shape of the same configuration, and compared with its
// GEMM-only floor: the same GEMMs through te::gemm on pre-quantized operands, timed in the same run.
#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <tuple>

#include "engine/compare.h"
#include "engine/error.h"
#include "models/model_graph.h"
#include "models/single_rank.h"
#include "models/train_graph.h"
#include "tools/teengine/bench_util.h"
#include "tools/teengine/commands.h"

namespace te::cli {
namespace {

struct BlockOpts {
  std::string module = "layernorm_mlp", recipe = "fp8_block", device = "auto", activation = "gelu", cuda_graph = "off",
              executor = "graph", images = "on";
  int64_t tokens = 8192, hidden = 4096, ffn = 16384;
  bool backward = false, optimizer = false, json = false, profile = false;
};

std::string block_yaml(const BlockOpts& o, int64_t tokens, int64_t hidden, int64_t ffn, bool train) {
  std::string branches;
  const std::string mlp = "    - [ {layernorm_mlp: {name: mlp, ffn: " + std::to_string(ffn) + ", activation: " +
                          o.activation + "}} ]\n";
  const std::string lin = "    - [ {layernorm_linear: {name: qkv, out: " + std::to_string(ffn) +
                          "}}, {linear: {name: proj, out: " + std::to_string(hidden) + "}} ]\n";
  if (o.module == "layernorm_mlp") branches = mlp;
  else if (o.module == "layernorm_linear") branches = lin;
  else branches = lin + mlp;
  const std::string images = o.images == "on" ? "true" : "false";
  return "name: bench\nmodel:\n  hidden: " + std::to_string(hidden) + "\n  layers: 1\n  dtype: bf16\n  block:\n" +
         branches + "parallel: {tp: 1}\nprecision: {recipe: " + o.recipe + "}\nrun: {mode: " +
         (train ? "train" : "infer") + ", tokens: " + std::to_string(tokens) + ", seed: 7, weight_images: " + images +
         ", activation_images: " + images + "}\n";
}

struct Bench : SingleRankModel {
  using SingleRankModel::SingleRankModel;
  Tensor x, target;
  int64_t step = 0;  // the last optimizer step taken (every graph of the run continues the count)
};

std::unique_ptr<Bench> make(const std::string& yaml, Device device, bool train) {
  auto b = std::make_unique<Bench>(parse_spec(yaml, "<bench>"), device, train);
  const Shape s{b->spec.run.tokens, b->spec.model.hidden};
  b->x = Tensor::empty(s, DType::bf16, device, b->ctx.stream);
  b->x.fill_normal(11, 0.f, 1.f, b->ctx.stream);
  b->target = Tensor::empty(s, DType::bf16, device, b->ctx.stream);
  b->target.fill_normal(12, 0.f, 1.f, b->ctx.stream);
  return b;
}

// The module's GEMMs (fprop; plus dgrad and wgrad with --backward) on operands quantized once, outside the timing,
// with the GEMM images the run's context keeps: where a GEMM would dequantize, the floor is the GEMM on images.
double gemm_floor_ms(const Bench& b, const BlockOpts& o) {
  const RecipeConfigs& rc = b.ctx.recipe;
  const Stream& st = b.ctx.stream;
  GemmContext gctx(b.ctx.device);
  struct Shape3 {
    int64_t m, n, k;
  };
  std::vector<Shape3> linears;  // [T, K] x [N, K]^T
  const int64_t T = b.spec.run.tokens, H = b.spec.model.hidden, F = o.ffn;
  const int64_t F1 = o.activation == "swiglu" ? 2 * F : F;
  if (o.module != "layernorm_mlp") linears.insert(linears.end(), {{T, F, H}, {T, H, F}});
  if (o.module != "layernorm_linear") linears.insert(linears.end(), {{T, F1, H}, {T, H, F}});
  auto operand = [&](const std::optional<QuantizerConfig>& qc, const Shape& s, Usage u, bool images) -> GemmOperand {
    Tensor t = Tensor::empty(s, DType::bf16, b.ctx.device, st);
    t.fill_normal(3, 0.f, 1.f, st);
    if (!qc) return GemmOperand(t);
    Quantizer q(*qc);
    return GemmOperand(q.quantize(t, u, st, {}, images ? gemm_image_spec(qc->format, b.ctx.device) : std::nullopt));
  };
  std::vector<std::function<void()>> calls;
  std::vector<std::shared_ptr<Tensor>> outs;
  const Usage both = o.backward ? Usage::both : Usage::rowwise;
  for (const Shape3& l : linears) {
    GemmOperand x = operand(rc.input, {l.m, l.k}, both, b.ctx.activation_images),
                w = operand(rc.weight, {l.n, l.k}, both, b.ctx.weight_images);
    GemmOptions opts;
    opts.out_dtype = DType::bf16;
    calls.push_back([&gctx, &st, x, w, opts] { (void)gemm(x, w, GemmRole::fprop, opts, gctx, st); });
    if (o.backward) {
      GemmOperand dy = operand(rc.grad, {l.m, l.n}, Usage::both, b.ctx.activation_images);
      GemmOptions wopts;
      wopts.out_dtype = DType::f32;
      calls.push_back([&gctx, &st, dy, w, opts] { (void)gemm(dy, w, GemmRole::dgrad, opts, gctx, st); });
      calls.push_back([&gctx, &st, dy, x, wopts] { (void)gemm(dy, x, GemmRole::wgrad, wopts, gctx, st); });
    }
  }
  return bench::time_it([&] { for (auto& c : calls) c(); }, st, 3, 10).median_ms;
}

// The graph a run times: the training step (--backward; with --optimizer the update too) or the inference forward.
struct TimedGraph {
  std::unique_ptr<TrainGraph> train;
  std::unique_ptr<ModelGraph> infer;

  TimedGraph(Bench& b, const BlockOpts& o, bool profile, bool cuda_graph) {
    const bool overlap = o.executor == "graph";
    if (o.backward) {
      const TrainGraphOptions to{
          .kind = o.optimizer ? TrainGraphOptions::Kind::step : TrainGraphOptions::Kind::gradient,
          .overlap = overlap,
          .profile = profile,
          .cuda_graph = cuda_graph};
      train = std::make_unique<TrainGraph>(*b.model, o.tokens, b.target.dtype(), to);
    } else {
      const ModelGraphOptions mo{.overlap = overlap, .profile = profile, .cuda_graph = cuda_graph};
      infer = std::make_unique<ModelGraph>(*b.model, o.tokens, mo);
    }
  }
  // One step on x (the training step's target is the bench's).
  void run(Bench& b, const Tensor& x) {
    if (train)
      (void)train->train_step(x, b.target, ++b.step, b.model->spec().run.optimizer.lr);
    else
      (void)infer->forward(x);
  }
  const RankGraph& graph() const { return train ? static_cast<const RankGraph&>(*train) : *infer; }
};

// Where the step's time goes: the timed graph built again with every node timed (CUDA events around each node on
// the GPU), run three times, the last run reported — per op kind (forward and backward apart) and the slowest nodes.
// Node times on the comm stream overlap the compute stream's, so the per-stream sums, not their total, compare with
// the step time.
nlohmann::json profile_block(Bench& b, const BlockOpts& o) {
  TimedGraph timed(b, o, true, false);
  for (int i = 0; i < 3; ++i) timed.run(b, b.x);
  b.ctx.stream.synchronize();
  struct Sum {
    double ms = 0;
    int count = 0;
  };
  std::map<std::tuple<std::string, bool, StreamClass>, Sum> by_op;
  double stream_ms[kNumStreamClasses] = {0, 0};
  std::vector<NodeTime> nodes = timed.graph().node_times();
  for (const NodeTime& t : nodes) {
    Sum& s = by_op[{t.op, t.backward, t.stream}];
    s.ms += t.ms;
    ++s.count;
    stream_ms[static_cast<int>(t.stream)] += t.ms;
  }
  nlohmann::json ops = nlohmann::json::array(), slowest = nlohmann::json::array();
  std::vector<std::pair<double, nlohmann::json>> rows;
  for (const auto& [key, s] : by_op)
    rows.push_back({s.ms, {{"op", std::get<0>(key)}, {"backward", std::get<1>(key)},
                           {"stream", stream_class_name(std::get<2>(key))}, {"count", s.count}, {"ms", s.ms}}});
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& c) { return a.first > c.first; });
  for (auto& r : rows) ops.push_back(std::move(r.second));
  std::sort(nodes.begin(), nodes.end(), [](const NodeTime& a, const NodeTime& c) { return a.ms > c.ms; });
  for (size_t i = 0; i < nodes.size() && i < 25; ++i)
    slowest.push_back({{"node", nodes[i].node}, {"stream", stream_class_name(nodes[i].stream)}, {"ms", nodes[i].ms}});
  return {{"compute_stream_ms", stream_ms[0]}, {"comm_stream_ms", stream_ms[1]}, {"by_op", ops}, {"slowest", slowest}};
}

int run_block_bench(const BlockOpts& o) {
  const Device device = parse_device(o.device);
  // 1. Validate this exact configuration, scaled down, against the CPU.
  const std::string small = block_yaml(o, 64, 128, 256, o.backward);
  auto on_dev = make(small, device, false), on_cpu = make(small, Device::cpu(), false);
  const ModelGraphOptions fo{.overlap = o.executor == "graph"};
  const double err = rel_l2(ModelGraph(*on_dev->model, 64, fo).forward(on_dev->x).to_f32_vector(on_dev->ctx.stream),
                            ModelGraph(*on_cpu->model, 64, fo).forward(on_cpu->x).to_f32_vector());
  const bool ok = err <= 1e-2;
  // 2. Time the full size (the forward as one CUDA-graph launch with --cuda-graph on; checked against the graph
  // executor's own forward first).
  auto b = make(block_yaml(o, o.tokens, o.hidden, o.ffn, o.backward), device, o.backward);
  const bool graph = o.cuda_graph == "on";
  if (graph && o.backward && !o.optimizer)
    TE_INPUT_ERROR("--cuda-graph on with --backward but no --optimizer",
                   "CUDA graph replay covers the inference forward and the whole training step: add --optimizer");
  Tensor x = b->x;        // what the timed step reads (a replay's own input buffer: no copy per step)
  double replay_err = 0;  // the replay against the executor's forward: 0 means the same bytes
  std::vector<float> plain;  // --cuda-graph on: the executor's forward, made before the replay's graph
  if (graph && !o.backward) plain = ModelGraph(*b->model, o.tokens, fo).forward(b->x).to_f32_vector(b->ctx.stream);
  auto timed = std::make_unique<TimedGraph>(*b, o, false, graph);
  if (graph && o.backward) {  // three steps as they are, the fourth captured: the timed steps are replays
    for (int i = 0; i < 4; ++i) timed->run(*b, x);
  } else if (graph) {
    x = timed->infer->replay_input();
    x.copy_from(b->x, b->ctx.stream);
    replay_err = rel_l2(timed->infer->forward(x).to_f32_vector(b->ctx.stream), plain);
  }
  bench::Timing t = bench::time_it([&] { timed->run(*b, x); }, b->ctx.stream, 3, o.tokens >= 4096 ? 10 : 30);
  const double floor = gemm_floor_ms(*b, o);
  const int64_t T = o.tokens, H = o.hidden, F = o.ffn, F1 = o.activation == "swiglu" ? 2 * F : F;
  double flops = 0;
  if (o.module != "layernorm_mlp") flops += 2.0 * T * H * F * 2;
  if (o.module != "layernorm_linear") flops += 2.0 * T * H * (F1 + F);
  const bool valid = ok && replay_err == 0;
  if (o.backward) flops *= 3;
  nlohmann::json r = {{"bench", "block"},
                      {"module", o.module},
                      {"recipe", o.recipe},
                      {"tokens", T},
                      {"hidden", H},
                      {"ffn", F},
                      {"backward", o.backward},
                      {"optimizer", o.backward && o.optimizer},
                      {"device", device.str()},
                      {"cuda_graph", graph},
                      {"executor", o.executor},
                      {"images", o.images == "on"},
                      {"replay_vs_graph_rel_l2", replay_err},
                      {"validated", valid},
                      {"rel_l2_vs_cpu_small", err},
                      {"median_ms", t.median_ms},
                      {"tflops", flops / (t.median_ms * 1e-3) / 1e12},
                      {"gemm_floor_ms", floor},
                      {"ratio_to_gemm_floor", t.median_ms / floor}};
  if (o.profile) {
    timed.reset();
    r["profile"] = profile_block(*b, o);
  }
  bench::print_report(r, o.json);
  return valid ? 0 : 1;
}
}  // namespace

Command add_bench_block(CLI::App& app) {
  auto o = std::make_shared<BlockOpts>();
  CLI::App* sub = app.add_subcommand("block", "A transformer block against its GEMM-only floor");
  sub->add_option("--module", o->module, "what to time")
      ->check(CLI::IsMember({"layernorm_mlp", "layernorm_linear", "block"}));
  sub->add_option("--tokens", o->tokens, "T")->check(CLI::PositiveNumber);
  sub->add_option("--hidden", o->hidden, "H")->check(CLI::PositiveNumber);
  sub->add_option("--ffn", o->ffn, "F (layernorm_linear: its output features)")->check(CLI::PositiveNumber);
  sub->add_option("--recipe", o->recipe, "precision recipe")
      ->check(CLI::IsMember(bench::recipe_names()));
  sub->add_option("--activation", o->activation, "MLP activation")->check(CLI::IsMember({"gelu", "swiglu", "relu"}));
  sub->add_option("--device", o->device, "auto | cpu | cuda[:N]");
  sub->add_flag("--backward", o->backward, "time forward + loss + backward (gradients of every parameter)");
  sub->add_flag("--optimizer", o->optimizer, "with --backward: include the optimizer update (a whole training step)");
  sub->add_option("--cuda-graph", o->cuda_graph,
                  "replay the forward (or, with --backward --optimizer, the training step) as one CUDA graph")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  sub->add_option("--executor", o->executor,
                  "graph (collectives overlap compute on 2 streams) or eager (the same graph's nodes in order)")
      ->check(CLI::IsMember({"eager", "graph"}))
      ->capture_default_str();
  sub->add_option("--images", o->images,
                  "GEMM images of the quantized weights, activations and gradients (run.weight_images, "
                  "run.activation_images)")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  sub->add_flag("--profile", o->profile, "also time every node of the graph (by op kind, and the slowest nodes)");
  sub->add_flag("--json", o->json, "print the report as JSON");
  return {sub, [o] { return run_block_bench(*o); }};
}
}  // namespace te::cli
