// Optimizers over fp32 master weights, as plain functions over Tensors. State tensors (momentum, Adam moments) are
// fp32, shaped like the parameter, owned by the caller, zero-initialised before the first step. Gradients are
// f32/bf16/f16 (read as f32). All tensors contiguous on one device; the launch is enqueued on `stream`.
// The CPU reference (optimizer_ref.cpp) and the CUDA kernel (optimizer.cu) evaluate the same expression in the same
// order with single roundings (no fused multiply-add), so they agree bit for bit.
//
// A model's step updates every parameter at once (multi-tensor): one pass reads master, gradient and state and
// writes master, state and the model-dtype copy the kernels read, in as few launches as the kernel's argument table
// allows, instead of one launch per parameter plus a cast pass per parameter.
#pragma once
#include <cstdint>
#include <span>

#include "engine/stream.h"
#include "engine/tensor.h"

namespace te {

// One parameter of a multi-tensor step. `state2` is AdamW's second moment (undefined for SGD). `value`, when
// defined, is the parameter's model-dtype copy (bf16/f16/f32, the master's shape), written from the updated master
// in the same pass with the rounding cast() uses.
struct ParamSlot {
  Tensor master, grad, state1, state2, value;
};

// SGD with momentum (PyTorch semantics, dampening 0):
//   g = grad + weight_decay * p;  buf = momentum * buf + g;  p = p - lr * buf
// Hyper-parameters are doubles, rounded to f32 once per step (as frameworks pass Python floats to f32 kernels).
struct SgdConfig {
  double lr = 0.01;
  double momentum = 0.9;
  double weight_decay = 0.0;
};
void sgd_momentum_step(Tensor& param, const Tensor& grad, Tensor& momentum_buf, const SgdConfig& config,
                       const Stream& stream = Stream());
void sgd_momentum_step(std::span<const ParamSlot> slots, const SgdConfig& config, const Stream& stream = Stream());

// AdamW (decoupled weight decay), `step` counts from 1:
//   p = p * (1 - lr * weight_decay)
//   m = beta1 * m + (1 - beta1) * g;  v = beta2 * v + (1 - beta2) * g * g
//   p = p - lr * (m / bc1) / (sqrt(v / bc2) + eps),  bc1 = 1 - beta1^step, bc2 = 1 - beta2^step (every scalar computed
//   in double and rounded to f32 once per step)
struct AdamWConfig {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
};
void adamw_step(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, int64_t step,
                const AdamWConfig& config, const Stream& stream = Stream());
void adamw_step(std::span<const ParamSlot> slots, int64_t step, const AdamWConfig& config,
                const Stream& stream = Stream());

// The per-step scalars of both optimizers, computed once on the host so CPU and CUDA see identical values.
struct SgdScalars {
  float lr, momentum, weight_decay;
};
struct AdamWScalars {
  float lr, beta1, one_minus_beta1, beta2, one_minus_beta2, eps, decay;  // decay = 1 - lr * weight_decay
  float bc1, bc2;
};
enum class OptimizerKind : int32_t { sgd_momentum, adamw };
struct OptimizerScalars {  // the kind's member is read
  SgdScalars sgd;
  AdamWScalars adamw;
};
OptimizerScalars adamw_scalars(int64_t step, const AdamWConfig& config);  // step counts from 1
OptimizerScalars sgd_scalars(const SgdConfig& config);

// A multi-tensor step that reads its scalars from memory the kernel reads (device memory on a GPU, host memory on
// the CPU) instead of from its arguments, so that one captured launch (a CUDA graph) replays with each step's values,
// and that a flag found on the device — a non-finite loss — can turn into a skipped step without the host looking:
//   kind     which update (the slots carry its state);
//   scalars  one OptimizerScalars of that kind, written before the step runs;
//   skip     int32 [1] or null. Non-zero: masters and states stay as they are, every gradient becomes 0 and every
//            model-dtype copy is written from its master (so a copy released after quantizing is whole again);
//   update   false: the step only does the skip's part (a step that finishes gradients without applying them).
struct OptimizerStep {
  OptimizerKind kind = OptimizerKind::adamw;
  const OptimizerScalars* scalars = nullptr;
  const int32_t* skip = nullptr;
  bool update = true;
};
void optimizer_step(std::span<const ParamSlot> slots, const OptimizerStep& step, const Stream& stream = Stream());

namespace detail {
// Raw pointers of one slot, as the CPU loop and the CUDA kernel's argument table take them.
struct SlotPtrs {
  float* p;
  const void* g;
  float* s1;
  float* s2;   // AdamW
  void* value; // null: no model-dtype copy
  int64_t n;
  DType gt, vt;
};
void optimizer_cpu(std::span<const SlotPtrs> slots, const OptimizerStep& step);
void optimizer_cuda(std::span<const SlotPtrs> slots, const OptimizerStep& step, const Stream& stream);
}  // namespace detail

}  // namespace te
