// cat on the device (stack and friends decompose into it): the result is allocated
// once and each input is copied into its slice by the device copy kernel
// (aten/pointwise.h device_copy through copy_), converting dtypes where the inputs
// differ from the promoted result type. PyTorch's rules: 1-D empty inputs are skipped
// (legacy), every other input matches the result in all dims but `dim`.
#include <ATen/WrapDimUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/native/TypeProperties.h>
#include <ATen/ops/empty.h>

#include <vector>

namespace spyre::backend {
namespace {

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
    result = at::empty(sizes, tensors[0].options().dtype(dtype));
  } else {
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
  m.impl("cat", cat);
  m.impl("cat.out", cat_out);
}

}  // namespace spyre::backend
