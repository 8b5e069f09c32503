#include "functional/numeric.h"

#include <cblas.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace spyre::sim::numeric {

using isa::Broadcast;
using isa::DType;

// Loops here are compiled with -O3 for the baseline ISA (SSE2 vectorisation). No
// target_clones: their ifunc resolvers run before sanitizer runtimes are up, which
// crashes ThreadSanitizer builds at load time. The one place where a newer ISA pays
// (F16C half conversions, convert.cpp) dispatches explicitly.

namespace {

// Integer view of an element (int8, int32, bool), widened.
std::int64_t load_int(DType t, const std::uint8_t* p, std::size_t i) {
  switch (t) {
    case DType::int8: return static_cast<std::int8_t>(p[i]);
    case DType::int32: {
      std::int32_t v;
      std::memcpy(&v, p + 4 * i, 4);
      return v;
    }
    case DType::boolean: return p[i] != 0;
    default: return 0;
  }
}

// Stores with two's-complement wrap-around (bool: nonzero -> 1).
void store_int(DType t, std::uint8_t* p, std::size_t i, std::int64_t v) {
  switch (t) {
    case DType::int8: p[i] = static_cast<std::uint8_t>(v); return;
    case DType::int32: {
      const auto w = static_cast<std::int32_t>(static_cast<std::uint32_t>(v));
      std::memcpy(p + 4 * i, &w, 4);
      return;
    }
    case DType::boolean: p[i] = v != 0; return;
    default: return;
  }
}

}  // namespace

void convert(DType from, DType to, const std::uint8_t* src, std::uint8_t* dst, std::size_t n) {
  if (from == to) {
    std::memmove(dst, src, n * isa::dtype_size(from));
    return;
  }
  if (!isa::is_float(from) && !isa::is_float(to)) {
    // Integer and bool conversions stay exact (wrap to the narrower type, as C++ casts).
    if (isa::dtype_size(to) > isa::dtype_size(from)) {
      for (std::size_t i = n; i-- > 0;) store_int(to, dst, i, load_int(from, src, i));
    } else {
      for (std::size_t i = 0; i < n; ++i) store_int(to, dst, i, load_int(from, src, i));
    }
    return;
  }
  if (from == DType::int32 && to == DType::fp32) {
    // Exact path (float(int32) rounds to nearest even), no detour through saturation.
    float tmp[kChunk];
    for (std::size_t i = 0; i < n; i += kChunk) {
      const std::size_t m = std::min(kChunk, n - i);
      load_f32(from, src + 4 * i, tmp, m);
      store_f32(to, tmp, dst + 4 * i, m);
    }
    return;
  }
  // Through fp32, chunk by chunk; walk backwards when the destination elements are wider
  // so an in-place widening conversion never overwrites unread input.
  const std::size_t in = isa::dtype_size(from), out = isa::dtype_size(to);
  float tmp[kChunk];
  if (out > in) {
    for (std::size_t end = n; end > 0;) {
      const std::size_t m = std::min(kChunk, end);
      const std::size_t i = end - m;
      load_f32(from, src + in * i, tmp, m);
      store_f32(to, tmp, dst + out * i, m);
      end = i;
    }
  } else {
    for (std::size_t i = 0; i < n; i += kChunk) {
      const std::size_t m = std::min(kChunk, n - i);
      load_f32(from, src + in * i, tmp, m);
      store_f32(to, tmp, dst + out * i, m);
    }
  }
}

