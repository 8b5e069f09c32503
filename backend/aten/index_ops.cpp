// index_select on the device (embedding lookups decompose into it): the selected dim
// is moved first and made contiguous when it is not already, so every index picks one
// contiguous row, and compiler/gather.h moves only those rows (any dtype: rows are
// bytes). As on CUDA, an index out of range is a device fault reported at the next
// synchronizing call, naming the index and the kernel.
//
// index_copy_ (and index_copy, index_copy.out) the other way: compiler/gather.h's
// scatter writes the source's rows into the table in place, only those rows (a KV
// cache update moves one position per head, not the cache). index_put_ with one index
// tensor and full slices elsewhere (cache[:, :, pos] = kv; its _index_put_impl_) is the
// same scatter, negative indices counting from the end; other index_put_ patterns
// (masks, several index tensors, accumulate) run on the CPU, counted.
//
// embedding_dense_backward (nn.Embedding's weight gradient: row v is the sum of the
// output gradient's rows whose index is v). The device has no scatter-add, so the
// indices (integers, few) are read on the host, which groups equal ones; the device
// then sums each group's rows pairwise: a level gathers the unfinished groups' rows in
// pairs (an odd one out paired with a zero row) and sums each pair, halving every
// group, and the groups down to one row are scattered into the zeroed gradient.
// log2(most repeats) levels; every row is read once per level it is still in.
//
// gather (torch.gather, take_along_dim: the sampled token's id from its candidate
// list) picks single elements along a dim, per outer position (compiler/gather.h's
// compile_gather_along), any dtype of 1 to 8 bytes; arguments PyTorch refuses (and
// 0-d tensors) take the CPU path, which raises PyTorch's errors, counted.
#include <ATen/MemoryOverlap.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/gather.h>
#include <ATen/ops/embedding_dense_backward_native.h>
#include <ATen/ops/index_copy.h>
#include <ATen/ops/index_select.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/zeros.h>
#include <ATen/core/List.h>
#include <ATen/core/ivalue.h>
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

