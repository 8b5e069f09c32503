#include "compiler/matmul.h"

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <string>
#include <stdexcept>

#include "spyre/isa/program.h"

namespace spyre::compiler {
namespace {

std::uint64_t ceil_div(std::uint64_t a, std::uint64_t b) { return (a + b - 1) / b; }

template <class T>
T dma(std::uint8_t token, isa::DType dtype, std::uint16_t arg, std::uint64_t element_offset, std::uint32_t sp,
      std::uint32_t cols, std::uint32_t rows, std::int64_t row_stride) {
  T d;
  d.token = token;
  d.dtype = dtype;
  d.arg = arg;
  d.offset = element_offset * isa::dtype_size(dtype);
  d.sp_addr = sp;
  d.shape = {cols, rows, 1};
  d.mem_stride = {1, row_stride, 0};
  return d;
}

// Scratchpad bytes for tiles: A and B double-buffered, C in fp32, the output copy.
std::uint64_t footprint(std::uint64_t tm, std::uint64_t tn, std::uint64_t tk, std::uint64_t size) {
  return 2 * (tm * tk + tk * tn) * size + tm * tn * 4 + tm * tn * size;
}

// Panels move in kParts pieces (by rows), so a core forwards the first piece while the
// second is still arriving: the pipeline's start-up skew along a chain of cores halves.
constexpr std::uint32_t kParts = 2;
// Token numbers: DMA loads of A / B pieces into slot s, ring transfers of A / B out of
// slot s, the store of C.
constexpr std::uint8_t kDmaA = 0, kDmaB = 4, kRingA = 8, kRingB = 10, kStore = 12;
constexpr std::uint16_t kAllTokens = 0x1fff;
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
  for (const std::uint64_t t : {256ull, 128ull, 64ull, 32ull, 16ull, 8ull}) {
    const std::uint64_t tm = std::min(t, s.m), tn = std::min(t, s.n);
    std::uint64_t tk = 0;
    for (const std::uint64_t c : {512ull, 256ull, 128ull, 64ull, 32ull, 16ull, 8ull}) {
      if (footprint(tm, tn, std::min(c, s.k), size) <= target.scratchpad_bytes) {
        tk = std::min(c, s.k);
        break;
      }
    }
    if (tk == 0) continue;
    const std::uint64_t tiles_m = ceil_div(s.m, tm), tiles_n = ceil_div(s.n, tn);
    const auto cores = std::max<std::uint32_t>(1, target.cores);
    for (std::uint32_t gr = 1; gr <= std::min<std::uint64_t>(cores, tiles_m); ++gr) {
      for (std::uint32_t gc = 1; gc <= std::min<std::uint64_t>(cores / gr, tiles_n); ++gc) {
        const std::uint32_t groups = cores / (gr * gc);
        const std::uint64_t sb = s.batch * ceil_div(tiles_m, gr) * ceil_div(tiles_n, gc);
        const std::uint64_t waves = ceil_div(sb, groups);
        // Per wave every core multiplies one tm x tn tile over K; the systolic array's
        // fill and drain cost (R + C - 2 = 14 cycles per fold on 8x8) against
        // ceil(tk / 8) cycles of streaming makes short K chunks slower.
        const double stream = static_cast<double>(ceil_div(tk, 8));
        const double compute = static_cast<double>(waves * tm * tn * s.k) * (stream + 14) / stream;
        const std::uint64_t read =
            sb * (std::min<std::uint64_t>(gr * tm, s.m) + std::min<std::uint64_t>(gc * tn, s.n)) * s.k * size;
        const std::uint64_t bytes = read + s.batch * s.m * s.n * size;
        double time = compute;
        if (target.core_macs_per_s > 0 && target.dram_bytes_per_s > 0) {
          // Overlap is never perfect: charge a part of the shorter of the two as well,
          // so among compute-bound plans the one moving fewer bytes wins.
          const double c = compute / target.core_macs_per_s;
          const double d = static_cast<double>(bytes) / target.dram_bytes_per_s;
          time = std::max(c, d) + 0.15 * std::min(c, d);
        }
        if (best_time < 0 || time < best_time * 0.999) {
          best_time = time;
          best = MatmulPlan{tm, tn, tk, gr, gc, groups, sb, read};
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
  const auto a_bytes = static_cast<std::uint32_t>(p.tm * p.tk * size);
  const auto b_bytes = static_cast<std::uint32_t>(p.tk * p.tn * size);
  const std::uint32_t sp_a[2] = {0, a_bytes}, sp_b[2] = {2 * a_bytes, 2 * a_bytes + b_bytes};
  const std::uint32_t sp_c = 2 * a_bytes + 2 * b_bytes;
  const std::uint32_t sp_o = sp_c + static_cast<std::uint32_t>(p.tm * p.tn * 4);

  const std::uint64_t tiles_m = ceil_div(s.m, p.tm), tiles_n = ceil_div(s.n, p.tn);
  const std::uint64_t sb_m = ceil_div(tiles_m, p.grid_rows), sb_n = ceil_div(tiles_n, p.grid_cols);
  const std::uint32_t group_size = p.grid_rows * p.grid_cols;
  const std::uint32_t streams = group_size * static_cast<std::uint32_t>(std::min<std::uint64_t>(p.groups, p.super_blocks));
  const std::uint64_t a_ld = s.a_transposed ? s.m : s.k, b_ld = s.b_transposed ? s.k : s.n;
  isa::ProgramBuilder b(name, streams);
  // A tile of one core: where its panels come from (DRAM or a neighbour's ring
  // message) and where it passes them on.
  static constexpr std::uint16_t kNone = isa::RingRecv::kNoForward;
  struct Tile {
    std::uint64_t batch = 0, i0 = 0, j0 = 0;
    std::uint32_t m = 0, n = 0;
    bool a_loader = false, b_loader = false;
    std::uint16_t a_from = kNone, a_to = kNone, b_from = kNone, b_to = kNone;
    std::vector<std::pair<std::uint64_t, std::uint32_t>> chunks;  // K steps: (k0, k)
  };
  // K steps of tk (a short first or last step, to start computing sooner or finish
  // sooner, measured slower: 2048^3 326 and 318 us against 314 us).
  const auto chunks = [&] {
    std::vector<std::pair<std::uint64_t, std::uint32_t>> c;
    for (std::uint64_t k0 = 0; k0 < s.k; k0 += p.tk) {
      c.emplace_back(k0, static_cast<std::uint32_t>(std::min(p.tk, s.k - k0)));
    }
    return c;
  }();
  for (std::uint32_t stream = 0; stream < streams; ++stream) {
    const std::uint32_t group = stream / group_size, i = (stream % group_size) / p.grid_cols,
                        j = stream % p.grid_cols;
    const auto at = [&](std::uint32_t r, std::uint32_t c) {
      return static_cast<std::uint16_t>(group * group_size + r * p.grid_cols + c);
    };
    // This core's tiles, one per super-block of its group that reaches it.
    std::vector<Tile> tiles;
    for (std::uint64_t sb = group; sb < p.super_blocks; sb += p.groups) {
      const std::uint64_t si = (sb / sb_n) % sb_m, sj = sb % sb_n;
      const auto rows = static_cast<std::uint32_t>(std::min<std::uint64_t>(p.grid_rows, tiles_m - si * p.grid_rows));
      const auto cols = static_cast<std::uint32_t>(std::min<std::uint64_t>(p.grid_cols, tiles_n - sj * p.grid_cols));
      if (i >= rows || j >= cols) continue;  // this super-block's edge: no tile here
      Tile t;
      t.batch = sb / (sb_m * sb_n);
      t.i0 = (si * p.grid_rows + i) * p.tm;
      t.j0 = (sj * p.grid_cols + j) * p.tn;
      t.m = static_cast<std::uint32_t>(std::min(p.tm, s.m - t.i0));
      t.n = static_cast<std::uint32_t>(std::min(p.tn, s.n - t.j0));
      // A travels left to right along a grid row (adjacent cores on the ring), B down a
      // grid column. (Sending B up on every other column, to use both directions of
      // the links between grid rows, measured slower: 2048^3 364 us against 310 us.)
      t.a_loader = j == 0;
      t.a_from = j > 0 ? at(i, j - 1) : kNone;
      t.a_to = j + 1 < cols ? at(i, j + 1) : kNone;
      t.b_loader = i == 0;
      t.b_from = i > 0 ? at(i - 1, j) : kNone;
      t.b_to = i + 1 < rows ? at(i + 1, j) : kNone;
      t.chunks = chunks;
      tiles.push_back(t);
    }
    // Loads of step `step` of tile `t` into `slot`, once the slot's last ring transfer
    // (which reads it) is done.
    // The A and B panels of a tile's K step, as stored in the scratchpad.
    const auto a_panel = [&](const Tile& t, std::uint64_t step) {
      const auto [k0, k] = t.chunks[step];
      const std::uint64_t base = t.batch * s.a_batch_stride;
      return s.a_transposed ? Panel{t.m, k, base + k0 * s.m + t.i0, a_ld} : Panel{k, t.m, base + t.i0 * s.k + k0, a_ld};
    };
    const auto b_panel = [&](const Tile& t, std::uint64_t step) {
      const auto [k0, k] = t.chunks[step];
      const std::uint64_t base = t.batch * s.b_batch_stride;
      return s.b_transposed ? Panel{k, t.n, base + t.j0 * s.k + k0, b_ld} : Panel{t.n, k, base + k0 * s.n + t.j0, b_ld};
    };
    const auto load = [&](const Tile& t, std::uint64_t step, std::uint32_t slot) {
      const auto pieces = [&](const Panel& pn, std::uint8_t token_base, std::uint16_t arg, std::uint32_t sp) {
        for (std::uint32_t part = 0; part < kParts; ++part) {
          const std::uint32_t r0 = pn.row_start(part), r1 = pn.row_start(part + 1);
          if (r1 == r0) continue;
          b.add(stream, dma<isa::DmaLoad>(dma_token(token_base, slot, part), s.dtype, arg, pn.first + r0 * pn.ld,
                                          sp + static_cast<std::uint32_t>(r0 * pn.cols * size), pn.cols, r1 - r0,
                                          static_cast<std::int64_t>(pn.ld)));
        }
      };
      if (t.a_loader) {
        b.add(stream, isa::Wait{.token_mask = bit(kRingA + slot)});
        pieces(a_panel(t, step), kDmaA, 0, sp_a[slot]);
      }
      if (t.b_loader) {
        b.add(stream, isa::Wait{.token_mask = bit(kRingB + slot)});
        pieces(b_panel(t, step), kDmaB, 1, sp_b[slot]);
      }
    };
    std::uint64_t slot_counter = 0;
    bool store_pending = false;
    std::optional<isa::DmaStore> deferred_store;
    if (!tiles.empty()) load(tiles[0], 0, 0);
    for (std::size_t ti = 0; ti < tiles.size(); ++ti) {
      const Tile& t = tiles[ti];
      const std::uint64_t steps = t.chunks.size();
      for (std::uint64_t step = 0; step < steps; ++step, ++slot_counter) {
        const auto slot = static_cast<std::uint32_t>(slot_counter % 2), next = 1 - slot;
        const std::uint32_t k = t.chunks[step].second;
        // A for this step: from DRAM (loader) or from the left neighbour, passed on
        // right; B from DRAM or from the neighbour above, passed down. Piece by piece.
        const auto fetch = [&](bool loader, const Panel& pn, std::uint8_t dma_base, std::uint8_t ring_token,
                               std::uint16_t from, std::uint16_t to, std::uint16_t tag, std::uint32_t sp) {
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
        // Operands this core loads first, then the next step's loads, then the
        // operands it receives: a loader never waits for a neighbour to issue its DMA.
        if (t.a_loader) {
          fetch(true, a_panel(t, step), kDmaA, static_cast<std::uint8_t>(kRingA + slot), t.a_from, t.a_to, 0, sp_a[slot]);
        }
        if (t.b_loader) {
          fetch(true, b_panel(t, step), kDmaB, static_cast<std::uint8_t>(kRingB + slot), t.b_from, t.b_to, 1, sp_b[slot]);
        }
        // Prefetch the next step (of this tile, or the first of the next tile) into the
        // other slot while this one computes.
        if (step + 1 < steps) {
          load(t, step + 1, next);
        } else if (ti + 1 < tiles.size()) {
          load(tiles[ti + 1], 0, next);
        }
        if (step == 0 && deferred_store) {  // the previous tile's result
          b.add(stream, *deferred_store);
          deferred_store.reset();
        }
        if (!t.a_loader) {
          fetch(false, a_panel(t, step), kDmaA, static_cast<std::uint8_t>(kRingA + slot), t.a_from, t.a_to, 0, sp_a[slot]);
        }
        if (!t.b_loader) {
          fetch(false, b_panel(t, step), kDmaB, static_cast<std::uint8_t>(kRingB + slot), t.b_from, t.b_to, 1, sp_b[slot]);
        }
        b.add(stream, isa::Matmul{.a = sp_a[slot], .b = sp_b[slot], .c = sp_c, .m = t.m, .n = t.n, .k = k,
                                  .lda = s.a_transposed ? t.m : k, .ldb = s.b_transposed ? k : t.n, .ldc = t.n,
                                  .in = s.dtype, .out = isa::DType::fp32, .trans_a = s.a_transposed,
                                  .trans_b = s.b_transposed, .accumulate = step > 0});
      }
      // The result goes to its own buffer (converted, or copied for fp32) and its
      // store is issued only after the next tile's first prefetch: the stores of a
      // whole super-block at once would otherwise hold up the loads the next one
      // needs (measured neutral on 2048^3 and 4096^3; kept as the
      // order a real DMA scheduler would want).
      if (store_pending) b.add(stream, isa::Wait{.token_mask = bit(kStore)});
      if (s.dtype != isa::DType::fp32) {
        b.add(stream, isa::VConvert{.from = isa::DType::fp32, .to = s.dtype, .src = sp_c, .dst = sp_o,
                                    .count = t.m * t.n});
      } else {
        b.add(stream, isa::VUnary{.op = isa::UnaryOp::copy, .dtype = s.dtype, .src = sp_c, .dst = sp_o,
                                  .count = t.m * t.n});
      }
      deferred_store = dma<isa::DmaStore>(kStore, s.dtype, 2, t.batch * s.m * s.n + t.i0 * s.n + t.j0, sp_o, t.n, t.m,
                                          static_cast<std::int64_t>(s.n));
      store_pending = true;
      if (ti + 1 == tiles.size()) b.add(stream, *deferred_store);
    }
    b.add(stream, isa::Wait{.token_mask = kAllTokens});  // every load, ring transfer and store done
  }
  return b.build();
}

}  // namespace spyre::compiler