namespace {

// v clamped to [lo, hi]; NaN stays NaN.
inline float clamp_nan(float v, float lo, float hi) { return v < lo ? lo : (v > hi ? hi : v); }

// One element; inlined with a constant `op` in the loops below, so each op's loop is
// free of the switch (and relu of branches: random signs would mispredict half).
inline float unary_value(isa::UnaryOp op, float x) {
  using isa::UnaryOp;
  switch (op) {
    case UnaryOp::copy: return x;
    case UnaryOp::neg: return -x;
    case UnaryOp::abs: return std::fabs(x);
    case UnaryOp::exp: return std::exp(x);
    case UnaryOp::log: return std::log(x);
    case UnaryOp::sqrt: return std::sqrt(x);
    case UnaryOp::rsqrt: return 1.0f / std::sqrt(x);
    case UnaryOp::reciprocal: return 1.0f / x;
    case UnaryOp::tanh: return std::tanh(x);
    case UnaryOp::erf: return std::erf(x);
    case UnaryOp::sigmoid: return 1.0f / (1.0f + std::exp(-x));
    case UnaryOp::relu: return (x > 0.0f || x != x) ? x : 0.0f;  // NaN passes, -0 gives +0
    // Both gelu forms are written without the cancellation of 1 + erf(u) / 1 + tanh(u)
    // for negative inputs: 1 + erf(u) = erfc(-u), 1 + tanh(u) = 2 / (1 + exp(-2u)).
    case UnaryOp::gelu: return 0.5f * x * std::erfc(-x * 0.70710678118654752f);
    case UnaryOp::gelu_tanh: {
      const float inner = 0.79788456080286536f * (x + 0.044715f * x * x * x);  // sqrt(2/pi)
      return x / (1.0f + std::exp(-2.0f * inner));
    }
    case UnaryOp::silu: return x / (1.0f + std::exp(-x));
    case UnaryOp::sin: return std::sin(x);
    case UnaryOp::cos: return std::cos(x);
    // PyTorch's CPU order of operations: x + 3 clamped to [0, 6] (NaN stays NaN, as in
    // PyTorch's max and min), then / 6 (hardswish: x times it first).
    case UnaryOp::hardswish: return x * clamp_nan(x + 3.0f, 0.0f, 6.0f) / 6.0f;
    case UnaryOp::hardsigmoid: return clamp_nan(x + 3.0f, 0.0f, 6.0f) / 6.0f;
  }
  return x;
}

template <isa::UnaryOp Op>
void unary_loop(float* x, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) x[i] = unary_value(Op, x[i]);
}

void unary_f32(isa::UnaryOp op, float* x, std::size_t n) {
  using isa::UnaryOp;
  switch (op) {
    case UnaryOp::copy: return;
    case UnaryOp::neg: return unary_loop<UnaryOp::neg>(x, n);
    case UnaryOp::abs: return unary_loop<UnaryOp::abs>(x, n);
    case UnaryOp::exp: return unary_loop<UnaryOp::exp>(x, n);
    case UnaryOp::log: return unary_loop<UnaryOp::log>(x, n);
    case UnaryOp::sqrt: return unary_loop<UnaryOp::sqrt>(x, n);
    case UnaryOp::rsqrt: return unary_loop<UnaryOp::rsqrt>(x, n);
    case UnaryOp::reciprocal: return unary_loop<UnaryOp::reciprocal>(x, n);
    case UnaryOp::tanh: return unary_loop<UnaryOp::tanh>(x, n);
    case UnaryOp::erf: return unary_loop<UnaryOp::erf>(x, n);
    case UnaryOp::sigmoid: return unary_loop<UnaryOp::sigmoid>(x, n);
    case UnaryOp::relu: return unary_loop<UnaryOp::relu>(x, n);
    case UnaryOp::gelu: return unary_loop<UnaryOp::gelu>(x, n);
    case UnaryOp::gelu_tanh: return unary_loop<UnaryOp::gelu_tanh>(x, n);
    case UnaryOp::silu: return unary_loop<UnaryOp::silu>(x, n);
    case UnaryOp::sin: return unary_loop<UnaryOp::sin>(x, n);
    case UnaryOp::cos: return unary_loop<UnaryOp::cos>(x, n);
    case UnaryOp::hardswish: return unary_loop<UnaryOp::hardswish>(x, n);
    case UnaryOp::hardsigmoid: return unary_loop<UnaryOp::hardsigmoid>(x, n);
  }
}

}  // namespace

float apply_unary(isa::UnaryOp op, float x) { return unary_value(op, x); }

