#include "graph/executor.h"

#include <array>
#include <chrono>

#include "engine/cuda_graph.h"
#include "engine/error.h"
#include "engine/memory_trace.h"
#include "graph/host_stream.h"
#include "te_config.h"
#if TE_WITH_CUDA
#include "engine/cuda_check.h"
#endif

namespace te {

struct Executor::Impl {
  Device device;
  ExecOptions opt;
  Tensor arena;                    // [arena_bytes] u8: every intermediate value lives at its planned offset
  std::vector<Tensor> values;      // by value id: arena view or bound tensor (undefined until bound)
  std::vector<std::vector<Tensor>> node_in, node_out;  // by node id
  std::vector<std::vector<int>> waits, records;        // by step: planned event indices
  std::array<Stream, kNumStreamClasses> streams;       // CPU default streams outside cuda mode
  // host_threads mode
  std::array<std::unique_ptr<HostStream>, kNumStreamClasses> host;
  std::vector<HostEvent> host_events;
  HostEvent host_fork;
  // cuda mode
  std::vector<Event> events;
  Event fork;
  std::array<Event, kNumStreamClasses - 1> join;  // one per stream besides compute
  CudaGraph graph;                  // cuda_graph: the captured step
  std::vector<void*> captured_ptrs;  // the bound tensors' addresses it was captured with
  // profile
  std::vector<Event> step_begin, step_end;  // cuda mode, by step
  std::vector<double> host_ms;              // CPU modes, by step

  void launch(const Graph& g, int node_id, const Stream& stream) {
    const Node& n = g.node(node_id);
    KernelCall call{n, node_in[static_cast<size_t>(node_id)], node_out[static_cast<size_t>(node_id)], stream, opt.env};
    MemoryScope scope(n.name);  // what the node allocates is its own in a memory trace
    n.op->run(call);
    if (opt.env.after_node) opt.env.after_node(node_id, stream);
  }
  // launch() of plan step s, timed when profiling (host clock on the CPU: kernels there finish before returning).
  void launch_step(const Graph& g, size_t s, int node_id, const Stream& stream) {
    if (!opt.profile) return launch(g, node_id, stream);
    if (opt.mode == ExecMode::cuda) {
      step_begin[s].record(stream);
      launch(g, node_id, stream);
      step_end[s].record(stream);
      return;
    }
    const auto t0 = std::chrono::steady_clock::now();
    launch(g, node_id, stream);
    host_ms[s] = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }
};

Executor::Executor(const Graph& graph, Plan plan, Device device, ExecOptions options)
    : g_(graph), plan_(std::move(plan)), impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.device = device;
  m.opt = std::move(options);
  TE_CHECK(static_cast<int>(plan_.buffers.size()) == g_.num_values() &&
               static_cast<int>(plan_.steps.size()) == g_.num_nodes(),
           "the plan was made for another graph (" << plan_.steps.size() << " steps, " << g_.num_nodes() << " nodes)");
  TE_CHECK_HINT((m.opt.mode == ExecMode::cuda) == device.is_cuda(),
                "executor mode and device disagree: device " << device.str() << " needs "
                                                             << (device.is_cuda() ? "ExecMode::cuda" : "a CPU mode"),
                "use ExecMode::cuda with a CUDA device, inline_cpu or host_threads with the CPU");
  for (const Node& n : g_.nodes())
    TE_CHECK_HINT(n.op->run != nullptr, g_.node_label(n.id) << ": no kernel is bound to op '" << n.op->name << "'",
                  "set OpDef::run in the op's table row");

