// spyre-sim: the command-line entry point of the simulated Spyre stack.
#include <cstdio>
#include <exception>
#include <filesystem>
#include <new>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "config/config_loader.h"
#include "spyre_sim/commands.h"

namespace spyre::tools {

void add_config_options(CLI::App& command, ConfigOptions& options) {
  command.add_option("--config", options.config_path,
                     "chip config YAML (default: the embedded configs/spyre.yaml)");
  command.add_option("--set", options.overrides,
                     "override a config field, e.g. --set cores.count=16 (repeatable)")
      ->take_all();
}

int report_failure(std::exception_ptr failure) {
  const auto say = [](const char* kind, const char* what) { std::fprintf(stderr, "spyre-sim: %s%s\n", kind, what); };
  try {
    std::rethrow_exception(failure);
  } catch (const UsageError& e) {
    say("", e.what());
    return kExitUsage;
  } catch (const config::ConfigError& e) {
    say("config error: ", e.what());
    return kExitUsage;
  } catch (const std::filesystem::filesystem_error& e) {
    say("", e.what());  // a path given on the command line: cannot create, read or write it
    return kExitUsage;
  } catch (const DeviceFault& e) {
    say("device fault: ", e.what());
    return kExitDeviceFault;
  } catch (const OutOfMemory& e) {
    say("out of memory: ", e.what());
    return kExitOutOfMemory;
  } catch (const std::bad_alloc& e) {
    say("out of host memory: ", e.what());
    return kExitOutOfMemory;
  } catch (const std::exception& e) {
    say("internal error: ", e.what());
    return kExitInternal;
  } catch (...) {
    say("internal error: ", "an exception of unknown type");
    return kExitInternal;
  }
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
  add_calibrate_command(app, exit_code);
#endif
  add_sweep_commands(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? kExitSuccess : kExitUsage;
  } catch (...) {
    return report_failure(std::current_exception());
  }
  return exit_code;
}
