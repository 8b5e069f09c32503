// Behaviour of the firmware model through the driver ABI: determinism under host
// timing noise, queue concurrency and order, priorities, events, faults, the watchdog,
// and many host threads. Each test starts a fresh driver with the config it needs.
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include "spyre/isa/program.h"
#include "spyre/spyre_drv.h"

using Catch::Matchers::ContainsSubstring;
using namespace spyre;

namespace {

#define OK(call) REQUIRE_MSG((call), #call)
void REQUIRE_MSG(spyre_result_t rc, const char* what) {
  INFO(what << " -> " << spyreResultString(rc) << ": " << spyreGetLastErrorMessage());
  REQUIRE(rc == SPYRE_SUCCESS);
}

// Restarts the driver with configs/spyre-ci.yaml, `devices` devices and overrides.
// SPYRE_SIM_MODE is left as the environment has it: tests tagged [timed] need the
// timed device; the others also run on the functional one (the tsan label).
spyre_device_t fresh_driver(const std::string& overrides = "", int devices = 1) {
  spyreDriverShutdown();
  setenv("SPYRE_SIM_CONFIG", SPYRE_SOURCE_DIR "/configs/spyre-ci.yaml", 1);
  setenv("SPYRE_SIM_DEVICES", std::to_string(devices).c_str(), 1);
  setenv("SPYRE_SIM_SET", overrides.c_str(), 1);
  spyre_device_t d = nullptr;
  OK(spyreDeviceGet(0, &d));
  return d;
}

spyre_program_t load(spyre_device_t d, const isa::ProgramBuilder& b) {
  const auto blob = b.build();
  spyre_program_t p = nullptr;
  OK(spyreProgramLoad(d, blob.data(), blob.size(), nullptr, &p));
  return p;
}

// One stream: a 256x256x256 fp16 matmul (ci chip: 512 folds x (32 + 14) - 1 = 23551
// cycles = 15700.667 ns at 1.5 GHz).
spyre_program_t matmul_program(spyre_device_t d, const char* name = "matmul", std::uint32_t streams = 1) {
  isa::ProgramBuilder b(name, streams);
  for (std::uint32_t s = 0; s < streams; ++s) {
    b.add(s, isa::Matmul{.a = 0, .b = 256 << 10, .c = 512 << 10, .m = 256, .n = 256, .k = 256, .lda = 256,
                         .ldb = 256, .ldc = 256, .in = isa::DType::fp16, .out = isa::DType::fp32});
  }
  return load(d, b);
}

// out[i] = in[i] + 1 over n int32 values (one stream).
spyre_program_t increment_program(spyre_device_t d, std::uint32_t n) {
  isa::ProgramBuilder b("increment", 1);
  isa::DmaLoad in;
  in.dtype = isa::DType::int32;
  in.arg = 0;
  in.shape = {n, 1, 1};
  isa::DmaStore out;
  out.dtype = isa::DType::int32;
  out.arg = 1;
  out.shape = {n, 1, 1};
  b.add(0, in).add(0, isa::Wait{.token_mask = 1});
  b.add(0, isa::VBinary{.op = isa::BinaryOp::add, .dtype = isa::DType::int32, .bcast = isa::Broadcast::immediate,
                        .a = 0, .b = 0, .dst = 0, .rows = 1, .cols = n, .imm = 1});
  b.add(0, out).add(0, isa::Wait{.token_mask = 1});
  return load(d, b);
}

// A launch descriptor with its own argument table (the descriptor points into it).
struct LaunchDesc {
  std::vector<std::uint64_t> args;
  spyre_launch_desc_t d{};
  const spyre_launch_desc_t* operator&() const { return &d; }
};

LaunchDesc desc(spyre_program_t p, std::vector<std::uint64_t> args = {}) {
  LaunchDesc l{std::move(args), {}};
  l.d.struct_size = sizeof l.d;
  l.d.program = p;
  l.d.args = l.args.empty() ? nullptr : l.args.data();
  l.d.num_args = static_cast<std::uint32_t>(l.args.size());
  return l;
}

std::uint64_t timestamp(spyre_event_t e) {
  std::uint64_t t = 0;
  OK(spyreEventGetTimestamp(e, &t));
  return t;
}

std::uint64_t as_arg(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

}  // namespace

TEST_CASE("given two queues and random host sleeps, every timestamp is identical in 20 runs", "[timed]") {
  std::vector<std::vector<std::uint64_t>> runs;
  std::mt19937 rng(42);
  for (int run = 0; run < 20; ++run) {
    const spyre_device_t d = fresh_driver();
    // Simulated time runs on across driver restarts in one process: compare times
    // from the start of each run.
    std::uint64_t start = 0;
    OK(spyreDriverGetHostTime(&start));
    spyre_queue_t qa = nullptr, qb = nullptr;
    OK(spyreQueueCreate(d, SPYRE_QUEUE_PRIORITY_NORMAL, &qa));
    OK(spyreQueueCreate(d, SPYRE_QUEUE_PRIORITY_NORMAL, &qb));
    const auto mm = matmul_program(d);
    const auto inc = increment_program(d, 4096);
    void *a = nullptr, *b = nullptr;
    OK(spyreMemAlloc(d, 4 * 4096, &a));
    OK(spyreMemAlloc(d, 4 * 4096, &b));
    std::vector<std::int32_t> host(4096, 5), result(4096, 0);
    std::vector<spyre_event_t> events;
    const auto mark = [&](spyre_queue_t q) {
      spyre_event_t e = nullptr;
      OK(spyreEventCreate(d, &e));
      OK(spyreEventRecord(e, q));
      events.push_back(e);
    };
    for (int i = 0; i < 6; ++i) {
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % 400));
      OK(spyreMemcpyAsync(qa, a, host.data(), 4 * 4096));
      mark(qa);
      const auto l = desc(inc, {as_arg(a), as_arg(b)});
      OK(spyreLaunch(qa, &l));
      mark(qa);
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % 400));
      const auto m = desc(mm);
      OK(spyreLaunch(qb, &m));
      mark(qb);
      OK(spyreMemcpyAsync(qb, result.data(), b, 4 * 4096));
      mark(qb);
    }
    OK(spyreDeviceSynchronize(d));
    std::vector<std::uint64_t> times;
    for (auto e : events) times.push_back(timestamp(e) - start);
    CHECK(result[0] == 6);
    runs.push_back(times);
  }
  for (std::size_t r = 1; r < runs.size(); ++r) CHECK(runs[r] == runs[0]);
}

