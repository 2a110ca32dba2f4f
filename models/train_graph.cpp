#include "models/train_graph.h"

#include <algorithm>

#include "comm/gather.h"
#include "engine/allocator.h"
#include "engine/cuda_graph.h"
#include "engine/error.h"
#include "graph/autograd.h"
#include "models/forward_builder.h"
#include "models/held_values.h"
#include "models/train_ops.h"

namespace te {

struct TrainGraph::Replay {
  explicit Replay(Device device) : pool(device) {}
  Tensor x, target;     // what the capture reads; allocated outside the pool
  CudaMemoryPool pool;  // declared before graph: destroyed after it
  CudaGraph graph;
  int uncaptured = 0;  // steps run before the capture
};

TrainGraph::TrainGraph(RankModel& model, int64_t local_tokens, DType target_dtype, TrainGraphOptions options)
    : RankGraph(model, local_tokens), options_(options), control_(model.ctx().device, model.ctx().stream) {
  RankContext& ctx = model.ctx();
  TE_CHECK_HINT(ctx.training, "the training graph needs a model that keeps training state",
                "build the model with run.mode: train");
  if (options.cuda_graph) {
    TE_CHECK_HINT(options.kind == TrainGraphOptions::Kind::step,
                  "CUDA graph replay of a training graph of another kind",
                  "only the training step (forward, backward, optimizer) is captured");
    check_replay("the training step", options.profile);
    ctx.keep_weight_values = true;
  }
  binding_.model = &model;
  binding_.control = &control_;
  build(target_dtype);
  start(train_value_held_by_binding, options_.overlap, [this](ExecOptions& eo, const Plan& plan) {
    eo.profile = options_.profile;
    // Each held value goes back to the allocator once its last reader has run (models/held_values.h), so the step
    // holds what the layer-by-layer order would, and no more than --explain counts.
    HeldValues held = plan_held_values(graph_, plan, binding_);
    release_after_ = std::move(held.release_after);
    held_peak_bytes_ = held.peak_bytes;
    eo.env.after_node = [this](int node, const Stream&) {
      for (int v : release_after_[static_cast<size_t>(node)]) binding_.held[static_cast<size_t>(v)].reset();
    };
  });
  if (options.cuda_graph) {
    replay_ = std::make_unique<Replay>(ctx.device);
    const ValueType xt = input_type();
    replay_->x = Tensor::empty(xt.shape, xt.dtype, ctx.device, ctx.stream);
    replay_->target = Tensor::empty(xt.shape, target_dtype, ctx.device, ctx.stream);
  }
}

TrainGraph::~TrainGraph() {
  if (!replay_) return;
  try {
    model_.ctx().stream.synchronize();  // no replay in flight while its graph and buffers go
  } catch (...) {  // a destructor must not throw; the error belongs to the caller's next synchronisation
  }
}

bool TrainGraph::captured() const { return replay_ && replay_->graph.captured(); }

void TrainGraph::build(DType target_dtype) {
  RankContext& ctx = model_.ctx();
  std::vector<std::pair<int, GemmOperand>> no_held_params;  // training keeps every weight's master
  ForwardBuilder fb{GraphBuilder(graph_), ctx, params_, no_held_params, true};
  ValueType xt = input_type(), tt = xt;
  tt.dtype = target_dtype;
  input_ = fb.b.input("x", xt);
  // Every weight is quantized before the first activation exists: a weight's model-dtype copy and its quantized
  // copies coexist only while it is quantized, and at that point nothing else of the step is alive yet.
  if (model_.quantizes_weights()) fb.b.add(train_op(TrainOp::quantize_weights), {input_}, {}, "weights.quantize");
  if (options_.kind == TrainGraphOptions::Kind::forward) {
    output_ = fb.model(model_, input_);
    fb.b.mark_output(output_);
    return;
  }
  target_ = fb.b.input("target", tt);
  const int out = fb.model(model_, input_);
  const bool eval = options_.kind == TrainGraphOptions::Kind::eval;
  // An eval forward leaves the delayed-scaling history as it was: no update after it.
  const std::vector<int> loss =
      fb.b.add(train_op(TrainOp::mse_loss), {out, target_}, {{"sp", ctx.gathers()}, {"update_scales", !eval}}, "loss",
               {"sum", "grad"});
  if (eval) {
    int sum = loss[0];
    if (ctx.gathers()) sum = fb.b.add1(train_op(TrainOp::sum_all_reduce), {sum}, {}, "loss.all_reduce");
    fb.b.add1(train_op(TrainOp::loss_gate), {sum, loss[1]}, {}, "loss.gate");
    return;
  }
  BackwardOptions bo;
  bo.accumulate = &model_op(ModelOp::residual_add);
  bo.all_reduce = &train_op(TrainOp::sum_all_reduce);
  // Under SP replicated parameters (norms, row-parallel biases) saw this rank's tokens only: sum over the group.
  bo.group_size = ctx.gathers() ? ctx.world() : 1;
  const BackwardResult grads = build_backward(graph_, loss[0], bo);
  const bool update = options_.kind == TrainGraphOptions::Kind::step;
  // A GEMM weight whose update allocates nothing is stepped on the side stream as soon as its gradient is final and
  // every node that reads it (its forward GEMM, its dgrad) has run, beside the rest of the backward. The optimizer
  // node steps the other parameters; it reads every final gradient, so it runs once the backward is done.
  std::vector<int64_t> apart;
  const std::vector<int64_t> in_place = update ? model_.weights_stepping_apart() : std::vector<int64_t>{};
  std::vector<int> final_grads;
  for (const auto& [param, grad] : grads.grads) {
    final_grads.push_back(grad);
    const std::string name = graph_.value(param).name;
    const std::vector<int> readers = graph_.value(param).consumers;
    const auto i = static_cast<int64_t>(model_.param_index(name));
    if (std::find(in_place.begin(), in_place.end(), i) == in_place.end()) continue;
    const int node = graph_.num_nodes();
    fb.b.add(train_op(TrainOp::weight_step), {grad}, {{"param", i}}, name + ".step");
    for (int reader : readers) fb.b.order_after(node, reader);
    apart.push_back(i);
  }
  fb.b.add(train_op(TrainOp::optimizer), final_grads, {{"update", update}, {"apart", apart}}, "optimizer");
}

float TrainGraph::run(const Tensor& x, const Tensor& target) {
  // Bound each step: the caller's tensors (names the value and the fix on a shape mismatch).
  exec_->bind(input_, x.is_contiguous() ? x : x.contiguous());
  if (target_ >= 0) exec_->bind(target_, target.is_contiguous() ? target : target.contiguous());
  // The scalars only an updating optimizer reads, on the executor's compute stream before its first node.
  if (options_.kind == TrainGraphOptions::Kind::step) control_.upload(model_.ctx().stream);
  exec_->run();
  exec_->synchronize();
  for (auto& v : binding_.held) v.reset();
  return control_.loss();
}

float TrainGraph::replayed_step(const Tensor& x, const Tensor& target) {
  Replay& r = *replay_;
  const Stream& st = model_.ctx().stream;
  copy_into_captured(r.x, x, "replayed training step: input", st);
  copy_into_captured(r.target, target, "replayed training step: target", st);
  if (!r.graph.captured()) {
    if (r.uncaptured++ == 0) return run(r.x, r.target);  // allocates what outlives the capture, outside the pool
    PoolScope scope(r.pool);
    if (r.uncaptured <= 3) return run(r.x, r.target);  // two steps fill the pool
    r.graph.capture(
        st,
        [&] {
          control_.upload(st);
          exec_->run();
        },
        "the training step");
    for (auto& v : binding_.held) v.reset();
  }
  r.graph.launch(st);
  st.synchronize();
  // The replay changed the weights with no host code running: a quantized copy made since the capture (an eval or
  // a forward in between) is stale now.
  model_.invalidate_weight_caches();
  return control_.loss();
}

float TrainGraph::train_step(const Tensor& x, const Tensor& target, int64_t step, double lr) {
  TE_CHECK(options_.kind == TrainGraphOptions::Kind::step || options_.kind == TrainGraphOptions::Kind::gradient,
           "train_step on a graph without a backward");
  if (options_.kind == TrainGraphOptions::Kind::step) control_.set_scalars(model_.spec().run.optimizer, step, lr);
  model_.begin_grad_step();  // no zero fill: each gradient's first contribution writes it
  return replay_ ? replayed_step(x, target) : run(x, target);
}

void TrainGraph::run_leaving_state(const Tensor& x, const Tensor& target) {
  const RankModel::InputScales saved = model_.snapshot_input_scales();
  auto put_back = [&] {
    model_.restore_input_scales(saved);
    model_.discard_saved();  // the forward saved what a backward would read
  };
  try {
    (void)run(x, target);
  } catch (...) {
    put_back();
    throw;
  }
  put_back();
}

float TrainGraph::eval_loss(const Tensor& x, const Tensor& target) {
  TE_CHECK(options_.kind == TrainGraphOptions::Kind::eval, "eval_loss on a graph of another kind");
  run_leaving_state(x, target);
  return control_.loss();
}

Tensor TrainGraph::forward(const Tensor& x) {
  TE_CHECK(options_.kind == TrainGraphOptions::Kind::forward, "forward on a graph of another kind");
  run_leaving_state(x, Tensor());
  return exec_->tensor(output_);
}

}  // namespace te