// self[outer..., index[i], inner...] = source[outer..., i, inner...] on the device.
// PyTorch's own checks run first on meta copies (shapes, dtypes, the index's dtype),
// so errors read as the CPU's.
at::Tensor& index_copy_device(const char* name, at::Tensor& self, std::int64_t dim, const at::Tensor& index_in,
                              const at::Tensor& source_in, bool wrap = false) {
  const auto meta = [](const at::Tensor& t) {
    return at::empty_strided(t.sizes(), t.strides(), t.options().device(c10::kMeta));
  };
  (void)at::index_copy(meta(self), dim, meta(index_in), meta(source_in));  // PyTorch's checks
  TORCH_CHECK(index_in.device() == self.device() || index_in.device().is_cpu(), name,
              ": expected the index on ", self.device(), " or the CPU, found it on ", index_in.device());
  TORCH_CHECK(source_in.device() == self.device(), name, ": expected the source on ", self.device(), ", found it on ",
              source_in.device());
  {
    // The CPU kernel's own checks, with its messages.
    TORCH_CHECK(index_in.scalar_type() == at::kLong, "index_copy_(): Expected a long tensor for index, but got ",
                index_in.scalar_type());
    TORCH_CHECK(self.scalar_type() == source_in.scalar_type(),
                "index_copy_(): self and source expected to have the same dtype, but got (self) ", self.scalar_type(),
                " and (source) ", source_in.scalar_type());
    const std::int64_t wd = at::maybe_wrap_dim(dim, std::max<std::int64_t>(self.dim(), 1));
    auto sliced = [&](const at::Tensor& t) {
      auto v = t.sizes().vec();
      if (!v.empty()) v.erase(v.begin() + std::min<std::int64_t>(wd, static_cast<std::int64_t>(v.size()) - 1));
      std::string text;
      for (const auto x : v) text += (text.empty() ? "" : " ") + std::to_string(x);
      return std::pair{v, text};
    };
    const auto [self_slice, self_text] = sliced(self);
    const auto [source_slice, source_text] = sliced(source_in);
    TORCH_CHECK(self_slice == source_slice, "index_copy_(): Source/destination tensor must have same slice shapes. ",
                "Destination slice shape: ", self_text, " at dimension ", wd, " and source slice shape: ", source_text,
                " at dimension 0.");
    TORCH_CHECK_INDEX(index_in.dim() == 0 || source_in.dim() == 0 || index_in.numel() == source_in.size(wd),
                      "index_copy_(): Number of indices (", index_in.numel(), ") should be equal to source.size(dim) (",
                      source_in.size(wd), ")");
  }
  if (index_in.numel() == 0 || self.numel() == 0) return self;
  if (self.dim() == 0) {  // one element: a copy
    self.copy_(source_in.reshape({}));
    return self;
  }
  const std::int64_t d = at::maybe_wrap_dim(dim, self.dim());
  // Rows are the dims after d, contiguous in the table; a table that is not gets its
  // contiguous copy scattered into and copied back.
  std::int64_t expected = 1;
  bool rows_contiguous = self.stride(d) > 0;
  for (std::int64_t k = self.dim() - 1; k > d; --k) {
    if (self.size(k) != 1 && self.stride(k) != expected) rows_contiguous = false;
    expected *= self.size(k);
  }
  for (std::int64_t k = 0; k <= d; ++k) {
    if (self.stride(k) < 0) rows_contiguous = false;
  }
  at::Tensor table =
      rows_contiguous && at::has_internal_overlap(self) == at::MemOverlap::No ? self : self.contiguous();
  auto source_sizes = table.sizes().vec();
  source_sizes[static_cast<std::size_t>(d)] = index_in.numel();
  at::Tensor source = source_in.reshape(source_sizes);
  // The source is read as [outer..., count, row] contiguous (or, along dim 0, rows with a
  // pitch), never through self's memory.
  // (get_overlap_status calls any strided pair "too hard": ask it only within one storage.)
  if (source.is_alias_of(table) && at::get_overlap_status(source, table) != at::MemOverlapStatus::No) {
    source = source.clone();
  }
  // Rows along dim 0 with a pitch (a slice of a wider tensor) are read in place.
  bool pitched = d == 0 && source.dim() > 0 && source.stride(0) >= expected;
  for (std::int64_t k = source.dim() - 1, run = 1; k > 0 && pitched; run *= source.size(k--)) {
    if (source.size(k) != 1 && source.stride(k) != run) pitched = false;
  }
  if (!pitched) source = source.contiguous();
  const at::Tensor index = index_in.reshape({-1}).to(self.device()).contiguous();
  compiler::ScatterShape s;
  if (pitched && source.size(0) > 1) s.source_row_stride = static_cast<std::uint64_t>(source.stride(0)) * table.element_size();
  s.count = static_cast<std::uint64_t>(index.numel());
  s.rows = static_cast<std::uint64_t>(table.size(d));
  const auto esize = static_cast<std::uint64_t>(table.element_size());
  s.row_bytes = static_cast<std::uint64_t>(expected) * esize;
  s.row_stride = static_cast<std::uint64_t>(table.stride(d)) * esize;
  s.wide_index = index.scalar_type() == at::kLong;
  s.wrap = wrap;
  std::string key = std::string(name) + "|" + std::to_string(s.count) + "x" + std::to_string(s.row_bytes) + "B/" +
                    std::to_string(s.row_stride) + "|" + std::to_string(s.rows) + (s.wide_index ? "|i64|" : "|i32|") +
                    (wrap ? "wrap|" : "") + (s.source_row_stride != 0 ? "src" + std::to_string(s.source_row_stride) + "|" : "");
  std::uint64_t outer = 1;
  for (std::int64_t k = 0; k < d; ++k) {
    s.outer_sizes.push_back(static_cast<std::uint64_t>(table.size(k)));
    s.outer_strides.push_back(static_cast<std::uint64_t>(table.stride(k)) * esize);
    outer *= static_cast<std::uint64_t>(table.size(k));
    key += std::to_string(table.size(k)) + ":" + std::to_string(table.stride(k)) + ",";
  }
  const c10::DeviceGuard guard(self.device());
  const std::uint64_t moved = outer * s.count * s.row_bytes;
  // Programs grow with the outer positions; past 16384 of them the CPU does it.
  const bool ran = outer <= 16384 &&
                   run_cached_if_fits(self.device().index(), key,
                                      [&](const compiler::Target& t) { return compiler::compile_scatter(s, t, name); },
                                      {device_address(table), device_address(index), device_address(source)}, name,
                                      {.read = s.count * (s.wide_index ? 8 : 4) + moved, .written = moved});
  if (!ran) {
    count_fallback(name);
    at::Tensor cpu = table.cpu();
    cpu.index_copy_(d, index.cpu(), source.cpu());
    table.copy_(cpu);
  }
  if (!table.is_same(self)) self.copy_(table);
  return self;
}

