#include "compiler/cost.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "spyre/checked.h"
#include "spyre/cost/channels.h"
#include "spyre/cost/systolic.h"

namespace spyre::compiler {
namespace {

// Seconds for `read` and `written` bytes of DRAM traffic (with the read/write
// turnaround) against one core's vector work on `vector_elements_per_core` (elements x
// cycles per vector of its operations), overlapped by double buffering, plus the
// latencies of the first load and the last store.
double streaming_s(double read, double written, double vector_elements_per_core, const Target& t) {
  if (t.dram_bytes_per_s <= 0 || t.vector_elements_per_s <= 0) return 0;
  const double dram = t.dram_s(read, written);
  const double vector = vector_elements_per_core / t.vector_elements_per_s;
  return std::max(dram, vector) + 2 * (t.dma_setup_s + t.dram_latency_s);
}

// DRAM bytes the chip charges for `rows` rows of `row_bytes` each, the first at byte
// `first` and the rest `pitch` bytes apart, in panels of `panel_rows` rows (the last
// maybe fewer), each moved in `pieces` DMAs split where compile_matmul splits them (row
// P x part / pieces of a panel of P rows): each row pays the whole sticks it spans,
// except those the same DMA's previous row already fetched (a row starting in its last
// stick pays only the sticks after).
double row_sticks(std::uint64_t rows, std::uint64_t row_bytes, std::uint64_t first, std::uint64_t pitch,
                  std::uint64_t stick, std::uint64_t panel_rows, std::uint32_t pieces,
                  std::vector<double>* channels = nullptr, std::uint64_t granule = 0, bool skewed = false) {
  if (rows == 0 || row_bytes == 0) return 0;
  stick = std::max<std::uint64_t>(1, stick);
  panel_rows = std::max<std::uint64_t>(1, panel_rows);
  pieces = std::max<std::uint32_t>(1, pieces);
  const auto starts_dma = [&](std::uint64_t r) {
    const std::uint64_t local = r % panel_rows, size = std::min(panel_rows, rows - (r - local));
    for (std::uint32_t part = 0; part < pieces; ++part) {
      if (local == size * part / pieces) return true;
    }
    return false;
  };
  std::uint64_t bytes = 0, held_to = 0;
  for (std::uint64_t r = 0; r < rows; ++r) {
    const std::uint64_t at = first + r * pitch;
    const std::uint64_t s0 = at / stick * stick, s1 = ceil_div(at + row_bytes, stick) * stick;
    const bool continues = !starts_dma(r) && s0 < held_to;
    const std::uint64_t from = continues ? std::min(held_to, s1) : s0;
    bytes += s1 - from;
    if (channels != nullptr && !channels->empty() && granule > 0) {
      const auto n = static_cast<std::uint32_t>(channels->size());
      for (std::uint64_t x = from; x < s1; x += stick) {
        (*channels)[cost::dram_channel(x / granule, n, skewed)] += static_cast<double>(stick);
      }
    }
    held_to = s1;
  }
  return static_cast<double>(bytes);
}

}  // namespace

double predict_pointwise_s(const PointwiseKernel& k, const Target& t) {
  double elements = 1;
  for (const auto d : k.shape) elements *= static_cast<double>(d);
  const double written = elements * isa::dtype_size(k.output.dtype);
  double read = 0;
  for (const auto& in : k.inputs) read += elements * isa::dtype_size(in.dtype);
  // Each step is one vector pass (at its op's cost); conversions to and from the step
  // dtype one more each.
  double passes = 0;
  for (const auto& s : k.steps) {
    switch (s.kind) {
      case Step::Kind::unary: passes += t.op_cycles(isa::vector_cost(static_cast<isa::UnaryOp>(s.op))); break;
      case Step::Kind::binary: passes += t.op_cycles(isa::vector_cost(static_cast<isa::BinaryOp>(s.op))); break;
      case Step::Kind::compare: passes += t.op_cycles(isa::VectorCost::compare); break;
      case Step::Kind::select: passes += t.op_cycles(isa::VectorCost::select); break;
      case Step::Kind::convert: passes += t.op_cycles(isa::VectorCost::convert); break;
    }
  }
  for (const auto& in : k.inputs) passes += in.dtype != k.output.dtype ? t.op_cycles(isa::VectorCost::convert) : 0;
  // Each distribution drawn: one vrandom pass per tile.
  if (k.draws(isa::RandomDist::uniform)) passes += t.op_cycles(isa::VectorCost::random);
  if (k.draws(isa::RandomDist::normal)) passes += t.op_cycles(isa::VectorCost::random_normal);
  return streaming_s(read, written, elements / std::max<double>(1, t.cores) * passes, t);
}

double predict_softmax_s(const SoftmaxShape& s, const Target& t) {
  const double elements = static_cast<double>(s.rows) * static_cast<double>(s.cols);
  const double read = elements * isa::dtype_size(s.in), written = elements * isa::dtype_size(s.out);
  // max, x - max, exp, sum, divide (log_softmax: log and subtract instead), the
  // conversions in and out.
  using C = isa::VectorCost;
  double passes = t.op_cycles(C::reduce) + t.op_cycles(C::sub) + t.op_cycles(C::exp) + t.op_cycles(C::reduce) +
                  (s.log ? t.op_cycles(C::sub) : t.op_cycles(C::div));
  if (s.in != isa::DType::fp32) passes += t.op_cycles(isa::VectorCost::convert);
  if (s.out != isa::DType::fp32) passes += t.op_cycles(isa::VectorCost::convert);
  return streaming_s(read, written, elements / std::max<double>(1, t.cores) * passes, t);
}

double predict_matmul_s(const MatmulShape& s, const MatmulPlan& p, const Target& t) {
  if (t.clock_hz <= 0 || t.dram_bytes_per_s <= 0 || p.tm == 0 || t.array_rows == 0 || t.array_cols == 0) return 0;
  const double size = isa::dtype_size(s.dtype);
  const std::uint64_t depth = t.depth(s.dtype);
  const std::uint64_t tm = std::min(p.tm, s.m), tn = std::min(p.tn, s.n);
  const std::uint64_t steps = ceil_div(s.k, p.tk), last_k = s.k - (steps - 1) * p.tk;
  const auto cycles = [&](std::uint64_t k) {
    return static_cast<double>(cost::core_matmul_cycles(t.dataflow, t.array_rows, t.array_cols, t.corelets, depth, tm, tn, k));
  };
  // One super-block on one core: rt tiles, every K step.
  const double compute = p.rows_per_core * ((steps - 1) * cycles(p.tk) + cycles(last_k)) / t.clock_hz;
  // The super-blocks running at once read their panels and write their tiles.
  const std::uint64_t rows_u = std::min<std::uint64_t>(std::uint64_t{p.grid_rows} * p.rows_per_core * tm, s.m);
  const std::uint64_t cols_u = std::min<std::uint64_t>(std::uint64_t{p.grid_cols} * tn, s.n);
  // The panels of one super-block as the chip charges them: each stored row of a panel
  // whole sticks (a row pitch that is not a multiple of the stick makes rows straddle
  // one more). Offsets from an operand's (stick-aligned) start.
  const std::uint64_t isize = isa::dtype_size(s.dtype);
  const std::uint64_t a_ld = (s.lda != 0 ? s.lda : s.a_transposed ? s.m : s.k) * isize;
  const std::uint64_t b_ld = (s.ldb != 0 ? s.ldb : s.b_transposed ? s.k : s.n) * isize;
  const std::uint64_t stick_u = std::max<std::uint32_t>(1, t.stick_bytes);
  // A panel moves in kPanelPieces DMAs of rows.
  constexpr std::uint32_t pieces = kPanelPieces;
  double a_bytes = 0, b_bytes = 0;
  // Each K step's bytes per DRAM channel (spyre/cost/channels.h).
  std::vector<std::vector<double>> per_step(steps, std::vector<double>(t.dram_channels, 0.0));
  for (std::uint64_t step = 0; step < steps; ++step) {
    const std::uint64_t k0 = step * p.tk, kk = step + 1 < steps ? p.tk : last_k;
    auto* ch = &per_step[step];
    const std::uint64_t g = t.dram_interleave_bytes;
    const bool sk = t.dram_channels_skewed;
    if (s.a_transposed) {  // K rows of each tile's tm columns
      for (std::uint64_t i0 = 0; i0 < rows_u; i0 += tm) {
        a_bytes += row_sticks(kk, std::min(tm, rows_u - i0) * isize, k0 * a_ld + i0 * isize, a_ld, stick_u, kk, pieces, ch, g, sk);
      }
    } else {  // each of the rows, kk columns from k0
      a_bytes += row_sticks(rows_u, kk * isize, k0 * isize, a_ld, stick_u, tm, pieces, ch, g, sk);
    }
    if (s.b_transposed) {
      b_bytes += row_sticks(cols_u, kk * isize, k0 * isize, b_ld, stick_u, tn, pieces, ch, g, sk);
    } else {
      for (std::uint64_t j0 = 0; j0 < cols_u; j0 += tn) {
        b_bytes += row_sticks(kk, std::min(tn, cols_u - j0) * isize, k0 * b_ld + j0 * isize, b_ld, stick_u, kk, pieces, ch, g, sk);
      }
    }
  }
  // Panels whose rows are a multiple of the interleave round apart put a whole K step's
  // A on a few channels (a 4096-byte pitch on 16 x 256 B: 512 B of each row on 2 of
  // them). The steps whose loads are in flight together share the channels: two (the
  // double-buffered slots) plus one per grid row after the first (a grid row starts its
  // steps at least a step behind the one above: its B panels come through it). A step takes at
  // least its window's busiest channel's bytes / (window x channel rate), averaged over
  // the wave's steps (windows wrap: the next wave starts over).
  double channel_step_s = 0;
  if (t.dram_channels > 0 && steps > 0) {
    const std::uint64_t win = std::min<std::uint64_t>(steps, 2 + (p.grid_rows - 1));
    const double rate = t.dram_bytes_per_s / t.dram_channels;
    for (std::uint64_t st = 0; st < steps; ++st) {
      double worst = 0;
      for (std::uint32_t c = 0; c < t.dram_channels; ++c) {
        double sum = 0;
        for (std::uint64_t q = 0; q < win; ++q) sum += per_step[(st + q) % steps][c];
        worst = std::max(worst, sum);
      }
      channel_step_s += worst / static_cast<double>(win) / rate;
    }
    channel_step_s /= static_cast<double>(steps);
  }
  const double out_size = isa::dtype_size(s.out_dtype());
  double c_bytes = 0;
  for (std::uint64_t j0 = 0; j0 < cols_u; j0 += tn) {
    c_bytes += row_sticks(rows_u, std::min(tn, cols_u - j0) * static_cast<std::uint64_t>(out_size),
                          j0 * static_cast<std::uint64_t>(out_size), s.n * static_cast<std::uint64_t>(out_size),
                          stick_u, tm, 1);
  }
  const std::uint64_t waves = ceil_div(p.super_blocks, p.groups);
  const double active = static_cast<double>(std::min<std::uint64_t>(p.groups, p.super_blocks));
  // A wave's tiles are stored while the next wave loads: those stores pay the read/write
  // turnaround. The last wave's stores meet no reads, unless its two tiles per core run a
  // K step apart (kRotateSteps): then the first tile (half the wave's stores) is stored
  // while the second loads.
  const bool rotated = p.rows_per_core == 2 && steps >= kRotateSteps;
  const double overlap = (static_cast<double>(waves - 1) + (rotated ? 0.5 : 0.0)) / static_cast<double>(waves);
  const double dram = active * (a_bytes + b_bytes + c_bytes) / t.dram_bytes_per_s +
                      overlap * t.dram_turnaround_s_per_byte * std::min(active * (a_bytes + b_bytes), active * c_bytes);
  // The work is a pipeline of stages, one per K step of each tile of each wave: a
  // stage's panels load while the previous stage computes (prefetch runs across tiles
  // and waves). The first stage's load and the last stage's compute do not overlap;
  // between them each stage takes the longer of the two plus kOverlapLoss of the
  // shorter (the overlap is not perfect: channels and ring links are shared).
  // kOverlapLoss and kChainExposed are the model's two fitted numbers: fitted on the
  // default chip only (backend/README.md: the prediction table), then checked on the
  // what-if configs.
  constexpr double kOverlapLoss = 0.1;
  const double stages_per_wave = static_cast<double>(steps * p.rows_per_core);
  const double stages = static_cast<double>(waves) * stages_per_wave;
  // A stage's panels travel core to core along the grid's rows (A) and columns (B) in
  // two pieces, store and forward: the last core of a chain gets its piece
  // (chain - 1) piece transfers after the first. Prefetch hides most of that;
  // kChainExposed of it shows. (0.25 until a core's array and vector units ran from
  // their own queues: a core then received and forwarded the next panel only after its
  // matmul ended; now it does so while the matmul runs. Refitted on the default chip,
  // 2026-12-02: the largest error of the prediction table fell from 17.3% to 14.1%.)
  constexpr double kChainExposed = 0.1;
  const double link = t.ring_link_bytes_per_s > 0 ? t.ring_link_bytes_per_s : t.dram_bytes_per_s;
  const double piece_a = static_cast<double>(tm * p.tk) * size / 2, piece_b = static_cast<double>(p.tk * tn) * size / 2;
  const double chain = std::max((p.grid_cols - 1) * (piece_a / link + t.ring_hop_s),
                                (p.grid_rows - 1) * (piece_b / link + t.ring_hop_s));
  const double d_ch = active * channel_step_s * static_cast<double>(steps) / stages_per_wave;
  const double c = compute / stages_per_wave, d = std::max(dram / stages_per_wave, d_ch) + kChainExposed * chain;
  // Latencies of the first panels (a DMA's setup, DRAM and scratchpad latency, a few
  // ring hops) and the last tile's conversion to the output dtype and its store.
  const double engine = t.dma_engine_bytes_per_s > 0 ? t.dma_engine_bytes_per_s : t.dram_bytes_per_s;
  const double latency = t.dma_setup_s + t.dram_latency_s + t.scratchpad_latency_s + t.memory_stops * t.ring_hop_s;
  // The first stage's panels come through the core's DMA engines (each capped by its
  // request limit): the first stage takes the longer of that and its share of DRAM.
  const double first_panels = static_cast<double>(tm * p.tk + p.tk * tn) * size;
  const double first = std::max(d, first_panels / (engine * std::min<double>(2, std::max<std::uint32_t>(1, t.dma_engines))));
  const double body = first + (stages - 1) * (std::max(c, d) + kOverlapLoss * std::min(c, d)) + c;
  const double width = t.vector_elements_per_s > 0 ? t.vector_elements_per_s : t.clock_hz;
  const double last = static_cast<double>(tm * tn) * t.op_cycles(isa::VectorCost::convert) / width +
                      t.vector_latency_cycles / t.clock_hz + latency + static_cast<double>(tm * tn) * out_size / engine;
  return latency + body + last;
}

}  // namespace spyre::compiler
