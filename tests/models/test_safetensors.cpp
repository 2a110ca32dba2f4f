// safetensors reader/writer: bit-exact round trips per dtype, deterministic output, and every malformed-file case
// → te::InputError naming the file, the tensor and what to do.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "engine/error.h"
#include "models/parameters.h"
#include "models/safetensors.h"
#include "models/spec.h"

namespace te {
namespace {
namespace fs = std::filesystem;

std::string le64(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(n >> (8 * i));
  return s;
}
// A file from a header text and a data section.
std::string file_of(const std::string& header, const std::string& data) { return le64(header.size()) + header + data; }

fs::path temp_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("te_models_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

Tensor random_bytes_tensor(const Shape& shape, DType dtype, uint32_t seed) {
  Tensor t = Tensor::empty(shape, dtype);
  std::mt19937 rng(seed);
  auto* p = static_cast<uint8_t*>(t.data_ptr());
  for (int64_t i = 0; i < t.nbytes(); ++i) p[i] = static_cast<uint8_t>(rng());  // NaN payloads included
  return t;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && a.nbytes() == b.nbytes() &&
         std::memcmp(a.data_ptr(), b.data_ptr(), static_cast<size_t>(a.nbytes())) == 0;
}

// ---- round trips ---------------------------------------------------------------------------------------------------

class RoundTrip : public ::testing::TestWithParam<DType> {};

TEST_P(RoundTrip, WriteReadIsBitExact) {
  const DType dt = GetParam();
  const fs::path dir = temp_dir("rt_" + std::string(dtype_name(dt)));
  std::map<std::string, Tensor> in = {{"a.weight", random_bytes_tensor({3, 5}, dt, 1)},
                                      {"b", random_bytes_tensor({7}, dt, 2)},
                                      {"scalar", random_bytes_tensor({}, dt, 3)},
                                      {"empty", random_bytes_tensor({0, 4}, dt, 4)}};
  // A non-contiguous view is written as its logical C-order contents.
  Tensor base = random_bytes_tensor({4, 6}, dt, 5);
  in["view"] = base.transpose(0, 1);
  const fs::path file = dir / "w.safetensors";
  write_safetensors(file.string(), in, {{"format", "pt"}});
  SafetensorsReader r = SafetensorsReader::open(file.string());
  ASSERT_EQ(r.entries().size(), in.size());
  EXPECT_EQ(r.metadata().at("format"), "pt");
  for (const auto& [name, t] : in) {
    SCOPED_TRACE(name);
    Tensor got = r.read(name, t.shape(), dt);
    EXPECT_TRUE(same_bytes(got, t.contiguous()));
  }
  // Nothing but the file itself is left in the directory (the temporary was renamed).
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(AllDTypes, RoundTrip,
                         ::testing::Values(DType::f32, DType::bf16, DType::f16, DType::fp8_e4m3, DType::fp8_e5m2,
                                           DType::u8, DType::i32, DType::i64),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(Safetensors, EncodingIsDeterministicAndSorted) {
  std::map<std::string, Tensor> m = {{"z", Tensor::from_f32({1, 2}, {2}, DType::f32)},
                                     {"a", Tensor::from_f32({3}, {1}, DType::bf16)}};
  const std::string a = encode_safetensors(m), b = encode_safetensors(m);
  EXPECT_EQ(a, b);
  // Header: 8-byte aligned data section, keys sorted, data in key order ("a" first).
  uint64_t n = 0;
  std::memcpy(&n, a.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  const std::string header = a.substr(8, n);
  EXPECT_LT(header.find("\"a\""), header.find("\"z\""));
  EXPECT_NE(header.find("\"data_offsets\":[0,2]"), std::string::npos) << header;
  SafetensorsReader r = SafetensorsReader::from_bytes(a, "mem");
  EXPECT_EQ(r.read("z").to_f32_vector(), (std::vector<float>{1, 2}));
}

TEST(Safetensors, ReadsAFileWrittenByTheReferenceLayout) {
  // Hand-made like safetensors.torch.save_file: F16 [2] = {1.0, -2.0}, I64 [1] = {7}, metadata.
  const std::string data = std::string("\x00\x3C\x00\xC0", 4) + le64(7);
  const std::string f = file_of(
      R"({"__metadata__":{"format":"pt"},"h":{"dtype":"F16","shape":[2],"data_offsets":[0,4]},)"
      R"("i":{"dtype":"I64","shape":[1],"data_offsets":[4,12]}}   )",
      data);
  SafetensorsReader r = SafetensorsReader::from_bytes(f, "ref.safetensors");
  EXPECT_EQ(r.read("h").to_f32_vector(), (std::vector<float>{1.0f, -2.0f}));
  EXPECT_EQ(r.read("i").to_f32_vector(), (std::vector<float>{7.0f}));
  EXPECT_EQ(r.read_converted("h", {2}, DType::f32).to_f32_vector(), (std::vector<float>{1.0f, -2.0f}));
}

// ---- malformed files -----------------------------------------------------------------------------------------------

struct BadCase {
  std::string name;
  std::string bytes;
  std::vector<std::string> expect;  // substrings of the message
};

std::string entry(const std::string& name, const std::string& dtype, const std::string& shape, uint64_t b,
                  uint64_t e) {
  return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":[" +
         std::to_string(b) + "," + std::to_string(e) + "]}";
}

std::vector<BadCase> bad_file_cases() {
  const std::string ok_a = entry("a", "F32", "[2]", 0, 8);
  return {
      {"Truncated", std::string("\x10\x00\x00", 3), {"truncated", "shorter than the 8-byte"}},
      {"HeaderPastFile", le64(500) + "{}", {"header length 500 runs past the end of the file", "truncated"}},
      {"OneGigabyteHeaderClaim", le64(1ull << 30) + "{}", {"claims 1073741824 bytes", "limit"}},
      {"MaxHeaderClaim", le64(~0ull) + "{}", {"claims 18446744073709551615"}},
      {"InvalidJson", file_of("{\"a\": [1,", ""), {"not valid JSON"}},
      {"NotAnObject", file_of("[1, 2]", ""), {"does not start with '{'"}},
      {"EmptyHeader", file_of("", ""), {"does not start with '{'"}},
      {"OffsetsOutOfRange", file_of("{" + entry("a", "F32", "[2]", 0, 8) + "}", std::string(4, '\0')),
       {"tensor 'a'", "run past the data section (4 bytes)"}},
      {"OffsetsReversed", file_of("{" + entry("a", "F32", "[0]", 8, 0) + "}", std::string(8, '\0')),
       {"tensor 'a'", "end before they begin"}},
      {"Overlapping",
       file_of("{" + ok_a + "," + entry("b", "F32", "[2]", 4, 12) + "}", std::string(12, '\0')),
       {"tensor 'b'", "overlaps tensor 'a'"}},
      {"Hole", file_of("{" + entry("a", "F32", "[1]", 0, 4) + "," + entry("b", "F32", "[1]", 8, 12) + "}",
                       std::string(12, '\0')),
       {"belong to no tensor", "hole before tensor 'b'"}},
      {"TrailingBytes", file_of("{" + ok_a + "}", std::string(12, '\0')), {"cover only 8", "trailing"}},
      {"UnknownDType", file_of("{" + entry("a", "F64", "[1]", 0, 8) + "}", std::string(8, '\0')),
       {"tensor 'a'", "dtype 'F64' is not supported", "BF16"}},
      {"SizeMismatch", file_of("{" + entry("a", "BF16", "[3]", 0, 8) + "}", std::string(8, '\0')),
       {"tensor 'a'", "[3] × BF16 is 6 bytes but data_offsets span 8"}},
      {"ShapeOverflow",
       file_of("{" + entry("a", "F32", "[4294967296,4294967296,4294967296]", 0, 8) + "}", std::string(8, '\0')),
       {"tensor 'a'", "too large"}},
      // Empty, but its strides would overflow: refused like the non-empty shape (engine/tensor.h shape_numel).
      {"EmptyShapeTooLargeForStrides",
       file_of("{" + entry("a", "F32", "[0,4611686018427387904,4611686018427387904]", 0, 0) + "}", ""),
       {"tensor 'a'", "too large for any file"}},
      {"NegativeDim", file_of("{" + entry("a", "F32", "[-2]", 0, 8) + "}", std::string(8, '\0')),
       {"tensor 'a'", "not a non-negative integer"}},
      {"DuplicateNames", file_of("{" + ok_a + "," + ok_a + "}", std::string(8, '\0')),
       {"tensor 'a' appears twice", "unique"}},
      {"NonUtf8Name", file_of("{" + entry("bad\xff\xfe", "F32", "[2]", 0, 8) + "}", std::string(8, '\0')),
       {"not valid UTF-8"}},
      {"LoneSurrogateName", file_of("{" + entry("x\\ud800", "F32", "[2]", 0, 8) + "}", std::string(8, '\0')),
       {"not valid"}},
      {"MissingOffsets", file_of(R"({"a":{"dtype":"F32","shape":[2]}})", std::string(8, '\0')),
       {"tensor 'a'", "data_offsets"}},
      {"UnknownField", file_of(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}})", std::string(8, '\0')),
       {"tensor 'a'", "unknown field 'x'"}},
      {"MetadataNotStrings", file_of(R"({"__metadata__":{"k":1}})", ""), {"__metadata__", "not a string"}},
      // Names from the file are echoed escaped and cut (engine/printable.h): they must not drive a terminal.
      {"ControlCharactersInAName",
       file_of("{" + entry("a\\u001b[2J\\u0007", "F64", "[1]", 0, 8) + "}", std::string(8, '\0')),
       {"tensor 'a\\x1B[2J\\x07': dtype 'F64'"}},
      {"LongNameIsCut", file_of("{" + entry(std::string(5000, 'n'), "F64", "[1]", 0, 8) + "}", std::string(8, '\0')),
       {"tensor '" + std::string(100, 'n') + "... (5000 bytes)': dtype"}},
      {"DuplicateInsideAnEntry", file_of(R"({"a":{"dtype":"F32","dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                                         std::string(8, '\0')),
       {"key 'dtype' appears twice"}},
      // 60,000 nested arrays in 120 KB: a bounded parse, not a stack overflow while building or printing the tree.
      {"NestedShape60000Deep",
       file_of("{\"a\":{\"dtype\":\"F32\",\"shape\":" + std::string(60000, '[') + std::string(60000, ']') +
                   ",\"data_offsets\":[0,4]}}",
               std::string(4, '\0')),
       {"nests deeper than 16 levels"}},
      {"NestedOffsets60000Deep",
       file_of("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":" + std::string(60000, '[') +
                   std::string(60000, ']') + "}}",
               std::string(4, '\0')),
       {"nests deeper than 16 levels"}},
      {"NestedMetadata", file_of("{\"__metadata__\":" + std::string(40, '[') + std::string(40, ']') + "}", ""),
       {"nests deeper than 16 levels"}},
  };
}

// A sharded checkpoint's header can list hundreds of thousands of tensors: the parse stays linear (the duplicate-key
// check used to rescan the top-level object at every tensor, quadratic), and a duplicate at the very end is still
// found. 300,000 entries here (docs/PERFORMANCE.md has the time per 100,000).
std::string many_tensors_file(int n, bool duplicate_last) {
  std::string h = "{";
  for (int i = 0; i < n; ++i) {
    std::string name = std::to_string(10000000 + (duplicate_last && i == n - 1 ? 0 : i));
    name[0] = 't';  // t0000000 … t0299999
    if (i) h += ',';
    h += entry(name, "F32", "[1]", 4ull * static_cast<uint64_t>(i), 4ull * static_cast<uint64_t>(i) + 4);
  }
  return file_of(h + "}", std::string(4 * static_cast<size_t>(n), '\0'));
}

TEST(Safetensors, ThreeHundredThousandTensorsParseAndKeepTheirOrder) {
  const SafetensorsReader r = SafetensorsReader::from_bytes(many_tensors_file(300000, false), "many.safetensors");
  ASSERT_EQ(r.entries().size(), 300000u);
  EXPECT_EQ(r.entries().front().name, "t0000000");
  EXPECT_EQ(r.entries().back().name, "t0299999");
  EXPECT_EQ(r.entry("t0123456").begin, 4u * 123456u);
  try {
    SafetensorsReader::from_bytes(many_tensors_file(300000, true), "dup.safetensors");
    FAIL() << "a duplicate name at the end of a large header was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("tensor 't0000000' appears twice"), std::string::npos) << e.what();
  }
}

class BadFile : public ::testing::TestWithParam<BadCase> {};

TEST_P(BadFile, InMemoryThrowsInputErrorNamingTheProblem) {
  const BadCase& c = GetParam();
  try {
    SafetensorsReader::from_bytes(c.bytes, "bad.safetensors");
    FAIL() << "accepted a malformed file";
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("bad.safetensors: ", 0), 0u) << msg;
    for (const auto& s : c.expect) EXPECT_NE(msg.find(s), std::string::npos) << "missing '" << s << "' in: " << msg;
    EXPECT_FALSE(e.hint().empty()) << msg;
  }
}

TEST_P(BadFile, OnDiskThrowsTheSameWithThePath) {
  const BadCase& c = GetParam();
  const fs::path dir = temp_dir("bad_" + c.name);
  const fs::path p = dir / "bad.safetensors";
  std::ofstream(p, std::ios::binary) << c.bytes;
  try {
    SafetensorsReader::open(p.string());
    FAIL() << "accepted a malformed file";
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind(p.string() + ": ", 0), 0u) << msg;
    for (const auto& s : c.expect) EXPECT_NE(msg.find(s), std::string::npos) << "missing '" << s << "' in: " << msg;
  }
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Cases, BadFile, ::testing::ValuesIn(bad_file_cases()),
                         [](const auto& info) { return info.param.name; });

// ---- lookups -------------------------------------------------------------------------------------------------------

TEST(Safetensors, MissingTensorSuggestsTheClosestName) {
  std::map<std::string, Tensor> m = {{"layers.0.mlp.fc1_weight", Tensor::zeros({2, 2}, DType::bf16)}};
  SafetensorsReader r = SafetensorsReader::from_bytes(encode_safetensors(m), "w.safetensors");
  try {
    r.read("layers.0.mlp.fc1_weigth");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("w.safetensors: tensor 'layers.0.mlp.fc1_weigth' is missing"),
              std::string::npos)
        << e.what();
    EXPECT_NE(e.hint().find("did you mean 'layers.0.mlp.fc1_weight'"), std::string::npos) << e.hint();
  }
}

TEST(Safetensors, TypedLookupRejectsWrongShapeAndDType) {
  std::map<std::string, Tensor> m = {{"w", Tensor::zeros({2, 3}, DType::bf16)}};
  SafetensorsReader r = SafetensorsReader::from_bytes(encode_safetensors(m), "w.safetensors");
  EXPECT_NO_THROW(r.read("w", {2, 3}, DType::bf16));
  for (auto [shape, dt] : std::vector<std::pair<Shape, DType>>{{{3, 2}, DType::bf16}, {{2, 3}, DType::f32}}) {
    try {
      r.read("w", shape, dt);
      FAIL();
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("tensor 'w' is [2, 3] bf16, expected " + shape_str(shape)),
                std::string::npos)
          << e.what();
    }
  }
  EXPECT_THROW(r.read_converted("w", {6}, DType::f32), InputError);
  EXPECT_EQ(r.read_converted("w", {2, 3}, DType::f32).dtype(), DType::f32);
}

