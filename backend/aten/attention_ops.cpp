// scaled_dot_product_attention on the device. PyTorch's SDPA asks the device which
// backend to use (_fused_sdp_choice_stub, registered below for PrivateUse1); for the
// inputs the fused kernel takes, the answer is "overrideable", and SDPA then calls
// _scaled_dot_product_fused_attention_overrideable: one device kernel per call
// (compiler/attention.h), the scores never in device memory. Other inputs (dropout,
// 3-D or nested tensors, head dims over 256, dtypes the arrays do not multiply) take
// PyTorch's math path, whose ops run on the device op by op.
//
// The backward is composed of device ops (matmuls and elementwise kernels): it
// recomputes the probabilities from the saved logsumexp and materialises them, one
// [L x S] matrix per head. Meta kernels for both ops (PyTorch 2.6 has none) let
// torch.compile's fake tensors trace them.
#include <cmath>
#include <limits>
#include <map>
#include <mutex>

#include <ATen/native/DispatchStub.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/SDPBackend.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/sum_to_size.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/full.h>
#include <ATen/ops/index_select.h>
#include <ATen/ops/scaled_dot_product_attention.h>
#include <c10/core/DeviceGuard.h>
#include <torch/csrc/autograd/autograd_not_implemented_fallback.h>
#include <torch/library.h>

#include "aten/kernel_cache.h"
#include "compiler/attention.h"
#include "runtime/launch.h"

namespace spyre::backend {
namespace {

constexpr const char* kName = "aten::_scaled_dot_product_fused_attention_overrideable";
constexpr std::int64_t kMaxHeadDim = 256;

bool float_type(c10::ScalarType t) { return t == at::kFloat || t == at::kHalf || t == at::kBFloat16; }

// Why the fused kernel cannot take these inputs, or empty when it can. (Symbolic sizes:
// torch.compile traces the choice with fake tensors of dynamic shapes.)
std::string unsupported(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                        const std::optional<at::Tensor>& mask, double dropout_p, bool enable_gqa) {
  if (dropout_p > 0) return "dropout";
  if (q.is_nested() || k.is_nested() || v.is_nested()) return "nested tensors";
  if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4) return "inputs that are not 4-D [batch, heads, length, dim]";
  if (!float_type(q.scalar_type()) || k.scalar_type() != q.scalar_type() || v.scalar_type() != q.scalar_type()) {
    return "dtypes other than one of float32, float16 and bfloat16 for query, key and value";
  }
  if (k.device() != q.device() || v.device() != q.device()) return "tensors on different devices";
  if (q.sym_numel() == 0 || k.sym_numel() == 0 || v.sym_numel() == 0) return "empty tensors";
  if (k.sym_size(0) != q.sym_size(0) || v.sym_size(0) != q.sym_size(0) || v.sym_size(1) != k.sym_size(1) ||
      v.sym_size(2) != k.sym_size(2) || k.sym_size(3) != q.sym_size(3)) {
    return "mismatched shapes";
  }
  if (q.sym_size(3) > kMaxHeadDim || v.sym_size(3) > kMaxHeadDim) return "head dims over 256";
  if (q.sym_size(1) != k.sym_size(1) && (!enable_gqa || q.sym_size(1) % k.sym_size(1) != 0)) {
    return "head counts that do not group";
  }
  if (mask && mask->defined()) {
    const at::Tensor& m = *mask;
    if (m.device() != q.device() || m.dim() > 4 || (m.scalar_type() != at::kBool && !float_type(m.scalar_type()))) {
      return "this attention mask";
    }
    for (std::int64_t i = 1; i <= m.dim(); ++i) {
      const c10::SymInt want = i == 1 ? k.sym_size(2) : i == 2 ? q.sym_size(2) : i == 3 ? q.sym_size(1) : q.sym_size(0);
      if (m.sym_size(-i) != 1 && m.sym_size(-i) != want) return "a mask that does not broadcast";
    }
  }
  return {};
}

}  // namespace

