// gather_along_first_dim: planning (§4), the quantized path with its interleave fix, the fallback, and the
// reduce-scatter / all-reduce wrappers. Shapes: M_l = local rows (product of leading dims), M = W·M_l, K = last dim.
#include "comm/gather.h"

#include <mutex>
#include <set>

#include "engine/error.h"
#include "engine/log.h"
#include "ops/elementwise/swap_first_dims.h"
#include "ops/quant/quant_layout.h"

namespace te {
namespace {

int64_t rows_of(const Shape& s) {
  int64_t m = 1;
  for (size_t i = 0; i + 1 < s.size(); ++i) m *= s[i];
  return m;
}

// One log line per (call site, reason): a fallback is expected to repeat every step.
void log_fallback_once(const CallSite& site, const std::string& msg) {
  static std::mutex mu;
  static std::set<std::pair<std::string, unsigned>> seen;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!seen.emplace(site.file, site.line).second) return;
  }
  TE_LOG(warn, "gather_along_first_dim at " << site.file << ":" << site.line << ": " << msg);
}

// A contiguous tensor's bytes as u8 [n] (fp4 and every other dtype move as bytes). Borrowed: the caller keeps
// `t` alive for as long as the view is used.
Tensor bytes_of(const Tensor& t) {
  return Tensor::borrow(t.data_ptr(), {t.nbytes()}, DType::u8, t.device());
}

// Why a usage cannot take the quantized path; empty when it can.
// §4 for one usage of a local shard, with the reason either way.
UsagePath usage_path(const Quantizer& q, const Shape& local_shape, Usage u) {
  const QuantizerConfig& c = q.config();
  const QuantFormatInfo& info = quant_format_info(c.format);
  const int64_t m = rows_of(local_shape);
  const char* copy = u == Usage::rowwise ? "row-wise" : "column-wise";
  if (c.stochastic_rounding)
    return {GatherRoute::fallback,
            "NVFP4 stochastic rounding draws depend on the global element index; quantizing the gathered tensor "
            "keeps the draws of one rank"};
  if (q.can_gather_quantized(local_shape, u)) {
    if (info.block == 0) return {GatherRoute::quantized, "one per-tensor scale for the group (amax reduced first)"};
    if (u == Usage::rowwise && !info.two_d)
      return {GatherRoute::quantized, TE_STR_("row-wise blocks of " << info.block << " never cross a token")};
    return {GatherRoute::quantized, TE_STR_("local M=" << m << " is a multiple of the block " << info.block)};
  }
  if (info.two_d)
    return {GatherRoute::fallback,
            TE_STR_(copy << " " << info.block << "x" << info.block << " tiles would span ranks: local M=" << m)};
  return {GatherRoute::fallback, TE_STR_(copy << " blocks of " << info.block << " would span ranks: local M=" << m)};
}

struct GatherParts {
  QuantizedTensor out;
  std::vector<Collective> ops;
  std::vector<std::function<void()>> fixes;  // run after the launch completes, on the same stream
  int64_t bytes = 0;
};

