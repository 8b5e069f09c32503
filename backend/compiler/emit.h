// Pieces of code the matmul-shaped generators (compile_matmul, compile_mlp and
// compile_attention) share: a core's stream, panels passed along a chain of cores over
// the ring, the K-step product (and a gated pair's second one), and the epilogue's
// rounding and gating. Each writes the same instructions wherever it is used; what a
// generator does beyond them (its tiling, the order of its loads) stays its own.
#pragma once

#include <cstdint>

#include "compiler/dma.h"
#include "spyre/isa/isa.h"
#include "spyre/isa/program.h"

namespace spyre::compiler {

// One core's stream of the program being written.
struct CoreStream {
  isa::ProgramBuilder& builder;
  std::uint32_t stream = 0;
  void operator()(const isa::Instruction& inst) const { builder.add(stream, inst); }
};

// The first row of piece `part` when `rows` rows are cut into `pieces` nearly equal
// pieces (piece_row(rows, pieces, pieces) == rows): 10 rows in 4 pieces start at 0, 2,
// 5 and 7.
constexpr std::uint64_t piece_row(std::uint64_t rows, std::uint32_t part, std::uint32_t pieces) {
  return rows * part / pieces;
}

// Rows per piece when `rows` rows are cut into about `pieces` pieces of whole array
// folds (`fold` rows, the array's height): a piece's product then takes the same folds
// as it would inside the whole (rows 100, 4 pieces, fold 8: pieces of 32 rows).
constexpr std::uint64_t fold_piece_rows(std::uint64_t rows, std::uint64_t pieces, std::uint64_t fold) {
  return ((rows + pieces - 1) / pieces + fold - 1) / fold * fold;
}

// A core's place in a chain that passes a panel along the ring: the chain's first core
// has the panel in its scratchpad (loaded from DRAM) and sends it to the next; every
// other core receives it from the one before (`from`), forwarding it in the same
// transfer to the next (`to`; isa::RingRecv::kNoForward at the chain's end).
struct ChainLink {
  bool first = true;
  std::uint16_t from = isa::RingRecv::kNoForward, to = isa::RingRecv::kNoForward;
};

// A panel of `rows` rows of `row_bytes` at `sp` passed along the chain in `pieces` row
// pieces, each its own transfer on `token` with `tag`, so a core forwards one piece while
// the next is arriving (the pipeline's start-up skew along a chain of P cores is then
// about 1 / pieces of a whole panel's per hop). The first core sends each piece once
// `ready(part)` has written what that piece waits for (its DMA, say).
template <class Ready>
void pass_along(const CoreStream& st, const ChainLink& link, std::uint8_t token, std::uint16_t tag, std::uint32_t sp,
                std::uint64_t rows, std::uint64_t row_bytes, std::uint32_t pieces, const Ready& ready) {
  for (std::uint32_t part = 0; part < pieces; ++part) {
    const std::uint64_t r0 = piece_row(rows, part, pieces), r1 = piece_row(rows, part + 1, pieces);
    if (r1 == r0) continue;
    const auto at = static_cast<std::uint32_t>(sp + r0 * row_bytes);
    const auto bytes = static_cast<std::uint32_t>((r1 - r0) * row_bytes);
    if (link.first) {
      ready(part);
      if (link.to != isa::RingRecv::kNoForward) {
        st(isa::RingSend{.token = token, .dst_core = link.to, .tag = tag, .sp_addr = at, .bytes = bytes});
      }
    } else {
      st(isa::RingRecv{.token = token, .src_core = link.from, .tag = tag, .forward_to = link.to, .sp_addr = at,
                       .bytes = bytes});
    }
  }
}

// A K step's product, and for a gated pair (up_b != 0) the up projection's too: the
// same A panel times B's second half (at up_b) into the second accumulator (up_c).
inline void k_step(const CoreStream& st, isa::Matmul m, std::uint32_t up_b = 0, std::uint32_t up_c = 0) {
  st(m);
  if (up_b == 0) return;
  m.b = up_b;
  m.c = up_c;
  st(m);
}

// A finished result rounded once from the accumulator's dtype to `to` (or, keeping its
// dtype, copied when it moves; nothing when it stays where it is).
inline void round_to(const CoreStream& st, isa::DType from, isa::DType to, std::uint32_t src, std::uint32_t dst,
                     std::uint32_t count) {
  if (to != from) {
    st(isa::VConvert{.from = from, .to = to, .src = src, .dst = dst, .count = count});
  } else if (dst != src) {
    st(isa::VUnary{.op = isa::UnaryOp::copy, .dtype = to, .src = src, .dst = dst, .count = count});
  }
}

// A gated pair's result: the gate's product at `out` (activated, rounded to `to`) times
// the up projection's fp32 product at `up`, rounded to `to` first (at `rounded`) as the
// separate product would be: SwiGLU's silu(x W1^T) * (x W3^T) in the dtype the unfused
// ops compute it in.
inline void times_up(const CoreStream& st, isa::DType to, std::uint32_t out, std::uint32_t up, std::uint32_t rounded,
                     std::uint32_t rows, std::uint32_t cols) {
  if (to != isa::DType::fp32) {
    st(isa::VConvert{.from = isa::DType::fp32, .to = to, .src = up, .dst = rounded, .count = rows * cols});
    up = rounded;
  }
  st(isa::VBinary{.op = isa::BinaryOp::mul, .dtype = to, .a = out, .b = up, .dst = out, .rows = rows, .cols = cols});
}

}  // namespace spyre::compiler
