#include "compiler/mlp.h"

#include <algorithm>
#include <array>
#include <stdexcept>
#include <string>

#include "compiler/arena.h"
#include "compiler/dma.h"
#include "compiler/emit.h"
#include "compiler/does_not_fit.h"
#include "compiler/norm_rows.h"
#include "spyre/cost/systolic.h"
#include "spyre/checked.h"
#include "spyre/isa/program.h"

namespace spyre::compiler {
namespace {

using spyre::ceil_div;
constexpr isa::DType f32 = isa::DType::fp32;

// Scratchpad layout of a plan (Arena: every buffer 64-byte aligned).
struct Layout {
  // Phase 1's fp32 accumulator [mb x hc], then (converted in place) the hidden slice in
  // x's dtype, phase 2's A. A gated pair's up accumulator beside it (rounded in place too).
  std::uint32_t acc = 0, acc_up = 0;
  // Phase 1's two x panels [mb x tk]; phase 2's two fp32 partials [mb x tn] in the same
  // bytes.
  std::uint32_t x[2] = {}, partial[2] = {};
  std::uint32_t w[3] = {};    // W1 panels [hc x tk], W2 panels [tn x hc]
  std::uint32_t recv[2] = {}; // reduce-scatter segments received [seg x tn] fp32
  std::uint32_t out[2] = {}, res[2] = {};  // the owned segment rounded, the residual's [seg x tn]
  std::uint32_t b1 = 0, b1_raw = 0, b2 = 0, b2_raw = 0;  // biases in fp32, and as loaded
  std::uint32_t bp = 0, bp_raw = 0;  // a projection's bias
  std::uint32_t x1 = 0;  // a projection's result: this core's row segment [seg x d]
  // Norm prologue: statistics [mb] each, the weight and bias in fp32 [d], the fp32 work
  // buffer [nrows x d], two load buffers of nrows rows.
  std::uint32_t mean = 0, rstd = 0, nw = 0, nb = 0, nwork = 0, nraw[2] = {};
  std::uint64_t nrows = 0;
  std::uint64_t end = 0;
};

// Rows per statistics piece (at most): 8, or 4 when that makes room for a longer K step.
// Not fewer: at 2, Llama-3-8B's prefill on one of 2 tensor-parallel cards (512 rows, d
// 4096, 7168 hidden units, gated, RMSNorm) gets K steps of 128, and the estimates then
// put the fused kernel ahead (1.62 against 1.65 ms) where the simulator has it behind
// (1706.4 against 1582.4 us): the fused estimate misses time the kernel spends there.
constexpr std::array<std::uint64_t, 2> kNormRows = {8, 4};

// pc: a projection's columns of p per core (0 without one); norm_rows: rows per
// statistics piece (at most).
Layout layout(const MlpShape& s, std::uint32_t cores, std::uint64_t hc, std::uint64_t pc, std::uint64_t mb,
              std::uint64_t tk, std::uint64_t tn, std::uint64_t norm_rows) {
  const std::uint64_t size = isa::dtype_size(s.dtype), seg = ceil_div(mb, cores);
  Layout l;
  Arena a;
  l.acc = a(std::max(mb * hc * 4, mb * pc * size));  // (phase 0: p's slice)
  if (s.gated) l.acc_up = a(mb * hc * 4);
  const std::uint64_t w1_rows = s.gated ? 2 * hc : hc;  // (a gated pair's panel: W1's rows, then W3's)
  const std::uint64_t x_bytes = (mb * tk * size + 63) / 64 * 64, part_bytes = (mb * tn * 4 + 63) / 64 * 64;
  const std::uint32_t shared = a(2 * std::max(x_bytes, part_bytes));
  for (std::uint32_t q = 0; q < 2; ++q) {
    l.x[q] = shared + static_cast<std::uint32_t>(q * x_bytes);
    l.partial[q] = shared + static_cast<std::uint32_t>(q * part_bytes);
  }
  for (auto& w : l.w) w = a(std::max({w1_rows * tk, tn * hc, tn * pc}) * size);
  for (auto& r : l.recv) r = a(seg * tn * 4);
  for (int q = 0; q < 2; ++q) {
    l.out[q] = a(seg * tn * size);
    l.res[q] = s.residual || s.projection ? a(seg * tn * size) : 0;
  }
  if (s.bias1) l.b1 = a(hc * 4), l.b1_raw = a(hc * isa::dtype_size(*s.bias1));
  if (s.bias2) l.b2 = a(s.d * 4), l.b2_raw = a(s.d * isa::dtype_size(*s.bias2));
  if (s.projection && s.projection->bias) l.bp = a(s.d * 4), l.bp_raw = a(s.d * isa::dtype_size(*s.projection->bias));
  if (s.projection) l.x1 = a(seg * s.d * size);
  if (s.norm) {
    l.mean = a(mb * 4);
    l.rstd = a(mb * 4);
    if (s.norm->weight) l.nw = a(s.d * 4);
    if (s.norm->bias) l.nb = a(s.d * 4);
    l.nrows = std::min<std::uint64_t>(norm_rows, ceil_div(mb, cores));
    l.nwork = a(l.nrows * s.d * 4);
    // (also the weight's and bias's staging before their conversion: d values each; with
    // a projection only that: the rows are x1's, already in the scratchpad)
    for (auto& r : l.nraw) r = a((s.projection ? 1 : l.nrows) * s.d * size);
  }
  l.end = a.next;
  return l;
}

// Phase 1's K steps, (first column, width): a first step of kFirstStep columns, then steps
// of tk. Nothing computes before every core has its first W1 panel, and the DRAM delivers
// the cores' first panels one after another: the short first step starts the last core
// sooner (GPT-2's MLP on the default chip: 32 first panels of 32 KiB, 7 us, instead of
// 128 KiB, 28 us), for one matmul whose folds pay the array's fill for less work.
constexpr std::uint64_t kFirstStep = 64;
// The hidden slice's epilogue (bias, activation, rounding) runs in this many row pieces.
constexpr std::uint64_t kHiddenPieces = 4;
std::vector<std::pair<std::uint64_t, std::uint64_t>> k_steps(std::uint64_t d, std::uint64_t tk) {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> steps;
  const std::uint64_t first = std::min({d, tk, kFirstStep});
  steps.emplace_back(0, first);
  for (std::uint64_t k0 = first; k0 < d; k0 += tk) steps.emplace_back(k0, std::min(tk, d - k0));
  return steps;
}


// Tokens: x's DMA and its ring transfers per slot, W panels per slot, the reduce-scatter's
// sends per partial, the residual's loads and y's stores per slot, the parameters (and the
// statistics' exchange), and the statistics' two load buffers.
constexpr std::uint8_t kX = 0, kXRing = 2, kW = 4, kRs = 7, kRes = 9, kStore = 11, kParam = 13, kStats = 14;
constexpr std::uint16_t kAllTokens = 0xffff;
constexpr std::uint16_t kXTag = 0, kRsTag = 1, kStatsTag = 2;
// x's panels move in this many row pieces, each its own DMA and ring message: a core
// forwards one while the next is arriving.
constexpr std::uint32_t kXPieces = 4;

}  // namespace

namespace {

// The plan for slices of hc hidden units, and its estimated time (seconds; 0 when the
// target gives no clock or bandwidth): the array's cycles against the weights' DRAM
// bytes as the DMAs move them (whole sticks).
std::optional<std::pair<MlpPlan, double>> plan_slices(const MlpShape& s, const Target& target, std::uint64_t hc,
                                                      std::uint64_t pc) {
  const auto p = static_cast<std::uint32_t>(ceil_div(s.h, hc));
  // A core's array cycles for its share of both products at a K step and chunk: each
  // K step (phase 1) and chunk (phase 2) is one matmul, whose folds each pay the array's
  // fill (cost::core_matmul_cycles), so longer K steps are cheaper. Phase 2's K is the
  // slice, whatever the chunk.
  const auto cycles = [&](std::uint64_t mb, std::uint64_t tk, std::uint64_t tn) {
    const auto mm = [&](std::uint64_t m, std::uint64_t n, std::uint64_t k) {
      return cost::core_matmul_cycles(target.dataflow, std::max<std::uint32_t>(1, target.array_rows),
                                      std::max<std::uint32_t>(1, target.array_cols), target.corelets,
                                      target.depth(s.dtype), m, n, k);
    };
    std::uint64_t total = (s.d / tn) * mm(mb, tn, hc) + (s.d % tn ? mm(mb, s.d % tn, hc) : 0);
    for (const auto& [k0, kk] : k_steps(s.d, tk)) total += (s.gated ? 2 : 1) * mm(mb, hc, kk);
    if (pc > 0) total += (s.d / tn) * mm(mb, tn, pc) + (s.d % tn ? mm(mb, s.d % tn, pc) : 0);  // (phase 0)
    return total;
  };
  // The most rows a block can take (the weights are read once per block), then the K
  // step and chunk of the fewest array cycles. Both multiples of 64 columns: a W1 panel's
  // rows are then whole 128-byte sticks (fp16; the K steps after the first of 64 start on
  // one); other widths would move the sticks they straddle for a fraction of their bytes.
  // A step of 192 between 256 and 128 counts: a fold streams ceil(tk / depth) cycles
  // against the array's fill and drain, so Llama's gated half (512 rows, d 2048, 176
  // hidden units a core, whose two accumulators take 704 KiB) at steps of 192 spends
  // 24 / (24 + 14) of its phase-1 array time streaming instead of 128's 16 / (16 + 14)
  // (830.4 -> 766.6 us in compile_bench). Every multiple of 64 was tried too: the cycle
  // count then picks 384 for GPT-2-sized halves (d 2048, h 5632), which the simulator
  // has slower than 256 (416.3 against 412.2 us: the count leaves out the pipeline's
  // start and the short last step). The norm's statistics pieces take fewer rows when
  // that lets a longer step fit.
  for (std::uint64_t mb = s.m;; mb = ceil_div(mb, 2)) {
    std::optional<MlpPlan> best;
    std::uint64_t best_cycles = 0;
    for (const std::uint64_t tk_max : {512ull, 256ull, 192ull, 128ull, 64ull}) {
      for (const std::uint64_t tn_max : {256ull, 128ull, 64ull}) {
        const std::uint64_t tk = std::min(tk_max, s.d), tn = std::min(tn_max, s.d);
        std::optional<Layout> fits;
        std::uint64_t norm_rows = 0;
        for (const std::uint64_t rows : kNormRows) {
          const Layout l = layout(s, p, hc, pc, mb, tk, tn, rows);
          if (l.end <= target.scratchpad_bytes) {
            fits = l, norm_rows = rows;
            break;
          }
          if (!s.norm) break;
        }
        if (!fits) continue;
        const std::uint64_t c = cycles(mb, tk, tn);
        // (Within 1%, the wider step and chunk, tried first: fewer loads, fewer reduce-scatters.)
        if (!best || static_cast<double>(c) < 0.99 * static_cast<double>(best_cycles)) {
          best = MlpPlan{p, hc, mb, tk, tn, ceil_div(s.m, mb), fits->end, pc}, best_cycles = c;
          best->norm_rows = norm_rows;
        }
      }
    }
    if (best) {
      // W1's (and W3's) rows of a slice are whole rows; W2's columns of it, and Wp's of a
      // projection's slice, are a run in each of their d rows, which the DMAs move as the
      // sticks the run touches (rows taken to start on a stick).
      const std::uint64_t size = isa::dtype_size(s.dtype), stick = std::max<std::uint32_t>(1, target.stick_bytes);
      const auto moved = [&](std::uint64_t n, std::uint64_t slice) {  // a row of n values cut in slices
        std::uint64_t bytes = 0;
        for (std::uint64_t v0 = 0; slice > 0 && v0 < n; v0 += slice) {
          bytes += (ceil_div(std::min(n, v0 + slice) * size, stick) - v0 * size / stick) * stick;
        }
        return bytes;
      };
      const double bytes = static_cast<double>(best->blocks) *
                           static_cast<double>((s.gated ? 2 : 1) * s.h * s.d * size + s.d * moved(s.h, hc) +
                                               (pc > 0 ? s.d * moved(s.projection->dp, pc) : 0));
      const double time = target.clock_hz > 0 && target.dram_bytes_per_s > 0
                              ? std::max(static_cast<double>(best->blocks * best_cycles) / target.clock_hz,
                                         bytes / target.dram_bytes_per_s)
                              : 0.0;
      best->estimated_s = time;
      return std::pair{*best, time};
    }
    if (mb == 1 || s.projection) return std::nullopt;  // (a projection: all rows in one block)
  }
}

}  // namespace

std::optional<MlpPlan> plan_mlp(const MlpShape& s, const Target& target) {
  const std::uint64_t cores = std::max<std::uint32_t>(1, target.cores);
  // Slices of whole 8-unit groups (the arrays' width), over as many cores as that allows;
  // or of whole sticks, when the DRAM time their W2 columns save (a slice that is not a
  // whole number of sticks moves the sticks it straddles) outweighs the array time an
  // uneven split costs: the few rows of a decode step, whose time is the weights'.
  // A projection's columns of p are split the same two ways over the cores the hidden
  // units take (with whole sticks some may take none). The first candidate is the even
  // split of both, kept unless another is estimated faster.
  const std::uint64_t per_stick = std::max<std::uint64_t>(1, target.stick_bytes / isa::dtype_size(s.dtype));
  const auto splits = [&](std::uint64_t n, std::uint64_t over) {
    const std::uint64_t share = ceil_div(n, over);
    return std::array<std::uint64_t, 2>{std::min(n, ceil_div(share, 8) * 8),
                                        std::min(n, ceil_div(share, per_stick) * per_stick)};
  };
  std::optional<std::pair<MlpPlan, double>> best;
  for (const std::uint64_t hc : splits(s.h, cores)) {
    const auto p = static_cast<std::uint32_t>(ceil_div(s.h, hc));
    const std::array<std::uint64_t, 2> pcs = s.projection ? splits(s.projection->dp, p) : std::array<std::uint64_t, 2>{};
    for (const std::uint64_t pc : pcs) {
      const auto plan = plan_slices(s, target, hc, pc);
      if (plan && (!best || (plan->second > 0 && plan->second < best->second))) best = plan;
    }
  }
  return best ? std::optional(best->first) : std::nullopt;
}

double estimate_unfused_s(const MlpShape& s, const Target& target) {
  const auto predicted = [&](std::uint64_t m, std::uint64_t n, std::uint64_t k) {
    const MatmulShape shape{.m = m, .n = n, .k = k, .dtype = s.dtype, .b_transposed = true};
    return plan_matmul(shape, target).predicted_s;
  };
  return (s.projection ? predicted(s.m, s.d, s.projection->dp) : 0.0) +
         predicted(s.m, (s.gated ? 2 : 1) * s.h, s.d) + predicted(s.m, s.d, s.h);
}

namespace {

// The checks of a shape, its plan, and the refusals when fusing does not pay.
MlpPlan plan_to_compile(const MlpShape& s, const Target& target, const std::string& name) {
  const auto str = [](std::uint64_t v) { return std::to_string(v); };
  if (s.m == 0 || s.d == 0 || s.h == 0) throw std::invalid_argument(name + ": an MLP needs m, d and h > 0");
  if (s.dtype != f32 && s.dtype != isa::DType::fp16 && s.dtype != isa::DType::bf16) {
    throw std::invalid_argument(name + ": an MLP takes fp32, fp16 or bf16, got " + std::string(isa::to_string(s.dtype)));
  }
  if ((s.ld1 != 0 && s.ld1 < s.d) || (s.ld2 != 0 && s.ld2 < s.h)) {
    throw std::invalid_argument(name + ": W1's row pitch " + str(s.ld1) + " must be >= d (" + str(s.d) +
                                ") and W2's " + str(s.ld2) + " >= h (" + str(s.h) + ")");
  }
  if ((s.bias1 && !isa::is_float(*s.bias1)) || (s.bias2 && !isa::is_float(*s.bias2))) {
    throw std::invalid_argument(name + ": the biases are floats");
  }
  if (s.norm) {
    check_norm(*s.norm, s.dtype, name, "x");
  }
  if (s.gated && (s.bias1 || (s.ld3 != 0 && s.ld3 < s.d))) {
    throw std::invalid_argument(name + ": a gated MLP takes no b1, and W3's row pitch " + str(s.ld3) +
                                " must be >= d (" + str(s.d) + ")");
  }
  if (s.projection && (s.residual || s.projection->dp == 0 ||
                       (s.projection->bias && !isa::is_float(*s.projection->bias)))) {
    throw std::invalid_argument(name + ": a projection before takes p's width dp > 0, a float bias, and no residual "
                                       "(x1 is the residual)");
  }
  const std::optional<MlpPlan> plan = plan_mlp(s, target);
  if (!plan) {
    throw DoesNotFit(name + " " + str(s.m) + "x" + str(s.d) + " (hidden " + str(s.h) +
                     "): no blocking fits the scratchpad's " + str(target.scratchpad_bytes) + " bytes");
  }
  const MlpPlan& p = *plan;
  // Each further block of rows reads the weights again (2 or, gated, 3 of d x h): worth
  // it only while that costs less than the hidden activation's write and read (2 of m x h)
  // the fusion saves.
  if ((p.blocks - 1) * (s.gated ? 3 : 2) * s.d >= 2 * s.m) {
    throw DoesNotFit(name + " " + str(s.m) + "x" + str(s.d) + " (hidden " + str(s.h) + "): blocks of " + str(p.mb) +
                     " rows read the weights " + str(p.blocks) +
                     " times, more than the hidden activation's traffic the fusion saves");
  }
  // Slower than the separate kernels by the estimates (the arrays' K steps cut short by a
  // scratchpad full of accumulators, as a wide hidden slice over many rows makes them):
  // those run instead. The fused kernel saves the hidden activation's traffic, which the
  // separate kernels' estimate includes.
  const double unfused = estimate_unfused_s(s, target);
  if (p.estimated_s > 0 && unfused > 0 && p.estimated_s > unfused) {
    throw DoesNotFit(name + " " + str(s.m) + "x" + str(s.d) + " (hidden " + str(s.h) + "): estimated " +
                     std::to_string(p.estimated_s * 1e6) + " us with K steps of " + str(p.tk) + ", against " +
                     std::to_string(unfused * 1e6) + " us for the separate kernels");
  }
  return p;
}

// Argument numbers: x, W1, y, W2, then each of these when the shape has it.
struct Args {
  std::uint16_t b1 = 0, b2 = 0, residual = 0, norm = 0, p = 0, wp = 0, bp = 0, w3 = 0;
  explicit Args(const MlpShape& s) {
    std::uint16_t next = 4;
    b1 = s.bias1 ? next++ : 0;
    b2 = s.bias2 ? next++ : 0;
    residual = s.residual ? next++ : 0;
    norm = next;
    next = static_cast<std::uint16_t>(next + (s.norm && s.norm->weight ? 1 : 0) + (s.norm && s.norm->bias ? 1 : 0));
    p = next, wp = static_cast<std::uint16_t>(next + 1), bp = static_cast<std::uint16_t>(next + 2);
    if (s.projection) next = static_cast<std::uint16_t>(next + (s.projection->bias ? 3 : 2));
    w3 = next;
  }
};

using Steps = std::vector<std::pair<std::uint64_t, std::uint64_t>>;  // (first column or row, width)

std::uint32_t u32(std::uint64_t v) { return static_cast<std::uint32_t>(v); }

// One core's code: its hidden slice of every block of rows (phases 0 to 2 of the header).
class MlpCore {
 public:
  MlpCore(const MlpShape& s, const MlpPlan& p, const Layout& l, const Target& target, const Args& args,
          const Steps& ksteps, const Steps& chunks, isa::ProgramBuilder& b, std::uint32_t c)
      : s_(s), p_(p), l_(l), target_(target), args_(args), ksteps_(ksteps), chunks_(chunks), b_(b), c_(c), st_{b, c},
        P_(p.cores), size_(isa::dtype_size(s.dtype)), pj_(s.projection ? &*s.projection : nullptr),
        h0_(c * p.hc), hcc_(std::min(p.hc, s.h - h0_)),
        up_(static_cast<std::uint16_t>((c + P_ - 1) % P_)), down_(static_cast<std::uint16_t>((c + 1) % P_)),
        p0_(std::min(pj_ ? pj_->dp : 0, c * p.pc)), pcc_(pj_ ? std::min(p.pc, pj_->dp - p0_) : 0),
        nr_{s.norm.value_or(MatmulShape::Norm{}), s.dtype, s.d, l.mean, l.rstd, l.nw, l.nb, l.nwork, l.nrows * s.d} {
    // The W panels in the order they are used (a projection's Wp panels, then every
    // block's K steps and chunks), loaded one use ahead into three slots.
    if (pj_) {
      for (const auto& [n0, nn] : chunks) wseq_.push_back({2, n0, nn});
    }
    for (std::uint64_t blk = 0; blk < p.blocks; ++blk) {
      for (const auto& [k0, kk] : ksteps) wseq_.push_back({0, k0, kk});
      for (const auto& [n0, nn] : chunks) wseq_.push_back({1, n0, nn});
    }
  }

