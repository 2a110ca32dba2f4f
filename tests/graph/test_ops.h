// Test-only op kinds with tiny CPU kernels, registered through the same OpDef table mechanism as real ops, so the
// graph machinery is proven without the ops/ and comm/ kernels. Element types: f32 (float) and kF64 — an i64 value
// used as a carrier of IEEE doubles, because the engine's DType table has no f64 and finite differences need it.
#pragma once
#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <random>
#include <thread>

#include "engine/error.h"
#include "graph/autograd.h"
#include "graph/builder.h"
#include "graph/op_table.h"

namespace te::test_ops {

inline constexpr DType kF64 = DType::i64;  // doubles stored in 8-byte elements

template <class F>
void dispatch(DType t, F&& f) {
  if (t == DType::f32) f(float{});
  else if (t == kF64) f(double{});
  else TE_THROW("test ops support f32 and the f64 carrier, got " << dtype_name(t), "");
}

// ---- inference rules --------------------------------------------------------------------------------------------
std::vector<ValueType> same_as_all(const Node&, const std::vector<ValueType>& in);
std::vector<ValueType> same_as_first(const Node&, const std::vector<ValueType>& in);
std::vector<ValueType> matmul_type(const Node& n, const std::vector<ValueType>& in);
std::vector<ValueType> scalar_type(const Node&, const std::vector<ValueType>& in);
std::vector<ValueType> gather_type(const Node& n, const std::vector<ValueType>& in);
std::vector<ValueType> reduce_scatter_type(const Node& n, const std::vector<ValueType>& in);
std::vector<ValueType> fill_type_rule(const Node& n, const std::vector<ValueType>&);

// ---- backward rules ---------------------------------------------------------------------------------------------
void scale_bwd(BackwardBuilder& bb);
void add_bwd(BackwardBuilder& bb);
void mul_bwd(BackwardBuilder& bb);
void matmul_bwd(BackwardBuilder& bb);
void tanh_bwd(BackwardBuilder& bb);
void sumsq_bwd(BackwardBuilder& bb);

// ---- kernels (also called directly by the tests: "the same kernels one by one") ----------------------------------
void run_scale(KernelCall& c);
void run_add(KernelCall& c);
void run_mul(KernelCall& c);
void run_matmul(KernelCall& c);
void run_tanh(KernelCall& c);
void run_tanh_grad(KernelCall& c);
void run_sumsq(KernelCall& c);
void run_sumsq_grad(KernelCall& c);
void run_fill(KernelCall& c);
void run_gather(KernelCall& c);
void run_reduce_scatter(KernelCall& c);
void run_slow_copy(KernelCall& c);
void run_fail(KernelCall& c);
void run_negate_in_place(KernelCall& c);
std::vector<ValueType> no_outputs(const Node&, const std::vector<ValueType>&);

enum class Op {
  scale,
  add,
  mul,
  matmul,
  tanh,
  tanh_grad,
  sumsq,
  sumsq_grad,
  fill,
  gather,
  reduce_scatter,
  slow_copy,
  fail,
  negate_in_place
};

inline constexpr std::array<OpDef, 14> kTestOps{{
    // y = alpha * x (after sleep_us microseconds, when set)
    {"t_scale", 1, 1, StreamClass::compute, false, same_as_all, scale_bwd, run_scale},
    {"t_add", 2, 1, StreamClass::compute, false, same_as_all, add_bwd, run_add},                  // y = a + b
    {"t_mul", 2, 1, StreamClass::compute, false, same_as_all, mul_bwd, run_mul},                  // y = a * b
    {"t_matmul", 2, 1, StreamClass::compute, false, matmul_type, matmul_bwd, run_matmul},         // op(A) op(B)
    {"t_tanh", 1, 1, StreamClass::compute, false, same_as_all, tanh_bwd, run_tanh},               // y = tanh x
    {"t_tanh_grad", 2, 1, StreamClass::compute, false, same_as_all, nullptr, run_tanh_grad},      // dy (1 - y^2)
    {"t_sumsq", 1, 1, StreamClass::compute, false, scalar_type, sumsq_bwd, run_sumsq},            // [1] sum x^2
    {"t_sumsq_grad", 2, 1, StreamClass::compute, false, same_as_first, nullptr, run_sumsq_grad},  // (x, dy) 2 x dy
    {"t_fill", 0, 1, StreamClass::compute, false, fill_type_rule, nullptr, run_fill},
    // Fake collectives on the comm stream: every "rank" holds the same shard. Attr world; sleep_us (max random sleep).
    {"t_gather", 1, 1, StreamClass::comm, true, gather_type, nullptr, run_gather},
    {"t_reduce_scatter", 1, 1, StreamClass::comm, false, reduce_scatter_type, nullptr, run_reduce_scatter},
    {"t_slow_copy", 1, 1, StreamClass::comm, false, same_as_all, nullptr, run_slow_copy},  // sleep_us, fixed
    {"t_fail", 1, 1, StreamClass::compute, false, same_as_all, nullptr, run_fail},         // throws te::Error
    // x = -x in place, on the side stream: like an optimizer step rewriting a weight other nodes read.
    {"t_negate_in_place", 1, 0, StreamClass::side, false, no_outputs, nullptr, run_negate_in_place},
}};

inline const OpDef& op(Op o) { return kTestOps[static_cast<size_t>(o)]; }

inline ValueType vt(Shape shape, DType dtype = DType::f32, Sharding sh = Sharding::replicated()) {
  ValueType t;
  t.shape = std::move(shape);
  t.dtype = dtype;
  t.sharding = sh;
  return t;
}

// Element access for tests over both element types.
std::vector<double> to_doubles(const Tensor& t);
void from_doubles(Tensor& t, const std::vector<double>& v);
Tensor make(const Shape& shape, DType dtype, uint64_t seed);  // uniform [-1, 1)
bool bit_equal(const Tensor& a, const Tensor& b);

}  // namespace te::test_ops
