// The YAML side of the model spec: yaml-cpp tree → validated ModelSpec (kept out of libteengine.so: see
// models/meson.build).
#include "models/spec.h"
#include "models/spec_tables.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <fstream>
#include <set>
#include <sstream>

#include "engine/error.h"
#include "engine/printable.h"
#include "models/spec_suggest.h"
#include "models/spec_yaml.h"

namespace te {
using namespace spec_tables;
using spec_detail::Ctx;
using spec_detail::Fields;
using spec_detail::read_bool;
using spec_detail::read_enum;
using spec_detail::read_float;
using spec_detail::read_int;
using spec_detail::read_string;

namespace {
// Upper bounds keep every product of sizes far from int64 overflow downstream.
constexpr int64_t kMaxFeatures = int64_t{1} << 20;
constexpr int64_t kMaxTokens = int64_t{1} << 30;
constexpr uintmax_t kMaxSpecBytes = uintmax_t{16} << 20;

std::string fmt_num(double v) {
  std::ostringstream o;
  o << v;
  return o.str();
}

bool valid_name(const std::string& s) {
  if (s.empty() || s.size() > 64) return false;
  for (char ch : s)
    if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '_')) return false;
  return !std::isdigit(static_cast<unsigned char>(s[0]));
}

// ---- model.block -------------------------------------------------------------------------------------------------

// An attention reads the column-parallel QKV projection before it (whose out fixes head_dim when the spec leaves
// it out) and gives heads · head_dim features, still split over the ranks by head.
void check_attention(const Ctx& c, LayerSpec& l, const YAML::Node& node, const LayerSpec* prev, int tp) {
  AttentionSpec& a = l.attention;
  const std::string ap = l.path + ".attention";
  const YAML::Node f = node["attention"];
  if (!prev || prev->mode != ParallelMode::column || prev->kind == LayerKind::attention ||
      prev->kind == LayerKind::layernorm_mlp)
    c.fail(node, l.path,
           "attention '" + l.name + "' must follow the QKV projection, a column-parallel layernorm_linear or linear",
           "write [ {layernorm_linear: {name: qkv, out: (heads + 2 · kv_heads) · head_dim}}, {attention: {...}}, "
           "{linear: {name: proj, out: hidden}} ]");
  if (a.kv_heads % tp != 0)
    c.fail(f[f["kv_heads"] ? "kv_heads" : "heads"], ap + (f["kv_heads"] ? ".kv_heads" : ".heads"),
           "kv_heads " + std::to_string(a.kv_heads) + " is not divisible by tp " + std::to_string(tp) +
               " (each rank runs whole key/value groups)",
           "use a multiple of parallel.tp key/value heads, or change tp");
  const int64_t qkv = prev->out, per_head = a.heads + 2 * a.kv_heads;
  if (a.head_dim == 0) {
    if (qkv % per_head != 0)
      c.fail(node, l.path,
             "the QKV projection '" + prev->name + "' gives " + std::to_string(qkv) + " features, not a multiple of " +
                 "heads + 2 · kv_heads = " + std::to_string(per_head),
             "set " + prev->name + "'s out to (heads + 2 · kv_heads) · head_dim, e.g. " + std::to_string(per_head * 64));
    a.head_dim = qkv / per_head;
  } else if (per_head * a.head_dim != qkv) {
    c.fail(f["head_dim"], ap + ".head_dim",
           "heads " + std::to_string(a.heads) + ", kv_heads " + std::to_string(a.kv_heads) + " and head_dim " +
               std::to_string(a.head_dim) + " read " + std::to_string(per_head * a.head_dim) +
               " QKV features, but '" + prev->name + "' gives " + std::to_string(qkv),
           "set " + prev->name + "'s out to " + std::to_string(per_head * a.head_dim) + " or leave head_dim out");
  }
  if (a.rotary_base > 0 && a.head_dim % 2 != 0)
    c.fail(f["rotary"], ap + ".rotary", "rotary embedding needs an even head_dim, got " + std::to_string(a.head_dim),
           "use an even head_dim (e.g. 64 or 128), or rotary: false");
  l.in = qkv;
  l.out = a.heads * a.head_dim;
}