void unary(isa::UnaryOp op, DType t, const std::uint8_t* src, std::uint8_t* dst, std::size_t n) {
  using isa::UnaryOp;
  const std::size_t size = isa::dtype_size(t);
  if (!isa::is_float(t)) {
    for (std::size_t i = 0; i < n; ++i) {
      const std::int64_t v = load_int(t, src, i);
      std::int64_t r = v;
      if (op == UnaryOp::neg) r = -v;
      if (op == UnaryOp::abs) r = v < 0 ? -v : v;
      if (op == UnaryOp::relu) r = v > 0 ? v : 0;
      store_int(t, dst, i, r);
    }
    return;
  }
  float buf[kChunk];
  for (std::size_t i = 0; i < n; i += kChunk) {
    const std::size_t m = std::min(kChunk, n - i);
    load_f32(t, src + size * i, buf, m);
    unary_f32(op, buf, m);
    store_f32(t, buf, dst + size * i, m);
  }
}

namespace {

void binary_f32(isa::BinaryOp op, const float* a, const float* b, float* out, std::size_t n) {
  using isa::BinaryOp;
  switch (op) {
    case BinaryOp::add: for (std::size_t i = 0; i < n; ++i) out[i] = a[i] + b[i]; return;
    case BinaryOp::sub: for (std::size_t i = 0; i < n; ++i) out[i] = a[i] - b[i]; return;
    case BinaryOp::mul: for (std::size_t i = 0; i < n; ++i) out[i] = a[i] * b[i]; return;
    case BinaryOp::div: for (std::size_t i = 0; i < n; ++i) out[i] = a[i] / b[i]; return;
    // max/min propagate NaN, as torch.maximum/minimum do.
    case BinaryOp::max:
      for (std::size_t i = 0; i < n; ++i) out[i] = (a[i] != a[i] || b[i] != b[i]) ? a[i] + b[i] : std::max(a[i], b[i]);
      return;
    case BinaryOp::min:
      for (std::size_t i = 0; i < n; ++i) out[i] = (a[i] != a[i] || b[i] != b[i]) ? a[i] + b[i] : std::min(a[i], b[i]);
      return;
    // In double, rounded once: the correctly rounded fp32 power (C's special cases).
    case BinaryOp::pow:
      for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<float>(std::pow(double{a[i]}, double{b[i]}));
      return;
  }
}

// PyTorch's integer pow: squaring with wrap-around (unsigned, so no overflow is
// undefined; the store wraps to the dtype); a negative exponent gives 1 for a base of
// 1, +-1 for -1 and 0 otherwise.
std::int64_t int_pow(std::int64_t base, std::int64_t e) {
  if (e < 0) return base == 1 ? 1 : base == -1 ? ((-e) % 2 ? -1 : 1) : 0;
  std::uint64_t result = 1, b = static_cast<std::uint64_t>(base);
  for (auto u = static_cast<std::uint64_t>(e); u != 0; u >>= 1) {
    if (u & 1) result *= b;
    b *= b;
  }
  return static_cast<std::int64_t>(result);
}

std::size_t b_index(Broadcast bc, std::size_t r, std::size_t c, std::size_t cols) {
  switch (bc) {
    case Broadcast::none: return r * cols + c;
    case Broadcast::row: return c;
    case Broadcast::col: return r;
    default: return 0;
  }
}

// Fills `out` with b's values for elements [first, first + m) of a rows x cols block.
void gather_b_f32(const isa::VBinary& v, const std::uint8_t* b, std::size_t first, std::size_t m, float* out,
                  float* scratch) {
  const std::size_t size = isa::dtype_size(v.dtype);
  switch (v.bcast) {
    case Broadcast::none:
      load_f32(v.dtype, b + size * first, out, m);
      return;
    case Broadcast::immediate:
      std::fill(out, out + m, static_cast<float>(v.imm));
      return;
    case Broadcast::scalar: {
      float s;
      load_f32(v.dtype, b, &s, 1);
      std::fill(out, out + m, s);
      return;
    }
    case Broadcast::row:
    case Broadcast::col:
      // In runs along a row: b's row (row broadcast) or one value of b (column).
      for (std::size_t i = 0; i < m;) {
        const std::size_t r = (first + i) / v.cols, c = (first + i) % v.cols;
        const std::size_t run = std::min<std::size_t>(m - i, v.cols - c);
        if (v.bcast == Broadcast::row) {
          load_f32(v.dtype, b + size * c, scratch + i, run);
        } else {
          load_f32(v.dtype, b + size * r, scratch + i, 1);
          std::fill(scratch + i + 1, scratch + i + run, scratch[i]);
        }
        i += run;
      }
      std::memcpy(out, scratch, m * sizeof(float));
      return;
  }
}

std::int64_t int_b(DType t, Broadcast bc, const std::uint8_t* b, double imm, std::size_t e, std::size_t cols) {
  if (bc == Broadcast::immediate) return static_cast<std::int64_t>(imm);
  return load_int(t, b, b_index(bc, e / cols, e % cols, cols));
}

}  // namespace

