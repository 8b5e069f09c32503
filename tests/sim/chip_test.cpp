#include <cstring>
#include <fstream>
#include <random>
#include <set>

#include <catch2/catch_approx.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#include <nlohmann/json.hpp>

#include "sim_test_support.h"

using namespace spyre;
using namespace spyre::test;
using Catch::Matchers::ContainsSubstring;
using isa::DType;

namespace {

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// One 32x32 fp16 array per core (SIMD depth 1), so matmul cycles are the textbook ones.
std::vector<std::string> textbook_array(const char* dataflow = "os") {
  return {"cores.corelets=1", "cores.compute_array.rows=32", "cores.compute_array.cols=32",
          std::string("cores.compute_array.dataflow=") + dataflow, "cores.compute_array.simd_depth.fp16=1"};
}

isa::Matmul mm64() {
  return isa::Matmul{.a = 0, .b = 8192, .c = 16384, .m = 64, .n = 64, .k = 64, .lda = 64, .ldb = 64, .ldc = 64,
                     .in = DType::fp16, .out = DType::fp32};
}

sim::Picoseconds duration(const sim::LaunchRecord& r) { return r.end - r.start; }

std::uint64_t rss_bytes() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  }
  return 0;
}

}  // namespace

TEST_CASE("given a matmul on one 32x32 array, the launch takes the analytic cycles") {
  for (const auto& [dataflow, cycles] : {std::pair{"os", 503}, std::pair{"ws", 631}, std::pair{"is", 631}}) {
    sim::Simulation simulation;
    auto& chip = simulation.add_chip(ci_chip(with(round_numbers(), textbook_array(dataflow))));
    isa::ProgramBuilder b("mm", 1);
    b.add(0, mm64());
    const auto r = run(simulation, chip, b, {});
    INFO(dataflow);
    CHECK(!r.fault);
    CHECK(duration(r) == static_cast<sim::Picoseconds>(cycles) * 1000);  // 1 GHz: 1 cycle = 1000 ps
    CHECK(r.macs[static_cast<int>(config::MacType::fp16)] == 64 * 64 * 64);
  }
}

TEST_CASE("given a 4096-byte DMA load, its time is setup plus the channel plus latencies") {
  sim::Simulation simulation;
  auto& chip = simulation.add_chip(ci_chip(round_numbers()));
  const auto buf = *chip.memory().allocate(4096);
  isa::ProgramBuilder b("load", 1);
  b.add(0, load(0, 0, 0, 2048)).add(0, wait_for(0));
  const auto r = run(simulation, chip, b, {buf});
  // engine: setup 32 ns, then 4096 B / 128 B/ns = 32 ns -> [0, 64]; the rest starts at 32:
  // channel 4096 B / 8 B/ns = 512 ns -> [32, 544]; ring link and scratchpad port 32 ns.
  // end = 544 + DRAM latency 120 + scratchpad latency 4 = 668 ns.
  CHECK(duration(r) == 668000);
  CHECK(r.dram_read_bytes == 4096);
}

TEST_CASE("given accesses smaller than a stick or unaligned, whole sticks are charged") {
  sim::Simulation simulation;
  auto& chip = simulation.add_chip(ci_chip(round_numbers()));
  const auto buf = *chip.memory().allocate(8192);
  {
    isa::ProgramBuilder b("small", 1);
    b.add(0, load(0, 0, 0, 8));  // 16 bytes: one 128-byte stick
    const auto r = run(simulation, chip, b, {buf});
    // channel 128 B / 8 B/ns = 16 ns -> [32, 48]; + 124 ns latency = 172 ns
    CHECK(r.dram_read_bytes == 128);
    CHECK(duration(r) == 172000);
  }
  {
    isa::ProgramBuilder b("unaligned", 1);
    b.add(0, load(0, 0, 64, 2048));  // bytes [64, 4160) touch sticks [0, 4224)
    const auto r = run(simulation, chip, b, {buf});
    CHECK(r.dram_read_bytes == 4224);
    // channel 4224 / 8 = 528 ns -> [32, 560]; + 124 = 684 ns
    CHECK(duration(r) == 684000);
  }
}

TEST_CASE("given 2 4 and 8 concurrent loads on one channel, the aggregate is the channel bandwidth") {
  for (const std::uint32_t k : {2u, 4u, 8u}) {
    sim::Simulation simulation;
    auto& chip = simulation.add_chip(ci_chip(with(round_numbers(k), {"ring.memory_stops=1"})));
    isa::ProgramBuilder b("contend", k);
    std::vector<std::uint64_t> args;
    for (std::uint32_t s = 0; s < k; ++s) {
      args.push_back(*chip.memory().allocate(4096));
      b.add(s, load(0, static_cast<std::uint16_t>(s), 0, 2048)).add(s, wait_for(0));
    }
    const auto r = run(simulation, chip, b, args);
    INFO(k << " transfers");
    // The channel serves them back to back from 32 ns: the last ends at 32 + 512k ns,
    // then 124 ns of latency. k x 4096 B over 512k ns = 8 B/ns, the channel's bandwidth.
    CHECK(duration(r) == (32 + 512 * std::uint64_t{k} + 124) * 1000);
    const auto report = chip.report(duration(r));
    const auto& channel = report["dram"]["channels"][0];
    CHECK(channel["bytes"] == 4096 * k);
    CHECK(channel["busy_ps"] == 512000 * std::uint64_t{k});
    const double bytes_per_ns = 4096.0 * k / (512.0 * k);
    CHECK(bytes_per_ns == 8.0);
    CHECK(report["cores"][0]["scratchpad_port_bytes"] == 4096);
    CHECK_THAT(chip.report_text(duration(r)), ContainsSubstring("launch(es), 0 fault(s)"));
  }
}

