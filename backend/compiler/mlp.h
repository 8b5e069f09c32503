// The kernel compiler's MLP: a transformer block's feed-forward half in one kernel,
//   y = act(norm(x) W1^T + b1) W2^T + b2 (+ residual)
// for x [m x d], W1 [h x d] and W2 [d x h] (nn.Linear's weights), without the m x h
// hidden activation ever going to DRAM.
//
// The cores split the work as tensor parallelism splits it across cards, but over the
// chip's ring (docs/ARCHITECTURE.md §9): core c takes a slice of hc hidden units, its rows
// of W1 and its columns of W2, so every weight byte is read once.
//   1. x's panels (K steps of tk columns of a block of mb rows) are read once from DRAM
//      by core 0 and travel core to core along the ring; each core multiplies them by
//      its W1 panels into an fp32 accumulator [mb x hc], then adds its slice of b1,
//      applies the activation and rounds once to x's dtype, in place: its slice of the
//      hidden activation, which stays in its scratchpad. (A norm prologue: the cores share out
//      the block's row statistics as compile_matmul's do, and each normalises its own
//      copy of a panel once it has passed it on.)
//   2. For each chunk of tn output columns, each core multiplies its hidden slice by its
//      W2 panel into an fp32 partial [mb x tn] (where phase 1's x panels were); the partials of all cores meet in a
//      reduce-scatter over the ring (P - 1 steps, each core sending one row segment to
//      its lower neighbour and adding the one it receives from its upper neighbour), so
//      each core ends with the sum of one row segment: it adds b2, rounds once to x's
//      dtype, adds the residual (rounded again, as the add after a linear) and stores
//      it. A chunk's reduction runs while the next chunk's product is on the arrays.
// The numerics are the two linears' (the hidden activation rounded to x's dtype once, the
// output once before the residual), with the second product's fp32 sum in a different
// order (each core's partial over its slice, then the ring's order).
// A gated feed-forward (SwiGLU's, `MlpShape::gated`: act(x W1^T) * (x W3^T), then W2)
// takes each core's rows of W1 and W3 as one panel per K step, two accumulators fed by
// one x panel, and rounds its hidden slice as spyre::linear_gated does.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "compiler/elementwise.h"
#include "compiler/matmul.h"

namespace spyre::compiler {

struct MlpShape {
  std::uint64_t m = 0, d = 0, h = 0;  // rows; x's and y's columns; hidden units
  isa::DType dtype = isa::DType::fp16;  // x, the weights, the residual and y (fp32, fp16 or bf16)
  // Row pitches of W1 and W2 as stored (elements; 0 = dense: d and h).
  std::uint64_t ld1 = 0, ld2 = 0;
  std::optional<isa::DType> bias1 = std::nullopt, bias2 = std::nullopt;  // h and d values
  std::optional<isa::UnaryOp> activation = std::nullopt;
  bool residual = false;  // y + residual, an [m x d] matrix of x's dtype
  // A gated first half: hidden = act(x W1^T) * (x W3^T) with W3 [h x d] (row pitch ld3,
  // 0 = d), each product accumulated in fp32, the gate's activated, both rounded to x's
  // dtype and multiplied in it (compiler::MatmulShape::gated's numerics). No b1.
  bool gated = false;
  std::uint64_t ld3 = 0;
  std::optional<MatmulShape::Norm> norm = std::nullopt;  // of x's rows, as MatmulShape::norm
  // An output projection and its residual before (a transformer block's attention
  // output, projected, plus the block's input): the MLP's input is then
  //   x1 = p Wp^T + bp + x   (p [m x dp], Wp [d x dp], nn.Linear's weight)
  // and y = mlp(x1) + x1 (`residual` must be false: x1 is the residual). Phase 0
  // computes x1 as phase 2 computes y: each core a slice of p's columns (and Wp's), the
  // fp32 partials reduce-scattered over the ring, each core keeping its row segment of
  // x1 (+ bp, rounded, + x, rounded: the linear and the residual add) in its scratchpad.
  // Phase 1 then takes the statistics of its own rows and gathers each x panel from
  // every core's segment over the ring, and phase 2 adds the segment as the residual:
  // x1 never goes to DRAM. All rows in one block.
  struct Projection {
    std::uint64_t dp = 0;
    std::optional<isa::DType> bias = std::nullopt;
  };
  std::optional<Projection> projection = std::nullopt;
};

struct MlpPlan {
  std::uint32_t cores = 0;   // P: cores taking a hidden slice each
  std::uint64_t hc = 0;      // hidden units per core (the last core's slice may be shorter)
  std::uint64_t mb = 0;      // rows per block (the weights are read once per block)
  std::uint64_t tk = 0, tn = 0;  // phase 1's K step; phase 2's output chunk
  std::uint64_t blocks = 0;
  std::uint64_t scratchpad_bytes = 0;  // the layout's
  std::uint64_t pc = 0;      // a projection's columns of p per core (0 without one)
  std::uint64_t norm_rows = 8;  // rows per piece of the norm's statistics (at most)
  // The estimated time (seconds; 0 when the target gives no clock or bandwidth): the
  // arrays' cycles against the weights' DRAM bytes as the DMAs move them.
  double estimated_s = 0;
};

// The plan, or nothing when no blocking fits the scratchpad.
std::optional<MlpPlan> plan_mlp(const MlpShape& shape, const Target& target);

// The separate kernels' estimated time (plan_matmul's predictions of the projection, the
// first linear or gated pair, and the second linear; 0 when unknown).
double estimate_unfused_s(const MlpShape& shape, const Target& target);

// Arguments: 0 = x [m x d], 1 = W1 [h x d], 2 = y [m x d], 3 = W2 [d x h], then b1, b2,
// the residual, the norm's weight and bias, a projection's p, Wp and bp, each when given,
// and last W3 when gated. Throws DoesNotFit when no
// blocking fits the scratchpad, or when rows must be split into blocks so small that
// re-reading the weights for each would cost more than the hidden activation the fusion
// saves (the caller then runs the two linears); std::invalid_argument for a malformed
// shape.
std::vector<std::uint8_t> compile_mlp(const MlpShape& shape, const Target& target, const std::string& name);

}  // namespace spyre::compiler
