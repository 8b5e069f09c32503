#include "report/run_report.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "spyre/cost/roofline.h"


namespace spyre::report {

using nlohmann::json;

namespace {

double num(const json& j, const char* key) { return j.contains(key) && j[key].is_number() ? j[key].get<double>() : 0; }

double total_macs(const json& macs) {
  double t = 0;
  for (auto it = macs.begin(); it != macs.end(); ++it) t += it.value().get<double>();
  return t;
}

// The peak FLOP/s of the dtype that did most of a kernel's MACs (its roofline's roof).
double peak_for(const json& macs, const json& derived) {
  std::string best = "fp16";
  double most = 0;
  for (auto it = macs.begin(); it != macs.end(); ++it) {
    if (it.value().get<double>() > most) {
      most = it.value().get<double>();
      best = it.key();
    }
  }
  const json ops = derived.value("peak_ops_per_s", json::object());
  return ops.value(best, ops.value("fp16", 1.0));
}

}  // namespace

json make_report(const std::string& workload, double flops, const json& device,
                 const std::map<std::string, std::int64_t>& fallbacks) {
  const json config = device.value("config", json::object());
  const json derived = device.value("derived", json::object());
  const double clock_hz = num(derived, "clock_hz");
  const double dram_bw = std::max(1.0, num(derived, "dram_deliverable_bytes_per_s"));
  const double turnaround = num(derived, "dram_turnaround_s_per_byte");
  json kernels = json::array();
  double first = 0, last = 0, read = 0, write = 0, ring = 0, macs = 0, bound_s = 0;
  bool any = false;
  std::uint64_t kernel_launches = 0;
  // One row per launch while the device kept every record; once it dropped some (long
  // runs keep only the latest), one row per kernel name from its exact totals.
  const bool every_launch = num(device, "launch_records_dropped") == 0;
  const json records = every_launch ? device.value("launch_records", json::array())
                                    : device.value("kernel_totals", json::array());
  if (!every_launch) {
    // The launches' span, as the per-launch rows give it (copies excluded).
    const json span = device.value("launch_span_ps", json::array({0, 0}));
    first = span[0].get<double>();
    last = span[1].get<double>();
  }
  for (const auto& r : records) {
    double t_ps = num(r, "time_ps");
    if (every_launch) {
      const double start = num(r, "start_ps"), end = num(r, "end_ps");
      first = any ? std::min(first, start) : start;
      last = any ? std::max(last, end) : end;
      t_ps = end - start;
    }
    any = true;
    const double t = t_ps * 1e-12;
    const double k_macs = total_macs(r.value("macs", json::object()));
    const double bytes = num(r, "dram_read_bytes") + num(r, "dram_write_bytes");
    const double peak = peak_for(r.value("macs", json::object()), derived);
    // Roofline (include/spyre/cost/roofline.h): the least time the kernel's operations
    // and its op's minimum DRAM traffic allow (the bytes it moved when the launch did
    // not say).
    const double min_read = num(r, "min_read_bytes"), min_write = num(r, "min_write_bytes");
    const bool known = min_read + min_write > 0;
    const double least_read = known ? min_read : num(r, "dram_read_bytes");
    const double least_write = known ? min_write : num(r, "dram_write_bytes");
    const double bound = cost::roofline_s(2 * k_macs, peak, least_read, least_write, dram_bw, turnaround);
    bound_s += bound;
    read += num(r, "dram_read_bytes");
    write += num(r, "dram_write_bytes");
    ring += num(r, "ring_link_bytes");
    macs += k_macs;
    kernel_launches += every_launch ? 1 : static_cast<std::uint64_t>(num(r, "launches"));
    kernels.push_back({{"name", r.value("name", "?")},
                       {"launches", every_launch ? 1.0 : num(r, "launches")},
                       {"time_ps", t_ps},
                       {"cycles", std::llround(t * clock_hz)},
                       {"macs", k_macs},
                       {"flops", 2 * k_macs},
                       {"instructions", num(r, "instructions")},
                       {"dram_read_bytes", num(r, "dram_read_bytes")},
                       {"dram_write_bytes", num(r, "dram_write_bytes")},
                       {"ring_link_bytes", num(r, "ring_link_bytes")},
                       {"intensity_flop_per_byte", bytes > 0 ? 2 * k_macs / bytes : 0.0},
                       {"min_dram_bytes", least_read + least_write},
                       {"traffic_ratio", least_read + least_write > 0 ? bytes / (least_read + least_write) : 0.0},
                       {"achieved_flops_per_s", t > 0 ? 2 * k_macs / t : 0.0},
                       {"achieved_bytes_per_s", t > 0 ? bytes / t : 0.0},
                       {"roofline_fraction", t > 0 ? bound / t : 0.0}});
  }
  const double time_s = (last - first) * 1e-12;
  double compute = 0, vector = 0, sp_bytes = 0;
  const json cores = device.value("cores", json::array());
  for (const auto& c : cores) {
    compute += num(c, "compute_utilisation");
    vector += num(c, "vector_utilisation");
    sp_bytes += num(c, "scratchpad_port_bytes");
  }
  const double n = std::max<double>(1, static_cast<double>(cores.size()));
  const json pcie = device.value("pcie", json::object());
  const double pcie_bytes = num(pcie.value("host_to_device", json::object()), "bytes") +
                            num(pcie.value("device_to_host", json::object()), "bytes");
  std::int64_t fallback_total = 0;
  for (const auto& [op, c] : fallbacks) fallback_total += c;

  json metrics = {{"time_us", time_s * 1e6},
                  {"cycles", std::llround(time_s * clock_hz)},
                  {"kernels", kernel_launches},
                  {"macs", macs},
                  {"dram_read_bytes", read},
                  {"dram_write_bytes", write},
                  {"dram_bytes_per_s", time_s > 0 ? (read + write) / time_s : 0.0},
                  {"ring_link_bytes", ring},
                  {"pcie_bytes", pcie_bytes},
                  {"compute_utilisation", compute / n},
                  {"vector_utilisation", vector / n},
                  {"roofline_fraction", time_s > 0 ? bound_s / time_s : 0.0},
                  {"achieved_flops_per_s", time_s > 0 ? (flops > 0 ? flops : 2 * macs) / time_s : 0.0},
                  {"cpu_fallbacks", fallback_total}};
  json energy = nullptr;
  const json resolved = config.value("resolved", json::object());
  if (resolved.contains("energy") && resolved["energy"].is_object()) {
    const json& e = resolved["energy"];
    double mac_j = 0;
    for (const auto& r : records) {
      const json kernel_macs = r.value("macs", json::object());
      for (auto it = kernel_macs.begin(); it != kernel_macs.end(); ++it) {
        mac_j += it.value().get<double>() * e["pj_per_mac"].value(it.key(), 0.0) * 1e-12;
      }
    }
    const json& b = e["pj_per_byte"];
    const double dram_j = (read + write) * b.value("dram", 0.0) * 1e-12;
    const double ring_j = ring * b.value("ring", 0.0) * 1e-12;
    const double sp_j = sp_bytes * b.value("scratchpad", 0.0) * 1e-12;
    const double pcie_j = pcie_bytes * b.value("pcie", 0.0) * 1e-12;
    const double static_j = e.value("static_watts", 0.0) * time_s;
    const double total = mac_j + dram_j + ring_j + sp_j + pcie_j + static_j;
    energy = {{"mac_j", mac_j}, {"dram_j", dram_j}, {"ring_j", ring_j}, {"scratchpad_j", sp_j},
              {"pcie_j", pcie_j}, {"static_j", static_j}, {"total_j", total},
              {"average_watts", time_s > 0 ? total / time_s : 0.0}};
    metrics["energy_j"] = total;
  }
  json per_core = json::array();
  for (const auto& c : cores) {
    per_core.push_back({{"core", c.value("core", 0)},
                        {"compute_utilisation", num(c, "compute_utilisation")},
                        {"vector_utilisation", num(c, "vector_utilisation")}});
  }
  return {{"tool", "spyre-sim"},
          {"version", SPYRE_VERSION},
          {"schema_version", kRunSchemaVersion},
          {"workload", workload},
          {"config", config},
          {"peak_flops_per_s_fp16", derived.value("peak_ops_per_s", json::object()).value("fp16", 0.0)},
          {"dram_deliverable_bytes_per_s", dram_bw},
          {"metrics", metrics},
          {"kernels", kernels},
          {"cores", per_core},
          {"cpu_fallbacks", fallbacks},
          {"energy", energy}};
}

std::string report_text(const json& r) {
  const json& m = r["metrics"];
  std::string s = fmt::format("spyre-sim {} — workload {} on '{}' (config {})\n", r.value("version", "?"),
                              r.value("workload", "?"), r["config"].value("name", "?"), r["config"].value("hash", "?"));
  s += fmt::format("modelled time        {:.3f} us = {} cycles\n", m.value("time_us", 0.0), m.value("cycles", std::uint64_t{0}));
  s += fmt::format("work                 {:.4g} MACs, {:.2f} TFLOP/s achieved, {:.1f}% of roofline\n",
                   m.value("macs", 0.0), m.value("achieved_flops_per_s", 0.0) * 1e-12,
                   m.value("roofline_fraction", 0.0) * 100);
  s += fmt::format("DRAM                 {:.2f} MB read, {:.2f} MB written, {:.1f} GB/s achieved\n",
                   m.value("dram_read_bytes", 0.0) * 1e-6, m.value("dram_write_bytes", 0.0) * 1e-6,
                   m.value("dram_bytes_per_s", 0.0) * 1e-9);
  s += fmt::format("ring                 {:.2f} MB over links; PCIe {:.2f} MB\n", m.value("ring_link_bytes", 0.0) * 1e-6,
                   m.value("pcie_bytes", 0.0) * 1e-6);
  s += fmt::format("cores                compute {:.1f}% busy, vector {:.1f}% busy (mean over cores)\n",
                   m.value("compute_utilisation", 0.0) * 100, m.value("vector_utilisation", 0.0) * 100);
  s += fmt::format("CPU fallbacks        {}", m.value("cpu_fallbacks", 0));
  const json& fallbacks = r["cpu_fallbacks"];
  for (auto it = fallbacks.begin(); it != fallbacks.end(); ++it) s += fmt::format(" {}x{}", it.key(), it.value().get<int>());
  s += "\n";
  if (r.contains("energy") && r["energy"].is_object()) {
    const json& e = r["energy"];
    s += fmt::format("energy               {:.3f} mJ ({:.1f} W average): MACs {:.3f}, DRAM {:.3f}, ring {:.3f}, "
                     "scratchpad {:.3f}, static {:.3f} mJ (config energy section: ASSUMPTION values)\n",
                     e.value("total_j", 0.0) * 1e3, e.value("average_watts", 0.0), e.value("mac_j", 0.0) * 1e3,
                     e.value("dram_j", 0.0) * 1e3, e.value("ring_j", 0.0) * 1e3, e.value("scratchpad_j", 0.0) * 1e3,
                     e.value("static_j", 0.0) * 1e3);
  }
  if (r.contains("llm") && r["llm"].is_object()) {
    const json& g = r["llm"];
    const auto pct = [](double bound, double t) { return t > 0 ? 100 * bound / t : 0.0; };
    const double ttft = g.value("ttft_us", 0.0), step = g.value("decode_us_per_token", 0.0);
    s += fmt::format("prefill              time to first token {:.3f} us (bound {:.3f} us: {:.1f}% of roofline), {} "
                     "kernels\n",
                     ttft, g.value("prefill_bound_us", 0.0), pct(g.value("prefill_bound_us", 0.0), ttft),
                     g.value("prefill_kernels", 0));
    s += fmt::format("decode               {} steps, {:.3f} us per token (bound {:.3f} us: {:.1f}% of roofline), "
                     "{:.1f} tokens/s decoding, {:.1f} tokens/s end to end\n",
                     g.value("decode_steps", 0), step, g.value("decode_bound_us_per_token", 0.0),
                     pct(g.value("decode_bound_us_per_token", 0.0), step), g.value("decode_tokens_per_s", 0.0),
                     g.value("tokens_per_s", 0.0));
    if (g.contains("tensor_parallel") && g["tensor_parallel"].is_object()) {
      const json& t = g["tensor_parallel"];
      s += fmt::format("tensor parallel      {} cards, communication {:.1f}% of the time (mean over cards)\n",
                       t.value("cards", 0), t.value("communication_share", 0.0) * 100);
      s += fmt::format("  {:<6} {:>8} {:>12} {:>16} {:>12} {:>12} {:>14}\n", "card", "kernels", "compute us",
                       "communicate us", "overlap us", "idle us", "peer sent MB");
      for (const auto& c : t.value("per_card", json::array())) {
        s += fmt::format("  {:<6} {:>8.0f} {:>12.3f} {:>16.3f} {:>12.3f} {:>12.3f} {:>14.3f}\n", c.value("card", 0),
                         c.value("kernels", 0.0), c.value("compute_us", 0.0), c.value("communication_us", 0.0),
                         c.value("overlap_us", 0.0), c.value("idle_us", 0.0), c.value("peer_sent_bytes", 0.0) * 1e-6);
      }
    }
    if (g.contains("cpu_check")) {
      s += fmt::format("CPU check            {} of {} generated tokens equal the CPU's\n",
                       g["cpu_check"].value("equal", 0), g["cpu_check"].value("tokens", 0));
    }
  }
  if (r.contains("vision") && r["vision"].is_object()) {
    const json& v = r["vision"];
    const double total = r["metrics"].value("time_us", 0.0);
    s += fmt::format("vision               {}: {:.1f} images/s\n", v.value("spec", "?"), v.value("images_per_s", 0.0));
    s += fmt::format("  {:<22} {:>11} {:>7} {:>8} {:>10} {:>9}\n", "layer", "time us", "share", "kernels", "DRAM MB",
                     "GMACs");
    for (const auto& l : v.value("layers", json::array())) {
      const double t = l.value("time_us", 0.0);
      s += fmt::format("  {:<22} {:>11.3f} {:>6.1f}% {:>8.0f} {:>10.3f} {:>9.3f}\n", l.value("name", "?"), t,
                       total > 0 ? 100 * t / total : 0.0, l.value("kernels", 0.0), l.value("dram_bytes", 0.0) / 1e6,
                       l.value("macs", 0.0) / 1e9);
    }
  }
  // Long runs (a generation: thousands of launches) print one row per kernel name.
  const json& all = r["kernels"];
  constexpr std::size_t kMaxRows = 60;
  json rows = json::array();
  if (all.size() <= kMaxRows) {
    rows = all;
  } else {
    std::map<std::string, std::size_t> at;
    for (const auto& k : all) {
      const std::string name = k.value("name", "?");
      const auto [it, fresh] = at.emplace(name, rows.size());
      if (fresh) {
        rows.push_back({{"name", name}, {"launches", 0.0}, {"time_ps", 0.0}, {"flops", 0.0}, {"bytes", 0.0},
                        {"min_dram_bytes", 0.0}, {"bound_ps", 0.0}});
      }
      json& row = rows[it->second];
      const double t = k.value("time_ps", 0.0);
      row["launches"] = row["launches"].get<double>() + k.value("launches", 1.0);
      row["time_ps"] = row["time_ps"].get<double>() + t;
      row["flops"] = row["flops"].get<double>() + k.value("flops", 0.0);
      row["bytes"] = row["bytes"].get<double>() + k.value("dram_read_bytes", 0.0) + k.value("dram_write_bytes", 0.0);
      row["min_dram_bytes"] = row["min_dram_bytes"].get<double>() + k.value("min_dram_bytes", 0.0);
      row["bound_ps"] = row["bound_ps"].get<double>() + k.value("roofline_fraction", 0.0) * t;
    }
    const double hz = m.value("time_us", 0.0) > 0 ? double(m.value("cycles", std::uint64_t{0})) / (m.value("time_us", 0.0) * 1e-6) : 0;
    for (json& row : rows) {
      const double t = row["time_ps"].get<double>(), bytes = row["bytes"].get<double>();
      row["name"] = fmt::format("{} x{}", row["name"].get<std::string>(), row["launches"].get<double>());
      row["cycles"] = std::llround(t * 1e-12 * hz);
      row["dram_read_bytes"] = bytes;
      row["intensity_flop_per_byte"] = bytes > 0 ? row["flops"].get<double>() / bytes : 0.0;
      row["roofline_fraction"] = t > 0 ? row["bound_ps"].get<double>() / t : 0.0;
    }
  }
  s += fmt::format("{:<22} {:>10} {:>10} {:>9} {:>9} {:>9} {:>8} {:>9}\n", "kernel", "time us", "cycles", "GFLOP",
                   "DRAM MB", "least MB", "FLOP/B", "roofline");
  for (const auto& k : rows) {
    s += fmt::format("{:<22} {:>10.3f} {:>10} {:>9.3f} {:>9.3f} {:>9.3f} {:>8.1f} {:>8.1f}%\n", k.value("name", "?"),
                     k.value("time_ps", 0.0) * 1e-6, k.value("cycles", std::uint64_t{0}), k.value("flops", 0.0) * 1e-9,
                     (k.value("dram_read_bytes", 0.0) + k.value("dram_write_bytes", 0.0)) * 1e-6,
                     k.value("min_dram_bytes", 0.0) * 1e-6, k.value("intensity_flop_per_byte", 0.0),
                     k.value("roofline_fraction", 0.0) * 100);
  }
  return s;
}

GoldenCheck check_golden(const json& golden, const json& now, double tolerance, bool all_metrics) {
  GoldenCheck c;
  const json gm = golden.value("metrics", json::object()), nm = now.value("metrics", json::object());
  std::vector<std::string> keys;
  if (all_metrics) {
    for (auto it = gm.begin(); it != gm.end(); ++it) keys.push_back(it.key());
    for (auto it = nm.begin(); it != nm.end(); ++it) {
      if (!gm.contains(it.key())) keys.push_back(it.key());
    }
  } else {
    for (const char* k : kGuardedMetrics) keys.emplace_back(k);
  }
  c.text = fmt::format("{:<24} {:>16} {:>16} {:>10}  (tolerance {:.2f}%)\n", "metric", "expected", "now", "change",
                       tolerance * 100);
  for (const auto& k : keys) {
    const bool in_g = gm.contains(k) && gm[k].is_number(), in_n = nm.contains(k) && nm[k].is_number();
    if (!in_g || !in_n) {
      c.text += fmt::format("{:<24} {:>16} {:>16} {:>10}  MISSING\n", k, in_g ? gm[k].dump() : "-",
                            in_n ? nm[k].dump() : "-", "");
      c.passed = false;
      continue;
    }
    const double g = gm[k].get<double>(), v = nm[k].get<double>();
    const double change = g == 0 ? (v == 0 ? 0 : 1) : (v - g) / std::fabs(g);
    const bool ok = std::fabs(change) <= tolerance + 1e-12;
    c.passed = c.passed && ok;
    c.text += fmt::format("{:<24} {:>16.6g} {:>16.6g} {:>+9.2f}%  {}\n", k, g, v, change * 100, ok ? "ok" : "DRIFT");
  }
  c.text += c.passed ? "result: within tolerance\n" : "result: REGRESSION (beyond tolerance)\n";
  return c;
}

}  // namespace spyre::report
