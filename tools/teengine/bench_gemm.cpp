// GEMMs against raw cuBLASLt: `teengine bench gemm --m M --n N --k K --format bf16|fp8_per_tensor|fp8_block
// [--role fprop|dgrad|wgrad] [--device cuda|cpu] [--json]`.
// 1. builds the role's operands (bf16, or quantized the way the recipes do: per-tensor E4M3 forward / E5M2
//    gradients; block 1x128 activations and gradients, 128x128 weights),
// 2. validates te::gemm on sampled output elements against a float64 dot product of the dequantized copies the
//    role reads,
// 3. times te::gemm and a raw cuBLASLt call of the same configuration set up here (same operands, same run),
//    and reports TFLOP/s of both and their ratio. The raw call is cuBLASLt at its fastest: every algorithm its
//    heuristic offers for the problem is timed and the fastest kept, and the two sides are timed in alternating
//    samples so that neither meets a GPU the other has heated.
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "engine/error.h"
#include "ops/gemm/gemm.h"
#include "ops/quant/quantizer.h"
#include "te_config.h"
#include "tools/teengine/bench_util.h"
#include "tools/teengine/commands.h"
#if TE_WITH_CUDA
#include <cublasLt.h>

#include "engine/cuda_check.h"
#endif

namespace te::cli {
namespace {

struct GemmBenchArgs {
  int64_t m = 8192, n = 16384, k = 4096;
  std::string format = "bf16", role = "fprop", device = "auto", kernel = "auto";
  int warmup = 10, repeats = 50, samples = 512;
  bool json = false;
};

// Logical shapes of a and b per role (ops/gemm/gemm.h).
Shape a_shape(GemmRole r, const GemmBenchArgs& g) { return r == GemmRole::fprop ? Shape{g.m, g.k} : Shape{g.m, g.n}; }
Shape b_shape(GemmRole r, const GemmBenchArgs& g) { return r == GemmRole::wgrad ? Shape{g.m, g.k} : Shape{g.n, g.k}; }

QuantizedTensor to_cpu(QuantizedTensor q) {
  for (Tensor* t : {&q.rowwise_data, &q.rowwise_scale_inv, &q.columnwise_data, &q.columnwise_scale_inv,
                    &q.rowwise_amax, &q.columnwise_amax})
    if (t->defined()) *t = t->to(Device::cpu());
  return q;
}

// Host f32 copy of an operand as the role reads it, [rows, cols] orientation.
std::vector<float> host_values(const GemmOperand& op, Usage u) {
  if (!op.is_quantized()) return op.tensor().to_f32_vector();
  return to_cpu(op.quantized()).dequantize_usage(u, DType::f32).to_f32_vector();
}

#if TE_WITH_CUDA
// The raw cuBLASLt call, written out here independently of ops/gemm: descriptors, workspace, and the algorithms
// cuBLASLt's heuristic offers (up to kRawCandidates, best first by its own estimate).
constexpr int kRawCandidates = 16;

struct RawLt {
  cublasLtHandle_t handle = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
  std::vector<cublasLtMatmulAlgo_t> candidates;
  cublasLtMatmulAlgo_t algo{};
  Tensor ws;
  const void *A = nullptr, *B = nullptr;
  void* D = nullptr;
  float alpha = 1.f, beta = 0.f;
  ~RawLt() {
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (ld) cublasLtMatrixLayoutDestroy(ld);
    if (desc) cublasLtMatmulDescDestroy(desc);
    if (handle) cublasLtDestroy(handle);
  }
  cublasStatus_t launch(const cublasLtMatmulAlgo_t& a, const Stream& s) {
    return cublasLtMatmul(handle, desc, &alpha, A, la, B, lb, &beta, D, ld, D, ld, &a, ws.data_ptr(), ws.nbytes(),
                          static_cast<cudaStream_t>(s.handle()));
  }
  void run(const Stream& s) { TE_CUBLAS_CHECK(launch(algo, s)); }
};

cudaDataType_t lt_type(DType t) {
  return t == DType::fp8_e4m3 ? CUDA_R_8F_E4M3 : t == DType::fp8_e5m2 ? CUDA_R_8F_E5M2 : CUDA_R_16BF;
}

template <class T>
void set_attr(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const T& v) {
  TE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, a, &v, sizeof(v)));
}

