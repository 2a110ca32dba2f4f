// The one table of element types. Names, sizes, float-ness and ranges come from kDTypes; nothing else lists them.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace te {

enum class DType : uint8_t { f32, bf16, f16, fp8_e4m3, fp8_e5m2, fp4_e2m1, e8m0, u8, i32, i64 };

struct DTypeInfo {
  DType dtype;
  std::string_view name;
  int bits;           // storage bits per element (fp4: 4, two per byte)
  bool is_float;      // a floating-point value type (e8m0 is a scale, not a float value: false)
  double max_finite;  // largest finite value (integers: largest value)
};

inline constexpr std::array<DTypeInfo, 10> kDTypes{{
    {DType::f32, "f32", 32, true, 3.4028234663852886e38},
    {DType::bf16, "bf16", 16, true, 3.3895313892515355e38},
    {DType::f16, "f16", 16, true, 65504.0},
    {DType::fp8_e4m3, "fp8_e4m3", 8, true, 448.0},
    {DType::fp8_e5m2, "fp8_e5m2", 8, true, 57344.0},
    {DType::fp4_e2m1, "fp4_e2m1", 4, true, 6.0},
    {DType::e8m0, "e8m0", 8, false, 1.7014118346046923e38},
    {DType::u8, "u8", 8, false, 255.0},
    {DType::i32, "i32", 32, false, 2147483647.0},
    {DType::i64, "i64", 64, false, 9223372036854775807.0},
}};

constexpr const DTypeInfo& dtype_info(DType t) { return kDTypes[static_cast<size_t>(t)]; }
constexpr std::string_view dtype_name(DType t) { return dtype_info(t).name; }
constexpr int dtype_bits(DType t) { return dtype_info(t).bits; }
// Bytes to store n elements (fp4 packs two per byte, rounded up).
constexpr int64_t dtype_storage_bytes(DType t, int64_t n) { return (n * dtype_bits(t) + 7) / 8; }
// "f32", "bf16", ... and the common aliases ("float32", "bfloat16", "float16", "fp32", ...).
std::optional<DType> dtype_from_name(std::string_view name);
// Activation/parameter dtypes a model may use.
constexpr bool is_high_precision(DType t) { return t == DType::f32 || t == DType::bf16 || t == DType::f16; }

}  // namespace te
