// One GEMM entry point for every role and operand format (docs/NUMERICS.md §6).
//
// Roles, as TransformerEngine names them (M = tokens, K = in features, N = out features; leading dims of a
// tensor are flattened into its first GEMM dim):
//   fprop:  y [M, N]  = x [M, K]  · W [N, K]ᵀ     a = x,  b = W   (x row-wise,    W row-wise)
//   dgrad:  dx [M, K] = dy [M, N] · W [N, K]      a = dy, b = W   (dy row-wise,   W column-wise)
//   wgrad:  dW [N, K] = dy [M, N]ᵀ · x [M, K]     a = dy, b = x   (dy column-wise, x column-wise)
// `a` and `b` are given in their logical (model) shapes whatever the role; the call picks the copy of a quantized
// operand the role needs (both copies K-contiguous, "TN", which is the only fp8 layout Hopper runs).
//
// out = alpha · op(a, b) [+ bias broadcast over rows] [+ out when accumulate] [+ residual after rounding]
//
// Operand kinds and what runs:
//   high precision (f32 / bf16 / f16, both the same dtype, any strides): cuBLASLt in that dtype, f32 accumulation
//     (TF32 only when GemmOptions::allow_tf32). CPU: row_gemm.h on f32 copies.
//   fp8 per-tensor × fp8 per-tensor (E4M3×E4M3, E4M3×E5M2, E5M2×E4M3): scalar fp32 scale_inv pointers, fast
//     accumulation for fprop, split accumulation for dgrad/wgrad (override with GemmOptions::fast_accum).
//   fp8 block 1D/2D × fp8 block 1D/2D: 1x128 (VEC128) and 128x128 (BLK128x128) fp32 scales, split accumulation;
//     2D × 2D is rejected (Hopper has no such kernel).
//   fp8 with at most kStreamingRows output rows (per-tensor, or 1x128 × 1x128/128x128 blocks): a weight-streaming
//     tensor-core kernel (gemm_streaming.h); same scales, split accumulation per 128-block. Chosen automatically
//     where it runs; GemmKernel::cublaslt keeps cuBLASLt.
//   fp8 block, E4M3 1x128 × 128x128 / 1x128, with GemmOptions::kernel = wgmma: the warpgroup kernel
//     (gemm_wgmma.h), cuBLASLt's results byte for byte; opt-in (slower than cuBLASLt so far).
//   MXFP8 / NVFP4 (and any mix of formats): exact dequantization of the needed copies to bf16, then a bf16 GEMM;
//     the NVFP4 per-tensor factors go into alpha so the dequantized values stay exact in bf16. Logged once.
// CPU (any format): every operand is dequantized to f32 from the copy the role needs, then an f32 GEMM; so the CPU
// result is the f32 GEMM of exactly the values the GPU multiplies.
// Where a GEMM would dequantize, a quantized operand may carry that copy's image already made (the quantizer writes
// it when asked with gemm_image_spec, e.g. for a weight that serves many steps); the GEMM reads it instead, with the
// same bytes as a result.
//
// Shapes need no alignment: when fp8 dims or leading dims miss cuBLASLt's rules (rows multiple of 8, K multiple
// of 16 bytes, 16-byte aligned pointers) the call copies into zero-padded temporaries; the user's tensors are never
// touched. The output dtype is out's (f32 / bf16 / f16). All work is enqueued on `stream` (the last argument).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <variant>

#include "engine/tensor.h"
#include "ops/quant/quantized_tensor.h"

namespace te {

enum class GemmRole : uint8_t { fprop, dgrad, wgrad };

// Which CUDA kernel runs an fp8 GEMM. automatic: the weight-streaming kernel (gemm_streaming.h) for at most
// kStreamingRows output rows when it can run the problem (past 16 rows cuBLASLt was faster on an H100), else
// cuBLASLt. cublaslt: always cuBLASLt. streaming: the weight-streaming kernel (up to 64 rows); wgmma: the
// block-scaled warpgroup kernel (gemm_wgmma.h); a problem the named kernel cannot run throws with the reason. CPU
// GEMMs ignore the choice.
enum class GemmKernel : uint8_t { automatic, cublaslt, streaming, wgmma };
inline constexpr int64_t kStreamingRows = 16;
std::string_view gemm_role_name(GemmRole r);  // "fprop" | "dgrad" | "wgrad"

// A GEMM operand: a high-precision tensor or a quantized tensor (cheap to copy: both hold shared storage).
class GemmOperand {
 public:
  GemmOperand(const Tensor& t) : v_(t) {}              // NOLINT(google-explicit-constructor): natural conversion
  GemmOperand(const QuantizedTensor& q) : v_(q) {}     // NOLINT(google-explicit-constructor)
  bool is_quantized() const { return std::holds_alternative<QuantizedTensor>(v_); }
  const Tensor& tensor() const { return std::get<Tensor>(v_); }
  const QuantizedTensor& quantized() const { return std::get<QuantizedTensor>(v_); }
  // Logical [rows, cols] with the leading dims flattened (rows = M, cols = K of the operand's own shape).
  int64_t rows() const;
  int64_t cols() const;
  Device device() const;
  std::string str() const;  // "[8, 16] bf16" / "[8, 16] fp8_block_1d(fp8_e4m3, rowwise)" for messages

