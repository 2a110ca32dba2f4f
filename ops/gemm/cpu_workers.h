// A small pool of CPU threads for the row-independent GEMM (row_gemm.h): run(n, fn) calls fn(0) … fn(n-1) spread
// over the pool and the calling thread, and returns when all are done. Several threads may call run() at once (the
// tensor-parallel ranks do); their tasks share the pool. Threads: hardware_concurrency - 1, started on first use.
#pragma once
#include <cstdint>
#include <functional>

namespace te::detail {

void run_cpu_tasks(int64_t n, const std::function<void(int64_t)>& fn);
int cpu_workers();  // threads that run tasks, the caller included

}  // namespace te::detail