// Plans the quantized gather of usages `qset` of `local` into `parts.out` (fields of those usages).
void plan_quantized(const QuantizedTensor& local, Usage qset, int W, Device dev, const Stream& stream,
                    GatherParts& parts) {
  const QuantFormat f = local.format;
  const DType scale_dtype = quant_format_info(f).scale_dtype;
  const int64_t Ml = rows_of(local.shape), K = local.shape.back();
  const int64_t eb_scale = dtype_bits(scale_dtype) / 8;
  QuantizedTensor& out = parts.out;
  for (Usage u : {Usage::rowwise, Usage::columnwise}) {
    if (!has_usage(qset, u)) continue;
    const bool row = u == Usage::rowwise;
    const Tensor& ld = row ? local.rowwise_data : local.columnwise_data;
    const Tensor& ls = row ? local.rowwise_scale_inv : local.columnwise_scale_inv;
    TE_CHECK(ld.defined() && ls.defined() && ld.is_contiguous() && ls.is_contiguous(),
             "gather: the local " << usage_name(u) << " copy of a " << quant_format_name(f) << " tensor is missing");
    const CopyLayout Ll = copy_layout(f, u, Ml, K), Lg = copy_layout(f, u, W * Ml, K);
    TE_CHECK(copy_data_shape(Ll) == ld.shape() && copy_scale_shape(Ll) == ls.shape(),
             "gather: local " << usage_name(u) << " copy " << ld.str() << " / " << ls.str()
                              << " does not have the layout of NUMERICS §3 for local shape " << shape_str(local.shape));
    Tensor od = Tensor::empty(copy_data_shape(Lg), local.data_dtype, dev, stream);
    Tensor os;
    // Data: rows along M stack rank after rank; the transposed copy [K, M_l] gathers to [W, K, M_l] and is
    // swapped to [K, W, M_l] = [K, M].
    if (row || Ll.store_transposed) {
      parts.ops.push_back({CollectiveKind::all_gather, ld, od, ReduceOp::sum});
    } else {
      const int64_t rb = ld.nbytes() / std::max<int64_t>(K, 1);  // bytes of one local row (fp4: M_l/2)
      TE_CHECK(rb * K == ld.nbytes() && rb * W * K == od.nbytes(),
               "gather: transposed data " << ld.str() << " does not split into " << K << " rows of bytes");
      Tensor tmp = Tensor::empty({W * ld.nbytes()}, DType::u8, dev, stream);  // [W, K, rb] bytes
      parts.ops.push_back({CollectiveKind::all_gather, bytes_of(ld), tmp, ReduceOp::sum});
      parts.fixes.push_back([tmp, od, ld, W, K, rb, dev, stream] {
        detail::SwapFirstDimsArgs g{static_cast<const uint8_t*>(tmp.data_ptr()), static_cast<uint8_t*>(od.data_ptr()),
                                    W, K, rb, K * rb, rb, W * rb, rb};
        swap_first_dims_bytes(g, dev, stream);
      });
    }
    // Scales: per-tensor → the shared local scale; M along the scale rows → stack; M along the scale columns
    // ([R, ld] with R not indexed by M) → gather [W, R, ld_l], keep the first `units` columns of each rank and
    // swap them into the window [R, W·units] of a zeroed [R, ld_g] (the padding past W·units stays zero).
    const bool single = Ll.scale_index == ScaleIndex::single;
    const bool m_on_cols = !single && (row ? Ll.scale_index == ScaleIndex::block_major
                                           : Ll.scale_index != ScaleIndex::block_major);
    if (single) {
      os = ls.clone(stream);
    } else if (!m_on_cols) {
      os = Tensor::empty(copy_scale_shape(Lg), scale_dtype, dev, stream);
      TE_CHECK(os.nbytes() == W * ls.nbytes(),
               "gather: scale " << ls.str() << " does not stack into " << os.str() << " over " << W << " ranks");
      parts.ops.push_back({CollectiveKind::all_gather, ls, os, ReduceOp::sum});
    } else {
      const int64_t units = row ? Ll.R : Ll.blocks_per_row();  // M-indexed columns of one rank
      const int64_t R = Ll.scale_rows, ld_l = Ll.scale_ld, ld_g = Lg.scale_ld;
      TE_CHECK(Lg.scale_rows == R && W * units <= ld_g && units <= ld_l,
               "gather: scale " << ls.str() << " cannot be interleaved into " << shape_str(copy_scale_shape(Lg)));
      os = Tensor::zeros(copy_scale_shape(Lg), scale_dtype, dev, stream);
      Tensor tmp = Tensor::empty({W * R, ld_l}, scale_dtype, dev, stream);  // [W, R, ld_l]
      parts.ops.push_back({CollectiveKind::all_gather, ls, tmp, ReduceOp::sum});
      parts.fixes.push_back([tmp, os, W, R, units, ld_l, ld_g, eb_scale, dev, stream] {
        detail::SwapFirstDimsArgs g{static_cast<const uint8_t*>(tmp.data_ptr()),
                                    static_cast<uint8_t*>(os.data_ptr()),
                                    W,
                                    R,
                                    units * eb_scale,
                                    R * ld_l * eb_scale,
                                    ld_l * eb_scale,
                                    ld_g * eb_scale,
                                    units * eb_scale};
        swap_first_dims_bytes(g, dev, stream);
      });
    }
    parts.bytes += od.nbytes() + (single ? 0 : os.nbytes());
    (row ? out.rowwise_data : out.columnwise_data) = od;
    (row ? out.rowwise_scale_inv : out.columnwise_scale_inv) = os;
    if (!row) out.columnwise_rht = local.columnwise_rht;
  }
  // Per-tensor amax (fp8 per-tensor: both fields share one tensor; NVFP4: one per copy): MAX over the ranks in the
  // same launch. Idempotent where the quantizer already all-reduced it; required for delayed scaling, whose
  // recorded amax is each rank's own max|x|.
  const bool per_tensor = f == QuantFormat::fp8_per_tensor;
  Tensor done_src, done_dst;
  for (Usage u : {Usage::rowwise, Usage::columnwise}) {
    const Tensor& la = u == Usage::rowwise ? local.rowwise_amax : local.columnwise_amax;
    if (!la.defined() || !(per_tensor || has_usage(qset, u))) continue;
    Tensor oa;
    if (done_src.defined() && done_src.data_ptr() == la.data_ptr()) {
      oa = done_dst;
    } else {
      oa = la.contiguous(stream).clone(stream);
      parts.ops.push_back({CollectiveKind::all_reduce, Tensor(), oa, ReduceOp::max});
      done_src = la;
      done_dst = oa;
    }
    (u == Usage::rowwise ? out.rowwise_amax : out.columnwise_amax) = oa;
  }
}

