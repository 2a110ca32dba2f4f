// A transformer block against its GEMM-only floor
#include <cstdio>

#include "tools/teengine/commands.h"

namespace te::cli {
Command add_bench_block(CLI::App& app) {
  CLI::App* sub = app.add_subcommand("block", "A transformer block against its GEMM-only floor");
  sub->allow_extras();
  return {sub, [] {
            std::fprintf(stderr, "teengine: 'block' is not built yet\n");
            return 2;
          }};
}
}  // namespace te::cli