TEST_CASE("given double buffering, DMA overlaps compute and the launch gets shorter") {
  sim::Simulation simulation;
  auto& chip = simulation.add_chip(ci_chip(with(round_numbers(), textbook_array())));
  const auto buf = *chip.memory().allocate(8192);
  isa::ProgramBuilder serial("serial", 1);
  serial.add(0, load(0, 0, 0, 2048, DType::fp16, 0)).add(0, wait_for(0)).add(0, mm64());
  serial.add(0, load(8192, 0, 4096, 2048, DType::fp16, 1)).add(0, wait_for(1)).add(0, mm64());
  isa::ProgramBuilder overlapped("double_buffered", 1);
  overlapped.add(0, load(0, 0, 0, 2048, DType::fp16, 0)).add(0, load(8192, 0, 4096, 2048, DType::fp16, 1));
  overlapped.add(0, wait_for(0)).add(0, mm64()).add(0, wait_for(1)).add(0, mm64());
  // Serial: load 0 ends at 668; matmul [668, 1171]; load 1 from 1171: channel [1203, 1715],
  // ends 1839; matmul [1839, 2342].
  CHECK(duration(run(simulation, chip, serial, {buf})) == 2342000);
  // Overlapped: both loads issue at 0 on the two engines; the channel serves load 1 in
  // [544, 1056], so it ends at 1180; matmul 0 [668, 1171]; matmul 1 [1180, 1683].
  CHECK(duration(run(simulation, chip, overlapped, {buf})) == 1683000);
}

TEST_CASE("given array and vector work, independent instructions overlap and dependent ones wait for their bytes") {
  const auto time = [&](const std::vector<isa::Instruction>& insts, const std::vector<std::string>& set = {}) {
    sim::Simulation simulation;
    auto& chip = simulation.add_chip(ci_chip(with(with(round_numbers(), textbook_array()), set)));
    const auto buf = *chip.memory().allocate(8192);
    isa::ProgramBuilder b("units", 1);
    for (const auto& inst : insts) b.add(0, inst);
    b.add(0, wait_for(0));
    return duration(run(simulation, chip, b, {buf}));
  };
  // mm64: 503 cycles on the array (1 GHz: ns), reading [0, 16384), writing C [16384, 32768).
  // A fill of 25600 fp32 values on the vector units (1 corelet x 2 units x 32 lanes = 64
  // wide, 1 cycle per vector): 400 + 8 cycles of pipeline = 408 ns.
  const isa::Instruction fill_apart = isa::VFill{.dtype = DType::fp32, .dst = 65536, .count = 25600, .value = 1};
  // Apart in the scratchpad, they run side by side: max(503, 408).
  CHECK(time({mm64(), fill_apart}) == 503000);
  CHECK(time({fill_apart, mm64()}) == 503000);
  // With no queue the core runs one instruction at a time: 503 + 408.
  CHECK(time({mm64(), fill_apart}, {"cores.queue_depth=0"}) == 911000);
  // Reading C waits for the matmul to write it (4096 fp32: 64 vectors + 8): 503 + 72.
  CHECK(time({mm64(), isa::VUnary{.op = isa::UnaryOp::copy, .dtype = DType::fp32, .src = 16384, .dst = 65536,
                                  .count = 4096}}) == 575000);
  // Overwriting A waits for the matmul to have read it (2048 fp32: 32 vectors + 8): 503 + 40.
  CHECK(time({mm64(), isa::VFill{.dtype = DType::fp32, .dst = 0, .count = 2048, .value = 0}}) == 543000);
  // A DMA load into A waits for the matmul too: 503 + 668 (the 4096-byte load's time)
  // against 668 for a load elsewhere, issued at 0.
  CHECK(time({mm64(), load(0, 0, 0, 2048, DType::fp16, 0)}) == 1171000);
  CHECK(time({mm64(), load(65536, 0, 0, 2048, DType::fp16, 0)}) == 668000);
  // A second matmul queues behind the first on the one array: 2 x 503.
  CHECK(time({mm64(), mm64()}) == 1006000);
}

TEST_CASE("given the same program twice, cycles and statistics are identical") {
  const auto once = [] {
    sim::Simulation simulation;
    auto& chip = simulation.add_chip(ci_chip());
    const auto a = *chip.memory().allocate(1 << 20);
    isa::ProgramBuilder b("det", 4);
    for (std::uint32_t s = 0; s < 4; ++s) {
      b.add(s, load(0, 0, s * 65536, 32768)).add(s, load(65536, 0, ((s + 1) % 4) * 65536, 32768, DType::fp16, 1));
      b.add(s, wait_for(0)).add(s, wait_for(1));
      b.add(s, isa::Matmul{.a = 0, .b = 65536, .c = 131072, .m = 128, .n = 128, .k = 128, .lda = 128, .ldb = 128,
                           .ldc = 128, .in = DType::fp16, .out = DType::fp32});
      b.add(s, store(131072, 0, 524288 + s * 65536, 16384, DType::fp32));
    }
    const auto r = run(simulation, chip, b, {a});
    auto report = chip.report(duration(r));
    // Launch records carry absolute simulated times, which continue across simulations
    // in one process; everything else must match exactly.
    report.erase("launch_records");
    report.erase("activity_ps");
    report.erase("launch_span_ps");
    return std::make_tuple(duration(r), r.dram_read_bytes, r.dram_write_bytes, r.ring_bytes, r.instructions,
                           report.dump());
  };
  CHECK(once() == once());
}