Fault binary(const isa::VBinary& v, std::uint8_t* sp) {
  using isa::BinaryOp;
  const std::size_t n = std::size_t{v.rows} * v.cols;
  const std::size_t size = isa::dtype_size(v.dtype);
  const std::uint8_t* a = sp + v.a;
  const std::uint8_t* b = sp + v.b;
  std::uint8_t* dst = sp + v.dst;
  if (!isa::is_float(v.dtype)) {
    for (std::size_t e = 0; e < n; ++e) {
      const std::int64_t x = load_int(v.dtype, a, e);
      const std::int64_t y = int_b(v.dtype, v.bcast, b, v.imm, e, v.cols);
      std::int64_t r = 0;
      switch (v.op) {
        case BinaryOp::add: r = x + y; break;
        case BinaryOp::sub: r = x - y; break;
        case BinaryOp::mul: r = x * y; break;
        case BinaryOp::div:
          if (y == 0) return "integer division by zero at element " + std::to_string(e);
          r = x / y;
          break;
        case BinaryOp::max: r = std::max(x, y); break;
        case BinaryOp::min: r = std::min(x, y); break;
        case BinaryOp::pow: r = int_pow(x, y); break;
      }
      store_int(v.dtype, dst, e, r);
    }
    return std::nullopt;
  }
  float fa[kChunk], fb[kChunk], scratch[kChunk];
  for (std::size_t i = 0; i < n; i += kChunk) {
    const std::size_t m = std::min(kChunk, n - i);
    load_f32(v.dtype, a + size * i, fa, m);
    gather_b_f32(v, b, i, m, fb, scratch);
    binary_f32(v.op, fa, fb, fa, m);
    store_f32(v.dtype, fa, dst + size * i, m);
  }
  return std::nullopt;
}

namespace {

// The comparison's loop with the op outside it (vectorised; a switch per element is not).
void compare_f32(isa::CompareOp op, const float* a, const float* b, std::uint8_t* out, std::size_t n) {
  using isa::CompareOp;
  const auto each = [&](auto f) {
    for (std::size_t j = 0; j < n; ++j) out[j] = f(a[j], b[j]) ? 1 : 0;
  };
  switch (op) {
    case CompareOp::eq: return each([](float x, float y) { return x == y; });
    case CompareOp::ne: return each([](float x, float y) { return x != y; });
    case CompareOp::lt: return each([](float x, float y) { return x < y; });
    case CompareOp::le: return each([](float x, float y) { return x <= y; });
    case CompareOp::gt: return each([](float x, float y) { return x > y; });
    case CompareOp::ge: return each([](float x, float y) { return x >= y; });
  }
}

}  // namespace

