// torch.profiler on spyre: a Kineto child activity profiler. With
// ProfilerActivity.PrivateUse1, every device kernel launched while the profiler records
// becomes a device activity: named after its aten op ("aten::mm kernel"), on a track per
// device (pid = device index) and stream (tid = stream id),
// linked to the CPU op that launched it (so key_averages() shows device time per op),
// with the simulated duration. Placement on the host timeline: a kernel starts when its
// launch call was made or when the previous kernel of its stream ends, whichever is
// later, and lasts its simulated time (the device's clock is simulated, so only its
// durations and order are real; docs/ARCHITECTURE.md §9).
#pragma once

#include <string>

#include <c10/core/Stream.h>

namespace spyre::backend::profiler {

// Called after each launch on the launching thread: a no-op unless a session records.
void note_launch(c10::Stream stream, const std::string& name);

}  // namespace spyre::backend::profiler