TEST_CASE("given two queues, their work overlaps in simulated time while each queue stays in order", "[timed]") {
  const spyre_device_t d = fresh_driver();
  spyre_queue_t qa = nullptr, qb = nullptr;
  OK(spyreQueueCreate(d, SPYRE_QUEUE_PRIORITY_NORMAL, &qa));
  OK(spyreQueueCreate(d, SPYRE_QUEUE_PRIORITY_NORMAL, &qb));
  const auto mm = matmul_program(d);
  spyre_event_t a0, a1, a2, b0, b1;
  for (auto* e : {&a0, &a1, &a2, &b0, &b1}) OK(spyreEventCreate(d, e));
  const auto l = desc(mm);
  OK(spyreEventRecord(a0, qa));
  OK(spyreLaunch(qa, &l));
  OK(spyreEventRecord(a1, qa));
  OK(spyreLaunch(qa, &l));
  OK(spyreEventRecord(a2, qa));
  OK(spyreEventRecord(b0, qb));
  OK(spyreLaunch(qb, &l));
  OK(spyreEventRecord(b1, qb));
  OK(spyreDeviceSynchronize(d));
  // Queue A: its second kernel starts after its first ended.
  CHECK(timestamp(a0) < timestamp(a1));
  CHECK(timestamp(a1) < timestamp(a2));
  const std::uint64_t kernel_ps = 15700667;  // 23551 cycles at 1.5 GHz
  CHECK(timestamp(a2) - timestamp(a1) >= kernel_ps);
  // Queue B's kernel ran while A's first one did: it ended before A's first ended plus a kernel.
  CHECK(timestamp(b0) < timestamp(a1));
  CHECK(timestamp(b1) < timestamp(a1) + kernel_ps / 2);
  // Total time is well under the three kernels back to back.
  CHECK(timestamp(a2) - timestamp(a0) < 3 * kernel_ps);
}

