// Static checks of one instruction: everything that can be known without the
// argument table (device addresses are checked when they are used).
#include <cmath>
#include <limits>
#include <string>

#include "spyre/checked.h"
#include "spyre/isa/program.h"

namespace spyre::isa {
namespace {

using Reason = std::optional<std::string>;

std::string str(std::uint64_t v) { return std::to_string(v); }

// [addr, addr + elements*size) must lie in the scratchpad and be element aligned.
Reason sp_range(const char* what, std::uint64_t addr, std::uint64_t elements, DType t, const Limits& l) {
  const std::uint64_t size = dtype_size(t);
  if (addr % size != 0) {
    return std::string(what) + " address " + str(addr) + " is not aligned to its " + str(size) +
           "-byte elements";
  }
  const auto end = checked::add(checked::mul(elements, size), addr);
  if (!end) {
    return std::string(what) + " of " + str(elements) + " " + str(size) +
           "-byte elements does not fit 64 bits, let alone the " + str(l.scratchpad_bytes) + "-byte scratchpad";
  }
  if (*end > l.scratchpad_bytes) {
    return std::string(what) + " [" + str(addr) + ", " + str(*end) + ") overflows the " +
           str(l.scratchpad_bytes) + "-byte scratchpad";
  }
  return std::nullopt;
}

// Elements spanned by a rows x cols block with leading dimension ld.
std::uint64_t block_extent(std::uint64_t rows, std::uint64_t cols, std::uint64_t ld) {
  return (rows - 1) * ld + cols;
}

Reason check_token(std::uint8_t token) {
  if (token >= kNumTokens) return "token " + str(token) + " is not below " + str(kNumTokens);
  return std::nullopt;
}

Reason check_dma(const Dma& d, const Limits& l, bool is_load) {
  if (auto r = check_token(d.token)) return r;
  if (d.arg >= l.max_args) return "argument index " + str(d.arg) + " is not below " + str(l.max_args);
  const std::uint32_t size = dtype_size(d.dtype);
  if (d.offset % size != 0) {
    return "device offset " + str(d.offset) + " is not aligned to its " + str(size) + "-byte elements";
  }
  for (int i = 0; i < 3; ++i) {
    if (d.shape[i] == 0) return "shape[" + str(i) + "] is 0";
  }
  if (!dma_footprint(d)) {
    return "device strides reach past 64 bits: shape {" + str(d.shape[0]) + ", " + str(d.shape[1]) + ", " +
           str(d.shape[2]) + "} x mem_stride {" + std::to_string(d.mem_stride[0]) + ", " +
           std::to_string(d.mem_stride[1]) + ", " + std::to_string(d.mem_stride[2]) + "} x " + str(size) +
           "-byte elements";
  }
  // (2^32-1)^2 < 2^64: s1 cannot overflow; the extent below can.
  const std::uint64_t s0 = d.sp_stride[0] ? d.sp_stride[0] : d.shape[0];
  const std::uint64_t s1 = d.sp_stride[1] ? d.sp_stride[1] : s0 * d.shape[1];
  if (is_load && ((d.shape[1] > 1 && s0 < d.shape[0]) || (d.shape[2] > 1 && s1 < s0 * d.shape[1]))) {
    return std::string("scratchpad strides overlap rows of the destination");
  }
  const auto rows = checked::mul(std::uint64_t{d.shape[1]} - 1, s0);
  const auto planes = checked::mul(std::uint64_t{d.shape[2]} - 1, s1);
  const auto elements =
      rows && planes ? checked::add(checked::add(*rows, *planes), std::uint64_t{d.shape[0]}) : std::nullopt;
  if (!elements) {
    return std::string(is_load ? "destination" : "source") + " scratchpad strides reach past 64 bits";
  }
  return sp_range(is_load ? "destination" : "source", d.sp_addr, *elements, d.dtype, l);
}

Reason check_elementwise_dtype(DType t, bool allow_bool) {
  if (t == DType::boolean && !allow_bool) return std::string("bool operands are not supported here");
  return std::nullopt;
}

template <class V>
Reason check_binary_like(const V& v, const Limits& l, DType dst_type, bool allow_bool) {
  if (auto r = check_elementwise_dtype(v.dtype, allow_bool)) return r;
  if (v.rows == 0 || v.cols == 0) return std::string("rows and cols must be positive");
  const std::uint64_t n = std::uint64_t{v.rows} * v.cols;
  if (auto r = sp_range("a", v.a, n, v.dtype, l)) return r;
  if (v.bcast != Broadcast::immediate) {
    if (auto r = sp_range("b", v.b, broadcast_elements(v.bcast, v.rows, v.cols), v.dtype, l)) return r;
  } else if (!std::isfinite(v.imm) && !is_float(v.dtype)) {
    return std::string("a non-finite immediate needs a float dtype");
  }
  return sp_range("destination", v.dst, n, dst_type, l);
}

bool is_transcendental(UnaryOp op) {
  switch (op) {
    case UnaryOp::copy:
    case UnaryOp::neg:
    case UnaryOp::abs:
    case UnaryOp::relu:
      return false;
    default:
      return true;
  }
}

Reason check_fill_value(DType t, double v) {
  switch (t) {
    case DType::int8:
      if (v != std::trunc(v) || v < -128 || v > 127) return "fill value " + std::to_string(v) + " is not an int8";
      break;
    case DType::int32:
      if (v != std::trunc(v) || v < -2147483648.0 || v > 2147483647.0) {
        return "fill value " + std::to_string(v) + " is not an int32";
      }
      break;
    case DType::boolean:
      if (v != 0 && v != 1) return "fill value " + std::to_string(v) + " is not a bool (0 or 1)";
      break;
    default:
      break;
  }
  return std::nullopt;
}

struct Checker {
  const Limits& l;

