#include "compiler/matmul.h"
#include "compiler/does_not_fit.h"
#include "spyre/checked.h"

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <string>
#include <stdexcept>

#include "compiler/dma.h"
#include "compiler/norm_rows.h"
#include "spyre/isa/program.h"

namespace spyre::compiler {
namespace {

using spyre::ceil_div;

// A 2-D DMA: `rows` rows of `cols` elements, rows `row_stride` elements apart.
template <class T>
T dma(std::uint8_t token, isa::DType dtype, std::uint16_t arg, std::uint64_t element_offset, std::uint32_t sp,
      std::uint32_t cols, std::uint32_t rows, std::int64_t row_stride) {
  return make_dma<T>(token, dtype, arg, element_offset * isa::dtype_size(dtype), sp, {cols, rows, 1},
                     {1, row_stride, 0});
}

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
std::uint64_t norm_row_bytes(const MatmulShape& s) { return s.k * (2 * isa::dtype_size(s.dtype) + 4); }
std::uint64_t norm_footprint(const MatmulShape& s, std::uint64_t tm) {
  if (!s.norm) return 0;
  return norm_row_bytes(s) + 2 * 2 * tm * 4 + (s.norm->weight ? s.k * 4 : 0) + (s.norm->bias ? s.k * 4 : 0) + 8;
}

constexpr std::uint32_t kParts = kPanelPieces;
// Token numbers: DMA loads of A / B pieces into slot s, ring transfers of A / B out of
// slot s, the store of C.
constexpr std::uint8_t kDmaA = 0, kDmaB = 4, kRingA = 8, kRingB = 10, kStore = 12;  // store of C[r]: 12 + r
constexpr std::uint8_t kBias = 14;      // the epilogue's bias row
constexpr std::uint8_t kResidual = 15;  // the epilogue's residual tiles
constexpr std::uint16_t kAllTokens = 0xffff;
// Row pieces of a core's last matmul (see compile_matmul).
constexpr std::uint32_t kTailPieces = 4;
std::uint8_t dma_token(std::uint8_t base, std::uint32_t slot, std::uint32_t part) {
  return static_cast<std::uint8_t>(base + slot * kParts + part);
}

// A panel in the scratchpad: `rows` rows of `cols` elements, row r of which comes
// from element offset first + r * ld of the operand.
// A B panel of a pieced B (MatmulShape::b_pieces) gives instead its first row's index in
// B's rows (transposed: its columns) and its K offset; its rows may come from several
// pieces.
// A convolution's A panel (MatmulShape::conv) gives its first row's index in A (an
// output pixel), its K offset, and in `first` the batch's (group's) first channel.
struct Panel {
  std::uint32_t cols = 0, rows = 0;
  std::uint64_t first = 0, ld = 0;
  bool pieced = false;
  std::uint64_t row0 = 0, k0 = 0;
  bool conv = false;
  std::uint32_t row_start(std::uint32_t part) const { return rows * part / kParts; }
};

// The DMAs that gather rows [p0, p0 + count) and columns [k0, k0 + kk) of a
// convolution's implicit A (MatmulShape::ConvA) into a panel at `sp` with row pitch kk,
// `channel0` being the group's first channel. A[p][k] is at element
//   pixel(p) + tap(k) + channel0, pixel(p) = ((image * h + oy * sh) * w + ox * sw) * channels,
//   tap(k) = (ky * dh * w + kx * dw) * channels + c,
// so a run of K whose taps are adjacent in memory (a tap row when dw is 1 and the group
// is every channel, else one tap) by a run of pixels along one output row (sw *
// channels apart) is one 2-D DMA, and by whole output rows of one image (sh * w *
// channels apart) one 3-D DMA (or 2-D, when the rows are evenly spaced too).
template <class Emit>
void conv_panel(const MatmulShape::ConvA& c, std::uint64_t channel0, std::uint64_t p0, std::uint64_t count,
                std::uint64_t k0, std::uint32_t kk, std::uint32_t sp, std::uint64_t size, const Emit& emit) {
  const std::uint64_t gc = c.group_channels, tap_row = c.kw * gc;
  const std::uint64_t run_k = c.dw == 1 && gc == c.channels ? tap_row : gc;
  const std::uint64_t plane = c.ho * c.wo;
  // Output rows sh * w pixels apart in the input that are wo * sw apart (a 1x1
  // convolution of stride 1 and no padding, say): an image's pixels are evenly spaced,
  // a run takes the rest of the image; and when the images are too, the rest of A.
  const bool rows_even = c.sh * c.w == c.wo * c.sw, images_even = rows_even && c.h * c.w == plane * c.sw;
  for (std::uint64_t k = k0; k < k0 + kk;) {
    const std::uint64_t ky = k / tap_row, kx = (k % tap_row) / gc, ch = k % gc;
    const std::uint64_t end = std::min<std::uint64_t>(k0 + kk, (k / run_k + 1) * run_k);
    const std::uint64_t tap = (ky * c.dh * c.w + kx * c.dw) * c.channels + ch + channel0;
    const auto len = static_cast<std::uint32_t>(end - k);
    for (std::uint64_t p = p0; p < p0 + count;) {
      const std::uint64_t image = p / plane, oy = (p % plane) / c.wo, ox = p % c.wo, left = p0 + count - p;
      const std::uint64_t pixel = ((image * c.h + oy * c.sh) * c.w + ox * c.sw) * c.channels;
      isa::DmaLoad d;
      d.offset = (pixel + tap) * size;
      d.sp_addr = sp + static_cast<std::uint32_t>(((p - p0) * kk + (k - k0)) * size);
      d.mem_stride = {1, static_cast<std::int64_t>(c.sw * c.channels), static_cast<std::int64_t>(c.sh * c.w * c.channels)};
      std::uint64_t x = std::min(c.wo - ox, left), y = 1;
      if (images_even) {
        x = left;
      } else if (rows_even) {
        x = std::min(left, plane - p % plane);
      } else if (ox == 0 && left >= c.wo) {
        x = c.wo, y = std::min(left / c.wo, c.ho - oy);
      }
      d.shape = {len, static_cast<std::uint32_t>(x), static_cast<std::uint32_t>(y)};
      d.sp_stride = {kk, static_cast<std::uint32_t>(kk * x)};
      emit(d);
      p += x * y;
    }
    k = end;
  }
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

}  // namespace

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

std::vector<std::uint8_t> compile_matmul(const MatmulShape& s, const Target& target, const std::string& name) {
  const std::uint64_t size = isa::dtype_size(s.dtype);
  const isa::DType acc = s.accumulator(), out_t = s.out_dtype();
  const std::uint64_t out_size = isa::dtype_size(out_t);
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
  if (s.norm) {
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
                                                         std::min<std::uint64_t>(8, s.k), size)) +
                                " bytes of scratchpad, the device has " + std::to_string(target.scratchpad_bytes));
  }
  const std::uint32_t rt = p.rows_per_core;
  const auto a_bytes = static_cast<std::uint32_t>(p.tm * p.tk * size);
  const std::uint64_t pair = s.gated ? 2 : 1;  // B panels and accumulators per tile
  const auto b_bytes = static_cast<std::uint32_t>(pair * p.tk * p.tn * size);
  const auto c_bytes = static_cast<std::uint32_t>(p.tm * p.tn * 4);
  const std::uint32_t sp_a[2] = {0, a_bytes}, sp_b[2] = {2 * a_bytes, 2 * a_bytes + b_bytes};
  const std::uint32_t sp_c[2] = {2 * a_bytes + 2 * b_bytes, 2 * a_bytes + 2 * b_bytes + c_bytes};
  // One tile per core: the result is converted into its own buffer, so the next
  // tile's first matmul need not wait for the store. Two: in place.
  // (A gated pair's up accumulator is sp_c[1].)
  const std::uint32_t sp_o = rt == 1 ? sp_c[0] + static_cast<std::uint32_t>(pair) * c_bytes : 0;
  // The epilogue's bias row: as loaded, then in fp32.
  // (fp32, so 4-byte aligned: an fp16/bf16 output buffer of odd tm x tn ends at 2 mod 4.)
  const std::uint32_t after =
      ((rt == 1 ? sp_o + static_cast<std::uint32_t>(p.tm * p.tn * out_size) : sp_c[1] + c_bytes) + 3u) & ~3u;
  const std::uint32_t sp_bias = after, sp_bias_raw = after + (s.bias ? static_cast<std::uint32_t>(p.tn * 4) : 0u);
  // The channel scale row (fp32) after the bias row as loaded, then the scale (one fp32
  // value), each 4-byte aligned.
  const std::uint32_t sp_channel_scale =
      (sp_bias_raw + static_cast<std::uint32_t>(s.bias ? p.tn * isa::dtype_size(*s.bias) : 0) + 3u) & ~3u;
  const std::uint32_t sp_scale = sp_channel_scale + (s.channel_scale ? static_cast<std::uint32_t>(p.tn * 4) : 0u);
  const std::uint16_t channel_scale_arg = 4;
  const auto scale_arg = static_cast<std::uint16_t>(3 + (s.bias ? 1 : 0) + (s.channel_scale ? 1 : 0));
  // The residual tiles (one per accumulator) after the scale, 4-byte aligned; or a
  // gated pair's up projection, rounded.
  const std::uint32_t sp_residual = (sp_scale + (s.scale ? 4u : 0u) + 3u) & ~3u;
  const auto residual_bytes = static_cast<std::uint32_t>(p.tm * p.tn * out_size);
  const auto residual_arg = static_cast<std::uint16_t>(scale_arg + (s.scale ? 1 : 0));
  const std::uint64_t ldr = s.ldr != 0 ? s.ldr : s.n;
  const std::uint64_t ldc = s.ldc != 0 ? s.ldc : s.n, c_batch = s.c_batch_stride != 0 ? s.c_batch_stride : s.m * s.n;
  // A norm prologue's buffers after everything else, 4-byte aligned: the mean and rstd
  // of up to two tiles' rows, the weight and the bias in fp32, a statistics piece in
  // fp32 (also the fp32 copy of the panel rows being normalised), and the piece's two
  // load buffers (norm_footprint).
  const std::uint32_t layout_end =
      sp_residual + (s.residual ? rt * residual_bytes : s.gated ? residual_bytes : 0u);
  const auto k32 = static_cast<std::uint32_t>(s.k);
  const std::uint32_t sp_mean = (layout_end + 3u) & ~3u, sp_rstd = sp_mean + static_cast<std::uint32_t>(2 * p.tm * 4);
  const std::uint32_t sp_nw = sp_rstd + static_cast<std::uint32_t>(2 * p.tm * 4);
  const std::uint32_t sp_nb = sp_nw + (s.norm && s.norm->weight ? k32 * 4 : 0u);
  const std::uint32_t sp_nf = sp_nb + (s.norm && s.norm->bias ? k32 * 4 : 0u);
  const std::uint64_t nrows =
      s.norm ? std::clamp<std::uint64_t>(
                   std::min<std::uint64_t>(kNormStatsBytes, target.scratchpad_bytes - std::min<std::uint64_t>(
                                                                                          sp_nf, target.scratchpad_bytes)) /
                       norm_row_bytes(s),
                   1, p.tm)
             : 0;
  const std::uint32_t sp_nraw[2] = {sp_nf + static_cast<std::uint32_t>(nrows * s.k * 4),
                                    sp_nf + static_cast<std::uint32_t>(nrows * s.k * (4 + size))};
  const auto norm_arg = static_cast<std::uint16_t>(3 + (s.bias ? 1 : 0) + (s.channel_scale ? 1 : 0) +
                                                   (s.scale ? 1 : 0) + (s.residual ? 1 : 0) +
                                                   (s.b_pieces.empty() ? 0 : s.b_pieces.size() - 1));
  const NormRows nr{s.norm.value_or(MatmulShape::Norm{}), s.dtype, s.k, sp_mean, sp_rstd, sp_nw, sp_nb, sp_nf,
                    nrows * s.k};

  const std::uint64_t tiles_m = ceil_div(s.m, p.tm), tiles_n = ceil_div(s.n, p.tn);
  const std::uint64_t row_blocks = ceil_div(tiles_m, rt);
  const std::uint64_t sb_m = ceil_div(row_blocks, p.grid_rows), sb_n = ceil_div(tiles_n, p.grid_cols);
  const std::uint32_t group_size = p.grid_rows * p.grid_cols;
  const std::uint32_t streams = group_size * static_cast<std::uint32_t>(std::min<std::uint64_t>(p.groups, p.super_blocks));
  // Row pitches of the stored matrices (elements): given, or dense.
  const std::uint64_t a_ld = s.lda != 0 ? s.lda : s.a_transposed ? s.m : s.k;
  const std::uint64_t b_ld = s.ldb != 0 ? s.ldb : s.b_transposed ? s.k : s.n;
  // A pieced B: each piece's first column of B, argument and row pitch.
  std::vector<std::uint64_t> piece_start;
  for (std::size_t q = 0, at = 0; q < s.b_pieces.size(); at += s.b_pieces[q++]) piece_start.push_back(at);
  const auto piece_arg = [](std::size_t q) { return static_cast<std::uint16_t>(q == 0 ? 1 : 2 + q); };
  const auto piece_ld = [&](std::size_t q) {
    return q < s.b_piece_ld.size() && s.b_piece_ld[q] != 0 ? s.b_piece_ld[q] : s.k;
  };
  isa::ProgramBuilder b(name, streams);
  // A block of one core: rt tiles stacked along M sharing their B panels; where its
  // panels come from (DRAM or a neighbour's ring message) and where it passes them on.
  static constexpr std::uint16_t kNone = isa::RingRecv::kNoForward;
  struct Tile {
    std::uint64_t batch = 0, j0 = 0;
    std::uint64_t i0[2] = {0, 0};
    std::uint32_t m[2] = {0, 0}, n = 0;
    std::uint32_t rows = 1;  // tiles of the block inside the matrix (1 or 2)
    // The second tile runs a K step behind the first (see the phases below). Decided
    // per super-block: B panels travel down grid columns, so every core of a column
    // must take the same number of them.
    bool offset = false;
    bool a_loader = false, b_loader = false;
    std::uint16_t a_from = kNone, a_to = kNone, b_from = kNone, b_to = kNone;
    // A norm prologue: whether the block's rows differ from the group's previous
    // super-block's (their statistics are then taken), the cores of this grid row in this
    // super-block (the first of them, this core's place among them, their number).
    bool new_rows = true;
    std::uint16_t row_first = 0;
    std::uint32_t row_place = 0, row_cores = 1;
  };
  // K steps of tk (a short first or last step, to start computing sooner or finish
  // sooner, measured slower: 2048^3 326 and 318 us against 314 us).
  std::vector<std::pair<std::uint64_t, std::uint32_t>> chunks;
  for (std::uint64_t k0 = 0; k0 < s.k; k0 += p.tk) {
    chunks.emplace_back(k0, static_cast<std::uint32_t>(std::min(p.tk, s.k - k0)));
  }
  const std::uint64_t steps = chunks.size();
  for (std::uint32_t stream = 0; stream < streams; ++stream) {
    const std::uint32_t group = stream / group_size, i = (stream % group_size) / p.grid_cols,
                        j = stream % p.grid_cols;
    const auto at = [&](std::uint32_t r, std::uint32_t c) {
      return static_cast<std::uint16_t>(group * group_size + r * p.grid_cols + c);
    };
    // This core's blocks, one per super-block of its group that reaches it.
    std::vector<Tile> tiles;
    for (std::uint64_t sb = group; sb < p.super_blocks; sb += p.groups) {
      const std::uint64_t si = (sb / sb_n) % sb_m, sj = sb % sb_n;
      const auto rows = static_cast<std::uint32_t>(std::min<std::uint64_t>(p.grid_rows, row_blocks - si * p.grid_rows));
      const auto cols = static_cast<std::uint32_t>(std::min<std::uint64_t>(p.grid_cols, tiles_n - sj * p.grid_cols));
      if (i >= rows || j >= cols) continue;  // this super-block's edge: no tile here
      Tile t;
      t.batch = sb / (sb_m * sb_n);
      const std::uint64_t first_tile_row = (si * p.grid_rows + i) * rt;
      t.rows = static_cast<std::uint32_t>(std::min<std::uint64_t>(rt, tiles_m - first_tile_row));
      const std::uint64_t last_row_block = si * p.grid_rows + rows - 1;  // of this super-block
      t.offset = rt == 2 && tiles_m - last_row_block * rt >= 2 && steps >= kRotateSteps;
      for (std::uint32_t r = 0; r < t.rows; ++r) {
        t.i0[r] = (first_tile_row + r) * p.tm;
        t.m[r] = static_cast<std::uint32_t>(std::min(p.tm, s.m - t.i0[r]));
      }
      t.j0 = (sj * p.grid_cols + j) * p.tn;
      t.n = static_cast<std::uint32_t>(std::min(p.tn, s.n - t.j0));
      // A travels left to right along a grid row (adjacent cores on the ring), B down a
      // grid column. (Sending B up on every other column, to use both directions of
      // the links between grid rows, measured slower: 2048^3 364 us against 310 us;
      // so did column-major grids, 341 us.)
      t.a_loader = j == 0;
      t.a_from = j > 0 ? at(i, j - 1) : kNone;
      t.a_to = j + 1 < cols ? at(i, j + 1) : kNone;
      t.b_loader = i == 0;
      t.b_from = i > 0 ? at(i - 1, j) : kNone;
      t.b_to = i + 1 < rows ? at(i + 1, j) : kNone;
      if (sb >= group + p.groups) {
        const std::uint64_t prev = sb - p.groups;
        t.new_rows = (prev / sb_n) % sb_m != si || prev / (sb_m * sb_n) != t.batch;
      }
      t.row_first = at(i, 0);
      t.row_place = j;
      t.row_cores = cols;
      tiles.push_back(t);
    }
    // The A and B panels of a block's K step, as stored in the scratchpad.
    const auto a_panel = [&](const Tile& t, std::uint64_t step, std::uint32_t r) {
      const auto [k0, k] = chunks[step];
      const std::uint64_t base = t.batch * s.a_batch_stride;
      if (s.conv) {  // rows are pixels, columns taps: A's (or, transposed, A^T's K and M)
        return s.a_transposed ? Panel{t.m[r], k, base, 0, false, k0, t.i0[r], true}
                              : Panel{k, t.m[r], base, 0, false, t.i0[r], k0, true};
      }
      return s.a_transposed ? Panel{t.m[r], k, base + k0 * a_ld + t.i0[r], a_ld}
                            : Panel{k, t.m[r], base + t.i0[r] * a_ld + k0, a_ld};
    };
    const auto b_panel = [&](const Tile& t, std::uint64_t step) {
      const auto [k0, k] = chunks[step];
      const std::uint64_t base = t.batch * s.b_batch_stride;
      if (!s.b_pieces.empty()) return Panel{k, static_cast<std::uint32_t>(pair * t.n), 0, 0, true, t.j0, k0};
      return s.b_transposed ? Panel{k, t.n, base + t.j0 * b_ld + k0, b_ld} : Panel{t.n, k, base + k0 * b_ld + t.j0, b_ld};
    };
    // A loader's DMAs of a panel into `slot`, in pieces, once the slot's last ring
    // transfer (which reads it) is done.
    const auto load = [&](const Panel& pn, std::uint8_t dma_base, std::uint8_t ring_base, std::uint16_t arg,
                          std::uint32_t sp, std::uint32_t slot) {
      b.add(stream, wait_on(ring_base + slot));
      for (std::uint32_t part = 0; part < kParts; ++part) {
        const std::uint32_t r0 = pn.row_start(part), r1 = pn.row_start(part + 1);
        if (r1 == r0) continue;
        if (pn.conv) {
          conv_panel(*s.conv, pn.first, pn.row0 + r0, r1 - r0, pn.k0, pn.cols,
                     sp + static_cast<std::uint32_t>(r0 * pn.cols * size), size, [&](isa::DmaLoad d) {
                       d.token = dma_token(dma_base, slot, part);
                       d.dtype = s.dtype;
                       d.arg = arg;
                       b.add(stream, d);
                     });
          continue;
        }
        if (!pn.pieced) {
          b.add(stream, dma<isa::DmaLoad>(dma_token(dma_base, slot, part), s.dtype, arg, pn.first + r0 * pn.ld,
                                          sp + static_cast<std::uint32_t>(r0 * pn.cols * size), pn.cols, r1 - r0,
                                          static_cast<std::int64_t>(pn.ld)));
          continue;
        }
        // A pieced B panel: one DMA per piece its rows cross, on the part's token.
        for (std::uint32_t r = r0; r < r1;) {
          // A gated pair's panel: the gate's rows j0.., then the up projection's.
          const std::uint32_t half = pn.rows / 2;
          std::size_t q = 0;
          std::uint64_t row = 0;
          std::uint32_t end = 0;
          if (s.gated) {
            q = r < half ? 0 : 1;
            row = pn.row0 + r - q * half;
            end = q == 0 ? std::min(r1, half) : r1;
          } else {
            const std::uint64_t column = pn.row0 + r;  // of B (its transpose's row)
            q = static_cast<std::size_t>(std::upper_bound(piece_start.begin(), piece_start.end(), column) -
                                         piece_start.begin() - 1);
            row = column - piece_start[q];
            end = static_cast<std::uint32_t>(std::min<std::uint64_t>(r1, piece_start[q] + s.b_pieces[q] - pn.row0));
          }
          b.add(stream, dma<isa::DmaLoad>(dma_token(dma_base, slot, part), s.dtype, piece_arg(q),
                                          row * piece_ld(q) + pn.k0,
                                          sp + static_cast<std::uint32_t>(r * pn.cols * size), pn.cols, end - r,
                                          static_cast<std::int64_t>(piece_ld(q))));
          r = end;
        }
      }
    };
    // A norm prologue: the statistics of a block's rows, shared out over the cores of its
    // grid row: each takes its share of each tile's rows in pieces of whole rows loaded
    // double-buffered (on the bias's and, without a residual, the residual's token), with
    // the norm kernel's operations (compile_layer_norm): mean = sum / K, the centred
    // values' (layer norm) or the values' (RMSNorm) squares summed, rstd = rsqrt(sum / K
    // + eps). Row i of the block's tile r has its mean and rstd at (r * tm + i) * 4.
    static constexpr std::uint16_t kStatsTag = 2;
    // The share of tile r's rows of a block that its grid row's core c takes: [lo, hi).
    const auto share = [](const Tile& t, std::uint32_t r, std::uint32_t c) {
      return std::pair<std::uint32_t, std::uint32_t>{t.m[r] * c / t.row_cores, t.m[r] * (c + 1) / t.row_cores};
    };
    const auto norm_stats = [&](const Tile& t) {
      const std::uint8_t token[2] = {kBias, s.residual ? kBias : kResidual};
      struct Piece {
        std::uint32_t r, q, rows;
      };
      std::vector<Piece> pieces;
      for (std::uint32_t r = 0; r < t.rows; ++r) {
        const auto [lo, hi] = share(t, r, t.row_place);
        for (std::uint32_t q = lo; q < hi; q += static_cast<std::uint32_t>(nrows)) {
          pieces.push_back({r, q, static_cast<std::uint32_t>(std::min<std::uint64_t>(nrows, hi - q))});
        }
      }
      const auto issue = [&](std::size_t x) {
        if (x >= pieces.size()) return;
        b.add(stream, dma<isa::DmaLoad>(token[x % 2], s.dtype, 0, (t.i0[pieces[x].r] + pieces[x].q) * a_ld,
                                        sp_nraw[x % 2], k32, pieces[x].rows, static_cast<std::int64_t>(a_ld)));
      };
      issue(0);
      for (std::size_t x = 0; x < pieces.size(); ++x) {
        issue(x + 1);
        b.add(stream, wait_on(token[x % 2]));
        const Piece& pc = pieces[x];
        nr.stats(b, stream, sp_nraw[x % 2], pc.rows, static_cast<std::uint32_t>(pc.r * p.tm + pc.q));
      }
    };
    // Every core of the grid row sends its share (mean, then rstd, of each tile's share) to
    // every other, and waits for theirs before it normalises its next panel.
    bool stats_wait = false;
    const auto norm_exchange = [&](const Tile& t) {
      for (const bool sending : {true, false}) {
        for (std::uint32_t c = 0; c < t.row_cores; ++c) {
          if (c == t.row_place) continue;
          const auto other = static_cast<std::uint16_t>(t.row_first + c);
          for (std::uint32_t r = 0; r < t.rows; ++r) {
            const auto [lo, hi] = share(t, r, sending ? t.row_place : c);
            if (hi == lo) continue;
            for (const std::uint32_t base : {sp_mean, sp_rstd}) {
              const std::uint32_t at_sp = base + static_cast<std::uint32_t>((r * p.tm + lo) * 4), bytes = (hi - lo) * 4;
              if (sending) {
                b.add(stream, isa::RingSend{.token = s.residual ? kBias : kResidual, .dst_core = other,
                                            .tag = kStatsTag, .sp_addr = at_sp, .bytes = bytes});
              } else {
                b.add(stream, isa::RingRecv{.token = kBias, .src_core = other, .tag = kStatsTag, .forward_to = kNone,
                                            .sp_addr = at_sp, .bytes = bytes});
              }
            }
          }
        }
      }
      stats_wait = true;
    };
    // A norm prologue: rows [0, rows) of an A panel part at `part_at` (k values each, K
    // columns from k0), whose statistics start at row `stat_row`, normalised in place as
    // the norm kernel does it, a few rows at a time through the fp32 piece buffer.
    const auto normalize = [&](std::uint32_t part_at, std::uint32_t rows, std::uint32_t k, std::uint64_t k0,
                               std::uint32_t stat_row) {
      if (stats_wait) b.add(stream, wait_on(kBias));
      stats_wait = false;
      nr.normalize(b, stream, part_at, rows, k, k0, stat_row);
    };
    // The panel of this step: a loader waits for its DMA and sends it on; a receiver
    // takes it from its neighbour (forwarding it). Piece by piece.
    const auto fetch = [&](bool loader, const Panel& pn, std::uint8_t dma_base, std::uint8_t ring_token,
                           std::uint16_t from, std::uint16_t to, std::uint16_t tag, std::uint32_t sp,
                           std::uint32_t slot, std::int32_t norm_tile = -1, std::uint64_t k0 = 0) {
      if (!loader) b.add(stream, wait_on(ring_token));  // the slot's last forward
      const auto row_bytes = static_cast<std::uint32_t>(pn.cols * size);
      for (std::uint32_t part = 0; part < kParts; ++part) {
        const std::uint32_t r0 = pn.row_start(part), r1 = pn.row_start(part + 1);
        if (r1 == r0) continue;
        const std::uint32_t at_sp = sp + r0 * row_bytes, bytes = (r1 - r0) * row_bytes;
        if (loader) {
          b.add(stream, wait_on(dma_token(dma_base, slot, part)));
          if (to != kNone) {
            b.add(stream, isa::RingSend{.token = ring_token, .dst_core = to, .tag = tag, .sp_addr = at_sp,
                                        .bytes = bytes});
          }
        } else {
          b.add(stream, isa::RingRecv{.token = ring_token, .src_core = from, .tag = tag, .forward_to = to,
                                      .sp_addr = at_sp, .bytes = bytes});
        }
      }
      // A norm prologue: the panel travels as loaded, and each core normalises its own
      // copy (in parallel, off the chain's path) once it has passed it on.
      if (norm_tile >= 0) {
        if (!loader && to != kNone) b.add(stream, wait_on(ring_token));
        normalize(sp, pn.rows, pn.cols, k0, static_cast<std::uint32_t>(norm_tile) * static_cast<std::uint32_t>(p.tm));
      }
    };
    // The order of a block's matmuls: phases, each one K step's B panel and the tiles
    // that use it. Two tiles: the second runs one K step behind the first ((0: 0),
    // (1: 0 1), ..., (0: 1)), so its first A panel comes from other DRAM channels than
    // the first tile's. (A row-major A with a row pitch that is a multiple of the
    // channel interleave round keeps a K step's columns of every row on the same few
    // channels; in lockstep, both tiles' first panels queued on those channels, and the
    // last grid row started its first matmul 48 us after the first, 2048^3.) The first
    // B panel is then loaded twice.
    struct Phase {
      std::size_t tile;
      std::uint64_t step;
      std::uint32_t rs[2];
      std::uint32_t count;
    };
    std::vector<Phase> phases;
    for (std::size_t ti = 0; ti < tiles.size(); ++ti) {
      if (tiles[ti].offset) {
        phases.push_back({ti, 0, {0, 0}, 1});
        for (std::uint64_t st = 1; st < steps; ++st) phases.push_back({ti, st, {0, 1}, 2});
        phases.push_back({ti, 0, {1, 0}, 1});
      } else {
        for (std::uint64_t st = 0; st < steps; ++st) phases.push_back({ti, st, {0, 1}, tiles[ti].rows});
      }
    }
    // The A panels in the order they are used; slots alternate.
    struct Use {
      std::size_t tile;
      std::uint64_t step;
      std::uint32_t r;
      bool first, last;  // the tile's first / last K step
    };
    std::vector<Use> a_seq;
    for (std::size_t pi = 0; pi < phases.size(); ++pi) {
      const Phase& ph = phases[pi];
      for (std::uint32_t x = 0; x < ph.count; ++x) {
        const std::uint32_t r = ph.rs[x];
        const auto same = [&](const Phase& o) {
          return o.tile == ph.tile && std::find(o.rs, o.rs + o.count, r) != o.rs + o.count;
        };
        const bool first = std::none_of(phases.begin(), phases.begin() + static_cast<std::ptrdiff_t>(pi), same);
        const bool last = std::none_of(phases.begin() + static_cast<std::ptrdiff_t>(pi) + 1, phases.end(), same);
        a_seq.push_back({ph.tile, ph.step, r, first, last});
      }
    }
    const auto load_a = [&](std::size_t u, std::uint32_t slot) {
      if (u >= a_seq.size()) return;
      const Use& x = a_seq[u];
      if (tiles[x.tile].a_loader) load(a_panel(tiles[x.tile], x.step, x.r), kDmaA, kRingA, 0, sp_a[slot], slot);
    };
    const auto load_b = [&](std::size_t pi, std::uint32_t slot) {
      if (pi >= phases.size()) return;
      const Tile& t = tiles[phases[pi].tile];
      if (t.b_loader) load(b_panel(t, phases[pi].step), kDmaB, kRingB, 1, sp_b[slot], slot);
    };
    bool store_pending = false, bias_ready = false, scale_ready = false, residual_ready = false;
    if (s.scale) {  // (on the bias's token: the epilogue waits for both)
      b.add(stream, dma<isa::DmaLoad>(kBias, isa::DType::fp32, scale_arg, 0, sp_scale, 1, 1, 1));
    }
    std::optional<isa::DmaStore> deferred_store;
    // A norm prologue: the first block's statistics before the first panels' loads (which
    // would otherwise hold the statistics' loads up, and nothing computes before they
    // are in); first, the norm's weight and bias, converted to fp32.
    if (s.norm && !tiles.empty()) {
      nr.load_params(b, stream, kBias, norm_arg, sp_nraw);
      norm_stats(tiles[0]);
      norm_exchange(tiles[0]);
    }
    // Prologue: the first B panel and the first A panel, and (both A slots being free)
    // the second A panel too, so the second matmul does not wait for a load issued
    // only when the first starts.
    load_b(0, 0);
    load_a(0, 0);
    load_a(1, 1);
    std::size_t a_use = 0;
    for (std::size_t pi = 0; pi < phases.size(); ++pi) {
      const Phase& ph = phases[pi];
      const Tile& t = tiles[ph.tile];
      const auto bslot = static_cast<std::uint32_t>(pi % 2);
      const std::uint32_t k = chunks[ph.step].second;
      const bool tile_start = pi == 0 || phases[pi - 1].tile != ph.tile;
      if (s.bias && tile_start) {  // the block's bias row, needed when its first tile completes
        b.add(stream, dma<isa::DmaLoad>(kBias, *s.bias, 3, t.batch * s.bias_batch_stride + t.j0, *s.bias == isa::DType::fp32 ? sp_bias : sp_bias_raw,
                                        t.n, 1, static_cast<std::int64_t>(t.n)));
        if (s.channel_scale) {
          b.add(stream, dma<isa::DmaLoad>(kBias, isa::DType::fp32, channel_scale_arg, t.batch * s.bias_batch_stride + t.j0,
                                          sp_channel_scale, t.n, 1, static_cast<std::int64_t>(t.n)));
        }
        bias_ready = false;
      }
      if (s.residual && tile_start) {  // the block's residual tiles, needed when each completes
        for (std::uint32_t r = 0; r < t.rows; ++r) {
          b.add(stream, dma<isa::DmaLoad>(kResidual, out_t, residual_arg, t.i0[r] * ldr + t.j0,
                                          sp_residual + r * residual_bytes, t.n, t.m[r], static_cast<std::int64_t>(ldr)));
        }
        residual_ready = false;
      }
      // B: a loader's own panel first, then the next phase's B load, then a receiver's.
      // (With a norm prologue, after the phase's first A panel: its normalisation then
      // runs while the core waits for B, not after.)
      const auto fetch_b = [&] {
        if (t.b_loader) fetch(true, b_panel(t, ph.step), kDmaB, kRingB + bslot, t.b_from, t.b_to, 1, sp_b[bslot], bslot);
        load_b(pi + 1, 1 - bslot);
        if (tile_start && deferred_store) {  // the previous block's result (one tile per core)
          b.add(stream, *deferred_store);
          deferred_store.reset();
        }
        if (!t.b_loader) fetch(false, b_panel(t, ph.step), kDmaB, kRingB + bslot, t.b_from, t.b_to, 1, sp_b[bslot], bslot);
      };
      if (!s.norm) fetch_b();
      if (s.norm && tile_start && t.new_rows && pi > 0) {
        norm_stats(t);
        norm_exchange(t);
      }
      for (std::uint32_t x = 0; x < ph.count; ++x, ++a_use) {
        const Use& u = a_seq[a_use];
        const std::uint32_t r = u.r;
        const auto aslot = static_cast<std::uint32_t>(a_use % 2);
        const Panel ap = a_panel(t, ph.step, r);
        if (t.a_loader) {
          fetch(true, ap, kDmaA, kRingA + aslot, t.a_from, t.a_to, 0, sp_a[aslot], aslot,
                s.norm ? static_cast<std::int32_t>(r) : -1, chunks[ph.step].first);
        }
        if (a_use > 0) load_a(a_use + 1, 1 - aslot);  // the prologue loaded the second
        if (!t.a_loader) {
          fetch(false, ap, kDmaA, kRingA + aslot, t.a_from, t.a_to, 0, sp_a[aslot], aslot,
                s.norm ? static_cast<std::int32_t>(r) : -1, chunks[ph.step].first);
        }
        if (s.norm && x == 0) fetch_b();
        const std::uint32_t c = rt == 1 ? sp_c[0] : sp_c[r];
        // In place (two tiles per core): the accumulator's last store must be done.
        if (rt == 2 && u.first && ph.tile > 0) b.add(stream, wait_on(kStore + r));
        // The core's last matmul runs in row pieces, each converted and stored while
        // the next computes: the tail after the last matmul is one piece's store, not
        // the tile's (the systolic folds are the same; pieces are whole folds of the
        // target's array rows).
        const std::uint32_t fold = std::max<std::uint32_t>(1, target.array_rows);
        const std::uint32_t pieces = a_use + 1 == a_seq.size()
                                         ? std::max<std::uint32_t>(1, std::min<std::uint32_t>(kTailPieces, t.m[r] / fold))
                                         : 1;
        const std::uint32_t piece_rows = static_cast<std::uint32_t>(ceil_div(ceil_div(t.m[r], pieces), fold) * fold);
        for (std::uint32_t r0 = 0; r0 < t.m[r]; r0 += piece_rows) {
          const std::uint32_t rows = std::min(piece_rows, t.m[r] - r0);
          const std::uint32_t a_at =
              sp_a[aslot] + static_cast<std::uint32_t>((s.a_transposed ? r0 : std::uint64_t{r0} * k) * size);
          const std::uint32_t c_at = c + r0 * t.n * 4;
          b.add(stream, isa::Matmul{.a = a_at, .b = sp_b[bslot], .c = c_at, .m = rows, .n = t.n, .k = k,
                                    .lda = s.a_transposed ? t.m[r] : k, .ldb = s.b_transposed ? k : t.n, .ldc = t.n,
                                    .in = s.dtype, .out = acc, .trans_a = s.a_transposed,
                                    .trans_b = s.b_transposed, .accumulate = !u.first});
          if (s.gated) {  // the up projection: the panel's second half, into the second accumulator
            b.add(stream, isa::Matmul{.a = a_at, .b = sp_b[bslot] + static_cast<std::uint32_t>(t.n * k * size),
                                      .c = c_at + c_bytes, .m = rows, .n = t.n, .k = k, .lda = s.a_transposed ? t.m[r] : k,
                                      .ldb = k, .ldc = t.n, .in = s.dtype, .out = acc, .trans_a = s.a_transposed,
                                      .trans_b = true, .accumulate = !u.first});
          }
          if (!u.last) continue;
          // The tile's rows are complete: the epilogue, then convert (or copy, fp32) and store.
          if (s.scale) {
            if (!scale_ready) {
              b.add(stream, wait_on(kBias));
              scale_ready = true;
            }
            b.add(stream, isa::VBinary{.op = isa::BinaryOp::mul, .dtype = isa::DType::fp32,
                                       .bcast = isa::Broadcast::scalar, .a = c_at, .b = sp_scale, .dst = c_at,
                                       .rows = rows, .cols = t.n});
          }
          if (s.bias) {
            if (!bias_ready) {
              b.add(stream, wait_on(kBias));
              if (*s.bias != isa::DType::fp32) {
                b.add(stream, isa::VConvert{.from = *s.bias, .to = isa::DType::fp32, .src = sp_bias_raw, .dst = sp_bias,
                                            .count = t.n});
              }
              bias_ready = true;
            }
            if (s.channel_scale) {
              b.add(stream, isa::VBinary{.op = isa::BinaryOp::mul, .dtype = isa::DType::fp32, .bcast = isa::Broadcast::row,
                                         .a = c_at, .b = sp_channel_scale, .dst = c_at, .rows = rows, .cols = t.n});
            }
            b.add(stream, isa::VBinary{.op = isa::BinaryOp::add, .dtype = isa::DType::fp32, .bcast = isa::Broadcast::row,
                                       .a = c_at, .b = sp_bias, .dst = c_at, .rows = rows, .cols = t.n});
          }
          if (s.activation) {
            b.add(stream, isa::VUnary{.op = *s.activation, .dtype = isa::DType::fp32, .src = c_at, .dst = c_at,
                                      .count = rows * t.n});
          }
          const std::uint32_t out = rt == 1 ? sp_o + static_cast<std::uint32_t>(r0 * t.n * out_size) : c_at;
          if (rt == 1 && store_pending && r0 == 0) b.add(stream, wait_on(kStore));
          if (out_t != acc) {
            b.add(stream, isa::VConvert{.from = acc, .to = out_t, .src = c_at, .dst = out, .count = rows * t.n});
          } else if (out != c_at) {
            b.add(stream, isa::VUnary{.op = isa::UnaryOp::copy, .dtype = out_t, .src = c_at, .dst = out,
                                      .count = rows * t.n});
          }
          if (s.gated) {  // * the up projection, rounded to C's dtype first as its own product is
            std::uint32_t up = c_at + c_bytes;
            if (out_t != acc) {
              const std::uint32_t rounded = sp_residual + static_cast<std::uint32_t>(r0 * t.n * out_size);
              b.add(stream, isa::VConvert{.from = acc, .to = out_t, .src = up, .dst = rounded, .count = rows * t.n});
              up = rounded;
            }
            b.add(stream, isa::VBinary{.op = isa::BinaryOp::mul, .dtype = out_t, .a = out, .b = up, .dst = out,
                                       .rows = rows, .cols = t.n});
          }
          if (s.residual) {
            if (!residual_ready) {
              b.add(stream, wait_on(kResidual));
              residual_ready = true;
            }
            const std::uint32_t res = sp_residual + r * residual_bytes + static_cast<std::uint32_t>(r0 * t.n * out_size);
            b.add(stream, isa::VBinary{.op = s.residual_op, .dtype = out_t, .a = out, .b = res, .dst = out,
                                       .rows = rows, .cols = t.n});
          }
          const auto store = dma<isa::DmaStore>(static_cast<std::uint8_t>(kStore + (rt == 1 ? 0 : r)), out_t, 2,
                                                t.batch * c_batch + (t.i0[r] + r0) * ldc + t.j0, out, t.n, rows,
                                                static_cast<std::int64_t>(ldc));
          if (rt == 1 && ph.tile + 1 < tiles.size()) {
            // Issued after the next block's first prefetch: the stores of a whole
            // super-block at once would otherwise hold up the loads the next needs.
            deferred_store = store;
            store_pending = true;
          } else {
            b.add(stream, store);
          }
        }
      }
    }
    b.add(stream, isa::Wait{.token_mask = kAllTokens});  // every load, ring transfer and store done
  }
  return b.build();
}

}  // namespace spyre::compiler
