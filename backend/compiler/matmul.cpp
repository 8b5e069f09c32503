// The matmul generator's code (compile_matmul's second half; matmul_plan.cpp checks and
// plans): the plan's scratchpad layout, each core's blocks of tiles, and the code that
// streams their panels, multiplies and finishes each tile. docs/ARCHITECTURE.md §9.
#include "compiler/matmul.h"

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "compiler/dma.h"
#include "compiler/emit.h"
#include "compiler/matmul_parts.h"
#include "compiler/norm_rows.h"
#include "spyre/checked.h"
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

// Where a plan keeps things in the scratchpad (bytes), and the arguments that depend on
// which epilogue parts a shape has.
struct Layout {
  std::uint32_t a[2] = {}, b[2] = {};  // the A and B panels, double-buffered
  std::uint32_t c[2] = {};             // the accumulators (a gated pair's up projection: c[1])
  std::uint32_t c_bytes = 0;
  // One tile per core: the result is converted into its own buffer, so the next tile's
  // first matmul need not wait for the store. Two: in place.
  std::uint32_t out = 0;
  // The epilogue's bias row, in fp32 and as loaded; the channel scale row (fp32); the
  // scale (one fp32 value); the residual tiles (one per accumulator; a gated pair's up
  // projection, rounded).
  std::uint32_t bias = 0, bias_raw = 0, channel_scale = 0, scale = 0, residual = 0, residual_bytes = 0;
  // A norm prologue: the mean and rstd of up to two tiles' rows, the weight and the bias
  // in fp32, a statistics piece in fp32 (also the fp32 copy of the panel rows being
  // normalised), and the piece's two load buffers of `norm_rows` rows.
  std::uint32_t mean = 0, rstd = 0, norm_weight = 0, norm_bias = 0, norm_work = 0, norm_raw[2] = {};
  std::uint64_t norm_rows = 0;
  std::uint16_t channel_scale_arg = 4, scale_arg = 3, residual_arg = 3, norm_arg = 3;
};

std::uint32_t align4(std::uint64_t at) { return static_cast<std::uint32_t>((at + 3u) & ~std::uint64_t{3}); }

Layout layout_of(const MatmulShape& s, const MatmulPlan& p, const Target& target) {
  const std::uint64_t size = isa::dtype_size(s.dtype), out_size = isa::dtype_size(s.out_dtype());
  const std::uint32_t rt = p.rows_per_core;
  const std::uint64_t pair = s.gated ? 2 : 1;  // B panels and accumulators per tile
  const auto a_bytes = static_cast<std::uint32_t>(p.tm * p.tk * size);
  const auto b_bytes = static_cast<std::uint32_t>(pair * p.tk * p.tn * size);
  Layout l;
  l.c_bytes = static_cast<std::uint32_t>(p.tm * p.tn * 4);
  l.a[0] = 0, l.a[1] = a_bytes, l.b[0] = 2 * a_bytes, l.b[1] = 2 * a_bytes + b_bytes;
  l.c[0] = 2 * a_bytes + 2 * b_bytes, l.c[1] = l.c[0] + l.c_bytes;
  l.out = rt == 1 ? l.c[0] + static_cast<std::uint32_t>(pair) * l.c_bytes : 0;
  // (fp32 rows after the output buffer, so 4-byte aligned: an fp16/bf16 output buffer of
  // odd tm x tn ends at 2 mod 4.)
  l.bias = align4(rt == 1 ? l.out + p.tm * p.tn * out_size : l.c[1] + l.c_bytes);
  l.bias_raw = l.bias + (s.bias ? static_cast<std::uint32_t>(p.tn * 4) : 0u);
  l.channel_scale = align4(l.bias_raw + (s.bias ? p.tn * isa::dtype_size(*s.bias) : 0));
  l.scale = l.channel_scale + (s.channel_scale ? static_cast<std::uint32_t>(p.tn * 4) : 0u);
  l.residual = align4(l.scale + (s.scale ? 4u : 0u));
  l.residual_bytes = static_cast<std::uint32_t>(p.tm * p.tn * out_size);
  l.scale_arg = static_cast<std::uint16_t>(3 + (s.bias ? 1 : 0) + (s.channel_scale ? 1 : 0));
  l.residual_arg = static_cast<std::uint16_t>(l.scale_arg + (s.scale ? 1 : 0));
  l.norm_arg = static_cast<std::uint16_t>(l.residual_arg + (s.residual ? 1 : 0) +
                                          (s.b_pieces.empty() ? 0 : s.b_pieces.size() - 1));
  const auto k32 = static_cast<std::uint32_t>(s.k);
  l.mean = align4(l.residual + (s.residual ? rt * l.residual_bytes : s.gated ? l.residual_bytes : 0u));
  l.rstd = l.mean + static_cast<std::uint32_t>(2 * p.tm * 4);
  l.norm_weight = l.rstd + static_cast<std::uint32_t>(2 * p.tm * 4);
  l.norm_bias = l.norm_weight + (s.norm && s.norm->weight ? k32 * 4 : 0u);
  l.norm_work = l.norm_bias + (s.norm && s.norm->bias ? k32 * 4 : 0u);
  if (s.norm) {
    const std::uint64_t left = target.scratchpad_bytes - std::min<std::uint64_t>(l.norm_work, target.scratchpad_bytes);
    l.norm_rows = std::clamp<std::uint64_t>(std::min<std::uint64_t>(kNormStatsBytes, left) / norm_row_bytes(s), 1, p.tm);
  }
  l.norm_raw[0] = l.norm_work + static_cast<std::uint32_t>(l.norm_rows * s.k * 4);
  l.norm_raw[1] = l.norm_work + static_cast<std::uint32_t>(l.norm_rows * s.k * (4 + size));
  return l;
}

