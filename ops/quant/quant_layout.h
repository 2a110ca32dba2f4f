// Where every element and every scale of one quantized copy lives (docs/NUMERICS.md §3), as host/device math.
// A copy is seen as a matrix view A [R, C] whose blocks run along C: the row-wise copy is A = x [M, K], the
// column-wise copy is A = xᵀ [K, M]. The CPU reference, the CUDA kernels, dequantize and the tests all index
// through CopyLayout, so the layouts are written down exactly once.
#pragma once
#include <cstdint>

#include "engine/dtype.h"
#include "engine/hd.h"
#include "engine/int_math.h"
#include "engine/tensor.h"
#include "ops/quant/format.h"

namespace te {

TE_HD int64_t round_up4(int64_t a) { return (a + 3) / 4 * 4; }

enum class ScaleIndex : uint8_t {
  single,          // per tensor: [1]
  block_major,     // [ceil(C/B)][ld]: index b * ld + r                  (block 1D; MXFP8 column-wise)
  row_major,       // [R][ld]: index r * ld + b                           (MXFP8 row-wise; NVFP4 1D and 2D)
  tile_row_major,  // [ceil(R/B)][ld]: index (r / B) * ld + b            (block 2D)
};

struct CopyLayout {
  int64_t R = 0, C = 0;      // the view A [R, C]
  int block = 0;             // elements per block along C (0: per tensor)
  bool two_d = false;        // B x B tiles (a scale is shared by B consecutive rows of A)
  bool fp4 = false;          // two elements per byte, even element in the low nibble
  bool store_transposed = false;  // A stored as [C, R] (MXFP8 column-wise keeps x's [M, K] order)
  int64_t data_ld = 0;       // elements per stored data row (fp4: C rounded up to even; the extra nibble is 0)
  ScaleIndex scale_index = ScaleIndex::single;
  int64_t scale_rows = 1, scale_ld = 1;  // scale tensor shape [scale_rows, scale_ld]
  int64_t blocks_per_row() const { return block ? ceil_div(C, block) : 1; }
};

// Flat element index of A[r][c] in the data tensor (fp4: nibble index).
TE_HD int64_t data_offset(const CopyLayout& L, int64_t r, int64_t c) {
  return L.store_transposed ? c * L.data_ld + r : r * L.data_ld + c;
}
// Flat index of the scale of block b (along C) of row r of A.
TE_HD int64_t scale_offset(const CopyLayout& L, int64_t r, int64_t b) {
  switch (L.scale_index) {
    case ScaleIndex::single: return 0;
    case ScaleIndex::block_major: return b * L.scale_ld + r;
    case ScaleIndex::row_major: return r * L.scale_ld + b;
    case ScaleIndex::tile_row_major: return (r / L.block) * L.scale_ld + b;
  }
  return 0;
}

// The layout of the row-wise (usage == rowwise) or column-wise copy of an [M, K] tensor.
CopyLayout copy_layout(QuantFormat format, Usage usage, int64_t M, int64_t K);
// Tensor shapes of that copy: data (dtype data_dtype; fp4 [rows, data_ld]) and scale_inv.
Shape copy_data_shape(const CopyLayout& L);
Shape copy_scale_shape(const CopyLayout& L);

}  // namespace te
