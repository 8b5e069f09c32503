// Helpers for tests that drive a simulated chip directly.
#pragma once

#include <optional>
#include <memory>
#include <string>
#include <vector>

#include "chip/chip.h"
#include "config/config_loader.h"
#include "spyre/isa/program.h"

namespace spyre::test {

// configs/spyre-ci.yaml with overrides.
inline config::ChipConfig ci_chip(const std::vector<std::string>& overrides = {}) {
  return config::load_config(SPYRE_SOURCE_DIR "/configs/spyre-ci.yaml", overrides).chip;
}

// A chip whose numbers make hand arithmetic easy: 1 GHz (1 cycle = 1 ns), one DRAM
// channel of 16 GB/s x 0.5 = 8 B/ns, one memory stop, no ring hop latency.
// A 4096-byte DMA load then costs: engine setup 32 ns; channel 4096/8 = 512 ns;
// + DRAM latency 120 ns + scratchpad latency 4 ns.
inline std::vector<std::string> round_numbers(std::uint32_t cores = 1) {
  return {"clock_ghz=1", "cores.count=" + std::to_string(cores), "memory.channels=1", "ring.memory_stops=1",
          "memory.peak_gbps=16", "memory.efficiency=0.5", "ring.hop_latency_cycles=0"};
}

// Launches and runs to completion; returns the record.
inline sim::LaunchRecord run(sim::Simulation& simulation, sim::Chip& chip, const isa::ProgramBuilder& builder,
                             std::vector<std::uint64_t> args, std::vector<std::uint32_t> cores = {}) {
  auto program = std::make_shared<const isa::Program>(builder.build());
  if (cores.empty()) {
    for (std::uint32_t i = 0; i < program->num_streams(); ++i) cores.push_back(i);
  }
  sim::LaunchRecord result;
  bool done = false;
  chip.launch({.program = program, .args = std::move(args), .cores = std::move(cores), .name = {}, .id = 0},
              [&](const sim::LaunchRecord& r) {
                result = r;
                done = true;
              });
  simulation.run();
  if (!done) throw std::logic_error("launch did not complete");
  return result;
}

// The same on an untimed chip (the functional device): the launch completes inside the call.
inline sim::LaunchRecord run(sim::Chip& chip, const isa::ProgramBuilder& builder, std::vector<std::uint64_t> args,
                             std::vector<std::uint32_t> cores = {}) {
  auto program = std::make_shared<const isa::Program>(builder.build());
  if (cores.empty()) {
    for (std::uint32_t i = 0; i < program->num_streams(); ++i) cores.push_back(i);
  }
  std::optional<sim::LaunchRecord> result;
  chip.launch({.program = program, .args = std::move(args), .cores = std::move(cores), .name = {}, .id = 0},
              [&](const sim::LaunchRecord& r) { result = r; });
  if (!result) throw std::logic_error("an untimed launch did not complete inside launch()");
  return *result;
}

inline isa::DmaLoad load(std::uint32_t sp_addr, std::uint16_t arg, std::uint64_t offset, std::uint32_t elements,
                         isa::DType t = isa::DType::fp16, std::uint8_t token = 0) {
  isa::DmaLoad d;
  d.token = token;
  d.dtype = t;
  d.arg = arg;
  d.offset = offset;
  d.sp_addr = sp_addr;
  d.shape = {elements, 1, 1};
  return d;
}

inline isa::DmaStore store(std::uint32_t sp_addr, std::uint16_t arg, std::uint64_t offset, std::uint32_t elements,
                           isa::DType t = isa::DType::fp16, std::uint8_t token = 0) {
  isa::DmaStore d;
  static_cast<isa::Dma&>(d) = load(sp_addr, arg, offset, elements, t, token);
  return d;
}

inline isa::Wait wait_for(std::uint8_t token) { return isa::Wait{.token_mask = static_cast<std::uint16_t>(1u << token)}; }

}  // namespace spyre::test