TEST_CASE("given faults, each is reported precisely and the next program runs") {
  sim::Simulation simulation;
  auto& chip = simulation.add_chip(ci_chip());
  const auto buf = *chip.memory().allocate(4096);
  const auto good = [&] {
    isa::ProgramBuilder b("good", 1);
    b.add(0, load(0, 0, 0, 2048)).add(0, store(0, 0, 0, 2048)).add(0, wait_for(0));
    const auto r = run(simulation, chip, b, {buf});
    CHECK_FALSE(r.fault.has_value());
  };

  {  // OUT_OF_BOUNDS
    isa::ProgramBuilder b("oob_kernel", 1);
    b.add(0, isa::Nop{}).add(0, load(0, 0, 0, 2056));  // 4112 bytes from a 4096-byte allocation
    const auto r = run(simulation, chip, b, {buf});
    REQUIRE(r.fault);
    CHECK(r.fault->core == 0);
    CHECK(r.fault->pc == 1);
    CHECK(r.fault->kernel == "oob_kernel");
    CHECK(r.fault->address == buf + 4096);
    CHECK_THAT(r.fault->reason, ContainsSubstring("runs 16 bytes past the end of a 4096-byte allocation"));
    CHECK_THAT(r.fault->to_string(), ContainsSubstring("core 0 (stream 0) pc 1 in kernel 'oob_kernel' [dma_load"));
    good();
  }
  {  // PAST_THE_END
    isa::ProgramBuilder b("past", 1);
    b.add(0, load(0, 0, 4112, 8));
    const auto r = run(simulation, chip, b, {buf});
    REQUIRE(r.fault);
    CHECK_THAT(r.fault->reason, ContainsSubstring("16 bytes past the end of a 4096-byte allocation"));
    good();
  }
  {  // USE_AFTER_FREE
    const auto gone = *chip.memory().allocate(4096);
    REQUIRE(chip.memory().free(gone) == sim::DeviceMemory::FreeResult::ok);
    isa::ProgramBuilder b("uaf", 1);
    b.add(0, load(0, 0, 256, 8));
    const auto r = run(simulation, chip, b, {gone});
    REQUIRE(r.fault);
    CHECK_THAT(r.fault->reason, ContainsSubstring("256 bytes into a 4096-byte allocation"));
    CHECK_THAT(r.fault->reason, ContainsSubstring("that was freed"));
    good();
  }
  {  // BAD_OPCODE
    isa::ProgramBuilder b("bad_opcode", 1);
    b.add(0, isa::Nop{}).add(0, isa::Nop{});
    auto bytes = b.build();
    bytes[bytes.size() - 2 * isa::kInstructionBytes] = 0xee;  // the second NOP
    auto program = std::make_shared<const isa::Program>(bytes);  // not validated: cores decode as they go
    sim::LaunchRecord r;
    chip.launch({.program = program, .args = {}, .cores = {0}, .name = {}, .id = 0},
                [&](const sim::LaunchRecord& rec) { r = rec; });
    simulation.run();
    REQUIRE(r.fault);
    CHECK(r.fault->pc == 1);
    CHECK_THAT(r.fault->reason, ContainsSubstring("unknown opcode 238"));
    good();
  }
  {  // SCRATCHPAD_OVERFLOW
    const auto usable = static_cast<std::uint32_t>(chip.config().cores.scratchpad.usable_bytes);
    isa::ProgramBuilder b("overflow", 1);
    b.add(0, isa::VFill{.dtype = DType::fp32, .dst = usable - 4, .count = 2, .value = 1});
    const auto r = run(simulation, chip, b, {});
    REQUIRE(r.fault);
    CHECK_THAT(r.fault->reason, ContainsSubstring("overflows the " + std::to_string(usable) + "-byte scratchpad"));
    good();
  }
  {  // MISSING_ARGUMENT
    isa::ProgramBuilder b("args", 1);
    b.add(0, load(0, 3, 0, 8));
    const auto r = run(simulation, chip, b, {buf});
    REQUIRE(r.fault);
    CHECK_THAT(r.fault->reason, ContainsSubstring("argument 3 is used but the launch passed 1 argument(s)"));
    good();
  }
  CHECK(chip.stats().faults == 6);
}

