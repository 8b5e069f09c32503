#include "timing/overlap_meter.h"

#include <algorithm>
#include <iterator>

namespace spyre::timing {

Picoseconds OverlapMeter::covered(const Set& set, Picoseconds from, Picoseconds to) {
  Picoseconds total = 0;
  auto it = set.upper_bound(from);
  if (it != set.begin()) --it;  // the interval starting at or before `from` may reach into it
  for (; it != set.end() && it->first < to; ++it) {
    const Picoseconds a = std::max(from, it->first), b = std::min(to, it->second);
    if (b > a) total += b - a;
  }
  return total;
}

void OverlapMeter::add(Kind kind, Picoseconds start, Picoseconds end) {
  if (end <= start) return;
  Set& mine = sets_[index(kind)];
  const Set& other = sets_[1 - index(kind)];
  // The gaps of `mine` inside [start, end) are what this interval newly covers.
  auto it = mine.upper_bound(start);
  Picoseconds cursor = start;
  if (it != mine.begin()) cursor = std::max(cursor, std::prev(it)->second);
  while (cursor < end) {
    const bool inside = it != mine.end() && it->first < end;
    const Picoseconds gap_end = inside ? std::max(cursor, it->first) : end;
    if (gap_end > cursor) {
      busy_[index(kind)] += gap_end - cursor;
      overlap_ += covered(other, cursor, gap_end);
    }
    if (!inside) break;
    cursor = std::max(cursor, it->second);
    ++it;
  }
  // Merge it with every interval it touches.
  Picoseconds s = start, e = end;
  auto first = mine.upper_bound(start);
  if (first != mine.begin() && std::prev(first)->second >= start) --first;
  auto last = first;
  for (; last != mine.end() && last->first <= end; ++last) {
    s = std::min(s, last->first);
    e = std::max(e, last->second);
  }
  mine.erase(first, last);
  mine.emplace(s, e);
}

void OverlapMeter::forget_before(Picoseconds horizon) {
  // Disjoint intervals sorted by start are sorted by end too.
  for (Set& set : sets_) {
    while (!set.empty() && set.begin()->second <= horizon) set.erase(set.begin());
  }
}

void OverlapMeter::reset() {
  for (Set& set : sets_) set.clear();
  busy_[0] = busy_[1] = 0;
  overlap_ = 0;
}

}  // namespace spyre::timing