TEST(Safetensors, MissingFileAndDirectoryAreInputErrors) {
  EXPECT_THROW(SafetensorsReader::open("/nonexistent/x.safetensors"), InputError);
  EXPECT_THROW(SafetensorsReader::open(fs::temp_directory_path().string()), InputError);
}

// ---- writer failures leave nothing behind ---------------------------------------------------------------------------

TEST(Safetensors, FailedWriteLeavesNoPartialFileAndKeepsTheOldOne) {
  const fs::path dir = temp_dir("failwrite");
  const fs::path p = dir / "out.safetensors";
  std::map<std::string, Tensor> good = {{"x", Tensor::from_f32({1, 2, 3}, {3}, DType::f32)}};
  write_safetensors(p.string(), good);
  const std::string before = encode_safetensors(good);
  // fp4 has no safetensors dtype: refused before any byte is written.
  std::map<std::string, Tensor> bad = {{"x", Tensor::from_f32({1, 2, 3}, {3}, DType::f32)},
                                       {"y", Tensor::zeros({4}, DType::fp4_e2m1)}};
  EXPECT_THROW(write_safetensors(p.string(), bad), InputError);
  EXPECT_THROW(write_safetensors((dir / "missing_dir" / "o.safetensors").string(), good), InputError);
  std::ifstream f(p, std::ios::binary);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(f), {}), before);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);
  fs::remove_all(dir);
}

