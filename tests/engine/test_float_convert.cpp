// Element conversions against independent oracles: known code points, and a brute-force nearest-value search over
// each format's decoded table (ties to the even code, saturation) computed in double.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "engine/float_convert.h"

namespace te {
namespace {

struct Fmt {
  const char* name;
  MiniFloat mf;
  int codes;  // number of codes (256, or 16 for fp4)
  double max;
};
const Fmt kFormats[] = {{"e4m3", kE4M3, 256, 448.0}, {"e5m2", kE5M2, 256, 57344.0}, {"e2m1", kE2M1, 16, 6.0}};

// Oracle: round-to-nearest-even into the finite values of the format, saturating; computed from the table alone.
uint8_t oracle_encode(const Fmt& f, double x) {
  if (std::isnan(x)) return f.mf.nan_code ? f.mf.nan_code : f.mf.max_code;
  int best = -1;
  double best_err = 0;
  for (int c = 0; c < f.codes; ++c) {
    double v = minifloat_to_f32(static_cast<uint8_t>(c), f.mf);
    if (std::isnan(v) || std::isinf(v)) continue;
    if (std::signbit(v) != std::signbit(x) && v != 0) continue;
    double err = std::fabs(v - std::clamp(x, -f.max, f.max));
    bool better = best < 0 || err < best_err ||
                  (err == best_err && (c & 1) == 0 && (best & 1) == 1);
    if (better) {
      best = c;
      best_err = err;
    }
  }
  const int sign_bit = f.codes == 16 ? 0x8 : 0x80;
  if (std::signbit(x)) best |= sign_bit;  // -0 and negative values carry the sign
  return static_cast<uint8_t>(best);
}

TEST(FloatConvert, KnownCodePoints) {
  EXPECT_EQ(e4m3_to_f32(0x7E), 448.f);
  EXPECT_EQ(e4m3_to_f32(0x01), std::ldexp(1.f, -9));
  EXPECT_EQ(e4m3_to_f32(0x08), std::ldexp(1.f, -6));
  EXPECT_EQ(e4m3_to_f32(0x38), 1.f);
  EXPECT_TRUE(std::isnan(e4m3_to_f32(0x7F)));
  EXPECT_TRUE(std::isnan(e4m3_to_f32(0xFF)));
  EXPECT_EQ(e5m2_to_f32(0x7B), 57344.f);
  EXPECT_EQ(e5m2_to_f32(0x7C), INFINITY);
  EXPECT_EQ(e5m2_to_f32(0xFC), -INFINITY);
  EXPECT_TRUE(std::isnan(e5m2_to_f32(0x7D)));
  EXPECT_EQ(e5m2_to_f32(0x01), std::ldexp(1.f, -16));
  const float fp4[8] = {0.f, .5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f};
  for (int c = 0; c < 8; ++c) {
    EXPECT_EQ(e2m1_to_f32(static_cast<uint8_t>(c)), fp4[c]);
    EXPECT_EQ(e2m1_to_f32(static_cast<uint8_t>(c | 8)), -fp4[c]);
  }
  EXPECT_EQ(e8m0_to_f32(127), 1.f);
  EXPECT_EQ(e8m0_to_f32(254), std::ldexp(1.f, 127));
  EXPECT_EQ(e8m0_to_f32(0), std::ldexp(1.f, -127));
  EXPECT_TRUE(std::isnan(e8m0_to_f32(255)));
}

TEST(FloatConvert, EveryCodeRoundTrips) {
  for (const Fmt& f : kFormats) {
    for (int c = 0; c < f.codes; ++c) {
      float v = minifloat_to_f32(static_cast<uint8_t>(c), f.mf);
      if (std::isnan(v) || std::isinf(v)) continue;
      EXPECT_EQ(minifloat_from_f32(v, f.mf), c) << f.name << " code " << c << " value " << v;
    }
  }
  for (int e = 0; e < 255; ++e) EXPECT_EQ(e8m0_from_f32_ceil(e8m0_to_f32(static_cast<uint8_t>(e))), e);
}

TEST(FloatConvert, SpecialsSaturateAndNaN) {
  EXPECT_EQ(e4m3_from_f32(1000.f), 0x7E);
  EXPECT_EQ(e4m3_from_f32(-1000.f), 0xFE);
  EXPECT_EQ(e4m3_from_f32(INFINITY), 0x7E);
  EXPECT_EQ(e4m3_from_f32(-INFINITY), 0xFE);
  EXPECT_EQ(e4m3_from_f32(NAN), 0x7F);
  EXPECT_EQ(e5m2_from_f32(INFINITY), 0x7B);
  EXPECT_EQ(e5m2_from_f32(NAN), 0x7F);
  EXPECT_EQ(e2m1_from_f32(NAN), 0x7);
  EXPECT_EQ(e2m1_from_f32(-7.f), 0xF);
  EXPECT_EQ(e4m3_from_f32(-0.f), 0x80);
  EXPECT_EQ(e4m3_from_f32(std::ldexp(1.f, -11)), 0x00);   // below half the smallest subnormal
  EXPECT_EQ(e4m3_from_f32(std::ldexp(1.f, -10)), 0x00);   // exactly half: tie to even (0)
  EXPECT_EQ(e4m3_from_f32(std::ldexp(3.f, -10)), 0x02);   // 1.5 quanta: tie to even (2)
  EXPECT_EQ(e4m3_from_f32(1.0625f), 0x38);                // tie between 1 and 1.125 → 1
  EXPECT_EQ(e4m3_from_f32(1.1875f), 0x3A);                // tie between 1.125 and 1.25 → 1.25
  EXPECT_EQ(e4m3_from_f32(464.f), 0x7E);                  // would round past max: saturates
  EXPECT_EQ(e2m1_from_f32(2.5f), 0x4);                    // tie between 2 and 3 → 2 (even code)
  EXPECT_EQ(e2m1_from_f32(5.f), 0x6);                     // tie between 4 and 6 → 4
  EXPECT_EQ(e2m1_from_f32(0.25f), 0x0);                   // tie between 0 and .5 → 0
  EXPECT_EQ(e2m1_from_f32(0.75f), 0x2);                   // tie between .5 and 1 → 1
  EXPECT_EQ(e8m0_from_f32_ceil(3.f), 128 + 1);            // rounds up to 4
  EXPECT_EQ(e8m0_from_f32_ceil(0.f), 0);
  EXPECT_EQ(e8m0_from_f32_ceil(INFINITY), 0xFE);
  EXPECT_EQ(e8m0_from_f32_ceil(NAN), 0xFF);
}

TEST(FloatConvert, RandomInputsMatchOracle) {
  std::mt19937 rng(7);
  for (const Fmt& f : kFormats) {
    std::uniform_real_distribution<float> mant(-1.f, 1.f);
    std::uniform_int_distribution<int> exp(-20, 18);
    for (int i = 0; i < 20000; ++i) {
      float x = std::ldexp(mant(rng), exp(rng));
      ASSERT_EQ(minifloat_from_f32(x, f.mf), oracle_encode(f, x)) << f.name << " x=" << x;
    }
    // every midpoint between neighbouring codes: exact ties
    for (int c = 0; c + 1 < f.codes / 2; ++c) {
      double a = minifloat_to_f32(static_cast<uint8_t>(c), f.mf), b = minifloat_to_f32(static_cast<uint8_t>(c + 1), f.mf);
      if (std::isnan(b) || std::isinf(b)) continue;
      float mid = static_cast<float>((a + b) / 2);
      ASSERT_EQ(minifloat_from_f32(mid, f.mf), oracle_encode(f, mid)) << f.name << " mid " << mid;
      ASSERT_EQ(minifloat_from_f32(-mid, f.mf), oracle_encode(f, -mid)) << f.name << " mid " << -mid;
    }
  }
}

// e2m1_from_f32 counts midpoints instead of going through minifloat_from_f32: the same code for every f32 near the
// format's range (each bit pattern of |x| < 8, both signs, sampled every 251st) and everywhere else (sampled), with
// each midpoint and its two neighbouring floats against the table oracle.
TEST(FloatConvert, E2m1EqualsTheGenericRounding) {
  for (uint64_t u = 0; u <= 0xFFFFFFFFull; u += 251) {
    const uint32_t bits = static_cast<uint32_t>(u);
    const uint32_t mag = bits & 0x7FFFFFFFu;
    if (mag >= 0x41000000u && (bits % 4099) != 0) continue;  // |x| >= 8 (and NaN): sampled more sparsely
    const float x = f32_from_bits(bits);
    ASSERT_EQ(e2m1_from_f32(x), minifloat_from_f32(x, kE2M1)) << "bits 0x" << std::hex << bits;
  }
  const Fmt& f = kFormats[2];
  for (int c = 0; c < 7; ++c) {
    const float mid = (e2m1_to_f32(static_cast<uint8_t>(c)) + e2m1_to_f32(static_cast<uint8_t>(c + 1))) / 2;
    for (float x : {std::nextafter(mid, 0.f), mid, std::nextafter(mid, 8.f)}) {
      EXPECT_EQ(e2m1_from_f32(x), oracle_encode(f, x)) << x;
      EXPECT_EQ(e2m1_from_f32(-x), oracle_encode(f, -x)) << -x;
    }
  }
  EXPECT_EQ(e2m1_from_f32(-0.f), 0x8);
  EXPECT_EQ(e2m1_from_f32(-INFINITY), 0xF);
  EXPECT_EQ(e2m1_from_f32(-NAN), 0x7);
}

TEST(FloatConvert, Bf16) {
  EXPECT_EQ(bf16_from_f32(1.f), 0x3F80);
  EXPECT_EQ(bf16_from_f32(1.f + std::ldexp(1.f, -8)), 0x3F80);       // tie → even
  EXPECT_EQ(bf16_from_f32(1.f + 3 * std::ldexp(1.f, -8)), 0x3F82);   // tie → even (up)
  EXPECT_EQ(bf16_from_f32(INFINITY), 0x7F80);
  EXPECT_EQ(bf16_from_f32(3.4e38f), 0x7F80);                          // rounds past max → Inf
  uint32_t nan_payload = 0x7FA12345u;
  EXPECT_EQ(bf16_from_f32(f32_from_bits(nan_payload)), 0x7FE1);       // quiet bit set, payload top kept
  EXPECT_EQ(bf16_from_f32(f32_from_bits(0xFF812345u)), 0xFFC1);       // signalling NaN stays NaN
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float v = bf16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(v)) {
      EXPECT_TRUE(std::isnan(bf16_to_f32(bf16_from_f32(v))));
      continue;
    }
    ASSERT_EQ(bf16_from_f32(v), h);
  }
}

