// The compiler's refusal for a shape that no tiling fits into the target's scratchpad:
// a type of its own, so callers can run such an op another way (the backend falls back
// to the CPU) while any other compile error still surfaces as one.
#pragma once

#include <stdexcept>

namespace spyre::compiler {

class DoesNotFit : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

}  // namespace spyre::compiler
