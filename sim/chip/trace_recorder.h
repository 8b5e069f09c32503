// Collects timeline events and writes them as Chrome/Perfetto JSON
// ({"traceEvents":[...]}, "X" events with ts/dur in microseconds, one track per unit,
// counters for bandwidth and scratchpad occupancy).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "timing/timing_rules.h"

namespace spyre::sim {

class TraceRecorder {
 public:
  explicit TraceRecorder(std::uint32_t device) : device_(device) {}

  // The id of the named track ("core 3 compute", "dram channel 5", ...), created on first use.
  int track(const std::string& name);
  void complete(int track, std::string name, timing::Picoseconds start, timing::Picoseconds end,
                std::string detail = {});
  void counter(const std::string& name, timing::Picoseconds at, double value);
  // An arrow from a point of one track to the slice enclosing a point of another (a
  // host call to the kernel it launched): the two ends share `id`.
  void flow_start(int track, timing::Picoseconds at, std::uint64_t id);
  void flow_end(int track, timing::Picoseconds at, std::uint64_t id);
  // A DRAM transfer, binned into a bandwidth counter when written.
  void dram_bytes(timing::Picoseconds start, timing::Picoseconds end, std::uint64_t bytes);

  void write(const std::string& path) const;

 private:
  struct Event {
    int track;
    std::string name;
    timing::Picoseconds start, end;
    std::string detail;
  };
  struct Counter {
    std::string name;
    timing::Picoseconds at;
    double value;
  };
  struct Flow {
    int track;
    timing::Picoseconds at;
    std::uint64_t id;
    bool start;
  };
  struct Transfer {
    timing::Picoseconds start, end;
    std::uint64_t bytes;
  };
  std::uint32_t device_;
  std::map<std::string, int> tracks_;
  std::vector<std::string> track_names_;
  std::vector<Event> events_;
  std::vector<Counter> counters_;
  std::vector<Flow> flows_;
  std::vector<Transfer> dram_;
};

}  // namespace spyre::sim