// out [P, Q] row-major = column-major D [m = Q, n = P].
void setup_raw(RawLt& r, const GemmOperand& a, const GemmOperand& b, GemmRole role, const GemmBenchArgs& g,
               Tensor& out) {
  TE_CUBLAS_CHECK(cublasLtCreate(&r.handle));
  r.ws = Tensor::empty({int64_t(32) << 20}, DType::u8, out.device());
  r.D = out.data_ptr();
  const int64_t P = out.size(0), Q = out.size(1);
  int64_t m = Q, n = P, k = 0, lda = 0, ldb = 0;
  cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  cudaDataType_t at = CUDA_R_16BF, bt = CUDA_R_16BF;
  TE_CUBLAS_CHECK(cublasLtMatmulDescCreate(&r.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  if (!a.is_quantized()) {
    const Tensor &A2 = a.tensor(), &B2 = b.tensor();  // contiguous bf16
    switch (role) {
      case GemmRole::fprop:  // D = W[N,K]ᵀ-stored ... A = W (k×m stored, T), B = x (k×n stored, N)
        k = g.k, ta = CUBLAS_OP_T, tb = CUBLAS_OP_N, lda = g.k, ldb = g.k, r.A = B2.data_ptr(), r.B = A2.data_ptr();
        break;
      case GemmRole::dgrad:  // dx[M,K]: A = W stored col-major K×N (N), B = dy stored N×M (N)
        k = g.n, ta = CUBLAS_OP_N, tb = CUBLAS_OP_N, lda = g.k, ldb = g.n, r.A = B2.data_ptr(), r.B = A2.data_ptr();
        break;
      case GemmRole::wgrad:  // dW[N,K]: A = x stored K×M (N), B = dy stored N×M (T)
        k = g.m, ta = CUBLAS_OP_N, tb = CUBLAS_OP_T, lda = g.k, ldb = g.n, r.A = B2.data_ptr(), r.B = A2.data_ptr();
        break;
    }
  } else {
    // fp8: TN only. fprop x/W row-wise; dgrad dy row-wise, W column-wise; wgrad dy/x column-wise.
    const QuantizedTensor &qa = a.quantized(), &qb = b.quantized();
    const bool a_row = role != GemmRole::wgrad, b_row = role == GemmRole::fprop;
    const Tensor& ad = a_row ? qa.rowwise_data : qa.columnwise_data;
    const Tensor& bd = b_row ? qb.rowwise_data : qb.columnwise_data;
    const Tensor& as = a_row ? qa.rowwise_scale_inv : qa.columnwise_scale_inv;
    const Tensor& bs = b_row ? qb.rowwise_scale_inv : qb.columnwise_scale_inv;
    k = ad.size(1), lda = k, ldb = k;
    r.A = bd.data_ptr(), r.B = ad.data_ptr();
    at = lt_type(qb.data_dtype), bt = lt_type(qa.data_dtype);
    const auto mode = [](QuantFormat f) {
      return static_cast<int32_t>(f == QuantFormat::fp8_per_tensor ? CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F
                                  : f == QuantFormat::fp8_block_1d ? CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F
                                                                   : CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F);
    };
    set_attr(r.desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, mode(qb.format));
    set_attr(r.desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, mode(qa.format));
    set_attr(r.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<const void*>(bs.data_ptr()));
    set_attr(r.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, static_cast<const void*>(as.data_ptr()));
    if (qa.format == QuantFormat::fp8_per_tensor) {  // fast accumulation: per-tensor fprop only (as te::gemm)
      const int8_t fast = role == GemmRole::fprop;
      set_attr(r.desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, fast);
    }
  }
  set_attr(r.desc, CUBLASLT_MATMUL_DESC_TRANSA, static_cast<int32_t>(ta));
  set_attr(r.desc, CUBLASLT_MATMUL_DESC_TRANSB, static_cast<int32_t>(tb));
  TE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&r.la, at, ta == CUBLAS_OP_T ? k : m, ta == CUBLAS_OP_T ? m : k, lda));
  TE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&r.lb, bt, tb == CUBLAS_OP_T ? n : k, tb == CUBLAS_OP_T ? k : n, ldb));
  TE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&r.ld, CUDA_R_16BF, m, n, m));
  cublasLtMatmulPreference_t pref = nullptr;
  TE_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t wsb = static_cast<uint64_t>(r.ws.nbytes());
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof(wsb));
  cublasLtMatmulHeuristicResult_t res[kRawCandidates]{};
  int found = 0;
  TE_CUBLAS_CHECK(
      cublasLtMatmulAlgoGetHeuristic(r.handle, r.desc, r.la, r.lb, r.ld, r.ld, pref, kRawCandidates, res, &found));
  cublasLtMatmulPreferenceDestroy(pref);
  for (int i = 0; i < found; ++i)
    if (res[i].state == CUBLAS_STATUS_SUCCESS) r.candidates.push_back(res[i].algo);
  TE_CHECK(!r.candidates.empty(), "raw cuBLASLt: no algorithm for this configuration");
}

