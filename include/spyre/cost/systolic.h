// The compute array's time for a matrix multiply, written once for the chip model
// (sim/timing, which charges it) and the kernel compiler (backend/compiler/cost, which
// predicts with it). Standard library only. docs/ARCHITECTURE.md §4 gives the model.
#pragma once

#include <cstdint>

namespace spyre::cost {

// How operands flow through the array (the chip config's cores.compute_array.dataflow
// and spyre_device_properties_t.dataflow use the same numbers).
enum class Dataflow : std::uint8_t { output_stationary = 0, weight_stationary = 1, input_stationary = 2 };

constexpr std::uint64_t div_up(std::uint64_t a, std::uint64_t b) { return a / b + (a % b != 0 ? 1 : 0); }

// Cycles of an m x n x k multiply on one R x C array whose PEs do `simd_depth` MACs per
// cycle: K shrinks to ceil(k / depth); the operation is folded into F = ceil(Sr/R) x
// ceil(Sc/C) passes of T + fill cycles each, minus one:
//   output stationary: Sr = m, Sc = n, T = k', fill = R + C - 2
//   weight stationary: Sr = k', Sc = n, T = m, fill = 2R + C - 2
//   input stationary:  Sr = k', Sc = m, T = n, fill = 2R + C - 2
// (64 x 64 x 64 on one 32 x 32 array, depth 1: os 2 x 2 x (64 + 62) - 1 = 503; ws and
// is 2 x 2 x (64 + 94) - 1 = 631.) Every argument must be positive.
constexpr std::uint64_t array_matmul_cycles(Dataflow dataflow, std::uint64_t rows, std::uint64_t cols, std::uint64_t m,
                                            std::uint64_t n, std::uint64_t k, std::uint64_t simd_depth) {
  const std::uint64_t k_eff = div_up(k, simd_depth);
  std::uint64_t sr = m, sc = n, t = k_eff, fill = rows + cols - 2;
  if (dataflow == Dataflow::weight_stationary) sr = k_eff, sc = n, t = m, fill = 2 * rows + cols - 2;
  if (dataflow == Dataflow::input_stationary) sr = k_eff, sc = m, t = n, fill = 2 * rows + cols - 2;
  return div_up(sr, rows) * div_up(sc, cols) * (t + fill) - 1;
}

// A core's multiply: N is split across its corelets (ceil(n / corelets) each); the
// widest share sets the time.
constexpr std::uint64_t core_matmul_cycles(Dataflow dataflow, std::uint64_t rows, std::uint64_t cols,
                                           std::uint64_t corelets, std::uint64_t simd_depth, std::uint64_t m,
                                           std::uint64_t n, std::uint64_t k) {
  return array_matmul_cycles(dataflow, rows, cols, m, div_up(n, corelets), k, simd_depth);
}

// Operand elements an R x C array streams from the scratchpad for an m x n x k
// multiply: the stationary operand once, the moving ones once per fold that needs them.
//   output stationary: A once per column fold, B once per row fold:
//     ceil(n/C) x m x k + ceil(m/R) x n x k
//   weight stationary: B resident (k x n once), A once per column fold:
//     ceil(n/C) x m x k + k x n
//   input stationary: A resident (m x k once), B once per column fold of M:
//     ceil(m/C) x k x n + m x k
// (At full speed an output-stationary fold streams (R + C) x depth elements a cycle:
// 8 x 8 at depth 8, 128 elements = 256 fp16 bytes a cycle.)
constexpr std::uint64_t array_operand_elements(Dataflow dataflow, std::uint64_t rows, std::uint64_t cols,
                                               std::uint64_t m, std::uint64_t n, std::uint64_t k) {
  if (dataflow == Dataflow::weight_stationary) return div_up(n, cols) * m * k + k * n;
  if (dataflow == Dataflow::input_stationary) return div_up(m, cols) * k * n + m * k;
  return div_up(n, cols) * m * k + div_up(m, rows) * n * k;
}

static_assert(array_operand_elements(Dataflow::output_stationary, 8, 8, 16, 16, 64) == 2 * 16 * 64 + 2 * 16 * 64);
static_assert(array_matmul_cycles(Dataflow::output_stationary, 32, 32, 64, 64, 64, 1) == 503);
static_assert(array_matmul_cycles(Dataflow::weight_stationary, 32, 32, 64, 64, 64, 1) == 631);

}  // namespace spyre::cost
