#include "compiler/reduce.h"
#include "compiler/does_not_fit.h"
#include "compiler/arena.h"

#include <algorithm>
#include <cmath>
#include <array>
#include <cstdlib>
#include <limits>
#include <optional>
#include <utility>
#include <vector>
#include <stdexcept>

#include "compiler/pointwise.h"
#include "compiler/dma.h"
#include "spyre/isa/program.h"

namespace spyre::compiler {
namespace {


std::uint32_t align(std::uint64_t bytes) { return static_cast<std::uint32_t>((bytes + 63) / 64 * 64); }

isa::BinaryOp combine(isa::ReduceOp op) {
  switch (op) {
    case isa::ReduceOp::sum: return isa::BinaryOp::add;
    case isa::ReduceOp::max: return isa::BinaryOp::max;
    case isa::ReduceOp::min: return isa::BinaryOp::min;
  }
  return isa::BinaryOp::add;
}

// A run of items [first, last) of `total` for each of `cores` cores.
std::pair<std::uint64_t, std::uint64_t> share(std::uint64_t total, std::uint32_t cores, std::uint32_t core) {
  return {total * core / cores, total * (core + 1) / cores};
}

// Rows per tile of a row-wise kernel (whole rows in the scratchpad) needing bytes(r)
// for r rows: up to 64 K elements, at most a core's share, halved until they fit.
// Throws, naming the bytes one row needs, when not even one does.
template <class Bytes>
std::uint64_t rows_per_tile(const Bytes& bytes, std::uint64_t rows, std::uint64_t cols, isa::DType in,
                            const Target& target, const std::string& name) {
  if (bytes(1) > target.scratchpad_bytes) {
    throw DoesNotFit(name + ": a row of " + std::to_string(cols) + " " + std::string(isa::to_string(in)) +
                                " values needs " + std::to_string(bytes(1)) + " bytes of scratchpad, the device has " +
                                std::to_string(target.scratchpad_bytes));
  }
  std::uint64_t ac = std::min<std::uint64_t>((rows + target.cores - 1) / target.cores,
                                             std::max<std::uint64_t>(1, 64 * 1024 / cols));
  while (ac > 1 && bytes(ac) > target.scratchpad_bytes) ac /= 2;
  return ac;
}

// The scratchpad buffers of a row-wise kernel (softmax, layer norm), listed once: each
// holds `per_row` bytes per row of the tile plus `fixed` bytes. The bytes a tile of r
// rows needs and the buffers' addresses both come from this list, so they cannot
// disagree.
class RowBuffers {
 public:
  // A buffer; its index for at().
  std::size_t add(std::uint64_t per_row, std::uint64_t fixed = 0) {
    sizes_.push_back({per_row, fixed});
    return sizes_.size() - 1;
  }
  // A buffer only when `present` (else at() gives the fallback).
  std::optional<std::size_t> add_if(bool present, std::uint64_t per_row, std::uint64_t fixed = 0) {
    return present ? std::optional<std::size_t>(add(per_row, fixed)) : std::nullopt;
  }
  std::uint64_t bytes(std::uint64_t rows) const {
    std::uint64_t total = 0;
    for (const auto& [per_row, fixed] : sizes_) total += align(rows * per_row + fixed);
    return total;
  }
  // Lays the buffers out for tiles of `rows` rows.
  void place(std::uint64_t rows) {
    Arena alloc;
    offsets_.clear();
    for (const auto& [per_row, fixed] : sizes_) offsets_.push_back(alloc(rows * per_row + fixed));
  }
  std::uint32_t at(std::size_t i) const { return offsets_.at(i); }
  std::uint32_t at(const std::optional<std::size_t>& i, std::uint32_t fallback) const {
    return i ? offsets_.at(*i) : fallback;
  }