// A block of one core: rt tiles stacked along M sharing their B panels; where its panels
// come from (DRAM or a neighbour's ring message) and where it passes them on.
constexpr std::uint16_t kNone = isa::RingRecv::kNoForward;
struct Tile {
  std::uint64_t batch = 0, j0 = 0;
  std::uint64_t i0[2] = {0, 0};
  std::uint32_t m[2] = {0, 0}, n = 0;
  std::uint32_t rows = 1;  // tiles of the block inside the matrix (1 or 2)
  // The second tile runs a K step behind the first (see CoreCode::order). Decided per
  // super-block: B panels travel down grid columns, so every core of a column must take
  // the same number of them.
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

// How the plan's tiles fall into super-blocks and streams.
struct Grid {
  std::uint64_t tiles_m = 0, tiles_n = 0, row_blocks = 0, sb_m = 0, sb_n = 0;
  std::uint32_t group_size = 1, streams = 1;
  Grid(const MatmulShape& s, const MatmulPlan& p)
      : tiles_m(ceil_div(s.m, p.tm)),
        tiles_n(ceil_div(s.n, p.tn)),
        row_blocks(ceil_div(tiles_m, p.rows_per_core)),
        sb_m(ceil_div(row_blocks, p.grid_rows)),
        sb_n(ceil_div(tiles_n, p.grid_cols)),
        group_size(p.grid_rows * p.grid_cols),
        streams(group_size * static_cast<std::uint32_t>(std::min<std::uint64_t>(p.groups, p.super_blocks))) {}
};

// K steps of tk, (first column, width). (A short first or last step, to start computing
// sooner or finish sooner, measured slower: 2048^3 326 and 318 us against 314 us.)
using Chunks = std::vector<std::pair<std::uint64_t, std::uint32_t>>;

// The blocks of core `stream`, one per super-block of its group that reaches it.
std::vector<Tile> core_tiles(const MatmulShape& s, const MatmulPlan& p, const Grid& g, std::uint64_t steps,
                             std::uint32_t stream) {
  const std::uint32_t rt = p.rows_per_core;
  const std::uint32_t group = stream / g.group_size, i = (stream % g.group_size) / p.grid_cols, j = stream % p.grid_cols;
  const auto at = [&](std::uint32_t r, std::uint32_t c) {
    return static_cast<std::uint16_t>(group * g.group_size + r * p.grid_cols + c);
  };
  std::vector<Tile> tiles;
  for (std::uint64_t sb = group; sb < p.super_blocks; sb += p.groups) {
    const std::uint64_t si = (sb / g.sb_n) % g.sb_m, sj = sb % g.sb_n;
    const auto rows = static_cast<std::uint32_t>(std::min<std::uint64_t>(p.grid_rows, g.row_blocks - si * p.grid_rows));
    const auto cols = static_cast<std::uint32_t>(std::min<std::uint64_t>(p.grid_cols, g.tiles_n - sj * p.grid_cols));
    if (i >= rows || j >= cols) continue;  // this super-block's edge: no tile here
    Tile t;
    t.batch = sb / (g.sb_m * g.sb_n);
    const std::uint64_t first_tile_row = (si * p.grid_rows + i) * rt;
    t.rows = static_cast<std::uint32_t>(std::min<std::uint64_t>(rt, g.tiles_m - first_tile_row));
    const std::uint64_t last_row_block = si * p.grid_rows + rows - 1;  // of this super-block
    t.offset = rt == 2 && g.tiles_m - last_row_block * rt >= 2 && steps >= kRotateSteps;
    for (std::uint32_t r = 0; r < t.rows; ++r) {
      t.i0[r] = (first_tile_row + r) * p.tm;
      t.m[r] = static_cast<std::uint32_t>(std::min(p.tm, s.m - t.i0[r]));
    }
    t.j0 = (sj * p.grid_cols + j) * p.tn;
    t.n = static_cast<std::uint32_t>(std::min(p.tn, s.n - t.j0));
    // A travels left to right along a grid row (adjacent cores on the ring), B down a
    // grid column. (Sending B up on every other column, to use both directions of the
    // links between grid rows, measured slower: 2048^3 364 us against 310 us; so did
    // column-major grids, 341 us.)
    t.a_loader = j == 0;
    t.a_from = j > 0 ? at(i, j - 1) : kNone;
    t.a_to = j + 1 < cols ? at(i, j + 1) : kNone;
    t.b_loader = i == 0;
    t.b_from = i > 0 ? at(i - 1, j) : kNone;
    t.b_to = i + 1 < rows ? at(i + 1, j) : kNone;
    if (sb >= group + p.groups) {
      const std::uint64_t prev = sb - p.groups;
      t.new_rows = (prev / g.sb_n) % g.sb_m != si || prev / (g.sb_m * g.sb_n) != t.batch;
    }
    t.row_first = at(i, 0);
    t.row_place = j;
    t.row_cores = cols;
    tiles.push_back(t);
  }
  return tiles;
}

// The order of a block's matmuls: phases, each one K step's B panel and the tiles that
// use it; and the A panels in the order they are used (their slots alternate).
struct Phase {
  std::size_t tile;
  std::uint64_t step;
  std::uint32_t rs[2];
  std::uint32_t count;
};
struct Use {
  std::size_t tile;
  std::uint64_t step;
  std::uint32_t r;
  bool first, last;  // the tile's first / last K step
};

// Two tiles: the second runs one K step behind the first ((0: 0), (1: 0 1), ..., (0: 1)),
// so its first A panel comes from other DRAM channels than the first tile's. (A row-major
// A with a row pitch that is a multiple of the channel interleave round keeps a K step's
// columns of every row on the same few channels; in lockstep, both tiles' first panels
// queued on those channels, and the last grid row started its first matmul 48 us after
// the first, 2048^3.) The first B panel is then loaded twice.
std::vector<Phase> phases_of(const std::vector<Tile>& tiles, std::uint64_t steps) {
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
  return phases;
}

std::vector<Use> a_uses_of(const std::vector<Phase>& phases) {
  std::vector<Use> uses;
  for (std::size_t pi = 0; pi < phases.size(); ++pi) {
    const Phase& ph = phases[pi];
    for (std::uint32_t x = 0; x < ph.count; ++x) {
      const std::uint32_t r = ph.rs[x];
      const auto same = [&](const Phase& o) {
        return o.tile == ph.tile && std::find(o.rs, o.rs + o.count, r) != o.rs + o.count;
      };
      const bool first = std::none_of(phases.begin(), phases.begin() + static_cast<std::ptrdiff_t>(pi), same);
      const bool last = std::none_of(phases.begin() + static_cast<std::ptrdiff_t>(pi) + 1, phases.end(), same);
      uses.push_back({ph.tile, ph.step, r, first, last});
    }
  }
  return uses;
}

// A norm prologue's statistics and the panels' normalisation travel on this ring tag.
constexpr std::uint16_t kStatsTag = 2;

// One core's code: its blocks' panels streamed in, multiplied K step by K step, and each
// finished tile's epilogue and store.
class CoreCode {
 public:
  CoreCode(const MatmulShape& s, const MatmulPlan& p, const Layout& l, const Target& target, const Chunks& chunks,
           isa::ProgramBuilder& b, std::uint32_t stream, std::vector<Tile> tiles)
      : s_(s), p_(p), l_(l), target_(target), chunks_(chunks), b_(b), stream_(stream), st_{b, stream},
        tiles_(std::move(tiles)),
        phases_(phases_of(tiles_, chunks.size())),
        a_seq_(a_uses_of(phases_)),
        size_(isa::dtype_size(s.dtype)),
        acc_(s.accumulator()),
        out_t_(s.out_dtype()),
        out_size_(isa::dtype_size(out_t_)),
        rt_(p.rows_per_core),
        a_ld_(s.lda != 0 ? s.lda : s.a_transposed ? s.m : s.k),
        b_ld_(s.ldb != 0 ? s.ldb : s.b_transposed ? s.k : s.n),
        ldr_(s.ldr != 0 ? s.ldr : s.n),
        ldc_(s.ldc != 0 ? s.ldc : s.n),
        c_batch_(s.c_batch_stride != 0 ? s.c_batch_stride : s.m * s.n),
        nr_{s.norm.value_or(MatmulShape::Norm{}), s.dtype, s.k, l.mean, l.rstd, l.norm_weight, l.norm_bias,
            l.norm_work, l.norm_rows * s.k} {
    for (std::size_t q = 0, at = 0; q < s.b_pieces.size(); at += s.b_pieces[q++]) piece_start_.push_back(at);
  }

