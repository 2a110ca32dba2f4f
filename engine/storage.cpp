#include "engine/storage.h"

#include "engine/allocator.h"

namespace te {
std::shared_ptr<Storage> Storage::allocate(size_t bytes, Device device, const Stream& stream) {
  void* p = device_allocate(device, bytes, stream);
  return std::shared_ptr<Storage>(new Storage(p, bytes, device, stream, true));
}
std::shared_ptr<Storage> Storage::borrow(void* ptr, size_t bytes, Device device) {
  return std::shared_ptr<Storage>(new Storage(ptr, bytes, device, Stream(), false));
}
Storage::~Storage() {
  if (owned_) device_free(device_, ptr_, bytes_, stream_);
}
}  // namespace te
