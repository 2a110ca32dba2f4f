// CPU reference of the optimizers: the element update of optimizer_math.h in a loop per slot.
#include "engine/element.h"
#include "graph/optimizer_math.h"

namespace te::detail {

void optimizer_cpu(std::span<const SlotPtrs> slots, const OptimizerScalars& s) {
  for (const SlotPtrs& t : slots)
    for (int64_t i = 0; i < t.n; ++i) update_element(t, i, s);
}

}  // namespace te::detail