TEST_CASE("given a low-priority backlog, a high-priority launch overtakes it at the next scheduling point", "[timed]") {
  const spyre_device_t d = fresh_driver();  // 4 cores
  spyre_queue_t low = nullptr, high = nullptr;
  OK(spyreQueueCreate(d, SPYRE_QUEUE_PRIORITY_LOW, &low));
  OK(spyreQueueCreate(d, SPYRE_QUEUE_PRIORITY_HIGH, &high));
  const auto wide = matmul_program(d, "wide", 4);  // needs every core
  const auto l = desc(wide);
  // Two queues' worth of low-priority work; a single low queue runs in order, so use
  // a second low queue to have a backlog that competes for cores.
  spyre_queue_t low2 = nullptr;
  OK(spyreQueueCreate(d, SPYRE_QUEUE_PRIORITY_LOW, &low2));
  spyre_event_t low_done, low2_done, high_done;
  for (auto* e : {&low_done, &low2_done, &high_done}) OK(spyreEventCreate(d, e));
  OK(spyreLaunch(low, &l));   // runs first (cores free)
  OK(spyreLaunch(low, &l));
  OK(spyreEventRecord(low_done, low));
  OK(spyreLaunch(low2, &l));  // waits for cores
  OK(spyreEventRecord(low2_done, low2));
  OK(spyreLaunch(high, &l));  // submitted last, waits for cores, but goes first
  OK(spyreEventRecord(high_done, high));
  OK(spyreDeviceSynchronize(d));
  // When the first low kernel ends, the high one gets the cores before the queued low ones.
  CHECK(timestamp(high_done) < timestamp(low2_done));
  CHECK(timestamp(high_done) < timestamp(low_done));
  std::uint32_t count = 0;
  OK(spyreDeviceGetLaunchRecords(d, &count, nullptr));
  std::vector<spyre_launch_record_t> records(count);
  for (auto& r : records) r.struct_size = sizeof r;
  OK(spyreDeviceGetLaunchRecords(d, &count, records.data()));
  REQUIRE(count == 4);
  CHECK(records[0].queue == low);   // first
  CHECK(records[1].queue == high);  // overtook the backlog
}

TEST_CASE("given an event recorded on queue A and waited on by queue B, B's work follows A's") {
  const spyre_device_t d = fresh_driver();
  spyre_queue_t qa = nullptr, qb = nullptr;
  OK(spyreQueueCreate(d, SPYRE_QUEUE_PRIORITY_NORMAL, &qa));
  OK(spyreQueueCreate(d, SPYRE_QUEUE_PRIORITY_NORMAL, &qb));
  const auto mm = matmul_program(d);
  const auto inc = increment_program(d, 1024);
  void *buf = nullptr, *out = nullptr;
  OK(spyreMemAlloc(d, 4096, &buf));
  OK(spyreMemAlloc(d, 4096, &out));
  std::vector<std::int32_t> host(1024, 41), result(1024, 0);
  spyre_event_t produced, a_end, b_start;
  for (auto* e : {&produced, &a_end, &b_start}) OK(spyreEventCreate(d, e));
  const auto m = desc(mm);
  OK(spyreLaunch(qa, &m));  // A is busy first
  OK(spyreMemcpyAsync(qa, buf, host.data(), 4096));
  OK(spyreEventRecord(produced, qa));
  OK(spyreQueueWaitEvent(qb, produced));
  OK(spyreEventRecord(b_start, qb));
  const auto l = desc(inc, {as_arg(buf), as_arg(out)});
  OK(spyreLaunch(qb, &l));
  OK(spyreMemcpyAsync(qb, result.data(), out, 4096));
  OK(spyreQueueSynchronize(qb));
  CHECK(result[0] == 42);
  CHECK(result[1023] == 42);
  CHECK(timestamp(b_start) >= timestamp(produced));
}

TEST_CASE("given two events around a kernel, the elapsed time is the simulated duration between them", "[timed]") {
  const spyre_device_t d = fresh_driver();
  spyre_queue_t q = nullptr;
  OK(spyreQueueCreate(d, SPYRE_QUEUE_PRIORITY_NORMAL, &q));
  const auto mm = matmul_program(d);
  spyre_event_t e0, e1;
  OK(spyreEventCreate(d, &e0));
  OK(spyreEventCreate(d, &e1));
  std::uint64_t h0 = 0;
  OK(spyreDriverGetHostTime(&h0));
  OK(spyreEventRecord(e0, q));  // arrives at h0 + 1 us
  const auto l = desc(mm);
  OK(spyreLaunch(q, &l));       // arrives at h0 + 2 us
  OK(spyreEventRecord(e1, q));  // arrives at h0 + 3 us
  OK(spyreEventSynchronize(e1));
  std::uint64_t h1 = 0;
  OK(spyreDriverGetHostTime(&h1));  // reading the clock does not advance it
  // ci config: 1 us per call; fetch 300 cycles = 200 ns; launch 1500 cycles = 1000 ns.
  // e0 completes at h0 + 1000 + 200 ns. The launch arrives at h0 + 2000, is fetched by
  // h0 + 2200, starts its kernel at h0 + 3200 and ends at h0 + 3200 + 15700.667 ns; e1
  // (already queued) is fetched 200 ns later: h0 + 19100.667 ns.
  CHECK(timestamp(e0) == h0 + 1200000);
  CHECK(timestamp(e1) == h0 + 19100667);
  double ns = 0;
  OK(spyreEventElapsedTime(e0, e1, &ns));
  CHECK(ns == 17900.667);
  // The synchronize moved the host clock to when e1 completed.
  CHECK(h1 == timestamp(e1));
}

