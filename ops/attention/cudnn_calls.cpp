#include "ops/attention/cudnn_calls.h"

#include <algorithm>
#include <cstdlib>

#include "engine/error.h"

namespace te::cudnn_attention {

int64_t backward_workspace_per_sequence(const AttentionLayout& l, int64_t esize, bool deterministic) {
  const int64_t scores = deterministic ? l.heads * l.seq * l.seq * esize : l.heads * l.seq * l.head_dim * 4;
  const int64_t grouped = l.heads != l.kv_heads ? 2 * l.heads * l.seq * l.head_dim * esize : 0;
  const int64_t row_sums = l.heads * l.seq * 4;
  return scores + grouped + row_sums;
}

int64_t backward_workspace_cap() {
  const char* v = std::getenv("TEENGINE_ATTENTION_WORKSPACE_MIB");
  if (v == nullptr || *v == '\0') return int64_t{8192} << 20;
  char* end = nullptr;
  const long long mib = std::strtoll(v, &end, 10);
  TE_CHECK_HINT(*end == '\0' && mib > 0 && mib <= (int64_t{1} << 30),
                "TEENGINE_ATTENTION_WORKSPACE_MIB=" << v << " is not a positive number of MiB",
                "set it to the MiB cuDNN's attention backward may use per call (e.g. 8192), or unset it");
  return static_cast<int64_t>(mib) << 20;
}

namespace {

int64_t aligned_sequences(const AttentionLayout& l, int64_t esize) {
  for (int64_t k = 1; k < 16; ++k)
    if (k * l.seq * l.qkv_cols() * esize % 16 == 0 && k * l.seq * l.out_cols() * esize % 16 == 0 &&
        k * l.heads * l.seq * 4 % 16 == 0)
      return k;
  return 16;
}

}  // namespace

int64_t sequences_per_call(const AttentionLayout& l, int64_t esize, bool backward, bool deterministic) {
  int64_t fit = std::max<int64_t>(1, 65535 / l.heads);
  if (backward)
    fit = std::min(fit, backward_workspace_cap() / backward_workspace_per_sequence(l, esize, deterministic));
  const int64_t step = aligned_sequences(l, esize);
  return std::max(step, fit / step * step);
}

}  // namespace te::cudnn_attention
