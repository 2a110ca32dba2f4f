// The fuzz entry points, shared by the libFuzzer targets (fuzz_spec, fuzz_safetensors) and the corpus replay test
// that runs in every plain build. Each feeds bytes to a parser; te::InputError is the only exception allowed out of
// the parser and is caught here, so anything else escaping (or a crash) is a bug.
#pragma once
#include <cstddef>
#include <cstdint>

namespace te::fuzz {
// Bytes → YAML → validated ModelSpec. A first line "#set A=B C=D" is taken as --set overrides.
void spec_one(const uint8_t* data, size_t size);
// Bytes → safetensors reader; every tensor is read and, for a valid file, re-encoded and compared.
void safetensors_one(const uint8_t* data, size_t size);
}  // namespace te::fuzz
