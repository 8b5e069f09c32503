#include "compiler/cost.h"

#include <algorithm>
#include <cmath>

#include "spyre/checked.h"
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
      case Step::Kind::unary: passes += t.op_cycles(isa::vector_cost_name(static_cast<isa::UnaryOp>(s.op))); break;
      case Step::Kind::binary: passes += t.op_cycles(isa::to_string(static_cast<isa::BinaryOp>(s.op))); break;
      case Step::Kind::compare: passes += t.op_cycles("compare"); break;
      case Step::Kind::select: passes += t.op_cycles("select"); break;
      case Step::Kind::convert: passes += t.op_cycles("convert"); break;
    }
  }
  for (const auto& in : k.inputs) passes += in.dtype != k.output.dtype ? t.op_cycles("convert") : 0;
  // Each distribution drawn: one vrandom pass per tile.
  if (k.draws(isa::RandomDist::uniform)) passes += t.op_cycles("random");
  if (k.draws(isa::RandomDist::normal)) passes += t.op_cycles("random_normal");
  return streaming_s(read, written, elements / std::max<double>(1, t.cores) * passes, t);
}

double predict_softmax_s(const SoftmaxShape& s, const Target& t) {
  const double elements = static_cast<double>(s.rows) * static_cast<double>(s.cols);
  const double read = elements * isa::dtype_size(s.in), written = elements * isa::dtype_size(s.out);
  // max, x - max, exp, sum, divide (log_softmax: log and subtract instead), the
  // conversions in and out.
  double passes = t.op_cycles("reduce") + t.op_cycles("sub") + t.op_cycles("exp") + t.op_cycles("reduce") +
                  (s.log ? t.op_cycles("sub") : t.op_cycles("div"));
  if (s.in != isa::DType::fp32) passes += t.op_cycles("convert");
  if (s.out != isa::DType::fp32) passes += t.op_cycles("convert");
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
  // The super-blocks running at once read their panels and write their tiles; DRAM
  // moves whole sticks, so a panel row narrower than a stick costs a whole one.
  const auto sticks = [&](double bytes) {
    const double stick = std::max<double>(1, t.stick_bytes);
    return std::ceil(bytes / stick) * stick;
  };
  const std::uint64_t rows_u = std::min<std::uint64_t>(std::uint64_t{p.grid_rows} * p.rows_per_core * tm, s.m);
  const std::uint64_t cols_u = std::min<std::uint64_t>(std::uint64_t{p.grid_cols} * tn, s.n);
  const double rows = static_cast<double>(rows_u), cols = static_cast<double>(cols_u);
  const double col_panels = static_cast<double>(ceil_div(cols_u, tn));
  // A row along K in steps of tk (the last one shorter).
  const double k_row = static_cast<double>(steps - 1) * sticks(static_cast<double>(p.tk) * size) +
                       sticks(static_cast<double>(last_k) * size);
  const double a_bytes = s.a_transposed ? static_cast<double>(s.k) * sticks(static_cast<double>(tm) * size) *
                                              static_cast<double>(ceil_div(rows_u, tm))
                                        : rows * k_row;
  const double b_bytes = s.b_transposed ? cols * k_row
                                        : static_cast<double>(s.k) * col_panels * sticks(static_cast<double>(tn) * size);
  const double out_size = isa::dtype_size(s.out_dtype());
  const double c_bytes = rows * col_panels * sticks(static_cast<double>(tn) * out_size);
  const std::uint64_t waves = ceil_div(p.super_blocks, p.groups);
  const double active = static_cast<double>(std::min<std::uint64_t>(p.groups, p.super_blocks));
  // A wave's tiles are stored while the next wave loads: those stores pay the read/write
  // turnaround. The last wave's stores meet no reads, unless its two tiles per core run a
  // K step apart (kRotateSteps): then the first tile is stored while the second loads.
  const bool rotated = p.rows_per_core == 2 && steps >= kRotateSteps;
  const double overlap = static_cast<double>(waves - 1 + (rotated ? 1 : 0)) / static_cast<double>(waves);
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
  // kChainExposed of it shows.
  constexpr double kChainExposed = 0.25;
  const double link = t.ring_link_bytes_per_s > 0 ? t.ring_link_bytes_per_s : t.dram_bytes_per_s;
  const double piece_a = static_cast<double>(tm * p.tk) * size / 2, piece_b = static_cast<double>(p.tk * tn) * size / 2;
  const double chain = std::max((p.grid_cols - 1) * (piece_a / link + t.ring_hop_s),
                                (p.grid_rows - 1) * (piece_b / link + t.ring_hop_s));
  const double c = compute / stages_per_wave, d = dram / stages_per_wave + kChainExposed * chain;
  const double body = d + (stages - 1) * (std::max(c, d) + kOverlapLoss * std::min(c, d)) + c;
  // Latencies of the first panels (a DMA's setup, DRAM and scratchpad latency, a few
  // ring hops) and the last tile's conversion to the output dtype and its store.
  const double engine = t.dma_engine_bytes_per_s > 0 ? t.dma_engine_bytes_per_s : t.dram_bytes_per_s;
  const double latency = t.dma_setup_s + t.dram_latency_s + t.scratchpad_latency_s + t.memory_stops * t.ring_hop_s;
  // The first stage's panels come through the core's DMA engines (each capped by its
  // request limit) before anything overlaps.
  const double first_panels = static_cast<double>(tm * p.tk + p.tk * tn) * size;
  const double first = latency + first_panels / (engine * std::min<double>(2, std::max<std::uint32_t>(1, t.dma_engines)));
  const double width = t.vector_elements_per_s > 0 ? t.vector_elements_per_s : t.clock_hz;
  const double last = static_cast<double>(tm * tn) * t.op_cycles("convert") / width +
                      t.vector_latency_cycles / t.clock_hz + latency + static_cast<double>(tm * tn) * out_size / engine;
  return body + first + last;
}

}  // namespace spyre::compiler
