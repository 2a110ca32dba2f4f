// List tensors, dtypes, shapes and statistics of a safetensors file
#include <cstdio>

#include "tools/teengine/commands.h"

namespace te::cli {
Command add_inspect_command(CLI::App& app) {
  CLI::App* sub = app.add_subcommand("inspect", "List tensors, dtypes, shapes and statistics of a safetensors file");
  sub->allow_extras();
  return {sub, [] {
            std::fprintf(stderr, "teengine: 'inspect' is not built yet\n");
            return 2;
          }};
}
}  // namespace te::cli
