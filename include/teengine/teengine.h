// teengine public API: build an Engine from a model spec, load weights, run forward or a training step, read
// metrics. Everything a serving binary needs is here; nothing else in the tree is part of the stable API.
//
//   #include <teengine/teengine.h>
//   auto engine = teengine::Engine::from_yaml("models/tiny.yaml");            // may throw teengine::Error
//   teengine::HostTensor x = teengine::HostTensor::from_floats({256, 256}, values);  // [tokens, hidden]
//   teengine::HostTensor y = engine.forward(x);                               // [tokens, hidden], model dtype
//   std::puts(engine.metrics_json().c_str());
//
// Thread safety and concurrency: every Engine method may be called from any thread. The ranks run one call at a time
// (forward, train_step, stage, to_host, weights and checkpoints take one lock per Engine), and each call's work
// itself is spread over the ranks and, on the CPU, a pool of GEMM threads. Several requests in flight are served by
// dynamic batching, not by running forwards side by side: with set_batching on, concurrent forward(HostTensor)
// calls are concatenated along the tokens into one forward and each caller gets its own rows (BatchingOptions says
// when that leaves outputs unchanged). Without it, concurrent forward() calls simply queue on the lock. Limits: a
// batch waits for the forward before it; staged and device forwards are never batched; train_step must not run
// concurrently with other calls on the same Engine.
// Several processes: started by a launcher (`teengine launch -n N`, or torchrun's variables RANK, WORLD_SIZE,
// LOCAL_RANK, MASTER_ADDR, MASTER_PORT), from_yaml joins the group: this process is rank RANK of parallel.tp, on GPU
// LOCAL_RANK (nccl) or the CPU (gloo), and holds only its shard of the weights. Then forward, train_step,
// load_weights and save_weights are collective: every rank calls them in the same order with the same input (each
// rank takes its own tokens from it); forward returns the whole output on every rank; save_weights writes the file
// on rank 0 only. metrics_json is local (its figures were combined over the ranks at each step).
// Errors: every failure throws teengine::Error (a std::runtime_error) whose what() names the file/field and the
// fix; is_input_error() tells bad input (spec, weights, shapes) from runtime failures.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace teengine {

class Error : public std::runtime_error {
 public:
  Error(const std::string& what, bool input_error) : std::runtime_error(what), input_error_(input_error) {}
  bool is_input_error() const { return input_error_; }

 private:
  bool input_error_;
};

// A host-memory tensor: row-major, dtype "f32" | "bf16" | "f16".
struct HostTensor {
  std::vector<int64_t> shape;
  std::string dtype = "f32";
  std::vector<uint8_t> bytes;

  static HostTensor from_floats(std::vector<int64_t> shape, const std::vector<float>& values);
  std::vector<float> to_floats() const;
  // The product of the dimensions; an Error with is_input_error() for a negative dimension or a product past 2^56.
  int64_t numel() const;
};

// A [tokens, hidden] tensor held where the engine's ranks compute: each rank's rows, in the model dtype. Stage an
// input once and pass it to many calls: the host conversion and the host→device copy happen once, not every call.
// A forward of a staged input returns its output staged, so nothing crosses back to the host until to_host().
// Copies share the data. Only the engine that staged it can use it.
class StagedTensor {
 public:
  StagedTensor();
  ~StagedTensor();
  StagedTensor(const StagedTensor&);
  StagedTensor& operator=(const StagedTensor&);
  int64_t tokens() const;
  bool defined() const;

  struct Impl;  // the library's
  explicit StagedTensor(std::shared_ptr<const Impl> impl);
  const Impl* impl() const { return impl_.get(); }

 private:
  std::shared_ptr<const Impl> impl_;
};

