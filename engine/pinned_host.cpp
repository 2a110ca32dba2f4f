#include "engine/pinned_host.h"

#include <algorithm>
#include <cstdlib>

#include "engine/error.h"
#include "te_config.h"
#if TE_WITH_CUDA
#include <cuda_runtime.h>

#include "engine/cuda_check.h"
#endif

namespace te {

PinnedHostBuffer::~PinnedHostBuffer() { release(); }

void PinnedHostBuffer::release() {
  if (!data_) return;
#if TE_WITH_CUDA
  if (page_locked_) {
    cudaFreeHost(data_);  // never throws from a destructor; an error here leaves nothing to recover
    data_ = nullptr;
    bytes_ = 0;
    return;
  }
#endif
  std::free(data_);
  data_ = nullptr;
  bytes_ = 0;
}

Tensor PinnedHostBuffer::view(const Shape& shape, DType dtype) {
  const size_t need = static_cast<size_t>(std::max<int64_t>(dtype_storage_bytes(dtype, shape_numel(shape)), 1));
  if (need > bytes_) {
    release();
#if TE_WITH_CUDA
    if (page_locked_) {
      TE_CUDA_CHECK(cudaHostAlloc(&data_, need, cudaHostAllocDefault));
      bytes_ = need;
    }
#endif
    if (!data_) {
      data_ = std::malloc(need);
      TE_CHECK_HINT(data_ != nullptr, "host staging buffer: no memory for " << need << " bytes",
                    "use fewer tokens per call");
      bytes_ = need;
    }
  }
  return Tensor::borrow(data_, shape, dtype, Device::cpu());
}

}  // namespace te
