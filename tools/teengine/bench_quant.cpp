// Quantization kernels against a device-to-device copy
#include <cstdio>

#include "tools/teengine/commands.h"

namespace te::cli {
Command add_bench_quant(CLI::App& app) {
  CLI::App* sub = app.add_subcommand("quant", "Quantization kernels against a device-to-device copy");
  sub->allow_extras();
  return {sub, [] {
            std::fprintf(stderr, "teengine: 'quant' is not built yet\n");
            return 2;
          }};
}
}  // namespace te::cli
