// Subcommands of the spyre-sim tool and its documented exit codes.
#pragma once

#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace spyre::tools {

// Exit codes of spyre-sim, the one list (tools/README.md prints it). main() maps each
// failure to its code by the exception's type, never by its message.
enum ExitCode : int {
  kExitSuccess = 0,
  kExitRegression = 1,     // a golden check or diff failed; sweep: some points failed
  kExitUsage = 2,          // bad command line, config, input file or output path (UsageError, ConfigError)
  kExitDeviceFault = 3,    // the simulated device reported a fault (DeviceFault)
  kExitInternal = 4,       // a bug in spyre-sim (any other exception)
  kExitOutOfMemory = 5,    // host or device memory ran out (OutOfMemory, std::bad_alloc)
  kExitInterrupted = 130,  // sweep stopped by SIGINT/SIGTERM/SIGHUP (resumable)
};

// A bad command line or input: printed as one line, exit code kExitUsage.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The simulated device faulted: kExitDeviceFault.
struct DeviceFault : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Host or device memory ran out: kExitOutOfMemory.
struct OutOfMemory : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Prints the exception in flight as one line on stderr and returns its exit code.
int report_failure(std::exception_ptr failure);

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
void add_calibrate_command(CLI::App& app, int& exit_code);

}  // namespace spyre::tools