// A rank reads only its slices of a weights file: the shards equal those of the whole global tensors, for column-
// and row-parallel weights, replicated tensors and swiglu's two FC1 halves, in bf16 and f32 files.
TEST(RankShards, SlicedReadsEqualTheShardsOfTheGlobalTensors) {
  const fs::path d = temp_dir("rank_shards");
  for (const char* dtype : {"bf16", "f32"}) {
    ModelSpec spec = parse_spec(std::string("model:\n  hidden: 64\n  layers: 1\n  dtype: ") + dtype +
                                    "\n  block:\n    - [ {layernorm_linear: {name: qkv, out: 128}}, "
                                    "{linear: {name: proj, out: 64}} ]\n"
                                    "    - [ {layernorm_mlp: {name: mlp, ffn: 128, activation: swiglu}} ]\n"
                                    "parallel: {tp: 4, sequence_parallel: true}\nrun: {seed: 5}\n",
                                "<shards>");
    GlobalParams g = init_params(spec);
    for (Tensor& v : g.values) v.fill_normal(static_cast<uint64_t>(v.numel()) * 31 + v.dim());  // no constant tensors
    const std::string file = (d / (std::string(dtype) + ".safetensors")).string();
    save_params(g, spec.model.dtype, file);
    GlobalParams from_file = load_params(spec, file);
    for (int tp : {1, 2, 4})
      for (int rank = 0; rank < tp; ++rank) {
        RankShards want = shard_params(from_file, rank, tp), got = load_rank_params(spec, file, rank, tp);
        ASSERT_EQ(got.values.size(), want.values.size());
        for (size_t i = 0; i < want.values.size(); ++i) {
          ASSERT_EQ(got.values[i].shape(), want.values[i].shape()) << want.specs[i].name;
          EXPECT_EQ(got.values[i].to_f32_vector(), want.values[i].to_f32_vector())
              << dtype << " " << want.specs[i].name << " rank " << rank << "/" << tp;
        }
      }
  }
  fs::remove_all(d);
}

