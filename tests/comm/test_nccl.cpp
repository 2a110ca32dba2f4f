// NCCL communicator: world size 1 on one GPU (collectives, grouped launch, the gather's local path), and every GPU
// of the machine in one process (make_nccl_group) when there are several: collectives and a block-scaled gather
// equal to quantize(concat).
#include <gtest/gtest.h>

#include <chrono>

#include "comm/gather.h"
#include "comm/local_communicator.h"
#include "comm/nccl_communicator.h"
#include "common/gpu.h"
#include "engine/error.h"

namespace te {
namespace {

using namespace std::chrono_literals;

TEST(Nccl, WorldSizeOneCollectives) {
  TE_REQUIRE_GPU();
  TcpRendezvousOptions rv;
  rv.rank = 0;
  rv.world = 1;
  auto comm = make_nccl_communicator(rv, Device::cuda(0), {30s});
  EXPECT_EQ(comm->backend(), "nccl");
  EXPECT_EQ(comm->size(), 1);
  Stream s = Stream::create(Device::cuda(0));
  Tensor x = Tensor::from_f32({1, 2, 3, 4}, {2, 2}, DType::bf16, Device::cuda(0));
  Tensor g = Tensor::empty({2, 2}, DType::bf16, Device::cuda(0));
  Tensor a = Tensor::from_f32({-1, 5}, {2}, DType::f32, Device::cuda(0));
  std::vector<Collective> ops = {{CollectiveKind::all_gather, x, g, ReduceOp::sum},
                                 {CollectiveKind::all_reduce, Tensor(), a, ReduceOp::max}};
  comm->launch(ops, s).wait();
  EXPECT_EQ(g.to_f32_vector(s), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(a.to_f32_vector(s), (std::vector<float>{-1, 5}));
  Tensor rs = Tensor::empty({2, 2}, DType::bf16, Device::cuda(0));
  comm->reduce_scatter(x, rs, ReduceOp::sum, s).wait();
  EXPECT_EQ(rs.to_f32_vector(s), (std::vector<float>{1, 2, 3, 4}));
  Quantizer q(QuantizerConfig{});
  GatherResult r = gather_along_first_dim(x, *comm, &q, Usage::both, false, s);
  EXPECT_EQ(r.plan.rowwise.path, GatherRoute::local);
  EXPECT_EQ(r.quantized().shape, (Shape{2, 2}));
}

TEST(Nccl, AllGpusOfOneProcessGatherExactly) {
  TE_REQUIRE_GPU();
  const int n = cuda_device_count();
  if (n < 2) GTEST_SKIP() << "needs 2+ GPUs (" << n << " visible)";
  std::vector<Device> devs;
  for (int i = 0; i < n; ++i) devs.push_back(Device::cuda(i));
  auto comms = make_nccl_group(devs, {60s});
  const int64_t Ml = 128, K = 384;
  QuantizerConfig qc;
  qc.format = QuantFormat::fp8_block_1d;
  qc.pow2_scales = true;
  Tensor x = Tensor::empty({n * Ml, K}, DType::bf16);
  x.fill_normal(5);
  Quantizer qref(qc);
  QuantizedTensor ref = qref.quantize(x, Usage::both);
  std::vector<QuantizedTensor> got(n);
  std::vector<std::vector<float>> sums(n);
  run_ranks(comms, [&](Communicator& c) {
    Stream s = Stream::create(c.device());
    Tensor shard = x.narrow(0, c.rank() * Ml, Ml).to(c.device(), s);
    Quantizer q(qc);
    GatherResult r = gather_along_first_dim(shard, c, &q, Usage::both, true, s);
    r.work.wait();
    EXPECT_EQ(r.plan.columnwise.path, GatherRoute::quantized);
    got[c.rank()] = r.quantized();
    Tensor v = Tensor::from_f32({float(c.rank()), 1}, {2}, DType::f32, c.device());
    all_reduce(v, c, ReduceOp::sum, false, s);
    sums[c.rank()] = v.to_f32_vector(s);
    s.synchronize();
  });
  auto host = [](const Tensor& t) { return t.to(Device::cpu()).to_f32_vector(); };
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(sums[r], (std::vector<float>{float(n * (n - 1) / 2), float(n)}));
    EXPECT_EQ(host(got[r].rowwise_data), host(ref.rowwise_data.to(Device::cpu())));
    EXPECT_EQ(host(got[r].columnwise_data), host(ref.columnwise_data));
    EXPECT_EQ(host(got[r].rowwise_scale_inv), host(ref.rowwise_scale_inv));
    EXPECT_EQ(host(got[r].columnwise_scale_inv), host(ref.columnwise_scale_inv));
  }
}

TEST(Nccl, CpuBuildsSayWhy) {
  if (built_with_cuda()) GTEST_SKIP() << "CUDA build";
  EXPECT_THROW(make_nccl_communicator_from_env(), Error);
}

}  // namespace
}  // namespace te
