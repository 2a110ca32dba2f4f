#include "ops/quant/quant_layout.h"

namespace te {

CopyLayout copy_layout(QuantFormat format, Usage usage, int64_t M, int64_t K) {
  const QuantFormatInfo& info = quant_format_info(format);
  const bool row = usage == Usage::rowwise;
  CopyLayout L;
  L.R = row ? M : K;
  L.C = row ? K : M;
  L.block = info.block;
  L.two_d = info.two_d;
  L.fp4 = nvfp4_format(format);
  // MXFP8's column-wise copy keeps x's [M, K] order: A = xᵀ stored transposed back.
  L.store_transposed = !row && !info.colwise_transposed;
  L.data_ld = L.store_transposed ? L.R : (L.fp4 ? (L.C + 1) / 2 * 2 : L.C);
  const int64_t nb = L.blocks_per_row();
  switch (format) {
    case QuantFormat::fp8_per_tensor:
      L.scale_index = ScaleIndex::single;
      L.scale_rows = 1, L.scale_ld = 1;
      break;
    case QuantFormat::fp8_block_1d:  // [ceil(C/128)][round4(R)]
      L.scale_index = ScaleIndex::block_major;
      L.scale_rows = nb, L.scale_ld = round_up4(L.R);
      break;
    case QuantFormat::fp8_block_2d:  // [ceil(R/128)][round4(ceil(C/128))]
      L.scale_index = ScaleIndex::tile_row_major;
      L.scale_rows = ceil_div(L.R, L.block), L.scale_ld = round_up4(nb);
      break;
    case QuantFormat::mxfp8:  // row-wise [M][ceil(K/32)]; column-wise [ceil(M/32)][K]
      L.scale_index = row ? ScaleIndex::row_major : ScaleIndex::block_major;
      L.scale_rows = row ? L.R : nb, L.scale_ld = row ? nb : L.R;
      break;
    case QuantFormat::nvfp4_1d:
    case QuantFormat::nvfp4_2d:  // [R][ceil(C/16)]; 2D tiles repeat their scale on each of their 16 rows
      L.scale_index = ScaleIndex::row_major;
      L.scale_rows = L.R, L.scale_ld = nb;
      break;
  }
  return L;
}

Shape copy_data_shape(const CopyLayout& L) {
  return L.store_transposed ? Shape{L.C, L.R} : Shape{L.R, L.data_ld};
}
Shape copy_scale_shape(const CopyLayout& L) {
  return L.scale_index == ScaleIndex::single ? Shape{1} : Shape{L.scale_rows, L.scale_ld};
}

}  // namespace te
