// Run a model spec (inference or training)
#include <cstdio>

#include "tools/teengine/commands.h"

namespace te::cli {
Command add_run_command(CLI::App& app) {
  CLI::App* sub = app.add_subcommand("run", "Run a model spec (inference or training)");
  sub->allow_extras();
  return {sub, [] {
            std::fprintf(stderr, "teengine: 'run' is not built yet\n");
            return 2;
          }};
}
}  // namespace te::cli
