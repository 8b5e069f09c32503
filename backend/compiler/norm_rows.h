// A LayerNorm or RMSNorm of a matrix's rows computed inside a matmul's kernel (a norm
// prologue: MatmulShape::Norm), as the norm kernel (compile_layer_norm) computes it, with
// the same fp32 operations in the same order. Shared by the kernels that take one
// (compile_matmul, compile_mlp): the statistics of rows loaded whole, and the
// normalisation of a panel's columns once the statistics are in.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

#include "compiler/dma.h"
#include "compiler/matmul.h"
#include "spyre/isa/program.h"

namespace spyre::compiler {

// A norm prologue's own checks, for rows of `dtype` (`what` names them in the message):
// float weight and bias; an RMSNorm without a bias and with a weight of the rows' dtype
// (its result is rounded to that dtype before the weight); eps >= 0.
inline void check_norm(const MatmulShape::Norm& nm, isa::DType dtype, const std::string& name, const char* what) {
  if ((nm.weight && !isa::is_float(*nm.weight)) || (nm.bias && !isa::is_float(*nm.bias))) {
    throw std::invalid_argument(name + ": a norm's weight and bias are floats");
  }
  if (nm.rms && (nm.bias || (nm.weight && *nm.weight != dtype))) {
    throw std::invalid_argument(name + ": an RMSNorm prologue takes no bias and a weight of " + what + "'s dtype (" +
                                std::string(isa::to_string(dtype)) + ")");
  }
  if (!(nm.eps >= 0)) throw std::invalid_argument(name + ": a norm's eps must be >= 0, got " + std::to_string(nm.eps));
}

struct NormRows {
  MatmulShape::Norm norm;
  isa::DType dtype = isa::DType::fp16;  // the rows' (A's)
  std::uint64_t k = 0;                  // values per row
  // Scratchpad: the fp32 mean and rstd (row i at + 4i), the weight and bias in fp32 (K
  // values each, when given), and an fp32 work buffer of `work_values` values (at least
  // one row).
  std::uint32_t mean = 0, rstd = 0, weight = 0, bias = 0, work = 0;
  std::uint64_t work_values = 0;

  // The weight and bias (arguments `arg`, then the next, each when given) loaded on
  // `token`, through `raw[q]` when not fp32, and converted to fp32; waits for them.
  void load_params(isa::ProgramBuilder& b, std::uint32_t stream, std::uint8_t token, std::uint16_t arg,
                   const std::uint32_t (&raw)[2]) const {
    const std::optional<isa::DType> params[2] = {norm.weight, norm.bias};
    const std::uint32_t fp32_at[2] = {weight, bias};
    const auto k32 = static_cast<std::uint32_t>(k);
    for (std::uint32_t q = 0; q < 2; ++q) {
      if (!params[q]) continue;
      b.add(stream, make_dma<isa::DmaLoad>(token, *params[q], arg++, 0,
                                           *params[q] == isa::DType::fp32 ? fp32_at[q] : raw[q], {k32, 1, 1},
                                           {1, k32, 0}));
    }
    b.add(stream, isa::Wait{.token_mask = static_cast<std::uint16_t>(1u << token)});
    for (std::uint32_t q = 0; q < 2; ++q) {
      if (params[q] && *params[q] != isa::DType::fp32) {
        b.add(stream, isa::VConvert{.from = *params[q], .to = isa::DType::fp32, .src = raw[q], .dst = fp32_at[q],
                                    .count = k32});
      }
    }
  }

  // The statistics of `rows` whole rows of K values at `raw` (A's dtype), into row
  // `stat_row` on: mean = sum / K, the centred values' (layer norm) or the values'
  // (RMSNorm) squares summed, rstd = rsqrt(sum / K + eps).
  void stats(isa::ProgramBuilder& b, std::uint32_t stream, std::uint32_t raw, std::uint32_t rows,
             std::uint32_t stat_row) const {
    const isa::DType f32 = isa::DType::fp32;
    const auto k32 = static_cast<std::uint32_t>(k);
    const auto scale = [&](std::uint32_t v, isa::BinaryOp op, double imm) {
      b.add(stream, isa::VBinary{.op = op, .dtype = f32, .bcast = isa::Broadcast::immediate, .a = v, .dst = v,
                                 .rows = 1, .cols = rows, .imm = imm});
    };
    const double inv_k = 1.0 / static_cast<double>(k);
    const std::uint32_t m = mean + stat_row * 4, r = rstd + stat_row * 4;
    std::uint32_t v = raw;
    if (dtype != f32) {
      b.add(stream, isa::VConvert{.from = dtype, .to = f32, .src = raw, .dst = work, .count = rows * k32});
      v = work;
    }
    if (!norm.rms) {
      b.add(stream, isa::VReduce{.op = isa::ReduceOp::sum, .in = f32, .out = f32, .axis = 1, .src = v, .dst = m,
                                 .rows = rows, .cols = k32});
      scale(m, isa::BinaryOp::mul, inv_k);
      b.add(stream, isa::VBinary{.op = isa::BinaryOp::sub, .dtype = f32, .bcast = isa::Broadcast::col, .a = v, .b = m,
                                 .dst = work, .rows = rows, .cols = k32});
      v = work;
    }
    b.add(stream, isa::VBinary{.op = isa::BinaryOp::mul, .dtype = f32, .a = v, .b = v, .dst = work, .rows = rows,
                               .cols = k32});
    b.add(stream, isa::VReduce{.op = isa::ReduceOp::sum, .in = f32, .out = f32, .axis = 1, .src = work, .dst = r,
                               .rows = rows, .cols = k32});
    scale(r, isa::BinaryOp::mul, inv_k);
    scale(r, isa::BinaryOp::add, norm.eps);
    b.add(stream, isa::VUnary{.op = isa::UnaryOp::rsqrt, .dtype = f32, .src = r, .dst = r, .count = rows});
  }