void compare(const isa::VCompare& v, std::uint8_t* sp) {
  using isa::CompareOp;
  const std::size_t n = std::size_t{v.rows} * v.cols;
  const std::size_t size = isa::dtype_size(v.dtype);
  const std::uint8_t* a = sp + v.a;
  const std::uint8_t* b = sp + v.b;
  std::uint8_t* dst = sp + v.dst;
  const auto apply = [&](auto x, auto y) -> std::uint8_t {
    switch (v.op) {
      case CompareOp::eq: return x == y;
      case CompareOp::ne: return x != y;
      case CompareOp::lt: return x < y;
      case CompareOp::le: return x <= y;
      case CompareOp::gt: return x > y;
      case CompareOp::ge: return x >= y;
    }
    return 0;
  };
  if (!isa::is_float(v.dtype)) {
    for (std::size_t e = 0; e < n; ++e) {
      dst[e] = apply(load_int(v.dtype, a, e), int_b(v.dtype, v.bcast, b, v.imm, e, v.cols));
    }
    return;
  }
  const isa::VBinary as_binary{.op = isa::BinaryOp::add, .dtype = v.dtype, .bcast = v.bcast, .a = v.a, .b = v.b,
                               .dst = v.dst, .rows = v.rows, .cols = v.cols, .imm = v.imm};
  float fa[kChunk], fb[kChunk], scratch[kChunk];
  std::uint8_t result[kChunk];
  for (std::size_t i = 0; i < n; i += kChunk) {
    const std::size_t m = std::min(kChunk, n - i);
    load_f32(v.dtype, a + size * i, fa, m);
    gather_b_f32(as_binary, b, i, m, fb, scratch);
    compare_f32(v.op, fa, fb, result, m);
    std::memcpy(dst + i, result, m);
  }
}

void select(const isa::VSelect& s, std::uint8_t* sp) {
  const std::size_t size = isa::dtype_size(s.dtype);
  const std::uint8_t* cond = sp + s.cond;
  // Elements as a fixed-size type (a memmove of a run-time size is a call per element),
  // read from both sides and picked without a branch; dst may be a or b.
  const auto each = [&](auto element) {
    using T = decltype(element);
    for (std::size_t i = 0; i < s.count; ++i) {
      T x, y;
      std::memcpy(&x, sp + s.a + sizeof(T) * i, sizeof(T));
      std::memcpy(&y, sp + s.b + sizeof(T) * i, sizeof(T));
      const T r = cond[i] != 0 ? x : y;
      std::memcpy(sp + s.dst + sizeof(T) * i, &r, sizeof(T));
    }
  };
  switch (size) {
    case 1: return each(std::uint8_t{});
    case 2: return each(std::uint16_t{});
    case 4: return each(std::uint32_t{});
    default: return each(std::uint32_t{});
  }
}

void reduce(const isa::VReduce& r, std::uint8_t* sp) {
  using isa::ReduceOp;
  const std::size_t rows = r.rows, cols = r.cols;
  const std::size_t in_size = isa::dtype_size(r.in);
  const std::size_t outputs = r.axis == 1 ? rows : cols;
  const std::uint8_t* src = sp + r.src;
  std::uint8_t* dst = sp + r.dst;
  if (!isa::is_float(r.in)) {
    std::vector<std::int64_t> acc(outputs, r.op == ReduceOp::sum ? 0 : load_int(r.in, src, 0));
    if (r.op != ReduceOp::sum) {
      for (std::size_t o = 0; o < outputs; ++o) acc[o] = load_int(r.in, src, r.axis == 1 ? o * cols : o);
    }
    for (std::size_t i = 0; i < rows; ++i) {
      for (std::size_t j = 0; j < cols; ++j) {
        const std::int64_t x = load_int(r.in, src, i * cols + j);
        std::int64_t& a = acc[r.axis == 1 ? i : j];
        a = r.op == ReduceOp::sum ? a + x : (r.op == ReduceOp::max ? std::max(a, x) : std::min(a, x));
      }
    }
    for (std::size_t o = 0; o < outputs; ++o) store_int(r.out, dst, o, acc[o]);
    return;
  }
  std::vector<float> row(cols);
  std::vector<float> acc(outputs);
  const auto combine = [&](float a, float x) {
    if (r.op == ReduceOp::sum) return a + x;
    if (a != a || x != x) return a + x;  // NaN propagates
    return r.op == ReduceOp::max ? std::max(a, x) : std::min(a, x);
  };
  for (std::size_t i = 0; i < rows; ++i) {
    load_f32(r.in, src + in_size * i * cols, row.data(), cols);
    if (r.axis == 1) {
      float a = r.op == ReduceOp::sum ? 0.0f : row[0];
      for (std::size_t j = (r.op == ReduceOp::sum ? 0 : 1); j < cols; ++j) a = combine(a, row[j]);
      acc[i] = a;
    } else if (i == 0) {
      std::copy(row.begin(), row.end(), acc.begin());
    } else {
      for (std::size_t j = 0; j < cols; ++j) acc[j] = combine(acc[j], row[j]);
    }
  }
  // Reductions write their result after reading all input, so dst may alias src.
  store_f32(r.out, acc.data(), dst, outputs);
}

