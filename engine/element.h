// Read/write one element of any float storage type as f32 (host and device). fp4 elements are nibbles: element i
// lives in byte i/2, even i in the low nibble.
#pragma once
#include <cstdint>

#include "engine/dtype.h"
#include "engine/float_convert.h"

namespace te {

TE_HD float load_f32(const void* base, DType t, int64_t i) {
  switch (t) {
    case DType::f32: return static_cast<const float*>(base)[i];
    case DType::bf16: return bf16_to_f32(static_cast<const uint16_t*>(base)[i]);
    case DType::f16: return f16_to_f32(static_cast<const uint16_t*>(base)[i]);
    case DType::fp8_e4m3: return e4m3_to_f32(static_cast<const uint8_t*>(base)[i]);
    case DType::fp8_e5m2: return e5m2_to_f32(static_cast<const uint8_t*>(base)[i]);
    case DType::fp4_e2m1: {
      uint8_t b = static_cast<const uint8_t*>(base)[i >> 1];
      return e2m1_to_f32((i & 1) ? (b >> 4) : (b & 0xF));
    }
    case DType::e8m0: return e8m0_to_f32(static_cast<const uint8_t*>(base)[i]);
    case DType::u8: return static_cast<float>(static_cast<const uint8_t*>(base)[i]);
    case DType::i32: return static_cast<float>(static_cast<const int32_t*>(base)[i]);
    case DType::i64: return static_cast<float>(static_cast<const int64_t*>(base)[i]);
  }
  return 0.f;
}

// fp4 byte k of n elements, both nibbles from value(i): written whole, so a fill never reads its destination, and
// the high nibble of an odd count's last byte is zero on every device.
template <class Value>
TE_HD uint8_t fp4_byte_of(int64_t k, int64_t n, Value value) {
  const uint8_t lo = e2m1_from_f32(value(2 * k));
  const uint8_t hi = 2 * k + 1 < n ? e2m1_from_f32(value(2 * k + 1)) : uint8_t{0};
  return static_cast<uint8_t>(lo | (hi << 4));
}

// Not thread-safe for fp4 (read-modify-write of a shared byte).
TE_HD void store_f32(void* base, DType t, int64_t i, float v) {
  switch (t) {
    case DType::f32: static_cast<float*>(base)[i] = v; return;
    case DType::bf16: static_cast<uint16_t*>(base)[i] = bf16_from_f32(v); return;
    case DType::f16: static_cast<uint16_t*>(base)[i] = f16_from_f32(v); return;
    case DType::fp8_e4m3: static_cast<uint8_t*>(base)[i] = e4m3_from_f32(v); return;
    case DType::fp8_e5m2: static_cast<uint8_t*>(base)[i] = e5m2_from_f32(v); return;
    case DType::fp4_e2m1: {
      uint8_t& b = static_cast<uint8_t*>(base)[i >> 1];
      uint8_t q = e2m1_from_f32(v);
      b = (i & 1) ? static_cast<uint8_t>((b & 0x0F) | (q << 4)) : static_cast<uint8_t>((b & 0xF0) | q);
      return;
    }
    case DType::e8m0: static_cast<uint8_t*>(base)[i] = e8m0_from_f32_ceil(v); return;
    case DType::u8: static_cast<uint8_t*>(base)[i] = static_cast<uint8_t>(v); return;
    case DType::i32: static_cast<int32_t*>(base)[i] = static_cast<int32_t>(v); return;
    case DType::i64: static_cast<int64_t*>(base)[i] = static_cast<int64_t>(v); return;
  }
}

// v as a store to dtype t followed by a load gives it back (rounded, saturated or truncated as t stores).
TE_HD float round_as(DType t, float v) {
  uint64_t bits = 0;
  store_f32(&bits, t, 0, v);
  return load_f32(&bits, t, 0);
}

}  // namespace te
