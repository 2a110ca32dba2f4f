// libFuzzer target: bytes written to a file → SafetensorsReader::open (tools/fuzz.sh builds and runs it).
#include "tests/fuzz/fuzz_entries.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  te::fuzz::safetensors_file_one(data, size);
  return 0;
}