TEST_CASE("given a faulting kernel on one queue, a concurrent queue's results stay correct") {
  const spyre_device_t d = fresh_driver();
  spyre_queue_t bad = nullptr, good = nullptr;
  OK(spyreQueueCreate(d, SPYRE_QUEUE_PRIORITY_NORMAL, &bad));
  OK(spyreQueueCreate(d, SPYRE_QUEUE_PRIORITY_NORMAL, &good));
  void *small = nullptr, *in = nullptr, *out = nullptr;
  OK(spyreMemAlloc(d, 1024, &small));
  OK(spyreMemAlloc(d, 4 * 4096, &in));
  OK(spyreMemAlloc(d, 4 * 4096, &out));
  const auto inc = increment_program(d, 4096);
  std::vector<std::int32_t> host(4096), result(4096, 0);
  for (int i = 0; i < 4096; ++i) host[i] = i;
  const auto bad_launch = desc(inc, {as_arg(small), as_arg(small)});  // reads 16 KiB from 1 KiB
  const auto good_launch = desc(inc, {as_arg(in), as_arg(out)});
  OK(spyreLaunch(bad, &bad_launch));
  OK(spyreMemcpyAsync(good, in, host.data(), 4 * 4096));
  OK(spyreLaunch(good, &good_launch));
  OK(spyreMemcpyAsync(good, result.data(), out, 4 * 4096));
  CHECK(spyreQueueSynchronize(bad) == SPYRE_ERROR_DEVICE_FAULT);
  if (spyreQueueSynchronize(good) != SPYRE_SUCCESS) {
    spyre_fault_t f{};
    f.struct_size = sizeof f;
    spyreQueueGetFault(good, &f);
    FAIL("good queue faulted: " << f.reason << " [" << f.instruction << "]");
  }
  for (int i = 0; i < 4096; i += 511) CHECK(result[i] == i + 1);
  spyre_fault_t fault{};
  fault.struct_size = sizeof fault;
  OK(spyreQueueGetFault(bad, &fault));
  CHECK_THAT(std::string(fault.reason), ContainsSubstring("past the end of a 1024-byte allocation"));
  CHECK(std::string(fault.kernel) == "increment");
  OK(spyreQueueAcknowledgeError(bad));
  std::fill(result.begin(), result.end(), 0);
  OK(spyreLaunch(bad, &good_launch));  // the faulted queue and the device work afterwards
  OK(spyreMemcpyAsync(bad, result.data(), out, 4 * 4096));
  OK(spyreQueueSynchronize(bad));
  CHECK(result[4095] == 4096);
}

TEST_CASE("given a kernel that runs past the watchdog bound, it is aborted with a fault", "[timed]") {
  // 10000 cycles: less than the 23551-cycle matmul.
  const spyre_device_t d = fresh_driver("firmware.watchdog_cycles=10000");
  spyre_queue_t q = nullptr;
  OK(spyreQueueCreate(d, SPYRE_QUEUE_PRIORITY_NORMAL, &q));
  const auto mm = matmul_program(d, "runaway");
  const auto l = desc(mm);
  OK(spyreLaunch(q, &l));
  CHECK(spyreQueueSynchronize(q) == SPYRE_ERROR_DEVICE_FAULT);
  spyre_fault_t fault{};
  fault.struct_size = sizeof fault;
  OK(spyreQueueGetFault(q, &fault));
  CHECK_THAT(std::string(fault.reason), ContainsSubstring("watchdog: the kernel ran past 10000 cycles"));
  CHECK(std::string(fault.kernel) == "runaway");
  OK(spyreQueueAcknowledgeError(q));
}