  void emit() {
    load_params();
    for (std::uint64_t blk = 0; blk < p_.blocks; ++blk) block(blk);
    st_(isa::Wait{.token_mask = kAllTokens});
  }

 private:
  struct WUse {
    int which;               // 0: W1, 1: W2, 2: Wp
    std::uint64_t at, cols;  // W1: K step's column and width; W2, Wp: chunk's first row and rows
  };

  // Row segment q of the block: [mr q / P, mr (q + 1) / P). After the reduce-scatter's
  // P - 1 steps core c holds segment own_of(c)'s sum.
  std::pair<std::uint64_t, std::uint64_t> seg(std::uint32_t q) const { return {mr_ * q / P_, mr_ * (q + 1) / P_}; }
  std::uint32_t own_of(std::uint32_t core) const { return (core + P_ - 1) % P_; }
  // The rows whose statistics a core takes: its segment (with a projection, the
  // segment of x1 it holds).
  std::pair<std::uint64_t, std::uint64_t> stats_seg(std::uint32_t core) const { return seg(pj_ ? own_of(core) : core); }
  std::uint32_t partial(std::size_t i) const { return l_.partial[i % 2]; }

  void load_w(std::size_t u);
  void load_params();
  void block(std::uint64_t blk);
  void reduce_and_store(std::size_t i, bool phase0);
  void fetch_residual(std::size_t i, bool phase0);
  void x_load(std::size_t st);
  void issue_stats(std::size_t x);
  void phase0();
  void norm_stats();
  void phase1();
  std::uint64_t hidden_epilogue();
  void phase2(std::uint64_t piece_rows);