TEST_CASE("given addresses that would wrap 64 bits, the timed and functional devices fault naming the instruction") {
  sim::Simulation simulation;
  auto& chip = simulation.add_chip(ci_chip());
  const auto buf = *chip.memory().allocate(4096);
  // The functional device: the same buffer at its own address.
  sim::Chip untimed(ci_chip(), 0, sim::Timing::untimed);
  const auto ubuf = *untimed.memory().allocate(4096);
  struct Case {
    const char* name;
    isa::Instruction inst;
    std::uint64_t arg;
    const char* reason;
  };
  isa::DmaLoad wide = load(0, 0, 0, 3);
  wide.mem_stride = {std::int64_t{1} << 62, 0, 0};  // 2 x 2^62 x 2 bytes = 2^64 (crashed the host before)
  isa::DmaStore wide_store;
  static_cast<isa::Dma&>(wide_store) = wide;
  isa::DmaLoad far = load(0, 0, 0, 3);
  far.mem_stride = {std::int64_t{1} << 60, 0, 0};   // fits 64 bits, lands far past the allocation
  isa::DmaLoad backwards = load(0, 0, 0, 3);
  backwards.mem_stride = {-(std::int64_t{1} << 60), 0, 0};  // 2^62 bytes below the argument
  const isa::DmaLoad offset = load(0, 0, 0x2000, 8);         // argument + offset passes 2^64
  const isa::DmaGather gather{.token = 0, .wide_index = false, .arg = 0, .index_sp = 0, .count = 1, .sp_addr = 64,
                              .row_bytes = 4, .offset = 0, .rows = 1u << 20, .row_stride = 1u << 30};
  const std::vector<Case> cases = {
      {"wide_load", wide, buf, "device strides reach past 64 bits"},
      {"wide_store", wide_store, buf, "device strides reach past 64 bits"},
      {"far", far, buf, "past the end of a 4096-byte allocation"},
      {"backwards", backwards, buf, "starts before address 0"},
      {"offset", offset, ~std::uint64_t{0} - 0xfff, "past the 64-bit address space"},
      {"gather", gather, ~std::uint64_t{0} - 0xfff, "past the 64-bit address space"},
  };
  for (const auto& c : cases) {
    INFO(c.name);
    isa::ProgramBuilder b(c.name, 1);
    // Index 1 for the gather: row 1 is 2^30 bytes past an argument 4 KiB below 2^64.
    b.add(0, isa::VFill{.dtype = DType::int32, .dst = 0, .count = 1, .value = 1}).add(0, c.inst);
    const auto timed = run(simulation, chip, b, {c.arg});
    REQUIRE(timed.fault);
    CHECK(timed.fault->pc == 1);
    CHECK(timed.fault->kernel == c.name);
    CHECK_THAT(timed.fault->reason, ContainsSubstring(c.reason));
    const auto functional = run(untimed, b, {c.arg == buf ? ubuf : c.arg});
    REQUIRE(functional.fault);
    CHECK(functional.fault->pc == 1);
    CHECK(functional.fault->instruction == timed.fault->instruction);
    CHECK_THAT(functional.fault->reason, ContainsSubstring(c.reason));
  }
  // The device still works.
  isa::ProgramBuilder ok("ok", 1);
  ok.add(0, load(0, 0, 0, 2048)).add(0, wait_for(0));
  CHECK_FALSE(run(simulation, chip, ok, {buf}).fault);
}

TEST_CASE("given an offset that walks from its argument's buffer into the next one, the DMA faults naming both") {
  sim::Simulation simulation;
  auto& chip = simulation.add_chip(ci_chip());
  const auto a = *chip.memory().allocate(4096), b = *chip.memory().allocate(4096);
  REQUIRE(b > a);
  sim::Chip untimed(ci_chip(), 0, sim::Timing::untimed);
  const auto ua = *untimed.memory().allocate(4096), ub = *untimed.memory().allocate(4096);
  REQUIRE(ub - ua == b - a);
  isa::ProgramBuilder p("walk", 1);
  p.add(0, store(0, 0, b - a, 8)).add(0, wait_for(0));  // lands exactly on b, a live allocation
  const auto r = run(simulation, chip, p, {a});
  REQUIRE(r.fault);
  CHECK(r.fault->address == b);
  CHECK_THAT(r.fault->reason, ContainsSubstring("leaves its argument's 4096-byte allocation"));
  const auto f = run(untimed, p, {ua});
  REQUIRE(f.fault);
  CHECK(f.fault->address == ub);
  CHECK_THAT(f.fault->reason, ContainsSubstring("leaves its argument's 4096-byte allocation"));
}

TEST_CASE("given more launches than the record limit, the oldest records go and the totals stay exact") {
  sim::Simulation simulation;
  auto& chip = simulation.add_chip(ci_chip());
  chip.set_launch_record_limit(3);
  const auto buf = *chip.memory().allocate(4096);
  isa::ProgramBuilder b("k", 1);
  b.add(0, load(0, 0, 0, 2048)).add(0, wait_for(0));
  for (int i = 0; i < 10; ++i) run(simulation, chip, b, {buf});
  const auto& s = chip.stats();
  CHECK(s.launches == 10);
  CHECK(s.launch_records.size() == 3);
  CHECK(s.launch_records_dropped == 7);
  REQUIRE(s.kernel_totals.count("k") == 1);
  const auto& k = s.kernel_totals.at("k");
  CHECK(k.launches == 10);
  CHECK(k.dram_read_bytes == 10 * 4096);  // 2048 fp16 = 4096 bytes, 32 whole sticks, each launch
  CHECK(k.dram_read_bytes == s.dram_read_bytes);
  const auto report = chip.report(1);
  CHECK(report["launch_records"].size() == 3);
  CHECK(report["launch_records_dropped"] == 7);
  CHECK(report["kernel_totals"][0]["launches"] == 10);
}