// Dynamic batching of concurrent forward(HostTensor) calls (Engine::set_batching). A worker thread of the engine
// takes the oldest queued request and, in arrival order, every other one of the same input dtype that fits in
// max_batch_tokens, after waiting up to max_wait_us (counted from the oldest's arrival) for company or until that
// many tokens are queued; it runs them as one forward and splits the output back. Requests that arrive while a
// forward runs queue for the next, so under load batches form even with max_wait_us 0.
//
// Exactness. With recipes that quantize the input per token (none, fp8_block, mxfp8: tokens_independent()) no value
// of one request enters another's computation, and on the CPU each request's output is byte-identical to running it
// alone: the CPU's forward GEMM computes every output element as one chain of fused multiply-adds in a fixed order,
// whatever the rows beside it (ops/gemm/row_gemm.h; tests/models/test_batching.cpp checks it). On a GPU the outputs are equal in exact arithmetic, but cuBLASLt picks
// its algorithm by the GEMM's shape, the token count included, so a batched row may round differently in the last
// bits of the model dtype; that is not tested for byte identity. Recipes that scale the input per tensor
// (fp8_current, fp8_delayed, nvfp4) take the scale from the amax of the whole forward input (fp8_delayed: of earlier
// forwards), so batching changes every request's output and moves delayed scaling's history by the batch's
// contents: set_batching refuses them unless allow_per_tensor_scaling is set.
// Under sequence parallelism a forward's token count must be a multiple of tp (token_multiple()): for per-token
// recipes a batch is padded with zero rows (dropped from the replies), so any token count is accepted; otherwise
// each request must be a multiple itself. With attention every request must be whole sequences (a multiple of
// seq_len), and then batching keeps each request's bytes as well: sequences do not attend to each other, and the
// padding is whole zero sequences.
struct BatchingOptions {
  bool enabled = false;
  int64_t max_batch_tokens = 4096;  // a batch never holds more; a larger request still runs, alone
  int64_t max_wait_us = 0;          // how long the oldest queued request waits for company
  bool allow_per_tensor_scaling = false;
};

class Engine {
 public:
  // `overrides` are "a.b=value" strings applied to the spec before validation (as `teengine run --set`), e.g.
  // "run.mode=infer", "precision.recipe=mxfp8", or "run.cuda_graph=true": on a GPU at tp 1 each token count's
  // forward is then captured once as a CUDA graph and replayed (forward, staged and device forwards alike; at most
  // 8 token counts keep a capture; ignored with a warning on the CPU; docs/MODEL-YAML.md lists every key).
  static Engine from_yaml(const std::string& path, const std::vector<std::string>& overrides = {});
  static Engine from_yaml_string(const std::string& yaml, const std::vector<std::string>& overrides = {});
  Engine(Engine&&) noexcept;
  Engine& operator=(Engine&&) noexcept;
  ~Engine();

  void load_weights(const std::string& safetensors_path);  // global (unsharded) tensors, TE names
  void save_weights(const std::string& safetensors_path) const;

  int64_t hidden() const;  // model.hidden: the last dimension of every input and output
  int rank() const;        // this process's rank in a launched group (parallel.comm gloo/nccl); 0 otherwise
  int world_size() const;  // parallel.tp
  int64_t tokens() const;  // run.tokens of the spec (any multiple of tp works under sequence parallelism)
  // A forward's token count must be a multiple of this: tp under SP (else 1), and with attention layers also their
  // seq_len (tokens are whole sequences): the least common multiple.
  int64_t token_multiple() const;
  std::string recipe() const;      // precision.recipe: none | fp8_delayed | fp8_current | fp8_block | mxfp8 | nvfp4
  std::string dtype() const;       // model.dtype: the dtype of every output
  // True when each token's output depends on that token alone: the block has no attention, and the recipe
  // quantizes the input unquantized or per block within a token (none, fp8_block, mxfp8). False for per-tensor
  // scaling (fp8_delayed, fp8_current, nvfp4). BatchingOptions says what it means for batching.
  bool tokens_independent() const;

  // input [tokens, hidden] in any float dtype → output [tokens, hidden] in the model dtype. Batched with other
  // threads' calls when set_batching is on.
  HostTensor forward(const HostTensor& input);
  // The forward on buffers the caller owns, where the engine computes, with no host copy: `input` holds
  // [tokens, hidden] row-major in `input_dtype` (f32, bf16 or f16), `output` receives [tokens, hidden] in dtype().
  // On a GPU engine both are device memory of the engine's GPU and `stream` is the caller's cudaStream_t (nullptr:
  // the legacy default stream): the engine's streams first wait for the work queued on `stream` before the call
  // (e.g. what writes `input`), so the caller need not synchronise. On a CPU engine both are host memory and
  // `stream` must be nullptr. Returns once `output` is written (the host waits for the forward); `input` is only
  // read. Needs the ranks in this process (parallel.comm local: a multi-process engine is refused) and, under
  // sequence parallelism, a token count that is a multiple of tp. Never batched; recorded in the metrics as a step.
  void forward_device(const void* input, const std::string& input_dtype, void* output, int64_t tokens,
                      void* stream = nullptr);
  // Dynamic batching (BatchingOptions above); off by default. Refused (input Error) for a multi-process engine, and
  // for per-tensor recipes unless allow_per_tensor_scaling. May be called at any time: new options apply to the
  // requests already queued (max_wait_us 0 sends them now, e.g. before a shutdown); switching it off runs what is
  // queued, then forward() runs each call alone again.
  void set_batching(const BatchingOptions& options);
  BatchingOptions batching() const;
  // One optimizer step on MSE(forward(input), target); returns the loss. A non-finite loss skips the update, so
  // the weights (and save_weights) stay those of the last good step. The learning rate of step s is the spec's
  // schedule at s (run.optimizer.schedule; last_lr() tells it), s counting every step since the start of training
  // (a loaded checkpoint's steps included: step()).
  float train_step(const HostTensor& input, const HostTensor& target);

