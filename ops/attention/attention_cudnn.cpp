// Attention through cuDNN 9's fused flash attention, written against the backend graph API (cudnn_graph.h).
//
// cuDNN recognises scaled-dot-product attention as a pattern of operations over [n, h, s, d] tensors and runs it as
// one fused kernel. The forward graph is
//   S = Q · Kᵀ (f32) → × scale → causal: keep where row ≥ col (GEN_INDEX on axes 2 and 3, CMP_GE, BINARY_SELECT
//   with −inf) → max over the row → exp(S − max) → sum over the row → stats = max + log(sum) → P = exp / sum (in the
//   input type) → O = P · V
// so its statistics are log Σ_j exp(scale · q_i · k_j) in natural log, exactly our lse. The backward graph is
//   Σ_d dO ⊙ O per row (kept in the workspace) ; P = exp(S − stats) with S as above ; dV = Pᵀ · dO ;
//   dP = dO · Vᵀ ; dS = (dP − Σ dO ⊙ O) ⊙ P × scale ; dK = dSᵀ · Q ; dQ = dS · K
// where a key/value head shared by several query heads gets its gradient as the per-query-head products summed by a
// reduction over heads. K (and V in the backward's dO · Vᵀ) enter the graph transposed, as [n, h, d, s] views.
//
// Determinism: dQ written straight by the dS · K product is what selects cuDNN's deterministic backward on Hopper
// (engines that note nondeterminism are skipped). With `deterministic` false the product writes an f32 accumulator
// instead (a buffer of ours, zeroed before each call, in cuDNN's F16x16 element order) that an identity pointwise
// rounds into dQ: the engine adds each block of keys' share with atomics, which needs no per-sequence score
// gradients in its workspace.
//
// Interleaved QKV rows (TransformerEngine's layout) put each key/value group's query heads beside its key and value,
// so a query head's columns are an affine function of the head only with one query head per group (multi-head) or
// one group (multi-query); rows with the kinds apart (AttentionLayout::kinds_apart, how the model stores them) are
// affine for every layout, and all of these run as one call reading the buffers in place. Interleaved grouped-query
// rows copy the query heads into a buffer of their own for one call (and the query gradient back); should cuDNN build
// no plan for that, several calls of one plan with shifted pointers run instead, one per key/value group or one per
// sequence, whichever takes fewer calls with every pointer 16-byte aligned.
#include "ops/attention/attention_cudnn.h"

#include <cuda_runtime.h>

#include <array>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>

#include "engine/cuda_check.h"
#include "engine/device.h"
#include "engine/error.h"
#include "engine/log.h"
#include "engine/tensor.h"
#include "ops/attention/cudnn_calls.h"
#include "ops/attention/cudnn_graph.h"

