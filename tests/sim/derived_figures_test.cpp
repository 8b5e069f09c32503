#include <catch2/catch_approx.hpp>
#include <catch2/catch_test_macros.hpp>

#include "config/config_loader.h"
#include "config/derived_figures.h"

using Catch::Approx;
using spyre::config::derive;
using spyre::config::load_config;
using spyre::config::MacType;

TEST_CASE("given the default config, peak compute follows cores x corelets x PEs x depth x clock") {
  const auto d = derive(load_config("").chip);
  // 128 PEs per core = 2 corelets x 8 x 8.
  CHECK(d.pes_per_core == 128);
  // fp16: 128 PEs x 8 MAC/cycle x 1.5 GHz = 1536 MAC/ns per core (the datasheet figure).
  CHECK(d.peak_macs_per_ns_core[static_cast<int>(MacType::fp16)] == Approx(1536.0));
  // Chip: 32 cores x 1536e9 = 49.152e12 MAC/s = 98.304e12 FLOP/s (~98 TFLOPS public).
  CHECK(d.peak_ops_per_s(MacType::fp16) == Approx(98.304e12));
  // int8: 128 x 26 x 1.5e9 x 32 x 2 = 319.488e12 OPS (public ~315).
  CHECK(d.peak_ops_per_s(MacType::int8) == Approx(319.488e12));
}

TEST_CASE("given the default config, bandwidths and the ridge point follow from the config") {
  const auto d = derive(load_config("").chip);
  CHECK(d.dram_peak_bytes_per_s == Approx(204.8e9));
  // 204.8 GB/s x 0.73 = 149.504 GB/s (public: ~150 GB/s measured one direction).
  CHECK(d.dram_deliverable_bytes_per_s == Approx(149.504e9));
  // 204.8 GB/s / 16 channels = 12.8 GB/s per channel.
  CHECK(d.dram_channel_bytes_per_s == Approx(12.8e9));
  // 128 B/cycle x 1.5 GHz = 192 GB/s per link and direction; a cut crosses 2 links x 2 dirs.
  CHECK(d.ring_link_bytes_per_s == Approx(192e9));
  CHECK(d.ring_bisection_bytes_per_s == Approx(768e9));
  // PCIe Gen5 x16: 32 GT/s x 16 lanes x 128/130 / 8 = 63.015 GB/s; x 0.85 = 53.563 GB/s.
  CHECK(d.pcie_raw_bytes_per_s == Approx(63.01538e9));
  CHECK(d.pcie_effective_bytes_per_s == Approx(53.56308e9));
  // 4 ports x 256 B/cycle x 1.5 GHz = 1536 GB/s per core.
  CHECK(d.scratchpad_core_bytes_per_s == Approx(1536e9));
  // A DMA engine: 128 B/cycle x 1.5 GHz = 192 GB/s, but 64 requests of 128 B in flight
  // over 120 ns of DRAM latency give 64 x 128 / 120e-9 = 68.267 GB/s: the lower one.
  CHECK(d.dma_engine_bytes_per_s == Approx(68.26667e9));
  // Turnaround: 2 x 20 ns / (16 channels x 512 B) = 4.8828 ps per byte of min(R, W).
  CHECK(d.dram_turnaround_s_per_byte == Approx(4.8828125e-12));
  // 32 cores x 2 MiB = 64 MiB.
  CHECK(d.scratchpad_total_bytes == 64ull << 20);
  // 98.304e12 FLOP/s / 204.8e9 B/s = 480 FLOP/byte.
  CHECK(d.ridge_ops_per_byte_fp16 == Approx(480.0));
}

TEST_CASE("given a what-if override, the derived figures move with it") {
  const auto d = derive(load_config("", {"cores.count=16", "memory.peak_gbps=409.6"}).chip);
  CHECK(d.peak_ops_per_s(MacType::fp16) == Approx(49.152e12));
  // Half the compute over twice the bandwidth: 480 / 4 = 120 FLOP/byte.
  CHECK(d.ridge_ops_per_byte_fp16 == Approx(120.0));
}

TEST_CASE("given PCIe generations, per-lane rates and line codes are the standard ones") {
  CHECK(spyre::config::pcie_gt_per_s(1) == 2.5);
  CHECK(spyre::config::pcie_gt_per_s(4) == 16.0);
  CHECK(spyre::config::pcie_encoding(2) == Approx(0.8));
  CHECK(spyre::config::pcie_encoding(3) == Approx(128.0 / 130.0));
  CHECK(spyre::config::pcie_encoding(6) == Approx(242.0 / 256.0));
}