std::int64_t fused_sdp_choice(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                              const std::optional<at::Tensor>& mask, double dropout_p, bool /*is_causal*/,
                              std::optional<double> /*scale*/, bool enable_gqa) {
  const bool fused = unsupported(q, k, v, mask, dropout_p, enable_gqa).empty();
  return static_cast<std::int64_t>(fused ? at::SDPBackend::overrideable : at::SDPBackend::math);
}

namespace {

std::string hex(double x) {
  char text[32];
  std::snprintf(text, sizeof text, "%a", x);
  return text;
}

// The kernel cache's key: everything compile_attention reads from the shape.
std::string kernel_key(const char* name, const compiler::AttentionShape& s) {
  const auto strides = [](const std::array<std::int64_t, 3>& x) {
    return std::to_string(x[0]) + "," + std::to_string(x[1]) + "," + std::to_string(x[2]);
  };
  return std::string(name) + "|" + std::to_string(s.batch) + "," + std::to_string(s.q_heads) + "," +
         std::to_string(s.kv_heads) + "," + std::to_string(s.q_len) + "," + std::to_string(s.kv_len) + "," +
         std::to_string(s.head_dim) + "," + std::to_string(s.value_dim) + "|" + std::string(isa::to_string(s.dtype)) +
         "|" + strides(s.q_stride) + ";" + strides(s.k_stride) + ";" + strides(s.v_stride) + "|" + hex(s.scale) +
         (s.causal ? "|causal" : "") +
         (s.paged ? "|pool " + std::to_string(s.pool_slots) + " slots " + std::to_string(s.slots_stride) : "") +
         (s.mask ? "|mask " + std::string(isa::to_string(*s.mask)) + " " + strides(s.mask_stride) : "");
}

using ForwardResult = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, c10::SymInt, c10::SymInt, at::Tensor,
                                 at::Tensor, at::Tensor>;

// The outputs' shapes and layouts, shared by the device kernel and the Meta kernel:
// the output [B, H, L, Ev] stored as [B, L, H, Ev] (so out.transpose(1, 2) is a
// contiguous [B, L, H * Ev] view), the logsumexp [B, H, L] in fp32.
// (Symbolic sizes, so fake tensors with dynamic shapes trace it too.)
ForwardResult forward_outputs(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  at::Tensor out =
      at::empty_symint({q.sym_size(0), q.sym_size(2), q.sym_size(1), v.sym_size(3)}, q.options()).transpose(1, 2);
  at::Tensor lse = at::empty_symint({q.sym_size(0), q.sym_size(1), q.sym_size(2)}, q.options().dtype(at::kFloat));
  const auto none = [&](c10::ScalarType t) { return at::empty({0}, q.options().dtype(t)); };
  return {out, lse, none(at::kInt), none(at::kInt), q.sym_size(2), k.sym_size(2), none(at::kLong), none(at::kLong),
          none(q.scalar_type())};
}

void check_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const std::optional<at::Tensor>& mask,
                   double dropout_p, bool return_debug_mask) {
  const std::string why = unsupported(q, k, v, mask, dropout_p, /*enable_gqa=*/true);
  TORCH_CHECK(why.empty(), kName, ": the device's fused attention does not take ", why, " (query ", q.sizes(), " ",
              q.scalar_type(), ", key ", k.sizes(), ", value ", v.sizes(), "); scaled_dot_product_attention uses ",
              "the math path for such inputs");
  TORCH_CHECK(!return_debug_mask, kName, ": return_debug_mask is not supported on spyre");
}

