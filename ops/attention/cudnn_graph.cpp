// cuDNN 9 backend graph API wrappers (see cudnn_graph.h).
#include "ops/attention/cudnn_graph.h"

#include <sstream>

#include "engine/device.h"
#include "engine/error.h"

namespace te::cudnn_graph {

void throw_cudnn(cudnnStatus_t st, const char* call, const char* file, int line) {
  char last[1024] = {};
  cudnnGetLastErrorString(last, sizeof(last));  // what cuDNN logged about this failure, often the real reason
  std::string msg = std::string("cuDNN error: ") + cudnnGetErrorString(st);
  if (last[0] != '\0') msg += std::string(" (") + last + ")";
  throw Error(msg, call, file, line, current_device_name(),
              "CUDNN_LOGERR_DBG=1 CUDNN_LOGDEST_DBG=stderr prints cuDNN's log; TEENGINE_ATTENTION_KERNELS=own runs "
              "the engine's own attention kernels instead");
}

Descriptor::Descriptor(cudnnBackendDescriptorType_t type) { TE_CUDNN_CHECK(cudnnBackendCreateDescriptor(type, &d_)); }

Descriptor::~Descriptor() {
  if (d_) cudnnBackendDestroyDescriptor(d_);
}

Descriptor& Descriptor::operator=(Descriptor&& o) noexcept {
  if (this != &o) {
    if (d_) cudnnBackendDestroyDescriptor(d_);
    d_ = std::exchange(o.d_, nullptr);
  }
  return *this;
}

void Descriptor::set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count,
                     const void* values) {
  TE_CUDNN_CHECK(cudnnBackendSetAttribute(d_, name, type, count, values));
}

void Descriptor::finalize() { TE_CUDNN_CHECK(cudnnBackendFinalize(d_)); }

int64_t OpGraph::add_tensor(int64_t uid, cudnnDataType_t type, const std::vector<int64_t>& dims,
                            const std::vector<int64_t>& strides, bool is_virtual, bool by_value,
                            cudnnBackendTensorReordering_t reordering) {
  Descriptor t(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  t.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, type);
  t.set_ints(CUDNN_ATTR_TENSOR_DIMENSIONS, dims);
  t.set_ints(CUDNN_ATTR_TENSOR_STRIDES, strides);
  t.set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, uid);
  t.set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, kAlignment);
  t.set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, is_virtual);
  if (by_value) t.set(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, true);
  if (reordering != CUDNN_TENSOR_REORDERING_NONE)
    t.set(CUDNN_ATTR_TENSOR_REORDERING_MODE, CUDNN_TYPE_TENSOR_REORDERING_MODE, reordering);
  t.finalize();
  tensors_.emplace(uid, std::move(t));
  shapes_[uid] = {dims, strides};
  return uid;
}

int64_t OpGraph::tensor(int64_t uid, cudnnDataType_t type, const std::vector<int64_t>& dims,
                        const std::vector<int64_t>& strides, cudnnBackendTensorReordering_t reordering) {
  return add_tensor(uid, type, dims, strides, false, false, reordering);
}

int64_t OpGraph::virtual_tensor(cudnnDataType_t type, const std::vector<int64_t>& dims,
                                const std::vector<int64_t>& strides) {
  return add_tensor(next_virtual_++, type, dims, strides, true, false);
}

int64_t OpGraph::scalar(int64_t uid, float value) {
  scalars_[uid] = value;
  return add_tensor(uid, CUDNN_DATA_FLOAT, {1, 1, 1, 1}, {1, 1, 1, 1}, false, true);
}

void OpGraph::pointwise(cudnnPointwiseMode_t mode, int64_t x, int64_t b, int64_t t, int64_t y, cudnnDataType_t math,
                        int64_t axis) {
  Descriptor pw(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  pw.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, mode);
  pw.set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, math);
  if (axis >= 0) pw.set(CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, axis);
  pw.finalize();
  Descriptor op(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw);
  op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, desc(x));
  if (b >= 0) op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, desc(b));
  if (t >= 0) op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_TDESC, desc(t));
  op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, desc(y));
  op.finalize();
  settings_.push_back(std::move(pw));
  ops_.push_back(std::move(op));
}

