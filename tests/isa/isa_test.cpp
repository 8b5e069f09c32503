#include <cstring>
#include <set>
#include <string_view>

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include "spyre/isa/program.h"

using namespace spyre::isa;
using Catch::Matchers::ContainsSubstring;

namespace {

const Limits kLimits{.scratchpad_bytes = 1 << 20, .num_streams = 4};

// One of every instruction, with non-default field values.
std::vector<Instruction> one_of_each() {
  DmaLoad load;
  load.token = 3;
  load.dtype = DType::bf16;
  load.arg = 7;
  load.offset = 0x123456780ull;
  load.sp_addr = 4096;
  load.shape = {64, 8, 2};
  load.mem_stride = {1, -4096, 0};
  load.sp_stride = {64, 512};
  DmaStore store;
  static_cast<Dma&>(store) = load;
  store.token = 15;
  Matmul mm{.a = 0, .b = 8192, .c = 16384, .m = 32, .n = 48, .k = 64, .lda = 32, .ldb = 64, .ldc = 48,
            .in = DType::fp16, .out = DType::fp32, .trans_a = true, .trans_b = true, .accumulate = true};
  return {End{},
          Nop{},
          load,
          store,
          Wait{.token_mask = 0x8001},
          mm,
          VUnary{.op = UnaryOp::gelu_tanh, .dtype = DType::fp16, .src = 2, .dst = 64, .count = 100},
          VBinary{.op = BinaryOp::div, .dtype = DType::fp32, .bcast = Broadcast::immediate, .a = 4, .b = 0,
                  .dst = 400, .rows = 3, .cols = 5, .imm = -0.5},
          VCompare{.op = CompareOp::ge, .dtype = DType::int32, .bcast = Broadcast::row, .a = 0, .b = 64,
                   .dst = 128, .rows = 4, .cols = 4, .imm = 0},
          VSelect{.dtype = DType::bf16, .cond = 1, .a = 2, .b = 4, .dst = 6, .count = 9},
          VReduce{.op = ReduceOp::max, .in = DType::fp16, .out = DType::fp32, .axis = 0, .src = 0, .dst = 800,
                  .rows = 7, .cols = 9},
          VConvert{.from = DType::fp32, .to = DType::bf16, .src = 0, .dst = 1000, .count = 33},
          VFill{.dtype = DType::int32, .dst = 8, .count = 5, .value = -7},
          RingSend{.token = 2, .dst_core = 3, .tag = 99, .sp_addr = 10, .bytes = 20},
          RingRecv{.token = 4, .src_core = 1, .tag = 99, .forward_to = 2, .sp_addr = 30, .bytes = 20},
          Barrier{.id = 5, .count = 4},
          DmaGather{.token = 9, .wide_index = true, .arg = 2, .index_sp = 8, .count = 3, .sp_addr = 64,
                    .row_bytes = 256, .offset = 0x1000, .rows = 32000, .row_stride = 8192},
          DmaGather{.token = 3, .wide_index = false, .scatter = true, .arg = 1, .index_sp = 0, .count = 2,
                    .sp_addr = 128, .row_bytes = 64, .offset = 0x40, .rows = 17, .row_stride = 256},
          VTranspose{.dtype = DType::fp16, .src = 0, .dst = 4096, .rows = 64, .cols = 32},
          VRandom{.dist = RandomDist::normal, .dst = 64, .cols = 8, .rows = 3, .planes = 2, .state = 0,
                  .start = 0x123456789ull, .row_step = 100, .plane_step = 10000}};
}

bool same(const Instruction& a, const Instruction& b) { return encode(a) == encode(b); }

}  // namespace

TEST_CASE("given every instruction, encode then decode gives it back") {
  for (const auto& inst : one_of_each()) {
    const Word w = encode(inst);
    CHECK(w[0] == static_cast<std::uint8_t>(opcode_of(inst)));
    const Decoded d = decode(w);
    INFO(disassemble(inst));
    REQUIRE(d.inst.has_value());
    CHECK(d.inst->index() == inst.index());
    CHECK(same(*d.inst, inst));
    CHECK_FALSE(check(inst, kLimits).has_value());
  }
}

