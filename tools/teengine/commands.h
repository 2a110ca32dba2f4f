// Each subcommand registers itself on the CLI11 app and returns the function that runs it.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>

namespace te::cli {
using Runner = std::function<int()>;
struct Command {
  CLI::App* sub;  // the parsed subcommand
  Runner run;     // runs it; returns the exit code
};
Command add_info_command(CLI::App& app);
}  // namespace te::cli
