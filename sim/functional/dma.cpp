#include "functional/dma.h"

#include <cstdio>
#include <cstring>
#include <vector>

#include "spyre/checked.h"
#include "spyre/isa/program.h"

namespace spyre::sim::functional {

namespace {

// argument + offset, or a fault when the sum passes the 64-bit address space.
std::optional<DmaFault> base_address(const char* what, std::uint64_t argument, std::uint64_t offset,
                                     std::uint64_t& base) {
  const auto sum = checked::add(argument, offset);
  if (!sum) {
    return DmaFault{std::string(what) + "argument " + std::to_string(argument) + " + offset " +
                        std::to_string(offset) + ": the address runs past the 64-bit address space",
                    std::nullopt};
  }
  base = *sum;
  return std::nullopt;
}

std::string hex(std::uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

// [first, first + bytes) must lie in one live allocation, and in the one the argument
// points into: an offset or stride that walks out of the argument's buffer into a
// neighbour is a fault naming both, not a silent write into someone else's data
// (found by fuzz_program). An argument outside every allocation (a scalar, an end
// pointer) only gets the first check.
std::optional<DmaFault> check_access(const std::string& what, const DeviceMemory& memory, std::uint64_t argument,
                                     std::uint64_t first, std::uint64_t bytes) {
  if (auto err = memory.check(first, bytes)) return DmaFault{what + err->description, err->address};
  const auto home = memory.find(argument), there = memory.find(first);
  if (home && there && home->base != there->base) {
    return DmaFault{what + "[" + hex(first) + ", +" + std::to_string(bytes) + ") leaves its argument's " +
                        std::to_string(home->size) + "-byte allocation at " + hex(home->base) + " for another (" +
                        std::to_string(there->size) + " bytes at " + hex(there->base) + ")",
                    first};
  }
  return std::nullopt;
}

}  // namespace

std::optional<DmaFault> transfer(const isa::Dma& d, bool load, std::uint64_t argument, DeviceMemory& memory,
                                 std::uint8_t* sp, DmaResult& result,
                                 const std::function<void(std::uint64_t, std::uint64_t)>& on_run, bool move_bytes) {
  const std::int64_t size = isa::dtype_size(d.dtype);
  const char* what = load ? "DMA load from " : "DMA store to ";
  std::uint64_t base = 0;
  if (auto f = base_address(what, argument, d.offset, base)) return f;
  // isa::check refused strides whose reach does not fit 64 bits; every partial
  // offset below lies in [lo, lo + extent) and so fits too.
  const auto footprint = isa::dma_footprint(d);
  if (!footprint) return DmaFault{std::string(what) + "strides that reach past 64 bits", std::nullopt};
  // first = base + lo, in unsigned arithmetic: lo may be negative.
  const std::uint64_t below = std::uint64_t{0} - static_cast<std::uint64_t>(footprint->lo);
  if (footprint->lo < 0 && base < below) {
    return DmaFault{std::string(what) + "address " + std::to_string(base) + " with negative strides reaching " +
                        std::to_string(below) + " bytes below it: the access starts before address 0",
                    std::nullopt};
  }
  const std::uint64_t first = base + static_cast<std::uint64_t>(footprint->lo);
  if (auto f = check_access(what, memory, argument, first, footprint->extent)) return f;
  const std::uint64_t s0 = d.sp_stride[0] ? d.sp_stride[0] : d.shape[0];
  const std::uint64_t s1 = d.sp_stride[1] ? d.sp_stride[1] : s0 * d.shape[1];
  std::uint64_t run_start = 0, run_bytes = 0;
  const auto add_run = [&](std::uint64_t address, std::uint64_t bytes) {
    if (run_bytes != 0 && address == run_start + run_bytes) {
      run_bytes += bytes;
      return;
    }
    if (run_bytes != 0) on_run(run_start, run_bytes);
    run_start = address;
    run_bytes = bytes;
  };
  const std::uint64_t row_bytes = d.shape[0] * static_cast<std::uint64_t>(size);
  for (std::uint32_t i2 = 0; i2 < d.shape[2]; ++i2) {
    for (std::uint32_t i1 = 0; i1 < d.shape[1]; ++i1) {
      const std::uint64_t row = base + static_cast<std::uint64_t>((i1 * d.mem_stride[1] + i2 * d.mem_stride[2]) * size);
      std::uint8_t* sp_row = sp + d.sp_addr + (i1 * s0 + i2 * s1) * static_cast<std::uint64_t>(size);
      std::uint8_t* mem_row = memory.host(row);
      if (d.mem_stride[0] == 1) {
        if (move_bytes) std::memcpy(load ? sp_row : mem_row, load ? mem_row : sp_row, row_bytes);
        add_run(row, row_bytes);
        continue;
      }
      for (std::uint32_t i0 = 0; i0 < d.shape[0]; ++i0) {
        const std::int64_t delta = static_cast<std::int64_t>(i0) * d.mem_stride[0] * size;
        std::uint8_t* m = mem_row + delta;
        std::uint8_t* s = sp_row + static_cast<std::uint64_t>(i0) * size;
        if (move_bytes) std::memcpy(load ? s : m, load ? m : s, size);
        if (d.mem_stride[0] != 0 || i0 == 0) add_run(row + static_cast<std::uint64_t>(delta), size);
      }
    }
  }
  if (run_bytes != 0) on_run(run_start, run_bytes);
  result.useful_bytes = row_bytes * d.shape[1] * d.shape[2];
  result.sp_end = d.sp_addr + ((d.shape[0] - 1) + (d.shape[1] - 1) * s0 + (d.shape[2] - 1) * s1 + 1) * size;
  return std::nullopt;
}

std::optional<DmaFault> gather(const isa::DmaGather& g, std::uint64_t argument, DeviceMemory& memory,
                               std::uint8_t* sp, DmaResult& result,
                               const std::function<void(std::uint64_t, std::uint64_t)>& on_run, bool move_bytes) {
  std::uint64_t base = 0;
  const std::string what = g.scatter ? "DMA scatter" : "DMA gather";
  const std::string towards = g.scatter ? "DMA scatter to " : "DMA gather from ";
  if (auto f = base_address(towards.c_str(), argument, g.offset, base)) return f;
  const auto index = [&](std::uint32_t i) -> std::int64_t {
    if (g.wide_index) {
      std::int64_t v;
      std::memcpy(&v, sp + g.index_sp + std::uint64_t{i} * 8, 8);
      return v;
    }
    std::int32_t v;
    std::memcpy(&v, sp + g.index_sp + std::uint64_t{i} * 4, 4);
    return v;
  };
  // The indices are read once: rows copied into the scratchpad cannot change them.
  std::vector<std::int64_t> indices(g.count);
  for (std::uint32_t i = 0; i < g.count; ++i) {
    indices[i] = index(i);
    if (g.wrap && indices[i] < 0 && static_cast<std::uint64_t>(-(indices[i] + 1)) < g.rows) {
      indices[i] += static_cast<std::int64_t>(g.rows);
    }
  }
  for (std::uint32_t i = 0; i < g.count; ++i) {
    const std::int64_t v = indices[i];
    if (v < 0 || static_cast<std::uint64_t>(v) >= g.rows) {
      const std::string lowest = g.wrap ? "-" + std::to_string(g.rows) : std::string("0");
      return DmaFault{what + " index " + std::to_string(g.wrap ? index(i) : v) + " (entry " + std::to_string(i) +
                          " of " + std::to_string(g.count) + ") is outside the table's rows [" + lowest + ", " +
                          std::to_string(g.rows) + ")",
                      std::nullopt};
    }
    // isa::check made sure (rows - 1) * row_stride + row_bytes fits 64 bits.
    const auto row = checked::add(base, static_cast<std::uint64_t>(v) * g.row_stride);
    if (!row) {
      return DmaFault{what + " row " + std::to_string(v) + " (entry " + std::to_string(i) + ") lies past the " +
                          "64-bit address space",
                      std::nullopt};
    }
    if (auto f = check_access(towards.c_str(), memory, argument, *row, g.row_bytes)) return f;
  }
  for (std::uint32_t i = 0; i < g.count; ++i) {
    const std::uint64_t row = base + static_cast<std::uint64_t>(indices[i]) * g.row_stride;
    std::uint8_t* rows = sp + g.sp_addr + std::uint64_t{i} * g.row_bytes;
    if (move_bytes) {
      if (g.scatter) {
        std::memcpy(memory.host(row), rows, g.row_bytes);
      } else {
        std::memcpy(rows, memory.host(row), g.row_bytes);
      }
    }
    on_run(row, g.row_bytes);
  }
  result.useful_bytes = std::uint64_t{g.count} * g.row_bytes;
  result.sp_end = g.sp_addr + result.useful_bytes;
  return std::nullopt;
}

}  // namespace spyre::sim::functional
