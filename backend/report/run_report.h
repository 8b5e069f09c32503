// The report of one spyre-sim run (JSON, schema_version 1) built from the device's own
// statistics, its text form, and the golden comparison. No torch and no simulator
// here: reports are data, testable on their own.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include <nlohmann/json.hpp>


namespace spyre::report {

inline constexpr int kRunSchemaVersion = 1;

// `device` is spyreDeviceGetReport's JSON for the measured run (stats reset before
// it; it carries the resolved config and the derived figures); `flops` the
// workload's useful floating-point operations (0: unknown). A pure JSON transform:
// the CLI and the Python API (spyre_sim.run) build the same report with it.
nlohmann::json make_report(const std::string& workload, double flops, const nlohmann::json& device,
                           const std::map<std::string, std::int64_t>& fallbacks);

std::string report_text(const nlohmann::json& report);

// The metrics a golden check guards: modelled cycles and traffic.
inline constexpr const char* kGuardedMetrics[] = {"cycles", "dram_read_bytes", "dram_write_bytes", "ring_link_bytes"};

struct GoldenCheck {
  bool passed = true;
  std::string text;  // one line per metric: golden, now, relative change, verdict
};

// Compares `now` with `golden` metric by metric (report["metrics"]); fails when a
// guarded metric (every metric when all_metrics) moves by more than `tolerance`
// (relative), or a guarded metric is missing.
GoldenCheck check_golden(const nlohmann::json& golden, const nlohmann::json& now, double tolerance,
                         bool all_metrics = false);

}  // namespace spyre::report
