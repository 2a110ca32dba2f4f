// Engine::explain: the plan `teengine run --explain` prints (spec, placement, gather paths, forward plan, memory).
#include <algorithm>
#include <iomanip>
#include <sstream>

#include "comm/gather.h"
#include "engine/allocator.h"
#include "models/engine_state.h"
#include "models/model_ops.h"
#include "models/recipe.h"
#include "ops/attention/attention.h"

namespace teengine {

std::string Engine::explain() const {
  const Impl& m = *impl_;
  std::ostringstream o;
  o << te::describe_spec(m.spec());
  const int w = m.world();
  const bool sp = m.spec().parallel.sequence_parallel && w > 1;
  const int64_t local_tokens = m.local_tokens(m.spec().run.tokens);
  te::RecipeConfigs rc = te::recipe_configs(m.spec().precision, m.spec().run.seed);
  if (m.group->distributed())
    o << "device " << m.device().str() << ", rank " << m.group->placement.rank << " of " << w << " (one process per rank, "
      << te::comm_backend_name(m.group->placement.backend) << ")\n";
  else
    o << "device " << m.device().str() << ", " << w << " rank(s) as threads on the local communicator\n";
  for (const te::Branch& br : m.spec().model.block)
    for (const te::LayerSpec& l : br)
      if (l.kind == te::LayerKind::attention)
        o << "attention '" << l.name << "': "
          << te::attention_kernels(m.device(), m.spec().model.dtype, l.attention.head_dim) << "\n";
  o << "gathers per layer (local shard [" << local_tokens << ", " << m.spec().model.hidden << "]):\n";
  // One line per gather and usage, from the same plan the gather itself makes (gather_along_first_dim).
  auto line = [&](const std::string& what, te::Usage usages, const std::optional<te::QuantizerConfig>& qc) {
    std::optional<te::Quantizer> q;
    if (qc) q.emplace(*qc);
    te::GatherPlan p = te::plan_gather({local_tokens, m.spec().model.hidden}, q ? &*q : nullptr, usages, w);
    if (!qc) {
      o << "  " << what << ": " << te::gather_route_name(p.tensor.path) << " ("
        << te::dtype_name(m.spec().model.dtype) << ")\n";
      return;
    }
    for (te::Usage u : {te::Usage::rowwise, te::Usage::columnwise}) {
      if (!te::has_usage(usages, u)) continue;
      const te::UsagePath& up = p.of(u);
      o << "  " << what << ", " << te::usage_name(u) << ": " << te::gather_route_name(up.path);
      if (!up.reason.empty()) o << " — " << up.reason;
      o << "\n";
    }
  };
  if (!sp) {
    o << "  none (no sequence parallelism)\n";
  } else {
    line("column-parallel input, forward", te::Usage::rowwise, rc.input);
    if (m.spec().run.mode == te::RunMode::train) {
      line("column-parallel input, backward re-gather", te::Usage::columnwise, rc.input);
      line("row-parallel output gradient, backward", te::Usage::both, rc.grad);
    }
  }
  int64_t arena = 0, held = 0;
  const char* order = m.overlaps() ? "collectives on the comm stream" : "run.executor: eager, every node in order";
  if (m.spec().run.mode == te::RunMode::infer) {
    o << "rank 0 forward plan (" << local_tokens << " local tokens; " << order << "):\n";
    if (m.graphs[0] && m.graphs[0]->local_tokens() == local_tokens) {
      o << m.graphs[0]->explain();
      arena = m.graphs[0]->plan().arena_bytes;
    } else {
      te::ModelGraph g(*m.group->models[0], local_tokens, m.forward_options());  // planning allocates the arena only
      o << g.explain();
      arena = g.plan().arena_bytes;
    }
  } else {
    o << "rank 0 training step plan (" << local_tokens << " local tokens; forward, backward, optimizer; " << order
      << "):\n";
    const te::TrainGraph* planned = m.train_graphs[0].get();
    std::unique_ptr<te::TrainGraph> fresh;  // planning allocates the arena only
    if (!planned || planned->local_tokens() != local_tokens)
      planned = (fresh = std::make_unique<te::TrainGraph>(*m.group->models[0], local_tokens, m.spec().model.dtype,
                                                          m.train_options(te::TrainGraphOptions::Kind::step)))
                    .get();
    o << planned->explain();
    arena = planned->plan().arena_bytes;
    held = planned->held_peak_bytes();
  }
  // What rank 0 holds, by kind; communication buffers come from the allocator's cache.
  const te::RankModel::Memory mem = m.group->models[0]->memory();
  auto mib = [](int64_t b) { return TE_STR_(std::fixed << std::setprecision(2) << static_cast<double>(b) / (1 << 20) << " MiB"); };
  const int64_t workspace = m.device().is_cuda() ? m.group->ctxs[0]->gemm->workspace_bytes() : 0;
  o << "memory of rank 0 by kind: weights " << mib(mem.weights) << " (model dtype + quantized caches)"
    << (mem.weight_images ? ", their GEMM images " + mib(mem.weight_images) : "") << ", master weights "
    << mib(mem.master_weights) << ", gradients " << mib(mem.gradients) << ", optimizer state "
    << mib(mem.optimizer_state)
    << (mem.host_weights ? ", model-dtype weights in host memory (for saving) " + mib(mem.host_weights) : "")
    << ", GEMM workspace " << mib(workspace) << ", activations " << mib(arena) << " (planned arena)";
  if (m.spec().run.mode == te::RunMode::train) {
    // The step's planned peak: what the model holds, the arena, the values the kernels allocate outside it at their
    // peak, the step's input and target, and the GEMM workspace where one is allocated (the CPU GEMM has none).
    const int64_t inputs = 2 * local_tokens * m.spec().model.hidden * te::dtype_bits(m.spec().model.dtype) / 8;
    // cuDNN's attention backward takes its workspace for the length of the call, one layer at a time.
    int64_t attention = 0;
    for (const te::Branch& br : m.spec().model.block)
      for (const te::LayerSpec& l : br)
        if (l.kind == te::LayerKind::attention) {
          attention = std::max(attention, te::attention_backward_workspace_bytes(
                                              m.device(), te::model_ops::rank_attention_layout(l.attention, w),
                                              m.spec().run.tokens, m.spec().model.dtype, l.attention.deterministic));
        }
    const int64_t planned = mem.weights + mem.weight_images + mem.master_weights + mem.gradients + mem.optimizer_state +
                            workspace + arena + held + inputs + attention;
    o << " + " << mib(held) << " (quantized activations and gradients, loss gradient: outside the arena, at their "
      << "peak), step input and target " << mib(inputs)
      << (attention ? ", cuDNN attention backward workspace " + mib(attention) : "") << "; planned step peak "
      << mib(planned);
  }
  o << "; device allocator now " << mib(te::memory_stats(m.device()).current_bytes) << ", peak "
    << mib(te::memory_stats(m.device()).peak_bytes) << "\n";
  return o.str();
}
}  // namespace teengine