at::Tensor& index_copy_(at::Tensor& self, std::int64_t dim, const at::Tensor& index, const at::Tensor& source) {
  return index_copy_device("aten::index_copy_", self, dim, index, source);
}

at::Tensor& index_copy_out(const at::Tensor& self, std::int64_t dim, const at::Tensor& index, const at::Tensor& source,
                           at::Tensor& out) {
  const auto meta = [](const at::Tensor& t) {
    return at::empty_strided(t.sizes(), t.strides(), t.options().device(c10::kMeta));
  };
  (void)at::index_copy(meta(self), dim, meta(index), meta(source));
  if (!out.is_same(self)) {
    at::native::resize_output(out, self.sizes());
    out.copy_(self);
  }
  return index_copy_device("aten::index_copy.out", out, dim, index, source);
}

at::Tensor index_copy(const at::Tensor& self, std::int64_t dim, const at::Tensor& index, const at::Tensor& source) {
  at::Tensor out = self.clone(at::MemoryFormat::Contiguous);
  return index_copy_device("aten::index_copy", out, dim, index, source);
}

// _index_put_impl_ (what index_put_ and tensor[...] = v reach): one 1-D integer index
// tensor at some position and full slices (None) elsewhere, no accumulation, is a
// scatter along that dim with the values broadcast and negative indices counting from
// the end; anything else runs on the CPU through the fallback, counted.
at::Tensor& index_put_impl_(at::Tensor& self, const c10::List<std::optional<at::Tensor>>& indices,
                            const at::Tensor& values, bool accumulate, bool unsafe) {
  std::int64_t at_dim = -1;
  bool simple = !accumulate && values.device() == self.device() && values.scalar_type() == self.scalar_type() &&
                static_cast<std::int64_t>(indices.size()) <= self.dim();
  for (std::size_t i = 0; simple && i < indices.size(); ++i) {
    const std::optional<at::Tensor> t = indices.get(i);
    if (!t || !t->defined()) continue;
    const bool integer = t->scalar_type() == at::kLong || t->scalar_type() == at::kInt;
    if (at_dim >= 0 || !integer || t->dim() != 1 || (t->device() != self.device() && !t->device().is_cpu())) {
      simple = false;
    } else {
      at_dim = static_cast<std::int64_t>(i);
    }
  }
  if (simple && at_dim >= 0) {
    const at::Tensor index = *indices.get(static_cast<std::size_t>(at_dim));
    auto shape = self.sizes().vec();
    shape[static_cast<std::size_t>(at_dim)] = index.numel();
    if (at::is_expandable_to(values.sizes(), shape)) {
      return index_copy_device("aten::_index_put_impl_", self, at_dim, index.to(at::kLong), values.expand(shape),
                               /*wrap=*/true);
    }
  }
  torch::jit::Stack stack{self, indices, values, accumulate, unsafe};
  run_on_cpu("aten::_index_put_impl_", "", &stack);
  return self;
}

