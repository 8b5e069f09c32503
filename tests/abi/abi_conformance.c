/* Conformance of the driver's C ABI, written in C (compiled -std=c11 -Wall -Werror
 * -pedantic): every function's success path and every documented error code.
 * Runs against two devices of configs/spyre-ci.yaml (set by ctest's environment).
 * Each failed check prints the call, the code it returned and the driver's message;
 * the exit status is the number of failures. */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <stdint.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spyre/spyre_drv.h"

static int failures = 0;
static int checks = 0;

#define CHECK(cond)                                                              \
  do {                                                                           \
    ++checks;                                                                    \
    if (!(cond)) {                                                               \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);   \
      ++failures;                                                                \
    }                                                                            \
  } while (0)

#define EXPECT(call, code)                                                                       \
  do {                                                                                           \
    spyre_result_t rc_ = (call);                                                                 \
    ++checks;                                                                                    \
    if (rc_ != (code)) {                                                                         \
      fprintf(stderr, "%s:%d: %s returned %s, expected %s (%s)\n", __FILE__, __LINE__, #call,     \
              spyreResultString(rc_), #code, spyreGetLastErrorMessage());                        \
      ++failures;                                                                                \
    }                                                                                            \
  } while (0)

/* --- building programs by hand (the ISA's binary format, include/spyre/isa/program.h) --- */

typedef struct {
  uint8_t w[64];
} word_t;

static void put16(uint8_t* p, uint16_t v) { memcpy(p, &v, 2); }
static void put32(uint8_t* p, uint32_t v) { memcpy(p, &v, 4); }
static void put64(uint8_t* p, uint64_t v) { memcpy(p, &v, 8); }

static word_t end_word(void) {
  word_t w;
  memset(&w, 0, sizeof w);
  return w;
}

/* MATMUL fp16 -> fp32, m x n x k, operands at 0 / 256 KiB / 512 KiB of the scratchpad. */
static word_t matmul_word(uint32_t m, uint32_t n, uint32_t k) {
  word_t w;
  memset(&w, 0, sizeof w);
  w.w[0] = 5;
  w.w[1] = 1; /* fp16 */
  w.w[2] = 0; /* fp32 */
  put32(w.w + 4, 0);
  put32(w.w + 8, 256 * 1024);
  put32(w.w + 12, 512 * 1024);
  put32(w.w + 16, m);
  put32(w.w + 20, n);
  put32(w.w + 24, k);
  put32(w.w + 28, k);
  put32(w.w + 32, n);
  put32(w.w + 36, n);
  return w;
}

/* DMA_LOAD of `elements` fp16 values from argument 0 at byte `offset`, token 0. */
static word_t load_word(uint64_t offset, uint32_t elements) {
  word_t w;
  memset(&w, 0, sizeof w);
  w.w[0] = 2;
  w.w[2] = 1; /* fp16 */
  put16(w.w + 4, 0);
  put64(w.w + 8, offset);
  put32(w.w + 20, elements);
  put32(w.w + 24, 1);
  put32(w.w + 28, 1);
  put64(w.w + 32, 1);
  return w;
}

static word_t wait_word(uint16_t mask) {
  word_t w;
  memset(&w, 0, sizeof w);
  w.w[0] = 4;
  put16(w.w + 2, mask);
  return w;
}

/* A program whose `streams` streams all run `count` instructions (then END). */
static uint8_t* build_program(const char* name, uint32_t streams, const word_t* words, uint32_t count, size_t* size) {
  const size_t name_len = strlen(name);
  const size_t name_at = 32 + 8 * (size_t)streams;
  const size_t instr_at = (name_at + name_len + 63) / 64 * 64;
  const uint32_t per_stream = count + 1;
  const size_t total = instr_at + (size_t)streams * per_stream * 64;
  uint8_t* b = calloc(1, total);
  uint32_t s, i;
  memcpy(b, "SPYREPRG", 8);
  put32(b + 8, 1);
  put32(b + 12, streams);
  put32(b + 16, (uint32_t)name_len);
  put32(b + 20, (uint32_t)instr_at);
  put64(b + 24, total);
  memcpy(b + name_at, name, name_len);
  for (s = 0; s < streams; ++s) {
    word_t end = end_word();
    put32(b + 32 + 8 * s, s * per_stream);
    put32(b + 32 + 8 * s + 4, per_stream);
    for (i = 0; i < count; ++i) memcpy(b + instr_at + ((size_t)s * per_stream + i) * 64, words[i].w, 64);
    memcpy(b + instr_at + ((size_t)s * per_stream + count) * 64, end.w, 64);
  }
  *size = total;
  return b;
}

static spyre_program_t load(spyre_device_t device, const char* name, uint32_t streams, const word_t* words,
                            uint32_t count) {
  size_t size = 0;
  uint8_t* blob = build_program(name, streams, words, count, &size);
  spyre_program_t program = NULL;
  EXPECT(spyreProgramLoad(device, blob, size, NULL, &program), SPYRE_SUCCESS);
  free(blob);
  return program;
}

static spyre_launch_desc_t launch_desc(spyre_program_t program, const uint64_t* args, uint32_t num_args) {
  spyre_launch_desc_t d;
  memset(&d, 0, sizeof d);
  d.struct_size = sizeof d;
  d.program = program;
  d.args = args;
  d.num_args = num_args;
  return d;
}

/* --------------------------------------------------------------------------------------- */

static spyre_device_t dev0, dev1;
static int timed = 1; /* the functional device completes work at submission: no NOT_READY */

static void driver_and_results(void) {
  uint32_t version = 0;
  uint64_t t0 = 0, t1 = 0;
  EXPECT(spyreDriverGetApiVersion(&version), SPYRE_SUCCESS);
  CHECK(version == SPYRE_API_VERSION_CURRENT);
  EXPECT(spyreDriverGetApiVersion(NULL), SPYRE_ERROR_INVALID_NULL_POINTER);
  CHECK(strlen(spyreGetLastErrorMessage()) > 0);
  EXPECT(spyreDriverInit(SPYRE_API_VERSION_CURRENT), SPYRE_SUCCESS);
  EXPECT(spyreDriverInit(SPYRE_MAKE_VERSION(9, 0)), SPYRE_ERROR_UNSUPPORTED_VERSION);
  CHECK(strcmp(spyreResultString(SPYRE_SUCCESS), "SPYRE_SUCCESS") == 0);
  CHECK(strcmp(spyreResultString(SPYRE_ERROR_QUEUE_IN_ERROR_STATE), "SPYRE_ERROR_QUEUE_IN_ERROR_STATE") == 0);
  CHECK(strcmp(spyreResultString((spyre_result_t)0x4242), "SPYRE_RESULT_UNKNOWN") == 0);
  CHECK(sizeof(spyre_result_t) == 4);
  EXPECT(spyreDriverGetHostTime(&t0), SPYRE_SUCCESS);
  EXPECT(spyreDriverGetHostTime(NULL), SPYRE_ERROR_INVALID_NULL_POINTER);
  {
    uint32_t count = 0;
    EXPECT(spyreDeviceGetCount(&count), SPYRE_SUCCESS);
    CHECK(count == 2);
  }
  EXPECT(spyreDriverGetHostTime(&t1), SPYRE_SUCCESS);
  CHECK(t1 >= t0);
}

static void devices(void) {
  uint32_t count = 0;
  spyre_device_properties_t p;
  spyre_device_t bad = NULL;
  EXPECT(spyreDeviceGetCount(NULL), SPYRE_ERROR_INVALID_NULL_POINTER);
  EXPECT(spyreDeviceGetCount(&count), SPYRE_SUCCESS);
  EXPECT(spyreDeviceGet(0, &dev0), SPYRE_SUCCESS);
  EXPECT(spyreDeviceGet(1, &dev1), SPYRE_SUCCESS);
  EXPECT(spyreDeviceGet(2, &bad), SPYRE_ERROR_INVALID_ARGUMENT);
  EXPECT(spyreDeviceGet(0, NULL), SPYRE_ERROR_INVALID_NULL_POINTER);
  memset(&p, 0, sizeof p);
  p.struct_size = sizeof p;
  EXPECT(spyreDeviceGetProperties(dev0, &p), SPYRE_SUCCESS);
  CHECK(strcmp(p.name, "spyre:0") == 0);
  CHECK(strcmp(p.config_name, "spyre-ci") == 0);
  CHECK(strlen(p.config_hash) == 16);
  CHECK(p.cores == 4 && p.corelets_per_core == 2 && p.array_rows == 8 && p.array_cols == 8);
  CHECK(p.simd_depth[SPYRE_MAC_FP16] == 8);
  CHECK(p.scratchpad_bytes == 2u << 20);
  CHECK(p.memory_bytes == 768ull << 20);
  timed = (int)p.timed;
  CHECK(p.isa_version == 1 && p.max_kernel_args == 256);
  CHECK(p.clock_ghz == 1.5);
  /* 0.6: the dataflow and the memory system (configs/spyre-ci.yaml). */
  CHECK(p.dataflow == 0);
  CHECK(p.dram_latency_ns == 120.0 && p.dram_interleave_bytes == 256);
  CHECK(p.dma_setup_cycles == 32 && p.dma_bytes_per_cycle == 128);
  CHECK(p.ring_memory_stops == 2 && p.ring_link_bytes_per_s == 128 * 1.5e9);
  CHECK(p.dram_channel_bytes_per_s > 0 && p.dram_efficiency > 0 && p.scratchpad_ports > 0);
  /* 0.10: the vector costs by class (0 copy, 9 exp: spyre::isa::VectorCost), the channel
   * map and the derived rates (configs/spyre-ci.yaml). */
  CHECK(p.vector_cost_count >= 32 && p.vector_cost_count <= SPYRE_VECTOR_COST_MAX);
  CHECK(p.vector_op_cycles[0] == 1.0 && p.vector_op_cycles[9] == 4.0);
  CHECK(p.vector_op_cycles[p.vector_cost_count - 1] > 0);
  CHECK(p.vector_cost_count == SPYRE_VECTOR_COST_MAX || p.vector_op_cycles[p.vector_cost_count] == 0.0);
  CHECK(p.dram_channel_map == SPYRE_DRAM_CHANNEL_MAP_SKEWED);
  CHECK(p.dma_engine_bytes_per_s > 0 && p.dma_engine_bytes_per_s <= 128 * 1.5e9);
  CHECK(p.dram_turnaround_s_per_byte > 0);
  {
    /* A 0.5 caller's struct ends before `dataflow`: nothing is written past it. */
    unsigned char raw[sizeof(spyre_device_properties_t) + 16];
    spyre_device_properties_t* old = (spyre_device_properties_t*)raw;
    const size_t v05 = offsetof(spyre_device_properties_t, dataflow);
    size_t i;
    int untouched = 1;
    memset(raw, 0xcd, sizeof raw);
    old->struct_size = (uint32_t)v05;
    EXPECT(spyreDeviceGetProperties(dev0, old), SPYRE_SUCCESS);
    CHECK(old->cores == 4 && old->struct_size == v05);
    for (i = v05; i < sizeof raw; ++i) untouched = untouched && raw[i] == 0xcd;
    CHECK(untouched);
  }
  EXPECT(spyreDeviceGetProperties(NULL, &p), SPYRE_ERROR_INVALID_HANDLE);
  EXPECT(spyreDeviceGetProperties((spyre_device_t)(uintptr_t)0x1234, &p), SPYRE_ERROR_INVALID_HANDLE);
  EXPECT(spyreDeviceGetProperties(dev0, NULL), SPYRE_ERROR_INVALID_NULL_POINTER);
  p.struct_size = 8;
  EXPECT(spyreDeviceGetProperties(dev0, &p), SPYRE_ERROR_UNSUPPORTED_VERSION);
  EXPECT(spyreDeviceSynchronize(dev0), SPYRE_SUCCESS);
  EXPECT(spyreDeviceSynchronize(NULL), SPYRE_ERROR_INVALID_HANDLE);
}

static void memory(void) {
  void *a = NULL, *b = NULL, *pinned = NULL;
  size_t free0 = 0, total = 0, free1 = 0;
  spyre_pointer_attributes_t attr;
  int local = 0;
  char registered[256];
  EXPECT(spyreMemGetInfo(dev0, &free0, &total), SPYRE_SUCCESS);
  CHECK(total == 768ull << 20 && free0 <= total);
  EXPECT(spyreMemAlloc(dev0, 4096, &a), SPYRE_SUCCESS);
  CHECK(a != NULL && ((uintptr_t)a % 256) == 0);
  EXPECT(spyreMemGetInfo(dev0, &free1, &total), SPYRE_SUCCESS);
  CHECK(free1 == free0 - 4096);
  EXPECT(spyreMemGetInfo(NULL, &free1, &total), SPYRE_ERROR_INVALID_HANDLE);
  EXPECT(spyreMemGetInfo(dev0, NULL, &total), SPYRE_ERROR_INVALID_NULL_POINTER);
  EXPECT(spyreMemAlloc(dev0, 0, &b), SPYRE_SUCCESS);
  CHECK(b != NULL && b != a);
  EXPECT(spyreMemFree(b), SPYRE_SUCCESS);
  EXPECT(spyreMemAlloc(dev0, (size_t)1 << 50, &b), SPYRE_ERROR_OUT_OF_DEVICE_MEMORY);
  CHECK(strstr(spyreGetLastErrorMessage(), "cannot allocate") != NULL);
  EXPECT(spyreMemAlloc(dev0, 64, NULL), SPYRE_ERROR_INVALID_NULL_POINTER);
  EXPECT(spyreMemAlloc(NULL, 64, &b), SPYRE_ERROR_INVALID_HANDLE);

  memset(&attr, 0, sizeof attr);
  attr.struct_size = sizeof attr;
  EXPECT(spyrePointerGetAttributes((char*)a + 100, &attr), SPYRE_SUCCESS);
  CHECK(attr.type == SPYRE_MEMORY_TYPE_DEVICE && attr.device == dev0 && attr.base == a && attr.size == 4096);
  EXPECT(spyrePointerGetAttributes(&local, &attr), SPYRE_SUCCESS);
  CHECK(attr.type == SPYRE_MEMORY_TYPE_UNKNOWN && attr.base == NULL);
  EXPECT(spyrePointerGetAttributes(a, NULL), SPYRE_ERROR_INVALID_NULL_POINTER);
  attr.struct_size = 0;
  EXPECT(spyrePointerGetAttributes(a, &attr), SPYRE_ERROR_UNSUPPORTED_VERSION);

  EXPECT(spyreHostAlloc(1000, &pinned), SPYRE_SUCCESS);
  attr.struct_size = sizeof attr;
  EXPECT(spyrePointerGetAttributes((char*)pinned + 10, &attr), SPYRE_SUCCESS);
  CHECK(attr.type == SPYRE_MEMORY_TYPE_HOST_PINNED && attr.base == pinned && attr.size == 1000);
  EXPECT(spyreHostAlloc(0, &b), SPYRE_ERROR_INVALID_SIZE);
  EXPECT(spyreHostAlloc((size_t)1 << 62, &b), SPYRE_ERROR_OUT_OF_HOST_MEMORY);
  EXPECT(spyreHostAlloc(16, NULL), SPYRE_ERROR_INVALID_NULL_POINTER);
  /* Sizes whose page rounding or end address does not fit: refused, nothing leaks. */
  EXPECT(spyreHostAlloc(SIZE_MAX, &b), SPYRE_ERROR_OUT_OF_HOST_MEMORY);
  EXPECT(spyreHostAlloc(SIZE_MAX - 100, &b), SPYRE_ERROR_OUT_OF_HOST_MEMORY);
  EXPECT(spyreHostRegister(registered, SIZE_MAX), SPYRE_ERROR_INVALID_SIZE);
  CHECK(strstr(spyreGetLastErrorMessage(), "past the end of the address space") != NULL);
  attr.struct_size = sizeof attr;
  EXPECT(spyrePointerGetAttributes(registered, &attr), SPYRE_SUCCESS);
  CHECK(attr.type != SPYRE_MEMORY_TYPE_HOST_PINNED); /* the refused range was not registered */
  EXPECT(spyreHostFree(&local), SPYRE_ERROR_INVALID_ARGUMENT);
  EXPECT(spyreHostFree(NULL), SPYRE_ERROR_INVALID_NULL_POINTER);
  EXPECT(spyreHostFree(pinned), SPYRE_SUCCESS);
  EXPECT(spyreHostRegister(registered, sizeof registered), SPYRE_SUCCESS);
  EXPECT(spyreHostRegister(registered + 8, 8), SPYRE_ERROR_INVALID_ARGUMENT);
  EXPECT(spyreHostRegister(registered, 0), SPYRE_ERROR_INVALID_SIZE);
  EXPECT(spyreHostRegister(NULL, 8), SPYRE_ERROR_INVALID_NULL_POINTER);
  EXPECT(spyreHostUnregister(registered + 1), SPYRE_ERROR_INVALID_ARGUMENT);
  EXPECT(spyreHostUnregister(registered), SPYRE_SUCCESS);
  EXPECT(spyreHostUnregister(NULL), SPYRE_ERROR_INVALID_NULL_POINTER);

  EXPECT(spyreMemFree((char*)a + 256), SPYRE_ERROR_INVALID_DEVICE_POINTER);
  EXPECT(spyreMemFree(&local), SPYRE_ERROR_INVALID_DEVICE_POINTER);
  EXPECT(spyreMemFree(NULL), SPYRE_ERROR_INVALID_NULL_POINTER);
  EXPECT(spyreMemFree(a), SPYRE_SUCCESS);
  EXPECT(spyreMemFree(a), SPYRE_ERROR_DOUBLE_FREE);
  CHECK(strstr(spyreGetLastErrorMessage(), "already freed") != NULL);
}

static void copies_and_fills(void) {
  enum { N = 4096 };
  uint8_t host[N], back[N], back1[N];
  void *d = NULL, *d2 = NULL, *p1 = NULL, *pinned = NULL;
  spyre_queue_t q = NULL;
  uint32_t pattern = 0xdeadbeefu, i;
  uint8_t host2d[8 * 16];
  int ok = 1;
  for (i = 0; i < N; ++i) host[i] = (uint8_t)(i * 7 + 3);
  EXPECT(spyreMemAlloc(dev0, N, &d), SPYRE_SUCCESS);
  EXPECT(spyreMemAlloc(dev0, N, &d2), SPYRE_SUCCESS);
  EXPECT(spyreMemAlloc(dev1, N, &p1), SPYRE_SUCCESS);
  EXPECT(spyreQueueCreate(dev0, SPYRE_QUEUE_PRIORITY_NORMAL, &q), SPYRE_SUCCESS);

  EXPECT(spyreMemcpy(d, host, N), SPYRE_SUCCESS);
  EXPECT(spyreMemcpy(d2, d, N), SPYRE_SUCCESS);
  EXPECT(spyreMemcpy(p1, d2, N), SPYRE_SUCCESS); /* peer: device 0 -> device 1 */
  memset(back1, 0, N);
  EXPECT(spyreMemcpy(back1, p1, N), SPYRE_SUCCESS);
  CHECK(memcmp(back1, host, N) == 0);
  EXPECT(spyreMemcpy(back, host, N), SPYRE_ERROR_INVALID_ARGUMENT);
  EXPECT(spyreMemcpy(d, host, N + 1), SPYRE_ERROR_INVALID_SIZE);
  EXPECT(spyreMemcpy((char*)d + N - 16, host, 32), SPYRE_ERROR_INVALID_SIZE);
  EXPECT(spyreMemcpy(NULL, host, 8), SPYRE_ERROR_INVALID_NULL_POINTER);

  /* Pageable source: the bytes at submission are copied, not later changes. */
  EXPECT(spyreMemcpyAsync(q, d, host, N), SPYRE_SUCCESS);
  host[0] = 0xff;
  EXPECT(spyreQueueSynchronize(q), SPYRE_SUCCESS);
  EXPECT(spyreMemcpyAsync(q, back, d, N), SPYRE_SUCCESS);
  EXPECT(spyreQueueSynchronize(q), SPYRE_SUCCESS);
  CHECK(back[0] == 3 && back[1] == 10);
  /* Pinned source: read when the copy executes: on the timed device after the host's
   * next change (the device runs behind the host clock), on the functional device at
   * submission. */
  EXPECT(spyreHostAlloc(64, &pinned), SPYRE_SUCCESS);
  memset(pinned, 1, 64);
  EXPECT(spyreMemcpyAsync(q, d, pinned, 64), SPYRE_SUCCESS);
  memset(pinned, 2, 64);
  EXPECT(spyreQueueSynchronize(q), SPYRE_SUCCESS);
  EXPECT(spyreMemcpy(back, d, 64), SPYRE_SUCCESS);
  CHECK(back[0] == (timed ? 2 : 1) && back[63] == (timed ? 2 : 1));
  EXPECT(spyreHostFree(pinned), SPYRE_SUCCESS);
  EXPECT(spyreMemcpyAsync(NULL, d, host, 8), SPYRE_ERROR_INVALID_HANDLE);
  EXPECT(spyreMemcpyAsync(q, d, host, N + 8), SPYRE_ERROR_INVALID_SIZE);
  EXPECT(spyreMemcpyAsync(q, p1, host, 8), SPYRE_ERROR_INVALID_ARGUMENT); /* neither end on the queue's device */

  /* 2-D: 8 rows of 16 bytes gathered from a 64-byte pitch. */
  EXPECT(spyreMemcpy2DAsync(q, d2, 16, d, 64, 16, 8), SPYRE_SUCCESS);
  EXPECT(spyreMemcpyAsync(q, host2d, d2, sizeof host2d), SPYRE_SUCCESS);
  EXPECT(spyreQueueSynchronize(q), SPYRE_SUCCESS);
  /* d holds 2 in its first 64 bytes (the pinned copy), i * 7 + 3 after that. */
  for (i = 0; i < 8 * 16; ++i) {
    const uint32_t row = i / 16, col = i % 16;
    const uint8_t want = row == 0 ? (uint8_t)(timed ? 2 : 1) : (uint8_t)((row * 64 + col) * 7 + 3);
    ok = ok && host2d[i] == want;
  }
  CHECK(ok);
  EXPECT(spyreMemcpy2DAsync(q, d2, 8, d, 64, 16, 8), SPYRE_ERROR_INVALID_ARGUMENT);
  /* Zero-size copies are no-ops (this one looped 2^63 times before); extents whose
   * product overflows are size errors at submission, not faults when they run. */
  EXPECT(spyreMemcpy2DAsync(q, d2, 0, d, 0, 0, (size_t)1 << 63), SPYRE_SUCCESS);
  EXPECT(spyreMemcpy2DAsync(q, d2, 16, d, 64, 16, 0), SPYRE_SUCCESS);
  EXPECT(spyreMemcpyAsync(q, d2, d, 0), SPYRE_SUCCESS);
  EXPECT(spyreMemcpy(d2, d, 0), SPYRE_SUCCESS);
  EXPECT(spyreQueueSynchronize(q), SPYRE_SUCCESS);
  EXPECT(spyreMemcpy2DAsync(q, d2, 16, d, (size_t)1 << 63, 16, 2), SPYRE_ERROR_INVALID_SIZE);
  EXPECT(spyreMemcpy2DAsync(q, host2d, (size_t)1 << 63, d, 64, 16, 2), SPYRE_ERROR_INVALID_SIZE);
  CHECK(strstr(spyreGetLastErrorMessage(), "runs past the host's address space") != NULL);
  EXPECT(spyreMemcpy2DAsync(q, d2, SIZE_MAX / 2, d, 64, 16, 3), SPYRE_ERROR_INVALID_SIZE);
  EXPECT(spyreQueueSynchronize(q), SPYRE_SUCCESS);

  EXPECT(spyreMemFill(d, &pattern, 4, N), SPYRE_SUCCESS);
  EXPECT(spyreMemcpy(back, d, N), SPYRE_SUCCESS);
  CHECK(memcmp(back, &pattern, 4) == 0 && memcmp(back + N - 4, &pattern, 4) == 0);
  EXPECT(spyreMemFill(d, &pattern, 3, 9), SPYRE_ERROR_INVALID_ARGUMENT);
  EXPECT(spyreMemFill(d, &pattern, 4, 10), SPYRE_ERROR_INVALID_SIZE);
  EXPECT(spyreMemFill(back, &pattern, 4, 8), SPYRE_ERROR_INVALID_DEVICE_POINTER);
  EXPECT(spyreMemFill(d, NULL, 4, 8), SPYRE_ERROR_INVALID_NULL_POINTER);
  pattern = 0x0102;
  EXPECT(spyreMemFillAsync(q, d, &pattern, 2, 64), SPYRE_SUCCESS);
  EXPECT(spyreQueueFence(q), SPYRE_SUCCESS);
  EXPECT(spyreQueueFence(NULL), SPYRE_ERROR_INVALID_HANDLE);
  EXPECT(spyreMemcpyAsync(q, back, d, 4), SPYRE_SUCCESS);
  EXPECT(spyreQueueSynchronize(q), SPYRE_SUCCESS);
  CHECK(back[0] == 0x02 && back[1] == 0x01 && back[2] == 0x02);
  EXPECT(spyreMemFillAsync(q, p1, &pattern, 2, 64), SPYRE_ERROR_INVALID_ARGUMENT);

  EXPECT(spyreMemFree(d), SPYRE_SUCCESS);
  EXPECT(spyreMemcpy(back, d, 8), SPYRE_ERROR_INVALID_DEVICE_POINTER); /* freed */
  CHECK(strstr(spyreGetLastErrorMessage(), "freed") != NULL);
  EXPECT(spyreMemFree(d2), SPYRE_SUCCESS);
  EXPECT(spyreMemFree(p1), SPYRE_SUCCESS);
  EXPECT(spyreQueueDestroy(q), SPYRE_SUCCESS);
}

static void queues_events_programs(void) {
  spyre_queue_t q = NULL, hi = NULL, q1 = NULL;
  spyre_event_t e0 = NULL, e1 = NULL, other = NULL;
  spyre_program_t mm = NULL, two = NULL, oob = NULL, p1 = NULL;
  uint64_t t = 0;
  double ns = 0;
  uint32_t streams = 0;
  uint64_t bytes = 0;
  void* buf = NULL;
  uint64_t args[1];
  word_t words[3];
  spyre_launch_desc_t desc;
  spyre_fault_t fault;
  size_t size = 0;
  uint8_t* garbage;

  EXPECT(spyreQueueCreate(dev0, SPYRE_QUEUE_PRIORITY_NORMAL, &q), SPYRE_SUCCESS);
  EXPECT(spyreQueueCreate(dev0, SPYRE_QUEUE_PRIORITY_HIGH, &hi), SPYRE_SUCCESS);
  EXPECT(spyreQueueCreate(dev1, SPYRE_QUEUE_PRIORITY_LOW, &q1), SPYRE_SUCCESS);
  EXPECT(spyreQueueCreate(dev0, (spyre_queue_priority_t)7, &q), SPYRE_ERROR_INVALID_ARGUMENT);
  EXPECT(spyreQueueCreate(NULL, SPYRE_QUEUE_PRIORITY_NORMAL, &q), SPYRE_ERROR_INVALID_HANDLE);
  EXPECT(spyreQueueCreate(dev0, SPYRE_QUEUE_PRIORITY_NORMAL, NULL), SPYRE_ERROR_INVALID_NULL_POINTER);
  EXPECT(spyreQueueQuery(q), SPYRE_SUCCESS);
  EXPECT(spyreQueueQuery(NULL), SPYRE_ERROR_INVALID_HANDLE);
  EXPECT(spyreQueueSynchronize((spyre_queue_t)dev0), SPYRE_ERROR_INVALID_HANDLE); /* wrong kind */

  EXPECT(spyreEventCreate(dev0, &e0), SPYRE_SUCCESS);
  EXPECT(spyreEventCreate(dev0, &e1), SPYRE_SUCCESS);
  EXPECT(spyreEventCreate(dev1, &other), SPYRE_SUCCESS);
  EXPECT(spyreEventCreate(dev0, NULL), SPYRE_ERROR_INVALID_NULL_POINTER);
  EXPECT(spyreEventQuery(e0), SPYRE_SUCCESS); /* never recorded: complete */
  EXPECT(spyreEventGetTimestamp(e0, &t), SPYRE_ERROR_INVALID_ARGUMENT);
  EXPECT(spyreEventElapsedTime(e0, e1, &ns), SPYRE_ERROR_INVALID_ARGUMENT);
  EXPECT(spyreEventRecord(other, q), SPYRE_ERROR_INVALID_ARGUMENT);

  /* Programs. */
  words[0] = matmul_word(256, 256, 256);
  mm = load(dev0, "long_matmul", 1, words, 1);
  EXPECT(spyreProgramGetInfo(mm, &streams, &bytes), SPYRE_SUCCESS);
  /* 32-byte header + 8-byte stream entry + 11-byte name, padded to 64; 2 instructions. */
  CHECK(streams == 1 && bytes == 64 + 2 * 64);
  EXPECT(spyreProgramGetInfo(mm, NULL, &bytes), SPYRE_ERROR_INVALID_NULL_POINTER);
  EXPECT(spyreProgramGetInfo(NULL, &streams, &bytes), SPYRE_ERROR_INVALID_HANDLE);
  EXPECT(spyreProgramLoad(dev0, words, 64, NULL, NULL), SPYRE_ERROR_INVALID_NULL_POINTER);
  two = load(dev0, "two_streams", 2, words, 1);
  p1 = load(dev1, "elsewhere", 1, words, 1);
  garbage = calloc(1, 256);
  EXPECT(spyreProgramLoad(dev0, garbage, 256, NULL, &oob), SPYRE_ERROR_INVALID_PROGRAM);
  CHECK(strstr(spyreGetLastErrorMessage(), "bad magic") != NULL);
  free(garbage);
  {
    word_t bad = matmul_word(256, 256, 256);
    uint8_t* blob;
    put32(bad.w + 12, 2u << 20); /* C beyond the scratchpad */
    blob = build_program("bad", 1, &bad, 1, &size);
    EXPECT(spyreProgramLoad(dev0, blob, size, NULL, &oob), SPYRE_ERROR_INVALID_PROGRAM);
    CHECK(strstr(spyreGetLastErrorMessage(), "stream 0 pc 0: matmul: C") != NULL);
    free(blob);
  }
  EXPECT(spyreProgramLoad(dev0, NULL, 10, NULL, &oob), SPYRE_ERROR_INVALID_NULL_POINTER);
  EXPECT(spyreProgramLoad(NULL, words, 64, NULL, &oob), SPYRE_ERROR_INVALID_HANDLE);

  /* Launches: a long kernel is still running right after submission. */
  desc = launch_desc(mm, NULL, 0);
  EXPECT(spyreEventRecord(e0, q), SPYRE_SUCCESS);
  EXPECT(spyreLaunch(q, &desc), SPYRE_SUCCESS);
  EXPECT(spyreEventRecord(e1, q), SPYRE_SUCCESS);
  if (timed) {
    EXPECT(spyreQueueQuery(q), SPYRE_NOT_READY);
    EXPECT(spyreEventQuery(e1), SPYRE_NOT_READY);
    EXPECT(spyreEventGetTimestamp(e1, &t), SPYRE_NOT_READY);
    EXPECT(spyreEventElapsedTime(e0, e1, &ns), SPYRE_NOT_READY);
  }
  EXPECT(spyreEventSynchronize(e1), SPYRE_SUCCESS);
  EXPECT(spyreEventSynchronize(NULL), SPYRE_ERROR_INVALID_HANDLE);
  EXPECT(spyreEventQuery(NULL), SPYRE_ERROR_INVALID_HANDLE);
  EXPECT(spyreEventGetTimestamp(NULL, &t), SPYRE_ERROR_INVALID_HANDLE);
  EXPECT(spyreEventGetTimestamp(e1, NULL), SPYRE_ERROR_INVALID_NULL_POINTER);
  EXPECT(spyreEventElapsedTime(NULL, e1, &ns), SPYRE_ERROR_INVALID_HANDLE);
  EXPECT(spyreEventRecord(NULL, q), SPYRE_ERROR_INVALID_HANDLE);
  EXPECT(spyreEventRecord(e1, NULL), SPYRE_ERROR_INVALID_HANDLE);
  EXPECT(spyreEventDestroy(NULL), SPYRE_ERROR_INVALID_HANDLE);
  EXPECT(spyreEventCreate(NULL, &e0), SPYRE_ERROR_INVALID_HANDLE);
  EXPECT(spyreEventQuery(e1), SPYRE_SUCCESS);
  EXPECT(spyreEventGetTimestamp(e1, &t), SPYRE_SUCCESS);
  CHECK(t > 0);
  EXPECT(spyreEventElapsedTime(e0, e1, &ns), SPYRE_SUCCESS);
  /* The matmul alone: 512 folds x (32 + 14) - 1 = 23551 cycles at 1.5 GHz = 15700.7 ns. */
  CHECK(!timed || (ns > 15700.0 && ns < 20000.0));
  EXPECT(spyreEventElapsedTime(e0, other, &ns), SPYRE_ERROR_INVALID_ARGUMENT);
  EXPECT(spyreEventElapsedTime(e0, e1, NULL), SPYRE_ERROR_INVALID_NULL_POINTER);
  EXPECT(spyreQueueWaitEvent(hi, e1), SPYRE_SUCCESS);
  EXPECT(spyreQueueWaitEvent(hi, NULL), SPYRE_ERROR_INVALID_HANDLE);
  EXPECT(spyreQueueSynchronize(hi), SPYRE_SUCCESS);

  desc = launch_desc(two, NULL, 0);
  EXPECT(spyreLaunch(hi, &desc), SPYRE_SUCCESS);
  desc.core_mask[0] = 1; /* one core for two streams */
  EXPECT(spyreLaunch(hi, &desc), SPYRE_ERROR_INVALID_ARGUMENT);
  desc = launch_desc(p1, NULL, 0);
  EXPECT(spyreLaunch(q, &desc), SPYRE_ERROR_INVALID_ARGUMENT); /* program of device 1 */
  desc = launch_desc(mm, args, 300);
  EXPECT(spyreLaunch(q, &desc), SPYRE_ERROR_INVALID_ARGUMENT);
  desc = launch_desc(mm, NULL, 0);
  desc.struct_size = 4;
  EXPECT(spyreLaunch(q, &desc), SPYRE_ERROR_UNSUPPORTED_VERSION);
  {
    /* 0.7: the op's least traffic reaches the launch record in the device report; a
     * 0.6-sized descriptor (ending at `name`) is still accepted, without it. */
    size_t bytes = 0;
    char* report;
    desc = launch_desc(mm, NULL, 0);
    desc.name = "with_traffic";
    desc.min_read_bytes = 12345;
    desc.min_write_bytes = 678;
    EXPECT(spyreLaunch(q, &desc), SPYRE_SUCCESS);
    desc = launch_desc(mm, NULL, 0);
    desc.struct_size = (uint32_t)offsetof(spyre_launch_desc_t, min_read_bytes);
    desc.min_read_bytes = 999; /* past the 0.6 struct: not read */
    EXPECT(spyreLaunch(q, &desc), SPYRE_SUCCESS);
    EXPECT(spyreQueueSynchronize(q), SPYRE_SUCCESS);
    EXPECT(spyreDeviceGetReport(dev0, NULL, &bytes), SPYRE_SUCCESS);
    report = (char*)malloc(bytes);
    EXPECT(spyreDeviceGetReport(dev0, report, &bytes), SPYRE_SUCCESS);
    CHECK(strstr(report, "\"min_read_bytes\":12345") != NULL);
    CHECK(strstr(report, "\"min_write_bytes\":678") != NULL);
    CHECK(strstr(report, "\"min_read_bytes\":999") == NULL);
    free(report);
  }
  EXPECT(spyreLaunch(q, NULL), SPYRE_ERROR_INVALID_NULL_POINTER);
  desc = launch_desc(NULL, NULL, 0);
  EXPECT(spyreLaunch(q, &desc), SPYRE_ERROR_INVALID_HANDLE);

  /* A faulting kernel: a load runs 16 bytes past its 4096-byte buffer. With the other
   * queue idle, the scheduler gives it core 0. */
  EXPECT(spyreQueueSynchronize(hi), SPYRE_SUCCESS);
  EXPECT(spyreMemAlloc(dev0, 4096, &buf), SPYRE_SUCCESS);
  args[0] = (uint64_t)(uintptr_t)buf;
  words[0] = load_word(0, 2056);
  words[1] = wait_word(1);
  oob = load(dev0, "oob_kernel", 1, words, 2);
  desc = launch_desc(oob, args, 1);
  memset(&fault, 0, sizeof fault);
  fault.struct_size = sizeof fault;
  EXPECT(spyreQueueGetFault(q, &fault), SPYRE_NOT_READY);
  EXPECT(spyreLaunch(q, &desc), SPYRE_SUCCESS);
  EXPECT(spyreLaunch(q, &desc), SPYRE_SUCCESS); /* skipped: the queue faults first */
  EXPECT(spyreQueueSynchronize(q), SPYRE_ERROR_DEVICE_FAULT);
  EXPECT(spyreQueueGetFault(q, &fault), SPYRE_SUCCESS);
  CHECK(fault.command == SPYRE_COMMAND_LAUNCH && strcmp(fault.kernel, "oob_kernel") == 0);
  CHECK(fault.core == 0);
  CHECK(fault.pc == 0);
  CHECK(fault.address == args[0] + 4096);
  CHECK(strstr(fault.reason, "16 bytes past the end of a 4096-byte allocation") != NULL);
  CHECK(strstr(fault.instruction, "dma_load") != NULL);
  CHECK(fault.skipped_commands == 1);
  EXPECT(spyreQueueGetFault(q, NULL), SPYRE_ERROR_INVALID_NULL_POINTER);
  fault.struct_size = 3;
  EXPECT(spyreQueueGetFault(q, &fault), SPYRE_ERROR_UNSUPPORTED_VERSION);
  EXPECT(spyreLaunch(q, &desc), SPYRE_ERROR_QUEUE_IN_ERROR_STATE);
  EXPECT(spyreMemcpyAsync(q, buf, args, 8), SPYRE_ERROR_QUEUE_IN_ERROR_STATE);
  EXPECT(spyreEventRecord(e0, q), SPYRE_ERROR_QUEUE_IN_ERROR_STATE);
  EXPECT(spyreQueueQuery(q), SPYRE_ERROR_DEVICE_FAULT);
  EXPECT(spyreDeviceSynchronize(dev0), SPYRE_ERROR_DEVICE_FAULT);
  EXPECT(spyreQueueWaitEvent(q, e1), SPYRE_ERROR_QUEUE_IN_ERROR_STATE);
  EXPECT(spyreQueueFence(q), SPYRE_ERROR_QUEUE_IN_ERROR_STATE);
  EXPECT(spyreMemFillAsync(q, buf, args, 4, 8), SPYRE_ERROR_QUEUE_IN_ERROR_STATE);
  EXPECT(spyreMemcpy2DAsync(q, buf, 8, args, 8, 8, 1), SPYRE_ERROR_QUEUE_IN_ERROR_STATE);
  EXPECT(spyreQueueAcknowledgeError(q), SPYRE_SUCCESS);
  EXPECT(spyreQueueAcknowledgeError(NULL), SPYRE_ERROR_INVALID_HANDLE);
  EXPECT(spyreQueueGetFault(q, &fault), SPYRE_ERROR_UNSUPPORTED_VERSION); /* struct_size still 3 */
  fault.struct_size = sizeof fault;
  EXPECT(spyreQueueGetFault(q, &fault), SPYRE_NOT_READY);
  desc = launch_desc(mm, NULL, 0);
  EXPECT(spyreLaunch(q, &desc), SPYRE_SUCCESS); /* the queue works again */
  EXPECT(spyreQueueSynchronize(q), SPYRE_SUCCESS);
  EXPECT(spyreDeviceSynchronize(dev0), SPYRE_SUCCESS);

  /* Statistics, records, report. */
  {
    spyre_device_stats_t stats;
    spyre_launch_record_t records[8];
    uint32_t count = 0, i;
    size_t need = 0;
    char small[8];
    char* json;
    memset(&stats, 0, sizeof stats);
    stats.struct_size = sizeof stats;
    EXPECT(spyreDeviceGetStats(dev0, &stats), SPYRE_SUCCESS);
    CHECK(stats.launches >= 3 && stats.faults == 1 && stats.macs[SPYRE_MAC_FP16] >= 2ull * 256 * 256 * 256);
    stats.struct_size = 1;
    EXPECT(spyreDeviceGetStats(dev0, &stats), SPYRE_ERROR_UNSUPPORTED_VERSION);
    EXPECT(spyreDeviceGetStats(NULL, &stats), SPYRE_ERROR_INVALID_HANDLE);
    EXPECT(spyreDeviceGetLaunchRecords(dev0, &count, NULL), SPYRE_SUCCESS);
    CHECK(count == (uint32_t)stats.launches);
    for (i = 0; i < 8; ++i) records[i].struct_size = sizeof records[i];
    count = 8;
    EXPECT(spyreDeviceGetLaunchRecords(dev0, &count, records), SPYRE_SUCCESS);
    CHECK(count >= 3 && strcmp(records[0].name, "long_matmul") == 0 && records[0].queue == q);
    CHECK((!timed || records[0].end_ps > records[0].start_ps) && records[0].macs[SPYRE_MAC_FP16] == 256ull * 256 * 256);
    EXPECT(spyreDeviceGetLaunchRecords(dev0, NULL, records), SPYRE_ERROR_INVALID_NULL_POINTER);
    EXPECT(spyreDeviceGetLaunchRecords(NULL, &count, NULL), SPYRE_ERROR_INVALID_HANDLE);
    records[0].struct_size = 4;
    count = 1;
    EXPECT(spyreDeviceGetLaunchRecords(dev0, &count, records), SPYRE_ERROR_UNSUPPORTED_VERSION);
    EXPECT(spyreDeviceGetReport(NULL, NULL, &need), SPYRE_ERROR_INVALID_HANDLE);
    EXPECT(spyreDeviceGetReport(dev0, NULL, NULL), SPYRE_ERROR_INVALID_NULL_POINTER);
    EXPECT(spyreDeviceGetReport(dev0, NULL, &need), SPYRE_SUCCESS);
    CHECK(need > 100);
    json = malloc(need);
    EXPECT(spyreDeviceGetReport(dev0, json, &need), SPYRE_SUCCESS);
    CHECK(json[0] == '{' && strstr(json, "\"launch_records\"") != NULL);
    free(json);
    need = sizeof small;
    EXPECT(spyreDeviceGetReport(dev0, small, &need), SPYRE_ERROR_INVALID_SIZE);
    CHECK(need > sizeof small);
    EXPECT(spyreDeviceResetStats(dev0), SPYRE_SUCCESS);
    EXPECT(spyreDeviceGetStats(dev0, &stats), SPYRE_ERROR_UNSUPPORTED_VERSION);
    stats.struct_size = sizeof stats;
    EXPECT(spyreDeviceGetStats(dev0, &stats), SPYRE_SUCCESS);
    CHECK(stats.launches == 0 && stats.faults == 0);
    EXPECT(spyreDeviceResetStats(NULL), SPYRE_ERROR_INVALID_HANDLE);
  }

  /* Traces. */
  EXPECT(spyreTraceStart(NULL), SPYRE_ERROR_INVALID_HANDLE);
  EXPECT(spyreTraceStop(NULL, "x.json"), SPYRE_ERROR_INVALID_HANDLE);
  EXPECT(spyreTraceStart(dev0), SPYRE_SUCCESS);
  EXPECT(spyreTraceStart(dev0), SPYRE_ERROR_INVALID_ARGUMENT);
  EXPECT(spyreLaunch(q, &desc), SPYRE_SUCCESS);
  EXPECT(spyreTraceStop(dev0, "/nonexistent-dir/trace.json"), SPYRE_ERROR_INVALID_ARGUMENT);
  EXPECT(spyreTraceStop(dev0, "abi_conformance_trace.json"), SPYRE_ERROR_INVALID_ARGUMENT); /* already stopped */
  EXPECT(spyreTraceStart(dev0), SPYRE_SUCCESS);
  EXPECT(spyreLaunch(q, &desc), SPYRE_SUCCESS);
  EXPECT(spyreTraceStop(dev0, "abi_conformance_trace.json"), SPYRE_SUCCESS);
  {
    FILE* f = fopen("abi_conformance_trace.json", "r");
    char head[16] = {0};
    CHECK(f != NULL);
    if (f) {
      CHECK(fread(head, 1, 15, f) == 15 && strncmp(head, "{\"displayTimeUn", 15) == 0);
      fclose(f);
    }
  }
  EXPECT(spyreTraceStop(dev0, NULL), SPYRE_ERROR_INVALID_NULL_POINTER);

  /* Destruction: stale handles are refused, never dereferenced. */
  EXPECT(spyreProgramUnload(mm), SPYRE_SUCCESS);
  EXPECT(spyreProgramUnload(mm), SPYRE_ERROR_INVALID_HANDLE);
  desc = launch_desc(mm, NULL, 0);
  EXPECT(spyreLaunch(q, &desc), SPYRE_ERROR_INVALID_HANDLE);
  EXPECT(spyreEventDestroy(e0), SPYRE_SUCCESS);
  EXPECT(spyreEventDestroy(e0), SPYRE_ERROR_INVALID_HANDLE);
  EXPECT(spyreEventRecord(e0, q), SPYRE_ERROR_INVALID_HANDLE);
  {
    /* A slot reused 2^24 times used up its generations; the destroyed handle never
     * becomes live again (the slot is retired). Events reuse one slot, LIFO. */
    spyre_event_t first = NULL, again = NULL;
    uint32_t n;
    EXPECT(spyreEventCreate(dev0, &first), SPYRE_SUCCESS);
    EXPECT(spyreEventDestroy(first), SPYRE_SUCCESS);
    for (n = 0; n < (1u << 24); ++n) {
      if (spyreEventCreate(dev0, &again) != SPYRE_SUCCESS || spyreEventDestroy(again) != SPYRE_SUCCESS) break;
      if (again == first) break;
    }
    CHECK(n == (1u << 24));
    CHECK(again != first);
    EXPECT(spyreEventRecord(first, q), SPYRE_ERROR_INVALID_HANDLE);
  }
  EXPECT(spyreQueueDestroy(q), SPYRE_SUCCESS);
  EXPECT(spyreQueueDestroy(q), SPYRE_ERROR_INVALID_HANDLE);
  EXPECT(spyreQueueSynchronize(q), SPYRE_ERROR_INVALID_HANDLE);
  EXPECT(spyreMemFree(buf), SPYRE_SUCCESS);
  (void)hi;
  (void)q1;
  (void)e1;
  (void)two;
  (void)p1;
}

static void shutdown_and_restart(void) {
  spyre_device_properties_t p;
  spyre_device_t d = NULL;
  memset(&p, 0, sizeof p);
  p.struct_size = sizeof p;
  EXPECT(spyreDriverShutdown(), SPYRE_SUCCESS);
  EXPECT(spyreDeviceGetProperties(dev0, &p), SPYRE_ERROR_INVALID_HANDLE); /* old handles are gone */
  EXPECT(spyreDeviceGet(0, &d), SPYRE_SUCCESS);                           /* a fresh driver */
  EXPECT(spyreDeviceGetProperties(d, &p), SPYRE_SUCCESS);
  EXPECT(spyreDriverShutdown(), SPYRE_SUCCESS);
  /* A bad environment: every call says the driver could not start, and why. */
  setenv("SPYRE_SIM_DEVICES", "many", 1);
  EXPECT(spyreDeviceGet(0, &d), SPYRE_ERROR_NOT_INITIALIZED);
  CHECK(strstr(spyreGetLastErrorMessage(), "SPYRE_SIM_DEVICES") != NULL);
  EXPECT(spyreDriverInit(SPYRE_API_VERSION_CURRENT), SPYRE_ERROR_NOT_INITIALIZED);
  setenv("SPYRE_SIM_DEVICES", "1", 1);
  setenv("SPYRE_SIM_SET", "cores.count=0", 1);
  EXPECT(spyreDriverInit(SPYRE_API_VERSION_CURRENT), SPYRE_ERROR_NOT_INITIALIZED);
  CHECK(strstr(spyreGetLastErrorMessage(), "--set cores.count=0") != NULL);
  setenv("SPYRE_SIM_SET", "", 1);
  EXPECT(spyreDriverInit(SPYRE_API_VERSION_CURRENT), SPYRE_SUCCESS); /* and recovers once it is fixed */
  {
    /* spyreDriverConfigure: overrides reach the driver one by one, never re-split. */
    const char* overrides[] = {"name=a;cores.count=2", "cores.count=3"};
    spyre_driver_config_t c;
    char report[1 << 16];
    size_t bytes = sizeof report;
    uint32_t count = 0;
    memset(&c, 0, sizeof c);
    c.struct_size = sizeof c;
    c.overrides = overrides;
    c.num_overrides = 2;
    c.device_count = 1;
    EXPECT(spyreDriverConfigure(&c), SPYRE_ERROR_INVALID_ARGUMENT); /* the driver is running */
    CHECK(strstr(spyreGetLastErrorMessage(), "the driver is running") != NULL);
    EXPECT(spyreDriverShutdown(), SPYRE_SUCCESS);
    EXPECT(spyreDriverConfigure(&c), SPYRE_SUCCESS);
    EXPECT(spyreDeviceGetCount(&count), SPYRE_SUCCESS);
    CHECK(count == 1);
    EXPECT(spyreDeviceGet(0, &d), SPYRE_SUCCESS);
    p.struct_size = sizeof p;
    EXPECT(spyreDeviceGetProperties(d, &p), SPYRE_SUCCESS);
    CHECK(p.cores == 3);
    EXPECT(spyreDeviceGetReport(d, report, &bytes), SPYRE_SUCCESS);
    CHECK(strstr(report, "\"a;cores.count=2\"") != NULL);
    EXPECT(spyreDriverShutdown(), SPYRE_SUCCESS);
    /* Bad input is refused now, naming the override; the previous setting stays. */
    overrides[1] = "cores.count=0";
    EXPECT(spyreDriverConfigure(&c), SPYRE_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(spyreGetLastErrorMessage(), "--set cores.count=0") != NULL);
    c.num_overrides = 1;
    c.overrides = NULL;
    EXPECT(spyreDriverConfigure(&c), SPYRE_ERROR_INVALID_NULL_POINTER);
    c.struct_size = 4;
    EXPECT(spyreDriverConfigure(&c), SPYRE_ERROR_UNSUPPORTED_VERSION);
    {
      /* 0.5: YAML text instead of a file (here the text of SPYRE_SIM_CONFIG's file),
       * and a mode. */
      static char yaml[1 << 16];
      const char* more[] = {"name=from-text", "cores.count=5"};
      FILE* f = fopen(getenv("SPYRE_SIM_CONFIG"), "rb");
      size_t n = 0;
      CHECK(f != NULL);
      if (f != NULL) {
        n = fread(yaml, 1, sizeof yaml - 1, f);
        fclose(f);
      }
      yaml[n] = '\0';
      c.struct_size = sizeof c;
      c.overrides = more;
      c.num_overrides = 2;
      c.config_yaml = yaml;
      c.mode = SPYRE_MODE_NO_DATA;
      c.config_path = "x.yaml";
      EXPECT(spyreDriverConfigure(&c), SPYRE_ERROR_INVALID_ARGUMENT); /* a file and text */
      CHECK(strstr(spyreGetLastErrorMessage(), "config_path and config_yaml") != NULL);
      c.config_path = NULL;
      c.mode = 7;
      EXPECT(spyreDriverConfigure(&c), SPYRE_ERROR_INVALID_ARGUMENT);
      CHECK(strstr(spyreGetLastErrorMessage(), "config->mode") != NULL);
      c.mode = SPYRE_MODE_FUNCTIONAL;
      EXPECT(spyreDriverConfigure(&c), SPYRE_SUCCESS);
      EXPECT(spyreDeviceGet(0, &d), SPYRE_SUCCESS);
      p.struct_size = sizeof p;
      EXPECT(spyreDeviceGetProperties(d, &p), SPYRE_SUCCESS);
      CHECK(p.cores == 5);
      CHECK(strcmp(p.config_name, "from-text") == 0);
      CHECK(p.timed == 0); /* functional */
      EXPECT(spyreDriverShutdown(), SPYRE_SUCCESS);
      /* A 0.4 caller's struct (ending at device_count): text and mode are not read. */
      c.struct_size = (uint32_t)offsetof(spyre_driver_config_t, config_yaml);
      c.num_overrides = 0;
      c.overrides = NULL;
      EXPECT(spyreDriverConfigure(&c), SPYRE_SUCCESS);
      EXPECT(spyreDeviceGet(0, &d), SPYRE_SUCCESS);
      EXPECT(spyreDeviceGetProperties(d, &p), SPYRE_SUCCESS);
      CHECK(strcmp(p.config_name, "from-text") != 0);
      EXPECT(spyreDriverShutdown(), SPYRE_SUCCESS);
    }
    EXPECT(spyreDriverConfigure(NULL), SPYRE_SUCCESS); /* back to the environment */
    EXPECT(spyreDriverInit(SPYRE_API_VERSION_CURRENT), SPYRE_SUCCESS);
  }
  EXPECT(spyreDriverShutdown(), SPYRE_SUCCESS);
}

int main(void) {
  driver_and_results();
  devices();
  memory();
  copies_and_fills();
  queues_events_programs();
  shutdown_and_restart();
  printf("abi conformance: %d checks, %d failed\n", checks, failures);
  return failures;
}