TEST_CASE("given a panel sent along the ring with forwarding, every core gets the bytes") {
  sim::Simulation simulation;
  auto& chip = simulation.add_chip(ci_chip());
  const auto in = *chip.memory().allocate(512);
  const auto out = *chip.memory().allocate(1024);
  std::vector<std::uint16_t> values(256);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<std::uint16_t>(i * 7 + 1);
  std::memcpy(chip.memory().host(in), values.data(), 512);
  isa::ProgramBuilder b("ring", 3);
  b.add(0, load(0, 0, 0, 256)).add(0, wait_for(0));
  b.add(0, isa::RingSend{.token = 1, .dst_core = 1, .tag = 7, .sp_addr = 0, .bytes = 512}).add(0, wait_for(1));
  b.add(1, isa::RingRecv{.token = 2, .src_core = 0, .tag = 7, .forward_to = 2, .sp_addr = 0, .bytes = 512});
  b.add(1, store(0, 1, 0, 256)).add(1, isa::Wait{.token_mask = 0x5});
  b.add(2, isa::RingRecv{.token = 0, .src_core = 1, .tag = 7, .sp_addr = 4096, .bytes = 512});
  b.add(2, store(4096, 1, 512, 256)).add(2, wait_for(0));
  const auto r = run(simulation, chip, b, {in, out});
  REQUIRE_FALSE(r.fault);
  CHECK(std::memcmp(chip.memory().host(out), values.data(), 512) == 0);
  CHECK(std::memcmp(chip.memory().host(out + 512), values.data(), 512) == 0);
  CHECK(r.ring_bytes > 0);
  CHECK(chip.core_stats()[0].ring_sent_bytes == 512);
  CHECK(chip.core_stats()[1].ring_sent_bytes == 512);  // forwarded
}

TEST_CASE("given a barrier, work after it waits for the slowest stream") {
  sim::Simulation simulation;
  auto& chip = simulation.add_chip(ci_chip(with(round_numbers(2), textbook_array())));
  isa::ProgramBuilder b("barrier", 2);
  b.add(0, mm64()).add(0, isa::Barrier{.id = 1, .count = 2});
  b.add(1, isa::Barrier{.id = 1, .count = 2}).add(1, isa::VFill{.dtype = DType::fp32, .dst = 0, .count = 1, .value = 0});
  const auto r = run(simulation, chip, b, {});
  // Stream 0's matmul ends at 503 ns; stream 1 then fills: ceil(1/64) vectors x 1 cycle +
  // 8 cycles of pipeline = 9 ns (1 corelet x 2 units x 32 lanes = 64 wide): 512 ns.
  CHECK(duration(r) == 512000);
}

TEST_CASE("given a receive that nothing sends, the launch faults as a deadlock") {
  sim::Simulation simulation;
  auto& chip = simulation.add_chip(ci_chip());
  isa::ProgramBuilder b("stuck", 2);
  b.add(0, isa::RingRecv{.token = 0, .src_core = 1, .tag = 3, .sp_addr = 0, .bytes = 64});
  const auto r = run(simulation, chip, b, {});
  REQUIRE(r.fault);
  CHECK(r.fault->stream == 0);
  CHECK_THAT(r.fault->reason, ContainsSubstring("deadlock"));
  CHECK_THAT(r.fault->reason, ContainsSubstring("tag 3 from stream 1 that is never sent"));
  isa::ProgramBuilder ok("fine", 1);
  ok.add(0, isa::Nop{});
  CHECK_FALSE(run(simulation, chip, ok, {}).fault);
}

TEST_CASE("given a strided 3-D DMA with negative and zero strides, bytes move like the reference gather") {
  sim::Simulation simulation;
  auto& chip = simulation.add_chip(ci_chip());
  const auto src = *chip.memory().allocate(4 * 4096);
  const auto dst = *chip.memory().allocate(4 * 4096);
  std::vector<std::int32_t> data(4096);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::int32_t>(i * 2654435761u);
  std::memcpy(chip.memory().host(src), data.data(), 4 * 4096);
  isa::DmaLoad g;
  g.dtype = DType::int32;
  g.offset = 4 * 2000;
  g.sp_addr = 0;
  g.shape = {5, 3, 4};
  g.mem_stride = {3, -100, 0};  // every third element; rows going backwards; the plane repeated
  g.sp_stride = {8, 32};        // padded rows in the scratchpad
  isa::DmaStore s;
  s.dtype = DType::int32;
  s.sp_addr = 0;
  s.shape = {32 * 4, 1, 1};
  isa::ProgramBuilder b("gather", 1);
  s.arg = 1;
  b.add(0, isa::VFill{.dtype = DType::int32, .dst = 0, .count = 128, .value = -1});
  b.add(0, g).add(0, wait_for(0)).add(0, s).add(0, wait_for(0));
  const auto r = run(simulation, chip, b, {src, dst});
  REQUIRE_FALSE(r.fault);
  std::vector<std::int32_t> expect(128, -1);
  for (int i2 = 0; i2 < 4; ++i2)
    for (int i1 = 0; i1 < 3; ++i1)
      for (int i0 = 0; i0 < 5; ++i0) expect[i0 + i1 * 8 + i2 * 32] = data[2000 + i0 * 3 - i1 * 100];
  std::vector<std::int32_t> got(128);
  std::memcpy(got.data(), chip.memory().host(dst), 4 * 128);
  CHECK(got == expect);
}

