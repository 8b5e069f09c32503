// Subcommands of the spyre-sim tool and its documented exit codes.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace spyre::tools {

// Exit codes of spyre-sim (documented in tools/README.md).
enum ExitCode : int {
  kExitSuccess = 0,
  kExitRegression = 1,    // a golden check failed (spyre-sim run --expect-json)
  kExitUsage = 2,         // bad command line or bad config
  kExitDeviceFault = 3,   // the simulated device reported a fault
  kExitInternal = 4,      // a bug in spyre-sim
};

// A bad command line or input: printed as one line, exit code kExitUsage.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Options shared by every subcommand that builds a chip.
struct ConfigOptions {
  std::string config_path;             // empty: the embedded default
  std::vector<std::string> overrides;  // --set key.path=value, in order
};

void add_config_options(CLI::App& command, ConfigOptions& options);

// Adds "info" to the app; the callback runs it and records the exit code.
void add_info_command(CLI::App& app, int& exit_code);
void add_run_command(CLI::App& app, int& exit_code);
void add_diff_command(CLI::App& app, int& exit_code);
void add_sweep_commands(CLI::App& app, int& exit_code);

}  // namespace spyre::tools