TEST_CASE("given a DMA word, its fields sit at the documented offsets") {
  DmaLoad load;
  load.arg = 0x0102;
  load.offset = 0x1122334455667788ull;
  const Word w = encode(load);
  CHECK(w[0] == 2);                  // opcode dma_load
  CHECK(w[4] == 0x02);               // arg, little-endian
  CHECK(w[5] == 0x01);
  std::uint64_t offset;
  std::memcpy(&offset, w.data() + 8, 8);
  CHECK(offset == 0x1122334455667788ull);
}

TEST_CASE("given malformed words, decode names the problem") {
  Word w{};
  w[0] = 200;
  CHECK_THAT(decode(w).error, ContainsSubstring("unknown opcode 200"));
  w = encode(VUnary{.op = UnaryOp::exp, .dtype = DType::fp32, .src = 0, .dst = 0, .count = 1});
  w[1] = 77;
  CHECK_THAT(decode(w).error, ContainsSubstring("invalid unary op value 77"));
  w = encode(VUnary{.op = UnaryOp::exp, .dtype = DType::fp32, .src = 0, .dst = 0, .count = 1});
  w[2] = 9;
  CHECK_THAT(decode(w).error, ContainsSubstring("invalid dtype value 9"));
  w = encode(Nop{});
  w[63] = 1;
  CHECK_THAT(decode(w).error, ContainsSubstring("reserved bits set in a nop"));
  w = encode(Matmul{.a = 0, .b = 0, .c = 0, .m = 1, .n = 1, .k = 1, .lda = 1, .ldb = 1, .ldc = 1});
  w[3] |= 0x80;  // an undefined flag bit
  CHECK_THAT(decode(w).error, ContainsSubstring("reserved bits"));
}

TEST_CASE("given operands beyond the scratchpad, check reports the overflow") {
  const Limits small{.scratchpad_bytes = 4096, .num_streams = 1};
  // 1024 fp32 values at 0 end exactly at 4096: fine. At 4 they overflow by 4 bytes.
  CHECK_FALSE(check(VFill{.dtype = DType::fp32, .dst = 0, .count = 1024, .value = 0}, small));
  const auto r = check(VFill{.dtype = DType::fp32, .dst = 4, .count = 1024, .value = 0}, small);
  REQUIRE(r);
  CHECK_THAT(*r, ContainsSubstring("[4, 4100) overflows the 4096-byte scratchpad"));
  DmaLoad d;
  d.dtype = DType::fp16;
  d.shape = {64, 33, 1};  // 64 x 33 x 2 bytes = 4224 > 4096
  CHECK_THAT(check(d, small).value_or(""), ContainsSubstring("overflows"));
  // A matmul whose C with ldc 64 ends past the scratchpad: (16-1)*64+64 fp32 = 4096 B from 4.
  Matmul mm{.a = 0, .b = 0, .c = 4, .m = 16, .n = 64, .k = 1, .lda = 1, .ldb = 64, .ldc = 64,
            .in = DType::fp16, .out = DType::fp32};
  CHECK_THAT(check(mm, small).value_or(""), ContainsSubstring("C [4, 4100)"));
}