  const MlpShape& s_;
  const MlpPlan& p_;
  const Layout& l_;
  const Target& target_;
  const Args& args_;
  const Steps& ksteps_;
  const Steps& chunks_;
  isa::ProgramBuilder& b_;
  std::uint32_t c_;
  CoreStream st_;
  std::uint32_t P_;
  std::uint64_t size_;
  const MlpShape::Projection* pj_;
  std::uint64_t h0_, hcc_;  // the core's hidden slice
  std::uint16_t up_, down_;
  std::uint64_t p0_, pcc_;  // a projection: the core's columns of p
  NormRows nr_;
  std::vector<WUse> wseq_;
  std::size_t wuse_ = 0;
  // The block being written: its first row and rows, and its statistics pieces.
  std::uint64_t i0_ = 0, mr_ = 0;
  Steps pieces_;
};

void MlpCore::load_w(std::size_t u) {
  if (u >= wseq_.size()) return;
  const WUse& w = wseq_[u];
  const auto token = static_cast<std::uint8_t>(kW + u % 3);
  const std::uint64_t ld1 = s_.ld1 != 0 ? s_.ld1 : s_.d, ld2 = s_.ld2 != 0 ? s_.ld2 : s_.h, ld3 = s_.ld3 != 0 ? s_.ld3 : s_.d;
  if (w.which == 2) {  // Wp rows at .. at + cols, columns p0 .. p0 + pcc: [cols x pcc]
    if (pcc_ > 0) {
      st_(make_dma<isa::DmaLoad>(token, s_.dtype, args_.wp, (w.at * pj_->dp + p0_) * size_, l_.w[u % 3],
                                 {u32(pcc_), u32(w.cols), 1}, {1, static_cast<std::int64_t>(pj_->dp), 0}));
    }
  } else if (w.which == 0) {  // W1 rows h0 .. h0 + hcc, columns at .. at + cols: [hcc x cols]
    st_(make_dma<isa::DmaLoad>(token, s_.dtype, 1, (h0_ * ld1 + w.at) * size_, l_.w[u % 3], {u32(w.cols), u32(hcc_), 1},
                               {1, static_cast<std::int64_t>(ld1), 0}));
    if (s_.gated) {  // and W3's below them
      st_(make_dma<isa::DmaLoad>(token, s_.dtype, args_.w3, (h0_ * ld3 + w.at) * size_,
                                 l_.w[u % 3] + u32(hcc_ * w.cols * size_), {u32(w.cols), u32(hcc_), 1},
                                 {1, static_cast<std::int64_t>(ld3), 0}));
    }
  } else {  // W2 rows at .. at + cols, columns h0 .. h0 + hcc: [cols x hcc]
    st_(make_dma<isa::DmaLoad>(token, s_.dtype, 3, (w.at * ld2 + h0_) * size_, l_.w[u % 3], {u32(hcc_), u32(w.cols), 1},
                               {1, static_cast<std::int64_t>(ld2), 0}));
  }
}

// The parameters: b1's slice and b2 in fp32, a projection's bias, the norm's weight and bias.
void MlpCore::load_params() {
  const std::uint32_t norm_raw[2] = {l_.nraw[0], l_.nraw[1]};
  if (s_.norm) nr_.load_params(b_, c_, kParam, args_.norm, norm_raw);
  const std::pair<std::optional<isa::DType>, std::uint16_t> biases[3] = {
      {s_.bias1, args_.b1}, {s_.bias2, args_.b2}, {pj_ ? pj_->bias : std::nullopt, args_.bp}};
  const std::uint32_t bias_at[3][2] = {{l_.b1, l_.b1_raw}, {l_.b2, l_.b2_raw}, {l_.bp, l_.bp_raw}};
  const std::uint64_t bias_first[3] = {h0_, 0, 0}, bias_count[3] = {hcc_, s_.d, s_.d};
  for (int q = 0; q < 3; ++q) {
    if (!biases[q].first) continue;
    const isa::DType t = *biases[q].first;
    st_(make_dma<isa::DmaLoad>(kParam, t, biases[q].second, bias_first[q] * isa::dtype_size(t),
                               t == f32 ? bias_at[q][0] : bias_at[q][1], {u32(bias_count[q]), 1, 1}, {1, 0, 0}));
  }
  st_(wait_on(kParam));
  for (int q = 0; q < 3; ++q) {
    if (biases[q].first && *biases[q].first != f32) {
      st_(isa::VConvert{.from = *biases[q].first, .to = f32, .src = bias_at[q][1], .dst = bias_at[q][0],
                        .count = u32(bias_count[q])});
    }
  }
}

// Phases 0 and 2: chunk i's reduce-scatter and this core's segment's epilogue: + the
// bias, rounded once, + the residual; phase 0 keeps x1's segment, phase 2 stores y's.
void MlpCore::reduce_and_store(std::size_t i, bool phase0) {
  const auto slot = static_cast<std::uint32_t>(i % 2);
  const auto [n0, nn] = chunks_[i];
  const std::uint32_t part = partial(i), row_bytes = u32(nn * 4);
  for (std::uint32_t step = 0; step + 1 < P_; ++step) {
    const auto [slo, shi] = seg((c_ + step) % P_);
    if (shi > slo) {
      st_(isa::RingSend{.token = static_cast<std::uint8_t>(kRs + slot), .dst_core = up_, .tag = kRsTag,
                        .sp_addr = part + u32(slo) * row_bytes, .bytes = u32(shi - slo) * row_bytes});
    }
    const auto [rlo, rhi] = seg((c_ + step + 1) % P_);
    if (rhi > rlo) {
      const std::uint32_t into = l_.recv[step % 2], at = part + u32(rlo) * row_bytes;
      st_(isa::RingRecv{.token = static_cast<std::uint8_t>(kRs + slot), .src_core = down_, .tag = kRsTag,
                        .forward_to = isa::RingRecv::kNoForward, .sp_addr = into, .bytes = u32(rhi - rlo) * row_bytes});
      st_(isa::VBinary{.op = isa::BinaryOp::add, .dtype = f32, .a = at, .b = into, .dst = at, .rows = u32(rhi - rlo),
                       .cols = u32(nn)});
    }
  }
  const auto [lo, hi] = seg(own_of(c_));
  if (hi == lo) return;
  const std::uint32_t rows = u32(hi - lo), at = part + u32(lo) * row_bytes, count = rows * u32(nn);
  if (phase0 ? pj_->bias.has_value() : s_.bias2.has_value()) {
    st_(isa::VBinary{.op = isa::BinaryOp::add, .dtype = f32, .bcast = isa::Broadcast::row, .a = at,
                     .b = (phase0 ? l_.bp : l_.b2) + u32(n0 * 4), .dst = at, .rows = rows, .cols = u32(nn)});
  }
  st_(wait_on(kStore + slot));  // the buffer's last store
  round_to(st_, f32, s_.dtype, at, l_.out[slot], count);
  if (s_.residual || pj_) {
    st_(wait_on(kRes + slot));
    st_(isa::VBinary{.op = isa::BinaryOp::add, .dtype = s_.dtype, .a = l_.out[slot], .b = l_.res[slot],
                     .dst = l_.out[slot], .rows = rows, .cols = u32(nn)});
  }
  if (phase0) {  // x1's segment stays: its rows, columns n0 .. n0 + nn
    for (std::uint32_t r = 0; r < rows; ++r) {
      st_(isa::VUnary{.op = isa::UnaryOp::copy, .dtype = s_.dtype, .src = l_.out[slot] + u32(r * nn * size_),
                      .dst = l_.x1 + u32((r * s_.d + n0) * size_), .count = u32(nn)});
    }
    return;
  }
  st_(make_dma<isa::DmaStore>(static_cast<std::uint8_t>(kStore + slot), s_.dtype, 2, ((i0_ + lo) * s_.d + n0) * size_,
                              l_.out[slot], {u32(nn), rows, 1}, {1, static_cast<std::int64_t>(s_.d), 0}));
}

// The residual segment of chunk i into res[slot]: phase 0 the block's input x (its
// residual); phase 2 the residual argument, or with a projection x1's segment.
void MlpCore::fetch_residual(std::size_t i, bool phase0) {
  const auto slot = static_cast<std::uint32_t>(i % 2);
  const auto [n0, nn] = chunks_[i];
  const auto [lo, hi] = seg(own_of(c_));
  if (hi == lo || !(phase0 || s_.residual || pj_)) return;
  if (pj_ && !phase0) {
    for (std::uint64_t r = 0; r < hi - lo; ++r) {
      st_(isa::VUnary{.op = isa::UnaryOp::copy, .dtype = s_.dtype, .src = l_.x1 + u32((r * s_.d + n0) * size_),
                      .dst = l_.res[slot] + u32(r * nn * size_), .count = u32(nn)});
    }
    return;
  }
  st_(make_dma<isa::DmaLoad>(static_cast<std::uint8_t>(kRes + slot), s_.dtype, phase0 ? 0 : args_.residual,
                             ((i0_ + lo) * s_.d + n0) * size_, l_.res[slot], {u32(nn), u32(hi - lo), 1},
                             {1, static_cast<std::int64_t>(s_.d), 0}));
}

// Phase 1's x panel of K step st into its slot: core 0 reads it from DRAM (with a
// projection the panels come from x1's segments instead).
void MlpCore::x_load(std::size_t st) {
  if (c_ != 0 || st >= ksteps_.size() || pj_) return;
  const auto slot = static_cast<std::uint32_t>(st % 2);
  const auto [k0, kk] = ksteps_[st];
  st_(wait_on(kXRing + slot));  // the slot's last send
  st_(make_dma<isa::DmaLoad>(static_cast<std::uint8_t>(kX + slot), s_.dtype, 0, ((i0_ * s_.d) + k0) * size_, l_.x[slot],
                             {u32(kk), u32(mr_), 1}, {1, static_cast<std::int64_t>(s_.d), 0}));
}

// A norm prologue's statistics piece x (whole rows of the core's segment) into its buffer.
void MlpCore::issue_stats(std::size_t x) {
  if (x >= pieces_.size() || pj_) return;
  st_(make_dma<isa::DmaLoad>(static_cast<std::uint8_t>(kStats + x % 2), s_.dtype, 0, (i0_ + pieces_[x].first) * s_.d * size_,
                             l_.nraw[x % 2], {u32(s_.d), u32(pieces_[x].second), 1},
                             {1, static_cast<std::int64_t>(s_.d), 0}));
}

// Phase 0: x1 = p Wp^T + bp + x, each core's partial over its columns of p (none:
// zeros), reduce-scattered chunk by chunk as phase 2's; x1's segment stays.
void MlpCore::phase0() {
  if (pcc_ > 0) {
    st_(make_dma<isa::DmaLoad>(kX, s_.dtype, args_.p, (i0_ * pj_->dp + p0_) * size_, l_.acc, {u32(pcc_), u32(mr_), 1},
                               {1, static_cast<std::int64_t>(pj_->dp), 0}));
    st_(wait_on(kX));
  }
  for (std::size_t i = 0; i < chunks_.size(); ++i, ++wuse_) {
    const auto slot = static_cast<std::uint32_t>(i % 2);
    const auto nn = chunks_[i].second;
    fetch_residual(i, true);
    st_(wait_on(kW + wuse_ % 3, kRs + slot));
    load_w(wuse_ + 1);
    if (pcc_ > 0) {
      st_(isa::Matmul{.a = l_.acc, .b = l_.w[wuse_ % 3], .c = partial(i), .m = u32(mr_), .n = u32(nn), .k = u32(pcc_),
                      .lda = u32(pcc_), .ldb = u32(pcc_), .ldc = u32(nn), .in = s_.dtype, .out = f32, .trans_a = false,
                      .trans_b = true, .accumulate = false});
    } else {
      st_(isa::VFill{.dtype = f32, .dst = partial(i), .count = u32(mr_ * nn), .value = 0});
    }
    if (i > 0) reduce_and_store(i - 1, true);
  }
  reduce_and_store(chunks_.size() - 1, true);
}

// A norm prologue: this core's share of the block's rows (its segment) in pieces of whole
// rows, then the exchange: its statistics to every other core, theirs from each. (With a
// projection the core's rows are its segment of x1, own(c), already here.)
void MlpCore::norm_stats() {
  for (std::size_t x = 0; x < pieces_.size(); ++x) {
    if (pj_) {
      nr_.stats(b_, c_, l_.x1 + u32((pieces_[x].first - pieces_[0].first) * s_.d * size_), u32(pieces_[x].second),
                u32(pieces_[x].first));
      continue;
    }
    st_(wait_on(kStats + x % 2));
    nr_.stats(b_, c_, l_.nraw[x % 2], u32(pieces_[x].second), u32(pieces_[x].first));
    issue_stats(x + 2);
  }
  const auto segments = [&](std::uint32_t core) { return std::array{stats_seg(core)}; };
  nr_.exchange(b_, c_, 0, P_, c_, segments, kParam, kParam, kStatsTag);
}

// Phase 1: the hidden slice. x's panels travel 0 -> 1 -> ... -> P - 1 in two slots (with a
// projection, gathered from every core's segment of x1).
void MlpCore::phase1() {
  for (std::size_t st = 0; st < ksteps_.size(); ++st, ++wuse_) {
    const auto slot = static_cast<std::uint32_t>(st % 2);
    const auto [k0, kk] = ksteps_[st];
    const std::uint64_t row_bytes = kk * size_;
    const auto xtoken = static_cast<std::uint8_t>(kXRing + slot);
    if (pj_) {
      // The panel from every core's segment of x1: this core's rows copied in, sent to
      // the next core, and the others' received from the one before, each passed on
      // until it has been round the ring.
      st_(wait_on(xtoken));  // the slot's last sends
      const auto [lo, hi] = seg(own_of(c_));
      for (std::uint64_t r = lo; r < hi; ++r) {
        st_(isa::VUnary{.op = isa::UnaryOp::copy, .dtype = s_.dtype, .src = l_.x1 + u32(((r - lo) * s_.d + k0) * size_),
                        .dst = l_.x[slot] + u32(r * row_bytes), .count = u32(kk)});
      }
      if (P_ > 1 && hi > lo) {
        st_(isa::RingSend{.token = xtoken, .dst_core = down_, .tag = kXTag, .sp_addr = l_.x[slot] + u32(lo * row_bytes),
                          .bytes = u32((hi - lo) * row_bytes)});
      }
      for (std::uint32_t step = 0; step + 1 < P_; ++step) {
        const std::uint32_t from = (c_ + P_ - 1 - step) % P_;  // the segment's core
        const auto [flo, fhi] = seg(own_of(from));
        if (fhi == flo) continue;
        st_(isa::RingRecv{.token = xtoken, .src_core = up_, .tag = kXTag,
                          .forward_to = from == down_ ? isa::RingRecv::kNoForward : down_,
                          .sp_addr = l_.x[slot] + u32(flo * row_bytes), .bytes = u32((fhi - flo) * row_bytes)});
      }
    } else {
      st_(wait_on(c_ == 0 ? kX + slot : xtoken));  // the DMA, or the slot's last forward
      const ChainLink link{c_ == 0, up_, c_ + 1 < P_ ? down_ : isa::RingRecv::kNoForward};
      pass_along(st_, link, xtoken, kXTag, l_.x[slot], mr_, row_bytes, kXPieces, [](std::uint32_t) {});
    }
    if (s_.norm) {
      if (c_ + 1 < P_ || (pj_ && P_ > 1)) st_(wait_on(xtoken));
      nr_.normalize(b_, c_, l_.x[slot], u32(mr_), u32(kk), k0, 0);
    }
    // The next W panel once this one is in: each core has one load in flight, so the
    // DRAM serves the cores' panels step by step.
    st_(wait_on(kW + wuse_ % 3));
    load_w(wuse_ + 1);
    const std::uint32_t w = l_.w[wuse_ % 3];
    k_step(st_,
           isa::Matmul{.a = l_.x[slot], .b = w, .c = l_.acc, .m = u32(mr_), .n = u32(hcc_), .k = u32(kk),
                       .lda = u32(kk), .ldb = u32(kk), .ldc = u32(hcc_), .in = s_.dtype, .out = f32, .trans_a = false,
                       .trans_b = true, .accumulate = st > 0},
           s_.gated ? w + u32(hcc_ * kk * size_) : 0, l_.acc_up);  // (gated: the up projection, the same x panel)
    // Core 0: the next x panel into the other slot once the matmul before this one has
    // read it (this one is queued: the array keeps working while the stream waits).
    x_load(st + 1);
  }
}

// The hidden slice: + b1, the activation, rounded once to x's dtype (in place), in row
// pieces of whole array folds: the first chunk's product starts on a piece's rows while
// the vector units finish the next. (Rounding in place piece by piece writes a piece's
// values over rows already rounded, never over rows still to come.) Returns the rows per
// piece.
std::uint64_t MlpCore::hidden_epilogue() {
  const std::uint64_t piece_rows = fold_piece_rows(mr_, kHiddenPieces, std::max<std::uint32_t>(1, target_.array_rows));
  for (std::uint64_t r0 = 0; r0 < mr_; r0 += piece_rows) {
    const auto rows = u32(std::min(piece_rows, mr_ - r0));
    const std::uint32_t at32 = l_.acc + u32(r0 * hcc_ * 4), count = rows * u32(hcc_);
    const std::uint32_t at = l_.acc + u32(r0 * hcc_ * size_);
    if (s_.bias1) {
      st_(isa::VBinary{.op = isa::BinaryOp::add, .dtype = f32, .bcast = isa::Broadcast::row, .a = at32, .b = l_.b1,
                       .dst = at32, .rows = rows, .cols = u32(hcc_)});
    }
    if (s_.activation) st_(isa::VUnary{.op = *s_.activation, .dtype = f32, .src = at32, .dst = at32, .count = count});
    round_to(st_, f32, s_.dtype, at32, at, count);
    if (s_.gated) {  // * the up projection, rounded first as its own product is
      times_up(st_, s_.dtype, at, l_.acc_up + u32(r0 * hcc_ * 4), l_.acc_up + u32(r0 * hcc_ * size_), rows, u32(hcc_));
    }
  }
  return piece_rows;
}

// Phase 2: each chunk's partial, then (while the next chunk's is on the arrays) its
// reduce-scatter and this core's segment's epilogue.
void MlpCore::phase2(std::uint64_t piece_rows) {
  for (std::size_t i = 0; i < chunks_.size(); ++i, ++wuse_) {
    const auto slot = static_cast<std::uint32_t>(i % 2);
    const auto [n0, nn] = chunks_[i];
    fetch_residual(i, false);
    st_(wait_on(kW + wuse_ % 3, kRs + slot));
    load_w(wuse_ + 1);
    // (The first chunk in the hidden slice's row pieces, each once it is rounded.)
    for (std::uint64_t r0 = 0; r0 < mr_; r0 += i == 0 ? piece_rows : mr_) {
      const std::uint64_t rows = i == 0 ? std::min(piece_rows, mr_ - r0) : mr_;
      st_(isa::Matmul{.a = l_.acc + u32(r0 * hcc_ * size_), .b = l_.w[wuse_ % 3], .c = partial(i) + u32(r0 * nn * 4),
                      .m = u32(rows), .n = u32(nn), .k = u32(hcc_), .lda = u32(hcc_), .ldb = u32(hcc_), .ldc = u32(nn),
                      .in = s_.dtype, .out = f32, .trans_a = false, .trans_b = true, .accumulate = false});
    }
    if (i > 0) reduce_and_store(i - 1, false);
  }
  reduce_and_store(chunks_.size() - 1, false);
}

void MlpCore::block(std::uint64_t blk) {
  i0_ = blk * p_.mb, mr_ = std::min(p_.mb, s_.m - i0_);
  if (blk > 0) st_(isa::Wait{.token_mask = kAllTokens});
  // The first x panel and W panel before the statistics: the first matmul needs all
  // three, and the DRAM serves them in the order they are asked for. (Each core then
  // asks for its next W panel when one arrives: asking for two at once put the second
  // of the first cores before the first of the last, and the last cores started a step
  // late.) The statistics' first two pieces are asked for first: nothing computes
  // before the statistics are in.
  pieces_.clear();
  if (s_.norm) {
    const auto [lo, hi] = stats_seg(c_);
    for (std::uint64_t r = lo; r < hi; r += l_.nrows) pieces_.emplace_back(r, std::min(l_.nrows, hi - r));
  }
  issue_stats(0);
  issue_stats(1);
  x_load(0);
  if (blk == 0) load_w(0);
  if (pj_) phase0();
  if (s_.norm) norm_stats();
  phase1();
  phase2(hidden_epilogue());
}

}  // namespace

std::vector<std::uint8_t> compile_mlp(const MlpShape& s, const Target& target, const std::string& name) {
  const MlpPlan p = plan_to_compile(s, target, name);
  const Args args(s);
  // K steps of phase 1 and output chunks of phase 2.
  const Steps ksteps = k_steps(s.d, p.tk);
  Steps chunks;
  for (std::uint64_t n0 = 0; n0 < s.d; n0 += p.tn) chunks.emplace_back(n0, std::min(p.tn, s.d - n0));
  const Layout l = layout(s, p.cores, p.hc, p.pc, p.mb, p.tk, p.tn, p.norm_rows);  // (every core's)
  isa::ProgramBuilder b(name, p.cores);
  for (std::uint32_t c = 0; c < p.cores; ++c) MlpCore(s, p, l, target, args, ksteps, chunks, b, c).emit();
  return b.build();
}

}  // namespace spyre::compiler
