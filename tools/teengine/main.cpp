// teengine: the command line. Maps te::InputError to exit 2, other te::Error to exit 1, usage errors to exit 2.
#include <teengine/teengine.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "engine/error.h"
#include "engine/log.h"
#include "engine/printable.h"
#include "te_config.h"
#include "tools/teengine/commands.h"

namespace {
// An error as a user reads it: what and where, the hint; the failing call and the source location only at
// TEENGINE_LOG=debug (they are for whoever debugs the engine, not for whoever fixes the input). Control characters
// that reached the message unescaped are escaped here, so no echo site can drive the terminal.
void print_error(const std::string& what) {
  const bool debug = te::log_enabled(te::LogLevel::debug);
  std::string out;
  size_t start = 0;
  while (start <= what.size()) {
    const size_t end = std::min(what.find('\n', start), what.size());
    const std::string line = what.substr(start, end - start);
    if (debug || (line.rfind("  call: ", 0) != 0 && line.rfind("  at: ", 0) != 0))
      out += (out.empty() ? "" : "\n") + line;
    start = end + 1;
  }
  std::fprintf(stderr, "%serror: %s\n", te::rank_prefix().c_str(), te::printable_lines(out).c_str());
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"teengine — transformer blocks with tensor/sequence parallelism and low-precision recipes"};
  app.set_version_flag("--version", std::string("teengine ") + TE_VERSION);
  app.require_subcommand(1);
  CLI::App* bench = app.add_subcommand("bench", "Validate, then time, one configuration (JSON with --json)");
  bench->require_subcommand(1);
  const std::vector<te::cli::Command> commands = {
      te::cli::add_info_command(app),   te::cli::add_run_command(app),    te::cli::add_inspect_command(app),
      te::cli::add_launch_command(app), te::cli::add_bench_quant(*bench), te::cli::add_bench_gemm(*bench),
      te::cli::add_bench_norm(*bench),  te::cli::add_bench_act(*bench),   te::cli::add_bench_comm(*bench),
      te::cli::add_bench_block(*bench), te::cli::add_bench_sp(*bench),    te::cli::add_bench_attention(*bench),
  };
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    std::fprintf(stderr, "\n%s", app.help().c_str());
    return 2;
  }
  if (const std::string bad = te::log_env_problem(); !bad.empty()) {
    std::fprintf(stderr, "error: %s\n  hint: unset it or pick one of those\n", bad.c_str());
    return 2;
  }
  try {
    for (const auto& c : commands)
      if (c.sub->parsed()) return c.run();
  } catch (const teengine::Error& e) {
    print_error(e.what());
    return e.is_input_error() ? 2 : 1;
  } catch (const te::InputError& e) {
    print_error(e.what());
    return 2;
  } catch (const te::Error& e) {
    print_error(e.what());
    return 1;
  } catch (const std::exception& e) {
    print_error(e.what());
    return 1;
  }
  return 2;
}
