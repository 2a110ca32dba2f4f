// Devices: `cpu` always exists; `cuda:N` exists when built with CUDA *and* a GPU is present at run time.
// A missing driver or GPU is an ordinary "no GPU" answer, never a crash.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace te {

enum class DeviceKind : uint8_t { cpu, cuda };

struct Device {
  DeviceKind kind = DeviceKind::cpu;
  int index = 0;

  static Device cpu() { return {DeviceKind::cpu, 0}; }
  static Device cuda(int index = 0) { return {DeviceKind::cuda, index}; }
  bool is_cpu() const { return kind == DeviceKind::cpu; }
  bool is_cuda() const { return kind == DeviceKind::cuda; }
  std::string str() const;
  friend bool operator==(const Device&, const Device&) = default;
};

struct GpuInfo {
  int index;
  std::string name;
  int cc_major, cc_minor;
  int64_t total_bytes;
  int sm_count;
};

bool built_with_cuda();
// Number of usable GPUs (0 when the build has no CUDA, the driver is missing, or no GPU is visible).
int cuda_device_count();
// Why there is no GPU ("built without CUDA", "no CUDA driver", ...); empty when one is present.
std::string no_gpu_reason();
std::vector<GpuInfo> gpu_infos();
// "auto" | "cpu" | "cuda" | "cuda:N". auto → cuda:0 when a GPU is present, else cpu. Throws InputError otherwise.
Device parse_device(std::string_view spec);
// Bytes a new allocation can still get on `d`: MemAvailable of /proc/meminfo for the CPU, the driver's free memory
// for a GPU; -1 where it cannot be read (the caller then skips its check).
int64_t available_memory_bytes(Device d);
// Makes `d` current for the calling thread (cudaSetDevice); no-op for cpu.
void set_current_device(Device d);
// Multiprocessors of the GPU current on the calling thread (0 without one), for sizing grid-stride kernels' grids
// to the device instead of to one GPU model. Cheap enough to call per launch (cached per thread and device).
int current_sm_count();
// Compute capability major of the GPU current on the calling thread (0 without one); cached like current_sm_count.
int current_cc_major();
// Blocks for a grid-stride kernel over `items` at `threads` per block: enough for every item, at most `per_sm` per
// multiprocessor of the current GPU, at least one.
int64_t grid_stride_blocks(int64_t items, int threads, int per_sm);
// "cuda:0" / "cpu" for error messages: the device current on this thread.
std::string current_device_name();

struct RuntimeVersions {
  int cuda_runtime = 0, cuda_driver = 0;
  int cublaslt = 0;
  int nccl = 0;
  int cudnn = 0;
};
RuntimeVersions runtime_versions();

}  // namespace te