TEST_CASE("given a DMA gather, the indexed rows move and only their sticks are charged") {
  // A 1000 x 64-int32 table; rows 7, 999, 7 and 0 (int64 indices), 128 bytes of each
  // (columns 32..63, the row's second stick) gathered, then stored contiguously.
  sim::Simulation simulation;
  auto& chip = simulation.add_chip(ci_chip());
  const auto table = *chip.memory().allocate(1000 * 256);
  const auto index = *chip.memory().allocate(4 * 8);
  const auto out = *chip.memory().allocate(4 * 128);
  std::vector<std::int32_t> data(1000 * 64);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::int32_t>(i * 2654435761u);
  std::memcpy(chip.memory().host(table), data.data(), data.size() * 4);
  const std::int64_t rows[4] = {7, 999, 7, 0};
  std::memcpy(chip.memory().host(index), rows, sizeof rows);
  const auto gather_program = [&](std::int64_t bad_index) {
    std::memcpy(chip.memory().host(index) + 8, &bad_index, 8);
    isa::DmaLoad idx;
    idx.dtype = DType::int32;
    idx.arg = 1;
    idx.shape = {8, 1, 1};  // 4 int64 = 8 int32
    isa::DmaStore st;
    st.dtype = DType::int32;
    st.arg = 2;
    st.sp_addr = 64;
    st.shape = {128, 1, 1};
    isa::ProgramBuilder b("aten::index_select", 1);
    b.add(0, idx).add(0, wait_for(0));
    b.add(0, isa::DmaGather{.token = 1, .wide_index = true, .arg = 0, .index_sp = 0, .count = 4, .sp_addr = 64,
                            .row_bytes = 128, .offset = 32 * 4, .rows = 1000, .row_stride = 256});
    b.add(0, wait_for(1)).add(0, st).add(0, wait_for(0));
    return run(simulation, chip, b, {table, index, out});
  };
  const auto r = gather_program(999);
  REQUIRE_FALSE(r.fault);
  std::vector<std::int32_t> got(128), expect;
  std::memcpy(got.data(), chip.memory().host(out), 4 * 128);
  for (const std::int64_t row : rows) {
    for (int c = 32; c < 64; ++c) expect.push_back(data[static_cast<std::size_t>(row * 64 + c)]);
  }
  CHECK(got == expect);
  // Charged: the 32-byte index load plus four 128-byte rows, each one stick.
  CHECK(r.dram_read_bytes == 128 + 4 * 128);
  const auto bad = gather_program(1000);
  REQUIRE(bad.fault);
  CHECK_THAT(bad.fault->reason, ContainsSubstring("DMA gather index 1000 (entry 1 of 4) is outside the table's rows [0, 1000)"));
  CHECK_THAT(bad.fault->instruction, ContainsSubstring("dma_gather"));
  CHECK_FALSE(gather_program(999).fault);  // the chip runs on
}

TEST_CASE("given a host transfer, PCIe and the DRAM channels set its time") {
  sim::Simulation simulation;
  auto& chip = simulation.add_chip(ci_chip(round_numbers()));
  const auto buf = *chip.memory().allocate(1 << 20);
  // PCIe Gen5 x16 x 0.85 = 53.563 GB/s: 1 MiB in 19.58 us; the channel (8 B/ns) needs
  // 1048576 / 8 = 131072 ns and sets the pace; + PCIe latency 1000 + DRAM latency 120 ns.
  const auto end = chip.host_transfer(0, sim::Chip::HostDirection::to_device, buf, 1 << 20);
  CHECK(end == (131072 + 1000 + 120) * 1000ull);
  CHECK(chip.stats().host_to_device_bytes == 1 << 20);
}

TEST_CASE("given the 128 GB default chip, touching 64 MB keeps the process under 200 MB") {
  sim::Chip chip(config::load_config("").chip, 0);
  const auto buf = chip.memory().allocate(64ull << 20);
  REQUIRE(buf);
  std::memset(chip.memory().host(*buf), 0x5a, 64ull << 20);
  const auto touched = rss_bytes();
  INFO("RSS after touching 64 MiB: " << touched / (1 << 20) << " MiB");
  CHECK(touched < 200ull << 20);
  CHECK(chip.memory().free(*buf) == sim::DeviceMemory::FreeResult::ok);
  CHECK(rss_bytes() < touched - (32ull << 20));  // freed pages go back to the host
}

TEST_CASE("given two chips in one simulation, both run and keep their own state") {
  sim::Simulation simulation;
  auto& a = simulation.add_chip(ci_chip());
  auto& b = simulation.add_chip(ci_chip({"cores.count=2"}));
  CHECK(b.device_index() == 1);
  CHECK(b.num_cores() == 2);
  const auto pa = *a.memory().allocate(4096);
  const auto pb = *b.memory().allocate(4096);
  isa::ProgramBuilder prog("both", 1);
  prog.add(0, load(0, 0, 0, 2048)).add(0, wait_for(0));
  auto program = std::make_shared<const isa::Program>(prog.build());
  int done = 0;
  a.launch({.program = program, .args = {pa}, .cores = {0}, .name = {}, .id = 1}, [&](const auto&) { ++done; });
  b.launch({.program = program, .args = {pb}, .cores = {1}, .name = {}, .id = 2}, [&](const auto&) { ++done; });
  simulation.run();
  CHECK(done == 2);
  CHECK(a.stats().launches == 1);
  CHECK(b.stats().launches == 1);
}

