// The dtype conversions of the functional core: fp16, bf16 and fp8 scalars, DL16
// rounding of half values when the chip's config asks for it, and the bulk loads and
// stores between a dtype and fp32 that every instruction of numeric.cpp builds on.
#include "functional/numeric.h"

#include "functional/dl16.h"

#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

namespace spyre::sim::numeric {

using isa::DType;

// (-O3 for the baseline ISA, as numeric.cpp; F16C dispatches explicitly.)

float fp16_to_f32(std::uint16_t h) { return static_cast<float>(std::bit_cast<_Float16>(h)); }
std::uint16_t f32_to_fp16(float f) { return std::bit_cast<std::uint16_t>(static_cast<_Float16>(f)); }
float bf16_to_f32(std::uint16_t b) { return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16); }
std::uint16_t f32_to_bf16(float f) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  if (std::isnan(f)) return static_cast<std::uint16_t>((u >> 16) | 0x0040);  // keep it a quiet NaN
  return static_cast<std::uint16_t>((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

namespace {

template <class I>
I saturate(float f) {
  if (std::isnan(f)) return 0;
  const float t = std::trunc(f);
  if (t <= static_cast<float>(std::numeric_limits<I>::min())) return std::numeric_limits<I>::min();
  if (t >= static_cast<float>(std::numeric_limits<I>::max())) return std::numeric_limits<I>::max();
  return static_cast<I>(t);
}

// fp16 <-> fp32 with F16C when the CPU has it (8 values per instruction); GCC does not
// vectorise _Float16 conversion loops by itself.
__attribute__((target("avx2,f16c"))) void load_fp16_f16c(const std::uint8_t* src, float* dst, std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  const auto* h = reinterpret_cast<const _Float16*>(src);
  for (; i < n; ++i) dst[i] = static_cast<float>(h[i]);
}
__attribute__((target("avx2,f16c"))) void store_fp16_f16c(const float* src, std::uint8_t* dst, std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 2 * i), h);
  }
  auto* h = reinterpret_cast<_Float16*>(dst);
  for (; i < n; ++i) h[i] = static_cast<_Float16>(src[i]);
}
bool has_f16c() {
  static const bool yes = [] {
    __builtin_cpu_init();  // may run before libgcc's own initialisation
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
  }();
  return yes;
}

void load_fp16(const std::uint8_t* src, float* dst, std::size_t n) {
  if (has_f16c()) return load_fp16_f16c(src, dst, n);
  const auto* h = reinterpret_cast<const _Float16*>(src);
  for (std::size_t i = 0; i < n; ++i) dst[i] = static_cast<float>(h[i]);
}
void store_fp16(const float* src, std::uint8_t* dst, std::size_t n) {
  if (has_f16c()) return store_fp16_f16c(src, dst, n);
  auto* h = reinterpret_cast<_Float16*>(dst);
  for (std::size_t i = 0; i < n; ++i) h[i] = static_cast<_Float16>(src[i]);
}
void load_bf16(const std::uint8_t* src, float* dst, std::size_t n) {
  const auto* b = reinterpret_cast<const std::uint16_t*>(src);
  auto* out = reinterpret_cast<std::uint32_t*>(dst);
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<std::uint32_t>(b[i]) << 16;
}
void store_bf16(const float* src, std::uint8_t* dst, std::size_t n) {
  auto* b = reinterpret_cast<std::uint16_t*>(dst);
  for (std::size_t i = 0; i < n; ++i) b[i] = f32_to_bf16(src[i]);
}

}  // namespace

namespace {
thread_local bool t_half_through_dl16 = false;

void round_half_through_dl16(float* x, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) x[i] = round_through_dl16(x[i]);
}
}  // namespace

