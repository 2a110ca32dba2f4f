// The model spec (YAML; every key in docs/MODEL-YAML.md): parsed with yaml-cpp into a validated ModelSpec.
//
//   name: tiny
//   model:
//     hidden: 256
//     layers: 2
//     dtype: bf16                              # f32 | bf16 | f16
//     norm: {type: layernorm, eps: 1.0e-5}     # layernorm | rmsnorm
//     block:                                   # residual branches: x = x + branch(x), in order
//       - [ {layernorm_linear: {name: qkv, out: 768}}, {attention: {name: attn, heads: 4, seq_len: 128}},
//           {linear: {name: proj, out: 256}} ]
//       - [ {layernorm_mlp: {name: mlp, ffn: 1024, activation: gelu}} ]   # gelu | swiglu | relu
//   parallel: {tp: 4, sequence_parallel: true, comm: auto, timeout_s: 300}  # auto | local | gloo | nccl
//   precision: {recipe: fp8_block}             # none | fp8_delayed | fp8_current | fp8_block | mxfp8 | nvfp4
//   run: {mode: infer, device: auto, tokens: 1000, steps: 1, seed: 1234, optimizer: {type: adamw, lr: 1.0e-3}}
//   run:                                       # training on a dataset (docs/MODEL-YAML.md, "Training data")
//     data: data/        # safetensors file(s) or a directory of them: `input`/`target` [batches, tokens, hidden]
//     eval_data: eval.safetensors, eval_every: 100, eval_batches: 0, shuffle: true, checkpoint_every: 500
//     optimizer: {lr: 1.0e-3, schedule: {type: cosine, warmup_steps: 100, decay_steps: 0, min_lr: 1.0e-5}}
//   weights: null                              # safetensors path (global tensors); null → seeded init
//
// Every defect is a te::InputError whose message starts with the location (`FILE:LINE:COL` of the offending node,
// or `--set PATH=VALUE` when an override put it there), then the field path (`model.block[0][1].linear.out`), what
// is wrong, and a hint (did-you-mean for unknown keys and enum values).
//
// Parallel layout (Megatron): within a branch, layernorm_linear/linear alternate column-parallel (weight rows split
// by rank) then row-parallel (weight columns split, output reduced); layernorm_mlp is FC1 column, FC2 row. A branch
// must end row-parallel (or with layernorm_mlp) at `hidden` features so the residual add sees the full width. An
// attention sits between a column-parallel QKV projection and the row-parallel output projection: each rank runs
// its own heads, with no communication of its own.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/dtype.h"
#include "engine/tensor.h"
#include "ops/quant/quantizer.h"  // AmaxAlgo

