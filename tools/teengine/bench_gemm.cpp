// GEMMs against raw cuBLASLt
#include <cstdio>

#include "tools/teengine/commands.h"

namespace te::cli {
Command add_bench_gemm(CLI::App& app) {
  CLI::App* sub = app.add_subcommand("gemm", "GEMMs against raw cuBLASLt");
  sub->allow_extras();
  return {sub, [] {
            std::fprintf(stderr, "teengine: 'gemm' is not built yet\n");
            return 2;
          }};
}
}  // namespace te::cli
