// CPU reference of the optimizers: the element update of optimizer_math.h in a loop per slot.
#include "engine/element.h"
#include "graph/optimizer_math.h"

namespace te::detail {

void optimizer_cpu(std::span<const SlotPtrs> slots, const OptimizerStep& step) {
  const bool skipped = step.skip != nullptr && *step.skip != 0;
  if (!skipped && !step.update) return;
  const OptimizerScalars s = *step.scalars;
  for (const SlotPtrs& t : slots)
    for (int64_t i = 0; i < t.n; ++i) {
      if (skipped)
        skip_element(t, i);
      else
        update_element(t, i, step.kind, s);
    }
}

}  // namespace te::detail
