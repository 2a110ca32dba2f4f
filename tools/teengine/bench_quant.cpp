// teengine bench quant: one quantizer configuration validated bit for bit against the CPU reference (the whole
// tensor), then timed on the device and reported as GB/s (input bytes read + quantized bytes written) against the
// device-to-device copy bandwidth measured in the same run.
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "engine/error.h"
#include "ops/quant/quantizer.h"
#include "tools/teengine/bench_util.h"
#include "tools/teengine/commands.h"

namespace te::cli {
namespace {

struct QuantOpts {
  std::string format = "fp8_block_1d", usages = "both", shape = "8192x4096", dtype = "bf16", data = "e4m3";
  std::string device = "auto";
  bool rht = false, sr = false, no_pow2 = false, images = false, json = false;
};

bool same_bytes(const Tensor& a, const Tensor& b) {
  if (a.defined() != b.defined()) return false;
  if (!a.defined()) return true;
  const Tensor ha = a.to(Device::cpu()), hb = b.to(Device::cpu());
  return ha.nbytes() == hb.nbytes() && std::memcmp(ha.data_ptr(), hb.data_ptr(), ha.nbytes()) == 0;
}

int run_quant(const QuantOpts& o) {
  const auto fmt = quant_format_from_name(o.format);
  if (!fmt)
    TE_INPUT_ERROR("unknown --format '" << o.format << "'",
                   "use fp8_per_tensor, fp8_block_1d, fp8_block_2d, mxfp8, nvfp4_1d or nvfp4_2d");
  const Usage usages = o.usages == "rowwise" ? Usage::rowwise
                       : o.usages == "columnwise" ? Usage::columnwise
                       : o.usages == "both" ? Usage::both : Usage::none;
  if (usages == Usage::none) TE_INPUT_ERROR("bad --usages '" << o.usages << "'", "use rowwise, columnwise or both");
  const auto dt = dtype_from_name(o.dtype);
  if (!dt || !is_high_precision(*dt)) TE_INPUT_ERROR("bad --dtype '" << o.dtype << "'", "use f32, bf16 or f16");
  long long m = 0, k = 0;
  if (std::sscanf(o.shape.c_str(), "%lldx%lld", &m, &k) != 2 || m <= 0 || k <= 0)
    TE_INPUT_ERROR("bad --shape '" << o.shape << "'", "use ROWSxCOLS, e.g. 8192x4096");
  QuantizerConfig cfg;
  cfg.format = *fmt;
  cfg.data_dtype = o.data == "e5m2" ? DType::fp8_e5m2 : DType::fp8_e4m3;
  cfg.scaling = ScalingKind::current;
  const bool block = *fmt == QuantFormat::fp8_block_1d || *fmt == QuantFormat::fp8_block_2d;
  cfg.pow2_scales = block && !o.no_pow2;
  cfg.random_hadamard = o.rht;
  cfg.stochastic_rounding = o.sr;
  cfg.seed = 1234;
  Quantizer q(cfg);

  const Device dev = parse_device(o.device);
  const Stream stream = Stream::create(dev);
  Tensor x = Tensor::empty({m, k}, *dt, dev, stream);  // [M, K]
  x.fill_normal(7, 0.f, 3.f, stream);

  // --images: each copy's exact bf16 image written beside it, as an emulated GEMM on Hopper reads it.
  const std::optional<ImageSpec> images = o.images ? std::optional<ImageSpec>(ImageSpec{DType::bf16, false}) : std::nullopt;
  // Validate: the device result equals the CPU reference byte for byte (data, scales, amax, images).
  const QuantizedTensor got = q.quantize(x, usages, stream, {}, images);
  stream.synchronize();
  bool ok = true;
  if (dev.is_cuda()) {
    const QuantizedTensor ref = q.quantize(x.to(Device::cpu(), stream), usages, Stream(), {}, images);
    ok = same_bytes(got.rowwise_data, ref.rowwise_data) && same_bytes(got.rowwise_scale_inv, ref.rowwise_scale_inv) &&
         same_bytes(got.columnwise_data, ref.columnwise_data) &&
         same_bytes(got.columnwise_scale_inv, ref.columnwise_scale_inv) &&
         same_bytes(got.rowwise_amax, ref.rowwise_amax) && same_bytes(got.columnwise_amax, ref.columnwise_amax) &&
         same_bytes(got.rowwise_image, ref.rowwise_image) && same_bytes(got.columnwise_image, ref.columnwise_image);
  }

  // 20 calls per timed sample: the host enqueues ahead of the GPU, as in a model step.
  const bench::Timing t = bench::time_per_op([&] { q.quantize(x, usages, stream, {}, images); }, stream, 20);
  const double copy = bench::copy_bandwidth_gbs(stream);
  int64_t image_bytes = 0;
  for (const Tensor* i : {&got.rowwise_image, &got.columnwise_image})
    if (i->defined()) image_bytes += i->nbytes();
  // Read x once, write every copy (and its image).
  const double bytes = static_cast<double>(x.nbytes() + got.nbytes() + image_bytes);
  const double gbs = bytes / (t.median_ms * 1e-3) / 1e9;
  nlohmann::json r = {{"bench", "quant"},
                      {"format", std::string(quant_format_name(*fmt))},
                      {"usages", std::string(usage_name(usages))},
                      {"shape", {m, k}},
                      {"dtype", std::string(dtype_name(*dt))},
                      {"data_dtype", std::string(dtype_name(q.config().data_dtype))},
                      {"rht", o.rht},
                      {"stochastic_rounding", o.sr},
                      {"images", o.images},
                      {"device", dev.str()},
                      {"validated", ok},
                      {"validation", dev.is_cuda() ? "bit-exact vs CPU reference, whole tensor" : "CPU reference itself"},
                      {"ms", t.median_ms},
                      {"ms_min", t.min_ms},
                      {"bytes", bytes},
                      {"gbs", gbs},
                      {"copy_gbs", copy},
                      {"fraction_of_copy", gbs / copy}};
  bench::print_report(r, o.json);
  return ok ? 0 : 1;
}

}  // namespace

Command add_bench_quant(CLI::App& app) {
  CLI::App* sub = app.add_subcommand("quant", "Quantization kernels against a device-to-device copy");
  auto o = std::make_shared<QuantOpts>();
  sub->add_option("--format", o->format, "fp8_per_tensor | fp8_block_1d | fp8_block_2d | mxfp8 | nvfp4_1d | nvfp4_2d")
      ->capture_default_str();
  sub->add_option("--usages", o->usages, "rowwise | columnwise | both")->capture_default_str();
  sub->add_option("--shape", o->shape, "ROWSxCOLS")->capture_default_str();
  sub->add_option("--dtype", o->dtype, "input dtype: f32 | bf16 | f16")->capture_default_str();
  sub->add_option("--data", o->data, "fp8 element type: e4m3 | e5m2")->capture_default_str();
  sub->add_option("--device", o->device, "auto | cpu | cuda[:N]")->capture_default_str();
  sub->add_flag("--rht", o->rht, "NVFP4 1D: random Hadamard transform on the column-wise copy");
  sub->add_flag("--sr", o->sr, "NVFP4: stochastic rounding");
  sub->add_flag("--no-pow2", o->no_pow2, "block formats: exact (not power-of-two) scales");
  sub->add_flag("--images", o->images, "also write each copy's bf16 GEMM image (Hopper's emulated MXFP8/NVFP4 GEMMs)");
  sub->add_flag("--json", o->json, "print the report as JSON");
  return {sub, [o] { return run_quant(*o); }};
}

}  // namespace te::cli