// Copies the fields of usage set `uset` from `src` into `dst`.
void take_usages(QuantizedTensor& dst, const QuantizedTensor& src, Usage uset) {
  const bool per_tensor = src.format == QuantFormat::fp8_per_tensor;
  if (has_usage(uset, Usage::rowwise)) {
    dst.rowwise_data = src.rowwise_data;
    dst.rowwise_scale_inv = src.rowwise_scale_inv;
    dst.rowwise_amax = src.rowwise_amax;
    dst.rowwise_image = src.rowwise_image;
  }
  if (has_usage(uset, Usage::columnwise)) {
    dst.columnwise_data = src.columnwise_data;
    dst.columnwise_scale_inv = src.columnwise_scale_inv;
    dst.columnwise_amax = src.columnwise_amax;
    dst.columnwise_rht = src.columnwise_rht;
    dst.columnwise_image = src.columnwise_image;
  }
  if (per_tensor) {  // one amax for the tensor, whichever copy produced it
    if (!dst.rowwise_amax.defined()) dst.rowwise_amax = src.rowwise_amax;
    if (!dst.columnwise_amax.defined()) dst.columnwise_amax = src.columnwise_amax;
  }
}

}  // namespace

AmaxReducer amax_reducer(Communicator& comm) {
  return [&comm](Tensor& amax, const Stream& stream) { comm.all_reduce(amax, ReduceOp::max, stream).wait(); };
}

GatherPlan plan_gather(const Shape& local_shape, const Quantizer* q, Usage usages, int world, Usage input_usages) {
  GatherPlan plan;
  if (!q) {
    plan.tensor = world == 1 ? UsagePath{GatherRoute::local, "world size 1: nothing to gather"}
                             : UsagePath{GatherRoute::high_precision, "no quantizer: the tensor's own dtype"};
    return plan;
  }
  TE_CHECK_HINT(usages != Usage::none, "plan_gather: no usage requested", "name the copies the gather must produce");
  const bool quantized_input = input_usages != Usage::none;
  bool any_fallback = false;
  for (Usage u : {Usage::rowwise, Usage::columnwise}) {
    if (!has_usage(usages, u)) continue;
    UsagePath& p = u == Usage::rowwise ? plan.rowwise : plan.columnwise;
    if (world == 1) {
      p = {GatherRoute::local, "world size 1: quantized locally"};
      continue;
    }
    p = usage_path(*q, local_shape, u);
    if (p.path == GatherRoute::quantized && quantized_input && !has_usage(input_usages, u))
      p = {GatherRoute::fallback, TE_STR_("the quantized input has no " << usage_name(u) << " copy")};
    any_fallback |= p.path == GatherRoute::fallback;
  }
  // A high-precision input that needs the fallback for one usage gathers once in high precision for both.
  if (any_fallback && !quantized_input)
    for (UsagePath* p : {&plan.rowwise, &plan.columnwise})
      if (p->path == GatherRoute::quantized) {
        p->path = GatherRoute::fallback;
        p->reason = "shares the high-precision gather of the other usage (one gather serves both)";
      }
  return plan;
}

const QuantizedTensor& GatherResult::quantized() const {
  TE_CHECK_HINT(output->quantized && work.waited(), "gather result: the output is "
                                                        << (output->quantized ? "not ready" : "not quantized"),
                "wait() on the work of an async gather first; a gather without a quantizer returns tensor()");
  return output->qt;
}
const Tensor& GatherResult::tensor() const {
  TE_CHECK_HINT(!output->quantized && work.waited(), "gather result: the output is "
                                                         << (output->quantized ? "quantized" : "not ready"),
                "wait() on the work of an async gather first; a quantized gather returns quantized()");
  return output->tensor;
}

