// teengine public API: build an Engine from a model spec, load weights, run forward or a training step, read
// metrics. Everything a serving binary needs is here; nothing else in the tree is part of the stable API.
//
//   #include <teengine/teengine.h>
//   auto engine = teengine::Engine::from_yaml("models/tiny.yaml");            // may throw teengine::Error
//   teengine::HostTensor x = teengine::HostTensor::from_floats({256, 256}, values);  // [tokens, hidden]
//   teengine::HostTensor y = engine.forward(x);                               // [tokens, hidden], model dtype
//   std::puts(engine.metrics_json().c_str());
//
// Thread safety: concurrent forward() calls on one Engine are safe (they are serialised internally and each sees
// the same weights); train_step() must not run concurrently with anything else on the same Engine.
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

class Engine {
 public:
  // `overrides` are "a.b=value" strings applied to the spec before validation (as `teengine run --set`).
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

  // input [tokens, hidden] in any float dtype → output [tokens, hidden] in the model dtype.
  HostTensor forward(const HostTensor& input);
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
  // (the last, or null).
  std::string metrics_json() const;
  double last_step_ms() const;  // the last entry of step_ms (0 before the first step)
  std::string explain() const;       // the plan, as `teengine run --explain` prints it

  struct Impl;  // the library's; users never construct one
  explicit Engine(std::unique_ptr<Impl> impl);

 private:
  std::unique_ptr<Impl> impl_;
};

const char* version();

}  // namespace teengine
