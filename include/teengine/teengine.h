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
// Errors: every failure throws teengine::Error (a std::runtime_error) whose what() names the file/field and the
// fix; is_input_error() tells bad input (spec, weights, shapes) from runtime failures.
#pragma once
#include <cstdint>
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
  int64_t numel() const;
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
  int64_t tokens() const;  // run.tokens of the spec (any multiple of tp works under sequence parallelism)

  // input [tokens, hidden] in any float dtype → output [tokens, hidden] in the model dtype.
  HostTensor forward(const HostTensor& input);
  // One optimizer step on MSE(forward(input), target); returns the loss. A non-finite loss skips the update, so
  // the weights (and save_weights) stay those of the last good step.
  float train_step(const HostTensor& input, const HostTensor& target);

  std::string metrics_json() const;  // the `teengine run --json` object
  std::string explain() const;       // the plan, as `teengine run --explain` prints it

  struct Impl;  // the library's; users never construct one
  explicit Engine(std::unique_ptr<Impl> impl);

 private:
  std::unique_ptr<Impl> impl_;
};

const char* version();

}  // namespace teengine