// Column/row assignment and the shape flow through one branch (see spec.h).
void check_branch_flow(const Ctx& c, Branch& br, const std::vector<YAML::Node>& nodes, const std::string& path,
                       const YAML::Node& branch_node, int64_t hidden, int tp) {
  int64_t cur = hidden;
  bool sharded = false;  // the running activation is split by feature over the ranks (after a column layer)
  for (size_t i = 0; i < br.size(); ++i) {
    LayerSpec& l = br[i];
    const std::string kind(layer_kind_name(l.kind));
    const std::string lp = l.path + "." + kind;
    l.in = cur;
    if (l.kind == LayerKind::attention) {
      check_attention(c, l, nodes[i], i > 0 ? &br[i - 1] : nullptr, tp);
      l.mode = ParallelMode::column;
      cur = l.out;
      continue;
    }
    if (l.kind == LayerKind::layernorm_mlp) {
      if (sharded)
        c.fail(nodes[i], l.path, "layernorm_mlp '" + l.name + "' follows column-parallel '" + br[i - 1].name +
                                     "', whose output is split over ranks; its LayerNorm needs all features",
               "add a `linear` (row-parallel) back to hidden before it");
      l.mode = ParallelMode::column;
      l.out = cur;
      continue;
    }
    if (!sharded) {
      l.mode = ParallelMode::column;
      if (l.out % tp != 0)
        c.fail(nodes[i]
                   [kind]["out"],
               lp + ".out",
               "out " + std::to_string(l.out) + " of column-parallel '" + l.name + "' is not divisible by tp " +
                   std::to_string(tp),
               "make out a multiple of parallel.tp (e.g. " + std::to_string((l.out / tp + 1) * tp) +
                   ") or change tp");
      sharded = true;
    } else {
      if (l.kind == LayerKind::layernorm_linear)
        c.fail(nodes[i], l.path,
               "layernorm_linear '" + l.name + "' would be row-parallel (it follows column-parallel '" +
                   br[i - 1].name + "'), but its LayerNorm needs all features",
               "use `linear` here, or start a new branch for it");
      l.mode = ParallelMode::row;
      sharded = false;
    }
    cur = l.out;
  }
  const LayerSpec& last = br.back();
  if (sharded)
    c.fail(nodes.back(), last.path,
           "branch ends with column-parallel '" + last.name + "' (its output is split over ranks), but the residual "
           "add needs the full hidden width",
           "add {linear: {name: ..., out: " + std::to_string(hidden) + "}} after it (row-parallel)");
  if (cur != hidden)
    c.fail(branch_node, path,
           "branch ends at " + std::to_string(cur) + " features but the residual add needs hidden = " +
               std::to_string(hidden),
           "set the last layer's out to " + std::to_string(hidden));
}

void read_attention(const Ctx& c, Fields& f, AttentionSpec& a) {
  a.heads = read_int(c, f.require("heads", "set heads: the number of query heads"), f.sub("heads"), 1, 65536,
                     "heads is the number of query heads");
  a.kv_heads = a.heads;
  if (f.has("kv_heads")) {
    a.kv_heads = read_int(c, f.get("kv_heads"), f.sub("kv_heads"), 1, a.heads, "kv_heads is at most heads");
    if (a.heads % a.kv_heads != 0)
      c.fail(f.get("kv_heads"), f.sub("kv_heads"),
             "kv_heads " + std::to_string(a.kv_heads) + " does not divide heads " + std::to_string(a.heads),
             "every key/value head serves the same number of query heads: pick a divisor of heads");
  }
  if (f.has("head_dim"))
    a.head_dim = read_int(c, f.get("head_dim"), f.sub("head_dim"), 1, 4096, "head_dim is one head's width");
  a.seq_len = read_int(c, f.require("seq_len", "set seq_len: the tokens of one sequence (tokens = batch × seq_len)"),
                       f.sub("seq_len"), 1, kMaxTokens, "seq_len is the tokens of one sequence");
  if (f.has("causal")) a.causal = read_bool(c, f.get("causal"), f.sub("causal"));
  if (f.has("deterministic")) a.deterministic = read_bool(c, f.get("deterministic"), f.sub("deterministic"));
  if (f.has("softmax_scale")) {
    a.softmax_scale = read_float(c, f.get("softmax_scale"), f.sub("softmax_scale"));
    if (!(a.softmax_scale > 0 && std::isfinite(a.softmax_scale)))
      c.fail(f.get("softmax_scale"), f.sub("softmax_scale"), "must be a positive number",
             "leave it out for 1 / sqrt(head_dim)");
  }
  const bool rotary = f.has("rotary") && read_bool(c, f.get("rotary"), f.sub("rotary"));
  if (f.has("rotary_base") && !rotary)
    c.fail(f.get("rotary_base"), f.sub("rotary_base"), "rotary_base is set but rotary is not",
           "add rotary: true, or remove rotary_base");
  if (rotary) a.rotary_base = 10000.0;
  if (f.has("rotary_base")) {
    a.rotary_base = read_float(c, f.get("rotary_base"), f.sub("rotary_base"));
    if (!(a.rotary_base > 1 && std::isfinite(a.rotary_base)))
      c.fail(f.get("rotary_base"), f.sub("rotary_base"), "must be a number above 1", "the usual base is 10000");
  }
}