namespace te {

enum class NormType : uint8_t { layernorm, rmsnorm };
enum class LayerKind : uint8_t { layernorm_linear, linear, layernorm_mlp, attention };
enum class Activation : uint8_t { gelu, swiglu, relu };
// How a linear's weight [out, in] is split over the tp ranks: column = rows (out) split, row = columns (in) split.
enum class ParallelMode : uint8_t { column, row };
enum class CommBackend : uint8_t { automatic, local, nccl, gloo };
enum class Recipe : uint8_t { none, fp8_delayed, fp8_current, fp8_block, mxfp8, nvfp4 };
enum class Fp8Format : uint8_t { e4m3, hybrid };  // hybrid: E4M3 forward, E5M2 gradients
enum class RunMode : uint8_t { infer, train };
enum class OptimizerType : uint8_t { sgd, adamw };

std::string_view norm_type_name(NormType v);
std::string_view layer_kind_name(LayerKind v);
std::string_view activation_name(Activation v);
std::string_view parallel_mode_name(ParallelMode v);
std::string_view comm_backend_name(CommBackend v);  // "auto" | "local" | "nccl" | "gloo"
std::string_view recipe_name(Recipe v);
std::string_view fp8_format_name(Fp8Format v);
std::string_view amax_algo_name(AmaxAlgo v);
std::string_view run_mode_name(RunMode v);
std::string_view optimizer_type_name(OptimizerType v);
std::optional<Recipe> recipe_from_name(std::string_view name);

// Self-attention over the QKV projection before it (ops/attention/attention.h has the QKV layout): tokens are
// batch-major sequences of seq_len, so every token count the model runs must be a multiple of it.
struct AttentionSpec {
  int64_t heads = 0;
  int64_t kv_heads = 0;     // grouped-query attention when fewer than heads; default heads
  int64_t head_dim = 0;     // default: the QKV projection's out / (heads + 2 · kv_heads)
  int64_t seq_len = 0;
  bool causal = true;
  double softmax_scale = 0.0;  // 0: 1 / sqrt(head_dim)
  double rotary_base = 0.0;    // rotary position embedding on queries and keys; 0: none
  bool deterministic = true;   // false: cuDNN's faster backward, dq accumulated with atomics (AttentionOptions)
};

struct LayerSpec {
  LayerKind kind = LayerKind::linear;
  std::string name;    // unique within the block; parameters live under layers.{i}.{name}.
  std::string path;    // "model.block[0][1]" (for messages downstream)
  int64_t in = 0;      // input features (global)
  int64_t out = 0;     // output features (global); layernorm_mlp: == in
  int64_t ffn = 0;     // layernorm_mlp: FC1 output features per half (swiglu: FC1 has 2·ffn rows)
  Activation activation = Activation::gelu;  // layernorm_mlp
  AttentionSpec attention;                   // attention
  bool bias = true;                          // optional key `bias: false` drops every bias of the layer
  // layernorm_linear/linear: column or row. layernorm_mlp: column (its FC1; FC2 is always row). attention: column
  // (its heads are split over the ranks).
  ParallelMode mode = ParallelMode::column;
  bool has_norm() const { return kind == LayerKind::layernorm_linear || kind == LayerKind::layernorm_mlp; }
  bool has_params() const { return kind != LayerKind::attention; }
};

using Branch = std::vector<LayerSpec>;

struct ModelSection {
  int64_t hidden = 0;
  int64_t layers = 1;
  DType dtype = DType::bf16;
  NormType norm = NormType::layernorm;
  double eps = 1e-5;
  std::vector<Branch> block;
};

struct ParallelSpec {
  int tp = 1;
  bool sequence_parallel = false;
  // local: every rank a thread of this process. gloo (CPU) / nccl (one GPU each): one rank per process, started by
  // `teengine launch` or any launcher that sets RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT. auto: nccl or gloo
  // when launched (by the device), local otherwise (models/rank_placement.h).
  CommBackend comm = CommBackend::automatic;
  // How long a rank waits for its peers (rendezvous and every collective) before it fails naming them; unset:
  // TEENGINE_COMM_TIMEOUT_MS, else 300 s.
  std::optional<double> timeout_s;
};

struct PrecisionSpec {
  Recipe recipe = Recipe::none;
  // Options; each applies to some recipes only (others are rejected). Defaults follow TransformerEngine.
  Fp8Format fp8_format = Fp8Format::hybrid;  // fp8_delayed/fp8_current default hybrid; fp8_block/mxfp8 e4m3
  int amax_history_len = 1024;               // fp8_delayed
  AmaxAlgo amax_algo = AmaxAlgo::max;        // fp8_delayed
  int margin = 0;                            // fp8_delayed
  bool pow2_scales = false;                  // fp8_current (default false), fp8_block (default true)
  double amax_epsilon = 0.0;                 // fp8_current, fp8_block
};

// The learning rate of step s (1-based), a pure function of s (models/lr_schedule.h): constant, or a linear
// warm-up over `warmup_steps` then a cosine decay to `min_lr` over `decay_steps` (0: the rest of run.steps).
enum class LrScheduleType : uint8_t { constant, cosine };
std::string_view lr_schedule_name(LrScheduleType v);
struct LrScheduleSpec {
  LrScheduleType type = LrScheduleType::constant;
  int64_t warmup_steps = 0;
  int64_t decay_steps = 0;
  double min_lr = 0.0;
};

struct OptimizerSpec {
  OptimizerType type = OptimizerType::adamw;
  double lr = 1e-3;  // the peak learning rate (after warm-up)
  LrScheduleSpec schedule;
  double weight_decay = 0.0;
  double momentum = 0.0;                     // sgd
  double beta1 = 0.9, beta2 = 0.999;         // adamw (`betas: [b1, b2]`)
  double eps = 1e-8;                         // adamw
};

// How the planned graph of a forward or a training step runs (models/model_graph.h, models/train_graph.h): graph —
// collectives on the communication stream, overlapping the compute that does not need them; eager — the same
// graph, every node in order on the compute stream (the serial baseline, and simpler to profile and debug).
enum class ForwardExecutor : uint8_t { graph, eager };
std::string_view executor_name(ForwardExecutor v);

struct RunSpec {
  RunMode mode = RunMode::infer;
  ForwardExecutor executor = ForwardExecutor::graph;
  // Inference on a GPU at tp 1: each token count's forward is captured as a CUDA graph once, then replayed (no
  // launch gaps). Ignored, with a warning, where the run lands on the CPU.
  bool cuda_graph = false;
  // Where a GEMM has no kernel for a quantized operand's format and would dequantize it (MXFP8 / NVFP4 on Hopper;
  // every format on the CPU), the pass that quantizes the operand also writes its exact high-precision image and the
  // GEMM reads that: the weights (inference: once at load; training: once per step) and the activations and
  // gradients. Faster, more memory; the results are the same bytes either way.
  bool weight_images = true;
  bool activation_images = true;
  std::string device = "auto";  // auto | cpu | cuda | cuda:N
  int64_t tokens = 1024;
  int64_t steps = 1;
  uint64_t seed = 1234;
  OptimizerSpec optimizer;
  // Training data (models/dataset.h): safetensors files, each a directory of them or one file, as written and
  // resolved (relative to the YAML file's directory; to the working directory when set with --set). Empty: the
  // CLI's --input, else a seeded batch.
  std::vector<std::string> data, data_paths;
  std::vector<std::string> eval_data, eval_data_paths;  // the eval set, same format
  bool shuffle = true;            // a new batch order each epoch, seeded by `seed` (models/dataset.h)
  int64_t eval_every = 0;         // eval loss every N steps and after the last (0: never)
  int64_t eval_batches = 0;       // batches of eval_data per evaluation (0: all)
  int64_t checkpoint_every = 0;   // a checkpoint every N steps into --checkpoint-dir (0: only after the last)
};

struct ModelSpec {
  std::string source;  // the YAML file (or label) it came from
  std::string name;    // defaults to the file's stem
  ModelSection model;
  ParallelSpec parallel;
  PrecisionSpec precision;
  RunSpec run;
  // Weights file as written, and resolved: relative paths from the YAML file are taken relative to its directory,
  // paths given with --set relative to the working directory. Empty: seeded init.
  std::string weights, weights_path;
};

// One parameter of the model, global (unsharded) shape; the engine shards it by rank.
enum class ParamRole : uint8_t { norm_weight, norm_bias, weight, bias };
struct ParamSpec {
  std::string name;    // layers.{i}.{module}.{layer_norm_weight|layer_norm_bias|weight|bias|fc1_*|fc2_*}
  Shape shape;         // global; weight = [out, in]
  ParamRole role = ParamRole::weight;
  int layer = 0;       // i
  const LayerSpec* module = nullptr;  // points into the ModelSpec it was listed from
  int shard_dim = -1;  // dimension split over tp ranks; -1: replicated (norm params, row-parallel bias)
  // swiglu FC1 ([2·ffn, in] weight / [2·ffn] bias): rows [0, ffn) are the gate (activated), [ffn, 2·ffn) the linear
  // half; each half is split over ranks separately so a rank holds matching gate/linear rows and the global tensor
  // does not depend on tp.
  bool gated_halves = false;
  // The QKV projection (weight or bias) of this grouped-query attention: the global rows interleave each key/value
  // group's query heads, key and value (TransformerEngine's layout), and a rank holds its groups' rows with the kinds
  // apart instead, every query head, then every key, then every value (qkv_kinds_apart), at any tp.
  const AttentionSpec* qkv_of = nullptr;
};
// Whether the QKV projection before attention `a` is stored with its heads' kinds apart on every rank
// (AttentionLayout::kinds_apart): for grouped-query attention, whose interleaved query heads are not one stride apart
// (cuDNN's fused attention then reads the projection's output in place instead of copying the query heads).
bool qkv_kinds_apart(const AttentionSpec& a);
// Every parameter in a fixed order (layer, branch, position, then norm/weight/bias), for init, loading and saving.
std::vector<ParamSpec> parameter_specs(const ModelSpec& spec);
// The shape rank `rank` of `tp` holds.
Shape local_shape(const ParamSpec& p, int tp);

// Parses "a.b[0].c=value" (--set). Throws te::InputError when there is no '=' or the path is malformed.
struct SpecOverride {
  std::string path, value, text;  // text: the argument as given
};
SpecOverride parse_override(const std::string& arg);

// Reads, overrides and validates. Throws te::InputError for every defect (including a missing file).
ModelSpec load_spec_file(const std::string& path, const std::vector<std::string>& sets = {});
// As load_spec_file, from text; `source` names it in messages (and its directory resolves relative weights).
ModelSpec parse_spec(std::string_view yaml, const std::string& source, const std::vector<std::string>& sets = {});

// What every token count the model runs must be a multiple of for its attention layers: the least common multiple
// of their seq_len (1 without attention).
int64_t sequence_multiple(const ModelSpec& spec);

// "4 heads / 2 kv of 64, seq 128, causal, rotary base 10000": what an attention layer computes.
std::string attention_summary(const AttentionSpec& a);

// A short human description (layers, shapes, parallel layout) for `teengine run --explain`.
std::string describe_spec(const ModelSpec& spec);

}  // namespace te
