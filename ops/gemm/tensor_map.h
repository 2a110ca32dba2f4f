// Tensor maps for the Hopper tensor-memory accelerator (TMA): the descriptor a kernel's
// cp.async.bulk.tensor loads read to copy a 2-D box of global memory into shared memory (CUDA builds only).
#pragma once
#include <cuda.h>

#include <cstdint>

namespace te::cuda {

// A row-major byte matrix [rows, row_bytes] with row stride `row_bytes` (16-byte aligned base, row_bytes a multiple
// of 16), loaded in boxes of [box_rows, 128 bytes] with the 128-byte swizzle: in shared memory the 16-byte chunk c
// of box row r lands at chunk c ^ (r % 8), so eight rows read at the same column hit eight different banks. Rows
// and columns past the matrix read as zeros.
CUtensorMap swizzled_byte_map(const void* base, uint64_t rows, uint64_t row_bytes, uint32_t box_rows);

// A row-major bf16 matrix [rows, cols] (16-byte aligned base, cols a multiple of 8) in boxes of [box_rows, 64
// columns] (128 bytes) with the 128-byte swizzle, for TMA stores; parts of a box past the matrix are not written.
CUtensorMap swizzled_bf16_map(void* base, uint64_t rows, uint64_t cols, uint32_t box_rows);

}  // namespace te::cuda
