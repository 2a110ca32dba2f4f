// The public API's fuzz entry point: arbitrary HostTensors against small CPU engines (Engine::forward, train_step,
// stage). It links libteengine, apart from the parser entries (fuzz_entries.cpp).
#include <teengine/teengine.h>

#include <cstring>
#include <string>

#include "tests/fuzz/fuzz_entries.h"

namespace te::fuzz {
namespace {
std::string fuzzed_model(const char* mode) {
  return std::string("model:\n  hidden: 16\n  layers: 1\n  dtype: bf16\n  block:\n"
                     "    - [ {layernorm_mlp: {name: mlp, ffn: 32, activation: gelu}} ]\n"
                     "parallel: {tp: 2, sequence_parallel: true, comm: local}\nprecision: {recipe: fp8_current}\n"
                     "run: {device: cpu, tokens: 4, mode: ") +
         mode + ", optimizer: {type: sgd, lr: 0.01}}\n";
}
// Dtype names a caller might send: the three supported, wrong ones, and one that would drive a terminal if echoed.
constexpr const char* kDTypes[] = {"f32", "bf16", "f16", "f64", "int8", "", "F32", "\x1b[2Jf32"};
}  // namespace

void forward_one(const uint8_t* data, size_t size) {
  static teengine::Engine infer = teengine::Engine::from_yaml_string(fuzzed_model("infer"));
  static teengine::Engine train = teengine::Engine::from_yaml_string(fuzzed_model("train"));
  if (size < 2) return;
  const int rank = data[0] & 7, mode = data[0] >> 6;
  teengine::HostTensor h;
  h.dtype = kDTypes[data[1] & 7];
  size_t pos = 2;
  for (int d = 0; d < rank && pos + 8 <= size; ++d, pos += 8) {
    int64_t v = 0;
    std::memcpy(&v, data + pos, 8);
    h.shape.push_back(v);
  }
  h.bytes.assign(data + pos, data + size);
  try {
    (void)h.numel();
    switch (mode) {
      case 0: (void)infer.forward(h); break;
      case 1: (void)infer.train_step(h, h); break;  // an inference engine: always an input error
      case 2: (void)infer.to_host(infer.forward(infer.stage(h))); break;
      default: (void)train.train_step(h, h); break;
    }
  } catch (const teengine::Error& e) {
    if (!e.is_input_error()) throw;  // a request may be wrong; it must never break the engine
  }
}

}  // namespace te::fuzz
