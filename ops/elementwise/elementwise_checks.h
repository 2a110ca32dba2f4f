// Private: the argument checks every elementwise entry point shares (high-precision inputs, caller-allocated
// outputs, the stream's device) and the error of a build without CUDA.
#pragma once
#include <string>

#include "engine/error.h"
#include "engine/stream.h"
#include "engine/tensor.h"
#include "te_config.h"

namespace te::detail {

inline void check_hp(const Tensor& t, const char* op, const char* name) {
  TE_CHECK_HINT(t.defined() && is_high_precision(t.dtype()),
                op << ": " << name << " must be a defined f32/bf16/f16 tensor; got "
                   << (t.defined() ? t.str() : std::string("undefined")),
                "cast the tensor first");
}
inline void check_out(const Tensor& out, const Shape& shape, const Tensor& ref, const char* op) {
  TE_CHECK_HINT(out.defined() && out.shape() == shape && out.is_contiguous() && out.device() == ref.device(),
                op << ": out must be a contiguous " << shape_str(shape) << " tensor on " << ref.device().str()
                   << "; got " << (out.defined() ? out.str() : std::string("undefined")),
                "allocate out with Tensor::empty");
}
inline bool on_cuda(const Tensor& t, const Stream& stream) {
  // A default Stream() is the CPU queue or, used with CUDA tensors, the legacy default stream.
  TE_CHECK(!stream.device().is_cuda() || t.device() == stream.device(),
           "tensor " << t.str() << " is not on the stream's device " << stream.device().str());
  return t.device().is_cuda();
}
#if !TE_WITH_CUDA
[[noreturn]] inline void no_cuda(const char* op) {
  TE_THROW(op << ": this build has no CUDA", "rebuild with -Dcuda=enabled or use cpu tensors");
}
#endif

}  // namespace te::detail