LayerSpec read_layer(const Ctx& c, const YAML::Node& item, const std::string& path, int tp) {
  std::vector<std::string> kinds;
  for (const auto& [n, k] : kKinds) kinds.push_back(n);
  Fields one(c, item, path, kinds, false);
  if (one.keys().size() != 1)
    c.fail(item, path, "a layer is a map with exactly one key (its kind), got " + std::to_string(one.keys().size()),
           "write {linear: {name: proj, out: 256}}");
  const std::string kind_name = one.keys().front();
  LayerSpec l;
  l.path = path;
  l.kind = kKinds[0].second;
  for (const auto& [n, k] : kKinds)
    if (n == kind_name) l.kind = k;
  const std::string lp = one.sub(kind_name);
  Fields f(c, one.get(kind_name), lp, map_keys("model.block[b][i]." + kind_name), false);
  const YAML::Node name = f.require("name", "every layer needs a name, e.g. name: proj");
  l.name = read_string(c, name, f.sub("name"));
  if (!valid_name(l.name))
    c.fail(name, f.sub("name"), quoted_value(l.name) + " is not a valid layer name",
           "use letters, digits and '_' (not starting with a digit), at most 64 characters");
  if (f.has("bias")) l.bias = read_bool(c, f.get("bias"), f.sub("bias"));
  if (l.kind == LayerKind::attention) {
    read_attention(c, f, l.attention);
  } else if (l.kind == LayerKind::layernorm_mlp) {
    l.ffn = read_int(c, f.require("ffn", "set ffn: the MLP width, e.g. 4 × hidden"), f.sub("ffn"), 1, kMaxFeatures,
                     "ffn is the MLP width, e.g. 4 × hidden");
    if (l.ffn % tp != 0)
      c.fail(f.get("ffn"), f.sub("ffn"),
             "ffn " + std::to_string(l.ffn) + " is not divisible by tp " + std::to_string(tp) +
                 " (FC1 is column-parallel)",
             "make ffn a multiple of parallel.tp (e.g. " + std::to_string((l.ffn / tp + 1) * tp) + ") or change tp");
    if (f.has("activation")) l.activation = read_enum(c, f.get("activation"), f.sub("activation"), kActs);
  } else {
    l.out = read_int(c, f.require("out", "set out: the output features"), f.sub("out"), 1, kMaxFeatures,
                     "out is the number of output features");
  }
  return l;
}

void read_block(const Ctx& c, const YAML::Node& block, const std::string& path, ModelSection& m, int tp) {
  if (!block.IsSequence() || block.size() == 0)
    c.fail(block, path, "expected a non-empty list of branches, got " + spec_detail::describe(block),
           "write block: [ [ {layernorm_mlp: {name: mlp, ffn: 1024}} ] ]");
  std::set<std::string> names;
  for (size_t b = 0; b < block.size(); ++b) {
    const YAML::Node bn = block[b];
    const std::string bp = path + "[" + std::to_string(b) + "]";
    if (!bn.IsSequence() || bn.size() == 0)
      c.fail(bn, bp, "a branch is a non-empty list of layers, got " + spec_detail::describe(bn),
             "write - [ {linear: {name: a, out: 512}}, {linear: {name: b, out: HIDDEN}} ]");
    Branch br;
    std::vector<YAML::Node> nodes;
    for (size_t i = 0; i < bn.size(); ++i) {
      const std::string lp = bp + "[" + std::to_string(i) + "]";
      LayerSpec l = read_layer(c, bn[i], lp, tp);
      if (!names.insert(l.name).second)
        c.fail(bn[i], lp, "layer name '" + l.name + "' is used twice in the block",
               "names must be unique: parameters are named layers.{i}.{name}.*");
      br.push_back(std::move(l));
      nodes.push_back(bn[i]);
    }
    check_branch_flow(c, br, nodes, bp, bn, m.hidden, tp);
    m.block.push_back(std::move(br));
  }
}

