#include "models/parameters.h"

#include <cmath>
#include <map>

#include "engine/error.h"
#include "models/safetensors.h"
#include "ops/attention/attention.h"

namespace te {
namespace {

uint64_t name_hash(const std::string& s) {  // FNV-1a: stable across runs and platforms
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// The row ranges [begin, end) of the global tensor's dim `shard_dim` held by `rank` (two ranges for gated halves).
struct Piece {
  int64_t global_begin, local_begin, length;
};
std::vector<Piece> pieces(const ParamSpec& p, int rank, int tp) {
  const int64_t n = p.shape[p.shard_dim];
  if (p.qkv_of) {  // the rank's key/value groups: interleaved rows globally, the kinds apart locally
    const AttentionSpec& a = *p.qkv_of;
    const AttentionLayout global{a.heads, a.kv_heads, a.head_dim};
    AttentionLayout local{a.heads / tp, a.kv_heads / tp, a.head_dim};
    local.kinds_apart = true;
    const int64_t r = global.group(), D = a.head_dim, first = rank * local.kv_heads;
    std::vector<Piece> out;
    for (int64_t g = 0; g < local.kv_heads; ++g) {
      out.push_back({global.q_col((first + g) * r), local.q_col(g * r), r * D});  // its query heads
      out.push_back({global.k_col(first + g), local.k_col(g), D});
      out.push_back({global.v_col(first + g), local.v_col(g), D});
    }
    return out;
  }
  if (!p.gated_halves) return {{rank * (n / tp), 0, n / tp}};
  const int64_t half = n / 2, part = half / tp;
  return {{rank * part, 0, part}, {half + rank * part, part, part}};
}

// Whether a rank holds the global tensor as it is: replicated, or split over one rank without reordering.
bool whole(const ParamSpec& p, int tp) { return p.shard_dim < 0 || (tp == 1 && !p.qkv_of); }

Tensor init_param(const ModelSpec& spec, const ParamSpec& p) {
  Tensor t = Tensor::empty(p.shape, DType::f32);
  switch (p.role) {
    case ParamRole::norm_weight: t.fill(1.0); break;
    case ParamRole::norm_bias:
    case ParamRole::bias: t.fill(0.0); break;
    case ParamRole::weight:
      t.fill_normal(spec.run.seed ^ name_hash(p.name), 0.f, 1.f / std::sqrt(static_cast<float>(p.shape.back())));
      break;
  }
  return t;
}
}  // namespace

GlobalParams init_params(const ModelSpec& spec) {
  GlobalParams g;
  g.specs = parameter_specs(spec);
  for (const ParamSpec& p : g.specs) g.values.push_back(init_param(spec, p));
  return g;
}

GlobalParams load_params(const ModelSpec& spec, const std::string& path) {
  GlobalParams g;
  g.specs = parameter_specs(spec);
  SafetensorsReader r = SafetensorsReader::open(path);
  for (const ParamSpec& p : g.specs) g.values.push_back(r.read_converted(p.name, p.shape, DType::f32));
  return g;
}

void save_params(const GlobalParams& params, DType dtype, const std::string& path) {
  std::map<std::string, Tensor> out;
  for (size_t i = 0; i < params.specs.size(); ++i)
    out.emplace(params.specs[i].name,
                Tensor::from_f32(params.values[i].to_f32_vector(), params.values[i].shape(), dtype));
  write_safetensors(path, out);
}

RankShards shard_params(const GlobalParams& global, int rank, int tp) {
  RankShards s{global.specs, {}};
  for (size_t i = 0; i < global.specs.size(); ++i) s.values.push_back(shard_param(global.specs[i], global.values[i], rank, tp));
  return s;
}

RankShards init_rank_params(const ModelSpec& spec, int rank, int tp) {
  RankShards s{parameter_specs(spec), {}};
  for (const ParamSpec& p : s.specs) s.values.push_back(shard_param(p, init_param(spec, p), rank, tp));
  return s;
}

RankShards load_rank_params(const ModelSpec& spec, const std::string& path, int rank, int tp,
                            const std::string& prefix) {
  RankShards s{parameter_specs(spec), {}};
  SafetensorsReader r = SafetensorsReader::open(path);
  for (const ParamSpec& p : s.specs) {
    const std::string name = prefix + p.name;
    if (whole(p, tp)) {
      s.values.push_back(r.read_converted(name, p.shape, DType::f32));
      continue;
    }
    Tensor local = Tensor::empty(local_shape(p, tp), DType::f32);
    for (const Piece& piece : pieces(p, rank, tp))
      local.narrow(p.shard_dim, piece.local_begin, piece.length)
          .copy_from(r.read_slice_converted(name, p.shape, p.shard_dim, piece.global_begin, piece.length, DType::f32));
    s.values.push_back(local);
  }
  return s;
}

Tensor shard_param(const ParamSpec& p, const Tensor& global, int rank, int tp) {
  if (whole(p, tp)) return global.clone();
  Tensor local = Tensor::empty(local_shape(p, tp), DType::f32);
  for (const Piece& piece : pieces(p, rank, tp))
    local.narrow(p.shard_dim, piece.local_begin, piece.length)
        .copy_from(global.narrow(p.shard_dim, piece.global_begin, piece.length));
  return local;
}

void unshard_param(const ParamSpec& p, const Tensor& shard, int rank, int tp, Tensor& global) {
  if (whole(p, tp)) {
    if (rank == 0) global.copy_from(shard);
    return;
  }
  for (const Piece& piece : pieces(p, rank, tp))
    global.narrow(p.shard_dim, piece.global_begin, piece.length)
        .copy_from(shard.narrow(p.shard_dim, piece.local_begin, piece.length));
}

}  // namespace te
