// The small model specs the models tests build from parts: `layers` layers at `hidden` of a block that is a
// LayerNorm → QKV → proj branch (unless left out) and a LayerNorm → MLP branch, on the local communicator.
#pragma once
#include <cstdint>
#include <string>

namespace te::test {

struct SmallSpec {
  std::string name = "test";
  int64_t hidden = 128, layers = 1, qkv = 256, ffn = 256;
  bool linear_branch = true;  // the qkv → proj branch before the MLP
  std::string dtype = "bf16";
  int tp = 1;
  bool sp = true;
  std::string recipe = "none";
  std::string recipe_options = "";  // appended inside precision: {...}, e.g. ", amax_history_len: 4"
  std::string mode = "infer";
  std::string device = "";     // empty: the spec's default (auto)
  int64_t tokens = 64;
  int64_t steps = 0;           // 0: the spec's default
  uint64_t seed = 1;
  std::string optimizer = "";  // e.g. "{type: sgd, lr: 0.1}"; empty: the default

  std::string yaml() const {
    std::string y = "name: " + name + "\nmodel:\n  hidden: " + std::to_string(hidden) +
                    "\n  layers: " + std::to_string(layers) + "\n  dtype: " + dtype +
                    "\n  norm: {type: layernorm, eps: 1.0e-5}\n  block:\n";
    if (linear_branch)
      y += "    - [ {layernorm_linear: {name: qkv, out: " + std::to_string(qkv) + "}}, {linear: {name: proj, out: " +
           std::to_string(hidden) + "}} ]\n";
    y += "    - [ {layernorm_mlp: {name: mlp, ffn: " + std::to_string(ffn) + ", activation: gelu}} ]\n";
    y += "parallel: {tp: " + std::to_string(tp) + ", sequence_parallel: " + (sp ? "true" : "false") +
         ", comm: local}\n";
    y += "precision: {recipe: " + recipe + recipe_options + "}\n";
    // run: last and in block style, so a test can append its own run keys ("  data: ...").
    y += "run:\n  mode: " + mode + "\n" + (device.empty() ? "" : "  device: " + device + "\n") +
         "  tokens: " + std::to_string(tokens) + "\n" + (steps > 0 ? "  steps: " + std::to_string(steps) + "\n" : "") +
         "  seed: " + std::to_string(seed) + "\n" + (optimizer.empty() ? "" : "  optimizer: " + optimizer + "\n");
    return y;
  }
};

}  // namespace te::test