  void emit();

 private:
  Panel a_panel(const Tile& t, std::uint64_t step, std::uint32_t r) const;
  Panel b_panel(const Tile& t, std::uint64_t step) const;
  void load(const Panel& pn, std::uint8_t dma_base, std::uint8_t ring_base, std::uint16_t arg, std::uint32_t sp,
            std::uint32_t slot);
  void load_pieced(const Panel& pn, std::uint32_t r0, std::uint32_t r1, std::uint8_t token, std::uint32_t sp);
  void load_a(std::size_t u, std::uint32_t slot);
  void load_b(std::size_t pi, std::uint32_t slot);
  void fetch(bool loader, const Panel& pn, std::uint8_t dma_base, std::uint8_t ring_token, std::uint16_t from,
             std::uint16_t to, std::uint16_t tag, std::uint32_t sp, std::uint32_t slot, std::int32_t norm_tile = -1,
             std::uint64_t k0 = 0);
  void fetch_b(std::size_t pi, bool tile_start);
  void norm_stats(const Tile& t);
  void norm_exchange(const Tile& t);
  void tile_loads(const Tile& t);
  void multiply(std::size_t pi, std::uint32_t bslot);
  void finish(const Phase& ph, std::uint32_t r, std::uint32_t r0, std::uint32_t rows, std::uint32_t c_at);

