#include "engine/device.h"

#include <algorithm>
#include <fstream>
#include <string>

#include "engine/error.h"
#include "te_config.h"
#if TE_WITH_CUDA
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <nccl.h>
#endif

namespace te {

std::string Device::str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }

bool built_with_cuda() { return TE_WITH_CUDA; }

namespace {
struct CudaProbe {
  int count = 0;
  std::string reason;
};
const CudaProbe& probe() {
  static const CudaProbe p = [] {
    CudaProbe r;
#if TE_WITH_CUDA
    cudaError_t err = cudaGetDeviceCount(&r.count);
    if (err != cudaSuccess) {
      r.count = 0;
      r.reason = std::string("no GPU (") + cudaGetErrorString(err) + ")";
      (void)cudaGetLastError();
    } else if (r.count == 0) {
      r.reason = "no GPU (no CUDA device visible)";
    }
#else
    r.reason = "no GPU (built without CUDA)";
#endif
    return r;
  }();
  return p;
}
}  // namespace

int cuda_device_count() { return probe().count; }

#if TE_WITH_CUDA
namespace {
// An attribute of the GPU current on the calling thread, cached per thread and device; 0 without a GPU.
template <cudaDeviceAttr kAttr>
int current_device_attribute() {
  thread_local int cached_device = -1, cached_value = 0;
  int device = 0;
  if (cuda_device_count() == 0 || cudaGetDevice(&device) != cudaSuccess) return 0;
  if (device != cached_device) {
    int value = 0;
    if (cudaDeviceGetAttribute(&value, kAttr, device) != cudaSuccess) return 0;
    cached_device = device, cached_value = value;
  }
  return cached_value;
}
}  // namespace
#endif

int current_sm_count() {
#if TE_WITH_CUDA
  return current_device_attribute<cudaDevAttrMultiProcessorCount>();
#else
  return 0;
#endif
}
int current_cc_major() {
#if TE_WITH_CUDA
  return current_device_attribute<cudaDevAttrComputeCapabilityMajor>();
#else
  return 0;
#endif
}
int64_t grid_stride_blocks(int64_t items, int threads, int per_sm) {
  const int64_t want = (items + threads - 1) / threads, cap = int64_t(current_sm_count()) * per_sm;
  return std::max<int64_t>(1, std::min(want, cap));
}

std::string no_gpu_reason() { return probe().reason; }

std::vector<GpuInfo> gpu_infos() {
  std::vector<GpuInfo> out;
#if TE_WITH_CUDA
  for (int i = 0; i < cuda_device_count(); ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
    out.push_back({i, p.name, p.major, p.minor, static_cast<int64_t>(p.totalGlobalMem), p.multiProcessorCount});
  }
#endif
  return out;
}

Device parse_device(std::string_view spec) {
  if (spec == "auto") return cuda_device_count() > 0 ? Device::cuda(0) : Device::cpu();
  if (spec == "cpu") return Device::cpu();
  if (spec == "cuda" || spec.starts_with("cuda:")) {
    int index = 0;
    if (spec.size() > 5) {
      std::string n(spec.substr(5));
      bool digits = !n.empty() && n.find_first_not_of("0123456789") == std::string::npos && n.size() < 6;
      if (!digits) TE_INPUT_ERROR("device '" << spec << "' is not valid", "use auto, cpu, cuda or cuda:N");
      index = std::stoi(n);
    }
    if (index >= cuda_device_count())
      TE_INPUT_ERROR("device '" << spec << "' is not available: "
                                << (cuda_device_count() ? std::to_string(cuda_device_count()) + " GPU(s) visible"
                                                        : no_gpu_reason()),
                     "use device: auto (falls back to the CPU) or cpu");
    return Device::cuda(index);
  }
  TE_INPUT_ERROR("device '" << spec << "' is not valid", "use auto, cpu, cuda or cuda:N");
}

int64_t available_memory_bytes(Device d) {
  if (d.is_cpu()) {
    std::ifstream f("/proc/meminfo");
    std::string key;
    int64_t kib = 0;
    std::string unit;
    while (f >> key >> kib >> unit)
      if (key == "MemAvailable:") return kib * 1024;
    return -1;
  }
#if TE_WITH_CUDA
  if (d.index < cuda_device_count()) {
    int current = 0;
    cudaGetDevice(&current);
    size_t free_b = 0, total_b = 0;
    const bool ok = cudaSetDevice(d.index) == cudaSuccess && cudaMemGetInfo(&free_b, &total_b) == cudaSuccess;
    cudaSetDevice(current);
    if (ok) return static_cast<int64_t>(free_b);
  }
#endif
  return -1;
}

void set_current_device(Device d) {
#if TE_WITH_CUDA
  if (d.is_cuda()) {
    cudaError_t err = cudaSetDevice(d.index);
    TE_CHECK(err == cudaSuccess, "cudaSetDevice(" << d.index << ") failed: " << cudaGetErrorString(err));
  }
#else
  (void)d;
#endif
}

std::string current_device_name() {
#if TE_WITH_CUDA
  if (cuda_device_count() > 0) {
    int dev = 0;
    if (cudaGetDevice(&dev) == cudaSuccess) return "cuda:" + std::to_string(dev);
  }
#endif
  return "cpu";
}

RuntimeVersions runtime_versions() {
  RuntimeVersions v;
#if TE_WITH_CUDA
  cudaRuntimeGetVersion(&v.cuda_runtime);
  if (cudaDriverGetVersion(&v.cuda_driver) != cudaSuccess) v.cuda_driver = 0;
  v.cublaslt = static_cast<int>(cublasLtGetVersion());
  if (ncclGetVersion(&v.nccl) != ncclSuccess) v.nccl = 0;
  v.cudnn = static_cast<int>(cudnnGetVersion());
  (void)cudaGetLastError();
#endif
  return v;
}
}  // namespace te