// ---- sections ----------------------------------------------------------------------------------------------------

void read_model(const Ctx& c, const YAML::Node& n, ModelSection& m, int tp) {
  Fields f(c, n, "model", map_keys("model"), false);
  m.hidden = read_int(c, f.require("hidden", "set model.hidden, e.g. hidden: 256"), "model.hidden", 1, kMaxFeatures,
                      "hidden is the model width");
  if (f.has("layers"))
    m.layers = read_int(c, f.get("layers"), "model.layers", 1, 100000, "layers is how often the block repeats");
  if (f.has("dtype")) m.dtype = read_enum(c, f.get("dtype"), "model.dtype", kModelDTypes);
  if (f.has("norm")) {
    const YAML::Node norm = f.get("norm");
    if (norm.IsScalar()) {  // shorthand `norm: rmsnorm`
      m.norm = read_enum(c, norm, "model.norm", kNorms);
    } else {
      Fields nf(c, norm, "model.norm", map_keys("model.norm"));
      if (nf.has("type")) m.norm = read_enum(c, nf.get("type"), "model.norm.type", kNorms);
      if (nf.has("eps")) {
        m.eps = read_float(c, nf.get("eps"), "model.norm.eps");
        if (!(m.eps > 0 && m.eps < 1)) c.fail(nf.get("eps"), "model.norm.eps", "must be in (0, 1)", "e.g. 1.0e-5");
      }
    }
  }
  read_block(c, f.require("block", "list the residual branches under model.block"), "model.block", m, tp);
}

void read_parallel(const Ctx& c, const YAML::Node& n, ParallelSpec& p) {
  Fields f(c, n, "parallel", map_keys("parallel"));
  if (f.has("tp"))
    p.tp = static_cast<int>(read_int(c, f.get("tp"), "parallel.tp", 1, 4096, "tp is the tensor-parallel group size"));
  if (f.has("sequence_parallel"))
    p.sequence_parallel = read_bool(c, f.get("sequence_parallel"), "parallel.sequence_parallel");
  if (f.has("comm")) p.comm = read_enum(c, f.get("comm"), "parallel.comm", kComms);
  if (f.has("timeout_s")) {
    p.timeout_s = read_float(c, f.get("timeout_s"), "parallel.timeout_s");
    if (p.timeout_s < 0.1 || p.timeout_s > 86400)
      c.fail(f.get("timeout_s"), "parallel.timeout_s", "must be between 0.1 and 86400 seconds",
             "the default is 300; tests use a few seconds");
  }
}

