// What the sequence-parallel gather of one tensor does, per usage, decided before anything runs: the one plan type
// that comm/gather.cpp executes, the graph planner records for each gather node and `--explain` prints.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "ops/quant/format.h"

namespace te {

enum class GatherRoute : uint8_t {
  none,            // usage not requested
  local,           // world size 1: quantized (or returned) locally, no communication
  quantized,       // gathered in the quantized format (docs/NUMERICS.md §4)
  fallback,        // gathered in the original precision, then quantized once (§5)
  high_precision,  // no quantizer: a plain gather of the tensor in its dtype
};

constexpr std::string_view gather_route_name(GatherRoute p) {
  switch (p) {
    case GatherRoute::none: return "none";
    case GatherRoute::local: return "local";
    case GatherRoute::quantized: return "quantized";
    case GatherRoute::fallback: return "fallback";
    case GatherRoute::high_precision: return "high_precision";
  }
  return "?";
}

struct UsagePath {
  GatherRoute path = GatherRoute::none;
  std::string reason;  // why this path, in words (--explain prints it)
};

struct GatherPlan {
  UsagePath rowwise, columnwise;  // with a quantizer: one entry per requested usage
  UsagePath tensor;               // without one: local or high_precision
  bool producer_writes_quantized = false;  // the graph's producer of the input writes the quantized shard itself
  const UsagePath& of(Usage u) const { return u == Usage::rowwise ? rowwise : columnwise; }
};

}  // namespace te
