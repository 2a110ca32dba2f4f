// Independent vectors from tools/gen_quant_vectors.py (written from docs/NUMERICS.md, every fp8 cast checked
// against PyTorch) stored in tests/data/quant_vectors.bin. Format: a sequence of records
//   u32 name_len, name bytes, u32 kind, u32 n_in, f32 in[n_in], u32 n_out, u8 out[n_out], u32 M, u32 K
// kind 0..3: element casts (e4m3, e5m2, e2m1, e8m0-ceil) of `in`, one output byte each (M = K = 0);
// kind 10..16: quantize `in` as f32 [M, K] with a config fixed per kind (the file's first version);
// kind 20: quantize `in` as [M, K] in the input dtype and config named by "<config>|<case>" (see the script);
// `out` = row-wise data ‖ row-wise scale bytes ‖ column-wise data ‖ column-wise scale bytes (‖ row-wise amax ‖
// column-wise amax, f32, for kind 20 in the formats that store one). Every byte is compared.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
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

// A kind-20 record's config, parsed from "<format>:<data dtype>:<input dtype>[:pow2][:rht][:sr=<seed>]|<case>".
struct NamedConfig {
  QuantizerConfig cfg;
  DType input = DType::f32;
  std::string family;  // format:data dtype[:rht][:sr] (pow2 and the input dtype are variations within a family)
  std::string input_name, case_name;
};

NamedConfig parse_config(const std::string& name) {
  NamedConfig n;
  const size_t bar = name.find('|');
  if (bar == std::string::npos) throw std::runtime_error("no '|' in the record name " + name);
  n.case_name = name.substr(bar + 1);
  std::vector<std::string> tok;
  std::stringstream ss(name.substr(0, bar));
  for (std::string t; std::getline(ss, t, ':');) tok.push_back(t);
  if (tok.size() < 3) throw std::runtime_error("short config in " + name);
  const std::optional<QuantFormat> f = quant_format_from_name(tok[0]);
  if (!f) throw std::runtime_error("unknown format in " + name);
  const DType dt = tok[1] == "e5m2" ? DType::fp8_e5m2 : tok[1] == "e2m1" ? DType::fp4_e2m1 : DType::fp8_e4m3;
  // NVFP4's quantizer config keeps the default data dtype (its element dtype is implied by the format).
  n.cfg = qtest::cfg_of(*f, tok[1] == "e2m1" ? DType::fp8_e4m3 : dt, false);
  n.input_name = tok[2];
  n.input = tok[2] == "bf16" ? DType::bf16 : tok[2] == "f16" ? DType::f16 : DType::f32;
  n.family = tok[0] + ":" + tok[1];
  for (size_t i = 3; i < tok.size(); ++i) {
    if (tok[i] == "pow2") {
      n.cfg.pow2_scales = true;
    } else if (tok[i] == "rht") {
      n.cfg.random_hadamard = true;
      n.family += ":rht";
    } else if (tok[i].rfind("sr=", 0) == 0) {
      n.cfg.stochastic_rounding = true;
      n.cfg.seed = std::stoull(tok[i].substr(3));
      n.family += ":sr";
    } else {
      throw std::runtime_error("unknown option '" + tok[i] + "' in " + name);
    }
  }
  return n;
}

std::string vectors_path() {
  const char* dir = std::getenv("TE_TEST_DATA");
  return std::string(dir ? dir : "tests/data") + "/quant_vectors.bin";
}

// Row data ‖ row scales ‖ column data ‖ column scales (‖ amaxes) of quantizing `x` for both usages.
std::vector<uint8_t> quantized_bytes(const QuantizerConfig& cfg, const Tensor& x, bool with_amax) {
  Quantizer q(cfg);
  QuantizedTensor qt = q.quantize(x, Usage::both);
  std::vector<uint8_t> got;
  for (const Tensor* t : {&qt.rowwise_data, &qt.rowwise_scale_inv, &qt.columnwise_data, &qt.columnwise_scale_inv}) {
    const std::vector<uint8_t> b = qtest::bytes(*t);
    got.insert(got.end(), b.begin(), b.end());
  }
  if (with_amax)
    for (const Tensor* t : {&qt.rowwise_amax, &qt.columnwise_amax}) {
      const std::vector<uint8_t> b = qtest::bytes(*t);
      got.insert(got.end(), b.begin(), b.end());
    }
  return got;
}