namespace te::cudnn_attention {
namespace {

using cudnn_graph::OpGraph;
using cudnn_graph::Plan;
using Dims = std::array<int64_t, 4>;

// Ids of the graphs' tensors in memory (virtual ones are numbered by OpGraph).
enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kScale, kMaskValue, kDO, kDQ, kDK, kDV, kOne, kRowDot, kDQAccum };

constexpr cudnnDataType_t kF32 = CUDNN_DATA_FLOAT;

// One layout as cuDNN tensors [n, h, s, d] and the calls that cover it: call i reads and writes at the first call's
// offsets plus i steps (all in elements).
struct Split {
  int64_t calls = 1;
  int64_t n = 0, hq = 0, hk = 0, s = 0, d = 0;
  Dims q_stride{}, kv_stride{};   // in QKV (and dQKV): a query head, a key/value head
  Dims out_stride{};              // out and dout
  Dims stats_stride{};            // lse
  int64_t q_at = 0, k_at = 0, v_at = 0;
  int64_t qkv_step = 0, out_step = 0, stats_step = 0;
  bool gathered_q = false;  // Q (and dQ) in a [T, heads, D] buffer of their own, copied from (into) the QKV rows
  const char* kind = "";    // for the log
};

enum class SplitKind { whole, gathered, per_group, per_sequence };

Split make_split(const AttentionLayout& l, int64_t batch, SplitKind kind) {
  const int64_t S = l.seq, D = l.head_dim, C = l.qkv_cols(), HD = l.out_cols(), r = l.group(), G = (r + 2) * D;
  Split p;
  p.kind = kind == SplitKind::whole       ? "one call"
           : kind == SplitKind::gathered  ? "one call on the query heads copied"
           : kind == SplitKind::per_group ? "one call per key/value group"
                                          : "one call per sequence";
  p.s = S;
  p.d = D;
  p.k_at = l.k_col(0);
  p.v_at = l.v_col(0);
  switch (kind) {
    case SplitKind::whole:  // kinds apart (every head one D from the next of its kind), multi-head (q_col(h) = h·3D)
                            // or multi-query (q_col(h) = h·D)
      p.n = batch, p.hq = l.heads, p.hk = l.kv_heads;
      p.q_stride = {S * C, l.kinds_apart || l.kv_heads == 1 ? D : G, C, 1};
      p.kv_stride = {S * C, l.kinds_apart ? D : G, C, 1};
      p.out_stride = {S * HD, D, HD, 1};
      p.stats_stride = {l.heads * S, S, 1, 1};
      break;
    case SplitKind::gathered:  // grouped-query: K and V are one stride apart in place, the query heads once copied
      p.gathered_q = true;
      p.n = batch, p.hq = l.heads, p.hk = l.kv_heads;
      p.q_stride = {S * HD, D, HD, 1};
      p.kv_stride = {S * C, G, C, 1};
      p.out_stride = {S * HD, D, HD, 1};
      p.stats_stride = {l.heads * S, S, 1, 1};
      break;
    case SplitKind::per_group:
      p.calls = l.kv_heads, p.n = batch, p.hq = r, p.hk = 1;
      p.q_stride = {S * C, D, C, 1};
      p.kv_stride = {S * C, G, C, 1};
      p.out_stride = {S * HD, D, HD, 1};
      p.stats_stride = {l.heads * S, S, 1, 1};
      p.qkv_step = G, p.out_step = r * D, p.stats_step = r * S;
      break;
    case SplitKind::per_sequence:
      p.calls = batch, p.n = l.kv_heads, p.hq = r, p.hk = 1;
      p.q_stride = {G, D, C, 1};
      p.kv_stride = {G, G, C, 1};
      p.out_stride = {r * D, D, HD, 1};
      p.stats_stride = {r * S, S, 1, 1};
      p.qkv_step = S * C, p.out_step = S * HD, p.stats_step = l.heads * S;
      break;
  }
  return p;
}

bool aligned(const void* p, int64_t offset_bytes) {
  return (reinterpret_cast<uintptr_t>(p) + static_cast<uintptr_t>(offset_bytes)) % OpGraph::kAlignment == 0;
}

// Whether every pointer of every call is 16-byte aligned (cuDNN's fused attention loads 16 bytes at a time).
bool split_aligned(const Split& p, int64_t esize, std::initializer_list<const void*> qkv_like,
                   std::initializer_list<const void*> out_like, const void* stats) {
  for (int64_t i = 0; i < std::min<int64_t>(p.calls, 2); ++i) {  // the first two fix the alignment of all
    for (const void* b : qkv_like)
      for (int64_t at : {p.q_at, p.k_at, p.v_at})
        if ((!p.gathered_q || at != p.q_at) && !aligned(b, (at + i * p.qkv_step) * esize)) return false;
    for (const void* b : out_like)
      if (!aligned(b, i * p.out_step * esize)) return false;
    if (!aligned(stats, i * p.stats_step * int64_t(sizeof(float)))) return false;
  }
  return true;
}

// The splits that can run this layout, in order of preference, each with every pointer 16-byte aligned: one call
// where the query heads are one stride apart (multi-head, multi-query); for grouped-query attention one call on a
// copy of the query heads (two 2-D copies of Q's size, forward and backward, where the alternatives run a fraction of
// the heads per call), then the split of fewer calls, per key/value group or per sequence, should cuDNN build no
// plan for the first.
std::vector<Split> candidate_splits(const AttentionLayout& l, int64_t batch, int64_t esize,
                                    std::initializer_list<const void*> qkv_like,
                                    std::initializer_list<const void*> out_like, const void* stats) {
  std::vector<SplitKind> kinds{SplitKind::whole};
  if (!l.kinds_apart && l.grouped_query()) {
    kinds = {SplitKind::gathered, SplitKind::per_group, SplitKind::per_sequence};
    if (batch < l.kv_heads) std::swap(kinds[1], kinds[2]);
  }
  std::vector<Split> splits;
  for (SplitKind k : kinds) {
    const Split p = make_split(l, batch, k);
    if (split_aligned(p, esize, qkv_like, out_like, stats)) splits.push_back(p);
  }
  return splits;
}

constexpr const char* kUnaligned =
    "cuDNN's fused attention needs 16-byte aligned buffers (and a head_dim that keeps each head so)";

std::vector<int64_t> vec(const Dims& d) { return {d[0], d[1], d[2], d[3]}; }
Dims transposed(Dims d) {  // swap the last two dimensions: [n, h, s, d] ↔ [n, h, d, s]
  std::swap(d[2], d[3]);
  return d;
}

cudnnDataType_t io_type(DType t) { return t == DType::bf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF; }

// The masked-out score: −inf, except that cuDNN before 9.10 expects the lowest finite float.
float mask_value() {
  return cudnnGetVersion() < 91000 ? std::numeric_limits<float>::lowest() : -std::numeric_limits<float>::infinity();
}

// Q, and K as Kᵀ [n, hk, d, s]: the first product's operands, in both graphs.
void add_q_and_k(OpGraph& g, const Split& p, cudnnDataType_t io) {
  g.tensor(kQ, io, {p.n, p.hq, p.s, p.d}, vec(p.q_stride));
  g.tensor(kK, io, {p.n, p.hk, p.d, p.s}, vec(transposed(p.kv_stride)));
}

// The scaled, masked scores S [n, hq, s, s] f32 (virtual) of both graphs.
int64_t scores(OpGraph& g, const Split& p, bool causal) {
  const std::vector<int64_t> dims{p.n, p.hq, p.s, p.s}, strides{p.hq * p.s * p.s, p.s * p.s, p.s, 1};
  const int64_t qk = g.virtual_tensor(kF32, dims, strides);
  g.matmul(kQ, kK, qk);
  const int64_t scaled = g.virtual_tensor(kF32, dims, strides);
  g.pointwise(CUDNN_POINTWISE_MUL, qk, kScale, -1, scaled);
  if (!causal) return scaled;
  const int64_t row = g.virtual_tensor(CUDNN_DATA_INT32, dims, strides);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, scaled, -1, -1, row, kF32, 2);
  const int64_t col = g.virtual_tensor(CUDNN_DATA_INT32, dims, strides);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, scaled, -1, -1, col, kF32, 3);
  const int64_t keep = g.virtual_tensor(CUDNN_DATA_BOOLEAN, dims, strides);
  g.pointwise(CUDNN_POINTWISE_CMP_GE, row, col, -1, keep, CUDNN_DATA_BOOLEAN);
  const int64_t masked = g.virtual_tensor(kF32, dims, strides);
  g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, scaled, kMaskValue, keep, masked);
  return masked;
}

