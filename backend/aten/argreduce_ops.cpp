// argmax, argmin, and max / min along a dim (values and indices) on the device:
// the dim moved last and made contiguous when it is not, then compiler/argreduce.h.
// Indices are int64, written by the kernel as an int32 and a zero word. Dtypes the
// kernel does not take (int32, whose values fp32 does not hold exactly, int64, float64,
// bool) and 0-d or empty inputs run on the CPU, counted.
#include <ATen/WrapDimUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/argmax.h>
#include <ATen/ops/argmin.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/max.h>
#include <ATen/ops/min.h>
#include <ATen/ops/sort.h>
#include <ATen/ops/topk.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "aten/cpu_fallback.h"
#include "aten/kernel_cache.h"
#include "aten/out.h"
#include "compiler/argreduce.h"
#include "runtime/launch.h"

namespace spyre::backend {
namespace {

using Pair = std::tuple<at::Tensor, at::Tensor>;

bool device_takes(const at::Tensor& self) {
  const auto t = self.scalar_type();
  return (t == at::kFloat || t == at::kHalf || t == at::kBFloat16 || t == at::kChar) && self.dim() > 0 &&
         self.numel() > 0;
}

// The extreme values (when `values`) and their indices along `dim` (every element when
// dim is none: argmax/argmin only), in fresh tensors.
Pair arg_extreme(const char* name, bool max, bool values, const at::Tensor& self, std::optional<std::int64_t> dim,
                 bool keepdim) {
  TORCH_CHECK(self.dim() <= 64, "only tensors with up to 64 dims are supported");
  if (!device_takes(self) || (dim && self.size(at::maybe_wrap_dim(*dim, self.dim())) == 0)) {
    count_fallback(name);
    const at::Tensor x = self.cpu();
    if (values) {
      auto [v, i] = max ? at::max(x, *dim, keepdim) : at::min(x, *dim, keepdim);
      return {v.to(self.device()), i.to(self.device())};
    }
    return {at::Tensor(), (max ? at::argmax(x, dim, keepdim) : at::argmin(x, dim, keepdim)).to(self.device())};
  }
  const c10::DeviceGuard guard(self.device());
  at::Tensor x;
  std::vector<std::int64_t> shape;
  if (!dim) {
    x = self.reshape({1, -1}).contiguous();
    if (keepdim) shape.assign(static_cast<std::size_t>(self.dim()), 1);
  } else {
    const std::int64_t d = at::maybe_wrap_dim(*dim, self.dim());
    at::Tensor moved = self.movedim(d, -1);
    if (moved.stride(-1) != 1) moved = moved.contiguous();
    shape = self.sizes().vec();
    if (keepdim) {
      shape[static_cast<std::size_t>(d)] = 1;
    } else {
      shape.erase(shape.begin() + d);
    }
    x = moved.reshape({-1, self.size(d)});  // (a view when the kept dims coalesce, else a device copy)
  }
  compiler::ArgReduceShape s;
  s.rows = static_cast<std::uint64_t>(x.size(0));
  s.cols = static_cast<std::uint64_t>(x.size(1));
  s.row_stride = x.stride(0);
  s.in = *device_dtype(x.scalar_type());
  s.max = max;
  s.values = values;
  if (s.cols > compiler::kArgReduceMaxCols) {
    count_fallback(name);
    return arg_extreme(name, max, values, self.cpu(), dim, keepdim);  // (the CPU path above)
  }
  at::Tensor indices = at::empty(shape, self.options().dtype(at::kLong));
  at::Tensor vals = values ? at::empty(shape, self.options()) : at::Tensor();
  const c10::DeviceIndex device = self.device().index();
  std::vector<std::uint64_t> args{device_address(x), device_address(indices), device_address(device_positions(self.device()))};
  if (values) args.push_back(device_address(vals));
  const std::string key = std::string(name) + "|" + std::to_string(s.rows) + "x" + std::to_string(s.cols) + "/" +
                          std::to_string(s.row_stride) + "|" + std::string(isa::to_string(s.in));
  const auto bytes = [](const at::Tensor& t) { return t.defined() ? static_cast<std::uint64_t>(t.numel() * t.element_size()) : 0ull; };
  run_cached(device, key, [&](const compiler::Target& t) { return compiler::compile_argreduce(s, t, name); }, args, name,
             Traffic{.read = bytes(x), .written = bytes(indices) + bytes(vals)});
  return {vals, indices};
}

// PyTorch's out= rules: on the input's device, of exactly the result's dtype.
void into(at::Tensor& out, const at::Tensor& result) { deliver(result, out, OutDtype::exact); }

at::Tensor argmax(const at::Tensor& self, std::optional<std::int64_t> dim, bool keepdim) {
  return std::get<1>(arg_extreme("aten::argmax", true, false, self, dim, keepdim));
}
at::Tensor& argmax_out(const at::Tensor& self, std::optional<std::int64_t> dim, bool keepdim, at::Tensor& out) {
  into(out, std::get<1>(arg_extreme("aten::argmax.out", true, false, self, dim, keepdim)));
  return out;
}
at::Tensor argmin(const at::Tensor& self, std::optional<std::int64_t> dim, bool keepdim) {
  return std::get<1>(arg_extreme("aten::argmin", false, false, self, dim, keepdim));
}
at::Tensor& argmin_out(const at::Tensor& self, std::optional<std::int64_t> dim, bool keepdim, at::Tensor& out) {
  into(out, std::get<1>(arg_extreme("aten::argmin.out", false, false, self, dim, keepdim)));
  return out;
}
Pair max_dim(const at::Tensor& self, std::int64_t dim, bool keepdim) {
  return arg_extreme("aten::max.dim", true, true, self, dim, keepdim);
}
std::tuple<at::Tensor&, at::Tensor&> max_dim_out(const at::Tensor& self, std::int64_t dim, bool keepdim,
                                                 at::Tensor& values, at::Tensor& indices) {
  auto [v, i] = arg_extreme("aten::max.dim_max", true, true, self, dim, keepdim);
  into(values, v);
  into(indices, i);
  return {values, indices};
}
Pair min_dim(const at::Tensor& self, std::int64_t dim, bool keepdim) {
  return arg_extreme("aten::min.dim", false, true, self, dim, keepdim);
}
std::tuple<at::Tensor&, at::Tensor&> min_dim_out(const at::Tensor& self, std::int64_t dim, bool keepdim,
                                                 at::Tensor& values, at::Tensor& indices) {
  auto [v, i] = arg_extreme("aten::min.dim_min", false, true, self, dim, keepdim);
  into(values, v);
  into(indices, i);
  return {values, indices};
}

// topk along `dim`: float rows on the device (compiler/argreduce.h: k up to
// kTopkMaxK, in the moved-last layout, then back in the input's dim order,
// contiguous as the CPU's); other dtypes, larger k, 0-d and empty inputs on the CPU,
// counted. `sorted` = false is served sorted (PyTorch leaves the order open).
Pair topk_impl(const char* name, const at::Tensor& self, std::int64_t k, std::int64_t dim, bool largest) {
  const std::int64_t d = at::maybe_wrap_dim(dim, self.dim());
  const std::int64_t size = self.dim() == 0 ? 1 : self.size(d);
  TORCH_CHECK(k >= 0 && k <= size, "selected index k out of range");
  const auto t = self.scalar_type();
  const bool on_device = (t == at::kFloat || t == at::kHalf || t == at::kBFloat16) && self.dim() > 0 && k > 0 &&
                         static_cast<std::uint64_t>(k) <= compiler::kTopkMaxK &&
                         static_cast<std::uint64_t>(size) <= compiler::kTopkMaxCols && self.numel() > 0;
  if (!on_device) {
    if (k > 0 && self.numel() > 0) count_fallback(name);
    auto [v, i] = at::topk(self.cpu(), k, dim, largest, true);
    return {v.to(self.device()), i.to(self.device())};
  }
  const c10::DeviceGuard guard(self.device());
  at::Tensor moved = self.movedim(d, -1);
  if (moved.stride(-1) != 1) moved = moved.contiguous();
  const at::Tensor x = moved.reshape({-1, size});
  compiler::TopkShape s;
  s.rows = static_cast<std::uint64_t>(x.size(0));
  s.cols = static_cast<std::uint64_t>(size);
  s.row_stride = x.stride(0);
  s.k = static_cast<std::uint64_t>(k);
  s.in = *device_dtype(t);
  s.largest = largest;
  std::vector<std::int64_t> shape = moved.sizes().vec();
  shape.back() = k;
  at::Tensor values = at::empty(shape, self.options());
  at::Tensor indices = at::empty(shape, self.options().dtype(at::kLong));
  const std::string key = std::string(name) + "|" + std::to_string(s.rows) + "x" + std::to_string(s.cols) + "/" +
                          std::to_string(s.row_stride) + "|" + std::to_string(k) + (largest ? "L" : "S") + "|" +
                          std::string(isa::to_string(s.in));
  const auto bytes = [](const at::Tensor& v) { return static_cast<std::uint64_t>(v.numel() * v.element_size()); };
  run_cached(self.device().index(), key, [&](const compiler::Target& tg) { return compiler::compile_topk(s, tg, name); },
             {device_address(x), device_address(values), device_address(indices),
              device_address(device_positions(self.device()))},
             name, Traffic{.read = bytes(x), .written = bytes(values) + bytes(indices)});
  if (d != self.dim() - 1) {
    values = values.movedim(-1, d).contiguous();
    indices = indices.movedim(-1, d).contiguous();
  }
  return {values, indices};
}

Pair topk(const at::Tensor& self, c10::SymInt k, std::int64_t dim, bool largest, bool /*sorted*/) {
  return topk_impl("aten::topk", self, k.expect_int(), dim, largest);
}
std::tuple<at::Tensor&, at::Tensor&> topk_out(const at::Tensor& self, c10::SymInt k, std::int64_t dim, bool largest,
                                              bool /*sorted*/, at::Tensor& values, at::Tensor& indices) {
  auto [v, i] = topk_impl("aten::topk.values", self, k.expect_int(), dim, largest);
  into(values, v);
  into(indices, i);
  return {values, indices};
}

// sort along `dim`: a topk of the whole dim for float rows of up to kTopkMaxK values
// (equal values keep their index order, so the sort is stable; NaN sorts as the CPU's:
// last ascending, first descending); longer rows and other dtypes on the CPU, counted.
Pair sort_impl(const char* name, const at::Tensor& self, std::optional<bool> stable, std::int64_t dim, bool descending) {
  const std::int64_t d = at::maybe_wrap_dim(dim, std::max<std::int64_t>(self.dim(), 1));
  const std::int64_t size = self.dim() == 0 ? 1 : self.size(d);
  const auto t = self.scalar_type();
  if ((t == at::kFloat || t == at::kHalf || t == at::kBFloat16) && self.dim() > 0 && self.numel() > 0 &&
      static_cast<std::uint64_t>(size) <= compiler::kTopkMaxK) {
    return topk_impl(name, self, size, d, descending);
  }
  if (self.numel() > 0) count_fallback(name);
  auto [v, i] = at::sort(self.cpu(), stable, dim, descending);
  return {v.to(self.device()), i.to(self.device())};
}
Pair sort_stable(const at::Tensor& self, std::optional<bool> stable, std::int64_t dim, bool descending) {
  return sort_impl("aten::sort", self, stable, dim, descending);
}
std::tuple<at::Tensor&, at::Tensor&> sort_out(const at::Tensor& self, std::optional<bool> stable, std::int64_t dim,
                                              bool descending, at::Tensor& values, at::Tensor& indices) {
  auto [v, i] = sort_impl("aten::sort.values_stable", self, stable, dim, descending);
  into(values, v);
  into(indices, i);
  return {values, indices};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("sort.stable", sort_stable);
  m.impl("sort.values_stable", sort_out);
  m.impl("topk", topk);
  m.impl("topk.values", topk_out);
  m.impl("argmax", argmax);
  m.impl("argmax.out", argmax_out);
  m.impl("argmin", argmin);
  m.impl("argmin.out", argmin_out);
  m.impl("max.dim", max_dim);
  m.impl("max.dim_max", max_dim_out);
  m.impl("min.dim", min_dim);
  m.impl("min.dim_min", min_dim_out);
}

}  // namespace spyre::backend