void read_precision(const Ctx& c, const YAML::Node& n, PrecisionSpec& p) {
  if (n.IsScalar() && !n.IsNull()) {  // shorthand `precision: fp8_block`
    p.recipe = read_enum(c, n, "precision", recipes());
  } else {
    Fields f(c, n, "precision", map_keys("precision"));
    if (f.has("recipe")) p.recipe = read_enum(c, f.get("recipe"), "precision.recipe", recipes());
    const RecipeRow& row = recipe_row(p.recipe);
    // The options the recipe's row names; any other option set is an error (it would be silently ignored).
    auto applies = [&](const std::string& key) {
      if (!f.has(key)) return false;
      if (std::find(row.options.begin(), row.options.end(), key) != row.options.end()) return true;
      c.fail(f.get(key), f.sub(key),
             "applies only to recipe " + recipes_reading(key) + ", not " + std::string(row.name),
             "remove it or change precision.recipe");
    };
    if (!row.fp8_formats.empty()) p.fp8_format = row.fp8_formats.front();
    p.pow2_scales = row.pow2_scales_default;
    if (applies("fp8_format")) {
      p.fp8_format = read_enum(c, f.get("fp8_format"), f.sub("fp8_format"), kFormats);
      if (std::find(row.fp8_formats.begin(), row.fp8_formats.end(), p.fp8_format) == row.fp8_formats.end())
        c.fail(f.get("fp8_format"), f.sub("fp8_format"),
               "recipe " + std::string(row.name) + " takes fp8_format " +
                   std::string(fp8_format_name(row.fp8_formats.front())) + " only (every tensor, gradients too)",
               "remove fp8_format, or use fp8_current / fp8_delayed for E5M2 gradients (hybrid)");
    }
    if (applies("amax_history_len"))
      p.amax_history_len = static_cast<int>(read_int(c, f.get("amax_history_len"), f.sub("amax_history_len"), 1,
                                                     1 << 20, "the number of past amaxes kept, e.g. 1024"));
    if (applies("amax_algo"))
      p.amax_algo = read_enum(c, f.get("amax_algo"), f.sub("amax_algo"), kAlgos);
    if (applies("margin"))
      p.margin = static_cast<int>(read_int(c, f.get("margin"), f.sub("margin"), 0, 64, "margin is a power of two"));
    if (applies("pow2_scales"))
      p.pow2_scales = read_bool(c, f.get("pow2_scales"), f.sub("pow2_scales"));
    if (applies("amax_epsilon")) {
      p.amax_epsilon = read_float(c, f.get("amax_epsilon"), f.sub("amax_epsilon"));
      if (p.amax_epsilon < 0) c.fail(f.get("amax_epsilon"), f.sub("amax_epsilon"), "must be ≥ 0", "e.g. 0.0");
    }
  }
}

void read_schedule(const Ctx& c, const YAML::Node& n, OptimizerSpec& o) {
  LrScheduleSpec& s = o.schedule;
  Fields f(c, n, "run.optimizer.schedule", map_keys("run.optimizer.schedule"));
  if (f.has("type")) s.type = read_enum(c, f.get("type"), f.sub("type"), kSchedules);
  if (f.has("warmup_steps"))
    s.warmup_steps = read_int(c, f.get("warmup_steps"), f.sub("warmup_steps"), 0, INT64_MAX / 2,
                              "warmup_steps: steps of linear warm-up from 0 to lr (0: none)");
  for (const char* k : {"decay_steps", "min_lr"})
    if (f.has(k) && s.type != LrScheduleType::cosine)
      c.fail(f.get(k), f.sub(k), "applies only to schedule type cosine", "remove it or set type: cosine");
  if (f.has("decay_steps"))
    s.decay_steps = read_int(c, f.get("decay_steps"), f.sub("decay_steps"), 0, INT64_MAX / 2,
                             "decay_steps: steps of cosine decay after the warm-up (0: until run.steps)");
  if (f.has("min_lr")) {
    s.min_lr = read_float(c, f.get("min_lr"), f.sub("min_lr"));
    if (!(s.min_lr >= 0 && s.min_lr <= o.lr))
      c.fail(f.get("min_lr"), f.sub("min_lr"), "must be in [0, lr] (lr " + fmt_num(o.lr) + ")",
             "e.g. min_lr: " + fmt_num(o.lr / 10));
  }
}

