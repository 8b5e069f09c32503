#include "chip/trace_recorder.h"

#include <algorithm>
#include <fstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace spyre::sim {

int TraceRecorder::track(const std::string& name) {
  const auto [it, inserted] = tracks_.try_emplace(name, static_cast<int>(track_names_.size()));
  if (inserted) track_names_.push_back(name);
  return it->second;
}

void TraceRecorder::complete(int track, std::string name, timing::Picoseconds start, timing::Picoseconds end,
                             std::string detail) {
  events_.push_back({track, std::move(name), start, end, std::move(detail)});
}

void TraceRecorder::counter(const std::string& name, timing::Picoseconds at, double value) {
  counters_.push_back({name, at, value});
}

void TraceRecorder::flow_start(int track, timing::Picoseconds at, std::uint64_t id) {
  flows_.push_back({track, at, id, true});
}

void TraceRecorder::flow_end(int track, timing::Picoseconds at, std::uint64_t id) {
  flows_.push_back({track, at, id, false});
}

void TraceRecorder::dram_bytes(timing::Picoseconds start, timing::Picoseconds end, std::uint64_t bytes) {
  if (end > start) dram_.push_back({start, end, bytes});
}

void TraceRecorder::write(const std::string& path) const {
  using nlohmann::json;
  const auto us = [](timing::Picoseconds ps) { return static_cast<double>(ps) / 1e6; };
  json events = json::array();
  const int pid = static_cast<int>(device_);
  events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", pid}, {"args", {{"name", "spyre:" + std::to_string(device_)}}}});
  for (std::size_t t = 0; t < track_names_.size(); ++t) {
    events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", pid}, {"tid", t}, {"args", {{"name", track_names_[t]}}}});
    events.push_back({{"ph", "M"}, {"name", "thread_sort_index"}, {"pid", pid}, {"tid", t}, {"args", {{"sort_index", t}}}});
  }
  for (const Event& e : events_) {
    json ev = {{"ph", "X"}, {"name", e.name}, {"pid", pid}, {"tid", e.track}, {"ts", us(e.start)}, {"dur", us(e.end - e.start)}};
    if (!e.detail.empty()) ev["args"] = {{"detail", e.detail}};
    events.push_back(std::move(ev));
  }
  for (const Flow& f : flows_) {
    json ev = {{"ph", f.start ? "s" : "f"}, {"name", "launch"}, {"cat", "launch"}, {"id", f.id},
               {"pid", pid}, {"tid", f.track}, {"ts", us(f.at)}};
    if (!f.start) ev["bp"] = "e";  // binds to the slice enclosing the end point
    events.push_back(std::move(ev));
  }
  for (const Counter& c : counters_) {
    events.push_back({{"ph", "C"}, {"name", c.name}, {"pid", pid}, {"ts", us(c.at)}, {"args", {{"value", c.value}}}});
  }
  // DRAM bandwidth: spread each transfer evenly over its interval, in 256 bins.
  if (!dram_.empty()) {
    timing::Picoseconds first = dram_.front().start, last = dram_.front().end;
    for (const Transfer& t : dram_) {
      first = std::min(first, t.start);
      last = std::max(last, t.end);
    }
    constexpr int kBins = 256;
    const double width = std::max(1.0, static_cast<double>(last - first) / kBins);
    std::vector<double> bytes(kBins + 1, 0.0);
    for (const Transfer& t : dram_) {
      const double rate = static_cast<double>(t.bytes) / static_cast<double>(t.end - t.start);
      const auto b0 = static_cast<int>(static_cast<double>(t.start - first) / width);
      const auto b1 = std::min(kBins, static_cast<int>(static_cast<double>(t.end - first) / width));
      for (int b = b0; b <= b1; ++b) {
        const double lo = std::max(static_cast<double>(t.start), static_cast<double>(first) + b * width);
        const double hi = std::min(static_cast<double>(t.end), static_cast<double>(first) + (b + 1) * width);
        if (hi > lo) bytes[b] += rate * (hi - lo);
      }
    }
    for (int b = 0; b <= kBins; ++b) {
      const double gbps = bytes[b] / width * 1e12 / 1e9;  // bytes per ps -> GB/s
      events.push_back({{"ph", "C"}, {"name", "dram GB/s"}, {"pid", pid},
                        {"ts", us(first + static_cast<timing::Picoseconds>(b * width))}, {"args", {{"value", gbps}}}});
    }
  }
  std::ofstream out(path);
  if (!out) throw std::runtime_error("cannot write the trace file '" + path + "'");
  out << json{{"traceEvents", std::move(events)}, {"displayTimeUnit", "ns"}}.dump() << '\n';
  if (!out) throw std::runtime_error("writing the trace file '" + path + "' failed");
}

}  // namespace spyre::sim
