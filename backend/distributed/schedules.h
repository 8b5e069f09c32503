// The collectives' schedules: which card sends how many bytes to which in each step of
// an algorithm, the form spyreSystemScheduleTime models (card k is rank k), and the
// all-to-all payloads' framing. Torch-free, unit-tested (tests/distributed/
// schedules_test.cpp); the process group (process_group.cpp) picks one per collective.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "spyre/spyre_drv.h"

namespace spyre::distributed {

struct Schedule {
  std::vector<std::vector<spyre_link_transfer_t>> steps;
};

// `steps` steps in each of which every rank k sends `bytes` to k + 1 (mod n): a ring
// all-reduce is 2 (n - 1) steps of ceil(bytes / n), an all-gather n - 1 steps.
Schedule ring(int n, int steps, std::uint64_t bytes);
// A binomial tree from `root`: in each step every rank that has the data sends it to the
// rank `span` further on (span 1, 2, 4, ...): ceil(log2 n) steps. `up` reverses it, each
// transfer and the order of the steps (a reduce to root).
Schedule tree(int n, int root, std::uint64_t bytes, bool up);
// One step: every other rank k sends bytes(k) to root (to_root: a gather), or root sends
// them to k (a scatter).
Schedule star(int n, int root, const std::function<std::uint64_t(int)>& bytes, bool to_root);
// An all-to-all of sizes[k][j] bytes from k to j: n - 1 steps, in step i every rank k
// sends its piece for k + i (mod n).
Schedule all_to_all(const std::vector<std::vector<std::uint64_t>>& sizes);

// A schedule as spyreSystemScheduleTime takes it: every transfer in step order, and the
// transfers per step.
struct FlatSchedule {
  std::vector<spyre_link_transfer_t> transfers;
  std::vector<std::uint32_t> counts;
};
FlatSchedule flatten(const Schedule& s);
// The bytes rank `rank` sends in a schedule.
std::uint64_t sent_by(const Schedule& s, int rank);

// The ranks of a group of `size` other than `rank`, in order.
std::vector<int> everyone_but(int rank, int size);
// What rank `rank` sends in an all-to-all: sends[k] bytes to each other rank k (none of
// zero bytes).
std::vector<spyre_link_transfer_t> own_transfers(int rank, const std::vector<std::uint64_t>& sends);

// An all-to-all's payload starts with the sender's bytes for every rank (n x u64), so
// every rank learns the whole matrix and models the same schedule.
std::string with_sizes(const std::vector<std::uint64_t>& sizes, const std::string& data);
// The sizes at the head of a payload (std::runtime_error when it is too short for n),
// and the data after them.
std::vector<std::uint64_t> sizes_of(const std::string& payload, int n);
std::string strip_sizes(const std::string& payload, int n);

}  // namespace spyre::distributed