void fill(const isa::VFill& f, std::uint8_t* sp) {
  std::uint8_t* dst = sp + f.dst;
  const std::size_t size = isa::dtype_size(f.dtype);
  std::uint8_t pattern[4];
  if (isa::is_float(f.dtype)) {
    const float v = static_cast<float>(f.value);
    store_f32(f.dtype, &v, pattern, 1);
  } else {
    store_int(f.dtype, pattern, 0, static_cast<std::int64_t>(f.value));
  }
  const auto each = [&](auto element) {  // a fixed-size store per element, not a call
    using T = decltype(element);
    T v;
    std::memcpy(&v, pattern, sizeof(T));
    for (std::size_t i = 0; i < f.count; ++i) std::memcpy(dst + sizeof(T) * i, &v, sizeof(T));
  };
  switch (size) {
    case 1: return each(std::uint8_t{});
    case 2: return each(std::uint16_t{});
    default: return each(std::uint32_t{});
  }
}

void transpose(const isa::VTranspose& t, std::uint8_t* sp) {
  // Data movement only: the bytes as they are (no rounding, no DL16).
  const std::size_t size = isa::dtype_size(t.dtype);
  const std::uint8_t* src = sp + t.src;
  std::uint8_t* dst = sp + t.dst;
  // In blocks of 32 x 32 elements, so both sides stay in the host's cache; elements
  // copied as a fixed-size type (a memcpy of a run-time size is a call per element).
  const auto blocks = [&](auto element) {
    using T = decltype(element);
    constexpr std::size_t kBlock = 32;
    for (std::size_t r0 = 0; r0 < t.rows; r0 += kBlock) {
      for (std::size_t c0 = 0; c0 < t.cols; c0 += kBlock) {
        const std::size_t r1 = std::min<std::size_t>(t.rows, r0 + kBlock), c1 = std::min<std::size_t>(t.cols, c0 + kBlock);
        for (std::size_t r = r0; r < r1; ++r) {
          for (std::size_t c = c0; c < c1; ++c) {
            T x;
            std::memcpy(&x, src + (r * t.cols + c) * sizeof(T), sizeof(T));
            std::memcpy(dst + (c * t.rows + r) * sizeof(T), &x, sizeof(T));
          }
        }
      }
    }
  };
  if (size == 1) {
    blocks(std::uint8_t{});
  } else if (size == 2) {
    blocks(std::uint16_t{});
  } else {
    blocks(std::uint32_t{});  // the 4-byte types, the largest the ISA has
  }
}

namespace {

// Host staging buffers for the matmul's fp32 copies, one per operand: they grow to the
// largest tile and stay (a vector per call is allocated, zeroed and page-faulted in
// again for every tile). The simulation runs on one host thread, its processes taking
// turns, and a matmul never yields, so one set per thread serves every core.
float* staging(int operand, std::size_t n) {
  thread_local std::vector<float> buffers[3];
  std::vector<float>& buffer = buffers[operand];
  if (buffer.size() < n) buffer.resize(n);
  return buffer.data();
}

// `n` values of type `t` at `p` as fp32: in place when they are fp32 already and
// aligned, else widened into the operand's staging buffer.
const float* f32_view(DType t, const std::uint8_t* p, std::size_t n, int operand) {
  if (t == DType::fp32 && reinterpret_cast<std::uintptr_t>(p) % alignof(float) == 0) {
    return reinterpret_cast<const float*>(p);
  }
  float* out = staging(operand, n);
  load_f32(t, p, out, n);
  return out;
}

}  // namespace

