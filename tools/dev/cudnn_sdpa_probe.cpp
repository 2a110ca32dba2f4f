// Dev tool (not built by meson, not used by CI): runs attention through cuDNN (TEENGINE_ATTENTION_KERNELS=cudnn) on
// a list of shapes and prints, per shape, either cuDNN's refusal (the graph, heuristics or plan error with cuDNN's
// own text) or how it compares with the own kernels and whether two runs gave the same bytes — one GPU run that
// diagnoses the cuDNN path whole. Build after `ninja -C build-dev` (the static libraries hold the internal API):
//   c++ -std=c++20 -O2 -I. -Ibuild-dev -isystem /usr/local/cuda/include tools/dev/cudnn_sdpa_probe.cpp build-dev/ops/libte_ops.a build-dev/engine/libte_engine.a -L/usr/local/cuda/lib64 -lcudnn -lcublasLt -lnccl -lcudart -lpthread -o /tmp/cudnn_sdpa_probe
#include <cudnn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "engine/compare.h"
#include "engine/error.h"
#include "engine/tensor.h"
#include "ops/attention/attention.h"

namespace {

struct Shape {
  int64_t batch, seq, heads, kv_heads, head_dim;
  bool causal;
  te::DType dtype;
};

struct Result {
  te::Tensor out, lse, dqkv;
};

Result run(const Shape& s, const char* kernels, const te::Tensor& qkv, const te::Tensor& dout) {
  setenv("TEENGINE_ATTENTION_KERNELS", kernels, 1);
  const te::AttentionLayout l{s.heads, s.kv_heads, s.head_dim, s.seq};
  const int64_t T = s.batch * s.seq;
  const te::Device dev = te::Device::cuda(0);
  Result r{te::Tensor::empty({T, l.out_cols()}, s.dtype, dev), te::Tensor::empty({s.batch, s.heads, s.seq},
                                                                                  te::DType::f32, dev),
           te::Tensor::empty(qkv.shape(), s.dtype, dev)};
  te::attention_forward(l, {s.causal}, qkv, r.out, r.lse);
  te::attention_backward(l, {s.causal}, dout, qkv, r.out, r.lse, r.dqkv);
  return r;
}

std::vector<float> f32(const te::Tensor& t) { return t.to_f32_vector(); }

bool same_bytes(const te::Tensor& a, const te::Tensor& b) {
  const te::Tensor x = a.to(te::Device::cpu()), y = b.to(te::Device::cpu());
  return std::memcmp(x.data_ptr(), y.data_ptr(), static_cast<size_t>(x.nbytes())) == 0;
}

}  // namespace

int main() {
  std::printf("cuDNN %zu (headers %d)\n", cudnnGetVersion(), CUDNN_VERSION);
  const std::vector<Shape> shapes{
      {2, 13, 4, 2, 8, true, te::DType::bf16},      {1, 67, 4, 4, 64, true, te::DType::bf16},
      {2, 130, 8, 2, 128, true, te::DType::bf16},   {2, 130, 8, 2, 128, false, te::DType::bf16},
      {1, 200, 4, 1, 40, true, te::DType::f16},     {1, 256, 4, 2, 96, false, te::DType::f16},
      {3, 32, 8, 4, 64, true, te::DType::bf16},     {66000, 1, 2, 2, 8, false, te::DType::bf16},
      {2, 1024, 16, 16, 64, true, te::DType::bf16}, {2, 1024, 32, 8, 128, true, te::DType::bf16},
      {1, 4096, 16, 16, 128, false, te::DType::bf16}};
  int failures = 0;
  for (const Shape& s : shapes) {
    std::printf("b%lld s%lld h%lld/%lld d%lld %s %s: ", (long long)s.batch, (long long)s.seq, (long long)s.heads,
                (long long)s.kv_heads, (long long)s.head_dim, s.causal ? "causal" : "full", std::string(te::dtype_name(s.dtype)).c_str());
    std::fflush(stdout);  // the shape is on screen should cuDNN crash
    try {
      const te::AttentionLayout l{s.heads, s.kv_heads, s.head_dim, s.seq};
      const int64_t T = s.batch * s.seq;
      te::Tensor qkv = te::Tensor::empty({T, l.qkv_cols()}, s.dtype, te::Device::cuda(0));
      te::Tensor dout = te::Tensor::empty({T, l.out_cols()}, s.dtype, te::Device::cuda(0));
      qkv.fill_normal(1);
      dout.fill_normal(2);
      const Result own = run(s, "own", qkv, dout);
      const Result a = run(s, "cudnn", qkv, dout), b = run(s, "cudnn", qkv, dout);
      std::printf("vs own: out %.2e lse %.2e dqkv %.2e; repeat same bytes: out %d dqkv %d\n",
                  te::rel_l2(f32(a.out), f32(own.out)), te::rel_l2(f32(a.lse), f32(own.lse)),
                  te::rel_l2(f32(a.dqkv), f32(own.dqkv)), same_bytes(a.out, b.out), same_bytes(a.dqkv, b.dqkv));
    } catch (const te::Error& e) {
      ++failures;
      std::printf("FAILED\n%s\n", e.what());
    }
  }
  std::printf("%d of %zu shapes failed\n", failures, shapes.size());
  return failures == 0 ? 0 : 1;
}