ForwardResult fused_attention(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                              const std::optional<at::Tensor>& attn_bias, double dropout_p, bool is_causal,
                              bool return_debug_mask, std::optional<double> scale) {
  check_forward(query, key, value, attn_bias, dropout_p, return_debug_mask);
  const c10::DeviceGuard guard(query.device());
  const c10::DeviceIndex device = query.device().index();
  const auto last_contiguous = [](const at::Tensor& t) { return t.stride(3) == 1 ? t : t.contiguous(); };
  const at::Tensor q = last_contiguous(query), k = last_contiguous(key), v = last_contiguous(value);
  ForwardResult result = forward_outputs(q, k, v);
  const at::Tensor& out = std::get<0>(result);
  const at::Tensor& lse = std::get<1>(result);

  compiler::AttentionShape s;
  s.batch = static_cast<std::uint64_t>(q.size(0));
  s.q_heads = static_cast<std::uint64_t>(q.size(1));
  s.kv_heads = static_cast<std::uint64_t>(k.size(1));
  s.q_len = static_cast<std::uint64_t>(q.size(2));
  s.kv_len = static_cast<std::uint64_t>(k.size(2));
  s.head_dim = static_cast<std::uint64_t>(q.size(3));
  s.value_dim = static_cast<std::uint64_t>(v.size(3));
  s.dtype = *device_float_dtype(q.scalar_type());
  s.q_stride = {q.stride(0), q.stride(1), q.stride(2)};
  s.k_stride = {k.stride(0), k.stride(1), k.stride(2)};
  s.v_stride = {v.stride(0), v.stride(1), v.stride(2)};
  s.scale = scale.value_or(1.0 / std::sqrt(static_cast<double>(q.size(3))));
  s.causal = is_causal;
  std::vector<std::uint64_t> args{device_address(q), device_address(k), device_address(v), device_address(out),
                                  device_address(lse)};
  std::uint64_t mask_bytes = 0;
  at::Tensor m;  // kept alive until the launch is queued
  if (attn_bias && attn_bias->defined()) {
    m = *attn_bias;
    mask_bytes = static_cast<std::uint64_t>(m.numel() * m.element_size());
    if (m.scalar_type() == at::kBool) {  // (SDPA converts boolean masks itself; a direct call may not)
      m = at::where(m, at::zeros({}, q.options()), at::full({}, -std::numeric_limits<double>::infinity(), q.options()));
    }
    m = m.expand({q.size(0), q.size(1), q.size(2), k.size(2)});
    if (m.stride(3) != 1 && m.size(3) != 1) m = m.contiguous();
    s.mask = *device_float_dtype(m.scalar_type());
    s.mask_stride = {m.stride(0), m.stride(1), m.stride(2)};
    args.push_back(device_address(m));
  }
  if (is_causal) args.push_back(device_address(device_positions(q.device())));

  const std::string key_text = kernel_key(kName, s);
  const auto bytes = [](const at::Tensor& t) { return static_cast<std::uint64_t>(t.numel() * t.element_size()); };
  const Traffic traffic{.read = bytes(q) + bytes(k) + bytes(v) + mask_bytes, .written = bytes(out) + bytes(lse)};
  run_cached(device, key_text, [&](const compiler::Target& t) { return compiler::compile_attention(s, t, kName); }, args,
             kName, traffic);
  return result;
}

ForwardResult fused_attention_meta(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                                   const std::optional<at::Tensor>& attn_bias, double dropout_p, bool /*is_causal*/,
                                   bool return_debug_mask, std::optional<double> /*scale*/) {
  TORCH_CHECK(dropout_p == 0 && !return_debug_mask, kName, ": dropout and return_debug_mask are not supported on spyre");
  TORCH_CHECK(!attn_bias || !attn_bias->defined() || attn_bias->dim() <= 4, kName, ": the mask has more than 4 dims");
  return forward_outputs(query, key, value);
}

using BackwardResult = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

// [B, Hkv, L, E] -> [B, Hkv * group, L, E], each key/value head repeated for its group.
at::Tensor repeat_heads(const at::Tensor& t, std::int64_t group) {
  if (group == 1) return t;
  return t.unsqueeze(2).expand({t.size(0), t.size(1), group, t.size(2), t.size(3)}).reshape(
      {t.size(0), t.size(1) * group, t.size(2), t.size(3)});
}
// The reverse: the group's gradients summed per key/value head.
at::Tensor sum_heads(const at::Tensor& t, std::int64_t group) {
  if (group == 1) return t;
  return t.view({t.size(0), t.size(1) / group, group, t.size(2), t.size(3)}).sum(2);
}

