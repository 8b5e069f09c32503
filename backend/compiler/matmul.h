// The kernel compiler's matmul: C[b][M x N] = op(A[b]) op(B[b]) for b < batch, in fp32,
// fp16 or bf16 with fp32 accumulation on chip. A is [M x K] row-major or given as the
// transpose of a [K x M] one; B is [K x N] row-major or the transpose of an [N x K] one
// (linear's weights); C is contiguous [batch, M, N].
//
// Panel sharing (docs/ARCHITECTURE.md §9): cores form groups laid out as a Gr x Gc grid. A group
// computes a super-block of Gr x Gc output tiles: along K, the first core of each grid
// row reads the row's A panel from DRAM and it travels core to core along the row
// over the ring (ring_recv with forwarding); the first core of each grid column does
// the same with the B panel down the column. DRAM traffic per super-block is then
// (Gr*tm + Gc*tn) * K instead of Gr*Gc*(tm + tn) * K. A core may also compute two
// tiles stacked along M (accumulators side by side, converted in place), using each
// B panel twice: the super-block doubles along M for the same scratchpad. The grid,
// the tile size, the tiles per core and the number of groups come from a cost model
// (compute time of the waves of super-blocks against the DRAM time of their bytes)
// over the device's figures.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "compiler/elementwise.h"

namespace spyre::compiler {

struct MatmulShape {
  std::uint64_t m = 0, n = 0, k = 0;
  isa::DType dtype = isa::DType::fp16;
  bool b_transposed = false;  // B is stored as [N x K] row-major
  bool a_transposed = false;  // A is stored as [K x M] row-major
  std::uint64_t batch = 1;
  std::uint64_t a_batch_stride = 0, b_batch_stride = 0;  // elements between batches (0: broadcast)
  // Row pitches of A and B as stored (elements between consecutive stored rows; 0 =
  // dense): a head's slice of a [tokens, heads * dim] projection is read in place.
  std::uint64_t lda = 0, ldb = 0;
  // An epilogue on each finished tile while it is still fp32, before its one rounding:
  // + bias (argument 3: n contiguous values in their own dtype, the same for every row
  // and batch), then an activation.
  std::optional<isa::DType> bias = std::nullopt;
  std::optional<isa::UnaryOp> activation = std::nullopt;
  // A per-column scale before the bias: result x channel_scale[j] + bias[j], a batch
  // norm folded into a convolution (scale gamma / sqrt(var + eps), shift beta - mean x
  // scale). n fp32 values, the argument after the bias (argument 4), with the bias's
  // offset per batch; needs a bias.
  bool channel_scale = false;
  // C's dtype when it is not the operands' (int8 operands: int32, the accumulator; no
  // epilogue then). Accumulation is in fp32 for floats, int32 for int8.
  std::optional<isa::DType> out = std::nullopt;
  // An fp32 scalar in device memory (the argument after the bias and the channel scale, or 3) multiplying every
  // result before the bias: torch._scaled_mm's scale_a x scale_b.
  bool scale = false;
  // A matrix combined with every result after its rounding to C's dtype, in C's dtype
  // (one more rounding, as an add or multiply after the matmul rounds): an [m x n]
  // matrix of C's dtype, the argument after the bias and the scale, with row pitch ldr
  // (0 = n); residual_op add (a residual connection, x + linear(h)) or mul (a gate,
  // SwiGLU's silu(gate) * up). Unbatched.
  bool residual = false;
  isa::BinaryOp residual_op = isa::BinaryOp::add;
  std::uint64_t ldr = 0;
  // B as column pieces, each its own argument: B = [B0 | B1 | ...], piece p n_p columns
  // wide (the widths sum to n), stored transposed ([n_p x K] row-major, as linear
  // weights are) with row pitch b_piece_ld[p] (0 = K). Piece 0 is argument 1, piece p > 0
  // argument 2 + p. Several projections of one input (attention's Q, K and V) are then
  // one kernel that reads the input once; C holds their results side by side. Unbatched,
  // without an epilogue. Empty: B is one matrix.
  std::vector<std::uint64_t> b_pieces{}, b_piece_ld{};
  // A gated pair, SwiGLU's activation(x @ W1^T) * (x @ W3^T): B is two pieces of n
  // columns each (b_pieces {n, n}), the gate's weights and the up projection's. Every
  // tile computes both from one A panel into two accumulators, applies the activation
  // to the gate's, rounds both to C's dtype (as the two separate products are rounded)
  // and multiplies them in C's dtype: C is [m x n], and the gate's product never goes
  // to DRAM. One tile per core.
  bool gated = false;
  // C's row pitch and the elements between its batches (0: dense, n and m * n), and the
  // bias row's offset per batch (0: one row for every batch). A grouped convolution's
  // groups are batches writing their columns of one [m x groups * n] result.
  std::uint64_t ldc = 0, c_batch_stride = 0, bias_batch_stride = 0;
  // A as the implicit im2col matrix of a convolution over a channels-last input that is
  // already padded, stored [images, h, w, channels]. A's row p is the output pixel
  // (image, oy, ox) in row-major order; its column k is the tap (ky, kx) and channel c,
  // k = (ky * kw + kx) * group_channels + c; and
  //   A[p][k] = in[image][oy * sh + ky * dh][ox * sw + kx * dw][c + batch * a_batch_stride]
  // (a grouped convolution's groups are batches: a_batch_stride is the group's first
  // channel). A's panels are gathered from the input by DMA, a run of contiguous K
  // (one tap row, kw * channels values, when dw is 1 and a group is every channel;
  // else one tap) by a run of pixels of one output row, or of whole output rows; no
  // im2col matrix is ever stored. m = images * ho * wo, k = kh * kw * group_channels;
  // or, with a_transposed, A^T (a weight gradient: taps x pixels), m and k swapped.
  struct ConvA {
    std::uint64_t images = 1, h = 0, w = 0, channels = 0, group_channels = 0;
    std::uint64_t kh = 1, kw = 1, sh = 1, sw = 1, dh = 1, dw = 1, ho = 0, wo = 0;
  };
  std::optional<ConvA> conv = std::nullopt;
  // A norm of A's rows before the product (a LayerNorm or RMSNorm that only this matmul
  // reads): A is replaced by norm(A), each row normalised over its K values as the norm
  // kernel (compile_layer_norm) computes it, with the same fp32 operations in the same
  // order: layer norm (x - mean) x rstd x weight + bias, rstd = 1 / sqrt(biased variance
  // + eps), rounded once to A's dtype; RMSNorm x x rsqrt(mean(x^2) + eps), rounded to
  // A's dtype, then x weight (of A's dtype), rounded again. The cores of each grid row
  // share out the statistics of its rows (one more read of those rows, in pieces of whole
  // rows, before the first matmul; again when a super-block brings new rows) and send
  // them to each other over the ring; A's panels travel as loaded, and each core
  // normalises its own copy once it has passed it on: norm(A) never goes to DRAM.
  // weight and bias: K values each, the arguments after every other (weight first). A
  // row-major (not transposed), unbatched, not a convolution.
  struct Norm {
    bool rms = false;
    double eps = 1e-5;
    std::optional<isa::DType> weight = std::nullopt, bias = std::nullopt;
  };
  std::optional<Norm> norm = std::nullopt;