// A row's statistic [n, hq, s, 1] f32 (virtual).
int64_t per_row(OpGraph& g, const Split& p) {
  return g.virtual_tensor(kF32, {p.n, p.hq, p.s, 1}, {p.hq * p.s, p.s, 1, 1});
}

OpGraph forward_graph(const Split& p, DType t, bool causal, float scale) {
  OpGraph g;
  const cudnnDataType_t io = io_type(t);
  add_q_and_k(g, p, io);
  g.tensor(kV, io, {p.n, p.hk, p.s, p.d}, vec(p.kv_stride));
  g.tensor(kO, io, {p.n, p.hq, p.s, p.d}, vec(p.out_stride));
  g.tensor(kStats, kF32, {p.n, p.hq, p.s, 1}, vec(p.stats_stride));
  g.scalar(kScale, scale);
  if (causal) g.scalar(kMaskValue, mask_value());

  const int64_t s = scores(g, p, causal);
  const int64_t max = per_row(g, p);
  g.reduction(CUDNN_REDUCE_TENSOR_MAX, s, max);
  const int64_t centered = g.virtual_tensor(kF32, g.dims(s), g.strides(s));
  g.pointwise(CUDNN_POINTWISE_SUB, s, max, -1, centered);
  const int64_t e = g.virtual_tensor(kF32, g.dims(s), g.strides(s));
  g.pointwise(CUDNN_POINTWISE_EXP, centered, -1, -1, e);
  const int64_t sum = per_row(g, p);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, e, sum);
  const int64_t log_sum = per_row(g, p);
  g.pointwise(CUDNN_POINTWISE_LOG, sum, -1, -1, log_sum);
  g.pointwise(CUDNN_POINTWISE_ADD, max, log_sum, -1, kStats);
  const int64_t prob = g.virtual_tensor(io, g.dims(s), g.strides(s));  // the second product reads the input type
  g.pointwise(CUDNN_POINTWISE_DIV, e, sum, -1, prob);
  g.matmul(prob, kV, kO);
  return g;
}

