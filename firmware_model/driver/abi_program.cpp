// The C ABI (include/spyre/spyre_drv.h), part of it: programs and launches.
// Arguments are validated here, then the runtime and the device facade do the work;
// every entry point is wrapped by `guarded` (abi_support.h).
#include <algorithm>
#include <atomic>
#include <cstring>

#include <fmt/format.h>

#include "driver/abi_support.h"

using namespace spyre::driver;
using namespace spyre::driver::abi;

extern "C" {

spyre_result_t spyreProgramLoad(spyre_device_t device, const void* blob, size_t bytes, const char* name,
                                spyre_program_t* program) {
  return guarded(__func__, [&] {
    Runtime& rt = Runtime::get();
    auto d = rt.lookup<Device>(device, "device");
    require(blob, "blob");
    require(program, "program");
    const auto* b = static_cast<const std::uint8_t*>(blob);
    std::shared_ptr<const isa::Program> parsed;
    try {
      auto p = std::make_shared<isa::Program>(std::vector<std::uint8_t>(b, b + bytes));
      p->validate(d->program_limits());
      parsed = std::move(p);
    } catch (const isa::ProgramError& e) {
      raise(SPYRE_ERROR_INVALID_PROGRAM, fmt::format("program rejected by spyre:{}: {}", d->index, e.what()));
    }
    rt.advance(d.get());
    const auto copy = d->memory().allocate(bytes);
    if (!copy) raise(SPYRE_ERROR_OUT_OF_DEVICE_MEMORY, fmt::format("no room for the {}-byte program", bytes));
    std::memcpy(d->memory().host(*copy), b, bytes);
    auto p = std::make_shared<ProgramObject>();
    p->device = d.get();
    p->program = std::move(parsed);
    p->name = name != nullptr && *name != '\0' ? name : p->program->name();
    p->device_copy = *copy;
    *program = static_cast<spyre_program_t>(rt.add(p));
    return SPYRE_SUCCESS;
  });
}

spyre_result_t spyreProgramUnload(spyre_program_t program) {
  return guarded(__func__, [&] {
    Runtime& rt = Runtime::get();
    auto p = rt.lookup<ProgramObject>(program, "program");
    if (!rt.remove(program)) {
      raise(SPYRE_ERROR_INVALID_HANDLE, "program handle was destroyed meanwhile by another thread");
    }
    wait_device_idle(rt, p->device);  // launches already submitted keep using it
    p->device->memory().free(p->device_copy);
    return SPYRE_SUCCESS;
  });
}

spyre_result_t spyreProgramGetInfo(spyre_program_t program, uint32_t* num_streams, uint64_t* bytes) {
  return guarded(__func__, [&] {
    auto p = Runtime::get().lookup<ProgramObject>(program, "program");
    require(num_streams, "num_streams");
    require(bytes, "bytes");
    *num_streams = p->program->num_streams();
    *bytes = p->program->bytes().size();
    return SPYRE_SUCCESS;
  });
}

spyre_result_t spyreLaunch(spyre_queue_t queue, const spyre_launch_desc_t* desc) {
  return guarded(__func__, [&] {
    Runtime& rt = Runtime::get();
    auto q = usable_queue(rt, queue);
    require(desc, "desc");
    // 0.6 callers end at name; the minimum traffic is read when present.
    require_size(desc->struct_size, offsetof(spyre_launch_desc_t, min_read_bytes), "spyre_launch_desc_t");
    const bool v07 = desc->struct_size >= sizeof(spyre_launch_desc_t);
    auto p = rt.lookup<ProgramObject>(desc->program, "program");
    if (p->device != q->device) raise(SPYRE_ERROR_INVALID_ARGUMENT, "the program was loaded on another device");
    if (desc->num_args > isa::kMaxArgs) {
      raise(SPYRE_ERROR_INVALID_ARGUMENT, fmt::format("{} arguments, at most {}", desc->num_args, isa::kMaxArgs));
    }
    if (desc->num_args > 0) require(desc->args, "desc->args");
    const std::uint32_t cores = q->device->num_cores();
    // Configs allow at most SPYRE_MAX_CORES cores (config::kMaxCores), the mask's width.
    static_assert(sizeof(desc->core_mask) * 8 == SPYRE_MAX_CORES && SPYRE_MAX_CORES == isa::kMaxStreams);
    if (cores > SPYRE_MAX_CORES) {
      raise(SPYRE_ERROR_INTERNAL, fmt::format("the device has {} cores, more than the {} a core mask holds", cores,
                                              SPYRE_MAX_CORES));
    }
    std::vector<bool> mask;
    std::uint32_t allowed = cores;
    const bool any = std::all_of(std::begin(desc->core_mask), std::end(desc->core_mask), [](uint64_t w) { return w == 0; });
    if (!any) {
      mask.assign(cores, false);
      allowed = 0;
      for (std::uint32_t c = 0; c < cores; ++c) {
        mask[c] = (desc->core_mask[c / 64] >> (c % 64)) & 1u;
        allowed += mask[c];
      }
    }
    if (allowed < p->program->num_streams()) {
      raise(SPYRE_ERROR_INVALID_ARGUMENT, fmt::format("the program has {} streams but the core mask allows {} of the "
                                                      "device's {} cores",
                                                      p->program->num_streams(), allowed, cores));
    }
    firmware::Launch l;
    l.program = p->program;
    l.args.assign(desc->args, desc->args + desc->num_args);
    l.core_mask = std::move(mask);
    l.name = desc->name != nullptr && *desc->name != '\0' ? desc->name : p->name;
    l.queue_tag = reinterpret_cast<std::uintptr_t>(queue);
    if (v07) {
      l.min_read_bytes = desc->min_read_bytes;
      l.min_write_bytes = desc->min_write_bytes;
    }
    // The host call on the trace's host track (at the virtual host time it ends), with
    // an arrow to the kernel it launched.
    static std::atomic<std::uint64_t> flows{0};
    l.flow = ++flows;
    take_ring_slot(rt, q);
    rt.post(q->device, [dev = q->device, queue = q->queue, name = l.name, flow = l.flow,
                        b = firmware::CommandBody(std::move(l))]() mutable {
      dev->trace_host_call(name, flow);
      dev->submit(queue, std::move(b));
    });
    return SPYRE_SUCCESS;
  });
}

}  // extern "C"
