// Private (CUDA builds only): a small C++ layer over cuDNN 9's backend graph API (cudnn_graph.h), enough to describe
// an operation graph of tensors, pointwise, matmul, reduction and reshape operations, ask the heuristics for engine
// configurations, finalize an execution plan and run it. Every failing cuDNN call throws te::Error naming the call,
// cudnnGetErrorString and cuDNN's own last error text.
//
// Tensors are named by unique ids (UIDs): the graph refers to them by id, and at execution a variant pack binds each
// non-virtual id to a device pointer (a by-value scalar: to the host address of its value).
#pragma once
#include <cudnn.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace te::cudnn_graph {

[[noreturn]] void throw_cudnn(cudnnStatus_t st, const char* call, const char* file, int line);

#define TE_CUDNN_CHECK(call)                                                                          \
  do {                                                                                                \
    cudnnStatus_t te_st_ = (call);                                                                    \
    if (te_st_ != CUDNN_STATUS_SUCCESS) ::te::cudnn_graph::throw_cudnn(te_st_, #call, __FILE__, __LINE__); \
  } while (0)

// One backend descriptor, owned (destroyed with the object).
class Descriptor {
 public:
  Descriptor() = default;
  explicit Descriptor(cudnnBackendDescriptorType_t type);
  ~Descriptor();
  Descriptor(Descriptor&& o) noexcept : d_(std::exchange(o.d_, nullptr)) {}
  Descriptor& operator=(Descriptor&& o) noexcept;
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;

  cudnnBackendDescriptor_t get() const { return d_; }
  void set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count, const void* values);
  template <class T>
  void set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, const T& value) {
    set(name, type, 1, &value);
  }
  void set_ints(cudnnBackendAttributeName_t name, const std::vector<int64_t>& values) {
    set(name, CUDNN_TYPE_INT64, static_cast<int64_t>(values.size()), values.data());
  }
  void set_desc(cudnnBackendAttributeName_t name, const Descriptor& d) {
    cudnnBackendDescriptor_t raw = d.get();
    set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw);
  }
  void finalize();

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

// A finalized execution plan with what running it needs: its workspace size and the by-value scalars' values.
struct Plan {
  Descriptor plan;
  int64_t workspace_bytes = 0;
  std::string engine;  // "engine <global index>, notes: …", for diagnostics
  std::map<int64_t, float> scalars;  // by-value f32 scalars: uid → value (the variant pack points at these)
};

// The graph under construction. Virtual tensors (intermediates that never reach memory) get fresh ids from 1000 up;
// the caller numbers the others below that.
class OpGraph {
 public:
  static constexpr int64_t kAlignment = 16;  // bytes, every non-virtual tensor (the caller checks its pointers)

  // A tensor in memory: [dims] with element strides. `reordering`: the element order inside the buffer where an
  // engine keeps its own (F16x16 marks the f32 accumulator of an atomically accumulated attention gradient).
  int64_t tensor(int64_t uid, cudnnDataType_t type, const std::vector<int64_t>& dims,
                 const std::vector<int64_t>& strides,
                 cudnnBackendTensorReordering_t reordering = CUDNN_TENSOR_REORDERING_NONE);
  // An intermediate of the fused kernel.
  int64_t virtual_tensor(cudnnDataType_t type, const std::vector<int64_t>& dims, const std::vector<int64_t>& strides);
  // An f32 scalar passed by value at execution, broadcast over every dimension.
  int64_t scalar(int64_t uid, float value);

  const std::vector<int64_t>& dims(int64_t uid) const { return shapes_.at(uid).first; }
  const std::vector<int64_t>& strides(int64_t uid) const { return shapes_.at(uid).second; }

  // y = mode(x[, b][, t]); math: the precision the operation computes in; axis: GEN_INDEX's dimension.
  void pointwise(cudnnPointwiseMode_t mode, int64_t x, int64_t b, int64_t t, int64_t y,
                 cudnnDataType_t math = CUDNN_DATA_FLOAT, int64_t axis = -1);
  // c = a · b over the last two dimensions, batched (and broadcast where b has fewer heads) over the first two.
  void matmul(int64_t a, int64_t b, int64_t c);
  // y = op over the dimensions where y has extent 1 and x does not.
  void reduction(cudnnReduceTensorOp_t op, int64_t x, int64_t y);
  // y: the same elements as x seen through other dims/strides (a transpose of the last two, here).
  void reshape(int64_t x, int64_t y);

  // The first engine configuration of the heuristics (mode A, then the fallback list) that finalizes into a plan,
  // skipping engines that note nondeterminism when `deterministic`; throws te::Error listing why each failed.
  Plan build(cudnnHandle_t handle, bool deterministic) const;

 private:
  const Descriptor& desc(int64_t uid) const { return tensors_.at(uid); }
  int64_t add_tensor(int64_t uid, cudnnDataType_t type, const std::vector<int64_t>& dims,
                     const std::vector<int64_t>& strides, bool is_virtual, bool by_value,
                     cudnnBackendTensorReordering_t reordering = CUDNN_TENSOR_REORDERING_NONE);

  std::map<int64_t, Descriptor> tensors_;
  std::map<int64_t, std::pair<std::vector<int64_t>, std::vector<int64_t>>> shapes_;
  std::map<int64_t, float> scalars_;
  std::vector<Descriptor> ops_;
  std::vector<Descriptor> settings_;  // the pointwise/matmul/reduction descriptors the operations refer to
  int64_t next_virtual_ = 1000;
};

// Runs `plan` on the handle's stream: `pointers` binds every non-virtual, non-scalar uid of its graph.
void execute(cudnnHandle_t handle, const Plan& plan, const std::vector<std::pair<int64_t, void*>>& pointers,
             void* workspace);

}  // namespace te::cudnn_graph