void read_optimizer(const Ctx& c, const YAML::Node& n, OptimizerSpec& o) {
  Fields f(c, n, "run.optimizer", map_keys("run.optimizer"));
  if (f.has("type")) o.type = read_enum(c, f.get("type"), "run.optimizer.type", kOptims);
  auto positive = [&](const std::string& key, double& v, bool zero_ok, double upper) {
    if (!f.has(key)) return;
    v = read_float(c, f.get(key), f.sub(key));
    if (v < 0 || (!zero_ok && v == 0) || v >= upper)
      c.fail(f.get(key), f.sub(key),
             "must be in " + std::string(zero_ok ? "[0, " : "(0, ") + (std::isinf(upper) ? std::string("inf") : fmt_num(upper)) +
                 "), got " + f.get(key).Scalar(),
             key == "lr" ? "e.g. lr: 1.0e-3" : "see the optimizer's documentation");
  };
  const double inf = std::numeric_limits<double>::infinity();
  positive("lr", o.lr, false, inf);
  positive("weight_decay", o.weight_decay, true, inf);
  if (f.has("momentum") && o.type != OptimizerType::sgd)
    c.fail(f.get("momentum"), f.sub("momentum"), "applies only to optimizer sgd (adamw uses betas)",
           "remove it or set run.optimizer.type: sgd");
  for (const char* k : {"betas", "eps"})
    if (f.has(k) && o.type != OptimizerType::adamw)
      c.fail(f.get(k), f.sub(k), "applies only to optimizer adamw", "remove it or set run.optimizer.type: adamw");
  positive("momentum", o.momentum, true, 1.0);
  positive("eps", o.eps, false, 1.0);
  if (f.has("betas")) {
    const YAML::Node b = f.get("betas");
    if (!b.IsSequence() || b.size() != 2)
      c.fail(b, f.sub("betas"), "expected [beta1, beta2], got " + spec_detail::describe(b), "e.g. betas: [0.9, 0.999]");
    double* dst[2] = {&o.beta1, &o.beta2};
    for (size_t i = 0; i < 2; ++i) {
      const std::string bp = f.sub("betas") + "[" + std::to_string(i) + "]";
      *dst[i] = read_float(c, b[i], bp);
      if (*dst[i] < 0 || *dst[i] >= 1) c.fail(b[i], bp, "must be in [0, 1)", "e.g. betas: [0.9, 0.999]");
    }
  }
  if (f.has("schedule")) read_schedule(c, f.get("schedule"), o);
}

// A path or a list of paths; relative ones are taken from the YAML file's directory unless --set put them there.
std::vector<std::string> read_paths(const Ctx& c, const YAML::Node& n, const std::string& path,
                                    std::vector<std::string>& resolved) {
  std::vector<std::string> out;
  auto one = [&](const YAML::Node& item, const std::string& p) {
    std::string v = read_string(c, item, p);
    if (v.empty()) c.fail(item, p, "is an empty path", "give a safetensors file or a directory of them");
    out.push_back(v);
  };
  if (n.IsSequence()) {
    if (n.size() == 0) c.fail(n, path, "is an empty list", "give at least one safetensors file or directory");
    for (size_t i = 0; i < n.size(); ++i) one(n[i], path + "[" + std::to_string(i) + "]");
  } else {
    one(n, path);
  }
  resolved.clear();
  for (const std::string& v : out) {
    std::filesystem::path p(v);
    if (p.is_relative() && !c.overridden(path)) p = std::filesystem::path(c.source()).parent_path() / p;
    resolved.push_back(p.lexically_normal().string());
  }
  return out;
}