TEST_CASE("given bad operand combinations, check explains them") {
  CHECK_THAT(check(VFill{.dtype = DType::fp32, .dst = 2, .count = 1, .value = 0}, kLimits).value_or(""),
             ContainsSubstring("not aligned to its 4-byte elements"));
  CHECK_THAT(check(VUnary{.op = UnaryOp::exp, .dtype = DType::int32, .src = 0, .dst = 0, .count = 1}, kLimits)
                 .value_or(""),
             ContainsSubstring("exp needs a float dtype"));
  CHECK_THAT(check(Matmul{.a = 0, .b = 0, .c = 0, .m = 1, .n = 1, .k = 1, .lda = 1, .ldb = 1, .ldc = 1,
                          .in = DType::int8, .out = DType::fp32},
                   kLimits)
                 .value_or(""),
             ContainsSubstring("cannot produce fp32"));
  CHECK_THAT(check(Matmul{.a = 0, .b = 0, .c = 0, .m = 4, .n = 4, .k = 8, .lda = 4, .ldb = 4, .ldc = 4}, kLimits)
                 .value_or(""),
             ContainsSubstring("lda 4 is below A's row length 8"));
  CHECK_THAT(check(Wait{.token_mask = 0}, kLimits).value_or(""), ContainsSubstring("empty mask"));
  DmaLoad d;
  d.token = 16;
  CHECK_THAT(check(d, kLimits).value_or(""), ContainsSubstring("token 16"));
  CHECK_THAT(check(RingSend{.token = 0, .dst_core = 4, .tag = 0, .sp_addr = 0, .bytes = 1}, kLimits).value_or(""),
             ContainsSubstring("destination core 4"));
  CHECK_THAT(check(Barrier{.id = 0, .count = 5}, kLimits).value_or(""), ContainsSubstring("not in 1..4"));
  CHECK_THAT(check(VFill{.dtype = DType::int8, .dst = 0, .count = 1, .value = 300}, kLimits).value_or(""),
             ContainsSubstring("not an int8"));
  const DmaGather g{.token = 0, .wide_index = true, .arg = 0, .index_sp = 4, .count = 2, .sp_addr = 0,
                    .row_bytes = 64, .offset = 0, .rows = 10, .row_stride = 64};
  CHECK_THAT(check(g, kLimits).value_or(""), ContainsSubstring("index address 4 is not aligned to its 8-byte indices"));
  DmaGather big = g;
  big.index_sp = 0;
  big.sp_addr = 64;
  big.row_bytes = 1 << 20;
  CHECK_THAT(check(big, kLimits).value_or(""), ContainsSubstring("destination [64, 2097216) overflows"));
  DmaGather overlap = g;
  overlap.index_sp = 64;
  CHECK_THAT(check(overlap, kLimits).value_or(""), ContainsSubstring("destination [0, 128) overlaps the indices [64, 80)"));
  DmaGather empty = g;
  empty.index_sp = 0;
  empty.rows = 0;
  CHECK_THAT(check(empty, kLimits).value_or(""), ContainsSubstring("the table has no rows"));
}

TEST_CASE("given a built program, it parses back with its name and streams") {
  ProgramBuilder b("gemm_tile", 2);
  b.add(0, Nop{}).add(0, VFill{.dtype = DType::fp32, .dst = 0, .count = 4, .value = 1});
  b.add(1, Barrier{.id = 1, .count = 2}).add(1, End{});
  const Program p(b.build());
  CHECK(p.name() == "gemm_tile");
  CHECK(p.num_streams() == 2);
  CHECK(p.stream_length(0) == 3);  // END appended
  CHECK(p.stream_length(1) == 2);  // already ended
  CHECK(std::holds_alternative<End>(*p.decode_at(0, 2).inst));
  CHECK(std::holds_alternative<Barrier>(*p.decode_at(1, 0).inst));
  CHECK_NOTHROW(p.validate(Limits{.scratchpad_bytes = 4096, .num_streams = 2}));
  CHECK(p.bytes().size() % kInstructionBytes == 0);
}

TEST_CASE("given a bad instruction in a program, validation names stream and pc") {
  ProgramBuilder b("bad", 2);
  b.add(1, Nop{}).add(1, VFill{.dtype = DType::fp32, .dst = 4096, .count = 1, .value = 0});
  const Program p(b.build());
  try {
    p.validate(Limits{.scratchpad_bytes = 4096, .num_streams = 2});
    FAIL("expected a ProgramError");
  } catch (const ProgramError& e) {
    CHECK(e.stream() == 1u);
    CHECK(e.pc() == 1u);
    CHECK_THAT(std::string(e.what()), ContainsSubstring("stream 1 pc 1: vfill: destination"));
  }
}

