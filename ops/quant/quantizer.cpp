// Quantizer: validates, collapses x to a 2-D strided view, allocates the copies (scale padding zeroed), runs the
// amax → AmaxReducer → cast sequence of the format, and keeps the delayed-scaling state.
#include "ops/quant/quantizer.h"

#include <cfloat>

#include "engine/error.h"
#include "ops/quant/quant_kernels.h"

namespace te {
namespace {

// [.., K] as [M, K] with one row stride when the leading dims collapse; otherwise undefined.
bool collapse_2d(const Tensor& x, QuantInput& in) {
  const int d = x.dim();
  in.K = x.size(-1);
  in.stride_k = x.stride(-1);
  in.M = 1;
  in.stride_m = in.K;  // any value works for a single row
  int64_t expect = -1;  // the stride the next outer non-trivial dim must have
  bool first = true;
  for (int i = d - 2; i >= 0; --i) {
    if (x.size(i) == 1) continue;
    if (first) {
      in.stride_m = x.stride(i);
      first = false;
    } else if (x.stride(i) != expect) {
      return false;
    }
    expect = x.stride(i) * x.size(i);
    in.M *= x.size(i);
  }
  for (int i = 0; i < d - 1; ++i)
    if (x.size(i) == 0) in.M = 0;
  return true;
}

}  // namespace

Quantizer::Quantizer(QuantizerConfig config) : config_(config) {
  const QuantFormat f = config_.format;
  if (nvfp4_format(f)) {
    config_.data_dtype = DType::fp4_e2m1;
  } else {
    TE_CHECK_HINT(config_.data_dtype == DType::fp8_e4m3 || config_.data_dtype == DType::fp8_e5m2,
                  "quantizer " << quant_format_name(f) << ": data dtype " << dtype_name(config_.data_dtype)
                               << " is not an fp8 type",
                  "use fp8_e4m3 or fp8_e5m2");
  }
  TE_CHECK_HINT(!config_.random_hadamard || f == QuantFormat::nvfp4_1d,
                "random_hadamard is only defined for nvfp4_1d (got " << quant_format_name(f) << ")",
                "turn random_hadamard off for this tensor's quantizer");
  TE_CHECK_HINT(!config_.stochastic_rounding || nvfp4_format(f),
                "stochastic_rounding is only defined for NVFP4 (got " << quant_format_name(f) << ")",
                "turn stochastic_rounding off for this tensor's quantizer");
  TE_CHECK(config_.amax_history_len >= 1,
           "delayed scaling needs amax_history_len >= 1 (got " << config_.amax_history_len << ")");
}

bool Quantizer::can_gather_quantized(const Shape& local_shape, Usage usages) const {
  const QuantFormatInfo& info = quant_format_info(config_.format);
  if (info.block == 0) return true;  // per tensor: once the scale is shared
  int64_t m = 1;
  for (size_t i = 0; i + 1 < local_shape.size(); ++i) m *= local_shape[i];
  const bool m_aligned = m % info.block == 0;  // M = 0 is aligned
  if (has_usage(usages, Usage::columnwise) && !m_aligned) return false;
  if (info.two_d && has_usage(usages, Usage::rowwise) && !m_aligned) return false;
  return true;
}

void Quantizer::ensure_delayed_state(Device device, const Stream& stream) {
  if (delayed_.defined() && delayed_.scale.device() == device) return;
  // The state follows the tensors to a new device.
  delayed_ = delayed_.defined() ? delayed_.copy_to(device, stream)
                                : DelayedScaling::fresh(config_.amax_history_len, device, stream);
}

void Quantizer::set_delayed(const DelayedScaling& state, Device device, const Stream& stream) {
  state.check(config_.amax_history_len);
  if (!delayed_.defined() || delayed_.scale.device() != device) {
    delayed_ = state.copy_to(device, stream);
    return;
  }
  // In place: a captured training step (a CUDA graph) goes on reading and updating the same buffers.
  delayed_.scale.copy_from(state.scale, stream);
  delayed_.amax_history.copy_from(state.amax_history, stream);
  delayed_.step_amax.copy_from(state.step_amax, stream);
  delayed_.count.copy_from(state.count, stream);
}

QuantizedTensor Quantizer::quantize(const Tensor& x, Usage usages, const Stream& stream, const AmaxReducer& reduce,
                                    std::optional<ImageSpec> images) {
  return quantize_impl(x, usages, stream, reduce, QuantPreAct::none, nullptr, images);
}

bool Quantizer::can_fuse_activation(const Tensor& x, Usage usages) const {
  return x.defined() && x.is_contiguous() && (reinterpret_cast<uintptr_t>(x.data_ptr()) & 15) == 0 &&
         can_fuse_activation(x.shape(), x.dtype(), x.device(), usages);
}

bool Quantizer::can_fuse_activation(const Shape& shape, DType dtype, Device device, Usage usages) const {
  const QuantFormat f = config_.format;
  const bool sixteen = device.is_cuda() && (dtype == DType::bf16 || dtype == DType::f16) && !shape.empty();
  // NVFP4: the row-wise kernel (one lane per 1x16 block) after an amax pass over act(x).
  if (f == QuantFormat::nvfp4_1d) return sixteen && usages == Usage::rowwise && shape.back() % 16 == 0;
  const bool fast = (f == QuantFormat::fp8_block_1d || f == QuantFormat::mxfp8) && sixteen && shape.back() % 8 == 0;
  if (!fast || usages == Usage::none) return false;
  // The column-wise copy comes from the 128x128 tile kernel.
  return !has_usage(usages, Usage::columnwise) || quant_tile_grid_fits(shape.back());
}

QuantizedTensor Quantizer::quantize_activation(QuantPreAct act, const Tensor& x, Usage usages, const Stream& stream,
                                               const AmaxReducer& reduce, Tensor* act_out,
                                               std::optional<ImageSpec> images) {
  TE_CHECK(can_fuse_activation(x, usages),
           "quantize_activation: " << x.str() << " has no fused path (check can_fuse_activation)");
  TE_CHECK(!act_out || usages == Usage::rowwise, "quantize_activation: the activation is kept only with row-wise");
  return quantize_impl(x, usages, stream, reduce, act, act_out, images);
}

QuantParams Quantizer::params(Usage usages, QuantPreAct act) const {
  QuantParams p;
  p.format = config_.format;
  p.data_dtype = config_.data_dtype;
  p.rowwise = has_usage(usages, Usage::rowwise);
  p.columnwise = has_usage(usages, Usage::columnwise);
  p.pow2 = config_.pow2_scales;
  p.eps = config_.eps;
  p.rht = config_.random_hadamard;
  p.sr = config_.stochastic_rounding;
  p.seed = config_.seed;
  p.pre_act = act;
  return p;
}

Quantizer::CastTarget Quantizer::cast_target(const QuantizedTensor& qt) const {
  const QuantFormat f = config_.format;
  TE_CHECK(f == QuantFormat::fp8_block_1d || f == QuantFormat::fp8_block_2d || f == QuantFormat::mxfp8,
           "cast_target: " << quant_format_name(f) << " takes an amax before its cast");
  TE_CHECK(qt.format == f && qt.data_dtype == config_.data_dtype && qt.shape.size() == 2,
           "cast_target: a " << quant_format_name(qt.format) << " copy of " << shape_str(qt.shape)
                             << " was not made by this " << quant_format_name(f) << " quantizer from a 2-D tensor");
  CastTarget t;
  t.in.dtype = qt.original_dtype;
  t.in.M = qt.shape[0];
  t.in.K = qt.shape[1];
  t.in.stride_m = t.in.K;
  t.params = params(qt.usages(), QuantPreAct::none);
  auto copy = [&](Usage u, const Tensor& data, const Tensor& scale, QuantCopyOut& o) {
    o.layout = copy_layout(f, u, t.in.M, t.in.K);
    o.data = data.data<uint8_t>();
    o.scale_inv = scale.data_ptr();
  };
  if (t.params.rowwise) copy(Usage::rowwise, qt.rowwise_data, qt.rowwise_scale_inv, t.out.row);
  if (t.params.columnwise) copy(Usage::columnwise, qt.columnwise_data, qt.columnwise_scale_inv, t.out.col);
  return t;
}

QuantizedTensor Quantizer::quantize_impl(const Tensor& x_in, Usage usages, const Stream& stream,
                                         const AmaxReducer& reduce, QuantPreAct act, Tensor* act_out,
                                         const std::optional<ImageSpec>& images) {
  const QuantFormat f = config_.format;
  TE_CHECK_HINT(x_in.defined() && x_in.dim() >= 1 && is_high_precision(x_in.dtype()),
                "quantize " << quant_format_name(f) << ": input " << (x_in.defined() ? x_in.str() : "undefined")
                            << " must be an f32/bf16/f16 tensor of at least one dim",
                "cast the input to bf16/f16/f32 first");
  TE_CHECK(usages != Usage::none, "quantize " << quant_format_name(f) << ": no usage requested for " << x_in.str());
  QuantInput in;
  Tensor x = x_in;
  if (!collapse_2d(x, in)) {  // leading dims that no single stride describes: one copy makes them contiguous
    x = x_in.contiguous(stream);
    collapse_2d(x, in);
  }
  in.data = x.data_ptr();
  in.dtype = x.dtype();
  const Device dev = x.device();
  const QuantKernelEntry& k = quant_kernels(f, dev.kind);

  QuantParams p = params(usages, act);

  QuantizedTensor qt;
  qt.format = f;
  qt.shape = x_in.shape();
  qt.original_dtype = x_in.dtype();
  qt.data_dtype = config_.data_dtype;
  qt.columnwise_rht = p.columnwise && p.rht;
  const DType scale_dtype = quant_format_info(f).scale_dtype;

  QuantOutputs out;
  auto make_copy = [&](Usage u, Tensor& data, Tensor& scale, QuantCopyOut& o) {
    o.layout = copy_layout(f, u, in.M, in.K);
    data = Tensor::empty(copy_data_shape(o.layout), config_.data_dtype, dev, stream);
    scale = Tensor::zeros(copy_scale_shape(o.layout), scale_dtype, dev, stream);  // padding stays zero
    o.data = data.data<uint8_t>();
    o.scale_inv = scale.data_ptr();
  };
  if (act_out) {  // contiguous x (can_fuse_activation): the kernel writes it in x's [M, K] order
    *act_out = Tensor::empty(x.shape(), x.dtype(), dev, stream);
    out.act_out = act_out->data_ptr();
  }
  if (p.rowwise) make_copy(Usage::rowwise, qt.rowwise_data, qt.rowwise_scale_inv, out.row);
  if (p.columnwise) make_copy(Usage::columnwise, qt.columnwise_data, qt.columnwise_scale_inv, out.col);
  if (images) {  // [M, K] in x's order, whatever the copy's orientation
    TE_CHECK(is_high_precision(images->dtype),
             "quantize: an image is f32, bf16 or f16, not " << dtype_name(images->dtype));
    out.image = *images;
    auto make_image = [&](Tensor& image) {
      image = Tensor::empty({in.M, in.K}, images->dtype, dev, stream);
      return image.data_ptr();
    };
    if (p.rowwise) out.row_image = make_image(qt.rowwise_image);
    if (p.columnwise) out.col_image = make_image(qt.columnwise_image);
  }

  // The amax tensors live until the cast below has read them (the cast reads both pointers even when a usage is
  // absent from the result).
  Tensor amax, col_amax;
  if (f == QuantFormat::fp8_per_tensor) {
    amax = Tensor::zeros({1}, DType::f32, dev, stream);  // [1] max|x| of this tensor
    k.amax(in, p, amax.data<float>(), nullptr, stream);
    if (config_.scaling == ScalingKind::delayed) {
      ensure_delayed_state(dev, stream);
      k.fold_max(delayed_.step_amax.data<float>(), amax.data<float>(), stream);
      p.scale = delayed_.scale.data<float>();
    } else if (reduce) {
      reduce(amax, stream);
    }
    qt.rowwise_amax = qt.columnwise_amax = amax;
    out.row_amax = out.col_amax = amax.data<float>();
  } else if (nvfp4_format(f)) {
    amax = Tensor::zeros({1}, DType::f32, dev, stream);
    col_amax = qt.columnwise_rht ? Tensor::zeros({1}, DType::f32, dev, stream) : amax;
    k.amax(in, p, amax.data<float>(), qt.columnwise_rht ? col_amax.data<float>() : nullptr, stream);
    if (reduce) {
      reduce(amax, stream);
      if (qt.columnwise_rht) reduce(col_amax, stream);
    }
    if (p.rowwise) qt.rowwise_amax = amax;
    if (p.columnwise) qt.columnwise_amax = col_amax;
    out.row_amax = amax.data<float>();
    out.col_amax = col_amax.data<float>();
  }
  k.cast(in, p, out, stream);
  return qt;
}

void Quantizer::update_scale_after_step(const Stream& stream, const AmaxReducer& reduce, const int32_t* skip) {
  if (config_.format != QuantFormat::fp8_per_tensor || config_.scaling != ScalingKind::delayed) return;
  if (!delayed_.defined()) return;  // nothing quantized yet
  if (reduce) reduce(delayed_.step_amax, stream);
  DelayedUpdateArgs a{delayed_.amax_history.data<float>(),
                      delayed_.count.data<int64_t>(),
                      delayed_.step_amax.data<float>(),
                      delayed_.scale.data<float>(),
                      skip,
                      config_.amax_history_len,
                      config_.amax_algo == AmaxAlgo::most_recent,
                      static_cast<float>(dtype_info(config_.data_dtype).max_finite),
                      config_.margin};
  quant_kernels(config_.format, delayed_.scale.device().kind).delayed_update(a, stream);
}

}  // namespace te