  Reason operator()(const End&) const { return std::nullopt; }
  Reason operator()(const Nop&) const { return std::nullopt; }
  Reason operator()(const DmaLoad& d) const { return check_dma(d, l, true); }
  Reason operator()(const DmaStore& d) const { return check_dma(d, l, false); }
  Reason operator()(const DmaGather& g) const {
    if (auto r = check_token(g.token)) return r;
    if (g.arg >= l.max_args) return "argument index " + str(g.arg) + " is not below " + str(l.max_args);
    if (g.count == 0 || g.row_bytes == 0) return std::string("count and row_bytes must be positive");
    if (g.rows == 0) return std::string("the table has no rows (rows is 0)");
    const std::uint64_t index_size = g.wide_index ? 8 : 4;
    if (g.index_sp % index_size != 0) {
      return "index address " + str(g.index_sp) + " is not aligned to its " + str(index_size) + "-byte indices";
    }
    const std::uint64_t index_end = g.index_sp + g.count * index_size;
    if (index_end > l.scratchpad_bytes) {
      return "index [" + str(g.index_sp) + ", " + str(index_end) + ") overflows the " + str(l.scratchpad_bytes) +
             "-byte scratchpad";
    }
    if (!checked::add(checked::mul(g.rows - 1, g.row_stride), std::uint64_t{g.row_bytes})) {
      return "the table (" + str(g.rows) + " rows " + str(g.row_stride) + " bytes apart) reaches past 64 bits";
    }
    // count and row_bytes are 32-bit: their product and sp_addr sum fit 64 bits.
    const std::uint64_t dst_end = g.sp_addr + std::uint64_t{g.count} * g.row_bytes;
    const char* rows = g.scatter ? "source" : "destination";
    if (g.sp_addr < index_end && g.index_sp < dst_end) {
      return std::string(rows) + " [" + str(g.sp_addr) + ", " + str(dst_end) + ") overlaps the indices [" +
             str(g.index_sp) + ", " + str(index_end) + ")";
    }
    return sp_range(rows, g.sp_addr, std::uint64_t{g.count} * g.row_bytes, DType::int8, l);
  }
  Reason operator()(const Wait& w) const {
    if (w.token_mask == 0) return std::string("waits for no token (empty mask)");
    return std::nullopt;
  }
  Reason operator()(const Matmul& m) const {
    if (m.in == DType::int32 || m.in == DType::boolean) {
      return "matmul inputs must be fp32, fp16, bf16 or int8, found " + std::string(to_string(m.in));
    }
    const bool int_in = m.in == DType::int8;
    if (int_in != (m.out == DType::int32) || m.out == DType::int8 || m.out == DType::boolean) {
      return "matmul of " + std::string(to_string(m.in)) + " cannot produce " + std::string(to_string(m.out)) +
             " (int8 gives int32; floats give fp32, fp16 or bf16)";
    }
    if (m.m == 0 || m.n == 0 || m.k == 0) return std::string("m, n and k must be positive");
    const std::uint32_t a_rows = m.trans_a ? m.k : m.m, a_cols = m.trans_a ? m.m : m.k;
    const std::uint32_t b_rows = m.trans_b ? m.n : m.k, b_cols = m.trans_b ? m.k : m.n;
    if (m.lda < a_cols) return "lda " + str(m.lda) + " is below A's row length " + str(a_cols);
    if (m.ldb < b_cols) return "ldb " + str(m.ldb) + " is below B's row length " + str(b_cols);
    if (m.ldc < m.n) return "ldc " + str(m.ldc) + " is below C's row length " + str(m.n);
    if (auto r = sp_range("A", m.a, block_extent(a_rows, a_cols, m.lda), m.in, l)) return r;
    if (auto r = sp_range("B", m.b, block_extent(b_rows, b_cols, m.ldb), m.in, l)) return r;
    return sp_range("C", m.c, block_extent(m.m, m.n, m.ldc), m.out, l);
  }
  Reason operator()(const VUnary& u) const {
    if (u.count == 0) return std::string("count must be positive");
    if (u.dtype == DType::boolean && u.op != UnaryOp::copy) return std::string("bool supports only copy");
    if (!is_float(u.dtype) && is_transcendental(u.op)) {
      return std::string(to_string(u.op)) + " needs a float dtype, found " + std::string(to_string(u.dtype));
    }
    if (auto r = sp_range("source", u.src, u.count, u.dtype, l)) return r;
    return sp_range("destination", u.dst, u.count, u.dtype, l);
  }
  Reason operator()(const VBinary& b) const { return check_binary_like(b, l, b.dtype, false); }
  Reason operator()(const VCompare& c) const { return check_binary_like(c, l, DType::boolean, true); }
  Reason operator()(const VSelect& s) const {
    if (s.count == 0) return std::string("count must be positive");
    if (auto r = sp_range("condition", s.cond, s.count, DType::boolean, l)) return r;
    if (auto r = sp_range("a", s.a, s.count, s.dtype, l)) return r;
    if (auto r = sp_range("b", s.b, s.count, s.dtype, l)) return r;
    return sp_range("destination", s.dst, s.count, s.dtype, l);
  }
  Reason operator()(const VReduce& r) const {
    if (r.rows == 0 || r.cols == 0) return std::string("rows and cols must be positive");
    if (r.axis > 1) return "axis " + str(r.axis) + " is neither 0 nor 1";
    const bool ok = (is_float(r.in) && is_float(r.out)) ||
                    ((r.in == DType::int32 || r.in == DType::int8) && r.out == DType::int32);
    if (!ok) {
      return "reduce of " + std::string(to_string(r.in)) + " cannot produce " + std::string(to_string(r.out));
    }
    if (auto reason = sp_range("source", r.src, std::uint64_t{r.rows} * r.cols, r.in, l)) return reason;
    return sp_range("destination", r.dst, r.axis == 1 ? r.rows : r.cols, r.out, l);
  }
  Reason operator()(const VConvert& c) const {
    if (c.count == 0) return std::string("count must be positive");
    if (auto r = sp_range("source", c.src, c.count, c.from, l)) return r;
    return sp_range("destination", c.dst, c.count, c.to, l);
  }
  Reason operator()(const VFill& f) const {
    if (f.count == 0) return std::string("count must be positive");
    if (auto r = check_fill_value(f.dtype, f.value)) return r;
    return sp_range("destination", f.dst, f.count, f.dtype, l);
  }
  Reason operator()(const VTranspose& t) const {
    if (t.rows == 0 || t.cols == 0) return std::string("rows and cols must be positive");
    const std::uint64_t n = std::uint64_t{t.rows} * t.cols;
    if (auto r = sp_range("source", t.src, n, t.dtype, l)) return r;
    if (auto r = sp_range("destination", t.dst, n, t.dtype, l)) return r;
    const std::uint64_t bytes = n * dtype_size(t.dtype);
    if (t.src < t.dst + bytes && t.dst < t.src + bytes) {
      return "destination sp:" + str(t.dst) + " overlaps the source sp:" + str(t.src) + " (" + str(bytes) + " bytes each)";
    }
    return std::nullopt;
  }
  Reason operator()(const VRandom& r) const {
    if (r.rows == 0 || r.cols == 0 || r.planes == 0) return std::string("planes, rows and cols must be positive");
    const std::uint64_t n = std::uint64_t{r.planes} * r.rows * r.cols;
    if (auto reason = sp_range("destination", r.dst, n, DType::fp32, l)) return reason;
    if (r.state % 8 != 0) return "state sp:" + str(r.state) + " is not 8-byte aligned (two uint64: seed, offset)";
    if (auto reason = sp_range("state", r.state, 4, DType::fp32, l)) return reason;
    if (r.state < r.dst + n * 4 && r.dst < r.state + 16) {
      return "destination sp:" + str(r.dst) + " (" + str(n * 4) + " bytes) overlaps the state sp:" + str(r.state);
    }
    return std::nullopt;
  }
  Reason operator()(const RingSend& s) const {
    if (auto r = check_token(s.token)) return r;
    if (s.dst_core >= l.num_streams) {
      return "destination core " + str(s.dst_core) + " is not one of the launch's " + str(l.num_streams);
    }
    if (s.bytes == 0) return std::string("bytes must be positive");
    return sp_range("source", s.sp_addr, s.bytes, DType::int8, l);
  }
  Reason operator()(const RingRecv& r) const {
    if (auto reason = check_token(r.token)) return reason;
    if (r.src_core >= l.num_streams) {
      return "source core " + str(r.src_core) + " is not one of the launch's " + str(l.num_streams);
    }
    if (r.forward_to != RingRecv::kNoForward && r.forward_to >= l.num_streams) {
      return "forward core " + str(r.forward_to) + " is not one of the launch's " + str(l.num_streams);
    }
    if (r.bytes == 0) return std::string("bytes must be positive");
    return sp_range("destination", r.sp_addr, r.bytes, DType::int8, l);
  }
  Reason operator()(const Barrier& b) const {
    if (b.count == 0 || b.count > l.num_streams) {
      return "barrier count " + str(b.count) + " is not in 1.." + str(l.num_streams);
    }
    return std::nullopt;
  }
};

}  // namespace

std::optional<DmaFootprint> dma_footprint(const Dma& d) {
  const std::int64_t size = dtype_size(d.dtype);
  std::int64_t lo = 0, hi = 0;
  for (int i = 0; i < 3; ++i) {
    if (d.shape[i] == 0) continue;
    const auto reach = checked::mul(checked::mul(std::int64_t{d.shape[i]} - 1, d.mem_stride[i]), size);
    if (!reach) return std::nullopt;
    std::int64_t& side = *reach < 0 ? lo : hi;
    const auto sum = checked::add(side, *reach);
    if (!sum) return std::nullopt;
    side = *sum;
  }
  const auto span = checked::add(checked::sub(hi, lo), size);
  if (!span) return std::nullopt;
  return DmaFootprint{lo, static_cast<std::uint64_t>(*span)};
}

std::optional<std::string> check(const Instruction& inst, const Limits& limits) {
  return std::visit(Checker{limits}, inst);
}

}  // namespace spyre::isa
