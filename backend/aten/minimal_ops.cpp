// The minimal kernels every PrivateUse1 backend registers: tensor creation, views,
// resizing, copies between CPU and spyre, fills and scalar reads. Everything else runs
// through the CPU fallback (aten/cpu_fallback.cpp) until it has a device kernel.
#include <ATen/MemoryOverlap.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/kaiser_window.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>
#include <ATen/ops/where.h>
#include <c10/core/DeviceGuard.h>

#include "aten/cpu_fallback.h"
#include "aten/kernel_cache.h"
#include "aten/pointwise.h"
#include "runtime/caching_allocator.h"
#include "runtime/derived.h"
#include "runtime/driver.h"
#include "runtime/launch.h"
#include "runtime/streams.h"

namespace spyre::backend {
namespace {

constexpr auto kType = c10::DeviceType::PrivateUse1;

c10::DeviceIndex index_of(std::optional<c10::Device> device) {
  return device && device->has_index() ? device->index() : current_device();
}

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                               std::optional<bool> pin_memory, std::optional<c10::MemoryFormat> memory_format) {
  TORCH_CHECK(!pin_memory.value_or(false), "spyre: only CPU tensors can be pinned");
  TORCH_CHECK(layout.value_or(c10::kStrided) == c10::kStrided, "spyre: only strided tensors are supported");
  const c10::DeviceGuard guard(c10::Device(kType, index_of(device)));
  return at::detail::empty_generic(size, caching_allocator(), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                   c10::dtype_or_default(dtype), memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<c10::ScalarType> dtype,
                         std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                         std::optional<bool> pin_memory) {
  TORCH_CHECK(!pin_memory.value_or(false), "spyre: only CPU tensors can be pinned");
  TORCH_CHECK(layout.value_or(c10::kStrided) == c10::kStrided, "spyre: only strided tensors are supported");
  const c10::DeviceGuard guard(c10::Device(kType, index_of(device)));
  return at::detail::empty_strided_generic(size, stride, caching_allocator(),
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                           c10::dtype_or_default(dtype));
}

const at::Tensor& resize_(const at::Tensor& self, c10::IntArrayRef size,
                          std::optional<c10::MemoryFormat> memory_format) {
  auto* impl = self.unsafeGetTensorImpl();
  // As on the CPU: the same sizes keep the strides (an out= tensor that is a strided
  // view keeps addressing the same elements; it became contiguous before).
  if (self.sizes() == size) {
    if (memory_format && *memory_format != c10::MemoryFormat::Preserve) impl->empty_tensor_restride(*memory_format);
    return self;
  }
  impl->set_sizes_contiguous(size);
  const std::size_t needed =
      static_cast<std::size_t>((self.storage_offset() + self.numel()) * static_cast<std::int64_t>(self.itemsize()));
  if (self.numel() > 0 && needed > self.storage().nbytes()) {
    const c10::DeviceGuard guard(self.device());
    at::native::resize_bytes_nocuda(self.storage(), static_cast<std::int64_t>(needed));
  }
  if (memory_format && *memory_format != c10::MemoryFormat::Preserve) impl->empty_tensor_restride(*memory_format);
  return self;
}

// The span of storage elements a strided tensor touches: [offset, offset + extent).
std::int64_t storage_extent(const at::Tensor& t) {
  if (t.numel() == 0) return 0;
  std::int64_t last = 0;
  for (std::int64_t d = 0; d < t.dim(); ++d) last += (t.size(d) - 1) * t.stride(d);
  return last + 1;
}

spyre_queue_t queue_for(const at::Tensor& device_tensor) {
  return queue_of(current_stream(device_tensor.device().index()));
}

// Raw bytes between a spyre tensor's storage span and host memory (or spyre memory),
// on the current stream of the spyre side; waits when a host destination needs it.
void raw_copy(void* dst, const void* src, std::size_t bytes, spyre_queue_t queue, bool wait) {
  if (bytes == 0) return;
  flush_deferred();
  derived::note_write(dst);
  SPYRE_CHECK(spyreMemcpyAsync(queue, dst, src, bytes));
  if (wait) synchronize_queue(queue, "copy");
}

// A CPU copy of a spyre tensor (any strides), contiguous.
at::Tensor download(const at::Tensor& t) {
  const std::int64_t extent = storage_extent(t);
  auto span = at::empty({extent}, t.options().device(c10::kCPU));
  const auto* base = static_cast<const char*>(t.storage().data()) + t.storage_offset() * t.itemsize();
  raw_copy(span.data_ptr(), base, static_cast<std::size_t>(extent) * t.itemsize(), queue_for(t), true);
  return span.as_strided(t.sizes(), t.strides(), 0).contiguous();
}

// `waiter` waits for everything submitted to `signaller` so far (an event recorded on
// the signaller's device; the driver lets a queue wait on another device's event).
void queue_waits_for(spyre_queue_t waiter, spyre_queue_t signaller, c10::DeviceIndex signaller_device) {
  spyre_event_t e = nullptr;
  SPYRE_CHECK(spyreEventCreate(driver_device(signaller_device), &e));
  spyre_result_t rc = spyreEventRecord(e, signaller);
  if (rc == SPYRE_SUCCESS) rc = spyreQueueWaitEvent(waiter, e);
  spyreEventDestroy(e);  // the queued wait keeps what it needs
  if (rc != SPYRE_SUCCESS) driver_failure(rc, "cross-device copy barrier");
}

bool same_layout(const at::Tensor& a, const at::Tensor& b) {
  return a.dtype() == b.dtype() && a.sizes() == b.sizes() && a.strides() == b.strides() &&
         a.is_non_overlapping_and_dense() && b.is_non_overlapping_and_dense();
}

bool is_pinned(const at::Tensor& t) {
  spyre_pointer_attributes_t a{};
  a.struct_size = sizeof a;
  return spyrePointerGetAttributes(t.data_ptr(), &a) == SPYRE_SUCCESS && a.type == SPYRE_MEMORY_TYPE_HOST_PINNED;
}

// Writes `value` (a CPU tensor of dst's sizes, no conjugate/negative bits) into spyre
// tensor dst's storage, whatever its strides.
void upload_into(const at::Tensor& dst, const at::Tensor& value);

// A tensor with the conjugate or negative bit is a lazy view: its stored numbers are
// conj(x) or -x of its values. Copies read and write stored numbers, so they apply the
// bits themselves (on the CPU; these are rare). Without this, PyTorch's Conjugate
// fallback resolved the bit by cloning, and the clone's copy came back here through
// that fallback again: an endless recursion that crashed the process.
at::Tensor copy_with_bits(const at::Tensor& self, const at::Tensor& dst, bool src_dev, bool dst_dev) {
  at::Tensor value;
  if (src_dev) {
    value = download(self);  // the stored numbers, as a plain CPU tensor
    if (self.is_conj()) value = value.conj_physical();
    if (self.is_neg()) value = value.neg();
  } else {
    value = self.resolve_conj().resolve_neg();
  }
  if (!dst_dev) return dst.copy_(value);
  at::Tensor stored = value.to(dst.scalar_type());
  if (dst.is_neg()) stored = stored.neg();
  if (dst.is_conj()) stored = stored.conj_physical();
  const c10::DeviceGuard guard(dst.device());
  upload_into(dst, stored.resolve_conj().resolve_neg());
  return dst;
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  TORCH_CHECK(self.defined() && dst.defined(), "spyre: copy of an undefined tensor");
  if (self.numel() == 0) return dst;
  const bool src_dev = self.device().type() == kType, dst_dev = dst.device().type() == kType;
  TORCH_CHECK(src_dev || self.is_cpu(), "spyre: copies from ", self.device(), " are not supported");
  TORCH_CHECK(dst_dev || dst.is_cpu(), "spyre: copies to ", dst.device(), " are not supported");
  if (self.is_conj() || self.is_neg() || dst.is_conj() || dst.is_neg()) {
    return copy_with_bits(self, dst, src_dev, dst_dev);
  }
  if (same_layout(self, dst) && src_dev && dst_dev && self.device() != dst.device()) {
    // Between devices, as PyTorch's CUDA copy does: on the source device's current
    // stream, after a two-way barrier with the destination device's current stream
    // (nothing still reads or writes dst, the producer of self has finished), and the
    // destination stream then waits for the copy.
    const std::size_t bytes = static_cast<std::size_t>(storage_extent(self)) * self.itemsize();
    const spyre_queue_t src_q = queue_for(self), dst_q = queue_for(dst);
    const c10::DeviceGuard guard(self.device());
    queue_waits_for(src_q, dst_q, dst.device().index());
    raw_copy(dst.data_ptr(), self.data_ptr(), bytes, src_q, false);
    queue_waits_for(dst_q, src_q, self.device().index());
    return dst;
  }
  if (same_layout(self, dst)) {
    // One transfer of the dense storage span.
    const std::size_t bytes = static_cast<std::size_t>(storage_extent(self)) * self.itemsize();
    const at::Tensor& device_side = dst_dev ? dst : self;
    const c10::DeviceGuard guard(device_side.device());
    // Host destinations must be written before we return (unless non_blocking into
    // pinned memory); pageable host sources are snapshotted by the driver.
    const bool wait = !dst_dev ? !(non_blocking && is_pinned(dst)) : (!src_dev && is_pinned(self) && !non_blocking);
    raw_copy(dst.data_ptr(), self.data_ptr(), bytes, queue_for(device_side), wait);
    return dst;
  }
  // On one device: a pointwise copy kernel (dtype conversion, any strides on both
  // sides, broadcasting), read and written by DMA descriptors.
  if (src_dev && dst_dev && self.device() == dst.device() && dst.numel() > 0) {
    const c10::DeviceGuard guard(dst.device());
    if (device_copy(dst, self) || device_copy_from_int64(dst, self) || device_copy_words(dst, self)) return dst;
  }
  // Otherwise through the CPU (host sides, other devices, dtypes the device lacks).
  at::Tensor source = src_dev ? download(self) : self;
  if (!dst_dev) {
    dst.copy_(source);
    return dst;
  }
  const c10::DeviceGuard guard(dst.device());
  upload_into(dst, source);
  return dst;
}

// Runs `f` on a CPU view with self's sizes and strides over a copy of self's storage
// span, then writes the span back: in-place work the device cannot do, on any layout.
template <class F>
void on_storage_span(const at::Tensor& self, F&& f) {
  if (self.numel() == 0) return;
  const c10::DeviceGuard guard(self.device());
  const std::int64_t extent = storage_extent(self);
  auto span = at::empty({extent}, self.options().device(c10::kCPU));
  auto* base = static_cast<char*>(self.storage().mutable_data()) + self.storage_offset() * self.itemsize();
  const std::size_t bytes = static_cast<std::size_t>(extent) * self.itemsize();
  raw_copy(span.data_ptr(), base, bytes, queue_for(self), true);
  at::Tensor view = span.as_strided(self.sizes(), self.strides(), 0);
  f(view);
  raw_copy(base, span.data_ptr(), bytes, queue_for(self), false);
}

void upload_into(const at::Tensor& dst, const at::Tensor& source) {
  if (dst.is_non_overlapping_and_dense()) {
    auto staged = at::empty_strided(dst.sizes(), dst.strides(), dst.options().device(c10::kCPU));
    staged.copy_(source);
    raw_copy(dst.data_ptr(), staged.data_ptr(), static_cast<std::size_t>(storage_extent(dst)) * dst.itemsize(),
             queue_for(dst), false);
    return;
  }
  // A view with gaps: read its storage span, update the viewed elements, write it back.
  on_storage_span(dst, [&](at::Tensor& view) { view.copy_(source); });
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  if (dst.sizes() != self.sizes()) dst.resize_(self.sizes());
  return copy_from(self, dst, false);
}

c10::Scalar local_scalar_dense(const at::Tensor& self) {
  TORCH_CHECK(self.numel() == 1, "spyre: a tensor with ", self.numel(), " elements cannot be converted to a scalar");
  const c10::DeviceGuard guard(self.device());
  return download(self).item();
}

at::Tensor& fill_scalar(at::Tensor& self, const c10::Scalar& value) {
  if (self.numel() == 0) return self;
  const std::size_t size = self.itemsize();
  if (self.is_non_overlapping_and_dense() && (size == 1 || size == 2 || size == 4)) {
    // The value in the tensor's dtype, as a 1-, 2- or 4-byte pattern.
    const auto one = at::scalar_tensor(value, self.options().device(c10::kCPU));
    const c10::DeviceGuard guard(self.device());
    flush_deferred();
    derived::note_write(self.data_ptr());
    SPYRE_CHECK(spyreMemFillAsync(queue_for(self), self.data_ptr(), one.data_ptr(), size,
                                  static_cast<std::size_t>(self.numel()) * size));
    return self;
  }
  if (at::has_internal_overlap(self) == at::MemOverlap::Yes) {
    // Elements sharing memory (an expanded tensor): filling them is still well defined,
    // and the CPU allows it; copy_ would refuse the overlap.
    on_storage_span(self, [&](at::Tensor& view) { view.fill_(value); });
    return self;
  }
  self.copy_(at::full(self.sizes(), value, self.options().device(c10::kCPU)));
  return self;
}

at::Tensor& zero(at::Tensor& self) { return fill_scalar(self, 0); }

// masked_fill_: the device's where(mask, value, self) into self, the value in self's
// dtype. Tensors whose elements share memory (expanded ones) and dtypes the device
// does not compute fill on the CPU over self's storage span, as the CPU allows (the
// boxed fallback's copy back, and the device kernel's output, may not overlap).
at::Tensor& masked_fill_tensor(at::Tensor& self, const at::Tensor& mask, const at::Tensor& value) {
  TORCH_CHECK(mask.scalar_type() == at::kBool, "masked_fill_ only supports boolean masks, but got mask with dtype ",
              mask.scalar_type());
  TORCH_CHECK(value.dim() == 0, "masked_fill_ only supports a 0-dimensional value tensor, but got tensor with ",
              value.dim(), " dimension(s).");
  if (at::has_internal_overlap(self) == at::MemOverlap::Yes || !device_dtype(self.scalar_type()) ||
      (value.device() != self.device() && !value.is_cpu()) || (mask.device() != self.device() && !mask.is_cpu())) {
    count_fallback("aten::masked_fill_", /*has_kernel=*/false);
    const at::Tensor m = mask.cpu(), v = value.cpu();
    on_storage_span(self, [&](at::Tensor& view) { view.masked_fill_(m, v); });
    return self;
  }
  if (self.numel() == 0) return self;
  const at::Tensor v = value.to(self.device(), self.scalar_type());
  at::where_out(self, mask.to(self.device()), v, self);
  return self;
}
at::Tensor& masked_fill_scalar(at::Tensor& self, const at::Tensor& mask, const c10::Scalar& value) {
  return masked_fill_tensor(self, mask, at::scalar_tensor(value, self.options().device(c10::kCPU)));
}

// kaiser_window computes through a DispatchStub that only CPU and CUDA fill: made on the
// CPU and copied over (counted as a fallback).
at::Tensor kaiser_window(std::int64_t length, bool periodic, double beta, std::optional<at::ScalarType> dtype,
                         std::optional<at::Layout> layout, std::optional<at::Device> device,
                         std::optional<bool> pin_memory) {
  count_fallback("aten::kaiser_window.beta", /*has_kernel=*/false);
  const at::Tensor cpu = at::kaiser_window(length, periodic, beta, at::TensorOptions().dtype(dtype).layout(layout));
  (void)pin_memory;
  return cpu.to(device.value_or(at::Device(c10::DeviceType::PrivateUse1)));
}

at::Tensor as_strided(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride,
                      std::optional<std::int64_t> storage_offset) {
  return at::native::as_strided_tensorimpl(self, size, stride, storage_offset);
}

at::Tensor& set_storage(at::Tensor& self, c10::Storage source, std::int64_t storage_offset, c10::IntArrayRef size,
                        c10::IntArrayRef stride) {
  return at::native::set_storage_cpu_(self, std::move(source), storage_offset, size, stride);
}

void record_stream_op(at::Tensor& self, c10::Stream stream) {
  record_stream(self.storage().data_ptr(), stream);
}

}  // namespace

// Copies to and from spyre apply the conjugate and negative bits themselves (see
// copy_with_bits), so those keys pass _copy_from straight through to it, as they pass
// copy_ through for CPU and CUDA.
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}
TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("record_stream", record_stream_op);
  m.impl("kaiser_window.beta", kaiser_window);
  m.impl("empty.memory_format", empty_memory_format);
  m.impl("empty_strided", empty_strided);
  m.impl("as_strided", as_strided);
  m.impl("view", at::native::view);
  // The view ops whose kernels are registered only for CPU/CUDA (not composite): as
  // fallbacks they returned copies (writes through them were lost).
  m.impl("unfold", at::native::unfold);
  m.impl("view_as_real", at::native::view_as_real);
  m.impl("view_as_complex", at::native::view_as_complex);
  m.impl("_reshape_alias", at::native::_reshape_alias);
  m.impl("resize_", resize_);
  m.impl("set_.source_Storage", at::native::set_);
  m.impl("set_.source_Storage_storage_offset", set_storage);
  m.impl("_copy_from", copy_from);
  m.impl("_copy_from_and_resize", copy_from_and_resize);
  m.impl("_local_scalar_dense", local_scalar_dense);
  m.impl("fill_.Scalar", fill_scalar);
  m.impl("zero_", zero);
  m.impl("masked_fill_.Scalar", masked_fill_scalar);
  m.impl("masked_fill_.Tensor", masked_fill_tensor);
}

}  // namespace spyre::backend
