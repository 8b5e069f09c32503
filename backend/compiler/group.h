// Horizontal fusion: independent programs merged into one launch (what CUDA's
// multi_tensor_apply does for the optimizers' _foreach ops). Each member keeps its own
// code; its streams are placed on the cores where they add least to the busiest one,
// its device arguments are renumbered after the members before it, and a core runs
// the members placed on it one after the other, a full wait between them. One launch
// instead of many saves the per-launch cost on the card and on the host.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace spyre::compiler {

struct GroupMember {
  std::vector<std::uint8_t> program;  // a program blob (isa/program.h)
  std::uint32_t args = 0;             // launch arguments it takes: 0 .. args-1
};

// One program running every member: member m's argument a is argument
// (members[0].args + ... + members[m-1].args) + a of the merged launch. The members must
// be independent of each other (no member reads what another writes: their streams run
// concurrently on different cores) and must not synchronise across cores (ring sends
// and receives, barriers: a stream is moved to another core). Throws
// std::invalid_argument naming the member for a malformed or coupled one, and when the
// arguments exceed isa::kMaxArgs or the streams a launch's `cores`.
std::vector<std::uint8_t> compile_group(const std::vector<GroupMember>& members, std::uint32_t cores,
                                        const std::string& name);

}  // namespace spyre::compiler
