// index_select on the device (embedding lookups decompose into it): the selected dim
// is moved first and made contiguous when it is not already, so every index picks one
// contiguous row, and compiler/gather.h moves only those rows (any dtype: rows are
// bytes). As on CUDA, an index out of range is a device fault reported at the next
// synchronizing call, naming the index and the kernel.
#include <ATen/MemoryOverlap.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/empty.h>
#include <c10/core/DeviceGuard.h>

#include "aten/cpu_fallback.h"
#include "aten/kernel_cache.h"
#include "aten/out.h"
#include "compiler/gather.h"
#include "runtime/launch.h"

namespace spyre::backend {
namespace {

at::Tensor index_select_impl(const char* name, const at::Tensor& self, std::int64_t dim, const at::Tensor& index_in,
                             const at::Tensor& out) {
  TORCH_CHECK_INDEX(index_in.dim() <= 1, "index_select(): Index is supposed to be a vector");
  TORCH_CHECK(index_in.scalar_type() == at::kLong || index_in.scalar_type() == at::kInt,
              "index_select(): Expected dtype int32 or int64 for index");
  const std::int64_t d = at::maybe_wrap_dim(dim, std::max<std::int64_t>(self.dim(), 1));
  const at::Tensor index = index_in.reshape({-1}).to(self.device()).contiguous();
  std::vector<std::int64_t> sizes = self.sizes().vec();
  if (self.dim() == 0) {
    // A 0-d source: PyTorch's index_select takes its one element for index 0.
    count_fallback(name);
    return deliver(at::index_select(self.cpu(), 0, index.cpu()).to(self.device()), out, OutDtype::exact);
  }
  sizes[static_cast<std::size_t>(d)] = index.numel();
  at::Tensor result = at::empty(sizes, self.options());
  if (result.numel() == 0) return deliver(result, out, OutDtype::exact);
  TORCH_CHECK_INDEX(self.size(d) > 0, "index_select(): self indexing axis dim should be positive");

  // Rows along dim d: move it first, contiguous (a view when d == 0 and self is).
  const at::Tensor table = self.movedim(d, 0).contiguous();
  at::Tensor gathered = result;
  if (d != 0) {
    auto gathered_sizes = table.sizes().vec();
    gathered_sizes[0] = index.numel();
    gathered = at::empty(gathered_sizes, self.options());
  }
  compiler::GatherShape s;
  s.count = static_cast<std::uint64_t>(index.numel());
  s.rows = static_cast<std::uint64_t>(table.size(0));
  s.row_bytes = static_cast<std::uint64_t>(table.numel() / table.size(0)) * table.element_size();
  s.wide_index = index.scalar_type() == at::kLong;
  const c10::DeviceGuard guard(self.device());
  const c10::DeviceIndex device = self.device().index();
  const std::string key = std::string(name) + "|" + std::to_string(s.count) + "x" + std::to_string(s.row_bytes) +
                          "B|" + std::to_string(s.rows) + (s.wide_index ? "|i64" : "|i32");
  run_cached(device, key, [&](const compiler::Target& t) { return compiler::compile_gather(s, t, name); },
             {device_address(table), device_address(index), device_address(gathered)}, name,
             {.read = s.count * (s.wide_index ? 8 : 4) + s.count * s.row_bytes, .written = s.count * s.row_bytes});
  if (d != 0) result.copy_(gathered.movedim(0, d));
  return deliver(result, out, OutDtype::exact);
}

at::Tensor index_select(const at::Tensor& self, std::int64_t dim, const at::Tensor& index) {
  return index_select_impl("aten::index_select", self, dim, index, at::Tensor());
}

at::Tensor& index_select_out(const at::Tensor& self, std::int64_t dim, const at::Tensor& index, at::Tensor& out) {
  // As the CPU's: an out= whose elements share memory, or that overlaps an input, is refused.
  at::assert_no_internal_overlap(out);
  at::assert_no_overlap(out, self);
  at::assert_no_overlap(out, index);
  index_select_impl("aten::index_select.out", self, dim, index, out);
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("index_select", index_select);
  m.impl("index_select.out", index_select_out);
}

}  // namespace spyre::backend