void read_run(const Ctx& c, const YAML::Node& n, RunSpec& r) {
  Fields f(c, n, "run", map_keys("run"));
  if (f.has("mode")) r.mode = read_enum(c, f.get("mode"), "run.mode", kRunModes);
  if (f.has("executor")) r.executor = read_enum(c, f.get("executor"), "run.executor", kExecutors);
  if (f.has("cuda_graph")) r.cuda_graph = read_bool(c, f.get("cuda_graph"), "run.cuda_graph");
  if (f.has("weight_images")) r.weight_images = read_bool(c, f.get("weight_images"), "run.weight_images");
  if (f.has("activation_images"))
    r.activation_images = read_bool(c, f.get("activation_images"), "run.activation_images");
  if (f.has("device")) {
    r.device = read_string(c, f.get("device"), "run.device");
    bool ok = r.device == "auto" || r.device == "cpu" || r.device == "cuda";
    if (!ok && r.device.rfind("cuda:", 0) == 0 && r.device.size() > 5 && r.device.size() < 9) {
      ok = true;
      for (size_t i = 5; i < r.device.size(); ++i) ok = ok && std::isdigit(static_cast<unsigned char>(r.device[i]));
    }
    if (!ok)
      c.fail(f.get("device"), "run.device", "'" + r.device + "' is not a device",
             "use auto | cpu | cuda | cuda:N");
  }
  if (f.has("tokens"))
    r.tokens = read_int(c, f.get("tokens"), "run.tokens", 1, kMaxTokens, "tokens is the number of rows per step");
  if (f.has("steps")) r.steps = read_int(c, f.get("steps"), "run.steps", 1, INT64_MAX, "steps: how many steps to run");
  if (f.has("seed"))
    r.seed = static_cast<uint64_t>(read_int(c, f.get("seed"), "run.seed", 0, INT64_MAX, "seed: any integer ≥ 0"));
  if (f.has("optimizer")) read_optimizer(c, f.get("optimizer"), r.optimizer);
  if (f.has("data") && !f.get("data").IsNull()) r.data = read_paths(c, f.get("data"), "run.data", r.data_paths);
  if (f.has("eval_data") && !f.get("eval_data").IsNull())
    r.eval_data = read_paths(c, f.get("eval_data"), "run.eval_data", r.eval_data_paths);
  if (f.has("shuffle")) r.shuffle = read_bool(c, f.get("shuffle"), "run.shuffle");
  if (f.has("eval_every"))
    r.eval_every = read_int(c, f.get("eval_every"), "run.eval_every", 0, INT64_MAX, "eval_every: N steps (0: never)");
  if (f.has("eval_batches"))
    r.eval_batches = read_int(c, f.get("eval_batches"), "run.eval_batches", 0, INT64_MAX,
                              "eval_batches: batches per evaluation (0: all)");
  if (f.has("checkpoint_every"))
    r.checkpoint_every = read_int(c, f.get("checkpoint_every"), "run.checkpoint_every", 0, INT64_MAX,
                                  "checkpoint_every: N steps (0: only after the last step)");
  if (r.eval_every > 0 && r.eval_data.empty())
    c.fail(f.get("eval_every"), "run.eval_every", "is set but there is no eval set",
           "add run.eval_data (a safetensors file or directory with input/target) or remove eval_every");
}

ModelSpec validate(const Ctx& c, const YAML::Node& root) {
  ModelSpec s;
  s.source = c.source();
  if (!root.IsDefined() || root.IsNull())
    c.fail(root, "", "the spec is empty", "see models/tiny.yaml for a complete example");
  Fields top(c, root, "", map_keys(""), false);
  s.name = std::filesystem::path(c.source()).stem().string();
  if (top.has("name")) {
    s.name = read_string(c, top.get("name"), "name");
    if (s.name.empty() || s.name.size() > 128)
      c.fail(top.get("name"), "name", "must be 1 to 128 characters", "e.g. name: tiny");
  }
  // parallel first: the block's divisibility checks need tp.
  if (top.has("parallel")) read_parallel(c, top.get("parallel"), s.parallel);
  read_model(c, top.require("model", "add a model: section (hidden, layers, block)"), s.model, s.parallel.tp);
  if (top.has("precision")) read_precision(c, top.get("precision"), s.precision);
  if (top.has("run")) read_run(c, top.get("run"), s.run);
  if (s.run.cuda_graph) {  // what replay covers today
    const YAML::Node at = top.get("run")["cuda_graph"];
    if (s.parallel.tp != 1)
      c.fail(at, "run.cuda_graph", "needs tp 1 (the ranks' collectives are not captured yet)",
             "set parallel.tp: 1, or run.cuda_graph: false");
    // (A training step's warm-up steps are real steps, so its history counts them rightly.)
    if (s.precision.recipe == Recipe::fp8_delayed && s.run.mode == RunMode::infer)
      c.fail(at, "run.cuda_graph",
             "fp8_delayed's amax history would take the capture's warm-up forwards as steps (other outputs)",
             "use another recipe (fp8_current keeps per-tensor FP8), or run.cuda_graph: false");
  }
  if (s.parallel.sequence_parallel && s.run.tokens % s.parallel.tp != 0) {
    const bool explicit_tokens = top.has("run") && top.get("run").IsMap() && top.get("run")["tokens"];
    const YAML::Node at = explicit_tokens ? YAML::Node(top.get("run")["tokens"]) : top.get("parallel");
    const int64_t tp = s.parallel.tp, t = s.run.tokens;
    c.fail(at, explicit_tokens ? "run.tokens" : "parallel.sequence_parallel",
           "tokens " + std::to_string(t) + " is not divisible by tp " + std::to_string(tp) +
               " (sequence parallelism splits the tokens over the ranks)",
           "use tokens " + std::to_string(t / tp * tp > 0 ? t / tp * tp : tp) + " or " +
               std::to_string((t / tp + 1) * tp) + ", or set parallel.sequence_parallel: false");
  }
  for (const Branch& br : s.model.block)
    for (const LayerSpec& l : br)
      if (l.kind == LayerKind::attention && s.run.tokens % l.attention.seq_len != 0) {
        const bool explicit_tokens = top.has("run") && top.get("run").IsMap() && top.get("run")["tokens"];
        const int64_t t = s.run.tokens, n = l.attention.seq_len;
        c.fail(explicit_tokens ? YAML::Node(top.get("run")["tokens"]) : top.get("model"),
               explicit_tokens ? "run.tokens" : l.path + ".attention.seq_len",
               "tokens " + std::to_string(t) + " are not whole sequences of seq_len " + std::to_string(n) +
                   " (attention '" + l.name + "')",
               "use tokens " + (t / n > 0 ? std::to_string(t / n * n) + " or " : std::string()) +
                   std::to_string((t / n + 1) * n) + " (batch × seq_len)");
      }
  if (top.has("weights")) {
    const YAML::Node w = top.get("weights");
    if (!w.IsNull()) {
      s.weights = read_string(c, w, "weights");
      if (s.weights.empty()) c.fail(w, "weights", "is an empty path", "write weights: null for seeded init");
      std::filesystem::path wp(s.weights);
      if (wp.is_relative() && !c.overridden("weights"))
        wp = std::filesystem::path(c.source()).parent_path() / wp;
      s.weights_path = wp.lexically_normal().string();
    }
  }
  return s;
}
}  // namespace

