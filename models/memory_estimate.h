// What a run needs from the spec alone, as a lower bound per process, so that a model that cannot fit is refused
// with the fields to change before anything is allocated (a hidden of 2^20 asked for terabytes and then failed deep
// in an allocation; 100,000 layers initialised weights for minutes first).
#pragma once
#include <cstdint>
#include <string>

#include "models/rank_placement.h"
#include "models/spec.h"

namespace te {

struct MemoryEstimate {
  double weights = 0;         // the copies the kernels read (quantized weights count at their packed size)
  double training_state = 0;  // f32 masters, gradients and optimizer moments (training)
  double activations = 0;     // one layer's widest activations at the run's token count
  double host_staging = 0;    // the f32 shards read on the host while the weights load
  double device_total() const { return weights + training_state + activations; }
};

// For the ranks this process runs (all tp ranks with the local communicator, one under a launcher).
MemoryEstimate estimate_memory(const ModelSpec& spec, int local_ranks);
// Throws te::InputError naming the spec fields when the estimate exceeds what the device (and, for a GPU run, the
// host) has available now; does nothing where availability cannot be read.
void check_memory_fits(const ModelSpec& spec, const RankPlacement& placement);

}  // namespace te
