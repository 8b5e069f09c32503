// Ops that move whole values without arithmetic: tril/triu (compiler/triangle.h; the
// causal masks of attention) and cat.
//
// cat on the device (stack and friends decompose into it): the result is allocated
// once and each input is copied into its slice by the device copy kernel
// (aten/pointwise.h device_copy through copy_), converting dtypes where the inputs
// differ from the promoted result type. PyTorch's rules: 1-D empty inputs are skipped
// (legacy), every other input matches the result in all dims but `dim`.
#include <ATen/MemoryOverlap.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/native/TypeProperties.h>
#include <ATen/ops/empty.h>

#include <vector>

#include <c10/core/DeviceGuard.h>

#include "aten/kernel_cache.h"
#include "aten/out.h"
#include "compiler/triangle.h"
#include "runtime/launch.h"

namespace spyre::backend {
namespace {

at::Tensor triangle(const char* name, bool lower, const at::Tensor& self, std::int64_t diagonal, const at::Tensor& out) {
  TORCH_CHECK(self.dim() >= 2, name, ": input tensor must have at least 2 dimensions");
  const at::Tensor x = self.contiguous();
  at::Tensor result = at::empty(self.sizes(), self.options().memory_format(c10::MemoryFormat::Contiguous));
  if (result.numel() == 0) return deliver(result, out, OutDtype::exact);
  compiler::TriangleShape s;
  s.rows = static_cast<std::uint64_t>(self.size(-2));
  s.cols = static_cast<std::uint64_t>(self.size(-1));
  s.matrices = static_cast<std::uint64_t>(self.numel()) / (s.rows * s.cols);
  s.element_bytes = static_cast<std::uint64_t>(self.element_size());
  s.lower = lower;
  s.diagonal = diagonal;
  const c10::DeviceGuard guard(self.device());
  const c10::DeviceIndex device = self.device().index();
  const std::string key = std::string(name) + "|" + std::to_string(s.matrices) + "x" + std::to_string(s.rows) + "x" +
                          std::to_string(s.cols) + "x" + std::to_string(s.element_bytes) + "B|" +
                          std::to_string(diagonal);
  run_cached(device, key, [&](const compiler::Target& t) { return compiler::compile_triangle(s, t, name); },
             {device_address(x), device_address(result)}, name,
             {.read = s.matrices * s.rows * s.cols * s.element_bytes, .written = s.matrices * s.rows * s.cols * s.element_bytes});
  return deliver(result, out, OutDtype::exact);
}

at::Tensor tril(const at::Tensor& self, std::int64_t diagonal) { return triangle("aten::tril", true, self, diagonal, {}); }
at::Tensor triu(const at::Tensor& self, std::int64_t diagonal) { return triangle("aten::triu", false, self, diagonal, {}); }
at::Tensor& tril_out(const at::Tensor& self, std::int64_t diagonal, at::Tensor& out) {
  triangle("aten::tril.out", true, self, diagonal, out);
  return out;
}
at::Tensor& triu_out(const at::Tensor& self, std::int64_t diagonal, at::Tensor& out) {
  triangle("aten::triu.out", false, self, diagonal, out);
  return out;
}
at::Tensor& tril_(at::Tensor& self, std::int64_t diagonal) {
  triangle("aten::tril_", true, self, diagonal, self);
  return self;
}
at::Tensor& triu_(at::Tensor& self, std::int64_t diagonal) {
  triangle("aten::triu_", false, self, diagonal, self);
  return self;
}

at::Tensor& cat_into(const at::ITensorListRef& list, std::int64_t dim, at::Tensor* out_or_null, at::Tensor& result) {
  const std::vector<at::Tensor> tensors(list.begin(), list.end());
  TORCH_CHECK(!tensors.empty(), "torch.cat(): expected a non-empty list of Tensors");
  const auto skipped = [](const at::Tensor& t) { return t.dim() == 1 && t.numel() == 0; };
  const at::Tensor* ref = nullptr;
  for (const auto& t : tensors) {
    if (!skipped(t)) {
      ref = &t;
      break;
    }
  }
  c10::ScalarType dtype = tensors[0].scalar_type();
  for (std::size_t i = 1; i < tensors.size(); ++i) dtype = at::promote_types(dtype, tensors[i].scalar_type());
  if (out_or_null != nullptr) {
    TORCH_CHECK(out_or_null->device() == tensors[0].device(), "torch.cat(): expected out tensor on device ",
                tensors[0].device(), ", but got device ", out_or_null->device());
    TORCH_CHECK(at::canCast(dtype, out_or_null->scalar_type()), "torch.cat(): input types can't be cast to the desired output type ",
                out_or_null->scalar_type());
  }
  std::vector<std::int64_t> sizes = ref == nullptr ? std::vector<std::int64_t>{0} : ref->sizes().vec();
  std::int64_t wrapped = 0;
  if (ref != nullptr) {
    TORCH_CHECK(ref->dim() > 0, "zero-dimensional tensor (at position ", ref - tensors.data(), ") cannot be concatenated");
    wrapped = at::maybe_wrap_dim(dim, ref->dim());
    sizes[static_cast<std::size_t>(wrapped)] = 0;
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      const at::Tensor& t = tensors[i];
      if (skipped(t)) continue;
      TORCH_CHECK(t.dim() == ref->dim(), "Tensors must have same number of dimensions: got ", ref->dim(), " and ",
                  t.dim());
      for (std::int64_t d = 0; d < t.dim(); ++d) {
        if (d == wrapped) continue;
        TORCH_CHECK(t.size(d) == ref->size(d), "Sizes of tensors must match except in dimension ", wrapped,
                    ". Expected size ", ref->size(d), " but got size ", t.size(d), " for tensor number ", i,
                    " in the list.");
      }
      TORCH_CHECK(t.device() == tensors[0].device(), "Expected all tensors to be on the same device, but found ",
                  tensors[0].device(), " and ", t.device());
      sizes[static_cast<std::size_t>(wrapped)] += t.size(wrapped);
    }
  }
  if (out_or_null == nullptr) {
    // The inputs' memory format when they all share one (as PyTorch's cat keeps
    // channels_last), else contiguous.
    c10::MemoryFormat format = ref != nullptr ? ref->suggest_memory_format() : c10::MemoryFormat::Contiguous;
    for (const auto& t : tensors) {
      if (!skipped(t) && t.suggest_memory_format() != format) format = c10::MemoryFormat::Contiguous;
    }
    result = at::empty(sizes, tensors[0].options().dtype(dtype).memory_format(format));
  } else {
    at::assert_no_internal_overlap(result);
    for (const auto& t : tensors) at::assert_no_overlap(result, t);
    at::native::resize_output(result, sizes);
  }
  if (ref == nullptr) return result;
  std::int64_t offset = 0;
  for (const auto& t : tensors) {
    if (skipped(t)) continue;
    const std::int64_t n = t.size(wrapped);
    if (n > 0) result.narrow(wrapped, offset, n).copy_(t);
    offset += n;
  }
  return result;
}

at::Tensor cat(const at::ITensorListRef& tensors, std::int64_t dim) {
  at::Tensor result;
  return cat_into(tensors, dim, nullptr, result);
}

at::Tensor& cat_out(const at::ITensorListRef& tensors, std::int64_t dim, at::Tensor& out) {
  return cat_into(tensors, dim, &out, out);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("tril", tril);
  m.impl("tril.out", tril_out);
  m.impl("tril_", tril_);
  m.impl("triu", triu);
  m.impl("triu.out", triu_out);
  m.impl("triu_", triu_);
  m.impl("cat", cat);
  m.impl("cat.out", cat_out);
}

}  // namespace spyre::backend
