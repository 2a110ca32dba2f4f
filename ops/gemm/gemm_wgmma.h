// Block-scaled fp8 GEMM on Hopper's warpgroup tensor-core instructions (CUDA builds, sm_90a): out [P, Q] =
// alpha · lhs [P, D] · rhs [Q, D]ᵀ with lhs in 1x128 blocks (activations, gradients) and rhs in 128x128 tiles
// (weights: fprop, dgrad) or 1x128 blocks (wgrad), E4M3 × E4M3, [+ bias] [+ out]. Its results are cuBLASLt's
// block-scaled results byte for byte (the same products, promoted per K block in the same order; tested).
//
// A persistent CTA per SM walks 128 × 192 output tiles (128 × 128 where 192 would pad the last columns too much), in
// clusters of CTAs that can share operand blocks through TMA multicast. One producer warp fills a ring of
// shared-memory stages with TMA (a 128-wide K block of each operand and their scales); two consumer warpgroups each
// multiply 64 of the tile's rows with wgmma (fp8 in, f32 accumulators) and, after each K block, add that block's
// product times its scales into a second set of f32 registers ("split accumulation", as cuBLASLt and the numeric
// contract do it). The producer runs ahead into the next tile while the consumers write the previous one out (bf16
// tiles through shared memory and a TMA store).
#pragma once
#include <cstdint>

#include "engine/stream.h"
#include "ops/gemm/fp8_gemm_args.h"

namespace te::cuda {

struct WgmmaGemm : Fp8GemmArgs {
  static constexpr int64_t kBlockK = 128;  // D must be a multiple; lhs vec128, rhs blk128 or vec128
};

// Why the kernel cannot run this problem (empty when it can).
const char* wgmma_gemm_unsupported(const WgmmaGemm& g);
// Enqueues the GEMM on `stream`; call only when wgmma_gemm_unsupported() is empty.
void wgmma_gemm(const WgmmaGemm& g, const Stream& stream);

}  // namespace te::cuda
