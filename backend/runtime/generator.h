// The spyre random number generator: a Philox4x32-10 stream position (seed, offset), as
// PyTorch's CUDA generator keeps it. Device random ops (aten/random_ops.cpp) reserve
// counters from it and hand the position to a vrandom kernel, so the numbers are made
// on the device, are the same for a seed however many cores the chip has, and do not
// touch the CPU's generator. torch.Generator(device="spyre") makes one
// (REGISTER_GENERATOR_PRIVATEUSE1); each device has a default one (the PrivateUse1
// hooks' getDefaultGenerator) that torch.manual_seed and torch.spyre.manual_seed seed.
#pragma once

#include <cstdint>
#include <mutex>
#include <utility>

#include <ATen/core/Generator.h>
#include <c10/core/GeneratorImpl.h>

namespace spyre::backend {

class SpyreGenerator final : public c10::GeneratorImpl {
 public:
  explicit SpyreGenerator(c10::DeviceIndex index, std::uint64_t seed = c10::default_rng_seed_val);

  void set_current_seed(std::uint64_t seed) override;
  std::uint64_t current_seed() const override;
  std::uint64_t seed() override;  // a nondeterministic seed, set and returned
  void set_offset(std::uint64_t offset) override;
  std::uint64_t get_offset() const override;
  // The state as a 16-byte uint8 CPU tensor: seed then offset, little-endian uint64.
  void set_state(const c10::TensorImpl& state) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;
  static c10::DeviceType device_type() { return c10::DeviceType::PrivateUse1; }

  // Reserves `counters` Philox counters: returns the (seed, offset) they start at and
  // moves the offset past them. (A generator is shared between threads: the lock
  // makes each reservation whole.)
  std::pair<std::uint64_t, std::uint64_t> reserve(std::uint64_t counters);

 private:
  SpyreGenerator* clone_impl() const override;

  mutable std::mutex mutex_;
  std::uint64_t seed_ = c10::default_rng_seed_val;
  std::uint64_t offset_ = 0;
};

// The device's default generator (index -1: the current device).
const at::Generator& default_generator(c10::DeviceIndex index);

// `gen` when given (it must be a spyre generator), else `device`'s default.
SpyreGenerator* generator_or_default(const std::optional<at::Generator>& gen, c10::Device device);

}  // namespace spyre::backend

namespace spyre::backend {

// A CPU generator seeded from the spyre one (`gen`, or `device`'s default), for random
// ops that run on the CPU (dtypes the device does not compute, ops without a device
// kernel): their numbers then follow torch.spyre.manual_seed too and leave the CPU's
// own generator alone. Takes one counter of the spyre stream.
at::Generator cpu_generator_for(const std::optional<at::Generator>& gen, c10::Device device);

}  // namespace spyre::backend
