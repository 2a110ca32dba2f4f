// Communicator base: Work state, argument validation shared by the backends, convenience launches.
#include "comm/communicator.h"

#include <cstdlib>
#include <mutex>

#include "engine/error.h"

namespace te {

std::string_view reduce_op_name(ReduceOp op) { return op == ReduceOp::sum ? "sum" : "max"; }
std::string_view collective_name(CollectiveKind k) {
  switch (k) {
    case CollectiveKind::all_gather: return "all_gather";
    case CollectiveKind::reduce_scatter: return "reduce_scatter";
    case CollectiveKind::all_reduce: return "all_reduce";
  }
  return "?";
}

std::chrono::milliseconds default_comm_timeout() {
  if (const char* v = std::getenv("TEENGINE_COMM_TIMEOUT_MS")) {
    char* end = nullptr;
    long long ms = std::strtoll(v, &end, 10);
    if (end != v && ms > 0) return std::chrono::milliseconds(ms);
  }
  return std::chrono::milliseconds(300000);
}

struct Work::State {
  std::mutex mu;
  std::function<void()> complete;
  std::vector<std::function<void()>> steps;
  bool waited = false;
};

Work::Work(std::function<void()> complete) : state_(std::make_shared<State>()) {
  state_->complete = std::move(complete);
}

void Work::then(std::function<void()> step) {
  if (!state_) state_ = std::make_shared<State>();
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->steps.push_back(std::move(step));
}

bool Work::waited() const {
  if (!state_) return true;
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->waited;
}

void Work::wait() {
  if (!state_) return;
  std::lock_guard<std::mutex> lock(state_->mu);
  if (state_->waited && state_->steps.empty()) return;
  if (!state_->waited) {
    if (state_->complete) state_->complete();
    state_->waited = true;
  }
  // Steps added after an earlier wait() run at the next wait(); each runs once.
  std::vector<std::function<void()>> steps = std::move(state_->steps);
  state_->steps.clear();
  for (auto& s : steps) s();
}

Communicator::Communicator() : timeout_(default_comm_timeout()) {}

void Communicator::validate(std::span<const Collective> ops) const {
  const int W = size();
  for (size_t i = 0; i < ops.size(); ++i) {
    const Collective& c = ops[i];
    const std::string where = TE_STR_(backend() << " rank " << rank() << "/" << W << ", " << collective_name(c.kind)
                                                << " #" << i);
    TE_CHECK(c.output.defined(), where << ": output is undefined");
    TE_CHECK_HINT(c.output.is_contiguous() && c.output.device() == device(),
                  where << ": output " << c.output.str() << " must be contiguous on " << device().str(),
                  "allocate outputs with Tensor::empty on the communicator's device");
    if (c.kind == CollectiveKind::all_reduce) {
      TE_CHECK_HINT(is_high_precision(c.output.dtype()),
                    where << ": reductions support f32/bf16/f16, got " << c.output.str(), "reduce in f32");
      continue;
    }
    TE_CHECK(c.input.defined(), where << ": input is undefined");
    TE_CHECK_HINT(c.input.is_contiguous() && c.input.device() == device(),
                  where << ": input " << c.input.str() << " must be contiguous on " << device().str(),
                  "call contiguous() and move the tensor to the communicator's device first");
    TE_CHECK(c.input.dtype() == c.output.dtype(),
             where << ": input " << c.input.str() << " and output " << c.output.str() << " differ in dtype");
    if (c.kind == CollectiveKind::all_gather) {
      TE_CHECK_HINT(c.output.nbytes() == c.input.nbytes() * W,
                    where << ": output " << c.output.str() << " must hold " << W << " x input " << c.input.str(),
                    "allocate the output as [W·n, …]");
    } else {
      TE_CHECK_HINT(is_high_precision(c.input.dtype()),
                    where << ": reductions support f32/bf16/f16, got " << c.input.str(), "reduce in f32");
      TE_CHECK_HINT(c.input.numel() == c.output.numel() * W,
                    where << ": input " << c.input.str() << " must hold " << W << " x output " << c.output.str(),
                    "the first dimension must divide by the world size");
    }
  }
}

void Communicator::count(std::span<const Collective> ops) {
  metrics_.launches += 1;
  metrics_.collectives += static_cast<int64_t>(ops.size());
}

Work Communicator::all_gather(const Tensor& input, const Tensor& output, const Stream& stream) {
  const Collective c{CollectiveKind::all_gather, input, output, ReduceOp::sum};
  return launch(std::span<const Collective>(&c, 1), stream);
}
Work Communicator::reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op, const Stream& stream) {
  const Collective c{CollectiveKind::reduce_scatter, input, output, op};
  return launch(std::span<const Collective>(&c, 1), stream);
}
Work Communicator::all_reduce(const Tensor& tensor, ReduceOp op, const Stream& stream) {
  const Collective c{CollectiveKind::all_reduce, Tensor(), tensor, op};
  return launch(std::span<const Collective>(&c, 1), stream);
}

}  // namespace te