// grad [n, hk, s, d] = lhsᵀ [n, hq, s, s] · rhs [n, hq, s, d], summed over each key/value head's query heads.
void key_value_gradient(OpGraph& g, const Split& p, cudnnDataType_t io, int64_t lhs_t, int64_t rhs, int64_t grad) {
  if (p.hq == p.hk) {
    g.matmul(lhs_t, rhs, grad);
    return;
  }
  const int64_t per_query_head =
      g.virtual_tensor(io, {p.n, p.hq, p.s, p.d}, {p.hq * p.s * p.d, p.s * p.d, p.d, 1});
  g.matmul(lhs_t, rhs, per_query_head);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, per_query_head, grad);
}

OpGraph backward_graph(const Split& p, DType t, bool causal, float scale, bool deterministic) {
  OpGraph g;
  const cudnnDataType_t io = io_type(t);
  const std::vector<int64_t> q_dims{p.n, p.hq, p.s, p.d}, kv_dims{p.n, p.hk, p.s, p.d};
  add_q_and_k(g, p, io);
  g.tensor(kV, io, {p.n, p.hk, p.d, p.s}, vec(transposed(p.kv_stride)));  // Vᵀ, for dO · Vᵀ
  g.tensor(kO, io, q_dims, vec(p.out_stride));
  g.tensor(kDO, io, q_dims, vec(p.out_stride));
  g.tensor(kStats, kF32, {p.n, p.hq, p.s, 1}, vec(p.stats_stride));
  g.tensor(kDQ, io, q_dims, vec(p.q_stride));
  g.tensor(kDK, io, kv_dims, vec(p.kv_stride));
  g.tensor(kDV, io, kv_dims, vec(p.kv_stride));
  g.tensor(kRowDot, kF32, {p.n, p.hq, p.s, 1}, {p.hq * p.s, p.s, 1, 1});  // in the workspace
  g.scalar(kScale, scale);
  g.scalar(kOne, 1.0f);
  if (causal) g.scalar(kMaskValue, mask_value());

  // Σ_d dO ⊙ O per row: the softmax backward's correction term.
  const int64_t products = g.virtual_tensor(kF32, q_dims, {p.hq * p.s * p.d, p.s * p.d, p.hq * p.d, 1});
  g.pointwise(CUDNN_POINTWISE_MUL, kDO, kO, -1, products);
  const int64_t row_dot = per_row(g, p);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, products, row_dot);
  g.pointwise(CUDNN_POINTWISE_MUL, row_dot, kOne, -1, kRowDot);

  // P = exp(S − stats), recomputed; dV = Pᵀ · dO.
  const int64_t s = scores(g, p, causal);
  const std::vector<int64_t> sd = g.dims(s), ss = g.strides(s), st{ss[0], ss[1], 1, p.s};
  const int64_t centered = g.virtual_tensor(kF32, sd, ss);
  g.pointwise(CUDNN_POINTWISE_SUB, s, kStats, -1, centered);
  const int64_t prob = g.virtual_tensor(kF32, sd, ss);
  g.pointwise(CUDNN_POINTWISE_EXP, centered, -1, -1, prob);
  const int64_t prob_t = g.virtual_tensor(io, sd, st);
  g.reshape(prob, prob_t);
  key_value_gradient(g, p, io, prob_t, kDO, kDV);

  // dS = (dO · Vᵀ − Σ dO ⊙ O) ⊙ P × scale; dK = dSᵀ · Q; dQ = dS · K.
  const int64_t dp = g.virtual_tensor(kF32, sd, ss);
  g.matmul(kDO, kV, dp);
  const int64_t centered_dp = g.virtual_tensor(kF32, sd, ss);
  g.pointwise(CUDNN_POINTWISE_SUB, dp, kRowDot, -1, centered_dp);
  const int64_t dsoft = g.virtual_tensor(kF32, sd, ss);
  g.pointwise(CUDNN_POINTWISE_MUL, centered_dp, prob, -1, dsoft);
  const int64_t ds = g.virtual_tensor(kF32, sd, ss);
  g.pointwise(CUDNN_POINTWISE_MUL, dsoft, kScale, -1, ds);
  const int64_t ds_t = g.virtual_tensor(io, sd, st);
  g.reshape(ds, ds_t);
  key_value_gradient(g, p, io, ds_t, kQ, kDK);
  const int64_t k = g.virtual_tensor(kF32, kv_dims, vec(p.kv_stride));  // Kᵀ seen as K again
  g.reshape(kK, k);
  if (deterministic) {
    g.matmul(ds, k, kDQ);
    return g;
  }
  g.tensor(kDQAccum, kF32, q_dims, {p.hq * p.s * p.d, p.s * p.d, p.d, 1}, CUDNN_TENSOR_REORDERING_F16x16);
  g.matmul(ds, k, kDQAccum);
  g.pointwise(CUDNN_POINTWISE_IDENTITY, kDQAccum, -1, -1, kDQ);
  return g;
}