// A grouped-query QKV projection keeps TransformerEngine's interleaved rows in the global tensor (each key/value
// group's query heads, key, value) and its heads' kinds apart on a rank (every query head, then every key, then every
// value), at tp 1 as well; unsharding puts every row back.
TEST(RankShards, GroupedQueryQkvRowsAreHeldKindsApart) {
  ModelSpec spec = parse_spec(
      "model:\n  hidden: 16\n  block:\n    - [ {layernorm_linear: {name: qkv, out: 32}},\n"
      "        {attention: {name: a, heads: 4, kv_heads: 2, head_dim: 4, seq_len: 2}},\n"
      "        {linear: {name: proj, out: 16}} ]\nparallel: {tp: 2}\n",
      "<gqa>");
  const std::vector<ParamSpec> specs = parameter_specs(spec);
  for (const ParamSpec& p : specs)
    EXPECT_EQ(p.qkv_of != nullptr, p.name == "layers.0.qkv.weight" || p.name == "layers.0.qkv.bias") << p.name;
  const ParamSpec& bias = specs[3];
  ASSERT_EQ(bias.name, "layers.0.qkv.bias");
  std::vector<float> rows(32);
  for (int i = 0; i < 32; ++i) rows[static_cast<size_t>(i)] = static_cast<float>(i);  // global row i holds i
  const Tensor global = Tensor::from_f32(rows, {32}, DType::f32);
  // Global: group 0 = q rows 0-7, k 8-11, v 12-15; group 1 = q 16-23, k 24-27, v 28-31 (head_dim 4).
  const auto range = [](std::initializer_list<std::pair<int, int>> spans) {
    std::vector<float> v;
    for (auto [a, b] : spans)
      for (int i = a; i < b; ++i) v.push_back(static_cast<float>(i));
    return v;
  };
  EXPECT_EQ(shard_param(bias, global, 0, 1).to_f32_vector(),
            range({{0, 8}, {16, 24}, {8, 12}, {24, 28}, {12, 16}, {28, 32}}));
  EXPECT_EQ(shard_param(bias, global, 1, 2).to_f32_vector(), range({{16, 32}}));
  for (int tp : {1, 2}) {
    Tensor back = Tensor::zeros({32}, DType::f32);
    for (int rank = 0; rank < tp; ++rank) unshard_param(bias, shard_param(bias, global, rank, tp), rank, tp, back);
    EXPECT_EQ(back.to_f32_vector(), rows) << "tp " << tp;
  }
}

// Seeded init per rank (one global tensor at a time) gives the shards of the whole seeded init.
TEST(RankShards, SeededInitPerRankEqualsTheShardedGlobalInit) {
  ModelSpec spec = parse_spec("model:\n  hidden: 64\n  layers: 2\n  block:\n"
                              "    - [ {layernorm_mlp: {name: mlp, ffn: 128, activation: swiglu}} ]\n"
                              "parallel: {tp: 2, sequence_parallel: true}\n",
                              "<seeded>");
  GlobalParams g = init_params(spec);
  for (int rank = 0; rank < 2; ++rank) {
    RankShards want = shard_params(g, rank, 2), got = init_rank_params(spec, rank, 2);
    for (size_t i = 0; i < want.values.size(); ++i)
      EXPECT_EQ(got.values[i].to_f32_vector(), want.values[i].to_f32_vector()) << want.specs[i].name;
  }
}

}  // namespace
}  // namespace te