TEST_CASE("given a corrupted blob, parsing or validation rejects it") {
  ProgramBuilder b("p", 1);
  b.add(0, Nop{});
  const auto good = b.build();
  SECTION("truncated") {
    CHECK_THROWS_WITH(Program(std::vector<std::uint8_t>(good.begin(), good.begin() + 16)),
                      ContainsSubstring("shorter than its 32-byte header"));
  }
  SECTION("bad magic") {
    auto bad = good;
    bad[0] = 'X';
    CHECK_THROWS_WITH(Program(bad), ContainsSubstring("bad magic"));
  }
  SECTION("wrong ISA version") {
    auto bad = good;
    bad[8] = 9;
    CHECK_THROWS_WITH(Program(bad), ContainsSubstring("ISA version 9"));
  }
  SECTION("size mismatch") {
    auto bad = good;
    bad.push_back(0);
    CHECK_THROWS_WITH(Program(bad), ContainsSubstring("header says"));
  }
  SECTION("bad opcode in the stream") {
    auto bad = good;
    bad[bad.size() - 2 * kInstructionBytes] = 0xee;  // the NOP
    const Program p(bad);
    CHECK_THROWS_WITH(p.validate(kLimits), ContainsSubstring("stream 0 pc 0: unknown opcode 238"));
  }
  SECTION("a stream that runs off its end") {
    auto bad = good;
    bad[bad.size() - kInstructionBytes] = static_cast<std::uint8_t>(Opcode::nop);  // END -> NOP
    const Program p(bad);
    CHECK_THROWS_WITH(p.validate(kLimits), ContainsSubstring("does not end with END"));
  }
}

TEST_CASE("given a transpose whose destination overlaps its source, the check names both") {
  // 4 x 8 fp32 = 128 bytes at sp:0; a destination at sp:64 overlaps it.
  CHECK_THAT(check(VTranspose{.dtype = DType::fp32, .src = 0, .dst = 64, .rows = 4, .cols = 8}, kLimits).value_or(""),
             ContainsSubstring("destination sp:64 overlaps the source sp:0 (128 bytes each)"));
  CHECK_FALSE(check(VTranspose{.dtype = DType::fp32, .src = 0, .dst = 128, .rows = 4, .cols = 8}, kLimits));
  CHECK_THAT(check(VTranspose{.dtype = DType::fp32, .src = 0, .dst = 128, .rows = 0, .cols = 8}, kLimits).value_or(""),
             ContainsSubstring("rows and cols must be positive"));
  CHECK(disassemble(VTranspose{.dtype = DType::bf16, .src = 0, .dst = 256, .rows = 3, .cols = 5}) ==
        "vtranspose bf16 sp:0 [3x5] -> sp:256");
}

TEST_CASE("given a vrandom whose state is misaligned or overlaps its output, the check says which") {
  CHECK_FALSE(check(VRandom{.dst = 64, .cols = 8, .rows = 2, .state = 0}, kLimits));
  CHECK_THAT(check(VRandom{.dst = 64, .cols = 8, .state = 4}, kLimits).value_or(""),
             ContainsSubstring("state sp:4 is not 8-byte aligned"));
  // 8 x 2 fp32 = 64 bytes at sp:64; a state at sp:120 overlaps its last 8 bytes.
  CHECK_THAT(check(VRandom{.dst = 64, .cols = 8, .rows = 2, .state = 120}, kLimits).value_or(""),
             ContainsSubstring("destination sp:64 (64 bytes) overlaps the state sp:120"));
  CHECK_THAT(check(VRandom{.dst = 64, .cols = 0, .state = 0}, kLimits).value_or(""),
             ContainsSubstring("planes, rows and cols must be positive"));
  CHECK(disassemble(VRandom{.dist = RandomDist::uniform, .dst = 64, .cols = 8, .rows = 2, .planes = 1, .state = 0,
                            .start = 5, .row_step = 30, .plane_step = 0}) ==
        "vrandom uniform sp:64 [1x2x8] state sp:0 start 5 steps 30 0");
}