TEST_CASE("given a deadlocked kernel, the queue reports it instead of hanging") {
  const spyre_device_t d = fresh_driver();
  spyre_queue_t q = nullptr;
  OK(spyreQueueCreate(d, SPYRE_QUEUE_PRIORITY_NORMAL, &q));
  isa::ProgramBuilder b("waits_forever", 2);
  b.add(0, isa::RingRecv{.token = 0, .src_core = 1, .tag = 9, .sp_addr = 0, .bytes = 64});
  const auto p = load(d, b);
  const auto l = desc(p);
  OK(spyreLaunch(q, &l));
  CHECK(spyreQueueSynchronize(q) == SPYRE_ERROR_DEVICE_FAULT);
  spyre_fault_t fault{};
  fault.struct_size = sizeof fault;
  OK(spyreQueueGetFault(q, &fault));
  CHECK_THAT(std::string(fault.reason), ContainsSubstring("deadlock"));
}

TEST_CASE("given 8 host threads with 4 queues each and 500 mixed commands, data is right and nothing hangs") {
  const spyre_device_t d = fresh_driver("", 1);
  constexpr int kThreads = 8, kQueues = 4, kCommands = 500;
  const auto inc = increment_program(d, 256);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<spyre_queue_t> queues(kQueues);
      std::vector<void*> in(kQueues), out(kQueues);
      std::vector<std::vector<std::int32_t>> results(kQueues, std::vector<std::int32_t>(256));
      for (int q = 0; q < kQueues; ++q) {
        if (spyreQueueCreate(d, static_cast<spyre_queue_priority_t>(q % 3), &queues[q]) != SPYRE_SUCCESS ||
            spyreMemAlloc(d, 1024, &in[q]) != SPYRE_SUCCESS || spyreMemAlloc(d, 1024, &out[q]) != SPYRE_SUCCESS) {
          ++failures;
          return;
        }
      }
      std::vector<std::int32_t> host(256);
      spyre_event_t event = nullptr;
      spyreEventCreate(d, &event);
      for (int c = 0; c < kCommands; ++c) {
        const int q = c % kQueues;
        const int value = t * 100000 + c;
        spyre_result_t rc = SPYRE_SUCCESS;
        switch ((c / kQueues) % 4) {
          case 0:
            std::fill(host.begin(), host.end(), value);
            rc = spyreMemcpyAsync(queues[q], in[q], host.data(), 1024);  // pageable: snapshotted
            break;
          case 1: {
            const std::vector<std::uint64_t> args{as_arg(in[q]), as_arg(out[q])};
            const auto l = desc(inc, args);
            rc = spyreLaunch(queues[q], &l);
            break;
          }
          case 2:
            rc = spyreEventRecord(event, queues[q]);
            if (rc == SPYRE_SUCCESS) rc = spyreQueueWaitEvent(queues[(q + 1) % kQueues], event);
            break;
          case 3:
            rc = spyreMemcpyAsync(queues[q], results[q].data(), out[q], 1024);
            if (rc == SPYRE_SUCCESS) rc = spyreQueueSynchronize(queues[q]);
            // The last copy into this queue's input was value - 3 * kQueues (case 0).
            if (rc == SPYRE_SUCCESS && results[q][255] != value - 3 * kQueues + 1) ++failures;
            break;
        }
        if (rc != SPYRE_SUCCESS) ++failures;
      }
      for (int q = 0; q < kQueues; ++q) {
        if (spyreQueueDestroy(queues[q]) != SPYRE_SUCCESS) ++failures;
        spyreMemFree(in[q]);
        spyreMemFree(out[q]);
      }
      spyreEventDestroy(event);
    });
  }
  for (auto& th : threads) th.join();
  CHECK(failures == 0);
  OK(spyreDeviceSynchronize(d));
}

TEST_CASE("given a device pointer, dereferencing it on the host crashes instead of reading memory") {
  const spyre_device_t d = fresh_driver();
  void* p = nullptr;
  OK(spyreMemAlloc(d, 4096, &p));
  const pid_t child = fork();
  if (child == 0) {
    std::signal(SIGSEGV, SIG_DFL);  // not the test framework's handler: just die of it
    volatile char c = *static_cast<volatile char*>(p);  // must fault
    (void)c;
    _exit(0);
  }
  int status = 0;
  waitpid(child, &status, 0);
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGSEGV);
  OK(spyreMemFree(p));
}
