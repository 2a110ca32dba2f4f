#include "ops/gemm/tensor_map.h"

#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include "engine/cuda_check.h"
#include "engine/error.h"

namespace te::cuda {
namespace {

// The driver's encoder, found through the runtime so that the library needs no link to libcuda.
PFN_cuTensorMapEncodeTiled_v12000 encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found{};
    TE_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &found));
    TE_CHECK_HINT(found == cudaDriverEntryPointSuccess && p != nullptr,
                  "the CUDA driver has no cuTensorMapEncodeTiled (TMA descriptors)",
                  "update the NVIDIA driver to one that supports CUDA 12 or later");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }();
  return fn;
}

// [rows, cols] of `elem_bytes` elements, boxes of [box_rows, 128 bytes], 128-byte swizzle.
CUtensorMap swizzled_map(void* base, CUtensorMapDataType type, uint32_t elem_bytes, uint64_t rows, uint64_t cols,
                         uint32_t box_rows) {
  const uint64_t row_bytes = cols * elem_bytes;
  TE_CHECK(reinterpret_cast<uintptr_t>(base) % 16 == 0 && row_bytes % 16 == 0 && rows >= 1 && box_rows >= 1 &&
               box_rows <= 256,
           "TMA map: base " << base << ", " << rows << " rows of " << row_bytes << " bytes, boxes of " << box_rows
                            << " rows: needs a 16-byte aligned base and row size and 1..256 box rows");
  CUtensorMap map{};
  const cuuint64_t dims[2] = {cols, rows};
  const cuuint64_t strides[1] = {row_bytes};
  const cuuint32_t box[2] = {128 / elem_bytes, box_rows};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult r =
      encoder()(&map, type, 2, base, dims, strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  TE_CHECK(r == CUDA_SUCCESS, "TMA map: cuTensorMapEncodeTiled failed (" << static_cast<int>(r) << ") for " << rows
                                                                         << " rows of " << row_bytes << " bytes");
  return map;
}

}  // namespace

CUtensorMap swizzled_byte_map(const void* base, uint64_t rows, uint64_t row_bytes, uint32_t box_rows) {
  return swizzled_map(const_cast<void*>(base), CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, rows, row_bytes, box_rows);
}

CUtensorMap swizzled_bf16_map(void* base, uint64_t rows, uint64_t cols, uint32_t box_rows) {
  return swizzled_map(base, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, rows, cols, box_rows);
}

}  // namespace te::cuda
