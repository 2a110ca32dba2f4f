#include "test_ops.h"

namespace te::test_ops {

std::vector<ValueType> same_as_all(const Node& n, const std::vector<ValueType>& in) {
  for (size_t i = 1; i < in.size(); ++i)
    TE_CHECK(in[i] == in[0], "input " << i << " (" << in[i].str() << ") differs from input 0 (" << in[0].str() << ")");
  (void)n;
  return {in.at(0)};
}

std::vector<ValueType> same_as_first(const Node&, const std::vector<ValueType>& in) { return {in.at(0)}; }

std::vector<ValueType> matmul_type(const Node& n, const std::vector<ValueType>& in) {
  const bool ta = n.attr_or<bool>("ta", false), tb = n.attr_or<bool>("tb", false);
  TE_CHECK(in[0].shape.size() == 2 && in[1].shape.size() == 2, "matmul needs 2-D operands");
  TE_CHECK(in[0].dtype == in[1].dtype, "matmul operands differ in dtype");
  const int64_t m = ta ? in[0].shape[1] : in[0].shape[0], k = ta ? in[0].shape[0] : in[0].shape[1];
  const int64_t k2 = tb ? in[1].shape[1] : in[1].shape[0], nn = tb ? in[1].shape[0] : in[1].shape[1];
  TE_CHECK_HINT(k == k2, "inner dimensions differ: " << k << " vs " << k2, "check the operand shapes");
  ValueType t = in[0];
  t.shape = {m, nn};
  t.sharding = Sharding::replicated();
  return {t};
}

std::vector<ValueType> scalar_type(const Node&, const std::vector<ValueType>& in) {
  ValueType t = in.at(0);
  t.shape = {1};
  return {t};
}

std::vector<ValueType> gather_type(const Node& n, const std::vector<ValueType>& in) {
  ValueType t = in.at(0);
  t.shape.at(0) *= n.attr<int64_t>("world");
  t.sharding = Sharding::replicated();
  return {t};
}

std::vector<ValueType> reduce_scatter_type(const Node& n, const std::vector<ValueType>& in) {
  ValueType t = in.at(0);
  const int64_t w = n.attr<int64_t>("world");
  TE_CHECK(t.shape.at(0) % w == 0, "first dimension " << t.shape[0] << " does not divide by world " << w);
  t.shape[0] /= w;
  t.sharding = Sharding::split(0);
  return {t};
}

std::vector<ValueType> fill_type_rule(const Node& n, const std::vector<ValueType>&) { return {fill_type(n)}; }

void scale_bwd(BackwardBuilder& bb) {
  bb.set_grad_input(0, bb.add1(op(Op::scale), {bb.grad_output(0)}, {{"alpha", bb.node().attr<double>("alpha")}}));
}
void add_bwd(BackwardBuilder& bb) {
  for (int i = 0; i < 2; ++i)
    if (bb.needs_grad(i)) bb.set_grad_input(i, bb.grad_output(0));
}
void mul_bwd(BackwardBuilder& bb) {
  const int dy = bb.grad_output(0);
  if (bb.needs_grad(0)) bb.set_grad_input(0, bb.add1(op(Op::mul), {dy, bb.input(1)}));
  if (bb.needs_grad(1)) bb.set_grad_input(1, bb.add1(op(Op::mul), {dy, bb.input(0)}));
}
void matmul_bwd(BackwardBuilder& bb) {
  TE_CHECK(!bb.node().attr_or<bool>("ta", false) && !bb.node().attr_or<bool>("tb", false),
           "test matmul backward supports plain A·B only");
  const int dy = bb.grad_output(0);  // [M, N]
  if (bb.needs_grad(0)) bb.set_grad_input(0, bb.add1(op(Op::matmul), {dy, bb.input(1)}, {{"tb", true}}));  // dY Bᵀ
  if (bb.needs_grad(1)) bb.set_grad_input(1, bb.add1(op(Op::matmul), {bb.input(0), dy}, {{"ta", true}}));  // Aᵀ dY
}
void tanh_bwd(BackwardBuilder& bb) {
  bb.set_grad_input(0, bb.add1(op(Op::tanh_grad), {bb.grad_output(0), bb.output(0)}));
}
void sumsq_bwd(BackwardBuilder& bb) {
  bb.set_grad_input(0, bb.add1(op(Op::sumsq_grad), {bb.input(0), bb.grad_output(0)}));
}

namespace {
template <class T>
T* ptr(const Tensor& t) {
  return static_cast<T*>(t.data_ptr());
}
void sleep_random_us(int64_t max_us) {
  if (max_us <= 0) return;
  thread_local std::mt19937_64 rng(std::hash<std::thread::id>()(std::this_thread::get_id()));
  std::this_thread::sleep_for(std::chrono::microseconds(static_cast<int64_t>(rng() % static_cast<uint64_t>(max_us))));
}
}  // namespace

void run_scale(KernelCall& c) {
  std::this_thread::sleep_for(std::chrono::microseconds(c.node.attr_or<int64_t>("sleep_us", 0)));
  dispatch(c.outputs[0].dtype(), [&](auto z) {
    using T = decltype(z);
    const T a = static_cast<T>(c.node.attr<double>("alpha"));
    const T* x = ptr<T>(c.inputs[0]);
    T* y = ptr<T>(c.outputs[0]);
    for (int64_t i = 0; i < c.outputs[0].numel(); ++i) y[i] = a * x[i];
  });
}

void run_add(KernelCall& c) {
  dispatch(c.outputs[0].dtype(), [&](auto z) {
    using T = decltype(z);
    const T *a = ptr<T>(c.inputs[0]), *b = ptr<T>(c.inputs[1]);
    T* y = ptr<T>(c.outputs[0]);
    for (int64_t i = 0; i < c.outputs[0].numel(); ++i) y[i] = a[i] + b[i];
  });
}

void run_mul(KernelCall& c) {
  dispatch(c.outputs[0].dtype(), [&](auto z) {
    using T = decltype(z);
    const T *a = ptr<T>(c.inputs[0]), *b = ptr<T>(c.inputs[1]);
    T* y = ptr<T>(c.outputs[0]);
    for (int64_t i = 0; i < c.outputs[0].numel(); ++i) y[i] = a[i] * b[i];
  });
}

void run_matmul(KernelCall& c) {
  const bool ta = c.node.attr_or<bool>("ta", false), tb = c.node.attr_or<bool>("tb", false);
  const Tensor &A = c.inputs[0], &B = c.inputs[1];
  Tensor& C = c.outputs[0];
  const int64_t m = C.size(0), n = C.size(1), k = ta ? A.size(0) : A.size(1);
  const int64_t lda = A.size(1), ldb = B.size(1);
  dispatch(C.dtype(), [&](auto z) {
    using T = decltype(z);
    const T *a = ptr<T>(A), *b = ptr<T>(B);
    T* y = ptr<T>(C);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        T acc = 0;
        for (int64_t p = 0; p < k; ++p) acc += (ta ? a[p * lda + i] : a[i * lda + p]) * (tb ? b[j * ldb + p] : b[p * ldb + j]);
        y[i * n + j] = acc;
      }
  });
}

