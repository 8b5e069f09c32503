// spyre-drv-bench: what submitting work costs the host (Google Benchmark). The driver
// queues asynchronous commands for the simulation thread, so a submission should cost
// a few microseconds at most (target: under 5 us per launch).
//
//   tools/dev run spyre-drv-bench                # medians over 5 repetitions
#include <cstdlib>
#include <vector>

#include <benchmark/benchmark.h>

#include "spyre/isa/program.h"
#include "spyre/spyre_drv.h"

namespace {

struct Fixture {
  spyre_device_t device = nullptr;
  spyre_queue_t queue = nullptr;
  spyre_program_t program = nullptr;
  void* buffer = nullptr;

  Fixture() {
    const char* config = std::getenv("SPYRE_SIM_CONFIG");
    if (config == nullptr || *config == '\0') setenv("SPYRE_SIM_CONFIG", SPYRE_SOURCE_DIR "/configs/spyre-ci.yaml", 1);
    if (spyreDeviceGet(0, &device) != SPYRE_SUCCESS || spyreQueueCreate(device, SPYRE_QUEUE_PRIORITY_NORMAL, &queue) ||
        spyreMemAlloc(device, 4096, &buffer)) {
      std::abort();
    }
    spyre::isa::ProgramBuilder b("tiny", 1);
    b.add(0, spyre::isa::Nop{});
    const auto blob = b.build();
    if (spyreProgramLoad(device, blob.data(), blob.size(), nullptr, &program) != SPYRE_SUCCESS) std::abort();
  }
};

Fixture& fixture() {
  static Fixture f;
  return f;
}

// Drains the queue every `every` submissions, outside the timed region, so the
// backlog (and the simulation's memory) stays bounded.
template <class Submit>
void run(benchmark::State& state, Submit submit) {
  auto& f = fixture();
  std::size_t n = 0;
  for (auto _ : state) {
    if (submit(f) != SPYRE_SUCCESS) state.SkipWithError(spyreGetLastErrorMessage());
    if (++n % 4096 == 0) {
      state.PauseTiming();
      spyreQueueSynchronize(f.queue);
      state.ResumeTiming();
    }
  }
  spyreQueueSynchronize(f.queue);  // after the timed loop
}

void BM_LaunchSubmit(benchmark::State& state) {
  std::vector<std::uint64_t> args{0};
  spyre_launch_desc_t desc{};
  desc.struct_size = sizeof desc;
  desc.args = args.data();
  desc.num_args = 1;
  run(state, [&](Fixture& f) {
    desc.program = f.program;
    return spyreLaunch(f.queue, &desc);
  });
}

void BM_SmallCopySubmit(benchmark::State& state) {
  std::vector<std::uint8_t> host(256, 7);
  run(state, [&](Fixture& f) { return spyreMemcpyAsync(f.queue, f.buffer, host.data(), host.size()); });
}

void BM_EventRecordSubmit(benchmark::State& state) {
  spyre_event_t event = nullptr;
  spyreEventCreate(fixture().device, &event);
  run(state, [&](Fixture& f) { return spyreEventRecord(event, f.queue); });
}

void BM_QueueQueryRoundTrip(benchmark::State& state) {
  run(state, [](Fixture& f) {
    const auto rc = spyreQueueQuery(f.queue);
    return rc == SPYRE_NOT_READY ? SPYRE_SUCCESS : rc;
  });
}

}  // namespace

BENCHMARK(BM_LaunchSubmit)->Repetitions(5)->ReportAggregatesOnly(true)->MinTime(0.2);
BENCHMARK(BM_SmallCopySubmit)->Repetitions(5)->ReportAggregatesOnly(true)->MinTime(0.2);
BENCHMARK(BM_EventRecordSubmit)->Repetitions(5)->ReportAggregatesOnly(true)->MinTime(0.2);
BENCHMARK(BM_QueueQueryRoundTrip)->Repetitions(5)->ReportAggregatesOnly(true)->MinTime(0.2);

BENCHMARK_MAIN();
