#include "engine/pinned_host.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

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

void copy_enqueued(Tensor& dst, const Tensor& src, const Stream& stream) {
  TE_CHECK(dst.is_contiguous() && src.is_contiguous() && dst.nbytes() == src.nbytes(),
           "copy_enqueued " << src.str() << " into " << dst.str() << ": contiguous tensors of the same bytes");
  if (dst.device().is_cpu() && src.device().is_cpu()) {
    std::memcpy(dst.data_ptr(), src.data_ptr(), static_cast<size_t>(dst.nbytes()));
    return;
  }
#if TE_WITH_CUDA
  TE_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), static_cast<size_t>(dst.nbytes()), cudaMemcpyDefault,
                                static_cast<cudaStream_t>(stream.handle())));
#else
  (void)stream;
  TE_THROW("copy between " << src.device().str() << " and " << dst.device().str() << " in a build without CUDA",
           "use device: cpu");
#endif
}

}  // namespace te