namespace {

// fp8 (isa::DType's comment gives the formats): decoded exactly; encoded by rounding to
// nearest, ties to even, as PyTorch's float8 types do: e4m3 has no infinity, so a value
// that rounds past 448 (and an infinity) becomes NaN; e5m2 overflows to infinity.
struct Fp8Format {
  int mbits, bias;
  bool has_inf;
  float max;
};
constexpr Fp8Format kE4m3{3, 7, false, 448.0f}, kE5m2{2, 15, true, 57344.0f};

float fp8_to_f32(std::uint8_t code, const Fp8Format& f) {
  const bool negative = (code & 0x80) != 0;
  const int e = (code & 0x7f) >> f.mbits, m = code & ((1 << f.mbits) - 1);
  const int emax = (1 << (7 - f.mbits)) - 1;
  float v;
  if (f.has_inf && e == emax) {
    v = m == 0 ? std::numeric_limits<float>::infinity() : std::numeric_limits<float>::quiet_NaN();
  } else if (!f.has_inf && e == emax && m == (1 << f.mbits) - 1) {
    v = std::numeric_limits<float>::quiet_NaN();
  } else if (e == 0) {
    v = std::ldexp(static_cast<float>(m), 1 - f.bias - f.mbits);
  } else {
    v = std::ldexp(static_cast<float>(m + (1 << f.mbits)), e - f.bias - f.mbits);
  }
  return negative ? -v : v;
}

std::uint8_t f32_to_fp8(float x, const Fp8Format& f) {
  const std::uint8_t sign = std::signbit(x) ? 0x80 : 0;
  const std::uint8_t nan = static_cast<std::uint8_t>(sign | 0x7f);
  const std::uint8_t inf = static_cast<std::uint8_t>(sign | (f.has_inf ? 0x7c : 0x7f));
  if (std::isnan(x)) return nan;
  const float a = std::fabs(x);
  if (std::isinf(a)) return inf;
  if (a == 0) return sign;
  int exp = 0;
  std::frexp(a, &exp);  // a = f x 2^exp, f in [0.5, 1): floor(log2 a) = exp - 1
  const int e = std::max(exp - 1, 1 - f.bias);
  const float quantum = std::ldexp(1.0f, e - f.mbits);
  const float r = std::nearbyint(a / quantum) * quantum;  // ties to even (the default mode)
  if (r > f.max) return f.has_inf ? inf : nan;
  if (r == 0) return sign;
  std::frexp(r, &exp);
  const int re = exp - 1;
  if (re < 1 - f.bias) {  // subnormal
    return static_cast<std::uint8_t>(sign | static_cast<int>(std::ldexp(r, f.bias - 1 + f.mbits)));
  }
  const int m = static_cast<int>(std::ldexp(r, f.mbits - re)) - (1 << f.mbits);
  return static_cast<std::uint8_t>(sign | ((re + f.bias) << f.mbits) | m);
}

}  // namespace

void set_half_through_dl16(bool on) { t_half_through_dl16 = on; }
bool half_through_dl16() { return t_half_through_dl16; }

void load_f32(DType t, const std::uint8_t* src, float* dst, std::size_t n) {
  switch (t) {
    case DType::fp32: std::memcpy(dst, src, n * 4); return;
    case DType::fp16:
      load_fp16(src, dst, n);
      if (t_half_through_dl16) round_half_through_dl16(dst, n);
      return;
    case DType::bf16:
      load_bf16(src, dst, n);
      if (t_half_through_dl16) round_half_through_dl16(dst, n);
      return;
    case DType::int8:
      for (std::size_t i = 0; i < n; ++i) dst[i] = static_cast<float>(static_cast<std::int8_t>(src[i]));
      return;
    case DType::int32:
      for (std::size_t i = 0; i < n; ++i) {
        std::int32_t v;
        std::memcpy(&v, src + 4 * i, 4);
        dst[i] = static_cast<float>(v);
      }
      return;
    case DType::boolean:
      for (std::size_t i = 0; i < n; ++i) dst[i] = src[i] != 0 ? 1.0f : 0.0f;
      return;
    case DType::fp8_e4m3:
      for (std::size_t i = 0; i < n; ++i) dst[i] = fp8_to_f32(src[i], kE4m3);
      return;
    case DType::fp8_e5m2:
      for (std::size_t i = 0; i < n; ++i) dst[i] = fp8_to_f32(src[i], kE5m2);
      return;
  }
}

void store_f32(DType t, const float* src, std::uint8_t* dst, std::size_t n) {
  if (t_half_through_dl16 && (t == DType::fp16 || t == DType::bf16)) {
    // The result is DL16 on the card; then stored in the tensor's format.
    float tmp[kChunk];
    for (std::size_t i = 0; i < n; i += kChunk) {
      const std::size_t m = std::min(kChunk, n - i);
      for (std::size_t j = 0; j < m; ++j) tmp[j] = round_through_dl16(src[i + j]);
      if (t == DType::fp16) store_fp16(tmp, dst + 2 * i, m);
      else store_bf16(tmp, dst + 2 * i, m);
    }
    return;
  }
  switch (t) {
    case DType::fp32: std::memcpy(dst, src, n * 4); return;
    case DType::fp16: store_fp16(src, dst, n); return;
    case DType::bf16: store_bf16(src, dst, n); return;
    case DType::int8:
      for (std::size_t i = 0; i < n; ++i) dst[i] = static_cast<std::uint8_t>(saturate<std::int8_t>(src[i]));
      return;
    case DType::int32:
      for (std::size_t i = 0; i < n; ++i) {
        const std::int32_t v = saturate<std::int32_t>(src[i]);
        std::memcpy(dst + 4 * i, &v, 4);
      }
      return;
    case DType::boolean:
      for (std::size_t i = 0; i < n; ++i) dst[i] = src[i] != 0.0f ? 1 : 0;
      return;
    case DType::fp8_e4m3:
      for (std::size_t i = 0; i < n; ++i) dst[i] = f32_to_fp8(src[i], kE4m3);
      return;
    case DType::fp8_e5m2:
      for (std::size_t i = 0; i < n; ++i) dst[i] = f32_to_fp8(src[i], kE5m2);
      return;
  }
}

}  // namespace spyre::sim::numeric