 private:
  std::vector<std::pair<std::uint64_t, std::uint64_t>> sizes_;
  std::vector<std::uint32_t> offsets_;
};

}  // namespace

std::vector<std::uint8_t> compile_reduce(const ReduceShape& s, const Target& target, const std::string& name) {
  const bool floats = isa::is_float(s.in);
  if (!floats && s.in != isa::DType::int32 && s.in != isa::DType::int8) {
    throw std::invalid_argument(name + ": reductions take fp32, fp16, bf16, int32 or int8 input, found " +
                                std::string(isa::to_string(s.in)));
  }
  if (s.outer == 0 || s.reduced == 0) throw std::invalid_argument(name + ": nothing to reduce (zero elements)");
  const isa::DType acc_t = floats ? isa::DType::fp32 : isa::DType::int32;
  const std::uint64_t in_size = isa::dtype_size(s.in), out_size = isa::dtype_size(s.out);
  // Rows when the reduced elements are the adjacent ones, columns when the outputs are.
  const bool rows_mode = s.outer == 1 || std::llabs(s.reduced_stride) <= std::llabs(s.outer_stride);
  const std::uint64_t cap = 64 * 1024;  // elements per tile
  const std::uint64_t a_share = (s.outer + target.cores - 1) / target.cores;
  std::uint64_t rc = 0, ac = 0;
  if (rows_mode) {
    rc = std::min(s.reduced, cap);
    ac = std::min(a_share, std::max<std::uint64_t>(1, cap / rc));
  } else {
    ac = std::min(a_share, cap);
    rc = std::min(s.reduced, std::max<std::uint64_t>(1, cap / ac));
  }
  const auto bytes = [&](std::uint64_t r, std::uint64_t a) {
    return 2ull * align(r * a * in_size) + 2ull * align(a * 4) + 2ull * align(a * out_size);
  };
  while (bytes(rc, ac) > target.scratchpad_bytes) {
    if (rc == 1 && ac == 1) {
      throw DoesNotFit(name + ": reducing " + std::to_string(s.outer) + "x" + std::to_string(s.reduced) +
                                  " " + std::string(isa::to_string(s.in)) + " needs at least " +
                                  std::to_string(bytes(1, 1)) + " bytes of scratchpad, the device has " +
                                  std::to_string(target.scratchpad_bytes));
    }
    if (rc >= ac) {
      rc = std::max<std::uint64_t>(1, rc / 2);
    } else {
      ac = std::max<std::uint64_t>(1, ac / 2);
    }
  }
  const std::uint32_t in_bytes = align(rc * ac * in_size);
  const std::uint32_t sp_in[2] = {0, in_bytes};
  const std::uint32_t sp_acc = 2 * in_bytes, sp_tmp = sp_acc + align(ac * 4);
  const std::uint32_t sp_out[2] = {sp_tmp + align(ac * 4), sp_tmp + align(ac * 4) + align(ac * out_size)};

  const std::uint64_t chunks_a = (s.outer + ac - 1) / ac, chunks_r = (s.reduced + rc - 1) / rc;
  // Fewer output chunks than cores (a full sum, a few long rows): each chunk's reduced
  // range is split over `parts` cores, which send their partial results over the ring
  // to the first core of their group; it combines them and stores. Otherwise each core
  // takes whole output chunks.
  const std::uint64_t parts = chunks_a < target.cores && chunks_r > 1
                                  ? std::min<std::uint64_t>(chunks_r, target.cores / chunks_a)
                                  : 1;
  const std::uint32_t cores =
      static_cast<std::uint32_t>(parts > 1 ? chunks_a * parts : std::min<std::uint64_t>(target.cores, chunks_a));
  const std::int64_t low = lowest_offset({s.outer, s.reduced}, {s.outer_stride, s.reduced_stride});
  constexpr std::uint8_t kRingToken = 4;
  isa::ProgramBuilder b(name, cores);
  for (std::uint32_t core = 0; core < cores; ++core) {
    // This core's segments: an output chunk and a run of its reduced chunks.
    struct Segment {
      std::uint64_t a, r_first, r_last;
    };
    std::vector<Segment> segments;
    if (parts > 1) {
      const auto [r_first, r_last] = share(chunks_r, static_cast<std::uint32_t>(parts), core % parts);
      segments.push_back({core / parts, r_first, r_last});
    } else {
      const auto [first_a, last_a] = share(chunks_a, cores, core);
      for (std::uint64_t a = first_a; a < last_a; ++a) segments.push_back({a, 0, chunks_r});
    }
    std::vector<std::array<std::uint64_t, 4>> units;  // a0, r0, alen, rlen
    std::vector<std::pair<bool, bool>> ends;           // first and last unit of a segment
    for (const Segment& g : segments) {
      for (std::uint64_t r = g.r_first; r < g.r_last; ++r) {
        const std::uint64_t a0 = g.a * ac, r0 = r * rc;
        units.push_back({a0, r0, std::min(ac, s.outer - a0), std::min(rc, s.reduced - r0)});
        ends.emplace_back(r == g.r_first, r + 1 == g.r_last);
      }
    }
    const auto load = [&](std::size_t u, std::uint32_t slot) {
      const auto [a0, r0, alen, rlen] = units[u];
      const std::uint64_t offset =
          static_cast<std::uint64_t>(static_cast<std::int64_t>(a0) * s.outer_stride +
                                     static_cast<std::int64_t>(r0) * s.reduced_stride - low) * in_size;
      const auto a = static_cast<std::uint32_t>(alen), r = static_cast<std::uint32_t>(rlen);
      b.add(core, rows_mode ? make_dma<isa::DmaLoad>(static_cast<std::uint8_t>(slot), s.in, 0, offset, sp_in[slot], {r, a, 1},
                                                {s.reduced_stride, s.outer_stride, 0})
                            : make_dma<isa::DmaLoad>(static_cast<std::uint8_t>(slot), s.in, 0, offset, sp_in[slot], {a, r, 1},
                                                {s.outer_stride, s.reduced_stride, 0}));
    };
    std::uint64_t stores = 0;
    if (!units.empty()) load(0, 0);
    for (std::size_t u = 0; u < units.size(); ++u) {
      const auto slot = static_cast<std::uint32_t>(u % 2);
      if (u + 1 < units.size()) load(u + 1, 1 - slot);
      b.add(core, wait_on(slot));
      const auto [a0, r0, alen, rlen] = units[u];
      const auto a = static_cast<std::uint32_t>(alen), r = static_cast<std::uint32_t>(rlen);
      const auto [first_r, last_r] = ends[u];
      b.add(core, isa::VReduce{.op = s.op, .in = s.in, .out = acc_t, .axis = static_cast<std::uint8_t>(rows_mode ? 1 : 0),
                               .src = sp_in[slot], .dst = first_r ? sp_acc : sp_tmp, .rows = rows_mode ? a : r,
                               .cols = rows_mode ? r : a});
      if (!first_r) {
        b.add(core, isa::VBinary{.op = combine(s.op), .dtype = acc_t, .bcast = isa::Broadcast::none, .a = sp_acc,
                                 .b = sp_tmp, .dst = sp_acc, .rows = 1, .cols = a});
      }
      if (!last_r) continue;
      if (parts > 1) {
        const auto root = static_cast<std::uint16_t>(core / parts * parts);
        if (core != root) {  // a partial result: to the group's first core
          b.add(core, isa::RingSend{.token = kRingToken, .dst_core = root, .tag = 0, .sp_addr = sp_acc, .bytes = a * 4});
          continue;
        }
        for (std::uint32_t q = root + 1; q < root + parts; ++q) {
          b.add(core, isa::RingRecv{.token = kRingToken, .src_core = static_cast<std::uint16_t>(q), .tag = 0,
                                    .sp_addr = sp_tmp, .bytes = a * 4});
          b.add(core, isa::VBinary{.op = combine(s.op), .dtype = acc_t, .bcast = isa::Broadcast::none, .a = sp_acc,
                                   .b = sp_tmp, .dst = sp_acc, .rows = 1, .cols = a});
        }
      }
      if (s.scale != 1) {
        b.add(core, isa::VBinary{.op = isa::BinaryOp::mul, .dtype = acc_t, .bcast = isa::Broadcast::immediate,
                                 .a = sp_acc, .b = 0, .dst = sp_acc, .rows = 1, .cols = a, .imm = s.scale});
      }
      const auto oslot = static_cast<std::uint32_t>(stores % 2);
      if (stores >= 2) b.add(core, wait_on(2 + oslot));
      if (s.out == acc_t) {
        b.add(core, isa::VUnary{.op = isa::UnaryOp::copy, .dtype = acc_t, .src = sp_acc, .dst = sp_out[oslot], .count = a});
      } else {
        b.add(core, isa::VConvert{.from = acc_t, .to = s.out, .src = sp_acc, .dst = sp_out[oslot], .count = a});
      }
      b.add(core, make_dma<isa::DmaStore>(static_cast<std::uint8_t>(2 + oslot), s.out, 1, a0 * out_size, sp_out[oslot],
                                     {a, 1, 1}, {1, 0, 0}));
      ++stores;
    }
    b.add(core, isa::Wait{.token_mask = static_cast<std::uint16_t>(parts > 1 ? 0x1f : 0xf)});
  }
  return b.build();
}

std::vector<std::uint8_t> compile_softmax(const SoftmaxShape& s, const Target& target, const std::string& name) {
  if (!isa::is_float(s.in) || !isa::is_float(s.out)) {
    throw std::invalid_argument(name + ": softmax takes floating-point tensors");
  }
  if (s.rows == 0 || s.cols == 0) throw std::invalid_argument(name + ": nothing to compute (zero elements)");
  const std::uint64_t in_size = isa::dtype_size(s.in), out_size = isa::dtype_size(s.out);
  const bool convert_in = s.in != isa::DType::fp32;
  RowBuffers buf;
  const std::size_t in0 = buf.add(s.cols * in_size), in1 = buf.add(s.cols * in_size);
  const auto x32 = buf.add_if(convert_in, s.cols * 4);
  const std::size_t y = buf.add(s.cols * 4), e = buf.add(s.cols * 4), m = buf.add(4), sum = buf.add(4);
  const std::size_t out0 = buf.add(s.cols * out_size), out1 = buf.add(s.cols * out_size);
  // Safe softmax: per-row constants 0 and 1 and a per-row mask.
  const auto zero = buf.add_if(s.safe, 4), one = buf.add_if(s.safe, 4), mask = buf.add_if(s.safe, 1);
  const std::uint64_t ac = rows_per_tile([&](std::uint64_t r) { return buf.bytes(r); }, s.rows, s.cols, s.in, target, name);
  buf.place(ac);
  const std::uint32_t sp_in[2] = {buf.at(in0), buf.at(in1)};
  const std::uint32_t sp_x = buf.at(x32, 0);
  const std::uint32_t sp_y = buf.at(y), sp_e = buf.at(e);
  const std::uint32_t sp_m = buf.at(m), sp_s = buf.at(sum);
  const std::uint32_t sp_out[2] = {buf.at(out0), buf.at(out1)};
  const std::uint32_t sp_zero = buf.at(zero, 0), sp_one = buf.at(one, 0), sp_mask = buf.at(mask, 0);

  const std::uint64_t chunks = (s.rows + ac - 1) / ac;
  const std::uint32_t cores = static_cast<std::uint32_t>(std::min<std::uint64_t>(target.cores, chunks));
  const auto cols = static_cast<std::uint32_t>(s.cols);
  const isa::DType f32 = isa::DType::fp32;
  isa::ProgramBuilder b(name, cores);
  for (std::uint32_t core = 0; core < cores; ++core) {
    const auto [first, last] = share(chunks, cores, core);
    const auto rows_of = [&](std::uint64_t u) { return static_cast<std::uint32_t>(std::min(ac, s.rows - u * ac)); };
    const auto offset = [&](std::uint64_t u, std::uint64_t size) {
      return static_cast<std::uint64_t>(static_cast<std::int64_t>(u * ac) * s.row_stride) * size;
    };
    const auto load = [&](std::uint64_t u, std::uint32_t slot) {
      b.add(core, make_dma<isa::DmaLoad>(static_cast<std::uint8_t>(slot), s.in, 0, offset(u, in_size), sp_in[slot],
                                    {cols, rows_of(u), 1}, {1, s.row_stride, 0}));
    };
    load(first, 0);
    if (s.safe) {
      const auto n_rows = static_cast<std::uint32_t>(ac);
      b.add(core, isa::VFill{.dtype = f32, .dst = sp_zero, .count = n_rows, .value = 0});
      b.add(core, isa::VFill{.dtype = f32, .dst = sp_one, .count = n_rows, .value = 1});
    }
    // A row vector v := (v <op> imm) ? c : v, for the safe softmax's two fix-ups.
    const auto fix = [&](std::uint32_t v, double imm, std::uint32_t c, std::uint32_t rows) {
      b.add(core, isa::VCompare{.op = isa::CompareOp::eq, .dtype = f32, .bcast = isa::Broadcast::immediate, .a = v,
                                .dst = sp_mask, .rows = 1, .cols = rows, .imm = imm});
      b.add(core, isa::VSelect{.dtype = f32, .cond = sp_mask, .a = c, .b = v, .dst = v, .count = rows});
    };
    for (std::uint64_t u = first; u < last; ++u) {
      const auto slot = static_cast<std::uint32_t>((u - first) % 2);
      if (u + 1 < last) load(u + 1, 1 - slot);
      b.add(core, wait_on(slot));
      if (u >= first + 2) b.add(core, wait_on(2 + slot));
      const std::uint32_t rows = rows_of(u), count = rows * cols;
      std::uint32_t x = sp_in[slot];
      if (convert_in) {
        b.add(core, isa::VConvert{.from = s.in, .to = f32, .src = x, .dst = sp_x, .count = count});
        x = sp_x;
      }
      const bool direct = s.out == f32;
      const std::uint32_t result = direct ? sp_out[slot] : sp_e;
      b.add(core, isa::VReduce{.op = isa::ReduceOp::max, .in = f32, .out = f32, .axis = 1, .src = x, .dst = sp_m,
                               .rows = rows, .cols = cols});
      if (s.safe) fix(sp_m, -std::numeric_limits<double>::infinity(), sp_zero, rows);
      b.add(core, isa::VBinary{.op = isa::BinaryOp::sub, .dtype = f32, .bcast = isa::Broadcast::col, .a = x, .b = sp_m,
                               .dst = sp_y, .rows = rows, .cols = cols});
      b.add(core, isa::VUnary{.op = isa::UnaryOp::exp, .dtype = f32, .src = sp_y, .dst = sp_e, .count = count});
      b.add(core, isa::VReduce{.op = isa::ReduceOp::sum, .in = f32, .out = f32, .axis = 1, .src = sp_e, .dst = sp_s,
                               .rows = rows, .cols = cols});
      if (s.safe) fix(sp_s, 0, sp_one, rows);
      if (s.log) {
        b.add(core, isa::VUnary{.op = isa::UnaryOp::log, .dtype = f32, .src = sp_s, .dst = sp_s, .count = rows});
        b.add(core, isa::VBinary{.op = isa::BinaryOp::sub, .dtype = f32, .bcast = isa::Broadcast::col, .a = sp_y,
                                 .b = sp_s, .dst = result, .rows = rows, .cols = cols});
      } else {
        b.add(core, isa::VBinary{.op = isa::BinaryOp::div, .dtype = f32, .bcast = isa::Broadcast::col, .a = sp_e,
                                 .b = sp_s, .dst = result, .rows = rows, .cols = cols});
      }
      if (!direct) {
        b.add(core, isa::VConvert{.from = f32, .to = s.out, .src = result, .dst = sp_out[slot], .count = count});
      }
      b.add(core, make_dma<isa::DmaStore>(static_cast<std::uint8_t>(2 + slot), s.out, 1, offset(u, out_size), sp_out[slot],
                                     {cols, rows, 1}, {1, s.row_stride, 0}));
    }
    b.add(core, isa::Wait{.token_mask = 0xf});
  }
  return b.build();
}

std::vector<std::uint8_t> compile_layer_norm(const LayerNormShape& s, const Target& target, const std::string& name) {
  if (!isa::is_float(s.in) || !isa::is_float(s.stats) || (s.weight && !isa::is_float(*s.weight)) ||
      (s.bias && !isa::is_float(*s.bias))) {
    throw std::invalid_argument(name + ": layer norm takes floating-point tensors");
  }
  if (s.rows == 0 || s.cols == 0) throw std::invalid_argument(name + ": nothing to compute (zero elements)");
  if (s.rms && s.bias) throw std::invalid_argument(name + ": RMSNorm takes no bias");
  if (s.out && (!isa::is_float(*s.out) || (!s.rms && *s.out != s.in))) {
    throw std::invalid_argument(name + ": the output dtype differs from the input's only for RMSNorm");
  }
  const isa::DType f32 = isa::DType::fp32, out_t = s.out.value_or(s.in);
  const bool rms = s.rms;
  const std::uint64_t in_size = isa::dtype_size(s.in), out_size = isa::dtype_size(out_t);
  const std::uint64_t stat_size = isa::dtype_size(s.stats);
  const bool convert_in = s.in != f32, convert_stats = !rms && s.stats != f32;
  const std::uint64_t params = (s.weight ? 1 : 0) + (s.bias ? 1 : 0);
  RowBuffers buf;
  const std::size_t in0 = buf.add(s.cols * in_size), in1 = buf.add(s.cols * in_size);
  const auto x32 = buf.add_if(convert_in, s.cols * 4);
  const auto y = buf.add_if(!rms, s.cols * 4);
  const std::size_t e = buf.add(s.cols * 4);
  const std::size_t m0 = buf.add(4), m1 = buf.add(4), r0 = buf.add(4), r1 = buf.add(4);
  // Mean and rstd in their own dtype (else the fp32 buffers are stored directly).
  const auto mo0 = buf.add_if(convert_stats, stat_size), mo1 = buf.add_if(convert_stats, stat_size);
  const auto ro0 = buf.add_if(convert_stats, stat_size), ro1 = buf.add_if(convert_stats, stat_size);
  const std::size_t out0 = buf.add(s.cols * out_size), out1 = buf.add(s.cols * out_size);
  // A parameter (cols values, loaded once per core): fp32, and its raw values when
  // they are not fp32 already.
  const auto w = buf.add_if(s.weight.has_value(), 0, s.cols * 4);
  const auto w_raw = buf.add_if(s.weight && *s.weight != f32, 0, s.cols * (s.weight ? isa::dtype_size(*s.weight) : 0));
  const auto bias = buf.add_if(s.bias.has_value(), 0, s.cols * 4);
  const auto bias_raw = buf.add_if(s.bias && *s.bias != f32, 0, s.cols * (s.bias ? isa::dtype_size(*s.bias) : 0));
  const std::uint64_t ac = rows_per_tile([&](std::uint64_t r) { return buf.bytes(r); }, s.rows, s.cols, s.in, target, name);
  buf.place(ac);
  const std::uint64_t n = ac * s.cols;
  const std::uint32_t sp_in[2] = {buf.at(in0), buf.at(in1)};
  const std::uint32_t sp_x = buf.at(x32, 0);
  const std::uint32_t sp_y = buf.at(y, 0), sp_e = buf.at(e);
  const std::uint32_t sp_m[2] = {buf.at(m0), buf.at(m1)}, sp_r[2] = {buf.at(r0), buf.at(r1)};
  const std::uint32_t sp_mo[2] = {buf.at(mo0, sp_m[0]), buf.at(mo1, sp_m[1])};
  const std::uint32_t sp_ro[2] = {buf.at(ro0, sp_r[0]), buf.at(ro1, sp_r[1])};
  const std::uint32_t sp_out[2] = {buf.at(out0), buf.at(out1)};
  const std::uint32_t sp_w = buf.at(w, 0), sp_w_raw = buf.at(w_raw, sp_w);
  const std::uint32_t sp_b = buf.at(bias, 0), sp_b_raw = buf.at(bias_raw, sp_b);
  const std::uint16_t arg_w = 1, arg_b = s.weight ? 2 : 1;
  const auto arg_out = static_cast<std::uint16_t>(1 + params);
  const auto arg_mean = static_cast<std::uint16_t>(arg_out + 1), arg_rstd = static_cast<std::uint16_t>(arg_out + 2);

  const std::uint64_t chunks = (s.rows + ac - 1) / ac;
  const std::uint32_t cores = static_cast<std::uint32_t>(std::min<std::uint64_t>(target.cores, chunks));
  const auto cols = static_cast<std::uint32_t>(s.cols);
  const double inv_n = 1.0 / static_cast<double>(s.cols);
  isa::ProgramBuilder b(name, cores);
  for (std::uint32_t core = 0; core < cores; ++core) {
    const auto [first, last] = share(chunks, cores, core);
    const auto rows_of = [&](std::uint64_t u) { return static_cast<std::uint32_t>(std::min(ac, s.rows - u * ac)); };
    const auto load = [&](std::uint64_t u, std::uint32_t slot) {
      b.add(core, make_dma<isa::DmaLoad>(static_cast<std::uint8_t>(slot), s.in, 0, u * n * in_size, sp_in[slot],
                                         {cols, rows_of(u), 1}, {1, static_cast<std::int64_t>(s.cols), 0}));
    };
    // Tokens: 0/1 input slots, 2/3 output, 4/5 mean, 6/7 rstd, 8 parameters.
    if (s.weight) {
      b.add(core, make_dma<isa::DmaLoad>(8, *s.weight, arg_w, 0, sp_w_raw, {cols, 1, 1}, {1, 0, 0}));
    }
    if (s.bias) {
      b.add(core, make_dma<isa::DmaLoad>(8, *s.bias, arg_b, 0, sp_b_raw, {cols, 1, 1}, {1, 0, 0}));
    }
    load(first, 0);
    if (params > 0) {
      b.add(core, wait_on(8));
      if (s.weight && *s.weight != f32) {
        b.add(core, isa::VConvert{.from = *s.weight, .to = f32, .src = sp_w_raw, .dst = sp_w, .count = cols});
      }
      if (s.bias && *s.bias != f32) {
        b.add(core, isa::VConvert{.from = *s.bias, .to = f32, .src = sp_b_raw, .dst = sp_b, .count = cols});
      }
    }
    for (std::uint64_t u = first; u < last; ++u) {
      const auto slot = static_cast<std::uint32_t>((u - first) % 2);
      if (u + 1 < last) load(u + 1, 1 - slot);
      b.add(core, wait_on(slot));
      // The slot's buffers are free once the stores of two tiles ago are done.
      if (u >= first + 2) b.add(core, wait_on(2 + slot, 4 + slot, 6 + slot));
      const std::uint32_t rows = rows_of(u), count = rows * cols;
      std::uint32_t x = sp_in[slot];
      if (convert_in) {
        b.add(core, isa::VConvert{.from = s.in, .to = f32, .src = x, .dst = sp_x, .count = count});
        x = sp_x;
      }
      const std::uint32_t m = sp_m[slot], r = sp_r[slot];
      const auto scale = [&](std::uint32_t v, isa::BinaryOp op, double imm) {
        b.add(core, isa::VBinary{.op = op, .dtype = f32, .bcast = isa::Broadcast::immediate, .a = v, .dst = v,
                                 .rows = 1, .cols = rows, .imm = imm});
      };
      // y: the centred values (layer norm) or the values themselves (RMSNorm).
      std::uint32_t yv = sp_y;
      if (rms) {
        yv = x;
      } else {
        b.add(core, isa::VReduce{.op = isa::ReduceOp::sum, .in = f32, .out = f32, .axis = 1, .src = x, .dst = m,
                                 .rows = rows, .cols = cols});
        scale(m, isa::BinaryOp::mul, inv_n);
        b.add(core, isa::VBinary{.op = isa::BinaryOp::sub, .dtype = f32, .bcast = isa::Broadcast::col, .a = x,
                                 .b = m, .dst = sp_y, .rows = rows, .cols = cols});
      }
      b.add(core, isa::VBinary{.op = isa::BinaryOp::mul, .dtype = f32, .a = yv, .b = yv, .dst = sp_e,
                               .rows = rows, .cols = cols});
      b.add(core, isa::VReduce{.op = isa::ReduceOp::sum, .in = f32, .out = f32, .axis = 1, .src = sp_e, .dst = r,
                               .rows = rows, .cols = cols});
      scale(r, isa::BinaryOp::mul, inv_n);
      scale(r, isa::BinaryOp::add, s.eps);
      b.add(core, isa::VUnary{.op = isa::UnaryOp::rsqrt, .dtype = f32, .src = r, .dst = r, .count = rows});
      const bool direct = out_t == f32;
      b.add(core, isa::VBinary{.op = isa::BinaryOp::mul, .dtype = f32, .bcast = isa::Broadcast::col, .a = yv, .b = r,
                               .dst = sp_e, .rows = rows, .cols = cols});
      if (rms && s.weight && s.in != f32) {
        // PyTorch rounds the normalised value to the input's dtype before the weight.
        b.add(core, isa::VConvert{.from = f32, .to = s.in, .src = sp_e, .dst = sp_out[slot], .count = count});
        b.add(core, isa::VConvert{.from = s.in, .to = f32, .src = sp_out[slot], .dst = sp_e, .count = count});
      }
      if (s.weight) {
        b.add(core, isa::VBinary{.op = isa::BinaryOp::mul, .dtype = f32, .bcast = isa::Broadcast::row, .a = sp_e,
                                 .b = sp_w, .dst = sp_e, .rows = rows, .cols = cols});
      }
      if (s.bias) {
        b.add(core, isa::VBinary{.op = isa::BinaryOp::add, .dtype = f32, .bcast = isa::Broadcast::row, .a = sp_e,
                                 .b = sp_b, .dst = sp_e, .rows = rows, .cols = cols});
      }
      if (direct) {
        b.add(core, isa::VUnary{.op = isa::UnaryOp::copy, .dtype = f32, .src = sp_e, .dst = sp_out[slot], .count = count});
      } else {
        b.add(core, isa::VConvert{.from = f32, .to = out_t, .src = sp_e, .dst = sp_out[slot], .count = count});
      }
      if (convert_stats) {
        b.add(core, isa::VConvert{.from = f32, .to = s.stats, .src = m, .dst = sp_mo[slot], .count = rows});
        b.add(core, isa::VConvert{.from = f32, .to = s.stats, .src = r, .dst = sp_ro[slot], .count = rows});
      }
      b.add(core, make_dma<isa::DmaStore>(static_cast<std::uint8_t>(2 + slot), out_t, arg_out, u * n * out_size,
                                          sp_out[slot], {cols, rows, 1}, {1, static_cast<std::int64_t>(s.cols), 0}));
      if (rms) continue;
      b.add(core, make_dma<isa::DmaStore>(static_cast<std::uint8_t>(4 + slot), s.stats, arg_mean, u * ac * stat_size,
                                          sp_mo[slot], {rows, 1, 1}, {1, 0, 0}));
      b.add(core, make_dma<isa::DmaStore>(static_cast<std::uint8_t>(6 + slot), s.stats, arg_rstd, u * ac * stat_size,
                                          sp_ro[slot], {rows, 1, 1}, {1, 0, 0}));
    }
    b.add(core, isa::Wait{.token_mask = 0x1ff});
  }
  return b.build();
}

}  // namespace spyre::compiler