// Everything that shapes a graph: the plan-cache key.
std::vector<int64_t> plan_key(bool backward, const Split& p, DType t, bool causal, float scale, bool deterministic) {
  uint32_t scale_bits = 0;
  std::memcpy(&scale_bits, &scale, sizeof(scale_bits));
  std::vector<int64_t> k{backward,     static_cast<int64_t>(t), p.n, p.hq, p.hk, p.s, p.d, causal, scale_bits,
                         deterministic};
  for (const Dims* d : {&p.q_stride, &p.kv_stride, &p.out_stride, &p.stats_stride})
    k.insert(k.end(), d->begin(), d->end());
  return k;
}

// Per device: one cuDNN handle and the plans built with it. The mutex guards the cache and the handle's stream
// (set for each run; cudnnBackendExecute only enqueues, so holding it is short). Never destroyed: static teardown may
// come after the CUDA context.
struct DeviceState {
  std::mutex mu;
  cudnnHandle_t handle = nullptr;
  std::string unavailable;  // why cuDNN cannot run here at all (no handle)
  struct Entry {
    std::unique_ptr<Plan> plan;
    std::string why_not;  // when cuDNN built no plan
  };
  std::map<std::vector<int64_t>, Entry> plans;
};

DeviceState& device_state(Device device) {
  static std::mutex mu;
  static auto* states = new std::map<int, std::unique_ptr<DeviceState>>();
  std::lock_guard<std::mutex> lock(mu);
  auto& st = (*states)[device.index];
  if (!st) {
    st = std::make_unique<DeviceState>();
    set_current_device(device);
    const cudnnStatus_t s = cudnnCreate(&st->handle);
    if (s != CUDNN_STATUS_SUCCESS) st->unavailable = std::string("cudnnCreate failed: ") + cudnnGetErrorString(s);
  }
  return *st;
}