  // The statistics' exchange among `cores` cores (first_core, first_core + 1, ...) that
  // each computed some of them: core `self` sends its statistics rows (mean, then rstd,
  // of each run [lo, hi) that segments(self) lists) to every other, on `send_token`, then
  // receives theirs (segments(c) of core c, to the same rows) on `recv_token`.
  template <class Segments>
  void exchange(isa::ProgramBuilder& b, std::uint32_t stream, std::uint16_t first_core, std::uint32_t cores,
                std::uint32_t self, const Segments& segments, std::uint8_t send_token, std::uint8_t recv_token,
                std::uint16_t tag) const {
    for (const bool sending : {true, false}) {
      for (std::uint32_t c = 0; c < cores; ++c) {
        if (c == self) continue;
        const auto other = static_cast<std::uint16_t>(first_core + c);
        for (const auto& [lo, hi] : segments(sending ? self : c)) {
          if (hi == lo) continue;
          for (const std::uint32_t base : {mean, rstd}) {
            const auto at = static_cast<std::uint32_t>(base + lo * 4), bytes = static_cast<std::uint32_t>((hi - lo) * 4);
            if (sending) {
              b.add(stream, isa::RingSend{.token = send_token, .dst_core = other, .tag = tag, .sp_addr = at,
                                          .bytes = bytes});
            } else {
              b.add(stream, isa::RingRecv{.token = recv_token, .src_core = other, .tag = tag,
                                          .forward_to = isa::RingRecv::kNoForward, .sp_addr = at, .bytes = bytes});
            }
          }
        }
      }
    }
  }

  // Rows [0, rows) of a panel at `panel` (kk values each: A's columns k0 .. k0 + kk),
  // whose statistics start at row `stat_row`, normalised in place a few rows at a time
  // through the work buffer: (x - mean) x rstd (RMSNorm: x x rstd, rounded to A's dtype
  // when a weight follows), x weight, + bias, rounded once to A's dtype.
  void normalize(isa::ProgramBuilder& b, std::uint32_t stream, std::uint32_t panel, std::uint32_t rows,
                 std::uint32_t kk, std::uint64_t k0, std::uint32_t stat_row) const {
    const isa::DType f32 = isa::DType::fp32;
    const std::uint64_t size = isa::dtype_size(dtype);
    const auto per = static_cast<std::uint32_t>(std::max<std::uint64_t>(1, work_values / kk));
    for (std::uint32_t x = 0; x < rows; x += per) {
      const std::uint32_t n = std::min(per, rows - x), count = n * kk;
      const std::uint32_t at = panel + static_cast<std::uint32_t>(x * kk * size);
      const std::uint32_t m = mean + (stat_row + x) * 4, r = rstd + (stat_row + x) * 4;
      std::uint32_t v = at;
      if (dtype != f32) {
        b.add(stream, isa::VConvert{.from = dtype, .to = f32, .src = at, .dst = work, .count = count});
        v = work;
      }
      if (!norm.rms) {
        b.add(stream, isa::VBinary{.op = isa::BinaryOp::sub, .dtype = f32, .bcast = isa::Broadcast::col, .a = v,
                                   .b = m, .dst = work, .rows = n, .cols = kk});
        v = work;
      }
      b.add(stream, isa::VBinary{.op = isa::BinaryOp::mul, .dtype = f32, .bcast = isa::Broadcast::col, .a = v, .b = r,
                                 .dst = work, .rows = n, .cols = kk});
      if (norm.rms && norm.weight && dtype != f32) {  // rounded to the input's dtype before the weight
        b.add(stream, isa::VConvert{.from = f32, .to = dtype, .src = work, .dst = at, .count = count});
        b.add(stream, isa::VConvert{.from = dtype, .to = f32, .src = at, .dst = work, .count = count});
      }
      const auto k_at = static_cast<std::uint32_t>(k0 * 4);
      if (norm.weight) {
        b.add(stream, isa::VBinary{.op = isa::BinaryOp::mul, .dtype = f32, .bcast = isa::Broadcast::row, .a = work,
                                   .b = weight + k_at, .dst = work, .rows = n, .cols = kk});
      }
      if (norm.bias) {
        b.add(stream, isa::VBinary{.op = isa::BinaryOp::add, .dtype = f32, .bcast = isa::Broadcast::row, .a = work,
                                   .b = bias + k_at, .dst = work, .rows = n, .cols = kk});
      }
      if (dtype != f32) {
        b.add(stream, isa::VConvert{.from = f32, .to = dtype, .src = work, .dst = at, .count = count});
      } else {
        b.add(stream, isa::VUnary{.op = isa::UnaryOp::copy, .dtype = f32, .src = work, .dst = at, .count = count});
      }
    }
  }
};

}  // namespace spyre::compiler
