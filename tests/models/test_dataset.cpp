// Training data: the seeded shuffle (deterministic per seed, a permutation per epoch), batches read from files and
// directories with a leading batch dimension or without, and every bad file refused naming the field and the file.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <numeric>

#include "engine/error.h"
#include "models/batch_order.h"
#include "models/dataset.h"
#include "models/safetensors.h"
#include "training_util.h"

namespace te {
namespace {
namespace fs = std::filesystem;
using training_test::kHidden;
using training_test::kTokens;
using training_test::seeded_normal;

TEST(DatasetOrder, SplitmixMatchesItsPublishedOutput) {
  uint64_t st = 0;
  EXPECT_EQ(splitmix64(st), 0xE220A8397B1DCDAFull);  // the first output of splitmix64 from state 0
  EXPECT_EQ(st, 0x9E3779B97F4A7C15ull);
}

TEST(DatasetOrder, ShuffleIsAPermutationDeterministicPerSeed) {
  for (int64_t n : {1, 2, 3, 10, 257})
    for (uint64_t seed : {0ull, 5ull, 1234ull})
      for (int64_t epoch : {0, 1, 7}) {
        const std::vector<int64_t> a = epoch_order(n, true, seed, epoch);
        EXPECT_EQ(a, epoch_order(n, true, seed, epoch)) << n << " " << seed << " " << epoch;  // same seed: same
        std::vector<int64_t> sorted = a, identity(static_cast<size_t>(n));
        std::sort(sorted.begin(), sorted.end());
        std::iota(identity.begin(), identity.end(), 0);
        EXPECT_EQ(sorted, identity) << n << " " << seed << " " << epoch;  // each batch exactly once
      }
  const std::vector<int64_t> e0 = epoch_order(10, true, 5, 0);
  EXPECT_NE(e0, epoch_order(10, true, 5, 1));  // a new order each epoch
  EXPECT_NE(e0, epoch_order(10, true, 6, 0));  // another seed, another order
  std::vector<int64_t> identity(10);
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_NE(e0, identity);
  EXPECT_EQ(epoch_order(10, false, 5, 3), identity);  // shuffle off: file order
}

TEST(DatasetOrder, StepsMapToEpochPositionAndBatch) {
  const std::vector<int64_t> e0 = epoch_order(10, true, 5, 0), e1 = epoch_order(10, true, 5, 1);
  BatchOrder order(10, true, 5);
  EXPECT_EQ(order.at(1).batch, e0[0]);
  EXPECT_EQ(order.at(13).epoch, 1);
  EXPECT_EQ(order.at(13).position, 2);
  EXPECT_EQ(order.at(13).batch, e1[2]);
  EXPECT_EQ(order.at(10).batch, e0[9]);  // back to epoch 0: a resumed run may ask in any order
  EXPECT_EQ(order.at(10).epoch, 0);
}

class DatasetFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = training_test::scratch_path("data");
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string at(const std::string& name) const { return (dir_ / name).string(); }
  // Dataset::open must refuse `paths` with a te::InputError that names the field and contains `what`.
  void expect_refused(const std::vector<std::string>& paths, const std::string& what) {
    try {
      Dataset::open(paths, kTokens, kHidden, "run.data");
      ADD_FAILURE() << "opened " << paths[0];
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("run.data"), std::string::npos) << e.what();
      EXPECT_FALSE(e.hint().empty()) << e.what();
    }
  }
  fs::path dir_;
};

