// Test support: a Communicator that forwards everything to another one except a chosen sum reduction, which it
// turns into a no-op — the mutation a parity test must catch. Each rank wraps its own communicator with the same
// `drop` index; since every rank launches the same collectives in the same order, all ranks drop the same one and
// the group stays in step. A dropped reduce_scatter leaves each rank its own partial (its slice of the input); a
// dropped all_reduce leaves the tensor as it was. MAX reductions (amaxes) are never dropped or counted.
#pragma once
#include <memory>
#include <vector>

#include "comm/communicator.h"

namespace te::testing {

class DroppingCommunicator final : public Communicator {
 public:
  // `drop`: index (0-based, in launch order on this rank) of the sum reduction to skip; negative: drop none.
  DroppingCommunicator(std::unique_ptr<Communicator> inner, int drop) : inner_(std::move(inner)), drop_(drop) {
    set_timeout(inner_->timeout());
  }
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  Device device() const override { return inner_->device(); }
  std::string_view backend() const override { return inner_->backend(); }
  void abort(const std::string& reason) override { inner_->abort(reason); }

  Work launch(std::span<const Collective> ops, const Stream& stream = Stream()) override {
    std::vector<Collective> kept;
    for (const Collective& c : ops) {
      const bool sum = c.kind != CollectiveKind::all_gather && c.op == ReduceOp::sum;
      if (sum && sums_++ == drop_) {
        dropped_ = true;
        if (c.kind == CollectiveKind::reduce_scatter) {
          Tensor out = c.output;  // a handle on the caller's output
          out.copy_from(c.input.narrow(0, rank() * out.size(0), out.size(0)), stream);
        }
        continue;
      }
      kept.push_back(c);
    }
    count(ops);
    return kept.empty() ? Work() : inner_->launch(kept, stream);
  }

  int sum_reductions() const { return sums_; }  // seen so far (dropped or not)
  bool dropped() const { return dropped_; }

 private:
  std::unique_ptr<Communicator> inner_;
  int drop_;
  int sums_ = 0;
  bool dropped_ = false;
};

// Wraps every communicator of a group (see make_local_group) so that each drops its `drop`-th sum reduction.
inline std::vector<std::unique_ptr<Communicator>> drop_one_reduction(std::vector<std::unique_ptr<Communicator>> comms,
                                                                     int drop) {
  for (auto& c : comms) c = std::make_unique<DroppingCommunicator>(std::move(c), drop);
  return comms;
}

}  // namespace te::testing
