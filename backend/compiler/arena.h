// Scratchpad addresses handed out in order, each buffer 64-byte aligned: a kernel's
// layout, written once so the bytes a plan needs and the addresses its code uses
// cannot disagree.
#pragma once

#include <cstdint>

namespace spyre::compiler {

struct Arena {
  std::uint64_t next = 0;  // the bytes taken so far
  std::uint32_t operator()(std::uint64_t bytes) {
    const auto at = static_cast<std::uint32_t>(next);
    next += (bytes + 63) / 64 * 64;
    return at;
  }
};

}  // namespace spyre::compiler