using Pointers = std::vector<std::pair<int64_t, void*>>;

// "forward [n, hq/hk, s, d], <split>": a graph as the log names it.
std::string graph_name(const char* direction, const Split& p) {
  return std::string(direction) + " [" + std::to_string(p.n) + ", " + std::to_string(p.hq) + "/" +
         std::to_string(p.hk) + ", " + std::to_string(p.s) + ", " + std::to_string(p.d) + "], " + p.kind;
}

// Builds (or finds) the plan for `key` and runs it once per call of the split, `pointers(i, extra)` binding call i's
// tensors (`extra`: `extra_bytes` of the workspace past cuDNN's own, for the graph's tensors kept there); it is called
// right before call i is enqueued, so it may enqueue what call i needs first (the backward zeroes dQ's accumulator
// there). `before` runs once there is a plan, ahead of the first call. A plan's first build is logged (info) with the
// split's name.
bool run(const char* direction, const Split& p, Device device, const Stream& stream, const std::vector<int64_t>& key,
         const std::function<OpGraph()>& graph, bool deterministic, int64_t extra_bytes,
         const std::function<void()>& before, const std::function<Pointers(int64_t, void*)>& pointers,
         std::string* why_not) {
  DeviceState& st = device_state(device);
  std::lock_guard<std::mutex> lock(st.mu);
  if (!st.unavailable.empty()) {
    *why_not = st.unavailable;
    return false;
  }
  auto it = st.plans.find(key);
  if (it == st.plans.end()) {
    DeviceState::Entry e;
    try {
      e.plan = std::make_unique<Plan>(graph().build(st.handle, deterministic));
    } catch (const Error& err) {
      e.why_not = err.what();
    }
    it = st.plans.emplace(key, std::move(e)).first;
    const DeviceState::Entry& made = it->second;
    TE_LOG(info, "cuDNN attention " << graph_name(direction, p) << ": "
                                    << (made.plan ? made.plan->engine + ", workspace " +
                                                        std::to_string(made.plan->workspace_bytes) + " bytes"
                                                  : "no plan: " + made.why_not));
  }
  if (!it->second.plan) {
    *why_not = it->second.why_not;
    return false;
  }
  const Plan& plan = *it->second.plan;
  before();
  const int64_t extra_at = (plan.workspace_bytes + 255) / 256 * 256;
  const Tensor workspace = Tensor::empty({std::max<int64_t>(extra_at + extra_bytes, 1)}, DType::u8, device, stream);
  auto* base = static_cast<char*>(workspace.data_ptr());
  TE_CUDNN_CHECK(cudnnSetStream(st.handle, static_cast<cudaStream_t>(stream.handle())));
  for (int64_t i = 0; i < p.calls; ++i) cudnn_graph::execute(st.handle, plan, pointers(i, base + extra_at), base);
  return true;
}

// Byte pointer to element `at` of a buffer of `esize`-byte elements.
void* at(const void* p, int64_t elements, int64_t esize) {
  return const_cast<char*>(static_cast<const char*>(p)) + elements * esize;
}

