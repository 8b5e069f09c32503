// Fuzz target: program blobs through spyreProgramLoad and spyreLaunch on the
// functional device. Input = 8 bytes choosing the argument table, then the blob.
// Findings: a crash or hang, a result code outside the documented ones (INTERNAL
// included), or bytes changing in a device buffer no program was given.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "fuzz_harness.h"
#include "spyre/isa/program.h"
#include "spyre/spyre_drv.h"

namespace {

using namespace spyre;

constexpr std::size_t kBuffer = 64 * 1024;

struct Session {
  spyre_device_t device = nullptr;
  spyre_queue_t queue = nullptr;
  void* buffers[2] = {nullptr, nullptr};
  void* sentinel = nullptr;  // never passed to a program: must never change
  std::vector<std::uint8_t> pattern = std::vector<std::uint8_t>(4096);

  Session() {
    setenv("SPYRE_SIM_MODE", "functional", 1);
    setenv("SPYRE_SIM_DEVICES", "1", 1);
    setenv("SPYRE_SIM_CONFIG", SPYRE_SOURCE_DIR "/configs/spyre-ci.yaml", 1);
    setenv("SPYRE_SIM_LAUNCH_RECORDS", "16", 1);
    setenv("SPYRE_LOG_LEVEL", "error", 0);  // faults are expected: no warning per launch
    if (spyreDeviceGet(0, &device) != SPYRE_SUCCESS ||
        spyreQueueCreate(device, SPYRE_QUEUE_PRIORITY_NORMAL, &queue) != SPYRE_SUCCESS ||
        spyreMemAlloc(device, kBuffer, &buffers[0]) != SPYRE_SUCCESS ||
        spyreMemAlloc(device, kBuffer, &buffers[1]) != SPYRE_SUCCESS ||
        spyreMemAlloc(device, pattern.size(), &sentinel) != SPYRE_SUCCESS) {
      std::fprintf(stderr, "fuzz_program: cannot set up the device: %s\n", spyreGetLastErrorMessage());
      std::abort();
    }
    for (std::size_t i = 0; i < pattern.size(); ++i) pattern[i] = static_cast<std::uint8_t>(i * 131 + 7);
    spyreMemcpy(sentinel, pattern.data(), pattern.size());
  }
};

Session& session() {
  static Session s;
  return s;
}

bool one_of(spyre_result_t rc, std::initializer_list<spyre_result_t> allowed) {
  for (const auto a : allowed) {
    if (rc == a) return true;
  }
  std::fprintf(stderr, "fuzz_program: unexpected %s: %s\n", spyreResultString(rc), spyreGetLastErrorMessage());
  return false;
}

}  // namespace

const char* fuzz_target_name() { return "fuzz_program"; }

int fuzz_one(std::span<const std::uint8_t> input) {
  Session& s = session();
  std::uint64_t choice = 0;
  const std::size_t head = std::min<std::size_t>(8, input.size());
  std::memcpy(&choice, input.data(), head);
  const auto blob = input.subspan(head);
  // The argument table: the two buffers in some order, offsets into them, scalars.
  const auto b0 = reinterpret_cast<std::uint64_t>(s.buffers[0]), b1 = reinterpret_cast<std::uint64_t>(s.buffers[1]);
  const std::uint64_t args[4] = {(choice & 1) ? b1 : b0, (choice & 2) ? b0 : b1, b0 + ((choice >> 8) & 0xffff),
                                 choice >> 32};
  spyre_program_t program = nullptr;
  const spyre_result_t load = spyreProgramLoad(s.device, blob.data(), blob.size(), "fuzz", &program);
  if (!one_of(load, {SPYRE_SUCCESS, SPYRE_ERROR_INVALID_PROGRAM, SPYRE_ERROR_INVALID_SIZE,
                     SPYRE_ERROR_INVALID_NULL_POINTER})) {
    return 1;
  }
  if (load == SPYRE_SUCCESS) {
    spyre_launch_desc_t desc;
    std::memset(&desc, 0, sizeof desc);
    desc.struct_size = sizeof desc;
    desc.program = program;
    desc.args = args;
    desc.num_args = 1 + static_cast<std::uint32_t>((choice >> 2) & 3);
    desc.core_mask[0] = (choice >> 4) & 0xf;
    const spyre_result_t launch = spyreLaunch(s.queue, &desc);
    if (!one_of(launch, {SPYRE_SUCCESS, SPYRE_ERROR_INVALID_ARGUMENT})) return 1;
    const spyre_result_t sync = spyreQueueSynchronize(s.queue);
    if (!one_of(sync, {SPYRE_SUCCESS, SPYRE_ERROR_DEVICE_FAULT})) return 1;
    if (sync == SPYRE_ERROR_DEVICE_FAULT) {
      spyre_fault_t f;
      std::memset(&f, 0, sizeof f);
      f.struct_size = sizeof f;
      if (!one_of(spyreQueueGetFault(s.queue, &f), {SPYRE_SUCCESS})) return 1;
      if (f.reason[0] == '\0') {
        std::fprintf(stderr, "fuzz_program: a fault without a reason\n");
        return 1;
      }
      if (!one_of(spyreQueueAcknowledgeError(s.queue), {SPYRE_SUCCESS})) return 1;
    }
    if (!one_of(spyreProgramUnload(program), {SPYRE_SUCCESS})) return 1;
  }
  std::vector<std::uint8_t> now(s.pattern.size());
  if (!one_of(spyreMemcpy(now.data(), s.sentinel, now.size()), {SPYRE_SUCCESS})) return 1;
  if (now != s.pattern) {
    std::fprintf(stderr, "fuzz_program: a buffer no program was given changed\n");
    return 1;
  }
  return 0;
}

