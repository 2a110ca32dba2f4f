// Thin wrappers over CUDA streams and events. On the CPU both are ordered no-ops (work runs inline, in order).
// The scheduler in graph/ owns them; every launcher takes its stream as the last argument.
#pragma once
#include <memory>

#include "engine/device.h"

namespace te {

// A CUDA stream's scheduling priority: when SMs free up, blocks of waiting kernels on `high` streams are placed
// before those on `normal` ones (CUDA's default, which is also its lowest). The engine runs its compute and
// communication streams high, so work it puts on a normal stream only fills SMs they leave idle.
enum class StreamPriority : uint8_t { normal, high };

class Stream {
 public:
  Stream() = default;  // CPU, or the CUDA legacy default stream when used with a CUDA device
  // A new non-blocking CUDA stream (or a CPU stream, where the priority means nothing).
  static Stream create(Device device, StreamPriority priority = StreamPriority::normal);
  // Someone else's cudaStream_t (nullptr: the legacy default stream), not owned: it must outlive the Stream.
  static Stream borrow(Device device, void* handle);
  Device device() const { return device_; }
  void* handle() const { return handle_.get(); }  // cudaStream_t, nullptr for CPU/default
  void synchronize() const;

 private:
  Device device_;
  std::shared_ptr<void> handle_;
};

class Event {
 public:
  Event() = default;
  static Event create(Device device, bool timing = false);
  void record(const Stream& stream);
  void wait(const Stream& stream) const;  // `stream` waits for this event
  void synchronize() const;
  bool query() const;  // true when complete
  float elapsed_ms(const Event& end) const;  // needs timing = true on both
  void* handle() const { return handle_.get(); }

 private:
  Device device_;
  std::shared_ptr<void> handle_;
};

}  // namespace te
