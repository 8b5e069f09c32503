// Fuzz target: sequences of driver ABI calls on two functional devices. Each input
// byte picks a call; the bytes after it pick its handles (live, destroyed, foreign
// or garbage), device pointers (inside, past, between or outside allocations), sizes
// and flags. Host pointers always point into the fuzzer's own buffer: a wild host
// pointer is the caller's bug, a wild device pointer or handle must be the driver's
// error. Findings: a crash or hang, SPYRE_ERROR_INTERNAL, or a result that is not a
// documented code. Every object an input made is released after it.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "fuzz_harness.h"
#include "spyre/isa/program.h"
#include "spyre/spyre_drv.h"

namespace {

using namespace spyre;

struct Reader {
  std::span<const std::uint8_t> in;
  std::size_t at = 0;
  bool done() const { return at >= in.size(); }
  std::uint8_t byte() { return at < in.size() ? in[at++] : 0; }
  std::uint64_t value() {  // small values mostly, edge values sometimes
    const std::uint8_t kind = byte();
    switch (kind % 8) {
      case 0: return byte();
      case 1: return std::uint64_t{byte()} << 8 | byte();
      case 2: return std::uint64_t{1} << (byte() % 64);
      case 3: return (std::uint64_t{1} << (byte() % 64)) - 1;
      case 4: return ~std::uint64_t{0} - byte();
      default: return byte() * 64ull;
    }
  }
};

constexpr std::size_t kHost = 1 << 16;
alignas(4096) std::uint8_t g_host[kHost];

std::vector<std::uint8_t> small_program() {
  isa::ProgramBuilder b("fuzz", 2);
  for (std::uint32_t c = 0; c < 2; ++c) {
    isa::DmaLoad l;
    l.dtype = isa::DType::fp16;
    l.offset = c * 128;
    l.shape = {64, 1, 1};
    b.add(c, l).add(c, isa::Wait{.token_mask = 1});
    isa::DmaStore s;
    static_cast<isa::Dma&>(s) = l;
    s.arg = 1;
    b.add(c, s).add(c, isa::Wait{.token_mask = 1});
  }
  return b.build();
}

}  // namespace

const char* fuzz_target_name() { return "fuzz_abi"; }

namespace {

struct State {
  std::vector<spyre_device_t> devices;
  std::vector<void*> memory;
  std::vector<spyre_queue_t> queues;
  std::vector<spyre_event_t> events;
  std::vector<spyre_program_t> programs;
  std::vector<void*> pinned;
};

bool documented(spyre_result_t rc) {
  if (rc == SPYRE_ERROR_INTERNAL || std::strcmp(spyreResultString(rc), "SPYRE_RESULT_UNKNOWN") == 0) {
    std::fprintf(stderr, "fuzz_abi: %s: %s\n", spyreResultString(rc), spyreGetLastErrorMessage());
    return false;
  }
  return true;
}

template <class T>
T pick(Reader& r, const std::vector<T>& live) {
  const std::uint8_t k = r.byte();
  if (k % 8 == 7 || live.empty()) return reinterpret_cast<T>(static_cast<std::uintptr_t>(r.value()));  // garbage
  return live[k % live.size()];
}

// A pointer into (or just past) one of this input's allocations, or garbage. Garbage
// only where the other end is a host buffer of ours or there is none: a garbage value
// taken for host memory opposite a device pointer would be the caller's wild pointer.
void* device_pointer(Reader& r, const State& s, bool allow_garbage = true) {
  const std::uint8_t k = r.byte();
  if (s.memory.empty()) return allow_garbage ? reinterpret_cast<void*>(static_cast<std::uintptr_t>(r.value())) : nullptr;
  if (k % 8 == 7 && allow_garbage) return reinterpret_cast<void*>(static_cast<std::uintptr_t>(r.value()));
  return static_cast<std::uint8_t*>(s.memory[k % s.memory.size()]) + r.value() % 70000;
}

std::uint8_t* host_pointer(Reader& r, std::size_t& room) {
  const std::size_t at = r.value() % kHost;
  room = kHost - at;
  return g_host + at;
}

// External work for case 24: ends 1 us after it arrives, or fails when `user` says so.
int external_work(void* user, uint64_t arrival_ps, void* const* views, uint64_t* end_ps, char* message,
                  size_t message_size) {
  if (views == nullptr) return 0;  // skipped: its queue had faulted
  if (user != nullptr) {
    std::snprintf(message, message_size, "the fuzzer's work failed");
    return 1;
  }
  *end_ps = arrival_ps + 1'000'000;
  return 0;
}

}  // namespace