void matmul(const isa::Matmul& mm, std::uint8_t* sp) {
  const std::size_t a_rows = mm.trans_a ? mm.k : mm.m, a_cols = mm.trans_a ? mm.m : mm.k;
  const std::size_t b_rows = mm.trans_b ? mm.n : mm.k, b_cols = mm.trans_b ? mm.k : mm.n;
  const std::size_t a_extent = (a_rows - 1) * mm.lda + a_cols;
  const std::size_t b_extent = (b_rows - 1) * mm.ldb + b_cols;
  const std::size_t c_extent = (std::size_t{mm.m} - 1) * mm.ldc + mm.n;
  if (mm.in == DType::int8) {
    const auto* a = reinterpret_cast<const std::int8_t*>(sp + mm.a);
    const auto* b = reinterpret_cast<const std::int8_t*>(sp + mm.b);
    std::vector<std::int32_t> c(std::size_t{mm.m} * mm.n, 0);
    for (std::size_t i = 0; i < mm.m; ++i) {
      for (std::size_t p = 0; p < mm.k; ++p) {
        const std::int32_t x = mm.trans_a ? a[p * mm.lda + i] : a[i * mm.lda + p];
        for (std::size_t j = 0; j < mm.n; ++j) {
          c[i * mm.n + j] += x * (mm.trans_b ? b[j * mm.ldb + p] : b[p * mm.ldb + j]);
        }
      }
    }
    for (std::size_t i = 0; i < mm.m; ++i) {
      for (std::size_t j = 0; j < mm.n; ++j) {
        std::uint8_t* out = sp + mm.c + 4 * (i * mm.ldc + j);
        const std::int64_t prev = mm.accumulate ? load_int(DType::int32, out, 0) : 0;
        store_int(DType::int32, out, 0, prev + c[i * mm.n + j]);
      }
    }
    return;
  }
  // Floats: widen A and B to fp32 (same layout), multiply with OpenBLAS, narrow C. fp32
  // operands are used where they are.
  const float* a = f32_view(mm.in, sp + mm.a, a_extent, 0);
  const float* b = f32_view(mm.in, sp + mm.b, b_extent, 1);
  const auto ta = mm.trans_a ? CblasTrans : CblasNoTrans;
  const auto tb = mm.trans_b ? CblasTrans : CblasNoTrans;
  const int m = static_cast<int>(mm.m), n = static_cast<int>(mm.n), k = static_cast<int>(mm.k);
  if (mm.out == DType::fp32 && mm.c % alignof(float) == 0) {
    cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, 1.0f, a, static_cast<int>(mm.lda), b, static_cast<int>(mm.ldb),
                mm.accumulate ? 1.0f : 0.0f, reinterpret_cast<float*>(sp + mm.c), static_cast<int>(mm.ldc));
    return;
  }
  float* c = staging(2, c_extent);
  if (mm.accumulate) load_f32(mm.out, sp + mm.c, c, c_extent);
  cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, 1.0f, a, static_cast<int>(mm.lda), b, static_cast<int>(mm.ldb),
              mm.accumulate ? 1.0f : 0.0f, c, static_cast<int>(mm.ldc));
  // Write back only the m x n block, leaving the gaps between rows untouched.
  const std::size_t size = isa::dtype_size(mm.out);
  for (std::size_t i = 0; i < mm.m; ++i) {
    store_f32(mm.out, c + i * mm.ldc, sp + mm.c + size * i * mm.ldc, mm.n);
  }
}

}  // namespace spyre::sim::numeric
