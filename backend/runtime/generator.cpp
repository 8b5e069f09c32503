#include "runtime/generator.h"

#include <cstring>
#include <vector>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/GeneratorForPrivateuseone.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/TensorImpl.h>
#include <ATen/ops/empty.h>

#include "runtime/driver.h"

namespace spyre::backend {

SpyreGenerator::SpyreGenerator(c10::DeviceIndex index, std::uint64_t seed)
    : c10::GeneratorImpl(c10::Device(c10::DeviceType::PrivateUse1, index),
                         c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
      seed_(seed) {}

void SpyreGenerator::set_current_seed(std::uint64_t seed) {
  const std::lock_guard lock(mutex_);
  seed_ = seed;
  offset_ = 0;
}

std::uint64_t SpyreGenerator::current_seed() const {
  const std::lock_guard lock(mutex_);
  return seed_;
}

std::uint64_t SpyreGenerator::seed() {
  const std::uint64_t s = c10::detail::getNonDeterministicRandom();
  set_current_seed(s);
  return s;
}

void SpyreGenerator::set_offset(std::uint64_t offset) {
  const std::lock_guard lock(mutex_);
  offset_ = offset;
}

std::uint64_t SpyreGenerator::get_offset() const {
  const std::lock_guard lock(mutex_);
  return offset_;
}

void SpyreGenerator::set_state(const c10::TensorImpl& state) {
  constexpr std::size_t kBytes = 2 * sizeof(std::uint64_t);
  TORCH_CHECK(state.dtype() == caffe2::TypeMeta::Make<std::uint8_t>() && state.numel() == static_cast<std::int64_t>(kBytes) &&
                  state.is_contiguous() && state.device().is_cpu(),
              "spyre: a generator state is a contiguous CPU uint8 tensor of ", kBytes,
              " bytes (seed, offset: two little-endian uint64, as get_state returns); got ", state.numel(),
              " elements of ", state.dtype().name(), " on ", state.device());
  std::uint64_t v[2];
  std::memcpy(v, state.data(), kBytes);
  const std::lock_guard lock(mutex_);
  seed_ = v[0];
  offset_ = v[1];
}

c10::intrusive_ptr<c10::TensorImpl> SpyreGenerator::get_state() const {
  at::Tensor t = at::empty({16}, at::TensorOptions().dtype(at::kByte).device(at::kCPU));
  const std::lock_guard lock(mutex_);
  const std::uint64_t v[2] = {seed_, offset_};
  std::memcpy(t.data_ptr(), v, sizeof v);
  return t.getIntrusivePtr();
}

std::pair<std::uint64_t, std::uint64_t> SpyreGenerator::reserve(std::uint64_t counters) {
  const std::lock_guard lock(mutex_);
  const std::pair<std::uint64_t, std::uint64_t> at{seed_, offset_};
  offset_ += counters;
  return at;
}

SpyreGenerator* SpyreGenerator::clone_impl() const {
  const std::lock_guard lock(mutex_);
  auto* g = new SpyreGenerator(device().index(), seed_);
  g->offset_ = offset_;
  return g;
}

const at::Generator& default_generator(c10::DeviceIndex index) {
  static const std::vector<at::Generator> generators = [] {
    std::vector<at::Generator> g;
    for (c10::DeviceIndex i = 0; i < device_count_or_zero(); ++i) g.push_back(at::make_generator<SpyreGenerator>(i));
    return g;
  }();
  const c10::DeviceIndex i = index == -1 ? current_device() : index;
  check_device_index(i);
  return generators[static_cast<std::size_t>(i)];
}

SpyreGenerator* generator_or_default(const std::optional<at::Generator>& gen, c10::Device device) {
  if (gen.has_value() && gen->defined()) {
    TORCH_CHECK(gen->device().type() == c10::DeviceType::PrivateUse1, "spyre: a random op on ", device,
                " needs a spyre generator; got a generator for ", gen->device());
    return gen->get<SpyreGenerator>();
  }
  return default_generator(device.index()).get<SpyreGenerator>();
}

namespace {

at::Generator make_generator(c10::DeviceIndex index) {
  return at::make_generator<SpyreGenerator>(index == -1 ? current_device() : index);
}
REGISTER_GENERATOR_PRIVATEUSE1(make_generator)

}  // namespace

}  // namespace spyre::backend

namespace spyre::backend {

at::Generator cpu_generator_for(const std::optional<at::Generator>& gen, c10::Device device) {
  const auto [seed, offset] = generator_or_default(gen, device)->reserve(1);
  // splitmix64 of the stream position: distinct positions give unrelated CPU seeds.
  std::uint64_t z = seed ^ (offset + 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return at::detail::createCPUGenerator(z ^ (z >> 31));
}

}  // namespace spyre::backend
