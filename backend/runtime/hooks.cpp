// PrivateUse1HooksInterface: what PyTorch asks of an accelerator outside of ops
// (generators, pinned memory, device of a pointer, torch.accelerator).
#include <ATen/detail/PrivateUse1HooksInterface.h>

#include "runtime/derived.h"
#include "runtime/driver.h"
#include "runtime/generator.h"

namespace spyre::backend {
namespace {

constexpr auto kType = c10::DeviceType::PrivateUse1;

// Pinned host memory from the driver: asynchronous copies read/write it when they run.
struct PinnedAllocator final : public c10::Allocator {
  c10::DataPtr allocate(std::size_t bytes) override {
    void* p = nullptr;
    if (bytes > 0) SPYRE_CHECK(spyreHostAlloc(bytes, &p));
    return {p, p, &release, c10::Device(c10::DeviceType::CPU)};
  }
  static void release(void* p) {
    if (p != nullptr) spyreHostFree(p);
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void* dest, const void* src, std::size_t count) const override { std::memcpy(dest, src, count); }
};

struct SpyreHooks final : public at::PrivateUse1HooksInterface {
  const at::Generator& getDefaultGenerator(c10::DeviceIndex index) const override { return default_generator(index); }
  at::Generator getNewGenerator(c10::DeviceIndex index) const override {
    return at::make_generator<SpyreGenerator>(index == -1 ? current_device() : index);
  }
  at::Device getDeviceFromPtr(void* data) const override {
    spyre_pointer_attributes_t a{};
    a.struct_size = sizeof a;
    SPYRE_CHECK(spyrePointerGetAttributes(data, &a));
    TORCH_CHECK(a.type == SPYRE_MEMORY_TYPE_DEVICE, "spyre: ", data, " is not spyre device memory");
    for (c10::DeviceIndex i = 0; i < device_count_or_zero(); ++i) {
      if (driver_device(i) == a.device) return c10::Device(kType, i);
    }
    TORCH_CHECK(false, "spyre: no device owns ", data);
  }
  bool isPinnedPtr(const void* data) const override {
    spyre_pointer_attributes_t a{};
    a.struct_size = sizeof a;
    return spyrePointerGetAttributes(data, &a) == SPYRE_SUCCESS && a.type == SPYRE_MEMORY_TYPE_HOST_PINNED;
  }
  c10::Allocator* getPinnedMemoryAllocator() const override {
    static PinnedAllocator allocator;
    return &allocator;
  }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  c10::DeviceIndex deviceCount() const override { return device_count_or_zero(); }
  void setCurrentDevice(c10::DeviceIndex d) const override { set_current_device(d); }
  c10::DeviceIndex getCurrentDevice() const override { return current_device(); }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex d) const override {
    const auto old = current_device();
    set_current_device(d);
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex d) const override { return exchangeDevice(d); }
  // Storage resize (resize_ past the capacity): new device memory, old bytes copied.
  void resizePrivateUse1Bytes(const c10::Storage& storage, std::size_t new_bytes) const override {
    auto* impl = storage.unsafeGetStorageImpl();
    TORCH_CHECK(impl->resizable(), "spyre: trying to resize a storage that is not resizable");
    // What was derived from the old bytes goes with them (the storage could come back
    // to their address later, written meanwhile at the new one).
    derived::note_write(impl->data());
    c10::DataPtr fresh = impl->allocator()->allocate(new_bytes);
    const std::size_t keep = std::min(new_bytes, impl->nbytes());
    if (keep > 0) impl->allocator()->copy_data(fresh.get(), impl->data(), keep);
    impl->set_data_ptr_noswap(std::move(fresh));
    impl->set_nbytes(new_bytes);
  }
};

SpyreHooks hooks;

struct HooksRegistration {
  HooksRegistration() { at::RegisterPrivateUse1HooksInterface(&hooks); }
};
const HooksRegistration registration;

}  // namespace

}  // namespace spyre::backend

