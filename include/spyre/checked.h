// Overflow-checked integer arithmetic for address and extent computations.
//
// Every address, extent and size derived from untrusted input (a program's fields, a
// launch's arguments, an ABI call's sizes, a config) is computed with these: a result
// that does not fit its type is "nothing", never a wrapped value that slips past a
// bounds check. Dependency-free (standard library and GCC/Clang builtins only).
#pragma once

#include <concepts>
#include <cstdint>
#include <optional>

namespace spyre::checked {

// a + b, or nothing when the exact sum does not fit T.
template <std::integral T>
constexpr std::optional<T> add(T a, T b) {
  T r;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// a - b, or nothing when the exact difference does not fit T.
template <std::integral T>
constexpr std::optional<T> sub(T a, T b) {
  T r;
  if (__builtin_sub_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// a * b, or nothing when the exact product does not fit T.
template <std::integral T>
constexpr std::optional<T> mul(T a, T b) {
  T r;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// Chains: each step keeps "nothing" once any earlier step overflowed.
template <std::integral T>
constexpr std::optional<T> add(std::optional<T> a, T b) {
  return a ? add(*a, b) : std::nullopt;
}
template <std::integral T>
constexpr std::optional<T> mul(std::optional<T> a, T b) {
  return a ? mul(*a, b) : std::nullopt;
}

// Converts to T, or nothing when v is out of T's range.
template <std::integral T, std::integral U>
constexpr std::optional<T> narrow(U v) {
  T r;
  if (__builtin_add_overflow(v, U{0}, &r)) return std::nullopt;
  return r;
}

}  // namespace spyre::checked

namespace spyre {

// ceil(a / b) for b > 0, without the overflow of (a + b - 1) / b near 2^64.
constexpr std::uint64_t ceil_div(std::uint64_t a, std::uint64_t b) { return a / b + (a % b != 0 ? 1 : 0); }

}  // namespace spyre
