// A reusable host staging buffer for copies between the host and a GPU. Page-locked (cudaHostAlloc) when it serves
// a CUDA device, so the DMA engine reads and writes it directly instead of bouncing through the driver's own
// staging; plain host memory otherwise. Grows to the largest request and keeps it: one allocation serves every step
// of the same shape. Not thread-safe; one owner uses it between synchronisations.
#pragma once
#include <cstddef>

#include "engine/tensor.h"

namespace te {

class PinnedHostBuffer {
 public:
  explicit PinnedHostBuffer(bool page_locked) : page_locked_(page_locked) {}
  ~PinnedHostBuffer();
  PinnedHostBuffer(const PinnedHostBuffer&) = delete;
  PinnedHostBuffer& operator=(const PinnedHostBuffer&) = delete;

  // A contiguous CPU tensor over the buffer, valid until the next view() or the buffer's end.
  Tensor view(const Shape& shape, DType dtype);
  size_t capacity() const { return bytes_; }
  bool page_locked() const { return page_locked_; }

 private:
  void release();
  bool page_locked_;
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// dst ← src, contiguous tensors of the same bytes, enqueued on `stream` without waiting, where one side is a view of a
// page-locked buffer and the other on the GPU (a copy a CUDA graph can capture): the host side is read or written
// when the stream reaches the copy, so keep it alive and untouched until then. Between CPU tensors, a memcpy now.
void copy_enqueued(Tensor& dst, const Tensor& src, const Stream& stream);

}  // namespace te