  // The image of copy `u` its QuantizedTensor carries (Quantizer::quantize with gemm_image_spec), or an undefined
  // tensor.
  const Tensor& image(Usage u) const;

 private:
  std::variant<Tensor, QuantizedTensor> v_;
};

// The form of the image a GEMM on `device` reads instead of dequantizing a `format` operand: f32 with NVFP4's
// per-tensor factor on the CPU (every format); bf16 without that factor (it goes into alpha) for MXFP8 / NVFP4 on a
// GPU; nothing for FP8 on a GPU, whose GEMM reads the quantized copy itself. Pass it to Quantizer::quantize.
std::optional<ImageSpec> gemm_image_spec(QuantFormat format, Device device);

struct GemmOptions {
  // Output dtype when gemm() allocates `out`; when out is given it must be unset or equal out's dtype.
  std::optional<DType> out_dtype;
  Tensor bias;              // optional [cols of out], f32/bf16/f16, on the output's device
  bool accumulate = false;  // out += result (out must be given and initialised)
  float alpha = 1.0f;
  bool allow_tf32 = false;          // f32 GEMMs only
  std::optional<bool> fast_accum;   // fp8 per-tensor: default true for fprop, false for dgrad/wgrad
  GemmKernel kernel = GemmKernel::automatic;
  // out = residual + result, the result rounded to out's dtype first: the bytes of this GEMM followed by
  // add(residual, out). Shaped like out, f32/bf16/f16, on its device; not with accumulate. The weight-streaming
  // kernel adds it in its epilogue; on every other path add() runs after the GEMM.
  Tensor residual;
};

// Per-device GEMM state: the cuBLASLt handle, a persistent workspace and the plan cache (descriptors + algorithm
// per shape, dtypes, layouts, scale modes, epilogue, role). Not thread-safe: one context per thread/stream owner.
class GemmContext {
 public:
  struct Stats {
    int64_t calls = 0;
    int64_t plans_built = 0;       // heuristic queries (cache misses)
    int64_t plan_cache_hits = 0;
    int64_t padded_calls = 0;      // fp8 calls that went through zero-padded temporaries
    int64_t bias_kernel_calls = 0; // bias added by a separate kernel (epilogue not available)
    int64_t emulated_calls = 0;    // MXFP8 / NVFP4 / mixed formats dequantized to bf16
    int64_t operands_dequantized = 0;  // quantized operands a call dequantized (CPU, emulation)
    int64_t images_read = 0;           // quantized operands a call read from their carried image instead
    int64_t streaming_calls = 0;   // fp8 GEMMs with few rows run by the weight-streaming kernel
    int64_t wgmma_calls = 0;       // block-scaled fp8 GEMMs run by the warpgroup kernel
  };
  struct Impl;

  explicit GemmContext(Device device = Device::cpu(), int64_t workspace_bytes = int64_t(32) << 20);
  ~GemmContext();
  GemmContext(const GemmContext&) = delete;
  GemmContext& operator=(const GemmContext&) = delete;

  Device device() const { return device_; }
  int64_t workspace_bytes() const { return workspace_bytes_; }
  const Stats& stats() const { return stats_; }
  Stats& mutable_stats() { return stats_; }
  Impl& impl();  // CUDA state (created on first use)

 private:
  Device device_;
  int64_t workspace_bytes_;
  Stats stats_;
  std::unique_ptr<Impl> impl_;
};

// The output shape of a role: fprop [M, N], dgrad [M, K], wgrad [N, K] (M keeps a's leading dims for fprop/dgrad).
Shape gemm_out_shape(const GemmOperand& a, const GemmOperand& b, GemmRole role);

// Computes into `out` (allocated with opts.out_dtype, default bf16 or a's HP dtype, when undefined).
void gemm(const GemmOperand& a, const GemmOperand& b, GemmRole role, Tensor& out, const GemmOptions& opts,
          GemmContext& ctx, const Stream& stream = Stream());
Tensor gemm(const GemmOperand& a, const GemmOperand& b, GemmRole role, const GemmOptions& opts, GemmContext& ctx,
            const Stream& stream = Stream());

}  // namespace te
