// The kernel-level interface behind Quantizer: raw pointers and sizes, one entry per (format, device kind) in a
// dispatch table. Launchers take the stream last. Pointers are on the device named by the table entry.
#pragma once
#include <cstdint>

#include "engine/device.h"
#include "engine/dtype.h"
#include "engine/int_math.h"
#include "engine/stream.h"
#include "ops/quant/format.h"
#include "ops/quant/quant_layout.h"

namespace te {

// The high-precision input as a 2-D strided view [M, K] (leading dims collapsed), strides in elements.
// The tile of the fast column-wise / 2D kernels (quant_tile.cuh, NVFP4's column-wise kernel), and whether one
// launch covers K columns: the grid's second dimension holds at most 65535 tiles.
constexpr int kQuantTile = 128;
inline bool quant_tile_grid_fits(int64_t K) { return ceil_div(K, kQuantTile) <= 65535; }

struct QuantInput {
  const void* data = nullptr;
  DType dtype = DType::bf16;
  int64_t M = 0, K = 0;
  int64_t stride_m = 0, stride_k = 1;
};

// An activation applied to each input element (result rounded to the input dtype) before quantizing: the fused
// activation → quantize of an MLP's FC2 input. Only the CUDA fast path (quantize_fast.h) implements it.
enum class QuantPreAct : uint8_t { none, gelu, relu };

struct QuantParams {
  QuantFormat format = QuantFormat::fp8_block_1d;
  DType data_dtype = DType::fp8_e4m3;
  bool rowwise = false, columnwise = false;
  bool pow2 = false;
  float eps = 0.f;
  bool rht = false;  // NVFP4 1D: Hadamard on the column-wise copy
  bool sr = false;   // NVFP4: stochastic rounding
  uint64_t seed = 0;
  // Per-tensor fp8: the scale to use (delayed scaling), or null to derive it from *amax (current scaling).
  const float* scale = nullptr;
  QuantPreAct pre_act = QuantPreAct::none;
};

struct QuantCopyOut {
  uint8_t* data = nullptr;  // null: copy not requested
  void* scale_inv = nullptr;
  CopyLayout layout;
};

struct QuantOutputs {
  QuantCopyOut row, col;
  // Per-tensor fp8: amax of x (input to the cast). NVFP4: global amax of each copy (column-wise after RHT).
  const float* row_amax = nullptr;
  const float* col_amax = nullptr;
  // Fused activation only: when set, the activation as rounded to x's dtype, [M, K] contiguous (what act_forward
  // would have written; a training forward keeps it for the backward).
  void* act_out = nullptr;
  // When set: each copy's exact image, [M, K] contiguous in image.dtype whatever the copy's orientation — the value
  // a dequantization of that copy returns, NVFP4 with its per-tensor factor only when image.tensor_factor; for a
  // Hadamard-transformed copy the values as stored (the transform not undone).
  void* row_image = nullptr;
  void* col_image = nullptr;
  ImageSpec image;
};

// amax_out[0] = max(amax_out[0], max|x|) (the row-wise/plain amax); when `col_amax_out` is given (NVFP4 with
// RHT) also col_amax_out[0] = max(col_amax_out[0], max|RHT(xᵀ)|). Deterministic (max is order-independent).
using QuantAmaxFn = void (*)(const QuantInput& x, const QuantParams& p, float* amax_out, float* col_amax_out,
                             const Stream& stream);
// Writes every requested copy in one pass. Padding of the scale tensors must already be zero.
using QuantCastFn = void (*)(const QuantInput& x, const QuantParams& p, const QuantOutputs& out,
                             const Stream& stream);
// out [M, K] contiguous, dtype out_dtype, from one copy (row: layout of the row-wise copy, else column-wise).
struct DequantArgs {
  QuantFormat format;
  DType data_dtype;
  const uint8_t* data;
  const void* scale_inv;
  const float* amax;  // NVFP4: the copy's global amax
  CopyLayout layout;
  bool columnwise;
  bool rht;
  int64_t M, K;
};
using DequantFn = void (*)(const DequantArgs& a, void* out, DType out_dtype, const Stream& stream);
// dst[0] = max(dst[0], src[0]), and helpers for the delayed-scaling state.
using FoldMaxFn = void (*)(float* dst, const float* src, const Stream& stream);

struct DelayedUpdateArgs {
  float* history;       // [len]
  int64_t* count;       // entries pushed so far (the next slot is count % len)
  float* step_amax;     // reset to 0 after the update
  float* scale;         // updated in place
  const int32_t* skip;  // null, or a flag: non-zero drops the step amax and leaves history and scale (a skipped step)
  int len;
  bool most_recent;
  float fmt_max;
  int margin;
};
using DelayedUpdateFn = void (*)(const DelayedUpdateArgs& a, const Stream& stream);

struct QuantKernelEntry {
  QuantFormat format;
  DeviceKind device;
  QuantAmaxFn amax;
  QuantCastFn cast;
  DequantFn dequant;
  FoldMaxFn fold_max;
  DelayedUpdateFn delayed_update;
};
// The entry for (format, device); throws when that device has no kernels in this build.
const QuantKernelEntry& quant_kernels(QuantFormat format, DeviceKind device);

// ---- CPU reference (quantize_ref.cpp) -----------------------------------------------------------------------
void quant_amax_ref(const QuantInput& x, const QuantParams& p, float* amax_out, float* col_amax_out,
                    const Stream& stream);
void quantize_ref(const QuantInput& x, const QuantParams& p, const QuantOutputs& out, const Stream& stream);
void dequantize_ref(const DequantArgs& a, void* out, DType out_dtype, const Stream& stream);
void fold_max_ref(float* dst, const float* src, const Stream& stream);
void delayed_update_ref(const DelayedUpdateArgs& a, const Stream& stream);

// ---- CPU path the engine runs (quantize_cpu.cpp): the reference's results, faster for the FP8 formats -------
void quant_amax_cpu(const QuantInput& x, const QuantParams& p, float* amax_out, float* col_amax_out,
                    const Stream& stream);
void quantize_cpu(const QuantInput& x, const QuantParams& p, const QuantOutputs& out, const Stream& stream);

// ---- CUDA (quantize.cu) ------------------------------------------------------------------------------------
void quant_amax_cuda(const QuantInput& x, const QuantParams& p, float* amax_out, float* col_amax_out,
                     const Stream& stream);
void quantize_cuda(const QuantInput& x, const QuantParams& p, const QuantOutputs& out, const Stream& stream);
void dequantize_cuda(const DequantArgs& a, void* out, DType out_dtype, const Stream& stream);
void fold_max_cuda(float* dst, const float* src, const Stream& stream);
void delayed_update_cuda(const DelayedUpdateArgs& a, const Stream& stream);

}  // namespace te
