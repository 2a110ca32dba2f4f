// Attention against an independent reference: PyTorch's scaled_dot_product_attention (float64, on the H200) with
// the rotary embedding and grouped-query layouts the model uses, forward and gradients, from seeded f32 inputs
// (tools/gen_attention_reference.py wrote tests/data/attention_ref.safetensors; each case's parameters are in its
// metadata). The CPU reference runs every case in f32 within f32's tolerance; the CUDA kernels (when a GPU is
// present) run it in bf16, whose rounding of the inputs alone moves each element by up to 2^-9.
#include <gtest/gtest.h>

#include <cstdlib>
#include <sstream>

#include "common/gpu.h"
#include "engine/compare.h"
#include "models/safetensors.h"
#include "ops/attention/attention.h"
#include "ops/attention/rope.h"
#include "ops/elementwise/elementwise.h"

namespace te {
namespace {

struct TorchAttnCase {
  std::string name;
  int64_t batch, seq, heads, kv_heads, head_dim;
  bool causal;
  double rope_base;
};

SafetensorsReader attention_vectors() {
  const char* d = std::getenv("TE_TEST_DATA");
  return SafetensorsReader::open(std::string(d ? d : "tests/data") + "/attention_ref.safetensors");
}

// "batch,seq,heads,kv_heads,head_dim,causal,rope_base" per case; the generator's own keys are not cases.
std::vector<TorchAttnCase> cases_of(const SafetensorsReader& r) {
  std::vector<TorchAttnCase> out;
  for (const auto& [name, value] : r.metadata()) {
    if (name == "generator" || name == "torch" || name == "device") continue;
    TorchAttnCase c{name, 0, 0, 0, 0, 0, false, 0};
    std::istringstream in(value);
    char sep;
    int causal = 0;
    in >> c.batch >> sep >> c.seq >> sep >> c.heads >> sep >> c.kv_heads >> sep >> c.head_dim >> sep >> causal >>
        sep >> c.rope_base;
    c.causal = causal != 0;
    EXPECT_TRUE(in && !in.fail()) << "metadata of " << name << ": " << value;
    out.push_back(c);
  }
  return out;
}

struct Results {
  std::vector<float> out, dqkv;
};

// rope → attention → backward → inverse rope, every tensor on qkv's device in qkv's dtype.
Results run_case(const TorchAttnCase& c, const Tensor& qkv, const Tensor& dout) {
  const AttentionLayout l{c.heads, c.kv_heads, c.head_dim, c.seq};
  const int64_t T = c.batch * c.seq;
  const Device dev = qkv.device();
  Tensor x = qkv;
  if (c.rope_base > 0) {
    x = Tensor::empty(qkv.shape(), qkv.dtype(), dev);
    rope_apply(l, c.rope_base, false, qkv, x);
  }
  Tensor out = Tensor::empty({T, l.out_cols()}, qkv.dtype(), dev);
  Tensor lse = Tensor::empty({c.batch, c.heads, c.seq}, DType::f32, dev);
  Tensor dqkv = Tensor::empty(qkv.shape(), qkv.dtype(), dev);
  attention_forward(l, {c.causal}, x, out, lse);
  attention_backward(l, {c.causal}, dout, x, out, lse, dqkv);
  if (c.rope_base > 0) rope_apply(l, c.rope_base, true, dqkv, dqkv);
  return {out.to_f32_vector(), dqkv.to_f32_vector()};
}

TEST(AttentionTorchReference, CpuMatchesPyTorchInF32) {
  const SafetensorsReader r = attention_vectors();
  const std::vector<TorchAttnCase> cases = cases_of(r);
  ASSERT_GE(cases.size(), 5u);
  for (const TorchAttnCase& c : cases) {
    const Results got = run_case(c, r.read(c.name + ".qkv"), r.read(c.name + ".dout"));
    EXPECT_LE(rel_l2(got.out, r.read(c.name + ".out").to_f32_vector()), 1e-5) << c.name;
    EXPECT_LE(rel_l2(got.dqkv, r.read(c.name + ".dqkv").to_f32_vector()), 1e-5) << c.name;
  }
}

TEST(AttentionTorchReference, GpuMatchesPyTorchInBf16) {
  TE_REQUIRE_GPU();
  const SafetensorsReader r = attention_vectors();
  for (const TorchAttnCase& c : cases_of(r)) {
    const Results got = run_case(c, cast(r.read(c.name + ".qkv").to(Device::cuda(0)), DType::bf16),
                                 cast(r.read(c.name + ".dout").to(Device::cuda(0)), DType::bf16));
    EXPECT_LE(rel_l2(got.out, r.read(c.name + ".out").to_f32_vector()), 2e-2) << c.name;
    EXPECT_LE(rel_l2(got.dqkv, r.read(c.name + ".dqkv").to_f32_vector()), 2e-2) << c.name;
  }
}

}  // namespace
}  // namespace te
