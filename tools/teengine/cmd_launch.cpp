// Start N processes on this host for the NCCL communicator
#include <cstdio>

#include "tools/teengine/commands.h"

namespace te::cli {
Command add_launch_command(CLI::App& app) {
  CLI::App* sub = app.add_subcommand("launch", "Start N processes on this host for the NCCL communicator");
  sub->allow_extras();
  return {sub, [] {
            std::fprintf(stderr, "teengine: 'launch' is not built yet\n");
            return 2;
          }};
}
}  // namespace te::cli
