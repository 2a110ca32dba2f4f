// teengine bench sp: the sequence-parallel simulation on one device. W ranks run as threads over the local
// communicator, each executing the planned inference forward of a LayerNormMLP (tp W, sequence parallelism) with
// every node timed on its stream. Reports per step (medians, rank 0): the compute-stream and comm-stream busy time,
// the step time with the two streams and with the same plan on one stream, the communication time hidden behind
// compute, and the bytes the gathers moved against a bf16 gather of the same tensors. Validated first: the two-stream
// plan's output equals the one-stream plan's on every rank.
#include <algorithm>
#include <chrono>
#include <memory>

#include "comm/local_communicator.h"
#include "engine/error.h"
#include "models/model_graph.h"
#include "models/rank_group.h"
#include "tools/teengine/bench_util.h"
#include "tools/teengine/commands.h"

namespace te::cli {
namespace {

struct SpOpts {
  std::string recipe = "fp8_block", device = "auto";
  int world = 4, layers = 1, repeats = 10;
  int64_t tokens = 8192, hidden = 4096, ffn = 16384;
  bool json = false;
};

std::string sp_yaml(const SpOpts& o) {
  return "name: bench_sp\nmodel:\n  hidden: " + std::to_string(o.hidden) + "\n  layers: " + std::to_string(o.layers) +
         "\n  dtype: bf16\n  block:\n    - [ {layernorm_mlp: {name: mlp, ffn: " + std::to_string(o.ffn) +
         ", activation: gelu}} ]\nparallel: {tp: " + std::to_string(o.world) +
         ", sequence_parallel: true, comm: local}\nprecision: {recipe: " + o.recipe + "}\nrun: {mode: infer, tokens: " +
         std::to_string(o.tokens) + ", seed: 7}\n";
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

struct StepTimes {
  double step_ms = 0, compute_ms = 0, comm_ms = 0, hidden_ms = 0;
};

// Medians over `repeats` steps of rank 0's step time, per-stream busy time (sums of its nodes' times) and the part
// of the comm time hidden behind compute (busy sums minus the step, per step).
StepTimes time_steps(RankGroup& g, const std::vector<Tensor>& x, bool overlap, int repeats) {
  const int w = g.world();
  std::vector<std::unique_ptr<ModelGraph>> graphs(static_cast<size_t>(w));
  std::vector<double> step, compute, comm, hidden;
  run_ranks(g.comms, [&](Communicator& c) {
    const size_t r = static_cast<size_t>(c.rank());
    RankContext& ctx = *g.ctxs[r];
    ModelGraphOptions mo;
    mo.overlap = overlap;
    mo.profile = true;
    graphs[r] = std::make_unique<ModelGraph>(*g.models[r], x[r].size(0), mo);
    Event start = Event::create(ctx.device, true), end = Event::create(ctx.device, true);
    for (int i = 0; i < 3 + repeats; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      start.record(ctx.stream);
      (void)graphs[r]->forward(x[r]);
      end.record(ctx.stream);
      ctx.stream.synchronize();
      const double host_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (r != 0 || i < 3) continue;
      const Plan& plan = graphs[r]->plan();
      const std::vector<double> ms = graphs[r]->executor().step_ms();
      double by_stream[kNumStreamClasses] = {0, 0};
      for (size_t s = 0; s < ms.size(); ++s) {
        // Comm nodes are timed by their kind even in the one-stream plan, so both plans split the same way.
        const bool is_comm = graphs[r]->graph().node(plan.steps[s].node).op->stream == StreamClass::comm;
        by_stream[is_comm ? 1 : 0] += ms[s];
      }
      step.push_back(ctx.device.is_cuda() ? start.elapsed_ms(end) : host_ms);
      compute.push_back(by_stream[0]);
      comm.push_back(by_stream[1]);
      hidden.push_back(std::max(0.0, by_stream[0] + by_stream[1] - step.back()));
    }
  });
  return {median(step), median(compute), median(comm), median(hidden)};
}

int run_sp_bench(const SpOpts& o) {
  const Device device = parse_device(o.device);
  if (o.tokens % o.world != 0)
    TE_INPUT_ERROR("--tokens " << o.tokens << " is not divisible by --world " << o.world,
                   "use a token count that is a multiple of the world size");
  RankGroup g(parse_spec(sp_yaml(o), "<bench sp>"), device);
  const int w = g.world();
  const int64_t local = o.tokens / w;
  std::vector<Tensor> x(static_cast<size_t>(w));
  for (int r = 0; r < w; ++r) {
    RankContext& ctx = *g.ctxs[static_cast<size_t>(r)];
    x[static_cast<size_t>(r)] = Tensor::empty({local, o.hidden}, DType::bf16, device, ctx.stream);
    x[static_cast<size_t>(r)].fill_normal(100 + static_cast<uint64_t>(r), 0.f, 1.f, ctx.stream);
  }
  // 1. Validate: the two-stream plan computes the one-stream plan's bytes on every rank; count one step's gather
  // bytes.
  std::vector<int> same(static_cast<size_t>(w), 0);
  int64_t gather_calls = 0, gather_bytes = 0;
  run_ranks(g.comms, [&](Communicator& c) {
    const size_t r = static_cast<size_t>(c.rank());
    RankContext& ctx = *g.ctxs[r];
    ModelGraphOptions serial;
    serial.overlap = false;
    const Tensor serial_out =
        ModelGraph(*g.models[r], local, serial).forward(x[r]).contiguous().to(Device::cpu(), ctx.stream);
    ModelGraph graph(*g.models[r], local);
    const CommMetrics before = c.metrics();
    const Tensor planned = graph.forward(x[r]).contiguous().to(Device::cpu(), ctx.stream);
    ctx.stream.synchronize();
    same[r] = serial_out.nbytes() == planned.nbytes() &&
              std::equal(serial_out.data<uint8_t>(), serial_out.data<uint8_t>() + serial_out.nbytes(),
                         planned.data<uint8_t>());
    if (r == 0) {
      const CommMetrics& m = c.metrics();
      for (auto [a, b] : {std::pair{&m.gather_quantized, &before.gather_quantized},
                          std::pair{&m.gather_fallback, &before.gather_fallback},
                          std::pair{&m.gather_hp, &before.gather_hp}}) {
        gather_calls += a->calls - b->calls;
        gather_bytes += a->bytes - b->bytes;
      }
    }
  });
  const bool valid = std::all_of(same.begin(), same.end(), [](int s) { return s != 0; });
  // 2. Time the plan with two streams, then the same plan on one stream.
  const StepTimes two = time_steps(g, x, true, o.repeats);
  const StepTimes one = time_steps(g, x, false, o.repeats);
  const double bf16_bytes = static_cast<double>(gather_calls) * static_cast<double>(o.tokens * o.hidden) * 2.0;
  nlohmann::json r = {{"bench", "sp"},
                      {"recipe", o.recipe},
                      {"world", w},
                      {"tokens", o.tokens},
                      {"hidden", o.hidden},
                      {"ffn", o.ffn},
                      {"layers", o.layers},
                      {"device", device.str()},
                      {"validated", valid},
                      {"step_ms", two.step_ms},
                      {"compute_ms", two.compute_ms},
                      {"comm_ms", two.comm_ms},
                      {"comm_hidden_ms", two.hidden_ms},
                      {"comm_hidden_fraction", two.comm_ms > 0 ? two.hidden_ms / two.comm_ms : 0.0},
                      {"one_stream_step_ms", one.step_ms},
                      {"two_stream_gain_ms", one.step_ms - two.step_ms},
                      {"gathers_per_step", gather_calls},
                      {"gather_bytes_per_step", gather_bytes},
                      {"gather_bytes_vs_bf16", bf16_bytes > 0 ? static_cast<double>(gather_bytes) / bf16_bytes : 0.0}};
  bench::print_report(r, o.json);
  return valid ? 0 : 1;
}
}  // namespace

Command add_bench_sp(CLI::App& app) {
  auto o = std::make_shared<SpOpts>();
  CLI::App* sub = app.add_subcommand("sp", "Sequence-parallel LayerNormMLP on W local ranks: compute, comm, overlap");
  sub->add_option("--world", o->world, "W ranks (threads on one device)")->check(CLI::Range(2, 64));
  sub->add_option("--tokens", o->tokens, "T (global; each rank holds T/W)")->check(CLI::PositiveNumber);
  sub->add_option("--hidden", o->hidden, "H")->check(CLI::PositiveNumber);
  sub->add_option("--ffn", o->ffn, "F")->check(CLI::PositiveNumber);
  sub->add_option("--layers", o->layers, "LayerNormMLP layers")->check(CLI::Range(1, 64));
  sub->add_option("--recipe", o->recipe, "precision recipe")
      ->check(CLI::IsMember(bench::recipe_names()));
  sub->add_option("--device", o->device, "auto | cpu | cuda[:N]");
  sub->add_option("--repeats", o->repeats, "timed steps")->check(CLI::Range(1, 1000));
  sub->add_flag("--json", o->json, "print the report as JSON");
  return {sub, [o] { return run_sp_bench(*o); }};
}
}  // namespace te::cli