namespace spyre::compiler {
namespace {

// A piece of the tensors' elements end to end: `len` elements of tensor `tensor` from
// its element `at`.
struct NormPiece {
  std::size_t tensor;
  std::uint64_t at, len;
};

// Fewer elements than this per core cost more in a core's setup than they save.
constexpr std::uint64_t kNormElementsPerCore = 8192;

std::uint32_t norm_cores(const ForeachNormShape& s, const Target& target) {
  std::uint64_t total = 0;
  for (const auto n : s.sizes) total += n;
  return static_cast<std::uint32_t>(
      std::clamp<std::uint64_t>((total + kNormElementsPerCore - 1) / kNormElementsPerCore, 1, target.cores));
}

// Core `core`'s pieces: its even share of the elements end to end, cut at tensor ends
// and every `tile` elements.
std::vector<NormPiece> norm_pieces(const ForeachNormShape& s, std::uint64_t tile, std::uint32_t cores,
                                   std::uint32_t core) {
  std::uint64_t total = 0;
  for (const auto n : s.sizes) total += n;
  const auto [lo, hi] = share(total, cores, core);
  std::vector<NormPiece> pieces;
  std::uint64_t start = 0;  // tensor i's first element, end to end
  for (std::size_t i = 0; i < s.sizes.size(); start += s.sizes[i], ++i) {
    const std::uint64_t from = std::max(lo, start), to = std::min(hi, start + s.sizes[i]);
    for (std::uint64_t e = from; e < to; e += tile) pieces.push_back({i, e - start, std::min(tile, to - e)});
  }
  return pieces;
}

}  // namespace

ForeachNormPlan plan_foreach_norm(const ForeachNormShape& s, const Target& target) {
  if (s.ord != 1 && s.ord != 2 && !std::isinf(s.ord)) {
    throw std::invalid_argument("_foreach_norm: the device computes orders 1, 2 and inf, found " +
                                std::to_string(s.ord));
  }
  if (s.sizes.empty() || s.sizes.size() != s.dtypes.size()) {
    throw std::invalid_argument("_foreach_norm: expected one dtype per tensor and at least one tensor, found " +
                                std::to_string(s.sizes.size()) + " sizes and " + std::to_string(s.dtypes.size()) +
                                " dtypes");
  }
  if (s.sizes.size() + 1 > isa::kMaxArgs) {
    throw std::invalid_argument("_foreach_norm: " + std::to_string(s.sizes.size()) + " tensors take " +
                                std::to_string(s.sizes.size() + 1) + " launch arguments, a launch has at most " +
                                std::to_string(isa::kMaxArgs));
  }
  std::uint64_t in_size = 0;
  for (std::size_t i = 0; i < s.sizes.size(); ++i) {
    if (!isa::is_float(s.dtypes[i]) || s.sizes[i] == 0) {
      throw std::invalid_argument("_foreach_norm: tensor " + std::to_string(i) +
                                  " must be a non-empty fp32, fp16 or bf16 tensor, found " +
                                  std::to_string(s.sizes[i]) + " " + std::string(isa::to_string(s.dtypes[i])));
    }
    in_size = std::max<std::uint64_t>(in_size, isa::dtype_size(s.dtypes[i]));
  }
  if (!isa::is_float(s.out)) throw std::invalid_argument("_foreach_norm: the result dtype must be a float");
  ForeachNormPlan plan;
  // Two input buffers and an fp32 work buffer per element, four 64-byte scalars:
  // 64 K elements (fp32: 768 KiB), fewer on a smaller scratchpad, a multiple of 64.
  const std::uint64_t per_element = 2 * in_size + 4, fixed = 4 * 64;
  if (target.scratchpad_bytes < fixed + 64 * per_element) {
    throw DoesNotFit("_foreach_norm: needs at least " + std::to_string(fixed + 64 * per_element) +
                     " bytes of scratchpad, the device has " + std::to_string(target.scratchpad_bytes));
  }
  plan.tile = std::min<std::uint64_t>(64 * 1024, (target.scratchpad_bytes - fixed) / per_element / 64 * 64);
  plan.slots.resize(s.sizes.size());
  const std::uint32_t cores = norm_cores(s, target);
  // Slots in tensor order, then core order: a tensor's partials are adjacent.
  std::vector<std::vector<std::uint32_t>> reached(s.sizes.size());
  for (std::uint32_t core = 0; core < cores; ++core) {
    for (const NormPiece& p : norm_pieces(s, plan.tile, cores, core)) {
      if (reached[p.tensor].empty() || reached[p.tensor].back() != core) reached[p.tensor].push_back(core);
    }
  }
  for (std::size_t i = 0; i < s.sizes.size(); ++i) {
    plan.slots[i] = {plan.partials, reached[i].size()};
    plan.partials += reached[i].size();
  }
  return plan;
}

std::vector<std::uint8_t> compile_foreach_norm_partials(const ForeachNormShape& s, const Target& target,
                                                        const std::string& name) {
  const ForeachNormPlan plan = plan_foreach_norm(s, target);
  const std::uint32_t cores = norm_cores(s, target);
  const auto n = static_cast<std::uint16_t>(s.sizes.size());
  const bool sum = !std::isinf(s.ord);
  const isa::DType f32 = isa::DType::fp32;
  std::uint64_t in_size = 0;
  for (const auto d : s.dtypes) in_size = std::max<std::uint64_t>(in_size, isa::dtype_size(d));
  Arena alloc;
  const std::uint32_t sp_in[2] = {alloc(plan.tile * in_size), alloc(plan.tile * in_size)};
  const std::uint32_t sp_x = alloc(plan.tile * 4), sp_acc = alloc(4), sp_tmp = alloc(4);
  const std::uint32_t sp_out[2] = {alloc(4), alloc(4)};
  // The next slot of each tensor's partials (cores store theirs in core order).
  std::vector<std::uint64_t> next_slot(s.sizes.size());
  for (std::size_t i = 0; i < s.sizes.size(); ++i) next_slot[i] = plan.slots[i].first;
  isa::ProgramBuilder b(name, cores);
  for (std::uint32_t core = 0; core < cores; ++core) {
    const std::vector<NormPiece> pieces = norm_pieces(s, plan.tile, cores, core);
    const auto load = [&](std::size_t u, std::uint32_t slot) {
      const NormPiece& p = pieces[u];
      const isa::DType t = s.dtypes[p.tensor];
      b.add(core, make_dma<isa::DmaLoad>(static_cast<std::uint8_t>(slot), t, static_cast<std::uint16_t>(p.tensor),
                                         p.at * isa::dtype_size(t), sp_in[slot], {static_cast<std::uint32_t>(p.len), 1, 1},
                                         {1, 0, 0}));
    };
    std::uint64_t stores = 0;
    if (!pieces.empty()) load(0, 0);
    for (std::size_t u = 0; u < pieces.size(); ++u) {
      const auto slot = static_cast<std::uint32_t>(u % 2);
      if (u + 1 < pieces.size()) load(u + 1, 1 - slot);
      b.add(core, wait_on(slot));
      const NormPiece& p = pieces[u];
      const auto len = static_cast<std::uint32_t>(p.len);
      const isa::DType t = s.dtypes[p.tensor];
      std::uint32_t x = sp_in[slot];
      if (t != f32) {
        b.add(core, isa::VConvert{.from = t, .to = f32, .src = x, .dst = sp_x, .count = len});
        x = sp_x;
      }
      if (s.ord == 2) {
        b.add(core, isa::VBinary{.op = isa::BinaryOp::mul, .dtype = f32, .bcast = isa::Broadcast::none, .a = x, .b = x,
                                 .dst = sp_x, .rows = 1, .cols = len});
      } else {
        b.add(core, isa::VUnary{.op = isa::UnaryOp::abs, .dtype = f32, .src = x, .dst = sp_x, .count = len});
      }
      const bool first = u == 0 || pieces[u - 1].tensor != p.tensor;
      const bool last = u + 1 == pieces.size() || pieces[u + 1].tensor != p.tensor;
      const isa::ReduceOp op = sum ? isa::ReduceOp::sum : isa::ReduceOp::max;
      b.add(core, isa::VReduce{.op = op, .in = f32, .out = f32, .axis = 1, .src = sp_x, .dst = first ? sp_acc : sp_tmp,
                               .rows = 1, .cols = len});
      if (!first) {
        b.add(core, isa::VBinary{.op = combine(op), .dtype = f32, .bcast = isa::Broadcast::none, .a = sp_acc,
                                 .b = sp_tmp, .dst = sp_acc, .rows = 1, .cols = 1});
      }
      if (!last) continue;
      const auto oslot = static_cast<std::uint32_t>(stores % 2);
      if (stores >= 2) b.add(core, wait_on(2 + oslot));
      b.add(core, isa::VUnary{.op = isa::UnaryOp::copy, .dtype = f32, .src = sp_acc, .dst = sp_out[oslot], .count = 1});
      b.add(core, make_dma<isa::DmaStore>(static_cast<std::uint8_t>(2 + oslot), f32, n, next_slot[p.tensor]++ * 4,
                                          sp_out[oslot], {1, 1, 1}, {1, 0, 0}));
      ++stores;
    }
    b.add(core, isa::Wait{.token_mask = 0xf});
  }
  return b.build();
}

std::vector<std::uint8_t> compile_foreach_norm_finish(const ForeachNormShape& s, const Target& target,
                                                      const std::string& name) {
  const ForeachNormPlan plan = plan_foreach_norm(s, target);
  const std::size_t n = s.sizes.size();
  const isa::DType f32 = isa::DType::fp32;
  Arena alloc;
  const std::uint32_t sp_partials = alloc(plan.partials * 4), sp_norms = alloc(n * 4);
  const std::uint32_t sp_out = alloc(n * isa::dtype_size(s.out));
  if (alloc.next > target.scratchpad_bytes) {
    throw DoesNotFit(name + ": " + std::to_string(n) + " norms need " + std::to_string(alloc.next) +
                     " bytes of scratchpad, the device has " + std::to_string(target.scratchpad_bytes));
  }
  isa::ProgramBuilder b(name, 1);
  b.add(0, make_dma<isa::DmaLoad>(0, f32, 0, 0, sp_partials, {static_cast<std::uint32_t>(plan.partials), 1, 1},
                                  {1, 0, 0}));
  b.add(0, isa::Wait{.token_mask = 1});
  const isa::ReduceOp op = std::isinf(s.ord) ? isa::ReduceOp::max : isa::ReduceOp::sum;
  for (std::size_t i = 0; i < n; ++i) {
    b.add(0, isa::VReduce{.op = op, .in = f32, .out = f32, .axis = 1,
                          .src = sp_partials + static_cast<std::uint32_t>(plan.slots[i].first * 4),
                          .dst = sp_norms + static_cast<std::uint32_t>(i * 4), .rows = 1,
                          .cols = static_cast<std::uint32_t>(plan.slots[i].count)});
  }
  const auto count = static_cast<std::uint32_t>(n);
  if (s.ord == 2) b.add(0, isa::VUnary{.op = isa::UnaryOp::sqrt, .dtype = f32, .src = sp_norms, .dst = sp_norms, .count = count});
  if (s.out == f32) {
    b.add(0, isa::VUnary{.op = isa::UnaryOp::copy, .dtype = f32, .src = sp_norms, .dst = sp_out, .count = count});
  } else {
    b.add(0, isa::VConvert{.from = f32, .to = s.out, .src = sp_norms, .dst = sp_out, .count = count});
  }
  const std::uint64_t out_size = isa::dtype_size(s.out);
  for (std::size_t i = 0; i < n; ++i) {
    b.add(0, make_dma<isa::DmaStore>(1, s.out, static_cast<std::uint16_t>(1 + i), 0,
                                     sp_out + static_cast<std::uint32_t>(i * out_size), {1, 1, 1}, {1, 0, 0}));
  }
  b.add(0, isa::Wait{.token_mask = 2});
  return b.build();
}

}  // namespace spyre::compiler