// P = exp(scale Q K^T + mask - logsumexp); dV = P^T dO; dP = dO V^T;
// dS = P (dP - rowsum(dO * O)); dQ = scale dS K; dK = scale dS^T Q; the mask's
// gradient is dS summed to the mask's shape. Probabilities and dS in fp32; the
// matmuls in the inputs' dtype (fp32 accumulation), as the math path's autograd.
BackwardResult fused_attention_backward(const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k,
                                        const at::Tensor& v, const at::Tensor& attn_bias,
                                        std::array<bool, 4> grad_input_mask, const at::Tensor& out,
                                        const at::Tensor& logsumexp, const at::Tensor& /*cum_seq_q*/,
                                        const at::Tensor& /*cum_seq_k*/, c10::SymInt /*max_q*/, c10::SymInt /*max_k*/,
                                        double dropout_p, bool is_causal, const at::Tensor& /*philox_seed*/,
                                        const at::Tensor& /*philox_offset*/, std::optional<double> scale) {
  TORCH_CHECK(dropout_p == 0, kName, "_backward: dropout is not supported on spyre");
  const c10::DeviceGuard guard(q.device());
  const std::int64_t group = q.size(1) / k.size(1);
  const double sc = scale.value_or(1.0 / std::sqrt(static_cast<double>(q.size(3))));
  const at::Tensor ke = repeat_heads(k, group), ve = repeat_heads(v, group);
  at::Tensor scores = at::matmul(q, ke.transpose(-2, -1)).to(at::kFloat).mul_(sc);
  if (attn_bias.defined()) {
    scores = scores + (attn_bias.scalar_type() == at::kBool
                           ? at::where(attn_bias, at::zeros({}, scores.options()),
                                       at::full({}, -std::numeric_limits<double>::infinity(), scores.options()))
                           : attn_bias.to(at::kFloat));
  }
  if (is_causal) {  // key j hidden from query i when j > i, made on the device
    const auto positions = [&](std::int64_t n) { return at::arange(n, scores.options()); };
    scores = scores.masked_fill(positions(k.size(2)) > positions(q.size(2)).unsqueeze(-1),
                                -std::numeric_limits<double>::infinity());
  }
  // Rows that saw no key have a logsumexp of -inf and probabilities 0.
  const at::Tensor shift = logsumexp.clamp(std::numeric_limits<float>::lowest(), std::nullopt).unsqueeze(-1);
  const at::Tensor p = (scores - shift).exp();
  const at::Tensor p_in = p.to(q.scalar_type());
  at::Tensor grad_v = sum_heads(at::matmul(p_in.transpose(-2, -1), grad_out), group);
  const at::Tensor dp = at::matmul(grad_out, ve.transpose(-2, -1)).to(at::kFloat);
  const at::Tensor delta = (grad_out.to(at::kFloat) * out.to(at::kFloat)).sum(-1, /*keepdim=*/true);
  const at::Tensor ds = p * (dp - delta);
  const at::Tensor ds_in = ds.to(q.scalar_type());
  at::Tensor grad_q = at::matmul(ds_in, ke).mul_(sc);
  at::Tensor grad_k = sum_heads(at::matmul(ds_in.transpose(-2, -1), q), group).mul_(sc);
  at::Tensor grad_bias;
  if (grad_input_mask[3] && attn_bias.defined() && attn_bias.scalar_type() != at::kBool) {
    grad_bias = ds.sum_to_size(attn_bias.sizes()).to(attn_bias.scalar_type());
  }
  return {grad_input_mask[0] ? grad_q : at::Tensor(), grad_input_mask[1] ? grad_k : at::Tensor(),
          grad_input_mask[2] ? grad_v : at::Tensor(), grad_bias};
}

BackwardResult fused_attention_backward_meta(const at::Tensor& /*grad_out*/, const at::Tensor& q, const at::Tensor& k,
                                             const at::Tensor& v, const at::Tensor& attn_bias,
                                             std::array<bool, 4> grad_input_mask, const at::Tensor& /*out*/,
                                             const at::Tensor& /*logsumexp*/, const at::Tensor&, const at::Tensor&,
                                             c10::SymInt, c10::SymInt, double, bool, const at::Tensor&,
                                             const at::Tensor&, std::optional<double>) {
  const auto like = [](bool want, const at::Tensor& t) { return want && t.defined() ? at::empty_like(t) : at::Tensor(); };
  return {like(grad_input_mask[0], q), like(grad_input_mask[1], k), like(grad_input_mask[2], v),
          like(grad_input_mask[3] && attn_bias.defined() && attn_bias.scalar_type() != at::kBool, attn_bias)};
}


