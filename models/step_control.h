// What a training step exchanges with the host, kept in device memory so the step has no host decision inside it:
// the optimizer's scalars (set on the host before the step, copied to the device as its first operation), and the
// loss with the flag that skips the update (written on the device by the loss node; the loss is copied back to
// page-locked memory at once and read after the step). A non-finite loss no longer stops the backward from the host:
// the backward runs, and the flag turns the optimizer into "zero the gradients" and leaves the delayed-scaling state
// as it was (graph/optimizer.h OptimizerStep, ops/quant Quantizer::update_scale_after_step). The step then needs no
// host synchronisation before its end, and one captured step (models/train_graph.h cuda_graph) replays every later one
// with its own step number and learning rate.
#pragma once
#include <cstdint>

#include "engine/pinned_host.h"
#include "engine/tensor.h"
#include "graph/optimizer.h"
#include "models/spec.h"

namespace te {

class StepControl {
 public:
  StepControl(Device device, const Stream& stream);

  // Host, before the step is enqueued (and after the previous one has finished): the optimizer scalars of `step`
  // (1-based) at learning rate `lr`.
  void set_scalars(const OptimizerSpec& optimizer, int64_t step, double lr);
  // Enqueued first in a step: the scalars to the device.
  void upload(const Stream& stream);
  // Enqueued by the loss node: loss = sum / divisor and the skip flag on the device, and the loss to the host.
  void gate(const Tensor& sum, double divisor, const Stream& stream);
  // The loss of the last step, valid once it has finished.
  float loss() const { return *host_loss_; }

  const OptimizerScalars* scalars() const { return static_cast<const OptimizerScalars*>(scalars_.data_ptr()); }
  const int32_t* skip() const { return skip_.data<int32_t>(); }  // where the kernels read the flag

 private:
  PinnedHostBuffer host_;
  Tensor host_scalars_;           // u8 view of host_
  float* host_loss_ = nullptr;    // in host_, after the scalars
  Tensor scalars_, loss_, skip_;  // on the device
};

}  // namespace te