  if (device.is_cuda()) {
    set_current_device(device);
    // Side work (StreamClass::side) runs below the other two: it only takes SMs their kernels leave idle.
    for (int c = 0; c < kNumStreamClasses; ++c)
      m.streams[static_cast<size_t>(c)] = Stream::create(
          device, c == static_cast<int>(StreamClass::side) ? StreamPriority::normal : StreamPriority::high);
    if (m.opt.compute_stream) m.streams[0] = *m.opt.compute_stream;
  }
  m.arena = Tensor::empty({std::max<int64_t>(plan_.arena_bytes, 1)}, DType::u8, device, m.streams[0]);
  char* base = static_cast<char*>(m.arena.data_ptr());
  m.values.resize(static_cast<size_t>(g_.num_values()));
  for (const Value& v : g_.values()) {
    const PlannedBuffer& b = plan_.buffers[static_cast<size_t>(v.id)];
    if (v.role != ValueRole::intermediate || b.held_by_binding) continue;  // bound, or the binding keeps it
    TE_CHECK(b.offset >= 0 && b.offset + b.bytes <= plan_.arena_bytes,
             g_.value_label(v.id) << " has no arena slot in the plan (offset " << b.offset << ")");
    m.values[static_cast<size_t>(v.id)] =
        v.type.is_quantized() ? Tensor::borrow(base + b.offset, {b.bytes}, DType::u8, device)
                              : Tensor::borrow(base + b.offset, v.type.shape, v.type.dtype, device);
  }
  m.node_in.resize(static_cast<size_t>(g_.num_nodes()));
  m.node_out.resize(static_cast<size_t>(g_.num_nodes()));
  for (const Node& n : g_.nodes())
    for (int v : n.outputs) m.node_out[static_cast<size_t>(n.id)].push_back(m.values[static_cast<size_t>(v)]);

  std::vector<int> pos(static_cast<size_t>(g_.num_nodes()));
  for (size_t s = 0; s < plan_.steps.size(); ++s) pos[static_cast<size_t>(plan_.steps[s].node)] = static_cast<int>(s);
  m.waits.resize(plan_.steps.size());
  m.records.resize(plan_.steps.size());
  for (size_t e = 0; e < plan_.events.size(); ++e) {
    const PlannedEvent& pe = plan_.events[e];
    m.records[static_cast<size_t>(pos[static_cast<size_t>(pe.producer)])].push_back(static_cast<int>(e));
    m.waits[static_cast<size_t>(pos[static_cast<size_t>(pe.consumer)])].push_back(static_cast<int>(e));
  }
  if (m.opt.profile) {
    m.opt.cuda_graph = false;
    m.host_ms.assign(plan_.steps.size(), 0.0);
    if (m.opt.mode == ExecMode::cuda)
      for (size_t s = 0; s < plan_.steps.size(); ++s) {
        m.step_begin.push_back(Event::create(device, true));
        m.step_end.push_back(Event::create(device, true));
      }
  }
  if (m.opt.mode == ExecMode::host_threads) {
    for (auto& h : m.host) h = std::make_unique<HostStream>();
    m.host_events.resize(plan_.events.size());
  } else if (m.opt.mode == ExecMode::cuda) {
    for (size_t e = 0; e < plan_.events.size(); ++e) m.events.push_back(Event::create(device));
    m.fork = Event::create(device);
    for (auto& j : m.join) j = Event::create(device);
  }
}

Executor::~Executor() {
  try {
    synchronize();
  } catch (...) {  // a destructor must not throw; the error was the caller's to collect from run()/synchronize()
  }
}

void Executor::bind(int value, const Tensor& t) {
  const Value& v = g_.value(value);
  TE_CHECK_HINT(v.role != ValueRole::intermediate, "bind: " << g_.value_label(value) << " is produced by "
                                                            << g_.node_label(v.producer) << ", not bound",
                "bind only inputs and params");
  TE_CHECK_HINT(!v.type.is_quantized(), "bind: " << g_.value_label(value) << " is quantized",
                "bind the high-precision tensor and quantize inside the graph");
  TE_CHECK_HINT(t.defined() && t.shape() == v.type.shape && t.dtype() == v.type.dtype && t.device() == impl_->device,
                "bind: " << g_.value_label(value) << " got " << (t.defined() ? t.str() : std::string("undefined")),
                "bind a tensor of the value's shape and dtype on " << impl_->device.str());
  TE_CHECK_HINT(t.is_contiguous(), "bind: " << g_.value_label(value) << " got a non-contiguous tensor " << t.str(),
                "pass tensor.contiguous()");
  impl_->values[static_cast<size_t>(value)] = t;
}

Tensor Executor::tensor(int value) const {
  (void)g_.value(value);  // range check with a clear message
  return impl_->values[static_cast<size_t>(value)];
}

std::vector<double> Executor::step_ms() const {
  const Impl& m = *impl_;
  TE_CHECK_HINT(m.opt.profile, "step_ms() without profiling", "set ExecOptions::profile");
  if (m.opt.mode != ExecMode::cuda) return m.host_ms;
  std::vector<double> ms(plan_.steps.size());
  for (size_t s = 0; s < ms.size(); ++s) ms[s] = m.step_begin[s].elapsed_ms(m.step_end[s]);
  return ms;
}

