// Engine::set_batching: concurrent forward(HostTensor) calls coalesced into one forward (models/request_batcher.h).
#include "engine/error.h"
#include "models/engine_state.h"

namespace teengine {
using detail::translate;

std::shared_ptr<te::RequestBatcher> Engine::Impl::current_batcher() const {
  std::lock_guard<std::mutex> lock(batch_mu);
  return batcher;
}

HostTensor Engine::Impl::forward_batched(te::RequestBatcher& b, const HostTensor& input) {
  // Everything about the request alone is checked here, so one bad request never fails the batch it would join.
  // With padding, any token count runs (the batch is padded to the token multiple).
  check_input(input.shape, /*any_tokens=*/b.policy().pad);
  detail::check_host_bytes(input);
  return b.submit(input);
}

void Engine::set_batching(const BatchingOptions& options) {
  translate([&] {
    Impl& m = *impl_;
    if (options.enabled) {
      if (m.group->distributed())
        TE_INPUT_ERROR("batching on an engine of " << m.world() << " processes (parallel.comm "
                                                   << te::comm_backend_name(m.group->placement.backend) << ")",
                       "forward is collective there, every rank making the same calls: batch before calling it, or "
                       "run the ranks as threads (parallel.comm: local)");
      if (!m.per_token_recipe() && !options.allow_per_tensor_scaling)
        TE_INPUT_ERROR("batching with recipe " << recipe()
                                               << ", which scales the input per tensor: each request's output would "
                                                  "depend on the requests batched with it",
                       "set BatchingOptions::allow_per_tensor_scaling to batch anyway, or use recipe none, fp8_block "
                       "or mxfp8");
      if (options.max_batch_tokens < 1 || options.max_wait_us < 0)
        TE_INPUT_ERROR("batching with max_batch_tokens " << options.max_batch_tokens << " and max_wait_us "
                                                         << options.max_wait_us,
                       "max_batch_tokens must be at least 1 and max_wait_us at least 0");
    }
    // Padding appends zero rows up to the token multiple: whole zero sequences where there is attention, since
    // every request is whole sequences (check_input).
    const te::BatchPolicy policy{options.max_batch_tokens, options.max_wait_us, m.token_multiple(),
                                 m.per_token_recipe()};
    std::shared_ptr<te::RequestBatcher> off;
    {
      std::lock_guard<std::mutex> lock(m.batch_mu);
      m.batching = options;
      if (!options.enabled)
        off = std::move(m.batcher);
      else if (m.batcher)
        m.batcher->set_policy(policy);  // applies to the queued requests too
      else
        m.batcher = std::make_shared<te::RequestBatcher>(
            policy, [impl = &m](const HostTensor& x) { return impl->forward_host(x); });
    }
    if (off) off->close();  // runs what is queued; callers still on their way run alone
  });
}

BatchingOptions Engine::batching() const {
  std::lock_guard<std::mutex> lock(impl_->batch_mu);
  return impl_->batching;
}

}  // namespace teengine