// ---- names -------------------------------------------------------------------------------------------------------

ModelSpec parse_spec(std::string_view yaml, const std::string& source, const std::vector<std::string>& sets) {
  std::vector<SpecOverride> overrides;
  for (const auto& s : sets) overrides.push_back(parse_override(s));
  const Ctx ctx(source, overrides);
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml));
  } catch (const YAML::ParserException& e) {
    TE_INPUT_ERROR(printable_path(source) << ":" << e.mark.line + 1 << ":" << e.mark.column + 1
                                          << ": YAML syntax error: " << printable(e.msg),
                   "fix the YAML syntax at that line (indentation, ':' after keys, matching brackets)");
  } catch (const YAML::Exception& e) {
    TE_INPUT_ERROR(printable_path(source) << ": cannot read the YAML: " << printable(e.msg),
                   "check the file is YAML text");
  }
  try {
    spec_detail::apply_overrides(root, overrides);
    return validate(ctx, root);
  } catch (const YAML::Exception& e) {
    // yaml-cpp refuses some operation on a malformed tree that the checks above did not anticipate.
    TE_INPUT_ERROR(printable_path(source) << ": invalid spec: " << printable(e.msg),
                   "compare the file with models/tiny.yaml");
  }
}

ModelSpec load_spec_file(const std::string& path, const std::vector<std::string>& sets) {
  const std::string shown = printable_path(path);
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) TE_INPUT_ERROR(shown << ": is a directory", "pass a .yaml file");
  if (std::filesystem::exists(path, ec) && !std::filesystem::is_regular_file(path, ec))
    TE_INPUT_ERROR(shown << ": is not a regular file (a FIFO, device or socket)", "pass a .yaml file");
  // A spec is a few KB: a large file (weights passed as the spec) is refused before it is read into memory.
  const auto size = std::filesystem::file_size(path, ec);
  if (!ec && size > kMaxSpecBytes)
    TE_INPUT_ERROR(shown << ": " << size << " bytes is too large for a model spec (limit " << kMaxSpecBytes << ")",
                   "pass the .yaml spec; weights go in its weights: field");
  std::ifstream f(path, std::ios::binary);
  if (!f) TE_INPUT_ERROR(shown << ": cannot open the model spec", "check the path (e.g. models/tiny.yaml)");
  std::ostringstream ss;
  ss << f.rdbuf();
  return parse_spec(ss.str(), path, sets);
}

}  // namespace te
