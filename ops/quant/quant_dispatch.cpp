// The dispatch table: one row per (format, device kind). Every format shares one CPU path (quantize_cpu.cpp, which
// hands what it does not speed up to the reference) and one set of CUDA kernels today (the format is a kernel
// parameter); a specialised kernel replaces one row.
#include <array>

#include "engine/error.h"
#include "ops/quant/quant_kernels.h"
#include "te_config.h"

namespace te {
namespace {

constexpr QuantKernelEntry cpu_row(QuantFormat f) {
  return {f, DeviceKind::cpu, quant_amax_cpu, quantize_cpu, dequantize_ref, fold_max_ref, delayed_update_ref};
}
#if TE_WITH_CUDA
constexpr QuantKernelEntry cuda_row(QuantFormat f) {
  return {f, DeviceKind::cuda, quant_amax_cuda, quantize_cuda, dequantize_cuda, fold_max_cuda, delayed_update_cuda};
}
#endif

constexpr auto kTable = [] {
  std::array<QuantKernelEntry, kQuantFormats.size() * 2> t{};
  size_t n = 0;
  for (const auto& info : kQuantFormats) {
    t[n++] = cpu_row(info.format);
#if TE_WITH_CUDA
    t[n++] = cuda_row(info.format);
#else
    t[n++] = {info.format, DeviceKind::cuda, nullptr, nullptr, nullptr, nullptr, nullptr};
#endif
  }
  return t;
}();

}  // namespace

const QuantKernelEntry& quant_kernels(QuantFormat format, DeviceKind device) {
  for (const auto& e : kTable)
    if (e.format == format && e.device == device && e.cast) return e;
  TE_THROW("no quantize kernels for format " << quant_format_name(format) << " on "
                                              << (device == DeviceKind::cpu ? "cpu" : "cuda"),
           "this build has no CUDA: quantize on the CPU, or rebuild with -Dcuda=enabled");
}

}  // namespace te