at::Tensor gather_impl(const char* name, const at::Tensor& self, std::int64_t dim, const at::Tensor& index,
                       const at::Tensor& out) {
  const std::int64_t d = at::maybe_wrap_dim(dim, std::max<std::int64_t>(self.dim(), 1));
  const auto elem = static_cast<std::uint64_t>(self.element_size());
  bool on_device = index.scalar_type() == at::kLong && index.device() == self.device() && self.dim() > 0 &&
                   index.dim() == self.dim() && index.numel() > 0 && self.size(d) > 0 && !self.is_complex() &&
                   (elem == 1 || elem == 2 || elem == 4 || elem == 8);
  for (std::int64_t k = 0; on_device && k < self.dim(); ++k) {
    on_device = k == d || index.size(k) <= self.size(k);
  }
  if (!on_device) {
    if (index.numel() > 0) count_fallback(name);
    return deliver(at::gather(self.cpu(), dim, index.cpu()).to(self.device()), out, OutDtype::exact);
  }
  const c10::DeviceGuard guard(self.device());
  const at::Tensor idx = index.movedim(d, -1).contiguous();
  const at::Tensor table = self.movedim(d, -1);
  compiler::GatherAlongShape s;
  s.count = static_cast<std::uint64_t>(idx.size(-1));
  s.rows = static_cast<std::uint64_t>(table.size(-1));
  s.elem_bytes = elem;
  s.row_stride = static_cast<std::uint64_t>(table.stride(-1)) * elem;
  std::string key = std::string(name) + "|" + std::to_string(s.count) + "/" + std::to_string(s.rows) + "x" +
                    std::to_string(s.row_stride) + "|" + std::to_string(elem) + "|";
  for (std::int64_t k = 0; k + 1 < idx.dim(); ++k) {
    s.outer_sizes.push_back(static_cast<std::uint64_t>(idx.size(k)));
    s.outer_strides.push_back(static_cast<std::uint64_t>(table.stride(k)) * elem);
    key += std::to_string(idx.size(k)) + ":" + std::to_string(table.stride(k)) + ",";
  }
  at::Tensor result = at::empty(idx.sizes(), self.options());
  run_cached(self.device().index(), key,
             [&](const compiler::Target& t) { return compiler::compile_gather_along(s, t, name); },
             {device_address(table), device_address(idx), device_address(result)}, name,
             Traffic{.read = static_cast<std::uint64_t>(idx.numel()) * (8 + elem),
                     .written = static_cast<std::uint64_t>(result.numel()) * elem});
  result = result.movedim(-1, d);
  if (!result.is_contiguous()) result = result.contiguous();
  return deliver(result, out, OutDtype::exact);
}
at::Tensor gather(const at::Tensor& self, std::int64_t dim, const at::Tensor& index, bool /*sparse_grad*/) {
  return gather_impl("aten::gather", self, dim, index, at::Tensor());
}
at::Tensor& gather_out(const at::Tensor& self, std::int64_t dim, const at::Tensor& index, bool /*sparse_grad*/,
                       at::Tensor& out) {
  // PyTorch's: an out tensor (resized to the index's shape first) with overlapping
  // elements, or sharing memory with an input, is refused.
  if (out.device() == self.device()) at::native::resize_output(out, index.sizes());
  at::assert_no_internal_overlap(out);
  at::assert_no_overlap(out, self);
  at::assert_no_overlap(out, index);
  gather_impl("aten::gather.out", self, dim, index, out);
  return out;
}

