#include "engine/stream.h"

#include "te_config.h"
#if TE_WITH_CUDA
#include "engine/cuda_check.h"
#endif
#include "engine/error.h"

namespace te {

Stream Stream::create(Device device, StreamPriority priority) {
  (void)priority;  // CPU streams have none
  Stream s;
  s.device_ = device;
#if TE_WITH_CUDA
  if (device.is_cuda()) {
    set_current_device(device);
    int least = 0, greatest = 0;
    TE_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    cudaStream_t st;
    TE_CUDA_CHECK(
        cudaStreamCreateWithPriority(&st, cudaStreamNonBlocking, priority == StreamPriority::high ? greatest : least));
    s.handle_ = std::shared_ptr<void>(st, [](void* p) { cudaStreamDestroy(static_cast<cudaStream_t>(p)); });
  }
#endif
  return s;
}

Stream Stream::borrow(Device device, void* handle) {
  Stream s;
  s.device_ = device;
  if (handle) s.handle_ = std::shared_ptr<void>(handle, [](void*) {});
  return s;
}

void Stream::synchronize() const {
#if TE_WITH_CUDA
  if (device_.is_cuda()) TE_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(handle_.get())));
#endif
}

Event Event::create(Device device, bool timing) {
  Event e;
  e.device_ = device;
#if TE_WITH_CUDA
  if (device.is_cuda()) {
    set_current_device(device);
    cudaEvent_t ev;
    TE_CUDA_CHECK(cudaEventCreateWithFlags(&ev, timing ? cudaEventDefault : cudaEventDisableTiming));
    e.handle_ = std::shared_ptr<void>(ev, [](void* p) { cudaEventDestroy(static_cast<cudaEvent_t>(p)); });
  }
#else
  (void)timing;
#endif
  return e;
}

void Event::record(const Stream& stream) {
#if TE_WITH_CUDA
  if (handle_) TE_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(handle_.get()),
                                             static_cast<cudaStream_t>(stream.handle())));
#else
  (void)stream;
#endif
}

void Event::wait(const Stream& stream) const {
#if TE_WITH_CUDA
  if (handle_) TE_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream.handle()),
                                                 static_cast<cudaEvent_t>(handle_.get()), 0));
#else
  (void)stream;
#endif
}

void Event::synchronize() const {
#if TE_WITH_CUDA
  if (handle_) TE_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(handle_.get())));
#endif
}

bool Event::query() const {
#if TE_WITH_CUDA
  if (handle_) {
    cudaError_t err = cudaEventQuery(static_cast<cudaEvent_t>(handle_.get()));
    if (err == cudaErrorNotReady) return false;
    TE_CUDA_CHECK(err);
  }
#endif
  return true;
}

float Event::elapsed_ms(const Event& end) const {
  float ms = 0.f;
#if TE_WITH_CUDA
  TE_CHECK(handle_ && end.handle_, "elapsed_ms needs two CUDA events created with timing = true");
  TE_CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(handle_.get()),
                                     static_cast<cudaEvent_t>(end.handle_.get())));
#else
  (void)end;
#endif
  return ms;
}
}  // namespace te
