// Local communicator: all_gather / reduce_scatter / all_reduce (sum, max) against a serial rank-ordered reference
// for W in {1, 2, 3, 4, 8}, grouped launches, mismatched launches, timeouts and fail-fast abort — on host memory,
// and on device memory (all ranks on one GPU, each on its own stream) when a GPU is present.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>

#include "comm/gather.h"
#include "comm/local_communicator.h"
#include "common/gpu.h"
#include "engine/element.h"
#include "engine/error.h"

namespace te {
namespace {

using namespace std::chrono_literals;

// Rank r's deterministic f32 values for collective `tag` (small integers and halves: sums are exact in bf16 too).
std::vector<float> rank_values(int r, int64_t n, int tag) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(((i * 7 + r * 13 + tag * 3) % 23) - 11) * 0.5f;
  return v;
}

// Serial reference: reduce in rank order in f32, round once to dtype.
std::vector<float> reduce_ref(int W, int64_t n, int tag, ReduceOp op, DType dt) {
  std::vector<float> acc;
  for (int r = 0; r < W; ++r) {
    auto v = rank_values(r, n, tag);
    if (dt == DType::bf16)
      for (auto& x : v) x = bf16_to_f32(bf16_from_f32(x));
    if (r == 0) {
      acc = v;
    } else {
      for (int64_t i = 0; i < n; ++i) acc[i] = op == ReduceOp::sum ? acc[i] + v[i] : std::max(acc[i], v[i]);
    }
  }
  for (auto& x : acc) x = dt == DType::bf16 ? bf16_to_f32(bf16_from_f32(x)) : x;
  return acc;
}

struct CommCase {
  int world;
  bool gpu;
  DType dtype;
};
std::string comm_case_name(const ::testing::TestParamInfo<CommCase>& i) {
  return "W" + std::to_string(i.param.world) + (i.param.gpu ? "_cuda_" : "_cpu_") +
         std::string(dtype_name(i.param.dtype));
}

class LocalCollectives : public ::testing::TestWithParam<CommCase> {
 protected:
  void SetUp() override {
    if (GetParam().gpu) TE_REQUIRE_GPU();
  }
  Device dev() const { return GetParam().gpu ? Device::cuda(0) : Device::cpu(); }
};

TEST_P(LocalCollectives, AllGatherReduceScatterAllReduce) {
  const auto [W, gpu, dt] = GetParam();
  auto comms = make_local_group(W, {dev(), 20s});
  const int64_t n = 37;  // rows of 3 per rank
  std::vector<std::vector<float>> gathered(W), scattered(W), summed(W), maxed(W);
  run_ranks(comms, [&](Communicator& c) {
    const int r = c.rank();
    Stream s = Stream::create(c.device());
    Tensor x = Tensor::from_f32(rank_values(r, n * 3, 0), {n, 3}, dt, c.device());
    Tensor g = Tensor::empty({W * n, 3}, dt, c.device());
    c.all_gather(x, g, s).wait();
    Tensor big = Tensor::from_f32(rank_values(r, W * n * 3, 1), {W * n, 3}, dt, c.device());
    auto rs = reduce_scatter_along_first_dim(big, c, false, s);
    Tensor a = Tensor::from_f32(rank_values(r, n, 2), {n}, dt, c.device());
    all_reduce(a, c, ReduceOp::sum, false, s);
    Tensor b = Tensor::from_f32(rank_values(r, n, 3), {n}, dt, c.device());
    c.all_reduce(b, ReduceOp::max, s).wait();
    gathered[r] = g.to_f32_vector(s);
    scattered[r] = rs.output.to_f32_vector(s);
    summed[r] = a.to_f32_vector(s);
    maxed[r] = b.to_f32_vector(s);
  });
  std::vector<float> g_ref;
  for (int r = 0; r < W; ++r) {
    auto v = Tensor::from_f32(rank_values(r, n * 3, 0), {n * 3}, dt).to_f32_vector();
    g_ref.insert(g_ref.end(), v.begin(), v.end());
  }
  auto rs_full = reduce_ref(W, W * n * 3, 1, ReduceOp::sum, dt);
  for (int r = 0; r < W; ++r) {
    EXPECT_EQ(gathered[r], g_ref) << "rank " << r;
    std::vector<float> rs_ref(rs_full.begin() + r * n * 3, rs_full.begin() + (r + 1) * n * 3);
    EXPECT_EQ(scattered[r], rs_ref) << "rank " << r;
    EXPECT_EQ(summed[r], reduce_ref(W, n, 2, ReduceOp::sum, dt)) << "rank " << r;
    EXPECT_EQ(maxed[r], reduce_ref(W, n, 3, ReduceOp::max, dt)) << "rank " << r;
  }
}

TEST_P(LocalCollectives, GroupedLaunchRunsEveryCollective) {
  const auto [W, gpu, dt] = GetParam();
  auto comms = make_local_group(W, {dev(), 20s});
  std::vector<std::vector<float>> g1(W), g2(W), ar(W);
  run_ranks(comms, [&](Communicator& c) {
    const int r = c.rank();
    Stream s = Stream::create(c.device());
    Tensor a = Tensor::from_f32(rank_values(r, 4, 5), {4}, dt, c.device());
    Tensor b = Tensor::from_f32(rank_values(r, 0, 6), {0}, dt, c.device());  // empty pieces are legal
    Tensor m = Tensor::from_f32(rank_values(r, 5, 7), {5}, DType::f32, c.device());
    Tensor ga = Tensor::empty({4 * W}, dt, c.device()), gb = Tensor::empty({0}, dt, c.device());
    std::vector<Collective> ops = {{CollectiveKind::all_gather, a, ga, ReduceOp::sum},
                                   {CollectiveKind::all_gather, b, gb, ReduceOp::sum},
                                   {CollectiveKind::all_reduce, Tensor(), m, ReduceOp::max}};
    Work w = c.launch(ops, s);
    bool post_ran = false;
    w.then([&] { post_ran = true; });
    w.wait();
    EXPECT_TRUE(post_ran);
    EXPECT_EQ(c.metrics().collectives, 3);
    g1[r] = ga.to_f32_vector(s);
    ar[r] = m.to_f32_vector(s);
  });
  for (int r = 0; r < W; ++r) {
    EXPECT_EQ(ar[r], reduce_ref(W, 5, 7, ReduceOp::max, DType::f32));
    for (int q = 0; q < W; ++q)
      for (int i = 0; i < 4; ++i) ASSERT_EQ(g1[r][q * 4 + i], rank_values(q, 4, 5)[i]);
  }
}

INSTANTIATE_TEST_SUITE_P(Worlds, LocalCollectives,
                         ::testing::Values(CommCase{1, false, DType::f32}, CommCase{2, false, DType::bf16},
                                           CommCase{3, false, DType::f32}, CommCase{4, false, DType::bf16},
                                           CommCase{8, false, DType::f32}, CommCase{1, true, DType::f32},
                                           CommCase{2, true, DType::bf16}, CommCase{3, true, DType::f32},
                                           CommCase{4, true, DType::bf16}, CommCase{8, true, DType::f32}),
                         comm_case_name);

TEST(LocalCommunicator, RankThatNeverArrivesTimesOutEveryOtherRank) {
  const int W = 4;
  auto comms = make_local_group(W, {Device::cpu(), 300ms});
  std::vector<std::string> errors(W);
  std::vector<double> waited_ms(W, 0);
  run_ranks(comms, [&](Communicator& c) {
    if (c.rank() == 2) return;  // never arrives
    Tensor x = Tensor::zeros({2}, DType::f32), g = Tensor::empty({2 * W}, DType::f32);
    const auto t0 = std::chrono::steady_clock::now();
    try {
      c.all_gather(x, g).wait();
    } catch (const Error& e) {
      errors[c.rank()] = e.what();
    }
    waited_ms[c.rank()] = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  });
  for (int r : {0, 1, 3}) {
    EXPECT_NE(errors[r].find("never arrived"), std::string::npos) << "rank " << r << ": " << errors[r];
    EXPECT_NE(errors[r].find('2'), std::string::npos) << errors[r];
    EXPECT_LT(waited_ms[r], 300 + 1500) << "rank " << r;
  }
  // The group stays broken: a later launch fails at once instead of hanging.
  Tensor x = Tensor::zeros({1}, DType::f32), g = Tensor::empty({W}, DType::f32);
  EXPECT_THROW(comms[0]->all_gather(x, g).wait(), Error);
}

TEST(LocalCommunicator, ARankThatThrowsAbortsTheOthersFast) {
  const int W = 3;
  auto comms = make_local_group(W, {Device::cpu(), 60s});
  std::atomic<int> aborted{0};
  const auto t0 = std::chrono::steady_clock::now();
  try {
    run_ranks(comms, [&](Communicator& c) {
      if (c.rank() == 1) TE_THROW("rank 1 broke", "");
      Tensor x = Tensor::zeros({2}, DType::f32), g = Tensor::empty({2 * W}, DType::f32);
      try {
        c.all_gather(x, g).wait();
      } catch (const Error& e) {
        if (std::string(e.what()).find("rank 1 failed") != std::string::npos) ++aborted;
        throw;
      }
    });
    FAIL() << "run_ranks did not rethrow";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 broke"), std::string::npos) << "first error must be the root cause";
  }
  EXPECT_EQ(aborted.load(), 2);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
}

TEST(LocalCommunicator, MismatchedLaunchesFailOnEveryRank) {
  const int W = 2;
  auto comms = make_local_group(W, {Device::cpu(), 5s});
  std::atomic<int> failures{0};
  EXPECT_THROW(run_ranks(comms,
                         [&](Communicator& c) {
                           const int64_t n = c.rank() == 0 ? 2 : 3;
                           Tensor x = Tensor::zeros({n}, DType::f32), g = Tensor::empty({n * W}, DType::f32);
                           try {
                             c.all_gather(x, g).wait();
                           } catch (const Error&) {
                             ++failures;
                             throw;
                           }
                         }),
               Error);
  EXPECT_EQ(failures.load(), W);
}

TEST(LocalCommunicator, ReduceScatterRejectsIndivisibleFirstDim) {
  auto comms = make_local_group(3, {Device::cpu(), 5s});
  try {
    reduce_scatter_along_first_dim(Tensor::zeros({10, 4}, DType::bf16), *comms[0], false);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not divide by the world size 3"), std::string::npos) << e.what();
  }
}

TEST(LocalCommunicator, ValidatesShapesAndDtypes) {
  auto comms = make_local_group(2, {Device::cpu(), 1s});
  Tensor x = Tensor::zeros({4}, DType::f32);
  EXPECT_THROW(comms[0]->all_gather(x, Tensor::empty({7}, DType::f32)).wait(), Error);
  EXPECT_THROW(comms[0]->all_gather(x, Tensor::empty({8}, DType::bf16)).wait(), Error);
  EXPECT_THROW(comms[0]->all_reduce(Tensor::zeros({4}, DType::fp8_e4m3), ReduceOp::sum).wait(), Error);
  EXPECT_THROW(comms[0]->all_gather(Tensor::zeros({4, 2}, DType::f32).transpose(0, 1), Tensor::empty({16}, DType::f32))
                   .wait(),
               Error);
  EXPECT_THROW(make_local_group(0), Error);
}

}  // namespace
}  // namespace te