// spyre::paged_attention: attention over a paged KV cache, as serving systems keep it.
// The caches are pools of token rows ([slots, kv_heads, dim], or [pages, page_size,
// kv_heads, dim] with the pages laid end to end); `slots` [batch, kv_len] (int32) names
// each sequence's rows in order, so key t of sequence b is pool row slots[b][t]. One
// device kernel (the fused attention's, with each key block gathered by its slots).
// Not causal: a decode step's queries see all kv_len keys; a mask (boolean, true =
// attend, or additive, broadcasting to [batch, q_heads, q_len, kv_len]) takes
// padding and anything else.
constexpr const char* kPagedName = "spyre::paged_attention";

at::Tensor pool_rows(const at::Tensor& pool, const char* what) {
  TORCH_CHECK(pool.dim() == 3 || pool.dim() == 4, kPagedName, ": ", what,
              " must be [slots, kv_heads, dim] or [pages, page_size, kv_heads, dim], found ", pool.sizes());
  return pool.dim() == 4 ? pool.flatten(0, 1) : pool;
}

// Returns the pools as rows; checks what the kernel and the reference both need.
std::pair<at::Tensor, at::Tensor> check_paged(const at::Tensor& q, const at::Tensor& key_cache,
                                              const at::Tensor& value_cache, const at::Tensor& slots,
                                              const std::optional<at::Tensor>& mask) {
  const at::Tensor k = pool_rows(key_cache, "key_cache"), v = pool_rows(value_cache, "value_cache");
  TORCH_CHECK(q.dim() == 4, kPagedName, ": query must be [batch, q_heads, q_len, dim], found ", q.sizes());
  TORCH_CHECK(float_type(q.scalar_type()) && k.scalar_type() == q.scalar_type() && v.scalar_type() == q.scalar_type(),
              kPagedName, ": query, key_cache and value_cache must have one dtype of float32, float16 and bfloat16, found ",
              q.scalar_type(), ", ", k.scalar_type(), " and ", v.scalar_type());
  TORCH_CHECK(slots.dim() == 2 && slots.scalar_type() == at::kInt && slots.size(0) == q.size(0), kPagedName,
              ": slots must be int32 [batch, kv_len] with the query's batch ", q.size(0), ", found ", slots.scalar_type(),
              " ", slots.sizes());
  TORCH_CHECK(k.device() == q.device() && v.device() == q.device() && slots.device() == q.device(), kPagedName,
              ": query, caches and slots must be on one device, found ", q.device(), ", ", k.device(), ", ", v.device(),
              " and ", slots.device());
  TORCH_CHECK(v.size(0) == k.size(0) && v.size(1) == k.size(1) && k.size(2) == q.size(3), kPagedName,
              ": key_cache rows [slots, kv_heads, dim] ", k.sizes(), " and value_cache rows ", v.sizes(),
              " must match each other and the query's dim ", q.size(3));
  TORCH_CHECK(k.size(1) > 0 && q.size(1) % k.size(1) == 0, kPagedName, ": ", q.size(1),
              " query heads do not group over ", k.size(1), " key/value heads");
  TORCH_CHECK(q.size(3) <= kMaxHeadDim && v.size(2) <= kMaxHeadDim, kPagedName, ": head dims over ", kMaxHeadDim);
  TORCH_CHECK(slots.size(1) > 0 && k.size(0) > 0, kPagedName, ": no keys (kv_len ", slots.size(1), ", pool rows ",
              k.size(0), ")");
  if (mask && mask->defined()) {
    const at::Tensor& m = *mask;
    TORCH_CHECK(m.device() == q.device() && m.dim() <= 4 && (m.scalar_type() == at::kBool || float_type(m.scalar_type())),
                kPagedName, ": the mask must be boolean or float on the query's device with at most 4 dims, found ",
                m.scalar_type(), " ", m.sizes(), " on ", m.device());
    for (std::int64_t i = 1; i <= m.dim(); ++i) {
      const std::int64_t want = i == 1 ? slots.size(1) : i == 2 ? q.size(2) : i == 3 ? q.size(1) : q.size(0);
      TORCH_CHECK(m.size(-i) == 1 || m.size(-i) == want, kPagedName, ": the mask ", m.sizes(),
                  " does not broadcast to [batch, q_heads, q_len, kv_len] = [", q.size(0), ", ", q.size(1), ", ",
                  q.size(2), ", ", slots.size(1), "]");
    }
  }
  return {k, v};
}