TEST(QuantVectors, MatchIndependentGenerator) {
  const std::string path = vectors_path();
  if (!std::ifstream(path).good())
    GTEST_SKIP() << path << " is absent: generate it with `python3 tools/gen_quant_vectors.py --out " << path
                 << "` and commit it";
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
    if (r.kind == 20) {
      const NamedConfig n = parse_config(r.name);
      Tensor x = Tensor::from_f32(r.in, {int64_t(r.M), int64_t(r.K)}, n.input);
      // The values are exact in the input dtype (the generator rounded them), so this conversion changes nothing.
      const std::vector<float> back = x.to_f32_vector();
      ASSERT_EQ(0, std::memcmp(back.data(), r.in.data(), r.in.size() * 4)) << "input not exact in " << n.input_name;
      const bool amax = quant_format_info(n.cfg.format).has_amax;
      const std::vector<uint8_t> got = quantized_bytes(n.cfg, x, amax);
      ASSERT_EQ(got.size(), r.out.size());
      size_t first = 0;
      while (first < got.size() && got[first] == r.out[first]) ++first;
      EXPECT_EQ(first, got.size()) << "first differing byte " << first << " of " << got.size() << ": got 0x" << std::hex
                                   << (first < got.size() ? int(got[first]) : 0) << " want 0x"
                                   << (first < got.size() ? int(r.out[first]) : 0);
      ++checked;
      continue;
    }
    Tensor x = Tensor::from_f32(r.in, {int64_t(r.M), int64_t(r.K)}, DType::f32);
    EXPECT_EQ(quantized_bytes(config_for(r.kind), x, false), r.out);
    ++checked;
  }
  EXPECT_GT(checked, 0);
}

// The file must exercise the scale arithmetic of every format, not just its degenerate cases: per family (format,
// element dtype, RHT, SR) at least three records with a finite, non-zero amax spanning 1e-5 … 1e3, f32, bf16 and
// f16 inputs among them, and the special cases (Inf, NaN, all zero) as records of their own. The first version of
// the file (an Inf or an all-zero matrix in every per-tensor and NVFP4 record) fails here.
TEST(QuantVectors, EveryFormatHasRecordsWithRealScales) {
  const std::string path = vectors_path();
  if (!std::ifstream(path).good()) GTEST_SKIP() << path << " is absent";
  struct Seen {
    int finite = 0;
    double lo = INFINITY, hi = 0;
    std::set<std::string> inputs, specials;
  };
  std::map<std::string, Seen> fam;
  for (const Record& r : load_records(path)) {
    if (r.kind != 20) continue;
    const NamedConfig n = parse_config(r.name);
    Seen& s = fam[n.family];
    float amax = 0.f;
    bool has_inf = false, has_nan = false;
    for (float v : r.in) {
      has_inf |= std::isinf(v);
      has_nan |= std::isnan(v);
      if (!std::isnan(v)) amax = std::max(amax, std::fabs(v));
    }
    if (has_inf) s.specials.insert("inf");
    if (has_nan) s.specials.insert("nan");
    if (amax == 0.f) s.specials.insert("zero");
    if (std::isfinite(amax) && amax > 0.f && !has_nan) {
      ++s.finite;
      s.lo = std::min(s.lo, double(amax));
      s.hi = std::max(s.hi, double(amax));
      s.inputs.insert(n.input_name);
    }
  }
  const char* want[] = {"fp8_per_tensor:e4m3", "fp8_per_tensor:e5m2", "fp8_block_1d:e4m3", "fp8_block_1d:e5m2",
                        "fp8_block_2d:e4m3",   "mxfp8:e4m3",          "mxfp8:e5m2",        "nvfp4_1d:e2m1",
                        "nvfp4_1d:e2m1:rht",   "nvfp4_1d:e2m1:rht:sr", "nvfp4_2d:e2m1"};
  for (const char* f : want) {
    SCOPED_TRACE(f);
    const auto it = fam.find(f);
    ASSERT_NE(it, fam.end()) << path << " has no record with real scales for " << f
                             << ": regenerate it with tools/gen_quant_vectors.py";
    const Seen& s = it->second;
    EXPECT_GE(s.finite, 3);
    EXPECT_LE(s.lo, 1e-5);
    EXPECT_GE(s.hi, 1e3);
    EXPECT_EQ(s.inputs, (std::set<std::string>{"bf16", "f16", "f32"}));
    EXPECT_EQ(s.specials, (std::set<std::string>{"inf", "nan", "zero"}));
  }
}

}  // namespace
}  // namespace te
