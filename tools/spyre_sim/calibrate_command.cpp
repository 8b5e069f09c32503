// spyre-sim calibrate: public measurements of real Spyre cards, each reproduced
// through the real stack (aten op -> backend compiler -> driver -> firmware -> chip)
// and compared with its tolerance. The figures and their source are listed in
// configs/README.md ("Calibration"); the memory parameters they calibrate are marked
// CALIBRATED in configs/spyre.yaml.
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <ATen/ops/_softmax.h>
#include <ATen/ops/add.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/gelu.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/neg.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/sum.h>
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "report/run_report.h"
#include "spyre_sim/device_session.h"

namespace spyre::tools {
namespace {

using nlohmann::json;

constexpr std::int64_t kMi = 1 << 20;

// A row: the op (its inputs made by `setup`, on the device), the bytes the public
// figure counts (each tensor once, a broadcast operand at its own size) or the FLOPs,
// and the reference with its tolerance.
struct Row {
  std::string name;
  std::string source;  // the public figure, as stated
  std::function<std::function<void()>()> setup;
  double bytes = 0;    // GB/s rows: inputs read + outputs written, logical bytes
  double flops = 0;    // % of peak rows
  std::function<double(const std::map<std::string, double>&)> reference;  // from earlier rows' results if needed
  double tolerance = 0.10;                                                 // relative
};

at::TensorOptions half() { return at::TensorOptions().device(c10::Device(c10::DeviceType::PrivateUse1, 0)).dtype(c10::kHalf); }
at::Tensor input(std::vector<std::int64_t> sizes) { return at::randn(sizes).to(half()); }
double fp16_bytes(double elements) { return 2 * elements; }

std::function<double(const std::map<std::string, double>&)> constant(double v) {
  return [v](const std::map<std::string, double>&) { return v; };
}

// The public row-reduction rate: min(150, 114 + 61 e^(-rows/3700)) GB/s.
double row_reduction_gbps(double rows) { return std::min(150.0, 114.0 + 61.0 * std::exp(-rows / 3700.0)); }

std::vector<Row> rows() {
  const double n = 64.0 * kMi;
  std::vector<Row> r;
  r.push_back({"sum of 64 Mi (read only)", "~150 GB/s",
               [] { auto x = input({64 * kMi}); return std::function<void()>([x] { at::sum(x); }); },
               fp16_bytes(n + 1), 0, constant(150)});
  r.push_back({"fill_ of 64 Mi (write only)", "~150 GB/s",
               [] { auto x = at::empty({64 * kMi}, half()); return std::function<void()>([x]() mutable { x.fill_(1.0); }); },
               fp16_bytes(n), 0, constant(150)});
  r.push_back({"neg of 64 Mi (1 read, 1 write)", "~105 GB/s",
               [] { auto x = input({64 * kMi}); return std::function<void()>([x] { at::neg(x); }); },
               fp16_bytes(2 * n), 0, constant(105)});
  r.push_back({"add of 2 x 64 Mi (2 reads, 1 write)", "~116 GB/s",
               [] {
                 auto x = input({64 * kMi}), y = input({64 * kMi});
                 return std::function<void()>([x, y] { at::add(x, y); });
               },
               fp16_bytes(3 * n), 0, constant(116)});
  r.push_back({"gelu of 64 Mi (math is free)", "within 2% of neg",
               [] { auto x = input({64 * kMi}); return std::function<void()>([x] { at::gelu(x); }); },
               fp16_bytes(2 * n), 0,
               [](const std::map<std::string, double>& done) { return done.at("neg of 64 Mi (1 read, 1 write)"); },
               0.02});
  r.push_back({"add of 8192x8192 and a 1x8192 row", "~118 GB/s",
               [] {
                 auto x = input({8192, 8192}), y = input({1, 8192});
                 return std::function<void()>([x, y] { at::add(x, y); });
               },
               fp16_bytes(2 * n + 8192), 0, constant(118)});
  r.push_back({"row sum of 1024x65536", "min(150, 114+61e^(-rows/3700))",
               [] { auto x = input({1024, 65536}); return std::function<void()>([x] { at::sum(x, {-1}); }); },
               fp16_bytes(n + 1024), 0, constant(row_reduction_gbps(1024))});
  r.push_back({"row sum of 65536x1024", "min(150, 114+61e^(-rows/3700))",
               [] { auto x = input({65536, 1024}); return std::function<void()>([x] { at::sum(x, {-1}); }); },
               fp16_bytes(n + 65536), 0, constant(row_reduction_gbps(65536))});
  r.push_back({"column sum of 8192x8192", "~113 GB/s",
               [] { auto x = input({8192, 8192}); return std::function<void()>([x] { at::sum(x, {0}); }); },
               fp16_bytes(n + 8192), 0, constant(113)});
  r.push_back({"t().contiguous() of 8192x8192", "~116 GB/s",
               [] { auto x = input({8192, 8192}); return std::function<void()>([x] { x.t().contiguous(); }); },
               fp16_bytes(2 * n), 0, constant(116)});
  r.push_back({"softmax of 8192x4096 (last dim)", "100-105 GB/s",
               [] { auto x = input({8192, 4096}); return std::function<void()>([x] { at::_softmax(x, -1, false); }); },
               fp16_bytes(2 * 32.0 * kMi), 0, constant(102.5)});
  r.push_back({"GEMM 4096^3", "74% of the fp16 peak",
               [] {
                 auto a = input({4096, 4096}), b = input({4096, 4096});
                 return std::function<void()>([a, b] { at::mm(a, b); });
               },
               0, 2.0 * 4096.0 * 4096.0 * 4096.0, constant(74)});
  return r;
}

struct CalibrateOptions {
  ConfigOptions config;
  spyre_device_mode_t mode = SPYRE_MODE_NO_DATA;
  std::string only;
  std::vector<std::string> skip;
  bool json_out = false;
};

int calibrate(const CalibrateOptions& o) {
  const auto skipped = [&](const std::string& name) {
    if (!o.only.empty() && name.find(o.only) == std::string::npos) return true;
    for (const auto& s : o.skip) {
      if (name.find(s) != std::string::npos) return true;
    }
    return false;
  };
  std::string names;
  bool any = false;
  for (const Row& row : rows()) {
    names += (names.empty() ? "" : "; ") + row.name;
    any = any || !skipped(row.name);
  }
  if (!any) throw UsageError("no calibration row left by --only/--skip (rows: " + names + ")");
  configure_driver(o.config, o.mode);
  std::map<std::string, double> results;
  json out = json::array();
  bool all_pass = true;
  std::string config_hash = "?";
  std::string table = fmt::format("  {:<40} {:>12} {:>12} {:>8} {:>6}  {}\n", "row", "model", "public", "error",
                                  "tol", "");
  for (const Row& row : rows()) {
    // (neg always runs: gelu's reference is neg's result.)
    if (skipped(row.name) && row.name != "neg of 64 Mi (1 read, 1 write)") continue;
    const auto run = row.setup();  // uploads the inputs
    run();                         // compiles and loads the kernels
    spyreDeviceSynchronize(device_handle());
    spyreDeviceResetStats(device_handle());
    backend::reset_fallback_counts();
    run();
    if (spyreDeviceSynchronize(device_handle()) != SPYRE_SUCCESS) throw DeviceFault(spyreGetLastErrorMessage());
    const json device = device_report();
    const json report = report::make_report(row.name, row.flops, device, backend::fallback_counts());
    config_hash = report["config"].value("hash", "?");
    if (!report["cpu_fallbacks"].empty()) {
      throw std::runtime_error(fmt::format("calibration row '{}' ran ops on the CPU ({}); it must run on the device",
                                           row.name, report["cpu_fallbacks"].dump()));
    }
    // The kernels' device time; an op that is a device command rather than a kernel
    // (fill_ is a firmware memset) by the span of the device's activity.
    double seconds = report["metrics"].value("time_us", 0.0) * 1e-6;
    if (report["metrics"].value("kernels", 0.0) == 0) {
      const json span = device.value("activity_ps", json::array({0, 0}));
      seconds = (span[1].get<double>() - span[0].get<double>()) * 1e-12;
    }
    if (seconds <= 0) throw std::runtime_error("calibration row '" + row.name + "' took no device time");
    const bool gemm = row.flops > 0;
    const double model = gemm ? 100.0 * row.flops / seconds / report.value("peak_flops_per_s_fp16", 1.0)
                              : row.bytes / seconds / 1e9;
    results[row.name] = model;
    if (skipped(row.name)) continue;
    const double reference = row.reference(results);
    const double error = model / reference - 1;
    const bool pass = std::abs(error) <= row.tolerance + 1e-12;
    all_pass = all_pass && pass;
    const char* unit = gemm ? "%" : "GB/s";
    table += fmt::format("  {:<40} {:>7.1f} {:<4} {:>7.1f} {:<4} {:>+7.1f}% {:>5.0f}%  {}\n", row.name, model, unit,
                         reference, unit, 100 * error, 100 * row.tolerance, pass ? "ok" : "FAIL");
    out.push_back({{"row", row.name}, {"public", row.source}, {"unit", gemm ? "% of fp16 peak" : "GB/s"},
                   {"model", model}, {"reference", reference}, {"error", error}, {"tolerance", row.tolerance},
                   {"time_us", seconds * 1e6}, {"pass", pass}});
  }
  if (o.json_out) {
    fmt::print("{}\n", json{{"config_hash", config_hash}, {"rows", out}, {"pass", all_pass}}.dump(2));
  } else {
    fmt::print("calibration against public measurements of Spyre cards (fp16; config {})\n{}{}\n", config_hash, table,
               all_pass ? "all rows within tolerance" : "some rows outside their tolerance");
  }
  return all_pass ? kExitSuccess : kExitRegression;
}

}  // namespace

void add_calibrate_command(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<CalibrateOptions>();
  CLI::App* cmd = app.add_subcommand(
      "calibrate", "reproduce public measurements of Spyre cards through the real stack; exit 1 if one is off");
  add_config_options(*cmd, o->config);
  add_mode_option(*cmd, o->mode, "no-data (default: the timed device's cycles without computing values) or timed");
  cmd->add_option("--only", o->only, "run only the rows whose name contains this text");
  cmd->add_option("--skip", o->skip, "leave out the rows whose name contains this text (repeatable)");
  cmd->add_flag("--json", o->json_out, "print the rows as JSON");
  cmd->callback([o, &exit_code] { with_torch_errors([&] { exit_code = calibrate(*o); }); });
}

}  // namespace spyre::tools
