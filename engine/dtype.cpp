#include "engine/dtype.h"

namespace te {
std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& info : kDTypes)
    if (info.name == name) return info.dtype;
  struct Alias {
    std::string_view name;
    DType dtype;
  };
  static constexpr Alias aliases[] = {
      {"float32", DType::f32}, {"fp32", DType::f32},         {"float", DType::f32},
      {"bfloat16", DType::bf16}, {"float16", DType::f16},     {"fp16", DType::f16},
      {"half", DType::f16},      {"e4m3", DType::fp8_e4m3},   {"e5m2", DType::fp8_e5m2},
      {"fp4", DType::fp4_e2m1},  {"uint8", DType::u8},        {"int32", DType::i32},
      {"int64", DType::i64},
  };
  for (const auto& a : aliases)
    if (a.name == name) return a.dtype;
  return std::nullopt;
}
}  // namespace te