void run_tanh(KernelCall& c) {
  dispatch(c.outputs[0].dtype(), [&](auto z) {
    using T = decltype(z);
    const T* x = ptr<T>(c.inputs[0]);
    T* y = ptr<T>(c.outputs[0]);
    for (int64_t i = 0; i < c.outputs[0].numel(); ++i) y[i] = std::tanh(x[i]);
  });
}

void run_tanh_grad(KernelCall& c) {
  dispatch(c.outputs[0].dtype(), [&](auto z) {
    using T = decltype(z);
    const T *dy = ptr<T>(c.inputs[0]), *y = ptr<T>(c.inputs[1]);
    T* dx = ptr<T>(c.outputs[0]);
    for (int64_t i = 0; i < c.outputs[0].numel(); ++i) dx[i] = dy[i] * (T(1) - y[i] * y[i]);
  });
}

void run_sumsq(KernelCall& c) {
  dispatch(c.outputs[0].dtype(), [&](auto z) {
    using T = decltype(z);
    const T* x = ptr<T>(c.inputs[0]);
    T acc = 0;
    for (int64_t i = 0; i < c.inputs[0].numel(); ++i) acc += x[i] * x[i];
    ptr<T>(c.outputs[0])[0] = acc;
  });
}

void run_sumsq_grad(KernelCall& c) {
  dispatch(c.outputs[0].dtype(), [&](auto z) {
    using T = decltype(z);
    const T* x = ptr<T>(c.inputs[0]);
    const T dy = ptr<T>(c.inputs[1])[0];
    T* dx = ptr<T>(c.outputs[0]);
    for (int64_t i = 0; i < c.outputs[0].numel(); ++i) dx[i] = T(2) * x[i] * dy;
  });
}

