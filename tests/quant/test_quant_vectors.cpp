// Independent vectors from tools/gen_quant_vectors.py (torch casts, ml_dtypes, numpy formulas) stored in
// tests/data/quant_vectors.bin. Format: a sequence of records
//   u32 name_len, name bytes, u32 kind, u32 n_in, f32 in[n_in], u32 n_out, u8 out[n_out], u32 M, u32 K
// kind 0..3: element casts (e4m3, e5m2, e2m1, e8m0-ceil) of `in`, one output byte each (M = K = 0);
// kind 10+: quantize `in` as f32 [M, K]; `out` = row-wise data ‖ row-wise scale bytes ‖ column-wise data ‖
// column-wise scale bytes, for the config named by `name` (see the script).
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "ops/quant/scale_math.h"
#include "quant_test_util.h"

namespace te {
namespace {

struct Record {
  std::string name;
  uint32_t kind = 0, M = 0, K = 0;
  std::vector<float> in;
  std::vector<uint8_t> out;
};

std::vector<Record> load_records(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::vector<Record> recs;
  auto u32 = [&] {
    uint32_t v = 0;
    f.read(reinterpret_cast<char*>(&v), 4);
    return v;
  };
  while (f.peek() != EOF) {
    Record r;
    r.name.resize(u32());
    f.read(r.name.data(), r.name.size());
    r.kind = u32();
    r.in.resize(u32());
    f.read(reinterpret_cast<char*>(r.in.data()), r.in.size() * 4);
    r.out.resize(u32());
    f.read(reinterpret_cast<char*>(r.out.data()), r.out.size());
    r.M = u32();
    r.K = u32();
    if (!f) break;
    recs.push_back(std::move(r));
  }
  return recs;
}

QuantizerConfig config_for(uint32_t kind) {
  switch (kind) {
    case 10: return qtest::cfg_of(QuantFormat::fp8_block_1d, DType::fp8_e4m3, true);
    case 11: return qtest::cfg_of(QuantFormat::fp8_block_2d, DType::fp8_e4m3, true);
    case 12: return qtest::cfg_of(QuantFormat::mxfp8);
    case 13: return qtest::cfg_of(QuantFormat::nvfp4_1d);
    case 14: return qtest::cfg_of(QuantFormat::nvfp4_2d);
    case 15: return qtest::cfg_of(QuantFormat::fp8_per_tensor);
    default: return qtest::cfg_of(QuantFormat::fp8_block_1d, DType::fp8_e4m3, false);  // 16
  }
}

TEST(QuantVectors, MatchIndependentGenerator) {
  const char* dir = std::getenv("TE_TEST_DATA");
  const std::string path = std::string(dir ? dir : "tests/data") + "/quant_vectors.bin";
  if (!std::ifstream(path).good())
    GTEST_SKIP() << path << " is absent: generate it with `python3 tools/gen_quant_vectors.py " << path
                 << "` (torch, numpy, ml_dtypes) and commit it";
  const std::vector<Record> recs = load_records(path);
  ASSERT_FALSE(recs.empty()) << path << " holds no records";
  int checked = 0;
  for (const Record& r : recs) {
    SCOPED_TRACE(r.name);
    if (r.kind <= 3) {
      ASSERT_EQ(r.in.size(), r.out.size());
      int bad = 0;
      for (size_t i = 0; i < r.in.size() && bad < 5; ++i) {
        const float x = r.in[i];
        const uint8_t got = r.kind == 0   ? e4m3_from_f32(x)
                            : r.kind == 1 ? e5m2_from_f32(x)
                            : r.kind == 2 ? e2m1_from_f32(x)
                                          : e8m0_from_f32_ceil(x);
        if (got != r.out[i]) {
          ++bad;
          ADD_FAILURE() << "input " << x << " (bits 0x" << std::hex << f32_bits(x) << "): got 0x" << int(got)
                        << " want 0x" << int(r.out[i]);
        }
      }
      ++checked;
      continue;
    }
    Tensor x = Tensor::from_f32(r.in, {int64_t(r.M), int64_t(r.K)}, DType::f32);
    Quantizer q(config_for(r.kind));
    QuantizedTensor qt = q.quantize(x, Usage::both);
    std::vector<uint8_t> got;
    for (const Tensor* t : {&qt.rowwise_data, &qt.rowwise_scale_inv, &qt.columnwise_data, &qt.columnwise_scale_inv}) {
      const std::vector<uint8_t> b = qtest::bytes(*t);
      got.insert(got.end(), b.begin(), b.end());
    }
    EXPECT_EQ(got, r.out);
    ++checked;
  }
  EXPECT_GT(checked, 0);
}

}  // namespace
}  // namespace te