struct RawChoice {
  int index = -1;  // of the fastest, in the heuristic's order: 0 is what its first pick would have run
  int timed = 0;   // candidates that ran (an offered algorithm may refuse at launch)
};
// The fastest algorithm's configuration, as cuBLASLt's enum values (cublasLt.h names them: cublasLtMatmulTile_t,
// cublasLtMatmulStages_t, cublasLtClusterShape_t), so a reader can see which tile and cluster shape the baseline runs.
nlohmann::json algo_config(const cublasLtMatmulAlgo_t& a) {
  struct Field {
    const char* name;
    cublasLtMatmulAlgoConfigAttributes_t attr;
    size_t bytes;  // the attribute's width, as cublasLt.h gives it
  };
  const Field fields[] = {{"id", CUBLASLT_ALGO_CONFIG_ID, 4},
                          {"tile", CUBLASLT_ALGO_CONFIG_TILE_ID, 4},
                          {"stages", CUBLASLT_ALGO_CONFIG_STAGES_ID, 4},
                          {"cluster_shape", CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, 2},
                          {"split_k", CUBLASLT_ALGO_CONFIG_SPLITK_NUM, 4},
                          {"custom_option", CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, 4}};
  nlohmann::json j;
  for (const Field& f : fields) {
    uint32_t v = 0;  // little-endian: a 2-byte field lands in the low half
    size_t written = 0;
    if (cublasLtMatmulAlgoConfigGetAttribute(&a, f.attr, &v, f.bytes, &written) == CUBLAS_STATUS_SUCCESS) j[f.name] = v;
  }
  return j;
}

// Times every candidate that runs (a short median each) and keeps the fastest in r.algo.
RawChoice pick_fastest(RawLt& r, const Stream& s) {
  RawChoice c;
  double best_ms = 0;
  for (size_t i = 0; i < r.candidates.size(); ++i) {
    const cublasLtMatmulAlgo_t& a = r.candidates[i];
    if (r.launch(a, s) != CUBLAS_STATUS_SUCCESS) continue;
    const double ms = bench::time_it([&] { TE_CUBLAS_CHECK(r.launch(a, s)); }, s, 2, 9).median_ms;
    if (c.index < 0 || ms < best_ms) c.index = static_cast<int>(i), best_ms = ms;
    ++c.timed;
  }
  TE_CHECK(c.index >= 0, "raw cuBLASLt: none of the " << r.candidates.size() << " offered algorithms runs");
  r.algo = r.candidates[static_cast<size_t>(c.index)];
  return c;
}
#endif