GatherResult gather_along_first_dim(const GatherInput& input, Communicator& comm, Quantizer* quantizer, Usage usages,
                                    bool async_op, const Stream& stream, std::optional<ImageSpec> images,
                                    CallSite site) {
  const int W = comm.size();
  const Device dev = comm.device();
  const Tensor* hp = std::get_if<Tensor>(&input);
  const QuantizedTensor* qin = std::get_if<QuantizedTensor>(&input);
  GatherResult res;
  GatherOutput& out = *res.output;
  Tensor hp_in = hp ? *hp : Tensor();
  const Shape local_shape = hp ? hp_in.shape() : qin->shape;
  TE_CHECK_HINT(!local_shape.empty(), "gather_along_first_dim: a 0-dim input cannot be gathered along dim 0",
                "reshape it to [1, …]");
  TE_CHECK_HINT(hp ? (hp_in.defined() && hp_in.device() == dev) : qin->device() == dev,
                "gather_along_first_dim: input on " << (hp ? hp_in.device() : qin->device()).str()
                                                    << ", communicator on " << dev.str(),
                "move the input to the communicator's device");
  Shape out_shape = local_shape;
  out_shape[0] *= W;

  // A quantized input in another format than the quantizer's: use its high-precision values.
  if (qin && quantizer && quantizer->config().format != qin->format) {
    log_fallback_once(site, TE_STR_("input is " << quant_format_name(qin->format) << " but the quantizer is "
                                                << quant_format_name(quantizer->config().format)
                                                << ": dequantized to " << dtype_name(qin->original_dtype)));
    hp_in = qin->dequantize(std::nullopt, stream);
    hp = &hp_in;
    qin = nullptr;
  }
  if (usages == Usage::none && qin) usages = qin->usages();  // an already-quantized input: the copies it carries
  TE_CHECK_HINT(usages != Usage::none || !quantizer, "gather_along_first_dim: a quantizer but no usage requested",
                "name the copies the gather must produce (rowwise, columnwise or both)");
  // An already-quantized input without a quantizer can only take the quantized path; a temporary quantizer of
  // its format answers §4 (it never quantizes).
  std::optional<Quantizer> own;
  Quantizer* q = quantizer;
  if (qin && !q) {
    QuantizerConfig cfg;
    cfg.format = qin->format;
    cfg.data_dtype = qin->data_dtype;
    own.emplace(cfg);
    q = &*own;
  }
  res.plan = plan_gather(local_shape, q, usages, W, qin ? qin->usages() : Usage::none);
  CommMetrics& m = comm.metrics();

  // World size 1 or no quantizer: no format work.
  if (!q) {  // plain high-precision gather
    if (W == 1) {
      out.tensor = hp_in;
      m.gather_local.calls += 1;
      return res;
    }
    Tensor src = hp_in.contiguous(stream);
    out.tensor = Tensor::empty(out_shape, src.dtype(), dev, stream);
    res.work = comm.all_gather(src, out.tensor, stream);
    res.fallback_bytes = 0;
    m.gather_hp.calls += 1;
    m.gather_hp.bytes += out.tensor.nbytes();
    if (!async_op) res.work.wait();
    return res;
  }
  out.quantized = true;
  if (W == 1) {
    m.gather_local.calls += 1;
    if (qin) {
      out.qt = *qin;
    } else {
      out.qt = q->quantize(hp_in, usages, stream, {}, images);
    }
    return res;
  }

  Usage qset = Usage::none, fset = Usage::none;
  for (Usage u : {Usage::rowwise, Usage::columnwise}) {
    if (res.plan.of(u).path == GatherRoute::quantized) qset = qset | u;
    if (res.plan.of(u).path == GatherRoute::fallback) fset = fset | u;
  }
  out.qt.format = q->config().format;
  out.qt.shape = out_shape;
  out.qt.original_dtype = qin ? qin->original_dtype : hp_in.dtype();
  out.qt.data_dtype = qin ? qin->data_dtype : q->config().data_dtype;

  GatherParts parts;
  if (qset != Usage::none) {
    // Quantize locally with the group's amax (current scaling, NVFP4), or take the input's copies.
    const QuantizedTensor local = qin ? *qin : q->quantize(hp_in, qset, stream, amax_reducer(comm));
    parts.out = out.qt;
    plan_quantized(local, qset, W, dev, stream, parts);
    res.quantized_bytes = parts.bytes;
    m.gather_quantized.calls += 1;
    m.gather_quantized.bytes += parts.bytes;
  }
  Tensor gathered_hp;
  if (fset != Usage::none) {
    TE_CHECK_HINT(quantizer != nullptr,
                  "gather_along_first_dim: the " << usage_name(fset) << " copy of a quantized "
                                                 << quant_format_name(qin->format) << " input must take the fallback ("
                                                 << res.plan.of(has_usage(fset, Usage::rowwise) ? Usage::rowwise
                                                                                                : Usage::columnwise)
                                                        .reason
                                                 << "), which re-quantizes and needs a quantizer",
                  "pass the quantizer that produced the input");
    const UsagePath& why = res.plan.of(has_usage(fset, Usage::columnwise) ? Usage::columnwise : Usage::rowwise);
    Tensor src = hp_in;
    if (qin) {
      log_fallback_once(site, TE_STR_("falling back to a " << dtype_name(qin->original_dtype) << " gather ("
                                                           << why.reason << "); the quantized input is dequantized to "
                                                           << dtype_name(qin->original_dtype) << " first"));
      src = qin->dequantize(std::nullopt, stream);
    } else {
      log_fallback_once(site, TE_STR_("falling back to a " << dtype_name(src.dtype()) << " gather (" << why.reason
                                                           << ")"));
    }
    src = src.contiguous(stream);  // [M_l, …] original dtype
    gathered_hp = Tensor::empty(out_shape, src.dtype(), dev, stream);  // [W·M_l, …] original dtype
    parts.ops.push_back({CollectiveKind::all_gather, src, gathered_hp, ReduceOp::sum});
    res.fallback_bytes = gathered_hp.nbytes();
    m.gather_fallback.calls += 1;
    m.gather_fallback.bytes += gathered_hp.nbytes();
  }

  res.work = comm.launch(parts.ops, stream);
  auto output = res.output;
  const Usage qset_c = qset, fset_c = fset;
  QuantizedTensor qpart = parts.out;
  auto fixes = std::move(parts.fixes);
  res.work.then([output, qpart, qset_c, fset_c, fixes, gathered_hp, q, own, stream, images]() mutable {
    for (auto& fix : fixes) fix();
    QuantizedTensor& o = output->qt;
    if (qset_c != Usage::none) take_usages(o, qpart, qset_c);
    if (fset_c != Usage::none) {
      // The gathered tensor is global: its amax is the group's, no reduction needed.
      Quantizer& qq = own ? *own : *q;
      QuantizedTensor fq = qq.quantize(gathered_hp, fset_c, stream, {}, images);
      take_usages(o, fq, fset_c);
    }
  });
  if (!async_op) res.work.wait();
  return res;
}

