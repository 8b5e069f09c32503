// Launching device programs from the backend: load (once per program and device) and
// launch on the current stream, named after the aten op that asked for it, so traces,
// launch records and fault messages say which op ran. SPYRE_LAUNCH_BLOCKING=1 makes
// every launch synchronous, so a fault is raised by the op that caused it (like
// CUDA_LAUNCH_BLOCKING).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <c10/core/Device.h>

#include "spyre/spyre_drv.h"
#include "spyre_torch/spyre_torch.h"

namespace spyre::backend {

// The least DRAM traffic an op needs (each input's distinct elements read once, each
// output written once): the roofline reports measure the kernel against
// (spyre_launch_desc_t.min_read_bytes). Zero: unknown.
struct Traffic {
  std::uint64_t read = 0, written = 0;
};

// Loads a program onto the device. Programs live in device memory beside tensors: when
// that is full, the caching allocator's unused segments are released and the load tried
// once more (as a tensor allocation would), then torch.OutOfMemoryError.
spyre_program_t load_program(c10::DeviceIndex device, const std::vector<std::uint8_t>& blob, const std::string& name);

void launch_program(c10::DeviceIndex device, const std::vector<std::uint8_t>& blob,
                    const std::vector<std::uint64_t>& args, const std::string& op_name);

// Launches an already loaded program (see kernel_cache.h).
void launch(c10::DeviceIndex device, spyre_program_t program, const std::vector<std::uint64_t>& args,
            const std::string& op_name, Traffic traffic = {});

bool launch_blocking();

// Launches a thread holds back to give the device together (aten/pointwise.h,
// PointwiseGroup): while a flush function is set, every other launch, copy, fill and
// synchronisation this thread asks for runs it first, so the device still sees the
// thread's work in the order it was asked for. Set and cleared by the group.
using DeferredFlush = void (*)();
void set_deferred_flush(DeferredFlush flush);
// (flush_deferred, in spyre_torch/spyre_torch.h, runs the current thread's flush
// function, if any.)

}  // namespace spyre::backend