TEST(FloatConvert, F16) {
  EXPECT_EQ(f16_from_f32(1.f), 0x3C00);
  EXPECT_EQ(f16_from_f32(65504.f), 0x7BFF);
  EXPECT_EQ(f16_from_f32(65519.f), 0x7BFF);
  EXPECT_EQ(f16_from_f32(65520.f), 0x7C00);
  EXPECT_EQ(f16_from_f32(std::ldexp(1.f, -24)), 0x0001);
  EXPECT_EQ(f16_from_f32(std::ldexp(1.f, -25)), 0x0000);       // tie → even (0)
  EXPECT_EQ(f16_from_f32(std::ldexp(3.f, -25)), 0x0002);       // tie → even (2)
  EXPECT_EQ(f16_from_f32(1.f + std::ldexp(1.f, -11)), 0x3C00); // tie → even
  EXPECT_EQ(f16_from_f32(f32_from_bits(0x7FA12345u)), 0x7F09); // NaN: quiet, payload top bits
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float v = f16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(v)) continue;
    ASSERT_EQ(f16_from_f32(v), h) << h;
  }
  // random floats against the double-precision oracle over all finite f16 values
  std::vector<double> vals;
  for (uint32_t h = 0; h < 0x7C00; ++h) vals.push_back(f16_to_f32(static_cast<uint16_t>(h)));
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(0.f, 70000.f);
  for (int i = 0; i < 5000; ++i) {
    float x = std::ldexp(u(rng), -static_cast<int>(rng() % 30));
    uint16_t got = f16_from_f32(x);
    if (x >= 65520.f) {
      ASSERT_EQ(got, 0x7C00);
      continue;
    }
    auto it = std::lower_bound(vals.begin(), vals.end(), static_cast<double>(x));
    size_t hi = static_cast<size_t>(it - vals.begin()), lo = hi ? hi - 1 : 0;
    if (hi >= vals.size()) hi = vals.size() - 1;
    double dlo = x - vals[lo], dhi = vals[hi] - x;
    size_t want = dlo < dhi ? lo : (dhi < dlo ? hi : ((lo & 1) ? hi : lo));
    ASSERT_EQ(got, want) << x;
  }
}

}  // namespace
}  // namespace te