ReduceScatterResult reduce_scatter_along_first_dim(const Tensor& input, Communicator& comm, bool async_op,
                                                   const Stream& stream) {
  const int W = comm.size();
  TE_CHECK_HINT(input.defined() && input.dim() >= 1, "reduce_scatter_along_first_dim: input must have a dim 0",
                "reshape it to [n, …]");
  TE_CHECK_HINT(input.size(0) % W == 0,
                "reduce_scatter_along_first_dim: first dimension " << input.size(0) << " of " << input.str()
                                                                   << " does not divide by the world size " << W,
                "pad the token dimension to a multiple of the world size");
  ReduceScatterResult r;
  if (W == 1) {
    r.output = input;
    return r;
  }
  Shape s = input.shape();
  s[0] /= W;
  Tensor src = input.contiguous(stream);
  r.output = Tensor::empty(s, input.dtype(), comm.device(), stream);
  r.work = comm.reduce_scatter(src, r.output, ReduceOp::sum, stream);
  comm.metrics().reduce_scatter.calls += 1;
  comm.metrics().reduce_scatter.bytes += r.output.nbytes();
  if (!async_op) r.work.wait();
  return r;
}

Work all_reduce(const Tensor& tensor, Communicator& comm, ReduceOp op, bool async_op, const Stream& stream) {
  comm.metrics().all_reduce.calls += 1;
  comm.metrics().all_reduce.bytes += tensor.nbytes();
  if (comm.size() == 1) return Work();
  Work w;
  if (tensor.is_contiguous()) {
    w = comm.all_reduce(tensor, op, stream);
  } else {
    Tensor tmp = tensor.contiguous(stream);
    w = comm.all_reduce(tmp, op, stream);
    w.then([dst = tensor, tmp, stream]() mutable { dst.copy_from(tmp, stream); });
  }
  if (!async_op) w.wait();
  return w;
}

}  // namespace te
