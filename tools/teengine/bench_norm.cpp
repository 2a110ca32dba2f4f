// LayerNorm/RMSNorm (and fused quantize) against copy bandwidth
#include <cstdio>

#include "tools/teengine/commands.h"

namespace te::cli {
Command add_bench_norm(CLI::App& app) {
  CLI::App* sub = app.add_subcommand("norm", "LayerNorm/RMSNorm (and fused quantize) against copy bandwidth");
  sub->allow_extras();
  return {sub, [] {
            std::fprintf(stderr, "teengine: 'norm' is not built yet\n");
            return 2;
          }};
}
}  // namespace te::cli