int fuzz_one(std::span<const std::uint8_t> input) {
  setenv("SPYRE_SIM_MODE", "functional", 1);
  setenv("SPYRE_SIM_DEVICES", "2", 1);
  setenv("SPYRE_SIM_CONFIG", SPYRE_SOURCE_DIR "/configs/spyre-ci.yaml", 1);
  setenv("SPYRE_SIM_LAUNCH_RECORDS", "16", 1);
  setenv("SPYRE_LOG_LEVEL", "error", 0);  // faults are expected: no warning per launch
  static const std::vector<std::uint8_t> blob = small_program();
  Reader r{input};
  State s;
  for (std::uint32_t i = 0; i < 2; ++i) {
    spyre_device_t d = nullptr;
    if (spyreDeviceGet(i, &d) != SPYRE_SUCCESS) {
      std::fprintf(stderr, "fuzz_abi: no device %u: %s\n", i, spyreGetLastErrorMessage());
      return 1;
    }
    s.devices.push_back(d);
  }
  int steps = 0;
  while (!r.done() && steps++ < 256) {
    spyre_result_t rc = SPYRE_SUCCESS;
    std::size_t room = 0;
    switch (r.byte() % 26) {
      case 0: {
        void* p = nullptr;
        rc = spyreMemAlloc(pick(r, s.devices), r.value() % (1 << 20), &p);
        if (rc == SPYRE_SUCCESS) s.memory.push_back(p);
        break;
      }
      case 1: rc = spyreMemFree(device_pointer(r, s)); break;
      case 2: {
        std::uint8_t* h = host_pointer(r, room);
        rc = spyreMemcpy(device_pointer(r, s), h, r.value() % (room + 1));
        break;
      }
      case 3: {
        std::uint8_t* h = host_pointer(r, room);
        rc = spyreMemcpy(h, device_pointer(r, s), r.value() % (room + 1));
        break;
      }
      case 4: rc = spyreMemcpy(device_pointer(r, s, false), device_pointer(r, s, false), r.value()); break;
      case 5: {
        std::uint8_t* h = host_pointer(r, room);
        const bool up = r.byte() & 1;
        void* d = device_pointer(r, s);
        rc = spyreMemcpyAsync(pick(r, s.queues), up ? d : h, up ? h : d, r.value() % (room + 1));
        break;
      }
      case 6: {
        const std::size_t width = r.value(), height = r.value();
        rc = spyreMemcpy2DAsync(pick(r, s.queues), device_pointer(r, s, false), r.value(),
                                device_pointer(r, s, false), r.value(), width, height);
        break;
      }
      case 7: {
        const std::uint32_t pattern = 0x01020304;
        rc = spyreMemFillAsync(pick(r, s.queues), device_pointer(r, s), &pattern, r.byte() % 6, r.value());
        break;
      }
      case 8: {
        spyre_queue_t q = nullptr;
        rc = spyreQueueCreate(pick(r, s.devices), static_cast<spyre_queue_priority_t>(r.byte() % 3), &q);
        if (rc == SPYRE_SUCCESS) s.queues.push_back(q);
        break;
      }
      case 9: rc = spyreQueueDestroy(pick(r, s.queues)); break;
      case 10: rc = spyreQueueSynchronize(pick(r, s.queues)); break;
      case 11: {
        spyre_queue_t q = pick(r, s.queues);
        spyre_fault_t f;
        std::memset(&f, 0, sizeof f);
        f.struct_size = sizeof f;
        rc = spyreQueueGetFault(q, &f);
        if (documented(rc)) rc = spyreQueueAcknowledgeError(q);
        break;
      }
      case 12: {
        spyre_event_t e = nullptr;
        rc = spyreEventCreate(pick(r, s.devices), &e);
        if (rc == SPYRE_SUCCESS) s.events.push_back(e);
        break;
      }
      case 13: rc = spyreEventRecord(pick(r, s.events), pick(r, s.queues)); break;
      case 14: rc = spyreQueueWaitEvent(pick(r, s.queues), pick(r, s.events)); break;
      case 15: rc = spyreEventSynchronize(pick(r, s.events)); break;
      case 16: {
        double ns = 0;
        rc = spyreEventElapsedTime(pick(r, s.events), pick(r, s.events), &ns);
        break;
      }
      case 17: rc = spyreEventDestroy(pick(r, s.events)); break;
      case 18: {
        spyre_program_t p = nullptr;
        const std::size_t cut = r.byte() % 4 == 0 ? r.value() % (blob.size() + 1) : blob.size();
        rc = spyreProgramLoad(pick(r, s.devices), blob.data(), cut, nullptr, &p);
        if (rc == SPYRE_SUCCESS) s.programs.push_back(p);
        break;
      }
      case 19: {
        std::uint64_t args[3];
        for (auto& a : args) a = reinterpret_cast<std::uint64_t>(device_pointer(r, s));
        spyre_launch_desc_t desc;
        std::memset(&desc, 0, sizeof desc);
        desc.struct_size = r.byte() % 16 == 0 ? 4 : sizeof desc;
        desc.program = pick(r, s.programs);
        desc.args = args;
        desc.num_args = r.byte() % 4;
        desc.core_mask[r.byte() % 16] = r.value();
        rc = spyreLaunch(pick(r, s.queues), &desc);
        break;
      }
      case 20: rc = spyreProgramUnload(pick(r, s.programs)); break;
      case 21: rc = spyreDeviceSynchronize(pick(r, s.devices)); break;
      case 22: {
        void* p = nullptr;
        rc = spyreHostAlloc(r.value() % (1 << 20) + (r.byte() % 16 == 0 ? r.value() : 0), &p);
        if (rc == SPYRE_SUCCESS) s.pinned.push_back(p);
        break;
      }
      case 23: {  // a schedule of card-to-card transfers (cards and steps of any size)
        std::vector<spyre_link_transfer_t> transfers(r.byte() % 8);
        for (auto& t : transfers) t = {static_cast<uint32_t>(r.byte() % 6), static_cast<uint32_t>(r.byte() % 6), r.value()};
        // (The steps never count more transfers than the array holds: the ABI cannot know
        // its length.)
        std::vector<uint32_t> step_sizes(r.byte() % 4);
        std::size_t left = transfers.size();
        for (auto& n : step_sizes) {
          n = static_cast<uint32_t>(r.byte() % (left + 1));
          left -= n;
        }
        std::uint64_t ps = 0;
        rc = spyreSystemScheduleTime(pick(r, s.devices), static_cast<uint32_t>(r.value()),
                                     transfers.empty() ? nullptr : transfers.data(),
                                     step_sizes.empty() ? nullptr : step_sizes.data(),
                                     static_cast<uint32_t>(step_sizes.size()), r.byte() % 8 == 0 ? nullptr : &ps);
        break;
      }
      case 24: {  // external work: ranges, a schedule's transfers, and work that may fail
        std::vector<spyre_link_transfer_t> transfers(r.byte() % 4);
        for (auto& t : transfers) t = {static_cast<uint32_t>(r.byte() % 6), static_cast<uint32_t>(r.byte() % 6), r.value()};
        void* buffer = device_pointer(r, s);
        const std::size_t size = r.value() % (1 << 16);
        spyre_external_desc_t desc;
        std::memset(&desc, 0, sizeof desc);
        desc.struct_size = r.byte() % 4 == 0 ? static_cast<uint32_t>(offsetof(spyre_external_desc_t, card)) : sizeof desc;
        desc.name = "fuzz";
        desc.buffers = r.byte() % 8 == 0 ? nullptr : &buffer;
        desc.sizes = &size;
        desc.num_buffers = r.byte() % 2;
        desc.fn = r.byte() % 8 == 0 ? nullptr : external_work;
        desc.user = reinterpret_cast<void*>(static_cast<std::uintptr_t>(r.byte() % 2));  // 1: the work fails
        desc.bytes = r.value();
        desc.card = static_cast<uint32_t>(r.byte() % 6);
        desc.cards = static_cast<uint32_t>(r.byte() % 6);
        desc.transfers = transfers.empty() && r.byte() % 2 ? nullptr : transfers.data();
        desc.num_transfers = static_cast<uint32_t>(transfers.size() + (r.byte() % 16 == 0 ? 1 : 0));
        if (desc.transfers == nullptr || desc.num_transfers > transfers.size()) desc.num_transfers = 0;
        rc = spyreQueueExternal(pick(r, s.queues), &desc);
        break;
      }
      default: {
        spyre_pointer_attributes_t a;
        std::memset(&a, 0, sizeof a);
        a.struct_size = sizeof a;
        rc = spyrePointerGetAttributes(device_pointer(r, s), &a);
        break;
      }
    }
    if (!documented(rc)) return 1;
  }
  // Release what this input made; every device must still be usable.
  for (auto q : s.queues) {
    if (spyreQueueSynchronize(q) == SPYRE_ERROR_DEVICE_FAULT) spyreQueueAcknowledgeError(q);
    spyreQueueDestroy(q);
  }
  for (auto e : s.events) spyreEventDestroy(e);
  for (auto p : s.programs) spyreProgramUnload(p);
  for (auto m : s.memory) spyreMemFree(m);
  for (auto p : s.pinned) spyreHostFree(p);
  for (auto d : s.devices) {
    void* p = nullptr;
    const std::uint64_t v = 42;
    std::uint64_t back = 0;
    if (spyreMemAlloc(d, 8, &p) != SPYRE_SUCCESS || spyreMemcpy(p, &v, 8) != SPYRE_SUCCESS ||
        spyreMemcpy(&back, p, 8) != SPYRE_SUCCESS || back != 42 || spyreMemFree(p) != SPYRE_SUCCESS) {
      std::fprintf(stderr, "fuzz_abi: a device stopped working: %s\n", spyreGetLastErrorMessage());
      return 1;
    }
  }
  return 0;
}

std::vector<std::string> fuzz_dictionary() { return {}; }

std::vector<std::vector<std::uint8_t>> fuzz_seeds() {
  // alloc x2, queue, event, copies, load + launch, record, sync, destroy
  return {{0, 0, 0, 0, 0, 0, 0, 0, 0, 8, 0, 1, 12, 0, 2, 0, 0, 0, 0, 0, 0, 0, 18, 0, 0, 0, 19, 0, 0, 0, 0, 0,
           0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 13, 0, 0, 10, 0, 21, 0, 9, 0},
          {8, 1, 1, 6, 0, 2, 3, 2, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 22, 2, 60, 0, 23, 0, 5},
          {12, 0, 12, 1, 13, 0, 0, 14, 0, 1, 16, 0, 1, 17, 0, 17, 0, 15, 0}};
}
