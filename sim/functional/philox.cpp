#include "functional/philox.h"

#include <cmath>
#include <cstring>
#include <numbers>

namespace spyre::sim::functional {

std::array<std::uint32_t, 4> philox4x32_10(std::array<std::uint32_t, 4> c, std::array<std::uint32_t, 2> k) {
  // The round multipliers and the Weyl key increments of Philox4x32.
  constexpr std::uint32_t kM0 = 0xD2511F53, kM1 = 0xCD9E8D57;
  constexpr std::uint32_t kW0 = 0x9E3779B9, kW1 = 0xBB67AE85;
  for (int round = 0; round < 10; ++round) {
    const std::uint64_t p0 = std::uint64_t{kM0} * c[0], p1 = std::uint64_t{kM1} * c[2];
    const auto hi0 = static_cast<std::uint32_t>(p0 >> 32), lo0 = static_cast<std::uint32_t>(p0);
    const auto hi1 = static_cast<std::uint32_t>(p1 >> 32), lo1 = static_cast<std::uint32_t>(p1);
    c = {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
    k[0] += kW0;
    k[1] += kW1;
  }
  return c;
}

namespace {

std::array<std::uint32_t, 4> block(std::uint64_t seed, std::uint64_t counter) {
  return philox4x32_10({static_cast<std::uint32_t>(counter), static_cast<std::uint32_t>(counter >> 32), 0, 0},
                       {static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)});
}

// The top 24 bits as a float in [0, 1): exact in fp32.
float uniform(std::uint32_t x) { return static_cast<float>(x >> 8) * 0x1p-24f; }

}  // namespace

float random_value(isa::RandomDist dist, std::uint64_t seed, std::uint64_t offset, std::uint64_t j) {
  if (dist == isa::RandomDist::uniform) return uniform(block(seed, offset + j / 4)[j % 4]);
  const auto lanes = block(seed, offset + j / 2);
  const double u1 = uniform(lanes[2 * (j % 2)]), u2 = uniform(lanes[2 * (j % 2) + 1]);
  // 1 - u1 is in (0, 1]: the logarithm is finite.
  return static_cast<float>(std::sqrt(-2.0 * std::log(1.0 - u1)) * std::cos(2.0 * std::numbers::pi * u2));
}

void random(const isa::VRandom& r, std::uint8_t* sp) {
  std::uint64_t state[2];
  std::memcpy(state, sp + r.state, sizeof state);
  auto* out = reinterpret_cast<float*>(sp + r.dst);
  for (std::uint32_t p = 0; p < r.planes; ++p) {
    for (std::uint32_t row = 0; row < r.rows; ++row) {
      const std::uint64_t j0 = r.start + row * r.row_step + p * r.plane_step;
      for (std::uint32_t c = 0; c < r.cols; ++c) *out++ = random_value(r.dist, state[0], state[1], j0 + c);
    }
  }
}

}  // namespace spyre::sim::functional
