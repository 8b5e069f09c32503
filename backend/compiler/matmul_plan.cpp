// The matmul generator's checks and planning (compile_matmul's first half): what a shape
// may ask for, the scratchpad a tiling needs, and the cost model that picks the tiling.
#include "compiler/matmul_parts.h"

#include <algorithm>
#include <string>
#include <stdexcept>
#include <vector>

#include "compiler/does_not_fit.h"
#include "compiler/norm_rows.h"
#include "spyre/checked.h"

namespace spyre::compiler {
namespace {

using spyre::ceil_div;

// Scratchpad bytes: A and B panels double-buffered, rt accumulators of 4 bytes (fp32 or
// int32), and (one tile per core) a separate output buffer; with two tiles per core
// each accumulator is converted in place. A residual takes one tile of C's dtype per
// accumulator (loaded while the tile computes).
std::uint64_t footprint(std::uint64_t tm, std::uint64_t tn, std::uint64_t tk, std::uint64_t size, std::uint32_t rt = 1,
                        std::uint64_t bias_size = 0, std::uint64_t out_size = 0, bool scale = false,
                        bool residual = false, bool channel_scale = false) {
  if (out_size == 0) out_size = size;
  return 2 * (tm * tk + tk * tn) * size + rt * tm * tn * 4 + (rt == 1 ? tm * tn * out_size : 0) + (scale ? 8 : 0) +
         (bias_size > 0 ? tn * (4 + bias_size) + 4 : 0) +  // + padding that aligns the fp32 bias row
         (residual ? rt * tm * tn * out_size + 4 : 0) +    // + padding that aligns the residual tiles
         (channel_scale ? tn * 4 + 4 : 0);                 // + padding that aligns the fp32 row
}

// A norm prologue (MatmulShape::Norm): the bytes of one row of a statistics piece (whole
// rows of K values, loaded double-buffered and converted to fp32), and the scratchpad the
// prologue needs besides the matmul's with pieces of one row: the mean and rstd of up to
// two tiles' rows, the weight and bias in fp32 (+ padding that aligns them). The pieces
// take what the tiles leave, up to kNormStatsBytes: the tiling is the matmul's own.
std::uint64_t norm_footprint(const MatmulShape& s, std::uint64_t tm) {
  if (!s.norm) return 0;
  return norm_row_bytes(s) + 2 * 2 * tm * 4 + (s.norm->weight ? s.k * 4 : 0) + (s.norm->bias ? s.k * 4 : 0) + 8;
}

// A convolution's A must describe the matmul's m and k and stay inside its input.
void check_conv(const MatmulShape& s, const std::string& name) {
  const MatmulShape::ConvA& c = *s.conv;
  const auto str = [](std::uint64_t v) { return std::to_string(v); };
  for (const std::uint64_t v : {c.images, c.h, c.w, c.channels, c.group_channels, c.kh, c.kw, c.sh, c.sw, c.dh, c.dw,
                                c.ho, c.wo}) {
    if (v == 0) throw std::invalid_argument(name + ": a convolution's sizes, strides and dilations must be positive");
  }
  if (!s.b_pieces.empty() || s.gated) {
    throw std::invalid_argument(name + ": a convolution's A is its implicit im2col matrix, and B one matrix");
  }
  // A is pixels x taps; transposed (a weight gradient: taps x pixels), m and k swap.
  const std::uint64_t pixels = s.a_transposed ? s.k : s.m, taps = s.a_transposed ? s.m : s.k;
  if (pixels != c.images * c.ho * c.wo || taps != c.kh * c.kw * c.group_channels) {
    const char* mk = s.a_transposed ? "k" : "m";
    const char* km = s.a_transposed ? "m" : "k";
    throw std::invalid_argument(name + ": a convolution of " + str(c.images) + " images into " + str(c.ho) + "x" +
                                str(c.wo) + " pixels over " + str(c.kh) + "x" + str(c.kw) + " taps of " +
                                str(c.group_channels) + " channels is " + mk + " = " + str(c.images * c.ho * c.wo) +
                                ", " + km + " = " + str(c.kh * c.kw * c.group_channels) + "; got " + mk + " = " +
                                str(pixels) + ", " + km + " = " + str(taps));
  }
  const std::uint64_t last_y = (c.ho - 1) * c.sh + (c.kh - 1) * c.dh, last_x = (c.wo - 1) * c.sw + (c.kw - 1) * c.dw;
  if (last_y >= c.h || last_x >= c.w) {
    throw std::invalid_argument(name + ": the convolution reads input pixel (" + str(last_y) + ", " + str(last_x) +
                                ") of a " + str(c.h) + "x" + str(c.w) + " input (padding must be in the input)");
  }
  if ((s.batch - 1) * s.a_batch_stride + c.group_channels > c.channels) {
    throw std::invalid_argument(name + ": " + str(s.batch) + " groups of " + str(c.group_channels) + " channels, " +
                                str(s.a_batch_stride) + " apart, do not fit the input's " + str(c.channels) +
                                " channels");
  }
}

// Checks of the epilogue and of B's pieces (MatmulShape's comments): int8 takes none.
void check_epilogue(const MatmulShape& s, const std::string& name) {
  const isa::DType acc = s.accumulator(), out_t = s.out_dtype();
  if (acc == isa::DType::int32 && (s.bias || s.activation || s.scale || s.residual || out_t != isa::DType::int32)) {
    throw std::invalid_argument(name + ": " + std::string(isa::to_string(s.dtype)) +
                                " operands accumulate in int32 and produce int32, without an epilogue");
  }
  if (s.channel_scale && (!s.bias || acc != isa::DType::fp32)) {
    throw std::invalid_argument(name + ": a channel scale takes a float matmul with a bias (x scale + shift)");
  }
  if (s.residual && s.batch != 1) {
    throw std::invalid_argument(name + ": a residual epilogue takes an unbatched matmul, got a batch of " +
                                std::to_string(s.batch));
  }
  if (s.residual && s.residual_op != isa::BinaryOp::add && s.residual_op != isa::BinaryOp::mul) {
    throw std::invalid_argument(name + ": a residual is added or multiplied, got " +
                                std::string(isa::to_string(s.residual_op)));
  }
}

// B's pieces, a gated pair, the pitches given and a convolution's A.
void check_operands(const MatmulShape& s, const std::string& name) {
  const isa::DType acc = s.accumulator();
  if (!s.b_pieces.empty()) {
    std::uint64_t total = 0;
    for (const std::uint64_t w : s.b_pieces) {
      if (w == 0) throw std::invalid_argument(name + ": a B piece has no columns");
      total += w;
    }
    if (total != s.n && !s.gated) {
      throw std::invalid_argument(name + ": B's pieces are " + std::to_string(total) + " columns wide in all, n is " +
                                  std::to_string(s.n));
    }
    if (!s.b_transposed || s.batch != 1 || s.bias || s.scale || s.residual || (s.activation && !s.gated) ||
        acc != isa::DType::fp32) {
      throw std::invalid_argument(name + ": B in pieces takes transposed float pieces ([n_p x K] row-major), an "
                                  "unbatched matmul and no epilogue");
    }
    if (!s.b_piece_ld.empty() && s.b_piece_ld.size() != s.b_pieces.size()) {
      throw std::invalid_argument(name + ": " + std::to_string(s.b_piece_ld.size()) + " row pitches for " +
                                  std::to_string(s.b_pieces.size()) + " B pieces");
    }
    for (std::size_t p = 0; p < s.b_piece_ld.size(); ++p) {
      if (s.b_piece_ld[p] != 0 && s.b_piece_ld[p] < s.k) {
        throw std::invalid_argument(name + ": B piece " + std::to_string(p) + "'s row pitch " +
                                    std::to_string(s.b_piece_ld[p]) + " is shorter than K (" + std::to_string(s.k) + ")");
      }
    }
  }
  if (s.gated && (s.b_pieces.size() != 2 || s.b_pieces[0] != s.n || s.b_pieces[1] != s.n)) {
    throw std::invalid_argument(name + ": a gated pair takes B as two pieces of n = " + std::to_string(s.n) +
                                " columns (the gate's and the up projection's weights), got " +
                                std::to_string(s.b_pieces.size()) + " piece(s)");
  }
  if (s.residual && s.ldr != 0 && s.ldr < s.n) {
    throw std::invalid_argument(name + ": the residual's row pitch " + std::to_string(s.ldr) +
                                " is shorter than its rows (" + std::to_string(s.n) + ")");
  }
  if (s.ldc != 0 && s.ldc < s.n) {
    throw std::invalid_argument(name + ": C's row pitch " + std::to_string(s.ldc) + " is shorter than its rows (" +
                                std::to_string(s.n) + ")");
  }
  if (s.conv) check_conv(s, name);
}

}  // namespace

std::uint64_t norm_row_bytes(const MatmulShape& s) { return s.k * (2 * isa::dtype_size(s.dtype) + 4); }

std::uint64_t conv_positions_read(std::uint64_t in, std::uint64_t out, std::uint64_t taps, std::uint64_t stride,
                                  std::uint64_t dilation, std::uint64_t pad) {
  std::vector<bool> read(in, false);
  for (std::uint64_t o = 0; o < out; ++o) {
    for (std::uint64_t t = 0; t < taps; ++t) {
      const std::uint64_t at = o * stride + t * dilation;
      if (at >= pad && at - pad < in) read[at - pad] = true;
    }
  }
  return static_cast<std::uint64_t>(std::count(read.begin(), read.end(), true));
}

MatmulPlan plan_matmul(const MatmulShape& s, const Target& target) {
  const std::uint64_t size = isa::dtype_size(s.dtype), out_size = isa::dtype_size(s.out_dtype());
  const std::uint64_t bias_size = s.bias ? isa::dtype_size(*s.bias) : 0;
  MatmulPlan best;
  double best_time = -1;
  // A gated pair's tile is two tiles' B panels and accumulators (and its output buffer
  // two tiles' worth: C's tile and the up projection's rounded one, + alignment).
  const std::uint64_t pair = s.gated ? 2 : 1;
  for (const std::uint32_t rt : {1u, 2u}) {
    if (s.gated && rt == 2) continue;
    for (const std::uint64_t t : {256ull, 128ull, 64ull, 32ull, 16ull, 8ull}) {
      const std::uint64_t tm = std::min(t, s.m), tn = std::min(t, s.n);
      const std::uint64_t tiles_m = ceil_div(s.m, tm), tiles_n = ceil_div(s.n, tn);
      if (rt == 2 && tiles_m < 2) continue;
      // The longest K chunk that fits, for the fewest fill/drain cycles per fold; chunks
      // beyond 512 (a bigger scratchpad than the default chip's) only for blocks of at
      // least 256 x 256 (compute-bound: the fold overhead is what they save) and while K
      // still takes at least kRotateSteps of them, so loads keep overlapping compute.
      // (4096^3 on configs/whatif-big-scratchpad.yaml: 1710.7 us against 1891.5 us.)
      std::uint64_t tk = 0;
      for (const std::uint64_t c : {1024ull, 512ull, 256ull, 128ull, 64ull, 32ull, 16ull, 8ull}) {
        if (c > 512 && (ceil_div(s.k, c) < kRotateSteps || rt * tm * tn < 256 * 256)) continue;
        if (footprint(tm, pair * tn, std::min(c, s.k), size, rt, bias_size, out_size, s.scale, s.residual,
                      s.channel_scale) +
                (s.gated ? 4 : 0) + norm_footprint(s, tm) <=
            target.scratchpad_bytes) {
          tk = std::min(c, s.k);
          break;
        }
      }
      if (tk == 0) continue;
      const std::uint64_t row_blocks = ceil_div(tiles_m, rt);  // M in blocks of rt tiles
      const auto cores = std::max<std::uint32_t>(1, target.cores);
      for (std::uint32_t gr = 1; gr <= std::min<std::uint64_t>(cores, row_blocks); ++gr) {
        for (std::uint32_t gc = 1; gc <= std::min<std::uint64_t>(cores / gr, tiles_n); ++gc) {
          const std::uint32_t groups = cores / (gr * gc);
          const std::uint64_t sb = s.batch * ceil_div(row_blocks, gr) * ceil_div(tiles_n, gc);
          const std::uint64_t waves = ceil_div(sb, groups);
          // Per wave every core multiplies rt tm x tn tiles over K; the systolic array's
          // fill and drain (R + C - 2 cycles per fold, the target's array) against
          // ceil(tk / depth) cycles of streaming makes short K chunks slower (e.g. an
          // 8 x 8 array of fp16 depth 8: 14 cycles against ceil(tk / 8)).
          const double stream = static_cast<double>(ceil_div(tk, target.depth(s.dtype)));
          const double fill = static_cast<double>(target.array_rows + target.array_cols >= 2
                                                      ? target.array_rows + target.array_cols - 2
                                                      : 0);
          const double compute = static_cast<double>(waves * rt * tm * pair * tn * s.k) * (stream + fill) / stream;
          // Two tiles a K step apart load each block's first B panel twice.
          const std::uint64_t b_extra = rt == 2 && ceil_div(s.k, tk) >= kRotateSteps ? tk : 0;
          const std::uint64_t read = sb * (std::min<std::uint64_t>(gr * rt * tm, s.m) * s.k +
                                           pair * std::min<std::uint64_t>(gc * tn, s.n) * (s.k + b_extra)) * size;
          const std::uint64_t residual_read = s.residual ? s.batch * s.m * s.n * out_size : 0;
          const std::uint64_t written = s.batch * s.m * s.n * out_size;
          double time = compute;
          const double macs_per_s = target.macs_per_s(s.dtype);  // the operands' rate, not always fp16's
          if (macs_per_s > 0 && target.dram_bytes_per_s > 0) {
            // Overlap is never perfect: charge a part of the shorter of the two as well,
            // so among compute-bound plans the one moving fewer bytes wins. In-place
            // accumulators (rt 2) wait for their stores between waves.
            const double c = compute / macs_per_s;
            const double d = target.dram_s(static_cast<double>(read + residual_read), static_cast<double>(written));
            const double stall = rt == 2 ? static_cast<double>((waves - 1) * std::min<std::uint64_t>(groups, sb) * gr *
                                                               gc * tm * tn * out_size) / target.dram_bytes_per_s
                                         : 0.0;
            time = std::max(c, d) + 0.15 * std::min(c, d) + stall;
          }
          if (best_time < 0 || time < best_time * 0.999) {
            best_time = time;
            best = MatmulPlan{tm, tn, tk, rt, gr, gc, groups, sb, read, macs_per_s > 0 && target.dram_bytes_per_s > 0 ? time : 0};
          }
        }
      }
    }
  }
  return best;
}

MatmulPlan plan_to_compile(const MatmulShape& s, const Target& target, const std::string& name) {
  check_epilogue(s, name);
  check_operands(s, name);
  if (s.norm) {
    const isa::DType acc = s.accumulator();
    if (s.conv || s.a_transposed || s.batch != 1 || acc != isa::DType::fp32) {
      throw std::invalid_argument(name + ": a norm prologue takes a float, row-major A of one batch (not transposed, "
                                         "not a convolution)");
    }
    check_norm(*s.norm, s.dtype, name, "A");
  }
  const MatmulPlan p = plan_matmul(s, target);
  if (s.norm && p.tm != 0) {
    // The prologue takes only the scratchpad the matmul's own tiling leaves: a smaller
    // tiling to make room would cost the matmul more than the norm's pass it saves.
    MatmulShape plain = s;
    plain.norm.reset();
    const MatmulPlan own = plan_matmul(plain, target);
    if (own.tm != p.tm || own.tn != p.tn || own.tk != p.tk || own.rows_per_core != p.rows_per_core ||
        own.grid_rows != p.grid_rows || own.grid_cols != p.grid_cols || own.groups != p.groups) {
      throw DoesNotFit(name + ": a norm prologue's buffers (" + std::to_string(norm_footprint(s, p.tm)) +
                       " bytes) do not fit beside the matmul's own tiling (" + std::to_string(own.tm) + "x" +
                       std::to_string(own.tn) + "x" + std::to_string(own.tk) + ")");
    }
  }
  if (p.tm == 0) {
    throw DoesNotFit(name + " " + std::to_string(s.m) + "x" + std::to_string(s.n) + "x" +
                                std::to_string(s.k) + ": the smallest tiling needs " +
                                std::to_string(footprint(std::min<std::uint64_t>(8, s.m), std::min<std::uint64_t>(8, s.n),
                                                         std::min<std::uint64_t>(8, s.k), isa::dtype_size(s.dtype))) +
                                " bytes of scratchpad, the device has " + std::to_string(target.scratchpad_bytes));
  }
  return p;
}

}  // namespace spyre::compiler