std::vector<std::string> fuzz_dictionary() { return {"SPYREPRG"}; }

std::vector<std::vector<std::uint8_t>> fuzz_seeds() {
  using isa::DType;
  const auto with_args = [](std::uint64_t choice, std::vector<std::uint8_t> blob) {
    std::vector<std::uint8_t> v(8);
    std::memcpy(v.data(), &choice, 8);
    v.insert(v.end(), blob.begin(), blob.end());
    return v;
  };
  std::vector<std::vector<std::uint8_t>> seeds;
  {  // load, compute, store on every core
    isa::ProgramBuilder b("pointwise", 4);
    for (std::uint32_t c = 0; c < 4; ++c) {
      isa::DmaLoad l;
      l.dtype = DType::fp32;
      l.offset = c * 4096;
      l.shape = {1024, 1, 1};
      b.add(c, l).add(c, isa::Wait{.token_mask = 1});
      b.add(c, isa::VUnary{.op = isa::UnaryOp::exp, .dtype = DType::fp32, .src = 0, .dst = 4096, .count = 1024});
      b.add(c, isa::VBinary{.op = isa::BinaryOp::add, .dtype = DType::fp32, .bcast = isa::Broadcast::immediate,
                            .a = 4096, .b = 0, .dst = 8192, .rows = 32, .cols = 32, .imm = 1.5});
      isa::DmaStore st;
      static_cast<isa::Dma&>(st) = l;
      st.arg = 1;
      st.sp_addr = 8192;
      b.add(c, st).add(c, isa::Wait{.token_mask = 1});
    }
    seeds.push_back(with_args(0x0000000400000006ull, b.build()));
  }
  {  // strided 3-D DMA, matmul, reduce, convert
    isa::ProgramBuilder b("matmul", 1);
    isa::DmaLoad a;
    a.dtype = DType::fp16;
    a.shape = {32, 32, 1};
    a.mem_stride = {1, 64, 0};
    b.add(0, a);
    a.sp_addr = 4096;
    a.offset = 64;
    a.token = 1;
    b.add(0, a).add(0, isa::Wait{.token_mask = 3});
    b.add(0, isa::Matmul{.a = 0, .b = 4096, .c = 8192, .m = 32, .n = 32, .k = 32, .lda = 32, .ldb = 32, .ldc = 32,
                         .in = DType::fp16, .out = DType::fp32});
    b.add(0, isa::VReduce{.op = isa::ReduceOp::sum, .in = DType::fp32, .out = DType::fp32, .axis = 1, .src = 8192,
                          .dst = 16384, .rows = 32, .cols = 32});
    b.add(0, isa::VConvert{.from = DType::fp32, .to = DType::fp16, .src = 16384, .dst = 20480, .count = 32});
    isa::DmaStore st;
    st.dtype = DType::fp16;
    st.arg = 1;
    st.sp_addr = 20480;
    st.shape = {32, 1, 1};
    b.add(0, st).add(0, isa::Wait{.token_mask = 1});
    seeds.push_back(with_args(0x0000000000000002ull, b.build()));
  }
  {  // gather, compare/select/fill, ring send/recv with forwarding, barrier
    isa::ProgramBuilder b("ring", 3);
    b.add(0, isa::VFill{.dtype = DType::int32, .dst = 0, .count = 4, .value = 3});
    b.add(0, isa::DmaGather{.token = 2, .wide_index = false, .arg = 0, .index_sp = 0, .count = 4, .sp_addr = 256,
                            .row_bytes = 128, .offset = 0, .rows = 64, .row_stride = 256});
    b.add(0, isa::Wait{.token_mask = 4});
    b.add(0, isa::RingSend{.token = 1, .dst_core = 1, .tag = 7, .sp_addr = 256, .bytes = 512});
    b.add(1, isa::RingRecv{.token = 1, .src_core = 0, .tag = 7, .forward_to = 2, .sp_addr = 0, .bytes = 512});
    b.add(2, isa::RingRecv{.token = 1, .src_core = 1, .tag = 7, .sp_addr = 0, .bytes = 512});
    b.add(2, isa::VCompare{.op = isa::CompareOp::gt, .dtype = DType::fp32, .bcast = isa::Broadcast::immediate,
                           .a = 0, .b = 0, .dst = 1024, .rows = 1, .cols = 128, .imm = 0});
    b.add(2, isa::VSelect{.dtype = DType::fp32, .cond = 1024, .a = 0, .b = 0, .dst = 2048, .count = 128});
    for (std::uint32_t c = 0; c < 3; ++c) b.add(c, isa::Wait{.token_mask = 2}).add(c, isa::Barrier{.id = 1, .count = 3});
    seeds.push_back(with_args(0x0000000000000001ull, b.build()));
  }
  return seeds;
}