TEST_CASE("given tracing, the trace is Chrome JSON with a track per unit and counters") {
  sim::Simulation simulation;
  auto& chip = simulation.add_chip(ci_chip());
  const auto buf = *chip.memory().allocate(1 << 16);
  chip.start_trace();
  isa::ProgramBuilder b("traced", 1);
  b.add(0, load(0, 0, 0, 4096)).add(0, wait_for(0));
  b.add(0, isa::Matmul{.a = 0, .b = 0, .c = 8192, .m = 32, .n = 32, .k = 32, .lda = 32, .ldb = 32, .ldc = 32});
  b.add(0, isa::VUnary{.op = isa::UnaryOp::exp, .dtype = DType::fp32, .src = 8192, .dst = 8192, .count = 1024});
  b.add(0, store(8192, 0, 0, 1024, DType::fp32)).add(0, wait_for(0));
  run(simulation, chip, b, {buf});
  const std::string path = std::string(SPYRE_BINARY_DIR) + "/chip_trace_test.json";
  chip.stop_trace(path);
  std::ifstream in(path);
  const auto trace = nlohmann::json::parse(in);
  std::set<std::string> tracks, counters;
  int complete = 0;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name") tracks.insert(e["args"]["name"].get<std::string>());
    if (e["ph"] == "C") counters.insert(e["name"].get<std::string>());
    if (e["ph"] == "X") {
      ++complete;
      CHECK(e.contains("ts"));
      CHECK(e.contains("dur"));
    }
  }
  for (const char* t : {"core 0 compute", "core 0 vector", "core 0 dma 0", "dram channel 0"}) {
    INFO(t);
    CHECK(tracks.count(t) == 1);
  }
  CHECK(counters.count("dram GB/s") == 1);
  CHECK(counters.count("core 0 scratchpad bytes") == 1);
  CHECK(complete >= 5);
}

TEST_CASE("given an engine's outstanding-request limit, one core's loads are capped by it and a second engine doubles them") {
  // 16 channels of 32 B/ns (512 B/ns in all), 100 ns DRAM latency, 8 requests of 128 B
  // in flight per engine: 8 x 128 B / 100 ns = 10.24 B/ns per engine.
  const std::vector<std::string> wide = {"memory.channels=16", "memory.peak_gbps=1024", "memory.latency_ns=100",
                                         "dma.outstanding_requests=8"};
  const auto two_loads = [&](const std::vector<std::string>& set) {
    sim::Simulation simulation;
    auto& chip = simulation.add_chip(ci_chip(with(with(round_numbers(), wide), set)));
    const auto buf = *chip.memory().allocate(2 * 65536);
    isa::ProgramBuilder b("loads", 1);
    b.add(0, load(0, 0, 0, 32768)).add(0, load(65536, 0, 65536, 32768, DType::fp16, 1)).add(0, isa::Wait{.token_mask = 3});
    return duration(run(simulation, chip, b, {buf}));
  };
  const auto one_load = [&](const std::vector<std::string>& set) {
    sim::Simulation simulation;
    auto& chip = simulation.add_chip(ci_chip(with(with(round_numbers(), wide), set)));
    const auto buf = *chip.memory().allocate(65536);
    isa::ProgramBuilder b("load", 1);
    b.add(0, load(0, 0, 0, 32768)).add(0, wait_for(0));
    return duration(run(simulation, chip, b, {buf}));
  };
  // One 64 KiB load: the engine takes setup 32 ns + 65536 / 10.24 = 6400 ns -> [0, 6432];
  // the channels (4096 B each at 32 B/ns, from 32 ns) and the ring link (512 ns) finish
  // earlier; + DRAM latency 100 + scratchpad latency 4 = 6536 ns.
  CHECK(one_load({}) == 6536000);
  // Without the limit the engine moves 128 B/ns: [0, 544]; the ring link [32, 544] too;
  // 544 + 104 = 648 ns.
  CHECK(one_load({"dma.outstanding_requests=0"}) == 648000);
  // Two loads on one engine: the second waits for it, [6432, 12864], + 104 = 12968 ns.
  CHECK(two_loads({"dma.engines_per_core=1"}) == 12968000);
  // Two engines take one load each, side by side: 6536 ns.
  CHECK(two_loads({"dma.engines_per_core=2"}) == 6536000);
}

TEST_CASE("given fewer or narrower scratchpad ports, a matmul waits for its operands to stream") {
  const auto mm_time = [&](const std::vector<std::string>& set) {
    sim::Simulation simulation;
    auto& chip = simulation.add_chip(ci_chip(with(with(round_numbers(), textbook_array()), set)));
    isa::ProgramBuilder b("mm", 1);
    b.add(0, mm64());
    return duration(run(simulation, chip, b, {}));
  };
  // 64x64x64 fp16 on one 32x32 output-stationary array streams A once per column fold
  // and B once per row fold: 2 x 64 x 64 + 2 x 64 x 64 = 16384 elements x 2 B = 32768 B,
  // and writes C once: 64 x 64 x 4 B = 16384 B; 49152 B in all.
  // 4 ports x 256 B/cycle: 48 cycles, under the array's 503.
  CHECK(mm_time({}) == 503000);
  // 1 port of 16 B/cycle: 49152 / 16 = 3072 cycles (1 GHz).
  CHECK(mm_time({"cores.scratchpad.ports=1", "cores.scratchpad.bytes_per_cycle_per_port=16"}) == 3072000);
  // 2 such ports: 1536 cycles.
  CHECK(mm_time({"cores.scratchpad.ports=2", "cores.scratchpad.bytes_per_cycle_per_port=16"}) == 1536000);
}

