// A captured CUDA graph: capture() records what `enqueue` puts on a stream (and on streams forked from it through
// events) without running it; launch() replays the whole recording as one launch. What is captured must be
// capturable: no host synchronisation and no allocation from the driver (engine/allocator.h's CudaMemoryPool keeps
// a capture's buffers private). The executor (graph/) and the model's forward replay (models/) both capture here.
#pragma once
#include <functional>

#include "engine/stream.h"

namespace te {

class CudaGraph {
 public:
  CudaGraph() = default;
  ~CudaGraph();
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  // Replaces any previous capture. If `enqueue` throws, the capture is abandoned (the stream stays usable) and the
  // exception propagates; a capture the driver rejects is a te::Error naming `what` and the likely cause.
  void capture(const Stream& stream, const std::function<void()>& enqueue, const char* what);
  void launch(const Stream& stream) const;
  bool captured() const { return exec_ != nullptr; }
  void reset();

 private:
  void* exec_ = nullptr;  // cudaGraphExec_t
};

}  // namespace te
