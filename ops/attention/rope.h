// Rotary position embedding on a fused QKV tensor (layout: ops/attention/attention.h), the rotate-half form of
// GPT-NeoX and TransformerEngine's default: in every query and key head, element i < head_dim/2 pairs with
// i + head_dim/2 and the pair turns by the angle position · base^(−2i/head_dim), position = token % seq. Angles and
// math in f32, one rounding per element; values pass unchanged.
#pragma once
#include "ops/attention/attention.h"

namespace te {

// `inverse` turns the other way: the backward, since a rotation's transpose is its inverse. out may be qkv itself
// (each pair is read before it is written). head_dim must be even.
void rope_apply(const AttentionLayout& l, double base, bool inverse, const Tensor& qkv, Tensor& out,
                const Stream& stream = Stream());

}  // namespace te
