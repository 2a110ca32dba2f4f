// How attention through cuDNN is cut into calls over whole sequences, and the workspace its backward takes: plain
// arithmetic, compiled in every build so that --explain can count the workspace (attention_cudnn.cpp runs the calls).
#pragma once
#include <cstdint>

#include "ops/attention/attention.h"

namespace te::cudnn_attention {

// cuDNN's deterministic backward keeps each sequence's score gradients, heads · seq² in the input type, in its
// workspace, and with grouped-query heads the per-query-head key and value gradients before their sum; the row sums
// of dO ⊙ O (f32) sit beside them. Bytes per sequence, as cuDNN 9.14's plans reported them on an H100 (2 GiB + 256
// bytes at 8 sequences of 2048 tokens and 32 heads of 128; 2.25 GiB + 256 with 8 key/value heads).
// The nondeterministic backward keeps no score gradients; the query gradient's f32 accumulator, heads · seq ·
// head_dim, takes their place (the grouped-query term is counted as for the deterministic one).
int64_t backward_workspace_per_sequence(const AttentionLayout& l, int64_t esize, bool deterministic);

// TEENGINE_ATTENTION_WORKSPACE_MIB in bytes: what one backward call may take (default 8192 MiB, a tenth of an 80 GB
// GPU). A value that is not a positive number of MiB is a te::Error naming it.
int64_t backward_workspace_cap();

// Sequences per call: what cuDNN's grid holds (a sequence's query heads are rows of it, 65535 at most) and, for the
// backward, what the workspace cap allows (one sequence at the least), rounded down to a multiple of the fewest
// sequences whose QKV rows, output rows and statistics are each a multiple of 16 bytes, so every call's pointers are
// as aligned as the first call's.
// `deterministic`: which backward (it sizes the workspace).
int64_t sequences_per_call(const AttentionLayout& l, int64_t esize, bool backward, bool deterministic);

}  // namespace te::cudnn_attention