// Copies the query heads of `tokens` QKV rows into a [tokens, heads, D] buffer (or back): a key/value group's query
// heads are contiguous in both, so one 2-D copy per group.
void copy_query_heads(const AttentionLayout& l, int64_t tokens, int64_t esize, void* qkv, void* heads, bool to_heads,
                      const Stream& stream) {
  const size_t width = static_cast<size_t>(l.group() * l.head_dim * esize);
  const size_t qkv_pitch = static_cast<size_t>(l.qkv_cols() * esize),
               heads_pitch = static_cast<size_t>(l.out_cols() * esize);
  const auto st = static_cast<cudaStream_t>(stream.handle());
  for (int64_t g = 0; g < l.kv_heads; ++g) {
    void* row = at(qkv, l.q_col(g * l.group()), esize);
    void* head = at(heads, g * l.group() * l.head_dim, esize);
    if (to_heads)
      TE_CUDA_CHECK(cudaMemcpy2DAsync(head, heads_pitch, row, qkv_pitch, width, static_cast<size_t>(tokens),
                                      cudaMemcpyDeviceToDevice, st));
    else
      TE_CUDA_CHECK(cudaMemcpy2DAsync(row, qkv_pitch, head, heads_pitch, width, static_cast<size_t>(tokens),
                                      cudaMemcpyDeviceToDevice, st));
  }
}

bool forward_call(const AttentionLayout& l, bool causal, float scale, int64_t tokens, const void* qkv, DType t,
                  void* out, float* lse, Device device, const Stream& stream, std::string* why_not) {
  const int64_t esize = dtype_info(t).bits / 8, batch = tokens / l.seq;
  const std::vector<Split> splits = candidate_splits(l, batch, esize, {qkv}, {out}, lse);
  if (splits.empty()) *why_not = kUnaligned;
  for (const Split& p : splits) {
    Tensor q;  // the gathered query heads
    const auto gather = [&] {
      if (!p.gathered_q) return;
      q = Tensor::empty({tokens, l.out_cols()}, t, device, stream);
      copy_query_heads(l, tokens, esize, const_cast<void*>(qkv), q.data_ptr(), true, stream);
    };
    const bool ran = run(
        "forward", p, device, stream, plan_key(false, p, t, causal, scale, true),
        [&] { return forward_graph(p, t, causal, scale); }, false, 0, gather,
        [&](int64_t i, void*) {
          return Pointers{{kQ, p.gathered_q ? q.data_ptr() : at(qkv, p.q_at + i * p.qkv_step, esize)},
                          {kK, at(qkv, p.k_at + i * p.qkv_step, esize)},
                          {kV, at(qkv, p.v_at + i * p.qkv_step, esize)},
                          {kO, at(out, i * p.out_step, esize)},
                          {kStats, at(lse, i * p.stats_step, sizeof(float))}};
        },
        why_not);
    if (ran) return true;
  }
  return false;
}

