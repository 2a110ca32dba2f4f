// Quantizer = format + parameters (+ its delayed-scaling state); each call names the usages it wants. It answers
// can_gather_quantized(local_shape, usages) per docs/NUMERICS.md §4 and turns high-precision tensors (any shape, any
// strides, f32/bf16/f16) into QuantizedTensors, producing every requested usage in one pass. CPU reference and CUDA
// kernels are reached through one dispatch table keyed by (format, device).
#pragma once
#include <cstdint>
#include <functional>
#include <optional>

#include "engine/tensor.h"
#include "ops/quant/delayed_scaling.h"
#include "ops/quant/quant_kernels.h"
#include "ops/quant/quantized_tensor.h"

namespace te {

enum class ScalingKind : uint8_t { none, delayed, current };  // how per-tensor fp8 picks its scale
enum class AmaxAlgo : uint8_t { max, most_recent };

struct QuantizerConfig {
  QuantFormat format = QuantFormat::fp8_block_1d;
  DType data_dtype = DType::fp8_e4m3;          // E4M3, or E5M2 (gradients under hybrid / MXFP8 grads)
  ScalingKind scaling = ScalingKind::current;  // fp8_per_tensor only
  bool pow2_scales = false;                    // block formats default true (set by the recipe)
  float eps = 0.f;
  // delayed scaling
  int amax_history_len = 1024;
  AmaxAlgo amax_algo = AmaxAlgo::max;
  int margin = 0;
  // NVFP4
  bool random_hadamard = false;      // RHT on the column-wise copy
  bool stochastic_rounding = false;  // counter-based Philox, seeded below
  uint64_t seed = 0;
};

// Reduces an fp32 amax tensor in place across a group (MAX), e.g. an all-reduce; set by comm/ around a gather.
using AmaxReducer = std::function<void(Tensor& amax, const Stream& stream)>;

class Quantizer {
 public:
  explicit Quantizer(QuantizerConfig config);
  const QuantizerConfig& config() const { return config_; }

  // §4: can a local shard of this shape, quantized on its own rank, be gathered along dim 0 and equal quantizing
  // the gathered tensor? Row-wise 1D: always. Column-wise or 2D: local M a multiple of the block. Per-tensor: yes.
  bool can_gather_quantized(const Shape& local_shape, Usage usages) const;

  // Quantize `x` into the copies `usages` names (one pass for both). Per-tensor current scaling and NVFP4 compute amax
  // first, pass it through `reduce` (when given) so every rank uses one scale, then cast. Delayed scaling uses the
  // stored scale and folds max|x| into the step amax. With `images`, the same pass also writes each copy's exact
  // image in that form (QuantizedTensor::rowwise_image / columnwise_image).
  QuantizedTensor quantize(const Tensor& x, Usage usages, const Stream& stream = Stream(),
                           const AmaxReducer& reduce = {}, std::optional<ImageSpec> images = std::nullopt);

  // Fused activation → quantize: the bytes of quantize(act(x) rounded to x's dtype, usages, reduce) in one pass over
  // x (NVFP4: two, the first for the per-tensor amax of act(x), which `reduce` then takes over the group). Available
  // on a contiguous 16-bit CUDA tensor for FP8 block 1D / MXFP8 whose last dim is a multiple of 8, and for NVFP4 1D
  // row-wise whose last dim is a multiple of 16 (can_fuse_activation); callers fall back to act then quantize()
  // otherwise. A training forward asks for both
  // copies (the column-wise one is what the layer's wgrad reads), so the activation itself need not be kept. With
  // `act_out` (row-wise only), the same pass also writes act(x) in x's dtype there: the bytes act_forward writes.
  bool can_fuse_activation(const Tensor& x, Usage usages = Usage::rowwise) const;
  // The same for a contiguous, 16-byte-aligned tensor of this shape, dtype and device (e.g. a planned buffer).
  bool can_fuse_activation(const Shape& shape, DType dtype, Device device, Usage usages) const;
  QuantizedTensor quantize_activation(QuantPreAct act, const Tensor& x, Usage usages, const Stream& stream = Stream(),
                                      const AmaxReducer& reduce = {}, Tensor* act_out = nullptr,
                                      std::optional<ImageSpec> images = std::nullopt);

  // Delayed scaling: after a step, reduce the step amax (MAX over the group via `reduce`), push it into the
  // history and recompute the scale (docs/NUMERICS.md §2). No-op for other scalings. `skip` (int32 [1] where the
  // kernel reads it, or null): a non-zero flag drops the step amax instead (a training step skipped on the device).
  void update_scale_after_step(const Stream& stream = Stream(), const AmaxReducer& reduce = {},
                               const int32_t* skip = nullptr);
  // The delayed-scaling state (ops/quant/delayed_scaling.h) on the quantizer's device; undefined until the first
  // delayed quantize.
  const DelayedScaling& delayed() const { return delayed_; }
  // Sets it to a copy of `state` on `device` (a checkpoint's, or a snapshot taken before an eval): the quantizer then
  // continues exactly as the one it came from. State already on `device` is overwritten in place (its buffers keep
  // their addresses). A te::Error when its shapes are not this config's.
  void set_delayed(const DelayedScaling& state, Device device, const Stream& stream = Stream());

  // Where a cast into `qt` writes, for a producer that computes a tensor and quantizes it in the same pass
  // (graph/optimizer_quantize.h): qt is a copy this quantizer made of a contiguous 2-D tensor, and its data and scale
  // buffers are written again in place, every usage it holds (not its images; the caller checks it has none). The
  // input's data pointer is null: the producer supplies the values. Block formats only (no amax to take first).
  struct CastTarget {
    QuantInput in;  // M, K, the original dtype, contiguous strides
    QuantParams params;
    QuantOutputs out;
  };
  CastTarget cast_target(const QuantizedTensor& qt) const;

 private:
  QuantizerConfig config_;
  QuantParams params(Usage usages, QuantPreAct act) const;
  void ensure_delayed_state(Device device, const Stream& stream);
  QuantizedTensor quantize_impl(const Tensor& x, Usage usages, const Stream& stream, const AmaxReducer& reduce,
                                QuantPreAct act, Tensor* act_out, const std::optional<ImageSpec>& images);
  DelayedScaling delayed_;
};

}  // namespace te
