// The Spyre-sim device ISA: what a core executes.
//
// Dependency-free (standard library only): the sim executes it, the firmware validates
// programs at load, the backend's compiler emits it, debug dumps print it.
//
// Addressing: scratchpad operands are byte addresses in the core's scratchpad; device
// memory is addressed as (argument index, byte offset) into the argument table given
// with each launch, so a program never contains a device address and one loaded
// program can run with many argument tables. Element counts and strides are in
// elements of the instruction's dtype unless a name ends in _bytes.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <variant>

namespace spyre::isa {

inline constexpr std::uint32_t kIsaVersion = 1;
inline constexpr std::uint32_t kInstructionBytes = 64;  // every instruction is one 64-byte word
inline constexpr std::uint32_t kNumTokens = 16;         // DMA / ring completion tokens per core
inline constexpr std::uint32_t kMaxArgs = 256;          // argument-table entries per launch
inline constexpr std::uint32_t kMaxStreams = 1024;      // instruction streams (cores) per program

// fp8_e4m3: 1 sign, 4 exponent (bias 7), 3 fraction bits, no infinity, NaN = S.1111.111,
// largest 448 (PyTorch's float8_e4m3fn); fp8_e5m2: 1, 5 (bias 15), 2, IEEE-like with
// infinities, largest 57344 (float8_e5m2). Both have subnormals.
enum class DType : std::uint8_t { fp32 = 0, fp16 = 1, bf16 = 2, int8 = 3, int32 = 4, boolean = 5, fp8_e4m3 = 6, fp8_e5m2 = 7 };
inline constexpr std::uint8_t kNumDTypes = 8;

constexpr std::uint32_t dtype_size(DType t) {
  switch (t) {
    case DType::fp32: return 4;
    case DType::fp16: return 2;
    case DType::bf16: return 2;
    case DType::int8: return 1;
    case DType::int32: return 4;
    case DType::boolean: return 1;
    case DType::fp8_e4m3: return 1;
    case DType::fp8_e5m2: return 1;
  }
  return 0;
}
constexpr bool is_fp8(DType t) { return t == DType::fp8_e4m3 || t == DType::fp8_e5m2; }
constexpr bool is_float(DType t) { return t == DType::fp32 || t == DType::fp16 || t == DType::bf16 || is_fp8(t); }
std::string_view to_string(DType t);

enum class Opcode : std::uint8_t {
  end = 0,
  nop = 1,
  dma_load = 2,    // device memory -> scratchpad
  dma_store = 3,   // scratchpad -> device memory
  wait = 4,        // until the given tokens complete
  matmul = 5,
  vunary = 6,
  vbinary = 7,
  vcompare = 8,
  vselect = 9,
  vreduce = 10,
  vconvert = 11,
  vfill = 12,
  ring_send = 13,
  ring_recv = 14,
  barrier = 15,
  dma_gather = 16,  // rows of a device-memory table, picked by indices in the scratchpad
  vtranspose = 17,  // a block's rows become its columns (the card's restickify)
  vrandom = 18,     // counter-based random numbers (Philox4x32-10)
};
inline constexpr std::uint8_t kNumOpcodes = 19;
std::string_view to_string(Opcode op);

enum class UnaryOp : std::uint8_t {
  copy, neg, abs, exp, log, sqrt, rsqrt, reciprocal, tanh, erf, sigmoid, relu,
  gelu,       // exact: x * Phi(x)
  gelu_tanh,  // tanh approximation
  silu,
  sin,
  cos,
  hardswish,    // x * min(max(x + 3, 0), 6) / 6, PyTorch's formula
  hardsigmoid,  // min(max(x + 3, 0), 6) / 6
};
inline constexpr std::uint8_t kNumUnaryOps = 19;
std::string_view to_string(UnaryOp op);

// pow: a ** b; floats: C's pow rules, the fp32 result correctly rounded (computed in
// double by the simulation);
// integers: the exact power, wrapping, and for a negative b, 1 for a = 1, +-1 for
// a = -1, else 0 (PyTorch's integer pow).
enum class BinaryOp : std::uint8_t { add, sub, mul, div, max, min, pow };
inline constexpr std::uint8_t kNumBinaryOps = 7;
std::string_view to_string(BinaryOp op);

// The vector unit's cost classes: each vector operation is charged the cycles per vector
// of its class, the chip config's cores.vector.op_cycles.<name> (to_string gives the
// name). One list for the config, the simulator's timing and the compiler's cost model:
// a class missing here fails to build, it cannot cost 1.0 in one place and throw in
// another. The order is the device properties' (spyre_device_properties_t.
// vector_op_cycles): append, never reorder.
#define SPYRE_ISA_VECTOR_COSTS(X)                                                                          \
  X(copy) X(add) X(sub) X(mul) X(div) X(max) X(min) X(neg) X(abs) X(exp) X(log) X(sqrt) X(rsqrt) X(reciprocal)      \
  X(tanh) X(erf) X(sigmoid) X(relu) X(gelu) X(silu) X(compare) X(select) X(reduce) X(convert)                     \
  /* added after the first configs were written (the config gives them defaults) */                                \
  X(sin) X(cos) X(transpose) X(random) X(random_normal) X(pow) X(hardswish) X(hardsigmoid)
enum class VectorCost : std::uint8_t {
#define SPYRE_ISA_COST_ENUMERATOR(name) name,
  SPYRE_ISA_VECTOR_COSTS(SPYRE_ISA_COST_ENUMERATOR)
#undef SPYRE_ISA_COST_ENUMERATOR
};
#define SPYRE_ISA_COST_ONE(name) +1
inline constexpr std::uint8_t kNumVectorCosts = 0 SPYRE_ISA_VECTOR_COSTS(SPYRE_ISA_COST_ONE);
#undef SPYRE_ISA_COST_ONE
std::string_view to_string(VectorCost c);
// The class a unary or binary op is charged as (gelu_tanh as gelu; the rest their own).
VectorCost vector_cost(UnaryOp op);
VectorCost vector_cost(BinaryOp op);

enum class CompareOp : std::uint8_t { eq, ne, lt, le, gt, ge };
inline constexpr std::uint8_t kNumCompareOps = 6;
std::string_view to_string(CompareOp op);

enum class ReduceOp : std::uint8_t { sum, max, min };
inline constexpr std::uint8_t kNumReduceOps = 3;
std::string_view to_string(ReduceOp op);

// The distribution vrandom draws from.
enum class RandomDist : std::uint8_t {
  uniform,  // [0, 1), 24 random bits
  normal,   // standard normal (Box-Muller on two uniforms)
};
inline constexpr std::uint8_t kNumRandomDists = 2;
std::string_view to_string(RandomDist d);

// How the second operand b of a rows x cols elementwise op is laid out.
enum class Broadcast : std::uint8_t {
  none,       // b is rows x cols, like a
  row,        // b is one row of cols values, used for every row
  col,        // b is one column of rows values, used for every column
  scalar,     // b is one value in the scratchpad
  immediate,  // b is the instruction's immediate
};
inline constexpr std::uint8_t kNumBroadcasts = 5;
std::string_view to_string(Broadcast b);

// Device memory <-> scratchpad, up to 3-D. Element (i0, i1, i2), i0 innermost, is at
// device byte offset `offset + (i0*mem_stride[0] + i1*mem_stride[1] + i2*mem_stride[2]) * size`
// and scratchpad address `sp_addr + (i0 + i1*sp_stride[0] + i2*sp_stride[1]) * size`.
// Device strides may be 0 (broadcast) or negative; an access smaller than a stick
// is legal but costs whole sticks.
struct Dma {
  std::uint8_t token = 0;
  DType dtype = DType::fp16;
  std::uint16_t arg = 0;
  std::uint64_t offset = 0;  // bytes, must be a multiple of the element size
  std::uint32_t sp_addr = 0;
  std::array<std::uint32_t, 3> shape{1, 1, 1};
  std::array<std::int64_t, 3> mem_stride{1, 0, 0};
  std::array<std::uint32_t, 2> sp_stride{0, 0};  // 0: packed (shape[0], shape[0]*shape[1])
};
struct DmaLoad : Dma {};
struct DmaStore : Dma {};

// Gathers `count` rows into the scratchpad (packed, row_bytes apart from sp_addr): row
// i is the row_bytes at argument + offset + index[i] * row_stride, where index[i] is
// read from the scratchpad at index_sp (int32, or int64 when wide_index). An index
// outside [0, rows) faults, naming it. (Embedding lookups: the table stays in device
// memory; only the rows asked for move.) With `scatter` the rows move the other way:
// scratchpad row i is stored at the table row index[i] (index_copy_, KV-cache updates;
// rows are written in order, so a repeated index keeps the last). With `wrap` an index
// in [-rows, 0) counts from the end (Python's and index_put_'s negative indices).
struct DmaGather {
  std::uint8_t token = 0;
  bool wide_index = false;
  bool scatter = false;
  bool wrap = false;
  std::uint16_t arg = 0;
  std::uint32_t index_sp = 0, count = 0, sp_addr = 0, row_bytes = 0;
  std::uint64_t offset = 0;      // bytes from the argument to row 0's first byte moved
  std::uint64_t rows = 0;        // the table's rows (the valid index range)
  std::uint64_t row_stride = 0;  // bytes between table rows
};

struct Wait {
  std::uint16_t token_mask = 0;  // bit t: wait for token t
};

// C[m x n] (+)= op(A)[m x k] * op(B)[k x n], row-major with leading dimensions in
// elements; op(A) = A^T when trans_a (A then stored k x m). Accumulates in fp32.
struct Matmul {
  std::uint32_t a = 0, b = 0, c = 0;
  std::uint32_t m = 0, n = 0, k = 0;
  std::uint32_t lda = 0, ldb = 0, ldc = 0;
  DType in = DType::fp16;   // A and B: fp32, fp16, bf16 or int8
  DType out = DType::fp32;  // C: fp32, fp16, bf16; int32 for int8 inputs
  bool trans_a = false, trans_b = false;
  bool accumulate = false;  // C += A*B (C read in `out`) instead of C = A*B
};

struct VUnary {
  UnaryOp op = UnaryOp::copy;
  DType dtype = DType::fp32;
  std::uint32_t src = 0, dst = 0, count = 0;
};

struct VBinary {
  BinaryOp op = BinaryOp::add;
  DType dtype = DType::fp32;
  Broadcast bcast = Broadcast::none;
  std::uint32_t a = 0, b = 0, dst = 0, rows = 0, cols = 0;
  double imm = 0;  // b when bcast == immediate
};

// dst (bool, one byte per element) = a <op> b.
struct VCompare {
  CompareOp op = CompareOp::eq;
  DType dtype = DType::fp32;
  Broadcast bcast = Broadcast::none;
  std::uint32_t a = 0, b = 0, dst = 0, rows = 0, cols = 0;
  double imm = 0;
};

// dst[i] = cond[i] ? a[i] : b[i]; cond is bool.
struct VSelect {
  DType dtype = DType::fp32;
  std::uint32_t cond = 0, a = 0, b = 0, dst = 0, count = 0;
};

// Reduces a rows x cols block: axis 1 -> rows results (along each row), axis 0 ->
// cols results (down each column). Floats accumulate in fp32.
struct VReduce {
  ReduceOp op = ReduceOp::sum;
  DType in = DType::fp32, out = DType::fp32;
  std::uint8_t axis = 1;
  std::uint32_t src = 0, dst = 0, rows = 0, cols = 0;
};

struct VConvert {
  DType from = DType::fp32, to = DType::fp16;
  std::uint32_t src = 0, dst = 0, count = 0;
};

struct VFill {
  DType dtype = DType::fp32;
  std::uint32_t dst = 0, count = 0;
  double value = 0;
};

// Writes the rows x cols block at src transposed at dst (cols x rows):
// dst[c * rows + r] = src[r * cols + c]. The blocks must not overlap.
struct VTranspose {
  DType dtype = DType::fp32;
  std::uint32_t src = 0, dst = 0, rows = 0, cols = 0;
};

// Writes planes x rows x cols fp32 random numbers at dst (packed, cols innermost).
// Element (c, r, p) is number j = start + c + r * row_step + p * plane_step of the
// stream named by the 16 bytes at `state` in the scratchpad: a seed and an offset
// (two little-endian uint64). Number j is drawn from Philox4x32-10 keyed by the seed:
// uniform takes lane j % 4 of counter offset + j / 4 and keeps its top 24 bits
// (x >> 8) * 2^-24; normal takes lanes 2(j % 2) and 2(j % 2) + 1 of counter
// offset + j / 2 as uniforms u1, u2 and gives sqrt(-2 ln(1 - u1)) cos(2 pi u2). A
// number depends on (seed, offset, j) alone, so however a kernel splits its elements
// over cores and tiles, the same state gives the same values. (The counter is the
// 128-bit {offset lo, offset hi, 0, 0}, as PyTorch's philox_engine(seed, 0, offset).)
struct VRandom {
  RandomDist dist = RandomDist::uniform;
  std::uint32_t dst = 0, cols = 0, rows = 1, planes = 1;
  std::uint32_t state = 0;
  std::uint64_t start = 0, row_step = 0, plane_step = 0;
};

// Sends `bytes` of this core's scratchpad to core `dst_core` of the same launch over
// the ring, matched by `tag`; asynchronous, completes `token`.
struct RingSend {
  std::uint8_t token = 0;
  std::uint16_t dst_core = 0;
  std::uint16_t tag = 0;
  std::uint32_t sp_addr = 0, bytes = 0;
};

// Waits for the message with `tag` from `src_core`, writes it at sp_addr; if
// forward_to is set, also sends it on to that core (asynchronous, completes `token`):
// a panel read once from DRAM can travel core to core.
struct RingRecv {
  static constexpr std::uint16_t kNoForward = 0xffff;
  std::uint8_t token = 0;
  std::uint16_t src_core = 0;
  std::uint16_t tag = 0;
  std::uint16_t forward_to = kNoForward;
  std::uint32_t sp_addr = 0, bytes = 0;
};

// Waits until `count` streams of the launch have reached barrier `id`.
struct Barrier {
  std::uint16_t id = 0;
  std::uint16_t count = 0;
};

struct End {};
struct Nop {};

using Instruction = std::variant<End, Nop, DmaLoad, DmaStore, Wait, Matmul, VUnary, VBinary, VCompare,
                                 VSelect, VReduce, VConvert, VFill, RingSend, RingRecv, Barrier, DmaGather,
                                 VTranspose, VRandom>;

Opcode opcode_of(const Instruction& inst);

}  // namespace spyre::isa
