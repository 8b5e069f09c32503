// The kernel compiler's row gather: out[i] = table[index[i]] for whole rows of a
// contiguous table (index_select along dim 0, embedding lookups). The table stays in
// device memory; each core takes a contiguous run of the indices, loads them into its
// scratchpad and issues dma_gather for them, a row piece at a time when rows are
// larger than half the scratchpad, storing each gathered block while the next one
// loads. Indices outside [0, rows) fault on the device, naming the index.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "compiler/elementwise.h"

namespace spyre::compiler {

struct GatherShape {
  std::uint64_t count = 0;      // indices (rows of the output)
  std::uint64_t rows = 0;       // rows of the table
  std::uint64_t row_bytes = 0;  // bytes per row, table and output alike (contiguous rows)
  bool wide_index = true;       // int64 indices, else int32
};

// Arguments: 0 = table, 1 = indices (contiguous), 2 = out (contiguous). Throws
// std::invalid_argument for an empty gather or a scratchpad too small for one index
// and one stick.
std::vector<std::uint8_t> compile_gather(const GatherShape& shape, const Target& target, const std::string& name);

// The row scatter, index_copy_'s: table[o][index[i]] = source[o][i] for every outer
// position o (the dims before the indexed one, any strides) and whole rows (the dims
// after it, contiguous in the table). The table is written in place; only the rows
// named move. Each core takes a run of (index block, outer position) units: it loads
// the block's indices once, then per outer position the source rows (contiguous) and
// a dma_scatter of them, double-buffered. An index outside [0, rows) faults.
struct ScatterShape {
  std::uint64_t count = 0;       // indices (source rows per outer position)
  std::uint64_t rows = 0;        // the table's size along the indexed dim
  std::uint64_t row_bytes = 0;   // bytes per row (contiguous in the table and the source)
  std::uint64_t row_stride = 0;  // bytes between the table's rows
  std::vector<std::uint64_t> outer_sizes, outer_strides;  // the outer dims: sizes and byte strides in the table
  // Bytes between the source's rows when they are not packed (a slice of a wider
  // tensor: the new K rows of a fused QKV projection); 0: row_bytes. Without outer dims.
  std::uint64_t source_row_stride = 0;
  bool wide_index = true;
  bool wrap = false;  // negative indices count from the end (index_put_), else they fault (index_copy_)
};

// Arguments: 0 = table, 1 = indices (contiguous), 2 = source (contiguous [outer...,
// count, row]). Throws DoesNotFit when two rows and an index do not fit the
// scratchpad, std::invalid_argument for an empty scatter.
std::vector<std::uint8_t> compile_scatter(const ScatterShape& shape, const Target& target, const std::string& name);

// Element gather along a dim, torch.gather's: out[o][i] = table_o[index[o][i]] for
// every outer position o (the other dims, any strides in the table), where table_o's
// elements are row_stride bytes apart. Each core takes a run of (outer position, index
// block) units: the block's indices, a dma_gather of single elements (each costs its
// whole stick), a store, double-buffered. An index outside [0, rows) faults.
struct GatherAlongShape {
  std::uint64_t count = 0;       // indices per outer position
  std::uint64_t rows = 0;        // the table's size along the dim
  std::uint64_t elem_bytes = 0;  // 1, 2, 4 or 8
  std::uint64_t row_stride = 0;  // bytes between the table's elements along the dim
  std::vector<std::uint64_t> outer_sizes, outer_strides;  // sizes and byte strides in the table
};
// Arguments: 0 = table, 1 = indices (int64, contiguous [outer..., count]), 2 = out
// (contiguous [outer..., count]).
std::vector<std::uint8_t> compile_gather_along(const GatherAlongShape& shape, const Target& target,
                                               const std::string& name);

}  // namespace spyre::compiler