TEST_F(DatasetFiles, ReadsBatchesFromFilesAndDirectories) {
  fs::create_directories(dir_ / "shards");
  Tensor a = seeded_normal({3, kTokens, kHidden}, 1), b = seeded_normal({kTokens, kHidden}, 2);
  write_safetensors(at("shards/0.safetensors"),
                    {{"input", a}, {"target", Tensor::from_f32(a.to_f32_vector(), a.shape(), DType::bf16)}});
  write_safetensors(at("shards/1.safetensors"), {{"input", b}, {"target", b}});
  Dataset d = Dataset::open({at("shards")}, kTokens, kHidden, "run.data");
  EXPECT_EQ(d.batches(), 4);
  EXPECT_EQ(d.files(), 2);
  const Dataset::Batch b1 = d.read(1), b3 = d.read(3);
  EXPECT_EQ(b1.input.shape(), (Shape{kTokens, kHidden}));
  const std::vector<float> av = a.to_f32_vector(), i1 = b1.input.to_f32_vector();
  EXPECT_TRUE(std::equal(i1.begin(), i1.end(), av.begin() + kTokens * kHidden));  // batch 1 of file 0
  EXPECT_EQ(b3.input.to_f32_vector(), b.to_f32_vector());                         // file 1, no batch dimension
  const std::vector<float> t1 = b1.target.to_f32_vector();                        // bf16, converted to f32
  EXPECT_EQ(t1[5], Tensor::from_f32({av[kTokens * kHidden + 5]}, {1}, DType::bf16).to_f32_vector()[0]);
  // A file and a list: the batches of each in order.
  Dataset both = Dataset::open({at("shards/1.safetensors"), at("shards")}, kTokens, kHidden, "run.data");
  EXPECT_EQ(both.batches(), 5);
  EXPECT_EQ(both.read(0).input.to_f32_vector(), b.to_f32_vector());
}

TEST_F(DatasetFiles, MissingFilesAndDirectoriesAreRefused) {
  expect_refused({at("missing.safetensors")}, "missing.safetensors does not exist");
  fs::create_directories(dir_ / "empty");
  expect_refused({at("empty")}, "holds no .safetensors");
}

TEST_F(DatasetFiles, AMalformedFileIsRefusedNamingIt) {
  std::ofstream(at("junk.safetensors")) << "this is not a safetensors file";
  expect_refused({at("junk.safetensors")}, "junk.safetensors");
}

TEST_F(DatasetFiles, BatchesOfTheWrongShapeOrDtypeAreRefused) {
  const Tensor x = seeded_normal({kTokens, kHidden}, 3);
  write_safetensors(at("short.safetensors"),
                    {{"input", seeded_normal({2, 16, kHidden}, 3)}, {"target", seeded_normal({2, 16, kHidden}, 3)}});
  expect_refused({at("short.safetensors")}, "short.safetensors: `input` has shape [2, 16, 64]");
  write_safetensors(at("narrow.safetensors"),
                    {{"input", seeded_normal({kTokens, 32}, 3)}, {"target", seeded_normal({kTokens, 32}, 3)}});
  expect_refused({at("narrow.safetensors")}, "narrow.safetensors: `input` has shape [32, 32]");
  write_safetensors(at("mis.safetensors"), {{"input", seeded_normal({2, kTokens, kHidden}, 3)},
                                            {"target", seeded_normal({3, kTokens, kHidden}, 3)}});
  expect_refused({at("mis.safetensors")}, "mis.safetensors: `target`");
  Tensor ints = Tensor::empty({kTokens, kHidden}, DType::i32);
  std::memset(ints.data_ptr(), 0, static_cast<size_t>(ints.nbytes()));
  write_safetensors(at("ints.safetensors"), {{"input", ints}, {"target", x}});
  expect_refused({at("ints.safetensors")}, "ints.safetensors: `input` has dtype i32");
  write_safetensors(at("notarget.safetensors"), {{"input", x}});
  expect_refused({at("notarget.safetensors")}, "target");
  // --input may lack a target (the CLI then trains towards 0.5·input); a dataset mixing both is refused.
  EXPECT_FALSE(Dataset::open({at("notarget.safetensors")}, kTokens, kHidden, "--input", true).read(0).target.defined());
  write_safetensors(at("good.safetensors"), {{"input", x}, {"target", x}});
  try {
    Dataset::open({at("good.safetensors"), at("notarget.safetensors")}, kTokens, kHidden, "--input", true);
    ADD_FAILURE() << "mixed targets accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("notarget.safetensors lacks `target`"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace te
