// The op kinds the graph layer itself inserts: constant fills (gradient seeds, zero gradients), gradient
// accumulation, and the all-reduce of replicated parameters' gradients. The model layer's op kinds (norms, GEMMs,
// activations, gathers, reduce-scatters) live in their own table in models/, built the same way.
#pragma once
#include <array>

#include "graph/op_table.h"

namespace te {

namespace builtin {
std::vector<ValueType> infer_fill(const Node&, const std::vector<ValueType>&);
std::vector<ValueType> infer_same_as_all(const Node&, const std::vector<ValueType>&);
void backward_add(BackwardBuilder&);
void run_fill(KernelCall&);
void run_add(KernelCall&);
void run_all_reduce(KernelCall&);
// The CUDA add kernel (builtin_ops.cu); CUDA builds only.
void add_cuda(const Tensor& a, const Tensor& b, Tensor& out, const Stream& stream);
}  // namespace builtin

enum class BuiltinOp : uint8_t { fill, add, all_reduce };

inline constexpr std::array<OpDef, 3> kBuiltinOps{{
    // () -> constant; attrs from fill_attrs() (graph/autograd.h).
    {"fill", 0, 1, StreamClass::compute, false, builtin::infer_fill, nullptr, builtin::run_fill},
    // (a, b) -> a + b, same types, f32/bf16/f16 (sum in f32, rounded once).
    {"add", 2, 1, StreamClass::compute, false, builtin::infer_same_as_all, builtin::backward_add, builtin::run_add},
    // (x) -> sum of x over the group (ExecEnv::all_reduce_sum); a copy when the group has one rank.
    {"all_reduce", 1, 1, StreamClass::comm, false, builtin::infer_same_as_all, nullptr, builtin::run_all_reduce},
}};

constexpr const OpDef& builtin_op(BuiltinOp op) { return kBuiltinOps[static_cast<size_t>(op)]; }

}  // namespace te
