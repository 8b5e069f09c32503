// The firmware model driven directly (no driver): command semantics are written once
// (firmware.cpp) and must be the same for the timed firmware (SystemC queue threads,
// core scheduler, watchdog) and the immediate one (the untimed device).
#include <cstring>
#include <memory>
#include <string>

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include "firmware.h"
#include "sim_test_support.h"

using namespace spyre;
using namespace spyre::test;
using Catch::Matchers::ContainsSubstring;

namespace {

// A chip and its firmware, timed (inside a Simulation) or immediate.
struct Rig {
  explicit Rig(bool timed_device)
      : timed(timed_device),
        chip(timed ? simulation.add_chip(ci_chip()) : *(untimed = std::make_unique<sim::Chip>(ci_chip(), 0, sim::Timing::untimed))),
        firmware(firmware::make_firmware(chip, nullptr)) {}
  // Runs the simulation until nothing is left to do (the immediate firmware has done
  // everything at submission already).
  void run() {
    if (timed) simulation.run();
  }
  std::shared_ptr<firmware::Queue> queue(int priority = 0) {
    auto q = std::make_shared<firmware::Queue>();
    q->priority = priority;
    firmware->add_queue(q);
    return q;
  }

  bool timed;
  sim::Simulation simulation;
  std::unique_ptr<sim::Chip> untimed;
  sim::Chip& chip;
  std::unique_ptr<firmware::Firmware> firmware;
};

firmware::Launch launch_of(const isa::ProgramBuilder& b, std::vector<std::uint64_t> args) {
  firmware::Launch l;
  l.program = std::make_shared<const isa::Program>(b.build());
  l.args = std::move(args);
  l.name = l.program->name();
  return l;
}

}  // namespace

TEST_CASE("given a faulting launch, the queue skips later work until acknowledged, on both firmwares") {
  for (const bool timed : {true, false}) {
    INFO((timed ? "timed" : "immediate"));
    Rig rig(timed);
    const std::uint64_t buf = *rig.chip.memory().allocate(4096);
    auto q = rig.queue();
    auto event = std::make_shared<firmware::EventState>();
    isa::ProgramBuilder bad("bad", 1);
    bad.add(0, load(0, 0, 4000, 100)).add(0, wait_for(0)).add(0, isa::End{});  // 200 bytes from 4000: past the end
    rig.firmware->submit(q, launch_of(bad, {buf}));
    rig.firmware->submit(q, firmware::Fill{.dst = buf, .bytes = 64, .pattern = 0xab, .pattern_size = 1});
    rig.firmware->submit(q, firmware::EventRecord{.event = event, .generation = 1});
    rig.run();
    REQUIRE(q->error);
    REQUIRE(q->fault);
    CHECK(q->fault->command == firmware::CommandKind::launch);
    CHECK(q->fault->command_index == 0);
    CHECK(q->fault->kernel == "bad");
    CHECK(q->fault->pc == 0);
    CHECK_THAT(q->fault->instruction, ContainsSubstring("dma_load"));
    CHECK_THAT(q->fault->reason, ContainsSubstring("past the end of a 4096-byte allocation"));
    CHECK(q->skipped == 1);                  // the fill
    CHECK(event->completed == 1);            // an event record still completes
    CHECK(rig.chip.memory().host(buf)[0] == 0);  // the fill did not run
    CHECK(rig.firmware->idle(*q));
    // Acknowledged, the queue works again.
    rig.firmware->acknowledge(*q);
    rig.firmware->submit(q, firmware::Fill{.dst = buf, .bytes = 64, .pattern = 0xab, .pattern_size = 1});
    rig.run();
    CHECK_FALSE(q->error);
    CHECK(rig.chip.memory().host(buf)[63] == 0xab);
    CHECK(q->completed == 4);
  }
}

TEST_CASE("given a fence, work on the other queues submitted before it completes first") {
  // Timed: queue a runs a long launch; queue b's fence must wait for it, so b's event
  // is stamped after the launch ends. Immediate: everything before has run already.
  for (const bool timed : {true, false}) {
    INFO((timed ? "timed" : "immediate"));
    Rig rig(timed);
    const std::uint64_t buf = *rig.chip.memory().allocate(1 << 20);
    auto a = rig.queue(), b = rig.queue();
    isa::ProgramBuilder slow("slow", 1);
    slow.add(0, load(0, 0, 0, 1 << 18)).add(0, wait_for(0)).add(0, isa::End{});  // 512 KiB
    auto after = std::make_shared<firmware::EventState>();
    rig.firmware->submit(a, launch_of(slow, {buf}));
    rig.firmware->submit(b, firmware::Fence{});
    rig.firmware->submit(b, firmware::EventRecord{.event = after, .generation = 1});
    rig.run();
    REQUIRE(after->completed == 1);
    CHECK_FALSE(a->error);
    const auto& records = rig.chip.stats().launch_records;
    REQUIRE(records.size() == 1);
    CHECK(after->time >= records.back().end);
    if (timed) CHECK(records.back().end > records.back().start);
  }
}

TEST_CASE("given a copy and a fill, both firmwares move the same bytes and count the same traffic") {
  std::vector<std::uint8_t> results[2];
  std::uint64_t written[2] = {0, 0}, read[2] = {0, 0};
  for (const bool timed : {true, false}) {
    Rig rig(timed);
    const std::uint64_t src = *rig.chip.memory().allocate(4096), dst = *rig.chip.memory().allocate(4096);
    auto q = rig.queue();
    rig.firmware->submit(q, firmware::Fill{.dst = src, .bytes = 4096, .pattern = 0x01020304, .pattern_size = 4});
    firmware::Copy c;
    c.direction = firmware::Copy::Direction::device_to_device;
    c.src = src + 4;
    c.dst = dst;
    c.width = 1000;
    c.src_device = c.dst_device = rig.firmware.get();
    rig.firmware->submit(q, std::move(c));
    rig.run();
    REQUIRE_FALSE(q->error);
    const std::uint8_t* p = rig.chip.memory().host(dst);
    results[timed ? 0 : 1].assign(p, p + 4096);
    written[timed ? 0 : 1] = rig.chip.stats().dram_write_bytes;
    read[timed ? 0 : 1] = rig.chip.stats().dram_read_bytes;
  }
  CHECK(results[0] == results[1]);
  CHECK(results[0][0] == 0x04);  // the pattern's bytes from src + 4: little-endian 04 03 02 01
  // The fill writes 4096 bytes (32 sticks); the copy reads [4, 1004): sticks 0..7 =
  // 1024 bytes, and writes [0, 1000): 8 sticks = 1024 bytes.
  CHECK(written[0] == 4096 + 1024);
  CHECK(read[0] == 1024);
  CHECK(written[1] == written[0]);
  CHECK(read[1] == read[0]);
}
