// The fuzz entry points, shared by the libFuzzer targets (tests/fuzz/fuzz_*.cpp) and the corpus replay test that
// runs in every plain build. Each feeds bytes to one parser or API; input errors (te::InputError, or a
// teengine::Error with is_input_error()) are the only exceptions allowed out and are caught here, so anything else
// escaping (or a crash, a hang, a leak) is a bug.
#pragma once
#include <cstddef>
#include <cstdint>

namespace te::fuzz {
// Bytes → YAML → validated ModelSpec. A first line "#set A=B C=D" is taken as --set overrides.
void spec_one(const uint8_t* data, size_t size);
// Bytes → safetensors reader; every tensor is read and, for a valid file, re-encoded and compared.
void safetensors_one(const uint8_t* data, size_t size);
// The same bytes written to a file and read with SafetensorsReader::open, the path the CLI takes (--input,
// weights:, inspect): the first tensors are read whole and as a shard.
void safetensors_file_one(const uint8_t* data, size_t size);
// Each line is one --set argument applied to models/tiny.yaml's spec.
void set_one(const uint8_t* data, size_t size);
// Lines "FLAG PATH" (FLAG: --output, --json, --save-weights, or "input" for an input of the run) → the CLI's
// OutputSet checks. Plain names that pass are then staged in a scratch directory and either committed or dropped;
// the directory must hold exactly the committed files afterwards.
void output_set_one(const uint8_t* data, size_t size);
// Bytes → a HostTensor (byte 0: rank and mode, byte 1: dtype, then little-endian int64 dimensions, then the data)
// → Engine::forward, train_step or stage on a small CPU model.
void forward_one(const uint8_t* data, size_t size);
}  // namespace te::fuzz
