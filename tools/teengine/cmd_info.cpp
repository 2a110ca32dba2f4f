// teengine info: version, build options, runtime library versions, visible GPUs (or "no GPU").
#include <cstdio>

#include "engine/device.h"
#include "te_config.h"
#include "tools/teengine/commands.h"

namespace te::cli {
namespace {
std::string version_str(int v, int major_div, int minor_div, int minor_mod) {
  if (v <= 0) return "n/a";
  return std::to_string(v / major_div) + "." + std::to_string((v / minor_div) % minor_mod) + " (" +
         std::to_string(v) + ")";
}
}  // namespace

Command add_info_command(CLI::App& app) {
  CLI::App* sub = app.add_subcommand("info", "Show version, build options, library versions and visible GPUs");
  return {sub, [] {
    std::printf("teengine %s\n", TE_VERSION);
    std::printf("build: %s, CUDA %s, arch %s\n", TE_BUILD_TYPE, built_with_cuda() ? "on" : "off", TE_CUDA_ARCH);
    if (built_with_cuda()) {
      RuntimeVersions v = runtime_versions();
      std::printf("CUDA runtime: %s\n", version_str(v.cuda_runtime, 1000, 10, 100).c_str());
      std::printf("CUDA driver:  %s\n", version_str(v.cuda_driver, 1000, 10, 100).c_str());
      std::printf("cuBLASLt:     %s\n", version_str(v.cublaslt, 10000, 100, 100).c_str());
      std::printf("NCCL:         %s\n", version_str(v.nccl, 10000, 100, 100).c_str());
      std::printf("cuDNN:        %s\n", version_str(v.cudnn, 10000, 100, 100).c_str());
    }
    auto gpus = gpu_infos();
    if (gpus.empty()) {
      std::printf("GPUs: %s; running on the CPU\n", no_gpu_reason().c_str());
    } else {
      for (const auto& g : gpus)
        std::printf("GPU %d: %s, compute capability %d.%d, %.1f GiB, %d SMs\n", g.index, g.name.c_str(), g.cc_major,
                    g.cc_minor, static_cast<double>(g.total_bytes) / (1 << 30), g.sm_count);
    }
    return 0;
  }};
}
}  // namespace te::cli