at::Tensor additive_mask(const at::Tensor& m, const at::Tensor& q) {
  if (m.scalar_type() != at::kBool) return m;
  return at::where(m, at::zeros({}, q.options()), at::full({}, -std::numeric_limits<double>::infinity(), q.options()));
}

at::Tensor paged_attention(const at::Tensor& query, const at::Tensor& key_cache, const at::Tensor& value_cache,
                           const at::Tensor& slots_in, const std::optional<at::Tensor>& attn_mask,
                           std::optional<double> scale) {
  auto [key, value] = check_paged(query, key_cache, value_cache, slots_in, attn_mask);
  const c10::DeviceGuard guard(query.device());
  const c10::DeviceIndex device = query.device().index();
  const at::Tensor q = query.stride(3) == 1 ? query : query.contiguous();
  const at::Tensor k = key.stride(2) == 1 ? key : key.contiguous();
  const at::Tensor v = value.stride(2) == 1 ? value : value.contiguous();
  // (A slot table narrowed to the keys so far keeps its rows in place.)
  const at::Tensor slots = slots_in.stride(1) == 1 && slots_in.stride(0) >= 0 ? slots_in : slots_in.contiguous();
  const std::int64_t B = q.size(0), H = q.size(1), L = q.size(2), T = slots.size(1);
  const at::Tensor out = at::empty({B, L, H, v.size(2)}, q.options()).transpose(1, 2);
  const at::Tensor lse = at::empty({B, H, L}, q.options().dtype(at::kFloat));

  compiler::AttentionShape s;
  s.batch = static_cast<std::uint64_t>(B);
  s.q_heads = static_cast<std::uint64_t>(H);
  s.kv_heads = static_cast<std::uint64_t>(k.size(1));
  s.q_len = static_cast<std::uint64_t>(L);
  s.kv_len = static_cast<std::uint64_t>(T);
  s.head_dim = static_cast<std::uint64_t>(q.size(3));
  s.value_dim = static_cast<std::uint64_t>(v.size(2));
  s.dtype = *device_float_dtype(q.scalar_type());
  s.q_stride = {q.stride(0), q.stride(1), q.stride(2)};
  s.k_stride = {0, k.stride(1), k.stride(0)};
  s.v_stride = {0, v.stride(1), v.stride(0)};
  s.scale = scale.value_or(1.0 / std::sqrt(static_cast<double>(q.size(3))));
  s.paged = true;
  s.pool_slots = static_cast<std::uint64_t>(k.size(0));
  s.slots_stride = static_cast<std::uint64_t>(slots.size(0) > 1 ? slots.stride(0) : T);
  std::vector<std::uint64_t> args{device_address(q), device_address(k), device_address(v), device_address(out),
                                  device_address(lse)};
  std::uint64_t mask_bytes = 0;
  at::Tensor m;
  if (attn_mask && attn_mask->defined()) {
    mask_bytes = static_cast<std::uint64_t>(attn_mask->numel() * attn_mask->element_size());
    m = additive_mask(*attn_mask, q).expand({B, H, L, T});
    if (m.stride(3) != 1 && m.size(3) != 1) m = m.contiguous();
    s.mask = *device_float_dtype(m.scalar_type());
    s.mask_stride = {m.stride(0), m.stride(1), m.stride(2)};
    args.push_back(device_address(m));
  }
  args.push_back(device_address(slots));
  const std::string key_text = kernel_key(kPagedName, s);
  const auto bytes = [](const at::Tensor& t) { return static_cast<std::uint64_t>(t.numel() * t.element_size()); };
  // The least traffic: the query, each sequence's key and value rows once, the slots
  // and the mask read; the output and logsumexp written.
  const std::uint64_t rows = static_cast<std::uint64_t>(B * T) * static_cast<std::uint64_t>(k.size(1)) *
                             static_cast<std::uint64_t>((k.size(2) + v.size(2)) * k.element_size());
  const Traffic traffic{.read = bytes(q) + rows + static_cast<std::uint64_t>(B * T) * 4 + mask_bytes, .written = bytes(out) + bytes(lse)};
  run_cached(device, key_text, [&](const compiler::Target& t) { return compiler::compile_attention(s, t, kPagedName); },
             args, kPagedName, traffic);
  return out;
}

