// How long a card computes, how long it communicates, and how long it does both at
// once: the busy time of two kinds of intervals (each kind's union) and of their
// intersection, measured exactly while holding only the intervals that later ones can
// still meet. Plain C++: the chip feeds it its launches (compute) and its peer copies
// and collectives (communication).
#pragma once

#include <cstddef>
#include <map>

#include "timing/timing_rules.h"

namespace spyre::timing {

class OverlapMeter {
 public:
  enum class Kind { compute = 0, communication = 1 };

  // [start, end) was busy with `kind` (an empty or reversed interval adds nothing).
  // Parts already covered by that kind count once; the newly covered part adds to the
  // kind's busy time and, where the other kind covers it too, to the overlap.
  void add(Kind kind, Picoseconds start, Picoseconds end);
  // No interval added from now on starts before `horizon`: forget those that end by
  // then (the totals keep them). Keeps the meter's memory to the work in flight.
  void forget_before(Picoseconds horizon);
  void reset();

  Picoseconds busy(Kind kind) const { return busy_[index(kind)]; }
  Picoseconds overlap() const { return overlap_; }
  // Intervals held (merged, both kinds).
  std::size_t held() const { return sets_[0].size() + sets_[1].size(); }

 private:
  using Set = std::map<Picoseconds, Picoseconds>;  // start -> end; disjoint, not touching
  static std::size_t index(Kind k) { return static_cast<std::size_t>(k); }
  static Picoseconds covered(const Set& set, Picoseconds from, Picoseconds to);

  Set sets_[2];
  Picoseconds busy_[2] = {0, 0};
  Picoseconds overlap_ = 0;
};

}  // namespace spyre::timing
