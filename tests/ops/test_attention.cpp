// Attention and rotary embedding on the CPU against the float64 reference of tests/common/attention_reference.h
// (written independently of the kernel), gradients against central finite differences of that reference, and the
// properties the model relies on: a tensor-parallel rank's slice of the QKV columns gives exactly
// the bytes of the same heads computed whole, and the rotary embedding's inverse undoes it. On the GPU each case runs
// on cuDNN's fused attention and on the engine's own kernels, and the two are compared with each other.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <sstream>
#include <tuple>

#include "common/attention_reference.h"
#include "common/gpu.h"
#include "ops/attention/attention.h"
#include "ops/attention/cudnn_calls.h"
#include "ops/attention/rope.h"
#include "ops_test_util.h"

namespace te {
namespace {
using namespace test;

struct AttnCase {
  int64_t batch, seq, heads, kv_heads, head_dim;
  bool causal;
  double rope_base;  // 0: no rotary embedding
  DType dtype;
};

void PrintTo(const AttnCase& c, std::ostream* os) {
  *os << c.batch << "x" << c.seq << " tokens, " << c.heads << "/" << c.kv_heads << " heads of " << c.head_dim;
}

std::string attn_case_name(const ::testing::TestParamInfo<AttnCase>& i) {
  const AttnCase& c = i.param;
  std::ostringstream o;  // (GCC 12 warns falsely on a chain of std::string additions here)
  o << "b" << c.batch << "_s" << c.seq << "_h" << c.heads << "kv" << c.kv_heads << "_d" << c.head_dim
    << (c.causal ? "_causal" : "_full") << (c.rope_base > 0 ? "_rope" : "") << "_" << dtype_name(c.dtype);
  return o.str();
}

AttentionLayout attn_layout_of(const AttnCase& c) { return {c.heads, c.kv_heads, c.head_dim, c.seq}; }

// Sets an environment variable that ops/attention reads at every call (TEENGINE_ATTENTION_KERNELS,
// TEENGINE_ATTENTION_WORKSPACE_MIB) for the scope, then restores it.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    setenv(name, value, 1);
  }
  ~ScopedEnv() { had_ ? setenv(name_, old_.c_str(), 1) : unsetenv(name_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

// TEENGINE_ATTENTION_KERNELS for the scope.
struct ScopedAttentionKernels : ScopedEnv {
  explicit ScopedAttentionKernels(const char* value) : ScopedEnv("TEENGINE_ATTENTION_KERNELS", value) {}
};

std::vector<double> attention_ref_forward(const AttnCase& c, const std::vector<double>& qkv) {
  return attention_reference::forward({c.batch, c.seq, c.heads, c.kv_heads, c.head_dim, c.causal, c.rope_base}, qkv);
}

// The kernel pipeline under test: rope (optional) then attention; the backward in reverse.
struct KernelRun {
  Tensor roped, out, lse, dqkv;
};
KernelRun run_kernels(const AttnCase& c, const Tensor& qkv, const Tensor* dout, bool deterministic = true,
                      bool kinds_apart = false) {
  AttentionLayout l = attn_layout_of(c);
  l.kinds_apart = kinds_apart;
  const AttentionOptions o{c.causal, 0.0f, deterministic};
  const int64_t T = c.batch * c.seq;
  KernelRun r;
  r.roped = qkv;
  if (c.rope_base > 0) {
    r.roped = Tensor::empty(qkv.shape(), qkv.dtype(), qkv.device());
    rope_apply(l, c.rope_base, false, qkv, r.roped);
  }
  r.out = Tensor::empty({T, l.out_cols()}, qkv.dtype(), qkv.device());
  r.lse = Tensor::empty({c.batch, c.heads, c.seq}, DType::f32, qkv.device());
  attention_forward(l, o, r.roped, r.out, r.lse);
  if (dout) {
    r.dqkv = Tensor::empty(qkv.shape(), qkv.dtype(), qkv.device());
    attention_backward(l, o, *dout, r.roped, r.out, r.lse, r.dqkv);
    if (c.rope_base > 0) rope_apply(l, c.rope_base, true, r.dqkv, r.dqkv);  // in place
  }
  return r;
}

// Each of two ranks' halves of the heads (qkv and dout sliced by columns, run on `device`) gives exactly the bytes
// `whole` gave for those heads: output, statistics and gradients.
void expect_rank_halves_match_whole(const AttnCase& c, const Tensor& qkv, const Tensor& dout, const KernelRun& whole,
                                    Device device) {
  const AttentionLayout l = attn_layout_of(c);
  const int64_t w = l.qkv_cols() / 2, o = l.out_cols() / 2, h = c.heads / 2;
  AttnCase half = c;
  half.heads /= 2;
  half.kv_heads /= 2;
  const Tensor out = whole.out.to(Device::cpu()), lse = whole.lse.to(Device::cpu()),
               dqkv = whole.dqkv.to(Device::cpu());
  for (int rank = 0; rank < 2; ++rank) {
    const Tensor q = qkv.narrow(1, rank * w, w).contiguous().to(device);
    const Tensor d = dout.narrow(1, rank * o, o).contiguous().to(device);
    const KernelRun part = run_kernels(half, q, &d);
    EXPECT_EQ(bytes_of(part.out), bytes_of(out.narrow(1, rank * o, o).contiguous())) << "rank " << rank;
    EXPECT_EQ(bytes_of(part.lse), bytes_of(lse.narrow(1, rank * h, h).contiguous())) << "rank " << rank;
    EXPECT_EQ(bytes_of(part.dqkv), bytes_of(dqkv.narrow(1, rank * w, w).contiguous())) << "rank " << rank;
  }
}

// attention_forward on these tensors throws a te::Error whose message contains `text`.
void expect_attention_forward_refused(const AttentionLayout& l, const Tensor& qkv, Tensor& out, Tensor& lse,
                                      const std::string& text) {
  try {
    attention_forward(l, {}, qkv, out, lse);
    ADD_FAILURE() << "no error; expected one containing '" << text << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
  }
}

class AttentionTest : public ::testing::TestWithParam<AttnCase> {};

TEST_P(AttentionTest, ForwardMatchesFloat64AndBackwardMatchesFiniteDifferences) {
  const AttnCase c = GetParam();
  const AttentionLayout l = attn_layout_of(c);
  const int64_t T = c.batch * c.seq;
  const Tensor qkv = random_2d(T, l.qkv_cols(), c.dtype, 7 + c.seq, Device::cpu(), Layout::contiguous);
  const Tensor dout = random_2d(T, l.out_cols(), c.dtype, 9 + c.seq, Device::cpu(), Layout::contiguous);
  const KernelRun r = run_kernels(c, qkv, &dout);
  std::vector<double> x = to_f64(qkv);
  EXPECT_LE(rel_l2(attention_ref_forward(c, x), r.out.to_f32_vector()), tol_for(c.dtype));

  // d/dqkv of Σ dout ⊙ out, centrally differenced in float64 (bf16/f16 inputs are exact there).
  const std::vector<double> w = to_f64(dout);
  std::vector<double> g(x.size());
  const double step = 1e-5;
  for (size_t i = 0; i < x.size(); ++i) {
    const double keep = x[i];
    double loss[2];
    for (int s = 0; s < 2; ++s) {
      x[i] = keep + (s ? -step : step);
      const std::vector<double> y = attention_ref_forward(c, x);
      loss[s] = 0;
      for (size_t j = 0; j < y.size(); ++j) loss[s] += w[j] * y[j];
    }
    x[i] = keep;
    g[i] = (loss[0] - loss[1]) / (2 * step);
  }
  EXPECT_LE(rel_l2(g, r.dqkv.to_f32_vector()), c.dtype == DType::f32 ? kTolFiniteDiff : tol_for(c.dtype));
}

TEST_P(AttentionTest, RankSliceGivesTheSameBytesAsTheWholeHeads) {
  const AttnCase c = GetParam();
  if (c.kv_heads % 2 != 0) GTEST_SKIP() << "one key/value group cannot be split over two ranks";
  const AttentionLayout l = attn_layout_of(c);
  const int64_t T = c.batch * c.seq;
  const Tensor qkv = random_2d(T, l.qkv_cols(), c.dtype, 11, Device::cpu(), Layout::contiguous);
  const Tensor dout = random_2d(T, l.out_cols(), c.dtype, 12, Device::cpu(), Layout::contiguous);
  expect_rank_halves_match_whole(c, qkv, dout, run_kernels(c, qkv, &dout), Device::cpu());
}

INSTANTIATE_TEST_SUITE_P(
    Ops, AttentionTest,
    ::testing::Values(AttnCase{2, 13, 4, 2, 8, true, 0, DType::f32},     // grouped-query, causal
                      AttnCase{2, 13, 4, 2, 8, false, 0, DType::f32},    // not causal
                      AttnCase{1, 5, 2, 2, 4, true, 0, DType::f32},      // multi-head
                      AttnCase{2, 9, 4, 1, 6, true, 0, DType::f32},      // multi-query
                      AttnCase{2, 13, 4, 2, 8, true, 10000, DType::f32}, // rotary
                      AttnCase{1, 67, 2, 2, 4, true, 500, DType::f32},   // longer than 64, not a multiple
                      AttnCase{1, 70, 2, 1, 8, false, 0, DType::f32},    // two blocks of query rows, not causal
                      AttnCase{2, 11, 4, 2, 8, true, 10000, DType::bf16},
                      AttnCase{1, 7, 2, 1, 8, false, 0, DType::f16}),
    attn_case_name);

// The GPU cases: each runs on cuDNN's fused attention and on the own kernels. Every head_dim here is a multiple of
// 8, so cuDNN takes them all.
const std::vector<AttnCase> kGpuCases{
    AttnCase{2, 13, 4, 2, 8, true, 0, DType::bf16},       // tiny head dim, zero-padded to 32 (own kernels)
    AttnCase{1, 67, 4, 4, 64, true, 10000, DType::bf16},  // one row past a tile, rotary
    AttnCase{2, 130, 8, 2, 128, true, 0, DType::bf16},    // GQA, three tiles
    AttnCase{2, 130, 8, 2, 128, false, 0, DType::bf16},   // the same, not causal
    AttnCase{1, 200, 4, 1, 40, true, 500, DType::f16},    // MQA, head dim 40 in a tile of 64
    AttnCase{1, 256, 4, 2, 96, false, 0, DType::f16},     // whole tiles, head dim 96
    AttnCase{1, 64, 2, 2, 128, true, 0, DType::f16},      // exactly one tile
    AttnCase{2, 100, 4, 1, 64, true, 10000, DType::bf16}, // MQA on the register-resident path
    AttnCase{1, 96, 2, 2, 64, false, 0, DType::f16},      // f16, not causal, head dim 64
    // More sequences than one launch's grid holds (65535): run in chunks, on either path.
    AttnCase{66000, 1, 2, 2, 8, false, 0, DType::bf16},
    AttnCase{65600, 2, 2, 1, 64, true, 0, DType::bf16},
    AttnCase{3, 32, 8, 4, 64, true, 0, DType::bf16},      // GQA with more groups than sequences (cuDNN: per sequence)
};

using GpuParam = std::tuple<AttnCase, AttentionKernels>;

std::string gpu_case_name(const ::testing::TestParamInfo<GpuParam>& i) {
  return attn_case_name({std::get<0>(i.param), i.index}) + "_" + attention_kernels_name(std::get<1>(i.param));
}

// The GPU against the CPU reference on the same inputs: the output, the softmax statistics and the gradients
// (through the rotary embedding where there is one). The GPU rounds the probabilities and score gradients to the
// input type before its tensor-core products, as flash attention does; the CPU keeps them in f32, so the two agree
// within the dtype's tolerance, the statistics within f32's. Each head's bytes do not depend on the others, so a
// rank's slice of the heads computes exactly what the whole does, and every run gives the same bytes: the own
// kernels by construction, cuDNN through its deterministic backward.
class AttentionGpuTest : public ::testing::TestWithParam<GpuParam> {};

TEST_P(AttentionGpuTest, MatchesTheCpuReferenceAndIsDeterministic) {
  TE_REQUIRE_GPU();
  const auto [c, kernels] = GetParam();
  const ScopedAttentionKernels forced(attention_kernels_name(kernels));  // cuDNN failing to run the case throws
  const AttentionLayout l = attn_layout_of(c);
  const int64_t T = c.batch * c.seq;
  const Tensor qkv = random_2d(T, l.qkv_cols(), c.dtype, 21 + c.seq, Device::cpu(), Layout::contiguous);
  const Tensor dout = random_2d(T, l.out_cols(), c.dtype, 23 + c.seq, Device::cpu(), Layout::contiguous);
  const KernelRun cpu = run_kernels(c, qkv, &dout);
  const Tensor dout_gpu = dout.to(Device::cuda(0));
  const KernelRun gpu = run_kernels(c, qkv.to(Device::cuda(0)), &dout_gpu);
  EXPECT_EQ(last_attention_kernels(false), kernels);
  EXPECT_EQ(last_attention_kernels(true), kernels);
  EXPECT_LE(rel_l2(to_f64(cpu.out), gpu.out.to_f32_vector()), tol_for(c.dtype));
  EXPECT_LE(rel_l2(to_f64(cpu.lse), gpu.lse.to_f32_vector()), kTolF32);
  EXPECT_LE(rel_l2(to_f64(cpu.dqkv), gpu.dqkv.to_f32_vector()), tol_for(c.dtype));
  const KernelRun again = run_kernels(c, qkv.to(Device::cuda(0)), &dout_gpu);
  EXPECT_EQ(bytes_of(gpu.out), bytes_of(again.out));
  EXPECT_EQ(bytes_of(gpu.dqkv), bytes_of(again.dqkv));
  if (c.kv_heads % 2 == 0) expect_rank_halves_match_whole(c, qkv, dout, gpu, Device::cuda(0));
}

INSTANTIATE_TEST_SUITE_P(Ops, AttentionGpuTest,
                         ::testing::Combine(::testing::ValuesIn(kGpuCases),
                                            ::testing::Values(AttentionKernels::own, AttentionKernels::cudnn)),
                         gpu_case_name);

// cuDNN against the own kernels on the same inputs. Both round the probabilities to the input type before the
// second product, in different orders, so they agree within the dtype's tolerance (the statistics within f32's).
class AttentionCudnnVsOwnTest : public ::testing::TestWithParam<AttnCase> {};

TEST_P(AttentionCudnnVsOwnTest, AgreeOnTheSameInputs) {
  TE_REQUIRE_GPU();
  const AttnCase c = GetParam();
  const AttentionLayout l = attn_layout_of(c);
  const int64_t T = c.batch * c.seq;
  const Tensor qkv = random_2d(T, l.qkv_cols(), c.dtype, 31 + c.seq, Device::cuda(0), Layout::contiguous);
  const Tensor dout = random_2d(T, l.out_cols(), c.dtype, 33 + c.seq, Device::cuda(0), Layout::contiguous);
  KernelRun runs[2];
  for (AttentionKernels k : {AttentionKernels::own, AttentionKernels::cudnn}) {
    const ScopedAttentionKernels forced(attention_kernels_name(k));
    runs[k == AttentionKernels::cudnn] = run_kernels(c, qkv, &dout);
  }
  const KernelRun &own = runs[0], &cudnn = runs[1];
  EXPECT_LE(rel_l2(to_f64(own.out), cudnn.out.to_f32_vector()), tol_for(c.dtype));
  EXPECT_LE(rel_l2(to_f64(own.lse), cudnn.lse.to_f32_vector()), kTolF32);
  EXPECT_LE(rel_l2(to_f64(own.dqkv), cudnn.dqkv.to_f32_vector()), tol_for(c.dtype));
}

INSTANTIATE_TEST_SUITE_P(Ops, AttentionCudnnVsOwnTest, ::testing::ValuesIn(kGpuCases), attn_case_name);

// cuDNN's nondeterministic backward (dq accumulated with f32 atomics) against the CPU reference, within the dtype's
// tolerance like the deterministic one; the forward is the same plan, so its bytes equal the deterministic run's.
class AttentionCudnnNondeterministicTest : public ::testing::TestWithParam<AttnCase> {};

TEST_P(AttentionCudnnNondeterministicTest, MatchesTheCpuReference) {
  TE_REQUIRE_GPU();
  const AttnCase c = GetParam();
  const ScopedAttentionKernels cudnn("cudnn");
  const AttentionLayout l = attn_layout_of(c);
  const int64_t T = c.batch * c.seq;
  const Tensor qkv = random_2d(T, l.qkv_cols(), c.dtype, 51 + c.seq, Device::cpu(), Layout::contiguous);
  const Tensor dout = random_2d(T, l.out_cols(), c.dtype, 53 + c.seq, Device::cpu(), Layout::contiguous);
  const KernelRun cpu = run_kernels(c, qkv, &dout);
  const Tensor qkv_gpu = qkv.to(Device::cuda(0)), dout_gpu = dout.to(Device::cuda(0));
  const KernelRun fast = run_kernels(c, qkv_gpu, &dout_gpu, false);
  EXPECT_EQ(last_attention_kernels(true), AttentionKernels::cudnn);
  EXPECT_LE(rel_l2(to_f64(cpu.dqkv), fast.dqkv.to_f32_vector()), tol_for(c.dtype));
  const KernelRun det = run_kernels(c, qkv_gpu, &dout_gpu, true);
  EXPECT_EQ(bytes_of(det.out), bytes_of(fast.out));
  EXPECT_EQ(bytes_of(det.lse), bytes_of(fast.lse));
}

INSTANTIATE_TEST_SUITE_P(Ops, AttentionCudnnNondeterministicTest, ::testing::ValuesIn(kGpuCases), attn_case_name);

// cuDNN's backward keeps each sequence's score gradients in its workspace; under a cap it runs as calls over fewer
// sequences with the same bytes (a sequence's heads are computed on their own), and a cap that is not a number of
// MiB is refused by name.
TEST(Attention, CudnnBackwardUnderAWorkspaceCapGivesTheSameBytes) {
  TE_REQUIRE_GPU();
  const AttnCase c{8, 130, 4, 4, 64, true, 0, DType::bf16};  // a sequence's score gradients: 4 · 130² · 2 bytes
  const AttentionLayout l = attn_layout_of(c);
  const Tensor qkv = random_2d(c.batch * c.seq, l.qkv_cols(), c.dtype, 41, Device::cuda(0), Layout::contiguous);
  const Tensor dout = random_2d(c.batch * c.seq, l.out_cols(), c.dtype, 43, Device::cuda(0), Layout::contiguous);
  const ScopedAttentionKernels cudnn("cudnn");
  const KernelRun whole = run_kernels(c, qkv, &dout);
  {
    const ScopedEnv cap("TEENGINE_ATTENTION_WORKSPACE_MIB", "1");  // 7 sequences per call: calls of 7 and 1
    const KernelRun capped = run_kernels(c, qkv, &dout);
    EXPECT_EQ(bytes_of(whole.out), bytes_of(capped.out));
    EXPECT_EQ(bytes_of(whole.dqkv), bytes_of(capped.dqkv));
  }
  const ScopedEnv bad("TEENGINE_ATTENTION_WORKSPACE_MIB", "lots");
  try {
    run_kernels(c, qkv, &dout);
    FAIL() << "a workspace cap of 'lots' was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("TEENGINE_ATTENTION_WORKSPACE_MIB=lots"), std::string::npos) << e.what();
  }
}

// cuDNN's calls and backward workspace, as arithmetic: the per-sequence workspace reproduces what cuDNN 9.14's plans
// reported on an H100 (plus our f32 row sums), the cap cuts the backward into calls of whole sequences, and
// --explain's figure is zero where cuDNN does not run.
TEST(Attention, CudnnCallsAndBackwardWorkspaceFollowTheCap) {
  const AttentionLayout mha{32, 32, 128, 2048}, gqa{32, 8, 128, 2048};
  const int64_t row_sums = 8 * 32 * 2048 * 4;
  EXPECT_EQ(8 * cudnn_attention::backward_workspace_per_sequence(mha, 2, true), int64_t{2147483648} + row_sums);
  EXPECT_EQ(8 * cudnn_attention::backward_workspace_per_sequence(gqa, 2, true), int64_t{2415919104} + row_sums);
  // Nondeterministic: dq's f32 accumulator (8 · 2048 tokens of 32 heads of 128) instead of the score gradients.
  EXPECT_EQ(8 * cudnn_attention::backward_workspace_per_sequence(mha, 2, false), int64_t{268435456} + row_sums);
  {
    const ScopedEnv unset("TEENGINE_ATTENTION_WORKSPACE_MIB", "");
    EXPECT_EQ(cudnn_attention::backward_workspace_cap(), int64_t{8192} << 20);
    EXPECT_EQ(cudnn_attention::sequences_per_call(mha, 2, true, true), 31);     // 8 GiB over 256.25 MiB a sequence
    EXPECT_EQ(cudnn_attention::sequences_per_call(mha, 2, true, false), 254);   // 8 GiB over 32.25 MiB
    EXPECT_EQ(cudnn_attention::sequences_per_call(mha, 2, false, true), 2047);  // 65535 rows of 32 heads
    const ScopedAttentionKernels own("own");
    EXPECT_EQ(attention_backward_workspace_bytes(Device::cuda(0), mha, 8 * 2048, DType::bf16, true), 0);
  }
  EXPECT_EQ(attention_backward_workspace_bytes(Device::cpu(), mha, 8 * 2048, DType::bf16, true), 0);
  {
    const ScopedEnv cap("TEENGINE_ATTENTION_WORKSPACE_MIB", "1");
    const AttentionLayout small{4, 4, 64, 130};  // 137280 bytes a sequence: 7 in 1 MiB
    EXPECT_EQ(cudnn_attention::sequences_per_call(small, 2, true, true), 7);
    // One-token sequences of 2 heads: 32767 fit the grid, rounded down to pairs (a sequence's statistics are 8 bytes).
    EXPECT_EQ(cudnn_attention::sequences_per_call({2, 2, 8, 1}, 2, true, true), 32766);
    const ScopedAttentionKernels unset("");
    EXPECT_EQ(attention_backward_workspace_bytes(Device::cuda(0), small, 8 * 130, DType::bf16, true), 7 * 137280);
  }
  const ScopedEnv bad("TEENGINE_ATTENTION_WORKSPACE_MIB", "lots");
  try {
    cudnn_attention::backward_workspace_cap();
    FAIL() << "a workspace cap of 'lots' was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("TEENGINE_ATTENTION_WORKSPACE_MIB=lots"), std::string::npos) << e.what();
  }
}

TEST(Attention, KernelsChoiceIsReadFromTheEnvironmentAndBadNamesAreRefused) {
  {
    const ScopedAttentionKernels unset("");
    EXPECT_FALSE(forced_attention_kernels().has_value());
  }
  {
    const ScopedAttentionKernels own("own");
    EXPECT_EQ(forced_attention_kernels(), AttentionKernels::own);
  }
  const ScopedAttentionKernels bad("fast");
  EXPECT_THROW(forced_attention_kernels(), Error);
}

TEST(Attention, CudaRefusesF32AndWideHeadsByName) {
  TE_REQUIRE_GPU();
  const AttentionLayout l{2, 2, 8, 4};
  const Tensor qkv = Tensor::zeros({8, l.qkv_cols()}, DType::f32, Device::cuda(0));
  Tensor out = Tensor::empty({8, l.out_cols()}, DType::f32, Device::cuda(0));
  Tensor lse = Tensor::empty({2, 2, 4}, DType::f32, Device::cuda(0));
  expect_attention_forward_refused(l, qkv, out, lse, "bf16/f16 with head_dim");
  const AttentionLayout wide{2, 2, kCudaAttentionMaxHeadDim + 8, 4};
  const Tensor wide_qkv = Tensor::zeros({8, wide.qkv_cols()}, DType::bf16, Device::cuda(0));
  Tensor wide_out = Tensor::empty({8, wide.out_cols()}, DType::bf16, Device::cuda(0));
  expect_attention_forward_refused(wide, wide_qkv, wide_out, lse, "bf16/f16 with head_dim");
}

// What --explain names: which kernels a device, dtype and head_dim get (no GPU needed to ask).
TEST(Attention, KernelsAreNamedByDeviceDtypeAndHeadDim) {
  const ScopedAttentionKernels unset("");
  EXPECT_NE(attention_kernels(Device::cpu(), DType::f32, 40).find("CPU reference"), std::string::npos);
  EXPECT_NE(attention_kernels(Device::cuda(0), DType::bf16, 128).find("register-resident"), std::string::npos);
  EXPECT_NE(attention_kernels(Device::cuda(0), DType::f16, 64).find("register-resident"), std::string::npos);
  EXPECT_NE(attention_kernels(Device::cuda(0), DType::bf16, 96).find("shared-memory"), std::string::npos);
  EXPECT_NE(attention_kernels(Device::cuda(0), DType::f32, 64).find("none"), std::string::npos);
  EXPECT_NE(attention_kernels(Device::cuda(0), DType::bf16, 256).find("none"), std::string::npos);
  EXPECT_NE(attention_kernels(Device::cuda(0), DType::bf16, 64).find("cuDNN"), std::string::npos);
  EXPECT_EQ(attention_kernels(Device::cuda(0), DType::bf16, 36).find("cuDNN"), std::string::npos);  // not 8·k
  const ScopedAttentionKernels own("own");
  EXPECT_EQ(attention_kernels(Device::cuda(0), DType::bf16, 64).find("cuDNN"), std::string::npos);
}

TEST(Rope, InverseUndoesItInPlaceAndOutOfPlaceAgree) {
  const AttentionLayout l{4, 2, 8, 9};
  const Tensor x = random_2d(18, l.qkv_cols(), DType::f32, 3, Device::cpu(), Layout::contiguous);
  Tensor y = Tensor::empty(x.shape(), DType::f32), z = Tensor::empty(x.shape(), DType::f32);
  rope_apply(l, 10000, false, x, y);
  Tensor in_place = Tensor::empty(x.shape(), DType::f32);
  in_place.copy_from(x);
  rope_apply(l, 10000, false, in_place, in_place);
  EXPECT_EQ(bytes_of(y), bytes_of(in_place));
  EXPECT_NE(bytes_of(y), bytes_of(x));  // it did turn something
  rope_apply(l, 10000, true, y, z);
  EXPECT_LE(rel_l2(to_f64(x), z.to_f32_vector()), kTolF32);
  // Position 0 is not turned, and the values pass unchanged everywhere.
  const auto xs = x.to_f32_vector(), ys = y.to_f32_vector();
  for (int64_t c = 0; c < l.qkv_cols(); ++c) EXPECT_EQ(xs[static_cast<size_t>(c)], ys[static_cast<size_t>(c)]);
  for (int64_t t = 0; t < 18; ++t)
    for (int64_t g = 0; g < l.kv_heads; ++g)
      for (int64_t e = 0; e < l.head_dim; ++e) {
        const size_t at = static_cast<size_t>(t * l.qkv_cols() + l.v_col(g) + e);
        EXPECT_EQ(xs[at], ys[at]);
      }
}

TEST(Attention, RejectsPartialSequencesAndMismatchedLayoutsByName) {
  const AttentionLayout l{4, 2, 8, 16};
  const Tensor qkv = Tensor::zeros({24, l.qkv_cols()}, DType::f32);
  Tensor out = Tensor::empty({24, l.out_cols()}, DType::f32), lse = Tensor::empty({1, 4, 16}, DType::f32);
  expect_attention_forward_refused(l, qkv, out, lse, "not whole sequences of 16");
  const Tensor wide = Tensor::zeros({32, l.qkv_cols() + 8}, DType::f32);
  expect_attention_forward_refused(l, wide, out, lse, "(heads + 2 · kv_heads) · head_dim");
}

// QKV rows moved from the interleaved layout to the kinds-apart one (or back): each head's columns, on the CPU.
Tensor move_heads(const AttentionLayout& from, const Tensor& rows) {
  AttentionLayout to = from;
  to.kinds_apart = !from.kinds_apart;
  Tensor out = Tensor::empty(rows.shape(), rows.dtype());
  const auto move = [&](int64_t src, int64_t dst) {
    out.narrow(1, dst, from.head_dim).copy_from(rows.narrow(1, src, from.head_dim));
  };
  for (int64_t h = 0; h < from.heads; ++h) move(from.q_col(h), to.q_col(h));
  for (int64_t g = 0; g < from.kv_heads; ++g) {
    move(from.k_col(g), to.k_col(g));
    move(from.v_col(g), to.v_col(g));
  }
  return out;
}

// The same heads with their kinds apart give the same bytes: output, statistics and (moved back) gradients,
// through the rotary embedding, on the CPU and on the GPU with either kernels. Only where the heads sit changes.
TEST(Attention, KindsApartRowsGiveTheBytesOfInterleavedRows) {
  std::vector<std::pair<Device, const char*>> runs{{Device::cpu(), ""}};
  if (cuda_device_count() > 0) runs.insert(runs.end(), {{Device::cuda(0), "own"}, {Device::cuda(0), "cudnn"}});
  for (const AttnCase& c :
       {AttnCase{2, 130, 8, 2, 128, true, 10000, DType::bf16}, AttnCase{1, 96, 6, 3, 64, false, 0, DType::f16},
        AttnCase{2, 40, 4, 4, 32, true, 0, DType::bf16}}) {
    const AttentionLayout l = attn_layout_of(c);
    const int64_t T = c.batch * c.seq;
    const Tensor qkv = random_2d(T, l.qkv_cols(), c.dtype, 61 + c.seq, Device::cpu(), Layout::contiguous);
    const Tensor dout = random_2d(T, l.out_cols(), c.dtype, 63 + c.seq, Device::cpu(), Layout::contiguous);
    const Tensor apart = move_heads(l, qkv);
    for (const auto& [device, kernels] : runs) {
      SCOPED_TRACE(::testing::Message() << c.heads << "/" << c.kv_heads << " heads on " << device.str() << " "
                                        << kernels);
      const ScopedAttentionKernels forced(kernels);
      const Tensor dout_on = dout.to(device);
      const KernelRun a = run_kernels(c, qkv.to(device), &dout_on);
      const KernelRun b = run_kernels(c, apart.to(device), &dout_on, true, true);
      EXPECT_EQ(bytes_of(a.out), bytes_of(b.out));
      EXPECT_EQ(bytes_of(a.lse), bytes_of(b.lse));
      AttentionLayout moved = l;
      moved.kinds_apart = true;
      EXPECT_EQ(bytes_of(a.dqkv), bytes_of(move_heads(moved, b.dqkv.to(Device::cpu()))));
    }
  }
}

TEST(Attention, SameBytesOnEveryRun) {
  const AttentionLayout l{4, 2, 8, 32};
  const Tensor qkv = random_2d(64, l.qkv_cols(), DType::bf16, 5, Device::cpu(), Layout::contiguous);
  const Tensor dout = random_2d(64, l.out_cols(), DType::bf16, 6, Device::cpu(), Layout::contiguous);
  std::vector<uint8_t> first;
  for (int i = 0; i < 3; ++i) {
    Tensor out = Tensor::empty({64, l.out_cols()}, DType::bf16), lse = Tensor::empty({2, 4, 32}, DType::f32);
    Tensor dqkv = Tensor::empty(qkv.shape(), DType::bf16);
    attention_forward(l, {}, qkv, out, lse);
    attention_backward(l, {}, dout, qkv, out, lse, dqkv);
    if (i == 0) first = bytes_of(dqkv);
    EXPECT_EQ(first, bytes_of(dqkv));
  }
}

}  // namespace
}  // namespace te