int run_gemm_bench(const GemmBenchArgs& g) {
  const Device dev = parse_device(g.device);
  const GemmRole role = g.role == "fprop" ? GemmRole::fprop : g.role == "dgrad" ? GemmRole::dgrad : GemmRole::wgrad;
  const Stream stream = dev.is_cuda() ? Stream::create(dev) : Stream();
  set_current_device(dev);

  // Operands: a = x (fprop) or dy, b = W (fprop/dgrad) or x (wgrad), bf16, seeded.
  Tensor a_hp = Tensor::empty(a_shape(role, g), DType::bf16, dev, stream);
  Tensor b_hp = Tensor::empty(b_shape(role, g), DType::bf16, dev, stream);
  a_hp.fill_normal(1, 0.f, 1.f, stream);
  b_hp.fill_normal(2, 0.f, 0.02f, stream);
  const bool a_is_grad = role != GemmRole::fprop, b_is_weight = role != GemmRole::wgrad;
  GemmOperand a = a_hp, b = b_hp;
  if (g.format != "bf16") {
    QuantizerConfig ca, cb;
    if (g.format == "fp8_per_tensor") {  // current scaling, hybrid: E5M2 gradients
      ca.format = cb.format = QuantFormat::fp8_per_tensor;
      ca.data_dtype = a_is_grad ? DType::fp8_e5m2 : DType::fp8_e4m3;
    } else if (g.format == "fp8_block") {  // 1x128 activations/gradients, 128x128 weights, pow2 scales
      ca.format = QuantFormat::fp8_block_1d;
      cb.format = b_is_weight ? QuantFormat::fp8_block_2d : QuantFormat::fp8_block_1d;
      ca.pow2_scales = cb.pow2_scales = true;
    } else {
      TE_INPUT_ERROR("unknown --format " << g.format, "use bf16, fp8_per_tensor or fp8_block");
    }
    a = Quantizer(ca).quantize(a_hp, Usage::both, stream);
    b = Quantizer(cb).quantize(b_hp, Usage::both, stream);
  }

  GemmContext ctx(dev);
  GemmOptions opts;
  opts.out_dtype = DType::bf16;
  opts.kernel = g.kernel == "streaming"  ? GemmKernel::streaming
                : g.kernel == "cublaslt" ? GemmKernel::cublaslt
                : g.kernel == "wgmma"    ? GemmKernel::wgmma
                                         : GemmKernel::automatic;
  Tensor out = Tensor::empty(gemm_out_shape(a, b, role), DType::bf16, dev, stream);
  gemm(a, b, role, out, opts, ctx, stream);
  stream.synchronize();

  // Validate sampled elements against a float64 dot product of the dequantized copies the role reads.
  const Usage ua = role == GemmRole::wgrad ? Usage::columnwise : Usage::rowwise;
  const Usage ub = role == GemmRole::fprop ? Usage::rowwise : Usage::columnwise;
  const std::vector<float> av = host_values(a, ua), bv = host_values(b, ub), ov = out.to_f32_vector(stream);
  const int64_t P = out.size(0), Q = out.size(1);
  std::mt19937_64 rng(7);
  double num = 0, den = 0, max_abs_err = 0;
  for (int s = 0; s < g.samples; ++s) {
    const int64_t p = int64_t(rng() % uint64_t(P)), q = int64_t(rng() % uint64_t(Q));
    double ref = 0;
    switch (role) {
      case GemmRole::fprop: for (int64_t i = 0; i < g.k; ++i) ref += double(av[p * g.k + i]) * bv[q * g.k + i]; break;
      case GemmRole::dgrad: for (int64_t i = 0; i < g.n; ++i) ref += double(av[p * g.n + i]) * bv[i * g.k + q]; break;
      case GemmRole::wgrad: for (int64_t i = 0; i < g.m; ++i) ref += double(av[i * g.n + p]) * bv[i * g.k + q]; break;
    }
    const double e = double(ov[size_t(p * Q + q)]) - ref;
    num += e * e, den += ref * ref;
    max_abs_err = std::max(max_abs_err, std::fabs(e));
  }
  const double rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  const double tol = 1e-2;  // bf16 output (NUMERICS.md §7)

  const double flops = 2.0 * double(g.m) * double(g.n) * double(g.k);
  const auto run_ours = [&] { gemm(a, b, role, out, opts, ctx, stream); };
  bench::Timing ours, raw_timing;
#if TE_WITH_CUDA
  Tensor raw_out;
  RawLt raw;
  RawChoice raw_choice;
  // cuBLASLt's fp8 kernels take no row or column count that is not a multiple of 8 (te::gemm pads such operands);
  // then the report says why there is no raw figure, and `--kernel cublaslt` times te::gemm's padded call instead.
  const bool raw_refused = g.format != "bf16" && (P % 8 != 0 || Q % 8 != 0);
  const bool raw_runs = dev.is_cuda() && !raw_refused;
  if (raw_runs) {
    raw_out = Tensor::empty({P, Q}, DType::bf16, dev, stream);
    setup_raw(raw, a, b, role, g, raw_out);
    raw_choice = pick_fastest(raw, stream);
    const std::vector<bench::Timing> t =
        bench::time_alternating({run_ours, [&] { raw.run(stream); }}, stream, g.warmup, g.repeats);
    ours = t[0], raw_timing = t[1];
  }
#else
  const bool raw_runs = false;
#endif
  if (!raw_runs) ours = bench::time_it(run_ours, stream, g.warmup, g.repeats);
  nlohmann::json rep;
  rep["bench"] = "gemm";
  rep["device"] = dev.str();
  rep["m"] = g.m, rep["n"] = g.n, rep["k"] = g.k;
  rep["role"] = g.role;
  rep["format"] = g.format;
  rep["out_dtype"] = "bf16";
  rep["validation"] = {{"samples", g.samples}, {"rel_l2", rel}, {"max_abs_err", max_abs_err}, {"tolerance", tol},
                       {"passed", rel <= tol}};
  rep["ours_ms"] = ours.median_ms;
  rep["ours_tflops"] = flops / (ours.median_ms * 1e-3) / 1e12;
  rep["kernel"] = ctx.stats().streaming_calls > 0 ? "streaming"
                  : ctx.stats().wgmma_calls > 0   ? "wgmma"
                  : dev.is_cuda()                 ? "cublaslt"
                                                  : "row_gemm";
  // Few tokens: the GEMM is bound by reading b once (the weight, fprop/dgrad).
  const double b_bytes = b.is_quantized() ? double(b.rows()) * double(b.cols()) : double(b_hp.nbytes());
  rep["b_read_tb_per_s"] = b_bytes / (ours.median_ms * 1e-3) / 1e12;
#if TE_WITH_CUDA
  if (dev.is_cuda() && raw_refused)
    rep["raw_unsupported"] = "cuBLASLt fp8 needs row and column counts that are multiples of 8";
  if (raw_runs) {
    const std::vector<float> rv = raw_out.to_f32_vector(stream);
    double dn = 0, dd = 0;
    for (size_t i = 0; i < rv.size(); ++i) dn += double(rv[i] - ov[i]) * (rv[i] - ov[i]), dd += double(rv[i]) * rv[i];
    rep["raw_ms"] = raw_timing.median_ms;
    rep["raw_tflops"] = flops / (raw_timing.median_ms * 1e-3) / 1e12;
    rep["ratio"] = raw_timing.median_ms / ours.median_ms;
    rep["raw_b_read_tb_per_s"] = b_bytes / (raw_timing.median_ms * 1e-3) / 1e12;
    rep["ratio_target"] = 0.97;
    rep["raw_vs_ours_rel_l2"] = dd > 0 ? std::sqrt(dn / dd) : 0.0;
    rep["raw_algorithms_offered"] = raw.candidates.size();
    rep["raw_algorithms_timed"] = raw_choice.timed;
    rep["raw_algorithm_index"] = raw_choice.index;
    rep["raw_algorithm_config"] = algo_config(raw.algo);
  }
#endif
  const double ref_tflops = g.format == "bf16" ? 792 : g.format == "fp8_per_tensor" ? 1333 : 1211;
  rep["h200_reference_tflops"] = ref_tflops;  // NUMERICS.md §6, M=8192 N=16384 K=4096
  rep["gemm_stats"] = {{"plans_built", ctx.stats().plans_built}, {"plan_cache_hits", ctx.stats().plan_cache_hits},
                       {"padded_calls", ctx.stats().padded_calls},
                       {"bias_kernel_calls", ctx.stats().bias_kernel_calls}};
  bench::print_report(rep, g.json);
  return rel <= tol ? 0 : 1;
}

}  // namespace