TEST_CASE("given instructions, the disassembly reads as assembly") {
  CHECK(disassemble(Wait{.token_mask = 0x3}) == "wait mask=0x0003");
  CHECK(disassemble(DmaGather{.token = 1, .wide_index = false, .arg = 0, .index_sp = 0, .count = 4, .sp_addr = 64,
                              .row_bytes = 256, .offset = 0, .rows = 100, .row_stride = 512}) ==
        "dma_gather t1 arg0+0 rows=100 row_stride=512 <- int32 index sp:0 x4 -> sp:64 row_bytes=256");
  CHECK(disassemble(DmaGather{.token = 2, .wide_index = true, .scatter = true, .arg = 0, .index_sp = 0, .count = 1,
                              .sp_addr = 64, .row_bytes = 12, .offset = 0, .rows = 4, .row_stride = 12}) ==
        "dma_scatter t2 sp:64 row_bytes=12 -> arg0+0 rows=4 row_stride=12 <- int64 index sp:0 x1");
  // A scatter's rows are its source: an overlap with the indices is named so.
  CHECK(check(DmaGather{.token = 2, .wide_index = true, .scatter = true, .arg = 0, .index_sp = 0, .count = 2,
                        .sp_addr = 8, .row_bytes = 12, .offset = 0, .rows = 4, .row_stride = 12},
              kLimits)
            .value_or("")
            .starts_with("source [8, 32) overlaps the indices [0, 16)"));
  CHECK(disassemble(Matmul{.a = 0, .b = 64, .c = 128, .m = 8, .n = 8, .k = 8, .lda = 8, .ldb = 8, .ldc = 8,
                           .in = DType::fp16, .out = DType::fp32, .trans_b = true, .accumulate = true}) ==
        "matmul fp16->fp32 sp:0 x sp:64^T += sp:128  m=8 n=8 k=8 ld=8,8,8");
  ProgramBuilder b("tiny", 1);
  b.add(0, Nop{});
  const std::string text = disassemble(Program(b.build()));
  CHECK_THAT(text, ContainsSubstring("program 'tiny': 1 stream(s)"));
  CHECK_THAT(text, ContainsSubstring("      1  end"));
}

TEST_CASE("given strides or extents that do not fit 64 bits, check refuses them instead of wrapping") {
  // shape[0] 3 x stride 2^62 x 2 bytes = 2^64: the reach wrapped to 0 and passed before.
  DmaLoad d;
  d.dtype = DType::fp16;
  d.shape = {3, 1, 1};
  d.mem_stride = {std::int64_t{1} << 62, 0, 0};
  CHECK_THAT(check(d, kLimits).value_or(""), ContainsSubstring("device strides reach past 64 bits"));
  CHECK_FALSE(dma_footprint(d));
  // Negative strides overflow the low side the same way.
  d.mem_stride = {-(std::int64_t{1} << 62), 0, 0};
  CHECK_THAT(check(d, kLimits).value_or(""), ContainsSubstring("reach past 64 bits"));
  // Two reaches that fit alone but not together: (2^31-1) x 2^31 x 2 bytes, twice.
  d.shape = {1u << 31, 1u << 31, 1};
  d.mem_stride = {std::int64_t{1} << 31, std::int64_t{1} << 31, 0};
  CHECK_FALSE(dma_footprint(d));
  // A footprint that fits: 64 x 3 fp16 with rows 4096 apart, the middle one read backwards.
  d.shape = {64, 3, 1};
  d.mem_stride = {1, -2048, 0};
  const auto f = dma_footprint(d);
  REQUIRE(f);
  CHECK(f->lo == -2 * 2048 * 2);                 // the last row, 8192 bytes below
  CHECK(f->extent == 2 * 2048 * 2 + 64 * 2);     // down to it and one row across
  // A scratchpad extent past 64 bits: sp_stride[1] 2^32-1 x (shape[2]-1) 2^32-2 elements x 4 bytes.
  DmaStore s;
  s.dtype = DType::fp32;
  s.shape = {1, 1, 0xffffffffu};
  s.sp_stride = {1, 0xffffffffu};
  s.mem_stride = {1, 1, 1};
  CHECK_THAT(check(s, kLimits).value_or(""), ContainsSubstring("64 bits"));
  // A gather whose table (rows x row_stride) does not fit 64 bits.
  DmaGather g{.token = 0, .wide_index = false, .arg = 0, .index_sp = 0, .count = 1, .sp_addr = 64, .row_bytes = 4,
              .offset = 0, .rows = std::uint64_t{1} << 40, .row_stride = std::uint64_t{1} << 30};
  CHECK_THAT(check(g, kLimits).value_or(""), ContainsSubstring("reaches past 64 bits"));
}