void run_fill(KernelCall& c) {
  dispatch(c.outputs[0].dtype(), [&](auto z) {
    using T = decltype(z);
    T* y = ptr<T>(c.outputs[0]);
    for (int64_t i = 0; i < c.outputs[0].numel(); ++i) y[i] = static_cast<T>(c.node.attr<double>("value"));
  });
}

void run_gather(KernelCall& c) {
  sleep_random_us(c.node.attr_or<int64_t>("sleep_us", 0));
  const int64_t bytes = c.inputs[0].nbytes();
  const int64_t w = c.node.attr<int64_t>("world");
  for (int64_t r = 0; r < w; ++r)
    std::memcpy(static_cast<char*>(c.outputs[0].data_ptr()) + r * bytes, c.inputs[0].data_ptr(), static_cast<size_t>(bytes));
}

void run_reduce_scatter(KernelCall& c) {
  sleep_random_us(c.node.attr_or<int64_t>("sleep_us", 0));
  const int64_t w = c.node.attr<int64_t>("world");
  const int64_t n = c.outputs[0].numel();
  dispatch(c.outputs[0].dtype(), [&](auto z) {
    using T = decltype(z);
    const T* x = ptr<T>(c.inputs[0]);
    T* y = ptr<T>(c.outputs[0]);
    for (int64_t i = 0; i < n; ++i) {
      T acc = 0;
      for (int64_t r = 0; r < w; ++r) acc += x[r * n + i];
      y[i] = acc;
    }
  });
}

void run_slow_copy(KernelCall& c) {
  const int64_t us = c.node.attr_or<int64_t>("sleep_us", 0);
  if (c.node.attr_or<bool>("fixed", false)) std::this_thread::sleep_for(std::chrono::microseconds(us));
  else sleep_random_us(us);
  std::memcpy(c.outputs[0].data_ptr(), c.inputs[0].data_ptr(), static_cast<size_t>(c.inputs[0].nbytes()));
}

std::vector<ValueType> no_outputs(const Node&, const std::vector<ValueType>&) { return {}; }

void run_negate_in_place(KernelCall& c) {
  dispatch(c.inputs[0].dtype(), [&](auto z) {
    using T = decltype(z);
    T* x = ptr<T>(c.inputs[0]);
    for (int64_t i = 0; i < c.inputs[0].numel(); ++i) x[i] = -x[i];
  });
}

void run_fail(KernelCall& c) { TE_THROW("t_fail kernel of node '" << c.node.name << "' failed on purpose", ""); }

std::vector<double> to_doubles(const Tensor& t) {
  std::vector<double> out(static_cast<size_t>(t.numel()));
  dispatch(t.dtype(), [&](auto z) {
    using T = decltype(z);
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<double>(ptr<T>(t)[i]);
  });
  return out;
}

void from_doubles(Tensor& t, const std::vector<double>& v) {
  dispatch(t.dtype(), [&](auto z) {
    using T = decltype(z);
    for (size_t i = 0; i < v.size(); ++i) ptr<T>(t)[i] = static_cast<T>(v[i]);
  });
}

Tensor make(const Shape& shape, DType dtype, uint64_t seed) {
  Tensor t = Tensor::empty(shape, dtype);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (double& x : v) x = u(rng);
  from_doubles(t, v);
  return t;
}

bool bit_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.data_ptr(), b.data_ptr(), static_cast<size_t>(a.nbytes())) == 0;
}

}  // namespace te::test_ops