const Stream& Executor::compute_stream() const { return impl_->streams[0]; }
const Stream& Executor::comm_stream() const { return impl_->streams[1]; }

bool Executor::graph_captured() const { return impl_->graph.captured(); }

void Executor::synchronize() {
  Impl& m = *impl_;
  if (m.opt.mode == ExecMode::host_threads) {
    // Every stream drains before any error is rethrown, so no task outlives the call.
    std::exception_ptr err;
    for (auto& h : m.host) {
      try {
        h->synchronize();
      } catch (...) {
        if (!err) err = std::current_exception();
      }
    }
    if (err) std::rethrow_exception(err);
  } else if (m.opt.mode == ExecMode::cuda) {
    for (const auto& s : m.streams) s.synchronize();
  }
}

void Executor::run() {
  Impl& m = *impl_;
  for (const Value& v : g_.values())
    TE_CHECK_HINT(v.role == ValueRole::intermediate || v.consumers.empty() ||
                      plan_.buffers[static_cast<size_t>(v.id)].held_by_binding ||
                      m.values[static_cast<size_t>(v.id)].defined(),
                  "run: " << g_.value_label(v.id) << " is not bound", "call Executor::bind for every input and param");
  for (const Node& n : g_.nodes()) {
    auto& in = m.node_in[static_cast<size_t>(n.id)];
    in.clear();
    for (int v : n.inputs) in.push_back(m.values[static_cast<size_t>(v)]);
  }
  const auto& steps = plan_.steps;

  if (m.opt.mode == ExecMode::inline_cpu) {
    for (size_t s = 0; s < steps.size(); ++s) m.launch_step(g_, s, steps[s].node, m.streams[0]);
    return;
  }

  if (m.opt.mode == ExecMode::host_threads) {
    HostStream& compute = *m.host[0];
    m.host_fork.record(compute);
    for (size_t c = 1; c < m.host.size(); ++c) m.host_fork.wait(*m.host[c]);
    for (size_t s = 0; s < steps.size(); ++s) {
      HostStream& lane = *m.host[static_cast<size_t>(steps[s].stream)];
      for (int e : m.waits[s]) m.host_events[static_cast<size_t>(e)].wait(lane);
      const int node = steps[s].node;
      lane.submit([this, s, node] { impl_->launch_step(g_, s, node, impl_->streams[0]); });
      for (int e : m.records[s]) m.host_events[static_cast<size_t>(e)].record(lane);
    }
    synchronize();  // every lane drains: no join event needed
    return;
  }

#if TE_WITH_CUDA
  set_current_device(m.device);
  auto enqueue = [&] {
    const Stream& compute = m.streams[0];
    m.fork.record(compute);
    for (size_t c = 1; c < m.streams.size(); ++c) m.fork.wait(m.streams[c]);
    for (size_t s = 0; s < steps.size(); ++s) {
      const Stream& lane = m.streams[static_cast<size_t>(steps[s].stream)];
      for (int e : m.waits[s]) m.events[static_cast<size_t>(e)].wait(lane);
      m.launch_step(g_, s, steps[s].node, lane);
      for (int e : m.records[s]) m.events[static_cast<size_t>(e)].record(lane);
    }
    // The other streams join the compute stream (one event each: a capture must end with every fork joined).
    for (size_t c = 1; c < m.streams.size(); ++c) {
      m.join[c - 1].record(m.streams[c]);
      m.join[c - 1].wait(compute);
    }
  };
  if (!m.opt.cuda_graph) {
    enqueue();
    return;
  }
  std::vector<void*> ptrs;
  for (const Value& v : g_.values())
    if (v.role != ValueRole::intermediate && m.values[static_cast<size_t>(v.id)].defined())
      ptrs.push_back(m.values[static_cast<size_t>(v.id)].data_ptr());
  if (!m.graph.captured() || ptrs != m.captured_ptrs) {
    m.graph.capture(m.streams[0], enqueue, "the executor's step (set ExecOptions::cuda_graph = false to run eagerly)");
    m.captured_ptrs = std::move(ptrs);
  }
  m.graph.launch(m.streams[0]);
#else
  TE_THROW("ExecMode::cuda in a build without CUDA", "rebuild with -Dcuda=enabled or use a CPU mode");
#endif
}

}  // namespace te
