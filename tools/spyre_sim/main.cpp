// spyre-sim: the command-line entry point of the simulated Spyre stack.
#include <cstdio>
#include <exception>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "spyre_sim/commands.h"

namespace spyre::tools {

void add_config_options(CLI::App& command, ConfigOptions& options) {
  command.add_option("--config", options.config_path,
                     "chip config YAML (default: the embedded configs/spyre.yaml)");
  command.add_option("--set", options.overrides,
                     "override a config field, e.g. --set cores.count=16 (repeatable)")
      ->take_all();
}

}  // namespace spyre::tools

int main(int argc, char** argv) {
  using namespace spyre::tools;
  CLI::App app{"spyre-sim: a simulated IBM Spyre accelerator", "spyre-sim"};
  app.set_version_flag("--version", SPYRE_VERSION);
  app.require_subcommand(1);
  int exit_code = kExitSuccess;
  add_info_command(app, exit_code);
#ifdef SPYRE_WITH_BACKEND
  add_run_command(app, exit_code);
  add_diff_command(app, exit_code);
#endif
  add_sweep_commands(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? kExitSuccess : kExitUsage;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "spyre-sim: internal error: %s\n", e.what());
    return kExitInternal;
  }
  return exit_code;
}
