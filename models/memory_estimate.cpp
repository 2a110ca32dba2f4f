#include "models/memory_estimate.h"

#include <algorithm>
#include <iomanip>
#include <sstream>

#include "engine/device.h"
#include "engine/error.h"

namespace te {
namespace {
double gib(double bytes) { return bytes / (1024.0 * 1024.0 * 1024.0); }

// Per weight element in inference: the quantized copy, and the GEMM image (bf16 at least) the recipes without a
// tensor-core path keep beside it (run.weight_images).
double element_bytes_of_quantized_weights(Recipe r, DType model_dtype, bool weight_images) {
  const double image = weight_images && (r == Recipe::mxfp8 || r == Recipe::nvfp4) ? 2.0 : 0.0;
  switch (r) {
    case Recipe::none: return static_cast<double>(dtype_bits(model_dtype)) / 8;
    case Recipe::nvfp4: return 0.5 + image;
    default: return 1.0 + image;  // FP8 data; scales add well under 5 %
  }
}
}  // namespace

MemoryEstimate estimate_memory(const ModelSpec& spec, int local_ranks) {
  const int tp = spec.parallel.tp;
  const bool train = spec.run.mode == RunMode::train;
  const double dt = static_cast<double>(dtype_bits(spec.model.dtype)) / 8;
  double params = 0, gemm_weights = 0;  // elements held by this process
  int64_t widest = spec.model.hidden;
  // Every layer repeats the block: one layer's parameters count `layers` times (listing the parameters of 100,000
  // layers took seconds before the refusal).
  ModelSpec one_layer = spec;
  one_layer.model.layers = 1;
  const double layers = static_cast<double>(spec.model.layers);
  for (const ParamSpec& p : parameter_specs(one_layer)) {
    double n = layers;
    for (int64_t d : p.shape) n *= static_cast<double>(d);
    const double here = (p.shard_dim >= 0 ? n / tp : n) * local_ranks;
    params += here;
    if (p.role == ParamRole::weight && p.shape.size() == 2) {
      gemm_weights += here;
      widest = std::max(widest, p.shape[0]);
    }
  }
  MemoryEstimate m;
  const double other = params - gemm_weights;
  m.weights = train ? params * dt
                    : gemm_weights * element_bytes_of_quantized_weights(spec.precision.recipe, spec.model.dtype,
                                                                        spec.run.weight_images) +
                          other * dt;
  if (train) m.training_state = params * 16;  // master, gradient, two moments: f32 each
  // A column-parallel layer's output: all tokens (gathered under SP) by its widest local features, and its input.
  m.activations = static_cast<double>(spec.run.tokens) * static_cast<double>(widest) / tp * dt * 2 * local_ranks;
  m.host_staging = params * 4;
  return m;
}

void check_memory_fits(const ModelSpec& spec, const RankPlacement& placement) {
  const MemoryEstimate m = estimate_memory(spec, placement.local_ranks());
  const Device dev = placement.device;
  auto fields = [&] {
    std::ostringstream o;
    o << std::fixed << std::setprecision(1) << "weights " << gib(m.weights) << " GiB";
    if (m.training_state > 0) o << ", training state " << gib(m.training_state) << " GiB";
    o << ", activations at least " << gib(m.activations) << " GiB; from model.hidden " << spec.model.hidden
      << ", model.layers " << spec.model.layers << ", run.tokens " << spec.run.tokens << ", parallel.tp "
      << spec.parallel.tp;
    return o.str();
  };
  const char* hint =
      "reduce model.layers, model.hidden or a layer's ffn/out, or run.tokens; or raise parallel.tp to spread the "
      "weights over more devices";
  const int64_t device_free = available_memory_bytes(dev);
  if (device_free >= 0 && m.device_total() > static_cast<double>(device_free))
    TE_INPUT_ERROR("the model needs at least " << std::fixed << std::setprecision(1) << gib(m.device_total())
                                               << " GiB on " << dev.str() << " (" << fields() << ") but "
                                               << gib(static_cast<double>(device_free)) << " GiB are available",
                   hint);
  if (dev.is_cuda()) {
    const int64_t host_free = available_memory_bytes(Device::cpu());
    if (host_free >= 0 && m.host_staging > static_cast<double>(host_free))
      TE_INPUT_ERROR("loading the weights needs " << std::fixed << std::setprecision(1) << gib(m.host_staging)
                                                  << " GiB of host memory (f32 shards of this process's ranks; "
                                                  << fields() << ") but " << gib(static_cast<double>(host_free))
                                                  << " GiB are available",
                     hint);
  }
}

}  // namespace te
