// libFuzzer target: lines → --set arguments on the tiny spec (tools/fuzz.sh builds and runs it).
#include "tests/fuzz/fuzz_entries.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  te::fuzz::set_one(data, size);
  return 0;
}
