// Engine::forward_device: a forward on memory the caller owns, where the engine computes (GPU memory of the engine's
// GPU, or host memory for a CPU engine), ordered after the caller's work on its CUDA stream. Nothing crosses to the
// host: the input is copied (and cast) on the device into the ranks' rows, the output rows copied into the caller's
// buffer on the device.
#include "engine/error.h"
#include "engine/stream.h"
#include "models/engine_state.h"

namespace teengine {
using detail::translate;

void Engine::Impl::write_rows(const StagedTensor::Impl& t, te::Tensor& out) {
  const int64_t n = local_tokens(t.tokens);
  for (auto& c : group->comms) {
    const size_t i = static_cast<size_t>(group->index_of(*c));
    const te::Stream& st = group->ctxs[i]->stream;
    if (n == t.tokens) {  // every rank holds all tokens (no SP split): rank 0's copy
      if (i == 0) out.copy_from(t.rows[0], st);
    } else {
      te::Tensor rows = out.narrow(0, c->rank() * n, n);
      rows.copy_from(t.rows[i], st);
    }
  }
  for (auto& ctx : group->ctxs) ctx->stream.synchronize();
}

void Engine::forward_device(const void* input, const std::string& input_dtype, void* output, int64_t tokens,
                            void* stream) {
  translate([&] {
    Impl& m = *impl_;
    if (m.group->distributed())
      TE_INPUT_ERROR("forward_device on an engine of " << m.world() << " processes",
                     "use forward() (collective on every rank), or run the ranks as threads (parallel.comm: local)");
    const auto dt = te::dtype_from_name(input_dtype);
    if (!dt || !te::is_high_precision(*dt))
      TE_INPUT_ERROR("forward_device input dtype '" << input_dtype << "' is not supported", "use f32, bf16 or f16");
    if (!input || !output) TE_INPUT_ERROR("forward_device with a null buffer", "pass the input and output buffers");
    const int64_t hidden = m.spec().model.hidden;
    m.check_input({tokens, hidden});
    const te::Device dev = m.device();
    if (!dev.is_cuda() && stream)
      TE_INPUT_ERROR("forward_device got a CUDA stream but the engine runs on the CPU",
                     "pass host buffers and stream nullptr, or run the engine on a GPU (run.device)");
    m.exclusive([&] {
      return m.timed_step([&](Impl::StepRecord& step) {
        step.tokens = tokens;
        if (dev.is_cuda()) {
          // The ranks read the input only after the work the caller queued on `stream` before this call.
          te::Event ready = te::Event::create(dev);
          ready.record(te::Stream::borrow(dev, stream));
          for (auto& ctx : m.group->ctxs) ready.wait(ctx->stream);
        }
        const te::Tensor x = te::Tensor::borrow(const_cast<void*>(input), {tokens, hidden}, *dt, dev);
        const StagedTensor staged = m.stage(x);  // copied (cast to the model dtype) on the device: only read
        const StagedTensor y = m.run_forward(*staged.impl(), &step.device_ms);
        te::Tensor out = te::Tensor::borrow(output, {tokens, hidden}, m.spec().model.dtype, dev);
        m.write_rows(*y.impl(), out);
      });
    });
  });
}

}  // namespace teengine