bool backward_call(const AttentionLayout& l, bool causal, float scale, bool deterministic, int64_t tokens,
                   const void* dout, const void* qkv, const void* out, const float* lse, DType t, void* dqkv,
                   Device device, const Stream& stream, std::string* why_not) {
  const int64_t esize = dtype_info(t).bits / 8, batch = tokens / l.seq;
  const std::vector<Split> splits = candidate_splits(l, batch, esize, {qkv, dqkv}, {out, dout}, lse);
  if (splits.empty()) *why_not = kUnaligned;
  for (const Split& p : splits) {
    Tensor q, dq;  // the gathered query heads and their gradient
    const auto gather = [&] {
      if (!p.gathered_q) return;
      q = Tensor::empty({tokens, l.out_cols()}, t, device, stream);
      dq = Tensor::empty({tokens, l.out_cols()}, t, device, stream);
      copy_query_heads(l, tokens, esize, const_cast<void*>(qkv), q.data_ptr(), true, stream);
    };
    // Our part of the workspace: the row sums, then (nondeterministic) dQ's accumulator, zeroed for each call.
    const int64_t row_dot_bytes = (p.n * p.hq * p.s * int64_t(sizeof(float)) + 255) / 256 * 256;
    const int64_t accum_bytes = deterministic ? 0 : p.n * p.hq * p.s * p.d * int64_t(sizeof(float));
    const auto st = static_cast<cudaStream_t>(stream.handle());
    const bool ran = run(
        "backward", p, device, stream, plan_key(true, p, t, causal, scale, deterministic),
        [&] { return backward_graph(p, t, causal, scale, deterministic); }, deterministic, row_dot_bytes + accum_bytes,
        gather,
        [&](int64_t i, void* extra) {
          const int64_t q_at = p.q_at + i * p.qkv_step, k = p.k_at + i * p.qkv_step, v = p.v_at + i * p.qkv_step,
                        o = i * p.out_step;
          void* accum = static_cast<char*>(extra) + row_dot_bytes;
          if (!deterministic) TE_CUDA_CHECK(cudaMemsetAsync(accum, 0, static_cast<size_t>(accum_bytes), st));
          Pointers ptrs{{kQ, p.gathered_q ? q.data_ptr() : at(qkv, q_at, esize)},
                        {kK, at(qkv, k, esize)},
                        {kV, at(qkv, v, esize)},
                        {kO, at(out, o, esize)},
                        {kDO, at(dout, o, esize)},
                        {kDQ, p.gathered_q ? dq.data_ptr() : at(dqkv, q_at, esize)},
                        {kDK, at(dqkv, k, esize)},
                        {kDV, at(dqkv, v, esize)},
                        {kRowDot, extra},
                        {kStats, at(lse, i * p.stats_step, sizeof(float))}};
          if (!deterministic) ptrs.emplace_back(kDQAccum, accum);
          return ptrs;
        },
        why_not);
    if (!ran) continue;
    if (p.gathered_q) copy_query_heads(l, tokens, esize, dqkv, dq.data_ptr(), false, stream);
    return true;
  }
  return false;
}

// Runs call(first_sequence, sequences) over the batch in chunks; false when the first launched nothing (the caller
// runs its own kernels), an error when a later one did (the output would be partly written).
bool over_chunks(const AttentionLayout& l, int64_t tokens, int64_t per, std::string* why_not,
                 const std::function<bool(int64_t, int64_t)>& call) {
  const int64_t batch = tokens / l.seq;
  for (int64_t b0 = 0; b0 < batch; b0 += per) {
    if (call(b0, std::min(per, batch - b0))) continue;
    TE_CHECK(b0 == 0, "cuDNN attention ran sequences [0, " << b0 << ") but not the rest: " << *why_not);
    return false;
  }
  return true;
}

}  // namespace

bool attention_forward(const AttentionLayout& l, bool causal, float scale, int64_t tokens, const void* qkv, DType t,
                       void* out, float* lse, Device device, const Stream& stream, std::string* why_not) {
  const int64_t esize = dtype_info(t).bits / 8;
  return over_chunks(l, tokens, sequences_per_call(l, esize, false, true), why_not, [&](int64_t b0, int64_t nb) {
    const int64_t t0 = b0 * l.seq;
    return forward_call(l, causal, scale, nb * l.seq, at(qkv, t0 * l.qkv_cols(), esize), t,
                        at(out, t0 * l.out_cols(), esize), lse + b0 * l.heads * l.seq, device, stream, why_not);
  });
}

bool attention_backward(const AttentionLayout& l, bool causal, float scale, bool deterministic, int64_t tokens,
                        const void* dout, const void* qkv, const void* out, const float* lse, DType t, void* dqkv,
                        Device device, const Stream& stream, std::string* why_not) {
  const int64_t esize = dtype_info(t).bits / 8;
  const int64_t per = sequences_per_call(l, esize, true, deterministic);
  return over_chunks(l, tokens, per, why_not, [&](int64_t b0, int64_t nb) {
    const int64_t t0 = b0 * l.seq, q = t0 * l.qkv_cols(), o = t0 * l.out_cols();
    return backward_call(l, causal, scale, deterministic, nb * l.seq, at(dout, o, esize), at(qkv, q, esize),
                         at(out, o, esize), lse + b0 * l.heads * l.seq, t, at(dqkv, q, esize), device, stream, why_not);
  });
}

}  // namespace te::cudnn_attention