void OpGraph::matmul(int64_t a, int64_t b, int64_t c) {
  Descriptor mm(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
  mm.set(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, CUDNN_DATA_FLOAT);
  mm.finalize();
  Descriptor op(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
  op.set_desc(CUDNN_ATTR_OPERATION_MATMUL_ADESC, desc(a));
  op.set_desc(CUDNN_ATTR_OPERATION_MATMUL_BDESC, desc(b));
  op.set_desc(CUDNN_ATTR_OPERATION_MATMUL_CDESC, desc(c));
  op.set_desc(CUDNN_ATTR_OPERATION_MATMUL_DESC, mm);
  op.finalize();
  settings_.push_back(std::move(mm));
  ops_.push_back(std::move(op));
}

void OpGraph::reduction(cudnnReduceTensorOp_t op_type, int64_t x, int64_t y) {
  Descriptor r(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
  r.set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, op_type);
  r.set(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, CUDNN_DATA_FLOAT);
  r.finalize();
  Descriptor op(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
  op.set_desc(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, desc(x));
  op.set_desc(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, desc(y));
  op.set_desc(CUDNN_ATTR_OPERATION_REDUCTION_DESC, r);
  op.finalize();
  settings_.push_back(std::move(r));
  ops_.push_back(std::move(op));
}

void OpGraph::reshape(int64_t x, int64_t y) {
  Descriptor op(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
  op.set_desc(CUDNN_ATTR_OPERATION_RESHAPE_XDESC, desc(x));
  op.set_desc(CUDNN_ATTR_OPERATION_RESHAPE_YDESC, desc(y));
  op.finalize();
  ops_.push_back(std::move(op));
}

namespace {

// The engine behind a configuration: its global index and numerical notes, read without failing the build.
struct EngineInfo {
  int64_t index = -1;
  std::vector<cudnnBackendNumericalNote_t> notes;
  bool nondeterministic() const {
    for (auto n : notes)
      if (n == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC) return true;
    return false;
  }
  std::string str() const {
    std::ostringstream o;
    o << "engine " << index << " (numerical notes:";
    for (auto n : notes) o << " " << static_cast<int>(n);
    o << ")";
    return o.str();
  }
};

EngineInfo engine_info(const Descriptor& cfg) {
  EngineInfo info;
  Descriptor engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  cudnnBackendDescriptor_t raw = engine.get();
  int64_t n = 0;
  if (cudnnBackendGetAttribute(cfg.get(), CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &raw) !=
      CUDNN_STATUS_SUCCESS)
    return info;
  cudnnBackendGetAttribute(raw, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &info.index);
  info.notes.resize(CUDNN_NUMERICAL_NOTE_TYPE_COUNT);
  if (cudnnBackendGetAttribute(raw, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                               static_cast<int64_t>(info.notes.size()), &n, info.notes.data()) != CUDNN_STATUS_SUCCESS)
    n = 0;
  info.notes.resize(static_cast<size_t>(n));
  return info;
}

std::string error_text(const Error& e) { return e.what(); }

}  // namespace

Plan OpGraph::build(cudnnHandle_t handle, bool deterministic) const {
  std::vector<cudnnBackendDescriptor_t> ops;
  for (const Descriptor& op : ops_) ops.push_back(op.get());
  Descriptor graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, static_cast<int64_t>(ops.size()),
            ops.data());
  graph.set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, handle);
  graph.finalize();

  std::ostringstream why;  // every configuration tried, and why it gave no plan
  for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    std::vector<Descriptor> configs;
    try {
      Descriptor heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
      heur.set_desc(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph);
      heur.set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, mode);
      heur.finalize();
      int64_t count = 0;
      TE_CUDNN_CHECK(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                              CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr));
      std::vector<cudnnBackendDescriptor_t> raw;
      for (int64_t i = 0; i < count; ++i) {
        configs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
        raw.push_back(configs.back().get());
      }
      TE_CUDNN_CHECK(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                              CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &count, raw.data()));
      configs.resize(static_cast<size_t>(count));
      if (count == 0) why << "\n  heuristics mode " << mode << ": no engine configuration";
    } catch (const Error& e) {
      why << "\n  heuristics mode " << mode << ": " << error_text(e);
      continue;
    }
    for (const Descriptor& cfg : configs) {
      const EngineInfo info = engine_info(cfg);
      if (deterministic && info.nondeterministic()) {
        why << "\n  " << info.str() << ": notes nondeterminism";
        continue;
      }
      try {
        Plan p;
        p.plan = Descriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
        p.plan.set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, handle);
        p.plan.set_desc(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, cfg);
        p.plan.finalize();
        int64_t n = 0;
        TE_CUDNN_CHECK(cudnnBackendGetAttribute(p.plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                                CUDNN_TYPE_INT64, 1, &n, &p.workspace_bytes));
        p.engine = info.str();
        p.scalars = scalars_;
        return p;
      } catch (const Error& e) {
        why << "\n  " << info.str() << ": " << error_text(e);
      }
    }
  }
  TE_THROW("cuDNN finalized no execution plan for this graph:" << why.str(),
           "the shape or layout is outside what this cuDNN's fused attention supports");
}

void execute(cudnnHandle_t handle, const Plan& plan, const std::vector<std::pair<int64_t, void*>>& pointers,
             void* workspace) {
  std::vector<int64_t> uids;
  std::vector<void*> data;
  for (const auto& [uid, ptr] : pointers) {
    uids.push_back(uid);
    data.push_back(ptr);
  }
  for (const auto& [uid, value] : plan.scalars) {
    uids.push_back(uid);
    data.push_back(const_cast<float*>(&value));  // cuDNN reads a by-value scalar from host memory
  }
  Descriptor pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, static_cast<int64_t>(uids.size()), uids.data());
  pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, static_cast<int64_t>(data.size()),
           data.data());
  pack.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, workspace);
  pack.finalize();
  TE_CUDNN_CHECK(cudnnBackendExecute(handle, plan.plan.get(), pack.get()));
}

}  // namespace te::cudnn_graph
