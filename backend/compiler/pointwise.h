// The kernel compiler's pointwise family: any elementwise computation over operands
// of any strides (broadcast = stride 0, views, negative strides) and mixed dtypes,
// written as a small expression (steps of vector instructions) evaluated tile by tile.
//
// The kernel IR: an iteration shape (innermost dimension first), one stride vector per
// operand, and the steps. The compiler picks a tile box over the three innermost
// dimensions that fits the scratchpad (inputs and output double-buffered), splits the
// tiles over the cores in contiguous runs, and emits per tile: strided DMA loads of
// each input (an operand broadcast along the tile loads only its row, column or single
// value and the vector instruction broadcasts it), conversions to each step's dtype,
// the steps, a conversion to the output dtype and a strided DMA store. The next tile's
// loads overlap the current tile's compute and the previous tile's store.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "compiler/elementwise.h"
#include "spyre/isa/isa.h"

namespace spyre::compiler {

struct Operand {
  isa::DType dtype = isa::DType::fp32;
  std::vector<std::int64_t> strides;  // in elements, one per dimension of the kernel's shape
};

// An argument of a step: an input operand, an earlier step's result, a constant, or a
// random number (fp32, index = isa::RandomDist) drawn for the element: number j of the
// launch's random stream, j being the element's position in the iteration shape
// (innermost first), so a seed gives the same values however the work is split.
struct Value {
  enum class Kind : std::uint8_t { input, step, constant, random };
  Kind kind = Kind::input;
  std::uint32_t index = 0;
  double constant_value = 0;

  static Value input(std::uint32_t i) { return {Kind::input, i, 0}; }
  static Value step(std::uint32_t i) { return {Kind::step, i, 0}; }
  static Value constant(double v) { return {Kind::constant, 0, v}; }
  static Value random(isa::RandomDist d) { return {Kind::random, static_cast<std::uint32_t>(d), 0}; }
};

struct Step {
  enum class Kind : std::uint8_t { unary, binary, compare, select, convert };
  Kind kind = Kind::unary;
  std::uint8_t op = 0;  // isa::UnaryOp / BinaryOp / CompareOp for those kinds
  // The dtype the step computes in: its arguments are converted to it first (select:
  // a and b; its condition is converted to bool). The result has this dtype (compare:
  // bool; convert: this is the target dtype).
  isa::DType dtype = isa::DType::fp32;
  std::vector<Value> args;  // unary/convert 1, binary/compare 2 (a, b), select 3 (cond, a, b)

  static Step unary(isa::UnaryOp op, isa::DType dtype, Value a) {
    return {Kind::unary, static_cast<std::uint8_t>(op), dtype, {a}};
  }
  static Step binary(isa::BinaryOp op, isa::DType dtype, Value a, Value b) {
    return {Kind::binary, static_cast<std::uint8_t>(op), dtype, {a, b}};
  }
  static Step compare(isa::CompareOp op, isa::DType dtype, Value a, Value b) {
    return {Kind::compare, static_cast<std::uint8_t>(op), dtype, {a, b}};
  }
  static Step select(isa::DType dtype, Value cond, Value a, Value b) { return {Kind::select, 0, dtype, {cond, a, b}}; }
  static Step convert(isa::DType to, Value a) { return {Kind::convert, 0, to, {a}}; }
};

struct PointwiseKernel {
  std::vector<std::uint64_t> shape;  // innermost first; empty = one element
  std::vector<Operand> inputs;       // launch arguments 0 .. n-1
  Operand output;                    // launch argument n
  // output = the last step's result (input 0 when there are none: a copy), converted
  // to output.dtype.
  std::vector<Step> steps;

  // Whether a step draws random numbers: the launch then takes one more argument, after
  // the output, the random state (16 bytes of device memory: seed and offset, two
  // little-endian uint64; isa::VRandom). A kernel with random values may have no inputs.
  bool random() const;
  // Whether a step draws from `dist`.
  bool draws(isa::RandomDist dist) const;

  // A canonical description (shape, strides, dtypes, steps and constants) for caches.
  std::string key() const;
};

// The least DRAM bytes the kernel needs: each input's distinct elements once (a
// broadcast dimension, stride 0, counts once) and the output once.
std::uint64_t min_read_bytes(const PointwiseKernel& kernel);
std::uint64_t min_write_bytes(const PointwiseKernel& kernel);

// The lowest element offset (<= 0) an operand with these strides touches. A launch
// passes each operand's address as data + lowest_offset * element size, so programs
// address every operand with non-negative offsets.
std::int64_t lowest_offset(const std::vector<std::uint64_t>& shape, const std::vector<std::int64_t>& strides);

// Throws std::invalid_argument for a malformed kernel (wrong stride counts, step
// arguments out of range) and, naming the kernel and the bytes needed against those
// available, when no tile fits the scratchpad.
std::vector<std::uint8_t> compile_pointwise(const PointwiseKernel& kernel, const Target& target,
                                            const std::string& name);

// Independent kernels in one launch (compiler/group.h): each compiled as above, kernel
// m's launch arguments (inputs, output, random state) following kernel m-1's. No kernel
// may read what another writes.
std::vector<std::uint8_t> compile_pointwise_group(const std::vector<PointwiseKernel>& kernels, const Target& target,
                                                  const std::string& name);

}  // namespace spyre::compiler
