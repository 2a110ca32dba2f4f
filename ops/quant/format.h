// The one table of quantization formats (docs/NUMERICS.md §2–§3). Block sizes, scale dtypes and layouts are
// read from kQuantFormats; nothing else lists them.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

#include "engine/dtype.h"
#include "engine/hd.h"

namespace te {

enum class QuantFormat : uint8_t {
  fp8_per_tensor,  // one fp32 scale per tensor (delayed or current scaling decides how it is chosen)
  fp8_block_1d,    // 1x128 blocks along K (row-wise copy), 128x1 along M (column-wise copy), fp32 scales
  fp8_block_2d,    // one fp32 scale per 128x128 tile, shared by both copies
  mxfp8,           // 1x32 / 32x1 blocks, e8m0 scales
  nvfp4_1d,        // 1x16 / 16x1 blocks, e4m3 scales + fp32 per-tensor amax
  nvfp4_2d,        // 16x16 tiles, e4m3 scales + fp32 per-tensor amax
};

struct QuantFormatInfo {
  QuantFormat format;
  std::string_view name;
  int block;                 // elements per block along the blocked dim (0: per tensor)
  bool two_d;                // block x block tiles
  DType scale_dtype;         // dtype of scale_inv
  bool colwise_transposed;   // column-wise data stored as [K, M] (MXFP8 keeps [M, K])
  bool has_amax;             // stores an fp32 amax (per-tensor, NVFP4 global)
};

inline constexpr std::array<QuantFormatInfo, 6> kQuantFormats{{
    {QuantFormat::fp8_per_tensor, "fp8_per_tensor", 0, false, DType::f32, true, true},
    {QuantFormat::fp8_block_1d, "fp8_block_1d", 128, false, DType::f32, true, false},
    {QuantFormat::fp8_block_2d, "fp8_block_2d", 128, true, DType::f32, true, false},
    {QuantFormat::mxfp8, "mxfp8", 32, false, DType::e8m0, false, false},
    {QuantFormat::nvfp4_1d, "nvfp4_1d", 16, false, DType::fp8_e4m3, true, true},
    {QuantFormat::nvfp4_2d, "nvfp4_2d", 16, true, DType::fp8_e4m3, true, true},
}};

constexpr const QuantFormatInfo& quant_format_info(QuantFormat f) { return kQuantFormats[static_cast<size_t>(f)]; }
constexpr std::string_view quant_format_name(QuantFormat f) { return quant_format_info(f).name; }
std::optional<QuantFormat> quant_format_from_name(std::string_view name);

// NVFP4 (1D or 2D): FP4 codes, E4M3 block scales and a per-tensor decode factor from the stored amax.
TE_HD constexpr bool nvfp4_format(QuantFormat f) { return f == QuantFormat::nvfp4_1d || f == QuantFormat::nvfp4_2d; }
// Block scales stored as one byte (MXFP8: E8M0, NVFP4: E4M3) rather than an fp32 scale_inv.
TE_HD constexpr bool byte_scales(QuantFormat f) { return f == QuantFormat::mxfp8 || nvfp4_format(f); }

// Which copies of a tensor are wanted. Row-wise: blocks along K (used by fprop and as dgrad's dy).
// Column-wise: blocks along M (the transposed operand of dgrad/wgrad).
enum class Usage : uint8_t { none = 0, rowwise = 1, columnwise = 2, both = 3 };
constexpr Usage operator|(Usage a, Usage b) { return static_cast<Usage>(static_cast<int>(a) | static_cast<int>(b)); }
constexpr Usage operator&(Usage a, Usage b) { return static_cast<Usage>(static_cast<int>(a) & static_cast<int>(b)); }
constexpr bool has_usage(Usage set, Usage u) { return (set & u) == u && u != Usage::none; }
std::string_view usage_name(Usage u);  // "rowwise" | "columnwise" | "both" | "none"

// The form of a copy's exact image (QuantizedTensor::rowwise_image / columnwise_image): its dtype, and whether
// NVFP4's per-tensor decode factor is applied (a GEMM that folds that factor into alpha wants it left out).
struct ImageSpec {
  DType dtype = DType::bf16;
  bool tensor_factor = true;
};

}  // namespace te
