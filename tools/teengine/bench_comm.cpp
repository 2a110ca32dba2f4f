// Sequence-parallel gather paths: time and bytes
#include <cstdio>

#include "tools/teengine/commands.h"

namespace te::cli {
Command add_bench_comm(CLI::App& app) {
  CLI::App* sub = app.add_subcommand("comm", "Sequence-parallel gather paths: time and bytes");
  sub->allow_extras();
  return {sub, [] {
            std::fprintf(stderr, "teengine: 'comm' is not built yet\n");
            return 2;
          }};
}
}  // namespace te::cli