Command add_bench_gemm(CLI::App& app) {
  CLI::App* sub = app.add_subcommand("gemm", "GEMMs against raw cuBLASLt");
  auto args = std::make_shared<GemmBenchArgs>();
  sub->add_option("--m", args->m, "tokens (M)")->check(CLI::PositiveNumber);
  sub->add_option("--n", args->n, "output features (N)")->check(CLI::PositiveNumber);
  sub->add_option("--k", args->k, "input features (K)")->check(CLI::PositiveNumber);
  sub->add_option("--format", args->format, "operand format")
      ->check(CLI::IsMember({"bf16", "fp8_per_tensor", "fp8_block"}));
  sub->add_option("--role", args->role, "GEMM role")->check(CLI::IsMember({"fprop", "dgrad", "wgrad"}));
  sub->add_option("--device", args->device, "auto | cuda | cuda:N | cpu");
  sub->add_option("--kernel", args->kernel,
                  "fp8 CUDA kernel: auto (streaming for <= 16 rows where it runs, else cuBLASLt) | cublaslt | "
                  "streaming (<= 64 rows) | wgmma (block-scaled, the warpgroup kernel)")
      ->check(CLI::IsMember({"auto", "cublaslt", "streaming", "wgmma"}));
  sub->add_option("--warmup", args->warmup, "untimed runs")->check(CLI::NonNegativeNumber);
  sub->add_option("--repeats", args->repeats, "timed runs (median reported)")->check(CLI::PositiveNumber);
  sub->add_option("--samples", args->samples, "output elements checked against float64")->check(CLI::PositiveNumber);
  sub->add_flag("--json", args->json, "print the report as JSON");
  return {sub, [args] { return run_gemm_bench(*args); }};
}

}  // namespace te::cli