  // The same on staged tensors (see StagedTensor). stage() checks shape and dtype as forward() does.
  StagedTensor stage(const HostTensor& tensor);
  StagedTensor forward(const StagedTensor& input);
  float train_step(const StagedTensor& input, const StagedTensor& target);
  HostTensor to_host(const StagedTensor& tensor);  // [tokens, hidden], model dtype

  // Training runs. eval_loss: the loss train_step would report, with no update (weights, optimizer and scaling
  // state unchanged); record_eval(step, loss) puts a figure (e.g. the mean over an eval set) into metrics_json's
  // `eval`. A checkpoint holds the global f32 masters, optimizer state, delayed-scaling state and step() in one
  // safetensors file, whatever tp wrote it (save_checkpoint is collective; rank 0 writes, atomically; `metadata`
  // joins its header). load_checkpoint restores it and returns the header's metadata: training then continues
  // bit-identically to a run never stopped. A checkpoint of another model, recipe or optimizer type is an input
  // Error naming the file and the spec field that differs (and leaves the engine as it was); other
  // hyper-parameters only log a warning. Both need run.mode: train.
  float eval_loss(const StagedTensor& input, const StagedTensor& target);
  void record_eval(int64_t step, float loss);
  void save_checkpoint(const std::string& path, const std::map<std::string, std::string>& metadata = {}) const;
  std::map<std::string, std::string> load_checkpoint(const std::string& path);
  int64_t step() const;   // optimizer steps taken (a loaded checkpoint's included)
  double last_lr() const; // the learning rate of the last train_step (0 before the first)

  // The `teengine run --json` object: per step, `step_ms` (wall time of the call, host work included) and
  // `device_ms` (the ranks' work on their streams, GPU events; the compute's wall time on the CPU), the slowest rank's;
  // `loss` and `lr` per train_step, `first_step` (a loaded checkpoint's step), `eval` [{step, loss}] and `eval_loss`
  // (the last, or null). Bounded for long-running processes: `steps`, `tokens_total`, `tokens_per_s` and
  // `step_ms_histogram` cover every step (each forward, batched or not, and each train_step); the lists `step_ms`,
  // `device_ms`, `loss`, `lr` and `eval` keep only the last `step_window` (1024) entries, oldest first.
  // `step_ms_histogram` is {"le_ms": [0.01, 0.02, 0.04, … ×2 …, null], "counts", "count", "sum_ms"}: counts[i] steps
  // took step_ms in (le_ms[i-1], le_ms[i]] (not cumulative); null is +infinity. `batching`: {"enabled"} and, when
  // on, "batches", "requests", "padded_tokens" and the histograms "requests_per_batch" and "tokens_per_batch" (same
  // form, keys "le" and "sum"). `comm` counts every gather and reduction since the engine was built; `peak_bytes`
  // and `per_process` are as of the last step. `memory_at_peak` [{label, bytes, blocks}]: with TEENGINE_MEMORY_TRACE=1
  // in the environment, the live device bytes at the allocator's peak by the graph node that allocated them (most
  // first); empty otherwise. Safe to call while other threads run forward().
  std::string metrics_json() const;
  double last_step_ms() const;  // the last entry of step_ms (0 before the first step)
  std::string explain() const;       // the plan, as `teengine run --explain` prints it

  struct Impl;  // the library's; users never construct one
  explicit Engine(std::unique_ptr<Impl> impl);

 private:
  std::unique_ptr<Impl> impl_;
};

const char* version();

// Logging. The engine's warnings (and info/debug lines, by level) go to stderr as "[teengine LEVEL] message" unless
// a sink is set. The sink is process-wide: it receives every Engine's lines, from whichever thread logs (engine
// worker threads included), one call at a time; it must not call back into the engine. nullptr restores stderr.
// Returns the previous sink (nullptr when there was none).
enum class LogLevel { error = 0, warn = 1, info = 2, debug = 3 };
using LogSink = std::function<void(LogLevel level, const std::string& message)>;
LogSink set_log_sink(LogSink sink);
// Lines above `level` are dropped before they are formatted. The initial level is TEENGINE_LOG (default warn).
void set_log_level(LogLevel level);

}  // namespace teengine
