// The kernel compiler's reductions and softmax over a strided 2-D view of the input:
// `outer` independent results, each over `reduced` elements (the backend permutes and
// coalesces any set of reduced dimensions into this form).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "compiler/elementwise.h"
#include "spyre/isa/isa.h"

namespace spyre::compiler {

struct ReduceShape {
  std::uint64_t outer = 1, reduced = 1;
  std::int64_t outer_stride = 0, reduced_stride = 1;  // input strides, in elements
  isa::DType in = isa::DType::fp32;
  isa::DType out = isa::DType::fp32;
  isa::ReduceOp op = isa::ReduceOp::sum;
  double scale = 1;  // the result is multiplied by it (mean: 1 / reduced)
};

// out[a] = scale * reduce_r in[a * outer_stride + r * reduced_stride], accumulated in
// fp32 (floats) or int32 (integers), stored as a contiguous array of `outer` values.
// Outputs are split over the cores; each core streams its input tiles with
// double-buffered DMA: along rows when the reduced elements are adjacent in memory,
// down columns when the outputs are. Arguments: 0 = in, 1 = out.
std::vector<std::uint8_t> compile_reduce(const ReduceShape& shape, const Target& target, const std::string& name);

struct SoftmaxShape {
  std::uint64_t rows = 1, cols = 1;  // softmax along each row of cols contiguous values
  std::int64_t row_stride = 0;       // in elements (input and output alike)
  isa::DType in = isa::DType::fp32;
  isa::DType out = isa::DType::fp32;
  bool log = false;  // log_softmax
  // _safe_softmax (attention's): a row that is all -inf gives zeros, not NaN. (Its
  // max is -inf: the row is shifted by 0 instead and divided by 1 instead of 0.)
  bool safe = false;
};

// Each tile holds whole rows in fp32: max, exp(x - max), sum, then divide (softmax)
// or subtract the log of the sum (log_softmax); one read and one write of the data.
// Arguments: 0 = in, 1 = out (same layout). Throws std::invalid_argument naming the
// bytes a row needs when one does not fit the scratchpad.
std::vector<std::uint8_t> compile_softmax(const SoftmaxShape& shape, const Target& target, const std::string& name);

struct LayerNormShape {
  std::uint64_t rows = 1, cols = 1;  // normalise each row of cols contiguous values
  isa::DType in = isa::DType::fp32;  // the input and the output
  std::optional<isa::DType> weight = std::nullopt, bias = std::nullopt;  // the affine parameters' dtype, when given (cols values each)
  isa::DType stats = isa::DType::fp32;     // mean and 1/std (rows values each)
  double eps = 1e-5;
  // RMSNorm instead (PyTorch's rms_norm): no mean and no bias; x * rsqrt(mean(x^2) +
  // eps) rounded to `in`, then * weight, stored as `out` (the promoted dtype of the
  // input and the weight); no statistics. Arguments: 0 = in, [1 = weight], then out.
  bool rms = false;
  std::optional<isa::DType> out = std::nullopt;  // default: `in`
};

// Each tile holds whole rows in fp32: mean, x - mean, the biased variance by a second
// pass over the centred values, rstd = 1/sqrt(var + eps), (x - mean) * rstd, then
// * weight + bias (loaded once per core). One read of the input, one write of the
// output, mean and rstd. Arguments: 0 = in, then weight and bias when given, then
// out, mean, rstd. Throws std::invalid_argument naming the bytes a row needs when
// one does not fit the scratchpad.
std::vector<std::uint8_t> compile_layer_norm(const LayerNormShape& shape, const Target& target, const std::string& name);

// The norms of a list of tensors (_foreach_norm, clip_grad_norm_'s), as two launches
// whatever the list's length (CUDA's multi-tensor norm does the same). Each tensor is
// contiguous, `sizes[i]` elements of `dtypes[i]` (fp32, fp16, bf16). The tensors'
// elements, end to end, are cut into tiles and the tiles shared evenly over the cores;
// a core accumulates in fp32 the sum of x^2 (ord 2), of |x| (ord 1) or the max of |x|
// (ord inf) of each tensor it reaches and stores that partial result, so tensor i's
// partials are the `slots[i].count` fp32 values from `slots[i].first` of one buffer.
// The second launch combines each tensor's partials, takes the square root (ord 2)
// and stores the norm in the result dtype.
struct ForeachNormShape {
  std::vector<std::uint64_t> sizes;
  std::vector<isa::DType> dtypes;
  isa::DType out = isa::DType::fp32;
  double ord = 2;  // 1, 2 or inf
};
struct ForeachNormPlan {
  struct Slots {
    std::uint64_t first = 0, count = 0;
  };
  std::uint64_t tile = 0;         // elements per tile
  std::vector<Slots> slots;       // tensor i's partials
  std::uint64_t partials = 0;     // the partials buffer's fp32 values
};
// Throws std::invalid_argument for an order, a dtype or a size the kernels do not
// take (an empty tensor: the caller gives its norm, 0, itself), or too many tensors
// for one launch's arguments.
ForeachNormPlan plan_foreach_norm(const ForeachNormShape& shape, const Target& target);
// Arguments: 0 .. n-1 = the tensors, n = the partials buffer.
std::vector<std::uint8_t> compile_foreach_norm_partials(const ForeachNormShape& shape, const Target& target,
                                                        const std::string& name);
// Arguments: 0 = the partials buffer, 1 .. n = each tensor's norm (one value of `out`).
std::vector<std::uint8_t> compile_foreach_norm_finish(const ForeachNormShape& shape, const Target& target,
                                                      const std::string& name);

}  // namespace spyre::compiler