at::Tensor embedding_dense_backward(const at::Tensor& grad_output, const at::Tensor& indices, std::int64_t num_weights,
                                    std::int64_t padding_idx, bool scale_grad_by_freq) {
  const bool device_path = grad_output.dim() >= 1 && device_float_dtype(grad_output.scalar_type()) &&
                           (indices.scalar_type() == at::kLong || indices.scalar_type() == at::kInt) &&
                           grad_output.device() == indices.device();
  if (!device_path) {
    count_fallback("aten::embedding_dense_backward");
    return at::native::embedding_dense_backward_cpu(grad_output.cpu(), indices.cpu(), num_weights, padding_idx,
                                                    scale_grad_by_freq)
        .to(grad_output.device());
  }
  const c10::DeviceGuard guard(grad_output.device());
  const std::int64_t n = indices.numel(), d = grad_output.size(-1);
  TORCH_CHECK(grad_output.numel() == n * d, "embedding_dense_backward: expected a gradient of ", n, " rows of ", d,
              " (one per index), got sizes ", grad_output.sizes());
  at::Tensor grad_weight = at::zeros({num_weights, d}, grad_output.options());
  if (n == 0 || d == 0) return grad_weight;

  // The groups: each index value, the rows where it occurs (in the current source).
  const at::Tensor host = indices.reshape({-1}).to(c10::kCPU, at::kLong).contiguous();
  const std::int64_t* idx = host.const_data_ptr<std::int64_t>();
  std::vector<std::pair<std::int64_t, std::int64_t>> order;  // (value, row)
  order.reserve(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    TORCH_CHECK_INDEX(idx[i] >= 0 && idx[i] < num_weights, "embedding_dense_backward: index ", idx[i], " at ", i,
                      " is out of range for ", num_weights, " rows");
    if (idx[i] != padding_idx) order.emplace_back(idx[i], i);
  }
  std::sort(order.begin(), order.end());
  struct Group {
    std::int64_t value, count;
    std::vector<std::int64_t> rows;
  };
  std::vector<Group> groups;
  for (const auto& [value, row] : order) {
    if (groups.empty() || groups.back().value != value) groups.push_back({value, 0, {}});
    groups.back().rows.push_back(row);
    ++groups.back().count;
  }
  const auto long_tensor = [&](const std::vector<std::int64_t>& v) {
    return at::tensor(v, at::TensorOptions().dtype(at::kLong)).to(grad_output.device());
  };
  // The groups down to one row of `source`: scaled by 1 / count when asked, then
  // scattered into their rows of the gradient.
  const auto finish = [&](const at::Tensor& source, std::vector<Group*>& done) {
    if (done.empty()) return;
    std::vector<std::int64_t> rows, values;
    std::vector<double> scale;
    for (const Group* g : done) {
      rows.push_back(g->rows[0]);
      values.push_back(g->value);
      scale.push_back(1.0 / static_cast<double>(g->count));
    }
    at::Tensor picked = at::index_select(source, 0, long_tensor(rows));
    if (scale_grad_by_freq) {
      picked = picked * at::tensor(scale, at::TensorOptions().dtype(at::kFloat)).to(picked.options()).unsqueeze(1);
    }
    grad_weight.index_copy_(0, long_tensor(values), picked);
    done.clear();
  };

  // Each level's source has a zero row after its rows, the partner of an odd one out.
  at::Tensor source = grad_output.reshape({n, d});
  std::vector<Group*> open, done;
  for (Group& g : groups) (g.rows.size() == 1 ? done : open).push_back(&g);
  finish(source, done);
  if (!open.empty()) {
    at::Tensor padded = at::empty({n + 1, d}, grad_output.options());
    padded.narrow(0, 0, n).copy_(source);
    padded.narrow(0, n, 1).zero_();
    source = padded;
  }
  while (!open.empty()) {
    // This level's pairs; every open group's rows become its pairs'.
    const std::int64_t zero = source.size(0) - 1;
    std::vector<std::int64_t> pairs;
    for (Group* g : open) {
      std::vector<std::int64_t> next;
      for (std::size_t i = 0; i < g->rows.size(); i += 2) {
        pairs.push_back(g->rows[i]);
        pairs.push_back(i + 1 < g->rows.size() ? g->rows[i + 1] : zero);
        next.push_back(static_cast<std::int64_t>(pairs.size() / 2 - 1));
      }
      g->rows = std::move(next);
    }
    const auto count = static_cast<std::int64_t>(pairs.size() / 2);
    at::Tensor next = at::empty({count + 1, d}, grad_output.options());
    at::Tensor rows = next.narrow(0, 0, count);
    at::sum_out(rows, at::index_select(source, 0, long_tensor(pairs)).view({count, 2, d}), 1);
    next.narrow(0, count, 1).zero_();
    source = next;
    std::vector<Group*> still;
    for (Group* g : open) (g->rows.size() == 1 ? done : still).push_back(g);
    open = std::move(still);
    finish(source, done);
  }
  return grad_weight;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("embedding_dense_backward", embedding_dense_backward);
  m.impl("gather", gather);
  m.impl("gather.out", gather_out);
  m.impl("index_select", index_select);
  m.impl("index_select.out", index_select_out);
  m.impl("index_copy_", index_copy_);
  m.impl("index_copy.out", index_copy_out);
  m.impl("index_copy", index_copy);
  m.impl("_index_put_impl_", index_put_impl_);
}

}  // namespace spyre::backend
