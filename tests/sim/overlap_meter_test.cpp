// timing::OverlapMeter: busy time per kind (the union of its intervals) and the time
// both kinds are busy at once, checked against hand-worked timelines.
#include <catch2/catch_test_macros.hpp>

#include "timing/overlap_meter.h"

using spyre::timing::OverlapMeter;
using Kind = OverlapMeter::Kind;

TEST_CASE("overlap meter: unions and their intersection, in any order of arrival", "[overlap]") {
  OverlapMeter m;
  // compute [0,10) [20,30); communication [5,25).
  //   compute busy 10 + 10 = 20; communication 20; both: [5,10) + [20,25) = 10.
  m.add(Kind::compute, 0, 10);
  m.add(Kind::communication, 5, 25);
  m.add(Kind::compute, 20, 30);
  CHECK(m.busy(Kind::compute) == 20);
  CHECK(m.busy(Kind::communication) == 20);
  CHECK(m.overlap() == 10);
  // A communication interval already covered adds nothing; one reaching past adds its
  // new part [25,40): 15 more busy, of which [25,30) overlaps compute (5).
  m.add(Kind::communication, 6, 24);
  CHECK(m.busy(Kind::communication) == 20);
  m.add(Kind::communication, 10, 40);
  CHECK(m.busy(Kind::communication) == 35);
  CHECK(m.overlap() == 15);
  // A compute interval bridging a gap of its own kind: [8,22) newly covers [10,20),
  // all of it under communication [5,40).
  m.add(Kind::compute, 8, 22);
  CHECK(m.busy(Kind::compute) == 30);
  CHECK(m.overlap() == 25);
  // Held merged: compute [0,30), communication [5,40).
  CHECK(m.held() == 2);
}

TEST_CASE("overlap meter: touching intervals merge, empty ones count nothing", "[overlap]") {
  OverlapMeter m;
  m.add(Kind::compute, 0, 10);
  m.add(Kind::compute, 10, 20);
  m.add(Kind::compute, 30, 30);
  m.add(Kind::compute, 40, 35);
  CHECK(m.held() == 1);
  CHECK(m.busy(Kind::compute) == 20);
  // Three pieces of communication across compute [0,20) and a gap:
  //   [15,18) overlaps 3, [25,28) nothing, then [18,26) newly covers [18,25), of which
  //   [18,20) overlaps: 2.
  m.add(Kind::communication, 15, 18);
  m.add(Kind::communication, 25, 28);
  m.add(Kind::communication, 18, 26);
  CHECK(m.busy(Kind::communication) == 13);  // [15,28)
  CHECK(m.overlap() == 5);                   // [15,20)
}

TEST_CASE("overlap meter: forgetting the past keeps the totals and bounds what is held", "[overlap]") {
  OverlapMeter m;
  // A long run of alternating work: kernel [100i, 100i+60), copy [100i+50, 100i+80).
  // Each period: compute 60, communication 30, both 10.
  for (int i = 0; i < 1000; ++i) {
    const spyre::timing::Picoseconds t = 100 * static_cast<spyre::timing::Picoseconds>(i);
    m.add(Kind::compute, t, t + 60);
    m.add(Kind::communication, t + 50, t + 80);
    m.forget_before(t + 50);  // what follows starts at t + 100 or later (and the copy at t + 50)
    CHECK(m.held() <= 2);
  }
  CHECK(m.busy(Kind::compute) == 60000);
  CHECK(m.busy(Kind::communication) == 30000);
  CHECK(m.overlap() == 10000);
  m.reset();
  CHECK(m.held() == 0);
  CHECK(m.overlap() == 0);
}
