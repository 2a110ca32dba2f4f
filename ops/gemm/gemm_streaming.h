// Weight-streaming fp8 GEMM for a few rows (CUDA builds, sm_90; GemmKernel::automatic picks it for up to
// kStreamingRows rows, where it is faster than cuBLASLt).
//
// With few tokens an fp8 GEMM is bound by reading the weight once from HBM. This kernel streams the [Q, D] operand
// through a ring of shared-memory stages filled by the tensor-memory accelerator (one producer warp, several K
// blocks per stage so that each weight row is read in long runs), reads the small [P, D] operand's matching K blocks
// with it, and multiplies on the tensor cores (mma.sync m16n8k32 fp8, fp32 accumulation). It runs up to 64 rows
// (StreamingGemm::kMaxRows); past 16 it is slower than cuBLASLt. Figures: docs/PERFORMANCE.md.
//
// Numerics: every 128-wide K block is accumulated on its own and then added to the fp32 result times the block's
// scales ("split accumulation", as cuBLASLt does for block scaling); per-tensor scales multiply once at the end.
// The K range is split over CTAs; partial sums go through fp32 workspace and the last CTA of each column tile adds
// them in split order, so results are deterministic, and a row's result does not depend on the other rows.
#pragma once
#include <cstdint>

#include "engine/stream.h"
#include "ops/gemm/fp8_gemm_args.h"

namespace te::cuda {

struct StreamingGemm : Fp8GemmArgs {
  static constexpr int64_t kMaxRows = 64;  // P limit (four m16 tiles)
  static constexpr int64_t kBlockK = 128;  // D must be a multiple

  // Split-K state: fp32 partials (splits · P · Q floats) and one zeroed int counter per 128-column tile.
  float* partials = nullptr;
  int64_t partials_floats = 0;
  int* counters = nullptr;
  int64_t counters_len = 0;

  // Added to the output after it is rounded to its dtype (store_outputs_plus): [P, Q] contiguous, f32/bf16/f16, or
  // null. Not with accumulate.
  const void* residual = nullptr;
  DType residual_dtype = DType::bf16;
};

// Why the kernel cannot run this problem (empty when it can).
const char* streaming_gemm_unsupported(const StreamingGemm& g);
// Enqueues the GEMM on `stream`; call only when streaming_gemm_unsupported() is empty.
void streaming_gemm(const StreamingGemm& g, const Stream& stream);

}  // namespace te::cuda
