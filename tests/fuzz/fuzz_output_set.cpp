// libFuzzer target: lines "FLAG PATH" → the CLI's output set (tools/fuzz.sh builds and runs it).
#include "tests/fuzz/fuzz_entries.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  te::fuzz::output_set_one(data, size);
  return 0;
}
