// Storage owns one allocation on one device; tensors are cheap views that share it.
#pragma once
#include <cstddef>
#include <memory>

#include "engine/device.h"
#include "engine/stream.h"

namespace te {

class Storage {
 public:
  // Allocates `bytes` on `device` (CUDA: from the caching allocator, reusable in order on `stream`).
  static std::shared_ptr<Storage> allocate(size_t bytes, Device device, const Stream& stream = Stream());
  // Wraps memory the caller owns (not freed here); used by the embedding API and by tests.
  static std::shared_ptr<Storage> borrow(void* ptr, size_t bytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }

 private:
  Storage(void* ptr, size_t bytes, Device device, Stream stream, bool owned)
      : ptr_(ptr), bytes_(bytes), device_(device), stream_(std::move(stream)), owned_(owned) {}
  void* ptr_;
  size_t bytes_;
  Device device_;
  Stream stream_;
  bool owned_;
};

}  // namespace te
