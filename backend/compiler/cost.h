// The compiler's prediction of a kernel's device time, from the target alone (no
// simulation): what the planners optimise and what the kernel benchmark checks against
// the simulated time on the default and what-if configs (backend/README.md).
#pragma once

#include "compiler/matmul.h"
#include "compiler/pointwise.h"
#include "compiler/reduce.h"

namespace spyre::compiler {

// A streaming kernel: every byte crosses DRAM once at the target's deliverable rate,
// while each core's vector units work through its share; double buffering overlaps
// the two, so the longer counts, plus the latencies of the first load and the last
// store. Seconds; 0 when the target's rates are unknown.
double predict_pointwise_s(const PointwiseKernel& kernel, const Target& target);
double predict_softmax_s(const SoftmaxShape& shape, const Target& target);

// A GEMM under `plan` (plan_matmul's): a pipeline of stages (each K step of each tile of
// each wave), a stage taking the longer of its compute (the systolic array's cycles,
// spyre/cost/systolic.h) and its DRAM time, plus the first panels' arrival and the last
// tile's conversion and store. The DRAM time counts the bytes as the chip charges them
// (each panel row whole sticks, a stick shared by consecutive rows of one DMA once) and
// is at least that of the busiest channel (the target's interleave and channel map; an
// upper bound: every super-block's panels are placed as the first one's) over the K
// steps whose loads are in flight together: 2 buffers plus one step of skew per grid
// row after the first.
double predict_matmul_s(const MatmulShape& shape, const MatmulPlan& plan, const Target& target);

}  // namespace spyre::compiler
