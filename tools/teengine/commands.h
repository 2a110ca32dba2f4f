// Each subcommand registers itself on the CLI11 app and returns the function that runs it.
// One file per command (cmd_*.cpp) and per benchmark (bench_*.cpp).
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
Command add_run_command(CLI::App& app);
Command add_inspect_command(CLI::App& app);
Command add_launch_command(CLI::App& app);
// `teengine bench <what>`: each adds itself under the `bench` subcommand.
Command add_bench_quant(CLI::App& bench);
Command add_bench_gemm(CLI::App& bench);
Command add_bench_norm(CLI::App& bench);
Command add_bench_act(CLI::App& bench);
Command add_bench_comm(CLI::App& bench);
Command add_bench_block(CLI::App& bench);
Command add_bench_sp(CLI::App& bench);
Command add_bench_attention(CLI::App& bench);
}  // namespace te::cli