TEST_CASE("given a load still waiting for DRAM, its ring links are free for a message until the data arrives") {
  // Cores 0, 1, 2 at ring stops 0, 1, 2, the memory stop at 3; 1 GHz, one channel of
  // 8 B/ns, links of 128 B/ns, no hop latency; vector units one lane wide, no pipeline
  // latency, so a 40-element fill takes 40 ns.
  sim::Simulation simulation;
  auto& chip = simulation.add_chip(ci_chip(with(round_numbers(3), {"cores.corelets=1", "cores.vector.lanes=1",
                                                                     "cores.vector.units_per_corelet=1",
                                                                     "cores.vector.pipeline_latency_cycles=0"})));
  const auto buf = *chip.memory().allocate(4096);
  chip.start_trace();
  isa::ProgramBuilder b("flow", 3);
  // Core 0 receives 4 KiB from core 2 (clockwise over links 2 and 3).
  b.add(0, isa::RingRecv{.token = 5, .src_core = 2, .tag = 1, .sp_addr = 0, .bytes = 4096});
  // Core 1 loads 4 KiB (memory stop 3 to stop 1, clockwise over links 3 and 0): the
  // channel delivers over [32, 544] ns.
  b.add(1, load(0, 0, 0, 2048)).add(1, wait_for(0));
  // Core 2 sends at 40 ns.
  b.add(2, isa::VFill{.dtype = DType::int8, .dst = 0, .count = 40, .value = 0});
  b.add(2, isa::RingSend{.token = 5, .dst_core = 0, .tag = 1, .sp_addr = 0, .bytes = 4096});
  b.add(2, wait_for(5));
  run(simulation, chip, b, {buf});
  const std::string path = std::string(SPYRE_BINARY_DIR) + "/chip_flow_test.json";
  chip.stop_trace(path);
  std::ifstream in(path);
  const auto trace = nlohmann::json::parse(in);
  // (Times from the launch's start: simulated time runs on across the tests of one process.)
  double send_end_us = -1, launch_start_us = 0;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "X" && e["name"].get<std::string>().rfind("send 4.0 KiB", 0) == 0) {
      send_end_us = e["ts"].get<double>() + e["dur"].get<double>();
    }
    if (e["ph"] == "X" && e["name"] == "flow") launch_start_us = e["ts"].get<double>();
  }
  send_end_us -= launch_start_us;
  // The load holds link 3 for its 32 ns only as its bytes arrive, [512, 544] ns, so the
  // message crosses links 2 and 3 in [40, 72] ns. (Booked from the load's start, link 3
  // would be busy over [32, 64] and the message would arrive at 96 ns.)
  CHECK(send_end_us == Catch::Approx(0.072).margin(1e-9));
}

TEST_CASE("given a strided innermost dimension, a DMA pays the sticks it spans, not a stick per element") {
  sim::Simulation simulation;
  auto& chip = simulation.add_chip(ci_chip(round_numbers()));
  const auto buf = *chip.memory().allocate(8192);
  isa::ProgramBuilder b("strided", 1);
  // 1024 fp16 elements 2 apart: they span 2048 elements = 4096 bytes = 32 sticks.
  auto every_other = load(0, 0, 0, 1024);
  every_other.mem_stride = {2, 0, 0};
  // 32 elements 64 apart (128 bytes): one per stick, 32 sticks.
  auto one_per_stick = load(4096, 0, 0, 32, DType::fp16, 1);
  one_per_stick.mem_stride = {64, 0, 0};
  b.add(0, every_other).add(0, one_per_stick).add(0, isa::Wait{.token_mask = 3});
  const auto r = run(simulation, chip, b, {buf});
  CHECK(!r.fault);
  CHECK(r.dram_read_bytes == 4096 + 32 * 128);
}

TEST_CASE("given rows one interleave round apart, the skewed channel map spreads them and the interleaved one does not") {
  // 4 channels of 8 B/ns, a 128-byte interleave: a round is 512 bytes. 16 rows of 128 B
  // (64 fp16), 512 B apart, from the start of device memory: row r is granule 4r.
  // interleaved: 4r mod 4 = 0, every row on channel 0 (2048 B, 256 ns of channel time).
  // skewed: the base-4 digits of 4r summed mod 4 = (r mod 4 + r / 4) mod 4, so rows
  // 0..15 land on channels 0 1 2 3 1 2 3 0 2 3 0 1 3 0 1 2: 512 B on each (64 ns).
  for (const bool skewed : {false, true}) {
    sim::Simulation simulation;
    auto& chip = simulation.add_chip(ci_chip(with(round_numbers(), {"memory.channels=4", "memory.peak_gbps=64",
                                                                    "memory.interleave_bytes=128",
                                                                    skewed ? "memory.channel_map=skewed"
                                                                           : "memory.channel_map=interleaved"})));
    const auto buf = *chip.memory().allocate(8192);
    REQUIRE(buf == chip.memory().base());
    auto rows = load(0, 0, 0, 64);
    rows.shape = {64, 16, 1};
    rows.mem_stride = {1, 256, 0};
    isa::ProgramBuilder b("rows", 1);
    b.add(0, rows).add(0, wait_for(0));
    const auto r = run(simulation, chip, b, {buf});
    REQUIRE_FALSE(r.fault);
    const auto report = chip.report(duration(r));
    INFO((skewed ? "skewed" : "interleaved"));
    for (std::uint32_t c = 0; c < 4; ++c) {
      CHECK(report["dram"]["channels"][c]["bytes"] == (skewed ? 512u : c == 0 ? 2048u : 0u));
      CHECK(report["dram"]["channels"][c]["busy_ps"] == (skewed ? 64000u : c == 0 ? 256000u : 0u));
    }
  }
}