  // The share of tile r's rows of a block that its grid row's core c takes: [lo, hi).
  static std::pair<std::uint32_t, std::uint32_t> share(const Tile& t, std::uint32_t r, std::uint32_t c) {
    return {t.m[r] * c / t.row_cores, t.m[r] * (c + 1) / t.row_cores};
  }

  const MatmulShape& s_;
  const MatmulPlan& p_;
  const Layout& l_;
  const Target& target_;
  const Chunks& chunks_;
  isa::ProgramBuilder& b_;
  std::uint32_t stream_;
  CoreStream st_;
  std::vector<Tile> tiles_;
  std::vector<Phase> phases_;
  std::vector<Use> a_seq_;
  std::uint64_t size_;
  isa::DType acc_, out_t_;
  std::uint64_t out_size_;
  std::uint32_t rt_;
  std::uint64_t a_ld_, b_ld_, ldr_, ldc_, c_batch_;  // row pitches of the stored matrices (elements)
  NormRows nr_;
  std::vector<std::uint64_t> piece_start_;  // a pieced B: each piece's first column of B
  // What the code has waited for, and a store held back (see finish).
  bool store_pending_ = false, bias_ready_ = false, scale_ready_ = false, residual_ready_ = false;
  bool stats_wait_ = false;
  std::optional<isa::DmaStore> deferred_store_;
  std::size_t a_use_ = 0;
};

// The A and B panels of a block's K step, as stored in the scratchpad.
Panel CoreCode::a_panel(const Tile& t, std::uint64_t step, std::uint32_t r) const {
  const auto [k0, k] = chunks_[step];
  const std::uint64_t base = t.batch * s_.a_batch_stride;
  if (s_.conv) {  // rows are pixels, columns taps: A's (or, transposed, A^T's K and M)
    return s_.a_transposed ? Panel{t.m[r], k, base, 0, false, k0, t.i0[r], true}
                           : Panel{k, t.m[r], base, 0, false, t.i0[r], k0, true};
  }
  return s_.a_transposed ? Panel{t.m[r], k, base + k0 * a_ld_ + t.i0[r], a_ld_}
                         : Panel{k, t.m[r], base + t.i0[r] * a_ld_ + k0, a_ld_};
}

Panel CoreCode::b_panel(const Tile& t, std::uint64_t step) const {
  const auto [k0, k] = chunks_[step];
  const std::uint64_t base = t.batch * s_.b_batch_stride;
  if (!s_.b_pieces.empty()) {
    return Panel{k, static_cast<std::uint32_t>((s_.gated ? 2 : 1) * t.n), 0, 0, true, t.j0, k0};
  }
  return s_.b_transposed ? Panel{k, t.n, base + t.j0 * b_ld_ + k0, b_ld_} : Panel{t.n, k, base + k0 * b_ld_ + t.j0, b_ld_};
}

// A loader's DMAs of a panel into `slot`, in pieces, once the slot's last ring transfer
// (which reads it) is done.
void CoreCode::load(const Panel& pn, std::uint8_t dma_base, std::uint8_t ring_base, std::uint16_t arg,
                    std::uint32_t sp, std::uint32_t slot) {
  st_(wait_on(ring_base + slot));
  for (std::uint32_t part = 0; part < kParts; ++part) {
    const std::uint32_t r0 = pn.row_start(part), r1 = pn.row_start(part + 1);
    if (r1 == r0) continue;
    const std::uint8_t token = dma_token(dma_base, slot, part);
    const auto at = sp + static_cast<std::uint32_t>(r0 * pn.cols * size_);
    if (pn.conv) {
      conv_panel(*s_.conv, pn.first, pn.row0 + r0, r1 - r0, pn.k0, pn.cols, at, size_, [&](isa::DmaLoad d) {
        d.token = token;
        d.dtype = s_.dtype;
        d.arg = arg;
        st_(d);
      });
    } else if (!pn.pieced) {
      st_(dma<isa::DmaLoad>(token, s_.dtype, arg, pn.first + r0 * pn.ld, at, pn.cols, r1 - r0,
                            static_cast<std::int64_t>(pn.ld)));
    } else {
      load_pieced(pn, r0, r1, token, sp);
    }
  }
}

// Rows [r0, r1) of a pieced B panel: one DMA per piece they cross, on the part's token.
void CoreCode::load_pieced(const Panel& pn, std::uint32_t r0, std::uint32_t r1, std::uint8_t token, std::uint32_t sp) {
  for (std::uint32_t r = r0; r < r1;) {
    // A gated pair's panel: the gate's rows j0.., then the up projection's.
    const std::uint32_t half = pn.rows / 2;
    std::size_t q = 0;
    std::uint64_t row = 0;
    std::uint32_t end = 0;
    if (s_.gated) {
      q = r < half ? 0 : 1;
      row = pn.row0 + r - q * half;
      end = q == 0 ? std::min(r1, half) : r1;
    } else {
      const std::uint64_t column = pn.row0 + r;  // of B (its transpose's row)
      q = static_cast<std::size_t>(std::upper_bound(piece_start_.begin(), piece_start_.end(), column) -
                                   piece_start_.begin() - 1);
      row = column - piece_start_[q];
      end = static_cast<std::uint32_t>(std::min<std::uint64_t>(r1, piece_start_[q] + s_.b_pieces[q] - pn.row0));
    }
    const auto arg = static_cast<std::uint16_t>(q == 0 ? 1 : 2 + q);
    const std::uint64_t ld = q < s_.b_piece_ld.size() && s_.b_piece_ld[q] != 0 ? s_.b_piece_ld[q] : s_.k;
    st_(dma<isa::DmaLoad>(token, s_.dtype, arg, row * ld + pn.k0, sp + static_cast<std::uint32_t>(r * pn.cols * size_),
                          pn.cols, end - r, static_cast<std::int64_t>(ld)));
    r = end;
  }
}

void CoreCode::load_a(std::size_t u, std::uint32_t slot) {
  if (u >= a_seq_.size()) return;
  const Use& x = a_seq_[u];
  if (tiles_[x.tile].a_loader) load(a_panel(tiles_[x.tile], x.step, x.r), kDmaA, kRingA, 0, l_.a[slot], slot);
}

void CoreCode::load_b(std::size_t pi, std::uint32_t slot) {
  if (pi >= phases_.size()) return;
  const Tile& t = tiles_[phases_[pi].tile];
  if (t.b_loader) load(b_panel(t, phases_[pi].step), kDmaB, kRingB, 1, l_.b[slot], slot);
}

// The panel of this step: a loader waits for its DMA and sends it on; a receiver takes
// it from its neighbour (forwarding it). Piece by piece. A norm prologue: the panel
// travels as loaded, and each core normalises its own copy (in parallel, off the
// chain's path) once it has passed it on.
void CoreCode::fetch(bool loader, const Panel& pn, std::uint8_t dma_base, std::uint8_t ring_token, std::uint16_t from,
                     std::uint16_t to, std::uint16_t tag, std::uint32_t sp, std::uint32_t slot, std::int32_t norm_tile,
                     std::uint64_t k0) {
  if (!loader) st_(wait_on(ring_token));  // the slot's last forward
  pass_along(st_, ChainLink{loader, from, to}, ring_token, tag, sp, pn.rows, pn.cols * size_, kParts,
             [&](std::uint32_t part) { st_(wait_on(dma_token(dma_base, slot, part))); });
  if (norm_tile < 0) return;
  if (!loader && to != kNone) st_(wait_on(ring_token));
  if (stats_wait_) st_(wait_on(kBias));
  stats_wait_ = false;
  nr_.normalize(b_, stream_, sp, pn.rows, pn.cols, k0, static_cast<std::uint32_t>(norm_tile) * static_cast<std::uint32_t>(p_.tm));
}

// B: a loader's own panel first, then the next phase's B load, then a receiver's.
void CoreCode::fetch_b(std::size_t pi, bool tile_start) {
  const Phase& ph = phases_[pi];
  const Tile& t = tiles_[ph.tile];
  const auto bslot = static_cast<std::uint32_t>(pi % 2);
  const auto ring = static_cast<std::uint8_t>(kRingB + bslot);
  if (t.b_loader) fetch(true, b_panel(t, ph.step), kDmaB, ring, t.b_from, t.b_to, 1, l_.b[bslot], bslot);
  load_b(pi + 1, 1 - bslot);
  if (tile_start && deferred_store_) {  // the previous block's result (one tile per core)
    st_(*deferred_store_);
    deferred_store_.reset();
  }
  if (!t.b_loader) fetch(false, b_panel(t, ph.step), kDmaB, ring, t.b_from, t.b_to, 1, l_.b[bslot], bslot);
}

// A norm prologue: the statistics of a block's rows, shared out over the cores of its
// grid row: each takes its share of each tile's rows in pieces of whole rows loaded
// double-buffered (on the bias's and, without a residual, the residual's token), with
// the norm kernel's operations (compile_layer_norm). Row i of the block's tile r has its
// mean and rstd at (r * tm + i) * 4.
void CoreCode::norm_stats(const Tile& t) {
  const std::uint8_t token[2] = {kBias, s_.residual ? kBias : kResidual};
  struct Piece {
    std::uint32_t r, q, rows;
  };
  std::vector<Piece> pieces;
  for (std::uint32_t r = 0; r < t.rows; ++r) {
    const auto [lo, hi] = share(t, r, t.row_place);
    for (std::uint32_t q = lo; q < hi; q += static_cast<std::uint32_t>(l_.norm_rows)) {
      pieces.push_back({r, q, static_cast<std::uint32_t>(std::min<std::uint64_t>(l_.norm_rows, hi - q))});
    }
  }
  const auto issue = [&](std::size_t x) {
    if (x >= pieces.size()) return;
    st_(dma<isa::DmaLoad>(token[x % 2], s_.dtype, 0, (t.i0[pieces[x].r] + pieces[x].q) * a_ld_, l_.norm_raw[x % 2],
                          static_cast<std::uint32_t>(s_.k), pieces[x].rows, static_cast<std::int64_t>(a_ld_)));
  };
  issue(0);
  for (std::size_t x = 0; x < pieces.size(); ++x) {
    issue(x + 1);
    st_(wait_on(token[x % 2]));
    const Piece& pc = pieces[x];
    nr_.stats(b_, stream_, l_.norm_raw[x % 2], pc.rows, static_cast<std::uint32_t>(pc.r * p_.tm + pc.q));
  }
}

// Every core of the grid row sends its share (mean, then rstd, of each tile's share) to
// every other, and waits for theirs before it normalises its next panel.
void CoreCode::norm_exchange(const Tile& t) {
  const auto segments = [&](std::uint32_t c) {
    std::vector<std::pair<std::uint64_t, std::uint64_t>> out;
    for (std::uint32_t r = 0; r < t.rows; ++r) {
      const auto [lo, hi] = share(t, r, c);
      out.emplace_back(r * p_.tm + lo, r * p_.tm + hi);
    }
    return out;
  };
  nr_.exchange(b_, stream_, t.row_first, t.row_cores, t.row_place, segments, s_.residual ? kBias : kResidual, kBias,
               kStatsTag);
  stats_wait_ = true;
}

// A block's bias row and channel scale (needed when its first tile completes) and its
// residual tiles (when each completes).
void CoreCode::tile_loads(const Tile& t) {
  if (s_.bias) {
    st_(dma<isa::DmaLoad>(kBias, *s_.bias, 3, t.batch * s_.bias_batch_stride + t.j0,
                          *s_.bias == isa::DType::fp32 ? l_.bias : l_.bias_raw, t.n, 1, static_cast<std::int64_t>(t.n)));
    if (s_.channel_scale) {
      st_(dma<isa::DmaLoad>(kBias, isa::DType::fp32, l_.channel_scale_arg, t.batch * s_.bias_batch_stride + t.j0,
                            l_.channel_scale, t.n, 1, static_cast<std::int64_t>(t.n)));
    }
    bias_ready_ = false;
  }
  if (s_.residual) {
    for (std::uint32_t r = 0; r < t.rows; ++r) {
      st_(dma<isa::DmaLoad>(kResidual, out_t_, l_.residual_arg, t.i0[r] * ldr_ + t.j0, l_.residual + r * l_.residual_bytes,
                            t.n, t.m[r], static_cast<std::int64_t>(ldr_)));
    }
    residual_ready_ = false;
  }
}

// Phase pi's A panels and their products. The core's last matmul runs in row pieces,
// each finished and stored while the next computes: the tail after the last matmul is
// one piece's store, not the tile's (the systolic folds are the same; pieces are whole
// folds of the target's array rows).
void CoreCode::multiply(std::size_t pi, std::uint32_t bslot) {
  const Phase& ph = phases_[pi];
  const Tile& t = tiles_[ph.tile];
  const std::uint32_t k = chunks_[ph.step].second;
  for (std::uint32_t x = 0; x < ph.count; ++x, ++a_use_) {
    const Use& u = a_seq_[a_use_];
    const std::uint32_t r = u.r;
    const auto aslot = static_cast<std::uint32_t>(a_use_ % 2);
    const Panel ap = a_panel(t, ph.step, r);
    const auto ring = static_cast<std::uint8_t>(kRingA + aslot);
    const std::int32_t norm_tile = s_.norm ? static_cast<std::int32_t>(r) : -1;
    if (t.a_loader) fetch(true, ap, kDmaA, ring, t.a_from, t.a_to, 0, l_.a[aslot], aslot, norm_tile, chunks_[ph.step].first);
    if (a_use_ > 0) load_a(a_use_ + 1, 1 - aslot);  // the prologue loaded the second
    if (!t.a_loader) fetch(false, ap, kDmaA, ring, t.a_from, t.a_to, 0, l_.a[aslot], aslot, norm_tile, chunks_[ph.step].first);
    // (With a norm prologue, B after the phase's first A panel: its normalisation then
    // runs while the core waits for B, not after.)
    if (s_.norm && x == 0) fetch_b(pi, pi == 0 || phases_[pi - 1].tile != ph.tile);
    const std::uint32_t c = rt_ == 1 ? l_.c[0] : l_.c[r];
    // In place (two tiles per core): the accumulator's last store must be done.
    if (rt_ == 2 && u.first && ph.tile > 0) st_(wait_on(kStore + r));
    const std::uint32_t fold = std::max<std::uint32_t>(1, target_.array_rows);
    const std::uint32_t pieces =
        a_use_ + 1 == a_seq_.size() ? std::max<std::uint32_t>(1, std::min<std::uint32_t>(kTailPieces, t.m[r] / fold)) : 1;
    const auto piece_rows = static_cast<std::uint32_t>(fold_piece_rows(t.m[r], pieces, fold));
    for (std::uint32_t r0 = 0; r0 < t.m[r]; r0 += piece_rows) {
      const std::uint32_t rows = std::min(piece_rows, t.m[r] - r0);
      const std::uint32_t a_at = l_.a[aslot] + static_cast<std::uint32_t>((s_.a_transposed ? r0 : std::uint64_t{r0} * k) * size_);
      const std::uint32_t c_at = c + r0 * t.n * 4;
      k_step(st_,
             isa::Matmul{.a = a_at, .b = l_.b[bslot], .c = c_at, .m = rows, .n = t.n, .k = k,
                         .lda = s_.a_transposed ? t.m[r] : k, .ldb = s_.b_transposed ? k : t.n, .ldc = t.n,
                         .in = s_.dtype, .out = acc_, .trans_a = s_.a_transposed, .trans_b = s_.b_transposed,
                         .accumulate = !u.first},
             s_.gated ? l_.b[bslot] + static_cast<std::uint32_t>(t.n * k * size_) : 0, c_at + l_.c_bytes);
      if (u.last) finish(ph, r, r0, rows, c_at);
    }
  }
}

// Rows [r0, r0 + rows) of tile r complete in the accumulator at c_at: the epilogue in
// fp32 (scale, channel scale, bias, activation), one rounding to C's dtype (or a copy),
// a gated pair's product or the residual in C's dtype, and the store.
void CoreCode::finish(const Phase& ph, std::uint32_t r, std::uint32_t r0, std::uint32_t rows, std::uint32_t c_at) {
  const Tile& t = tiles_[ph.tile];
  const isa::DType f32 = isa::DType::fp32;
  if (s_.scale) {
    if (!scale_ready_) st_(wait_on(kBias));
    scale_ready_ = true;
    st_(isa::VBinary{.op = isa::BinaryOp::mul, .dtype = f32, .bcast = isa::Broadcast::scalar, .a = c_at, .b = l_.scale,
                     .dst = c_at, .rows = rows, .cols = t.n});
  }
  if (s_.bias) {
    if (!bias_ready_) {
      st_(wait_on(kBias));
      if (*s_.bias != f32) st_(isa::VConvert{.from = *s_.bias, .to = f32, .src = l_.bias_raw, .dst = l_.bias, .count = t.n});
      bias_ready_ = true;
    }
    if (s_.channel_scale) {
      st_(isa::VBinary{.op = isa::BinaryOp::mul, .dtype = f32, .bcast = isa::Broadcast::row, .a = c_at,
                       .b = l_.channel_scale, .dst = c_at, .rows = rows, .cols = t.n});
    }
    st_(isa::VBinary{.op = isa::BinaryOp::add, .dtype = f32, .bcast = isa::Broadcast::row, .a = c_at, .b = l_.bias,
                     .dst = c_at, .rows = rows, .cols = t.n});
  }
  if (s_.activation) {
    st_(isa::VUnary{.op = *s_.activation, .dtype = f32, .src = c_at, .dst = c_at, .count = rows * t.n});
  }
  const std::uint32_t out = rt_ == 1 ? l_.out + static_cast<std::uint32_t>(r0 * t.n * out_size_) : c_at;
  if (rt_ == 1 && store_pending_ && r0 == 0) st_(wait_on(kStore));
  round_to(st_, acc_, out_t_, c_at, out, rows * t.n);
  if (s_.gated) {  // * the up projection, rounded to C's dtype first as its own product is
    times_up(st_, out_t_, out, c_at + l_.c_bytes, l_.residual + static_cast<std::uint32_t>(r0 * t.n * out_size_), rows,
             t.n);
  }
  if (s_.residual) {
    if (!residual_ready_) st_(wait_on(kResidual));
    residual_ready_ = true;
    const std::uint32_t res = l_.residual + r * l_.residual_bytes + static_cast<std::uint32_t>(r0 * t.n * out_size_);
    st_(isa::VBinary{.op = s_.residual_op, .dtype = out_t_, .a = out, .b = res, .dst = out, .rows = rows, .cols = t.n});
  }
  const auto store = dma<isa::DmaStore>(static_cast<std::uint8_t>(kStore + (rt_ == 1 ? 0 : r)), out_t_, 2,
                                        t.batch * c_batch_ + (t.i0[r] + r0) * ldc_ + t.j0, out, t.n, rows,
                                        static_cast<std::int64_t>(ldc_));
  if (rt_ == 1 && ph.tile + 1 < tiles_.size()) {
    // Issued after the next block's first prefetch: the stores of a whole super-block at
    // once would otherwise hold up the loads the next needs.
    deferred_store_ = store;
    store_pending_ = true;
  } else {
    st_(store);
  }
}

void CoreCode::emit() {
  if (s_.scale) {  // (on the bias's token: the epilogue waits for both)
    st_(dma<isa::DmaLoad>(kBias, isa::DType::fp32, l_.scale_arg, 0, l_.scale, 1, 1, 1));
  }
  // A norm prologue: the first block's statistics before the first panels' loads (which
  // would otherwise hold the statistics' loads up, and nothing computes before they are
  // in); first, the norm's weight and bias, converted to fp32.
  if (s_.norm && !tiles_.empty()) {
    nr_.load_params(b_, stream_, kBias, l_.norm_arg, l_.norm_raw);
    norm_stats(tiles_[0]);
    norm_exchange(tiles_[0]);
  }
  // Prologue: the first B panel and the first A panel, and (both A slots being free) the
  // second A panel too, so the second matmul does not wait for a load issued only when
  // the first starts.
  load_b(0, 0);
  load_a(0, 0);
  load_a(1, 1);
  for (std::size_t pi = 0; pi < phases_.size(); ++pi) {
    const Phase& ph = phases_[pi];
    const Tile& t = tiles_[ph.tile];
    const bool tile_start = pi == 0 || phases_[pi - 1].tile != ph.tile;
    if (tile_start) tile_loads(t);
    if (!s_.norm) fetch_b(pi, tile_start);
    if (s_.norm && tile_start && t.new_rows && pi > 0) {
      norm_stats(t);
      norm_exchange(t);
    }
    multiply(pi, static_cast<std::uint32_t>(pi % 2));
  }
  st_(isa::Wait{.token_mask = kAllTokens});  // every load, ring transfer and store done
}

}  // namespace

std::vector<std::uint8_t> compile_matmul(const MatmulShape& s, const Target& target, const std::string& name) {
  const MatmulPlan p = plan_to_compile(s, target, name);
  const Layout l = layout_of(s, p, target);
  const Grid g(s, p);
  Chunks chunks;
  for (std::uint64_t k0 = 0; k0 < s.k; k0 += p.tk) {
    chunks.emplace_back(k0, static_cast<std::uint32_t>(std::min(p.tk, s.k - k0)));
  }
  isa::ProgramBuilder b(name, g.streams);
  for (std::uint32_t stream = 0; stream < g.streams; ++stream) {
    CoreCode(s, p, l, target, chunks, b, stream, core_tiles(s, p, g, chunks.size(), stream)).emit();
  }
  return b.build();
}

}  // namespace spyre::compiler
