// The collectives' schedules (backend/distributed/schedules.h) against hand-counted
// steps and transfers.
#include <string>
#include <vector>

#include <catch2/catch_test_macros.hpp>

#include "distributed/schedules.h"

using namespace spyre::distributed;

namespace {

using Transfer = std::vector<std::uint64_t>;  // {src, dst, bytes}
std::vector<std::vector<Transfer>> steps_of(const Schedule& s) {
  std::vector<std::vector<Transfer>> out;
  for (const auto& step : s.steps) {
    auto& o = out.emplace_back();
    for (const auto& t : step) o.push_back({t.src, t.dst, t.bytes});
  }
  return out;
}

}  // namespace

TEST_CASE("given a ring, every rank sends to the next in every step") {
  // An all-reduce of 3 ranks: 2 (3 - 1) = 4 steps of 0 -> 1, 1 -> 2, 2 -> 0.
  const Schedule s = ring(3, 4, 100);
  REQUIRE(s.steps.size() == 4);
  for (const auto& step : steps_of(s)) CHECK(step == std::vector<Transfer>{{0, 1, 100}, {1, 2, 100}, {2, 0, 100}});
  CHECK(sent_by(s, 1) == 400);
}

TEST_CASE("given a binomial tree, the ranks holding the data double each step, and up reverses it") {
  // Root 1 of 5: span 1: 1 -> 2; span 2: 1 -> 3, 2 -> 4; span 4: 1 -> 0 (rank 5 mod 5).
  const auto down = steps_of(tree(5, 1, 8, false));
  CHECK(down == std::vector<std::vector<Transfer>>{{{1, 2, 8}}, {{1, 3, 8}, {2, 4, 8}}, {{1, 0, 8}}});
  // A reduce to root: the same transfers reversed, last step first.
  const auto up = steps_of(tree(5, 1, 8, true));
  CHECK(up == std::vector<std::vector<Transfer>>{{{0, 1, 8}}, {{3, 1, 8}, {4, 2, 8}}, {{2, 1, 8}}});
  CHECK(tree(1, 0, 8, false).steps.empty());
}

TEST_CASE("given a star, one step between the root and every other rank") {
  const auto bytes = [](int k) { return static_cast<std::uint64_t>(10 * k); };
  CHECK(steps_of(star(3, 1, bytes, true)) == std::vector<std::vector<Transfer>>{{{0, 1, 0}, {2, 1, 20}}});
  CHECK(steps_of(star(3, 1, bytes, false)) == std::vector<std::vector<Transfer>>{{{1, 0, 0}, {1, 2, 20}}});
}

TEST_CASE("given an uneven all-to-all, step i sends every rank's piece for the rank i on") {
  const std::vector<std::vector<std::uint64_t>> sizes = {{0, 1, 2}, {3, 0, 5}, {6, 7, 0}};
  const Schedule s = all_to_all(sizes);
  CHECK(steps_of(s) == std::vector<std::vector<Transfer>>{{{0, 1, 1}, {1, 2, 5}, {2, 0, 6}},
                                                         {{0, 2, 2}, {1, 0, 3}, {2, 1, 7}}});
  const FlatSchedule f = flatten(s);
  CHECK(f.counts == std::vector<std::uint32_t>{3, 3});
  REQUIRE(f.transfers.size() == 6);
  CHECK(f.transfers[4].src == 1);
  CHECK(f.transfers[4].dst == 0);
  CHECK(f.transfers[4].bytes == 3);
  CHECK(sent_by(s, 2) == 13);
}

TEST_CASE("given an all-to-all's payload, its sizes frame the data and a short one is refused") {
  const std::string payload = with_sizes({4, 0, 9}, "abcd");
  CHECK(payload.size() == 3 * 8 + 4);
  CHECK(sizes_of(payload, 3) == std::vector<std::uint64_t>{4, 0, 9});
  CHECK(strip_sizes(payload, 3) == "abcd");
  CHECK_THROWS_AS(sizes_of("short", 3), std::runtime_error);
  const auto own = own_transfers(1, {4, 7, 0});
  REQUIRE(own.size() == 1);  // not to itself, not zero bytes
  CHECK(own[0].dst == 0);
  CHECK(own[0].bytes == 4);
  CHECK(everyone_but(1, 4) == std::vector<int>{0, 2, 3});
}
