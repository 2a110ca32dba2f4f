// Activations (and fused quantize)
#include <cstdio>

#include "tools/teengine/commands.h"

namespace te::cli {
Command add_bench_act(CLI::App& app) {
  CLI::App* sub = app.add_subcommand("act", "Activations (and fused quantize)");
  sub->allow_extras();
  return {sub, [] {
            std::fprintf(stderr, "teengine: 'act' is not built yet\n");
            return 2;
          }};
}
}  // namespace te::cli
