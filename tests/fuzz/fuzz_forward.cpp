// libFuzzer target: bytes → HostTensor → Engine::forward / train_step / stage (tools/fuzz.sh builds and runs it).
#include "tests/fuzz/fuzz_entries.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  te::fuzz::forward_one(data, size);
  return 0;
}