TEST_CASE("given instructions, their scratchpad reads and writes are the byte ranges their operands span") {
  // C = A^T B, A stored k x m (16 x 8, ld 8), B k x n (16 x 4, ld 4), fp16; C fp32 8 x 4, ld 4, accumulating:
  // A spans 15 x 8 + 8 = 128 elements = 256 B, B 15 x 4 + 4 = 64 = 128 B, C 7 x 4 + 4 = 32 x 4 B = 128 B.
  const SpAccess mm = scratchpad_access(Matmul{.a = 0, .b = 1024, .c = 2048, .m = 8, .n = 4, .k = 16, .lda = 8,
                                               .ldb = 4, .ldc = 4, .in = DType::fp16, .out = DType::fp32,
                                               .trans_a = true, .accumulate = true});
  CHECK((mm.reads[0].lo == 0 && mm.reads[0].hi == 256));
  CHECK((mm.reads[1].lo == 1024 && mm.reads[1].hi == 1152));
  CHECK((mm.reads[2].lo == 2048 && mm.reads[2].hi == 2176));  // accumulate reads C
  CHECK((mm.write.lo == 2048 && mm.write.hi == 2176));
  // A row-broadcast add of 3 x 5 fp32: b is one row of 5 (20 B); the result 60 B.
  const SpAccess add = scratchpad_access(VBinary{.op = BinaryOp::add, .dtype = DType::fp32, .bcast = Broadcast::row,
                                                 .a = 100, .b = 400, .dst = 800, .rows = 3, .cols = 5});
  CHECK((add.reads[1].lo == 400 && add.reads[1].hi == 420));
  CHECK((add.write.lo == 800 && add.write.hi == 860));
  CHECK(add.write.overlaps(SpRange{859, 900}));
  CHECK_FALSE(add.write.overlaps(SpRange{860, 900}));
  // A load of 2 planes of 3 rows of 4 fp16 with scratchpad strides 8 and 32 elements:
  // (3 - 1) x 8 + (2 - 1) x 32 + 4 = 52 elements = 104 B written; it reads nothing there.
  DmaLoad load;
  load.dtype = DType::fp16;
  load.sp_addr = 64;
  load.shape = {4, 3, 2};
  load.sp_stride = {8, 32};
  const SpAccess l = scratchpad_access(load);
  CHECK((l.write.lo == 64 && l.write.hi == 168));
  CHECK(l.reads[0].empty());
  // Waits touch no scratchpad.
  const SpAccess w = scratchpad_access(Wait{.token_mask = 1});
  CHECK((w.write.empty() && w.reads[0].empty()));
}

TEST_CASE("given the vector cost classes, each has its own name and every vector op one class") {
  std::set<std::string_view> names;
  for (std::uint8_t i = 0; i < kNumVectorCosts; ++i) {
    const std::string_view name = to_string(static_cast<VectorCost>(i));
    CHECK(name != "cost?");
    CHECK(names.insert(name).second);
  }
  CHECK(to_string(static_cast<VectorCost>(kNumVectorCosts)) == "cost?");
  // A unary op is charged as its own class, but for the tanh approximation of gelu.
  for (std::uint8_t i = 0; i < kNumUnaryOps; ++i) {
    const auto op = static_cast<UnaryOp>(i);
    const std::string_view expected = op == UnaryOp::gelu_tanh ? "gelu" : to_string(op);
    CHECK(to_string(vector_cost(op)) == expected);
  }
  for (std::uint8_t i = 0; i < kNumBinaryOps; ++i) {
    const auto op = static_cast<BinaryOp>(i);
    CHECK(to_string(vector_cost(op)) == to_string(op));
  }
}
