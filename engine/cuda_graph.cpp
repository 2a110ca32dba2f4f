#include "engine/cuda_graph.h"

#include "engine/error.h"
#include "te_config.h"
#if TE_WITH_CUDA
#include "engine/cuda_check.h"
#endif

namespace te {

CudaGraph::~CudaGraph() { reset(); }

#if TE_WITH_CUDA
void CudaGraph::reset() {
  if (exec_) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
  exec_ = nullptr;
}

void CudaGraph::capture(const Stream& stream, const std::function<void()>& enqueue, const char* what) {
  reset();
  auto cs = static_cast<cudaStream_t>(stream.handle());
  TE_CUDA_CHECK(cudaStreamBeginCapture(cs, cudaStreamCaptureModeThreadLocal));
  try {
    enqueue();
  } catch (...) {
    cudaGraph_t broken = nullptr;
    cudaStreamEndCapture(cs, &broken);  // leave the stream usable; the enqueue's error is the one to report
    if (broken) cudaGraphDestroy(broken);
    (void)cudaGetLastError();
    throw;
  }
  cudaGraph_t graph = nullptr;
  cudaError_t err = cudaStreamEndCapture(cs, &graph);
  TE_CHECK_HINT(err == cudaSuccess, "CUDA graph capture of " << what << " failed: " << cudaGetErrorString(err),
                "something in it is not capturable (a host sync or a driver allocation); run it without CUDA graphs");
  cudaGraphExec_t exec = nullptr;
  err = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  TE_CUDA_CHECK(err);
  exec_ = exec;
}

void CudaGraph::launch(const Stream& stream) const {
  TE_CHECK(exec_ != nullptr, "CudaGraph::launch before a successful capture");
  TE_CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), static_cast<cudaStream_t>(stream.handle())));
}
#else
void CudaGraph::reset() {}
void CudaGraph::capture(const Stream&, const std::function<void()>&, const char* what) {
  TE_THROW("CUDA graph capture of " << what << " in a build without CUDA", "rebuild with -Dcuda=enabled");
}
void CudaGraph::launch(const Stream&) const { TE_THROW("CudaGraph::launch in a build without CUDA", "rebuild with CUDA"); }
#endif

}  // namespace te
