#include "compiler/matmul.h"

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <string>
#include <stdexcept>

#include "compiler/dma.h"
#include "spyre/isa/program.h"

namespace spyre::compiler {
namespace {

std::uint64_t ceil_div(std::uint64_t a, std::uint64_t b) { return (a + b - 1) / b; }

// A 2-D DMA: `rows` rows of `cols` elements, rows `row_stride` elements apart.
template <class T>
T dma(std::uint8_t token, isa::DType dtype, std::uint16_t arg, std::uint64_t element_offset, std::uint32_t sp,
      std::uint32_t cols, std::uint32_t rows, std::int64_t row_stride) {
  return make_dma<T>(token, dtype, arg, element_offset * isa::dtype_size(dtype), sp, {cols, rows, 1},
                     {1, row_stride, 0});
}

// Scratchpad bytes: A and B panels double-buffered, rt accumulators in fp32, and (one
// tile per core) a separate output buffer; with two tiles per core each accumulator
// is converted in place.
std::uint64_t footprint(std::uint64_t tm, std::uint64_t tn, std::uint64_t tk, std::uint64_t size, std::uint32_t rt = 1) {
  return 2 * (tm * tk + tk * tn) * size + rt * tm * tn * 4 + (rt == 1 ? tm * tn * size : 0);
}

// Panels move in kParts pieces (by rows), so a core forwards the first piece while the
// second is still arriving: the pipeline's start-up skew along a chain of cores halves.
constexpr std::uint32_t kParts = 2;
// Token numbers: DMA loads of A / B pieces into slot s, ring transfers of A / B out of
// slot s, the store of C.
constexpr std::uint8_t kDmaA = 0, kDmaB = 4, kRingA = 8, kRingB = 10, kStore = 12;  // store of C[r]: 12 + r
constexpr std::uint16_t kAllTokens = 0x3fff;
std::uint8_t dma_token(std::uint8_t base, std::uint32_t slot, std::uint32_t part) {
  return static_cast<std::uint8_t>(base + slot * kParts + part);
}

// A panel in the scratchpad: `rows` rows of `cols` elements, row r of which comes
// from element offset first + r * ld of the operand.
struct Panel {
  std::uint32_t cols = 0, rows = 0;
  std::uint64_t first = 0, ld = 0;
  std::uint32_t row_start(std::uint32_t part) const { return rows * part / kParts; }
};
std::uint16_t bit(std::uint32_t token) { return static_cast<std::uint16_t>(1u << token); }

}  // namespace

MatmulPlan plan_matmul(const MatmulShape& s, const Target& target) {
  const std::uint64_t size = isa::dtype_size(s.dtype);
  MatmulPlan best;
  double best_time = -1;
  for (const std::uint32_t rt : {1u, 2u}) {
    for (const std::uint64_t t : {256ull, 128ull, 64ull, 32ull, 16ull, 8ull}) {
      const std::uint64_t tm = std::min(t, s.m), tn = std::min(t, s.n);
      const std::uint64_t tiles_m = ceil_div(s.m, tm), tiles_n = ceil_div(s.n, tn);
      if (rt == 2 && tiles_m < 2) continue;
      std::uint64_t tk = 0;
      for (const std::uint64_t c : {512ull, 256ull, 128ull, 64ull, 32ull, 16ull, 8ull}) {
        if (footprint(tm, tn, std::min(c, s.k), size, rt) <= target.scratchpad_bytes) {
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
          // fill and drain cost (R + C - 2 = 14 cycles per fold on 8x8) against
          // ceil(tk / 8) cycles of streaming makes short K chunks slower.
          const double stream = static_cast<double>(ceil_div(tk, 8));
          const double compute = static_cast<double>(waves * rt * tm * tn * s.k) * (stream + 14) / stream;
          const std::uint64_t read = sb * (std::min<std::uint64_t>(gr * rt * tm, s.m) +
                                           std::min<std::uint64_t>(gc * tn, s.n)) * s.k * size;
          const std::uint64_t bytes = read + s.batch * s.m * s.n * size;
          double time = compute;
          if (target.core_macs_per_s > 0 && target.dram_bytes_per_s > 0) {
            // Overlap is never perfect: charge a part of the shorter of the two as well,
            // so among compute-bound plans the one moving fewer bytes wins. In-place
            // accumulators (rt 2) wait for their stores between waves.
            const double c = compute / target.core_macs_per_s;
            const double d = static_cast<double>(bytes) / target.dram_bytes_per_s;
            const double stall = rt == 2 ? static_cast<double>((waves - 1) * std::min<std::uint64_t>(groups, sb) * gr *
                                                               gc * tm * tn * size) / target.dram_bytes_per_s
                                         : 0.0;
            time = std::max(c, d) + 0.15 * std::min(c, d) + stall;
          }
          if (best_time < 0 || time < best_time * 0.999) {
            best_time = time;
            best = MatmulPlan{tm, tn, tk, rt, gr, gc, groups, sb, read};
          }
        }
      }
    }
  }
  return best;
}

std::vector<std::uint8_t> compile_matmul(const MatmulShape& s, const Target& target, const std::string& name) {
  const std::uint64_t size = isa::dtype_size(s.dtype);
  const MatmulPlan p = plan_matmul(s, target);
  if (p.tm == 0) {
    throw std::invalid_argument(name + " " + std::to_string(s.m) + "x" + std::to_string(s.n) + "x" +
                                std::to_string(s.k) + ": the smallest tiling needs " +
                                std::to_string(footprint(std::min<std::uint64_t>(8, s.m), std::min<std::uint64_t>(8, s.n),
                                                         std::min<std::uint64_t>(8, s.k), size)) +
                                " bytes of scratchpad, the device has " + std::to_string(target.scratchpad_bytes));
  }
  const std::uint32_t rt = p.rows_per_core;
  const auto a_bytes = static_cast<std::uint32_t>(p.tm * p.tk * size);
  const auto b_bytes = static_cast<std::uint32_t>(p.tk * p.tn * size);
  const auto c_bytes = static_cast<std::uint32_t>(p.tm * p.tn * 4);
  const std::uint32_t sp_a[2] = {0, a_bytes}, sp_b[2] = {2 * a_bytes, 2 * a_bytes + b_bytes};
  const std::uint32_t sp_c[2] = {2 * a_bytes + 2 * b_bytes, 2 * a_bytes + 2 * b_bytes + c_bytes};
  // One tile per core: the result is converted into its own buffer, so the next
  // tile's first matmul need not wait for the store. Two: in place.
  const std::uint32_t sp_o = rt == 1 ? sp_c[0] + c_bytes : 0;

  const std::uint64_t tiles_m = ceil_div(s.m, p.tm), tiles_n = ceil_div(s.n, p.tn);
  const std::uint64_t row_blocks = ceil_div(tiles_m, rt);
  const std::uint64_t sb_m = ceil_div(row_blocks, p.grid_rows), sb_n = ceil_div(tiles_n, p.grid_cols);
  const std::uint32_t group_size = p.grid_rows * p.grid_cols;
  const std::uint32_t streams = group_size * static_cast<std::uint32_t>(std::min<std::uint64_t>(p.groups, p.super_blocks));
  const std::uint64_t a_ld = s.a_transposed ? s.m : s.k, b_ld = s.b_transposed ? s.k : s.n;
  isa::ProgramBuilder b(name, streams);
  // A block of one core: rt tiles stacked along M sharing their B panels; where its
  // panels come from (DRAM or a neighbour's ring message) and where it passes them on.
  static constexpr std::uint16_t kNone = isa::RingRecv::kNoForward;
  struct Tile {
    std::uint64_t batch = 0, j0 = 0;
    std::uint64_t i0[2] = {0, 0};
    std::uint32_t m[2] = {0, 0}, n = 0;
    std::uint32_t rows = 1;  // tiles of the block inside the matrix (1 or 2)
    bool a_loader = false, b_loader = false;
    std::uint16_t a_from = kNone, a_to = kNone, b_from = kNone, b_to = kNone;
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
      tiles.push_back(t);
    }
    // The A and B panels of a block's K step, as stored in the scratchpad.
    const auto a_panel = [&](const Tile& t, std::uint64_t step, std::uint32_t r) {
      const auto [k0, k] = chunks[step];
      const std::uint64_t base = t.batch * s.a_batch_stride;
      return s.a_transposed ? Panel{t.m[r], k, base + k0 * s.m + t.i0[r], a_ld}
                            : Panel{k, t.m[r], base + t.i0[r] * s.k + k0, a_ld};
    };
    const auto b_panel = [&](const Tile& t, std::uint64_t step) {
      const auto [k0, k] = chunks[step];
      const std::uint64_t base = t.batch * s.b_batch_stride;
      return s.b_transposed ? Panel{k, t.n, base + t.j0 * s.k + k0, b_ld} : Panel{t.n, k, base + k0 * s.n + t.j0, b_ld};
    };
    // A loader's DMAs of a panel into `slot`, in pieces, once the slot's last ring
    // transfer (which reads it) is done.
    const auto load = [&](const Panel& pn, std::uint8_t dma_base, std::uint8_t ring_base, std::uint16_t arg,
                          std::uint32_t sp, std::uint32_t slot) {
      b.add(stream, isa::Wait{.token_mask = bit(ring_base + slot)});
      for (std::uint32_t part = 0; part < kParts; ++part) {
        const std::uint32_t r0 = pn.row_start(part), r1 = pn.row_start(part + 1);
        if (r1 == r0) continue;
        b.add(stream, dma<isa::DmaLoad>(dma_token(dma_base, slot, part), s.dtype, arg, pn.first + r0 * pn.ld,
                                        sp + static_cast<std::uint32_t>(r0 * pn.cols * size), pn.cols, r1 - r0,
                                        static_cast<std::int64_t>(pn.ld)));
      }
    };
    // The panel of this step: a loader waits for its DMA and sends it on; a receiver
    // takes it from its neighbour (forwarding it). Piece by piece.
    const auto fetch = [&](bool loader, const Panel& pn, std::uint8_t dma_base, std::uint8_t ring_token,
                           std::uint16_t from, std::uint16_t to, std::uint16_t tag, std::uint32_t sp,
                           std::uint32_t slot) {
      if (!loader) b.add(stream, isa::Wait{.token_mask = bit(ring_token)});  // the slot's last forward
      const auto row_bytes = static_cast<std::uint32_t>(pn.cols * size);
      for (std::uint32_t part = 0; part < kParts; ++part) {
        const std::uint32_t r0 = pn.row_start(part), r1 = pn.row_start(part + 1);
        if (r1 == r0) continue;
        const std::uint32_t at_sp = sp + r0 * row_bytes, bytes = (r1 - r0) * row_bytes;
        if (loader) {
          b.add(stream, isa::Wait{.token_mask = bit(dma_token(dma_base, slot, part))});
          if (to != kNone) {
            b.add(stream, isa::RingSend{.token = ring_token, .dst_core = to, .tag = tag, .sp_addr = at_sp,
                                        .bytes = bytes});
          }
        } else {
          b.add(stream, isa::RingRecv{.token = ring_token, .src_core = from, .tag = tag, .forward_to = to,
                                      .sp_addr = at_sp, .bytes = bytes});
        }
      }
    };
    // The A panels in the order they are used: (block, step, row); slots alternate.
    struct Use {
      std::size_t tile;
      std::uint64_t step;
      std::uint32_t r;
    };
    const auto next_a = [&](Use u) -> std::optional<Use> {
      if (u.r + 1 < tiles[u.tile].rows) return Use{u.tile, u.step, u.r + 1};
      if (u.step + 1 < steps) return Use{u.tile, u.step + 1, 0};
      if (u.tile + 1 < tiles.size()) return Use{u.tile + 1, 0, 0};
      return std::nullopt;
    };
    const auto load_a = [&](Use u, std::uint32_t slot) {
      if (tiles[u.tile].a_loader) load(a_panel(tiles[u.tile], u.step, u.r), kDmaA, kRingA, 0, sp_a[slot], slot);
    };
    const auto load_b = [&](std::size_t ti, std::uint64_t step, std::uint32_t slot) {
      if (tiles[ti].b_loader) load(b_panel(tiles[ti], step), kDmaB, kRingB, 1, sp_b[slot], slot);
    };
    std::uint64_t a_uses = 0, b_uses = 0;
    bool store_pending = false;
    std::optional<isa::DmaStore> deferred_store;
    // Prologue: the first B panel and the first A panel, and (both A slots being free)
    // the second A panel too, so the second matmul does not wait for a load issued
    // only when the first starts.
    std::optional<Use> preloaded;
    if (!tiles.empty()) {
      load_b(0, 0, 0);
      load_a(Use{0, 0, 0}, 0);
      preloaded = next_a(Use{0, 0, 0});
      if (preloaded) load_a(*preloaded, 1);
    }
    for (std::size_t ti = 0; ti < tiles.size(); ++ti) {
      const Tile& t = tiles[ti];
      for (std::uint64_t step = 0; step < steps; ++step) {
        const auto bslot = static_cast<std::uint32_t>(b_uses++ % 2);
        const std::uint32_t k = chunks[step].second;
        // B: a loader's own panel first, then the next step's B load, then a receiver's.
        if (t.b_loader) fetch(true, b_panel(t, step), kDmaB, kRingB + bslot, t.b_from, t.b_to, 1, sp_b[bslot], bslot);
        if (step + 1 < steps) {
          load_b(ti, step + 1, 1 - bslot);
        } else if (ti + 1 < tiles.size()) {
          load_b(ti + 1, 0, 1 - bslot);
        }
        if (step == 0 && deferred_store) {  // the previous block's result (one tile per core)
          b.add(stream, *deferred_store);
          deferred_store.reset();
        }
        if (!t.b_loader) fetch(false, b_panel(t, step), kDmaB, kRingB + bslot, t.b_from, t.b_to, 1, sp_b[bslot], bslot);
        for (std::uint32_t r = 0; r < t.rows; ++r) {
          const auto aslot = static_cast<std::uint32_t>(a_uses++ % 2);
          const Panel ap = a_panel(t, step, r);
          if (t.a_loader) fetch(true, ap, kDmaA, kRingA + aslot, t.a_from, t.a_to, 0, sp_a[aslot], aslot);
          if (a_uses > 1 || !preloaded) {
            if (const auto nxt = next_a(Use{ti, step, r})) load_a(*nxt, 1 - aslot);
          }
          if (!t.a_loader) fetch(false, ap, kDmaA, kRingA + aslot, t.a_from, t.a_to, 0, sp_a[aslot], aslot);
          const std::uint32_t c = rt == 1 ? sp_c[0] : sp_c[r];
          // In place (two tiles per core): the accumulator's last store must be done.
          if (rt == 2 && step == 0 && ti > 0) b.add(stream, isa::Wait{.token_mask = bit(kStore + r)});
          b.add(stream, isa::Matmul{.a = sp_a[aslot], .b = sp_b[bslot], .c = c, .m = t.m[r], .n = t.n, .k = k,
                                    .lda = s.a_transposed ? t.m[r] : k, .ldb = s.b_transposed ? k : t.n, .ldc = t.n,
                                    .in = s.dtype, .out = isa::DType::fp32, .trans_a = s.a_transposed,
                                    .trans_b = s.b_transposed, .accumulate = step > 0});
          if (step + 1 < steps) continue;
          // The tile is complete: convert (or copy, fp32) and store.
          const std::uint32_t out = rt == 1 ? sp_o : c;
          if (rt == 1 && store_pending) b.add(stream, isa::Wait{.token_mask = bit(kStore)});
          if (s.dtype != isa::DType::fp32) {
            b.add(stream, isa::VConvert{.from = isa::DType::fp32, .to = s.dtype, .src = c, .dst = out,
                                        .count = t.m[r] * t.n});
          } else if (out != c) {
            b.add(stream, isa::VUnary{.op = isa::UnaryOp::copy, .dtype = s.dtype, .src = c, .dst = out,
                                      .count = t.m[r] * t.n});
          }
          const auto store = dma<isa::DmaStore>(static_cast<std::uint8_t>(kStore + (rt == 1 ? 0 : r)), s.dtype, 2,
                                                t.batch * s.m * s.n + t.i0[r] * s.n + t.j0, out, t.n, t.m[r],
                                                static_cast<std::int64_t>(s.n));
          if (rt == 1 && ti + 1 < tiles.size()) {
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
