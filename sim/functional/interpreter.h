// The functional device's core model: runs a launch's streams to completion with no
// timing and no SystemC (streams take turns; ring messages and barriers synchronise
// them), with the same instruction semantics and faults as the timed chip.
#pragma once

#include "chip/chip.h"

namespace spyre::sim::functional {

// Runs `request` on `chip`'s device memory and scratchpads. The record has no times;
// a stall (every unfinished stream waiting) is reported as a deadlock fault.
LaunchRecord run(Chip& chip, const LaunchRequest& request);

}  // namespace spyre::sim::functional