  isa::DType out_dtype() const { return out ? *out : dtype; }
  isa::DType accumulator() const { return isa::is_float(dtype) ? isa::DType::fp32 : isa::DType::int32; }
};

// How compile_matmul laid the work out (for tests, dumps and the benchmark).
struct MatmulPlan {
  std::uint64_t tm = 0, tn = 0, tk = 0;      // tile
  std::uint32_t rows_per_core = 1;           // tiles stacked along M on one core, sharing its B panel
  std::uint32_t grid_rows = 1, grid_cols = 1;  // cores per group: Gr x Gc
  std::uint32_t groups = 1;
  std::uint64_t super_blocks = 0;
  std::uint64_t dram_read_bytes = 0;  // A and B panels read from DRAM (the model's estimate)
  double predicted_s = 0;  // the cost model's time for the plan (0: the target's rates are unknown)
};

MatmulPlan plan_matmul(const MatmulShape& shape, const Target& target);

// How many of a convolution's `in` input positions along one dimension it reads: those
// o * stride + t * dilation - pad, for o < out and t < taps, inside [0, in). An op's
// least traffic counts these (a 1x1 convolution of stride 2 reads every other row and
// column; padding is not read).
std::uint64_t conv_positions_read(std::uint64_t in, std::uint64_t out, std::uint64_t taps, std::uint64_t stride,
                                  std::uint64_t dilation, std::uint64_t pad);

// Two tiles per core run one K step apart from this many K steps on: the extra load
// of the first B panel costs 1 / steps of the B traffic (1024^3, 2 steps: 55.9 us
// against 53.7 us in lockstep; 2048^3, 4 steps: 282.0 against 297.6).
inline constexpr std::uint64_t kRotateSteps = 4;

// Panels move in this many pieces (by rows), each one DMA, so a core forwards the first
// piece while the second is still arriving: the pipeline's start-up skew along a chain
// of cores halves.
inline constexpr std::uint32_t kPanelPieces = 2;


// A norm prologue's statistics are computed in pieces of whole rows of at most this many
// bytes (the rows as loaded, twice for double buffering, and in fp32).
inline constexpr std::uint64_t kNormStatsBytes = 256 * 1024;

// Arguments: 0 = A, 1 = B, 2 = C, then the bias, the scale and the residual, each when
// given, or B's further pieces, then a norm prologue's weight and bias. Throws std::invalid_argument naming the shapes and
// the bytes needed when no tiling fits the scratchpad.
std::vector<std::uint8_t> compile_matmul(const MatmulShape& shape, const Target& target, const std::string& name);

}  // namespace spyre::compiler