at::Tensor paged_attention_meta(const at::Tensor& q, const at::Tensor& key_cache, const at::Tensor& value_cache,
                                const at::Tensor& /*slots*/, const std::optional<at::Tensor>& /*attn_mask*/,
                                std::optional<double> /*scale*/) {
  const at::Tensor v = value_cache.dim() == 4 ? value_cache.flatten(0, 1) : value_cache;
  (void)key_cache;
  return at::empty_symint({q.sym_size(0), q.sym_size(2), q.sym_size(1), v.sym_size(2)}, q.options()).transpose(1, 2);
}

// The reference (CPU): the rows gathered by their slots, then PyTorch's attention.
at::Tensor paged_attention_reference(const at::Tensor& q, const at::Tensor& key_cache, const at::Tensor& value_cache,
                                     const at::Tensor& slots, const std::optional<at::Tensor>& attn_mask,
                                     std::optional<double> scale) {
  const auto [k, v] = check_paged(q, key_cache, value_cache, slots, attn_mask);
  const at::Tensor index = slots.flatten().to(at::kLong);
  const std::int64_t B = slots.size(0), T = slots.size(1);
  const at::Tensor keys = k.index_select(0, index).view({B, T, k.size(1), k.size(2)}).transpose(1, 2);
  const at::Tensor values = v.index_select(0, index).view({B, T, v.size(1), v.size(2)}).transpose(1, 2);
  std::optional<at::Tensor> mask;
  if (attn_mask && attn_mask->defined()) mask = *attn_mask;
  return at::scaled_dot_product_attention(q, keys, values, mask, 0.0, false, scale, q.size(1) != k.size(1));
}

}  // namespace

}  // namespace spyre::backend

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &spyre::backend::fused_sdp_choice)
}  // namespace at::native

namespace spyre::backend {

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_scaled_dot_product_fused_attention_overrideable", fused_attention);
  m.impl("_scaled_dot_product_fused_attention_overrideable_backward", fused_attention_backward);
}

TORCH_LIBRARY_IMPL(aten, Meta, m) {
  m.impl("_scaled_dot_product_fused_attention_overrideable", fused_attention_meta);
  m.impl("_scaled_dot_product_fused_attention_overrideable_backward", fused_attention_backward_meta);
}

TORCH_LIBRARY_FRAGMENT(spyre, m) {
  m.def("paged_attention(Tensor query, Tensor key_cache, Tensor value_cache, Tensor slots, Tensor? attn_mask=None, "
        "float? scale=None) -> Tensor");
}

TORCH_LIBRARY_IMPL(spyre, PrivateUse1, m) { m.impl("paged_attention", paged_attention); }
TORCH_LIBRARY_IMPL(spyre, Meta, m) { m.impl("paged_attention", paged_attention_meta); }
TORCH_LIBRARY_IMPL(spyre, CPU, m) { m.impl("paged_attention", paged_attention_reference); }
// Not differentiable (an inference kernel).
TORCH_LIBRARY_IMPL(spyre, Autograd, m) { m.impl("paged_attention", torch::autograd::autogradNotImplementedFallback()); }

}  // namespace spyre::backend
