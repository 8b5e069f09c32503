// Device kernels for mm, bmm, addmm, baddbmm, addmv (functional, out=, in-place) in fp32,
// fp16 and bf16, and _int_mm (int8 x int8 -> int32 on the arrays at their int8 depth); matmul and linear decompose into these. Operands are read in place
// when each matrix is row- or column-major (transposed views included) with any row
// pitch and any batch stride (0 for broadcast batches); other layouts get a device
// copy first. Bias terms
// (beta * self + alpha * product) run as pointwise device kernels, except a row bias
// (nn.Linear's), which the matmul kernel adds before rounding. Other dtypes run on
// the CPU, counted. The spyre:: fused matmul ops are fused_matmul_ops.cpp; what both
// files share, aten/matmul_product.h.
#include <ATen/native/Resize.h>
#include <ATen/ops/layer_norm.h>
#include <ATen/ops/rms_norm.h>
#include <torch/library.h>
#include <c10/core/DeviceGuard.h>

#include "aten/cpu_fallback.h"
#include "aten/kernel_cache.h"
#include "aten/op_table.h"
#include "aten/matmul_product.h"
#include "aten/out.h"
#include "compiler/matmul.h"
#include "runtime/launch.h"

namespace spyre::backend {
namespace matmul {

Layout layout_of(const at::Tensor& t) {
  const std::int64_t rows = t.size(-2), cols = t.size(-1);
  if (cols == 1 || t.stride(-1) == 1) {
    const std::int64_t ld = rows > 1 ? t.stride(-2) : cols;
    if (ld >= cols) return {true, false, ld};
  }
  if (rows == 1 || t.stride(-2) == 1) {
    const std::int64_t ld = cols > 1 ? t.stride(-1) : rows;
    if (ld >= rows) return {true, true, ld};
  }
  return {};
}

// The norm prologue `kind` ("" none, "layer_norm", "rms_norm") of an op's [m, k] float
// input `a`, checked: weight and bias are k float values on a's device (RMSNorm: no
// bias, a weight of a's dtype, as its result's dtype is a's); eps as the norm takes it
// (RMSNorm's already rounded to a's dtype, as aten::rms_norm does).
std::optional<NormPrologue> norm_prologue(const char* op, c10::string_view kind, const at::Tensor& a,
                                          const std::optional<at::Tensor>& weight,
                                          const std::optional<at::Tensor>& bias, double eps) {
  if (kind.empty()) {
    TORCH_CHECK(!(weight && weight->defined()) && !(bias && bias->defined()), op,
                ": a norm weight or bias without a norm (norm=\"layer_norm\" or \"rms_norm\")");
    return std::nullopt;
  }
  TORCH_CHECK(kind == "layer_norm" || kind == "rms_norm", op, ": unknown norm '", kind,
              "' (expected layer_norm, rms_norm or none)");
  TORCH_CHECK(eps >= 0, op, ": a norm's eps must be >= 0, got ", eps);
  NormPrologue p;
  p.norm.rms = kind == "rms_norm";
  p.norm.eps = eps;
  const std::int64_t k = a.size(-1);
  for (const auto& [t, what] : {std::pair{&weight, "weight"}, std::pair{&bias, "bias"}}) {
    if (!t->has_value() || !(*t)->defined()) continue;
    const at::Tensor& v = **t;
    TORCH_CHECK(v.dim() == 1 && v.size(0) == k && device_float_dtype(v.scalar_type()) && v.device() == a.device(), op,
                ": the norm ", what, " must be ", k, " float values on ", a.device(), ", got shape ", v.sizes(), " ",
                v.scalar_type(), " on ", v.device());
  }
  if (weight && weight->defined()) {
    p.weight = weight->contiguous();
    p.norm.weight = *device_float_dtype(p.weight.scalar_type());
  }
  if (bias && bias->defined()) {
    TORCH_CHECK(!p.norm.rms, op, ": an RMSNorm takes no bias");
    p.bias = bias->contiguous();
    p.norm.bias = *device_float_dtype(p.bias.scalar_type());
  }
  TORCH_CHECK(!p.norm.rms || !p.weight.defined() || p.weight.scalar_type() == a.scalar_type(), op,
              ": an RMSNorm prologue's weight must be of the input's dtype (", a.scalar_type(), "), got ",
              p.weight.scalar_type());
  return p;
}

std::optional<isa::DType> fp8_dtype(at::ScalarType t) {
  if (t == at::kFloat8_e4m3fn) return isa::DType::fp8_e4m3;
  if (t == at::kFloat8_e5m2) return isa::DType::fp8_e5m2;
  return std::nullopt;
}

// a @ b for [m, k] @ [k, n] or batched [B, m, k] @ [B, k, n], on the device when it
// can (else on the CPU, counted), as a new contiguous tensor. `int8_to_int32`:
// _int_mm's int8 operands, accumulated and returned in int32.
at::Tensor product(const char* name, const at::Tensor& a_in, const at::Tensor& b_in, Epilogue epilogue,
                   bool int8_to_int32) {
  const bool batched = a_in.dim() == 3;
  TORCH_CHECK(a_in.dim() == b_in.dim() && (a_in.dim() == 2 || batched), name, ": expected ",
              batched ? "3-D" : "2-D", " tensors, got ", a_in.dim(), "-D and ", b_in.dim(), "-D");
  TORCH_CHECK(a_in.size(-1) == b_in.size(-2), name, ": mat1 and mat2 shapes cannot be multiplied (",
              a_in.size(-2), "x", a_in.size(-1), " and ", b_in.size(-2), "x", b_in.size(-1), ")");
  TORCH_CHECK(!batched || a_in.size(0) == b_in.size(0), name, ": batch sizes differ: ", a_in.size(0), " and ",
              b_in.size(0));
  TORCH_CHECK(a_in.scalar_type() == b_in.scalar_type(), name, ": expected mat1 and mat2 to have the same dtype, but got: ",
              a_in.scalar_type(), " != ", b_in.scalar_type());
  const std::int64_t m = a_in.size(-2), k = a_in.size(-1), n = b_in.size(-1);
  const std::int64_t batch = batched ? a_in.size(0) : 1;
  const auto dtype = int8_to_int32       ? std::optional<isa::DType>(isa::DType::int8)
                     : epilogue.scale != nullptr ? fp8_dtype(a_in.scalar_type())
                                                 : device_float_dtype(a_in.scalar_type());
  // Operands on different devices are an error, as on CUDA (a forgotten .to() must not
  // run quietly on the CPU).
  TORCH_CHECK(a_in.device() == b_in.device(),
              "Expected all tensors to be on the same device, but found at least two devices, ", a_in.device(), " and ",
              b_in.device(), "! (", name, ")");
  TORCH_CHECK(epilogue.scale == nullptr || dtype, name, ": expected fp8 operands");
  if (!dtype || !is_spyre(a_in) || b_in.device() != a_in.device()) {
    TORCH_INTERNAL_ASSERT(epilogue.bias == nullptr && !epilogue.activation && epilogue.residual == nullptr,
                          "spyre: an epilogue needs the device path");
    count_fallback(name);
    const c10::Device device = is_spyre(a_in) ? a_in.device() : b_in.device();
    if (int8_to_int32) return at::_int_mm(a_in.cpu(), b_in.cpu()).to(device);
    return (batched ? at::bmm(a_in.cpu(), b_in.cpu()) : at::mm(a_in.cpu(), b_in.cpu())).to(device);
  }
  at::Tensor out = at::empty(batched ? std::vector<std::int64_t>{batch, m, n} : std::vector<std::int64_t>{m, n},
                             a_in.options().dtype(int8_to_int32 ? at::kInt : epilogue.out_dtype.value_or(a_in.scalar_type())));
  if (out.numel() == 0) return out;
  if (k == 0) {  // an empty sum: zeros, then the epilogue on them
    out.zero_();
    if (epilogue.bias != nullptr) out.add_(*epilogue.bias);
    TORCH_INTERNAL_ASSERT(!epilogue.activation, "spyre: k == 0 with an activation epilogue");
    if (epilogue.residual != nullptr) {
      epilogue.residual_op == isa::BinaryOp::mul ? out.mul_(*epilogue.residual) : out.add_(*epilogue.residual);
    }
    return out;
  }
  at::Tensor a = a_in, b = b_in;
  Layout la = layout_of(a), lb = layout_of(b);
  if (!la.ok || (epilogue.norm != nullptr && la.transposed)) a = a.contiguous(), la = layout_of(a);
  if (!lb.ok) b = b.contiguous(), lb = layout_of(b);
  compiler::MatmulShape s;
  s.m = static_cast<std::uint64_t>(m);
  s.n = static_cast<std::uint64_t>(n);
  s.k = static_cast<std::uint64_t>(k);
  s.dtype = *dtype;
  s.a_transposed = la.transposed;
  s.b_transposed = lb.transposed;
  s.lda = static_cast<std::uint64_t>(la.ld);
  s.ldb = static_cast<std::uint64_t>(lb.ld);
  s.batch = static_cast<std::uint64_t>(batch);
  s.a_batch_stride = batched && batch > 1 ? static_cast<std::uint64_t>(a.stride(0)) : 0;
  s.b_batch_stride = batched && batch > 1 ? static_cast<std::uint64_t>(b.stride(0)) : 0;
  at::Tensor bias;
  if (epilogue.bias != nullptr) {
    bias = epilogue.bias->reshape({-1}).contiguous();
    s.bias = *device_float_dtype(bias.scalar_type());
  }
  s.activation = epilogue.activation;
  if (int8_to_int32) s.out = isa::DType::int32;
  if (epilogue.scale != nullptr) {
    s.scale = true;
    s.out = *device_float_dtype(out.scalar_type());
  }
  at::Tensor residual;
  if (epilogue.residual != nullptr) {
    TORCH_INTERNAL_ASSERT(!batched && epilogue.residual->dim() == 2 && epilogue.residual->size(0) == m &&
                              epilogue.residual->size(1) == n && epilogue.residual->scalar_type() == out.scalar_type(),
                          "spyre: a residual epilogue needs an [m, n] matrix of the result's dtype");
    residual = *epilogue.residual;
    if (!(residual.stride(1) == 1 || n == 1) || (m > 1 && residual.stride(0) < n)) residual = residual.contiguous();
    s.residual = true;
    s.residual_op = epilogue.residual_op;
    s.ldr = static_cast<std::uint64_t>(m > 1 ? residual.stride(0) : n);
  }
  if (epilogue.norm != nullptr) {
    TORCH_INTERNAL_ASSERT(!batched, "spyre: a norm prologue needs an unbatched product");
    s.norm = epilogue.norm->norm;
  }
  const c10::DeviceGuard guard(a.device());
  const c10::DeviceIndex device = a.device().index();
  const std::string key = std::string(name) + "|" + std::string(isa::to_string(s.dtype)) + "|" + std::to_string(batch) +
                          "x" + std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) + "|" +
                          (s.a_transposed ? "at" : "a") + std::to_string(s.lda) + (s.b_transposed ? "bt" : "b") +
                          std::to_string(s.ldb) + "|" +
                          std::to_string(s.a_batch_stride) + "," + std::to_string(s.b_batch_stride) +
                          (s.bias ? "|+" + std::string(isa::to_string(*s.bias)) : "") +
                          (s.activation ? "|" + std::string(isa::to_string(*s.activation)) : "") +
                          (s.out ? ">" + std::string(isa::to_string(*s.out)) : "") + (s.scale ? "|scaled" : "") +
                          (s.residual ? "|" + std::string(isa::to_string(s.residual_op)) + "r" + std::to_string(s.ldr)
                                      : "") +
                          (epilogue.norm != nullptr ? epilogue.norm->key() : "");
  std::vector<std::uint64_t> args{device_address(a), device_address(b), device_address(out)};
  if (bias.defined()) args.push_back(device_address(bias));
  if (epilogue.scale != nullptr) args.push_back(device_address(*epilogue.scale));
  if (residual.defined()) args.push_back(device_address(residual));
  if (epilogue.norm != nullptr) epilogue.norm->add_args(args);
  // Each operand once (a batch-broadcast operand once for all batches), the bias row once.
  const std::uint64_t in_size = isa::dtype_size(s.dtype);
  const Traffic traffic{
      .read = (s.m * s.k * (s.a_batch_stride != 0 ? s.batch : 1) + s.k * s.n * (s.b_batch_stride != 0 ? s.batch : 1)) *
                  in_size +
              (bias.defined() ? static_cast<std::uint64_t>(bias.numel() * bias.element_size()) : 0) +
              (residual.defined() ? static_cast<std::uint64_t>(m * n * residual.element_size()) : 0) +
              (epilogue.norm != nullptr ? epilogue.norm->bytes() : 0),
      .written = static_cast<std::uint64_t>(out.numel() * out.element_size())};
  const auto compile = [&](const compiler::Target& t) { return compiler::compile_matmul(s, t, name); };
  if (epilogue.norm == nullptr) {
    run_cached(device, key, compile, args, name, traffic);
  } else if (!run_cached_if_fits(device, key, compile, args, name, traffic)) {
    // Rows too long for the norm's buffers beside the tiles: the norm by its own kernel.
    const at::Tensor normed = epilogue.norm->apply(a_in);
    epilogue.norm = nullptr;
    return product(name, normed, b_in, epilogue, int8_to_int32);
  }
  return out;
}

// Whether addmm's `self` can be the kernel's bias epilogue: beta and alpha 1, a row of
// n values of the product's dtype on its device (nn.Linear's bias).
bool fusable_bias(const at::Tensor& self, const at::Tensor& a, const at::Tensor& b, const c10::Scalar& beta,
                  const c10::Scalar& alpha) {
  if (!beta.equal(1) || !alpha.equal(1) || !self.defined() || a.dim() != 2 || b.dim() != 2) return false;
  const std::int64_t n = b.size(1);
  const bool row = (self.dim() == 1 && self.size(0) == n) || (self.dim() == 2 && self.size(0) == 1 && self.size(1) == n);
  return row && n > 0 && self.device() == a.device() && is_spyre(a) && b.device() == a.device() &&
         self.scalar_type() == a.scalar_type() && a.scalar_type() == b.scalar_type() &&
         device_float_dtype(a.scalar_type()).has_value();
}

}  // namespace matmul

namespace {

using namespace matmul;

// beta * self + alpha * product, with PyTorch's rule that beta == 0 ignores self.
at::Tensor with_bias(at::Tensor prod, const at::Tensor& self, c10::Scalar beta, c10::Scalar alpha) {
  if (at::isIntegralType(prod.scalar_type(), /*includeBool=*/true)) {
    // As the CPU: integer products take alpha and beta truncated to integers.
    alpha = alpha.toLong();
    beta = beta.toLong();
  }
  if (!alpha.equal(1)) prod.mul_(alpha);
  if (beta.equal(0)) return prod;
  return beta.equal(1) ? prod.add_(self) : prod.add_(self, beta);
}

at::Tensor mm(const at::Tensor& a, const at::Tensor& b) { return product("aten::mm", a, b); }
at::Tensor& mm_out(const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {
  deliver(product("aten::mm.out", a, b), out, OutDtype::exact);
  return out;
}
// torch._int_mm: int8 [m, k] x int8 [k, n] -> int32 [m, n], exact (int32 accumulation).
at::Tensor int_mm(const at::Tensor& a, const at::Tensor& b) {
  TORCH_CHECK(a.dim() == 2 && b.dim() == 2, "_int_mm: expected 2-D tensors, got ", a.dim(), "-D and ", b.dim(), "-D");
  TORCH_CHECK(a.scalar_type() == at::kChar && b.scalar_type() == at::kChar,
              "_int_mm: expected int8 (torch.int8) operands, got ", a.scalar_type(), " and ", b.scalar_type());
  return product("aten::_int_mm", a, b, {}, /*int8_to_int32=*/true);
}
at::Tensor& int_mm_out(const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {
  TORCH_CHECK(out.scalar_type() == at::kInt, "_int_mm: expected an int32 out tensor, got ", out.scalar_type());
  deliver(int_mm(a, b), out, OutDtype::exact);
  return out;
}
// torch._scaled_mm: fp8 (e4m3 or e5m2, both the same) [m, k] x [k, n] on the arrays at
// the fp8 depth, fp32 accumulation, times scale_a x scale_b (per-tensor fp32 scalars),
// plus an optional bias row, rounded once to out_dtype (fp32, fp16 or bf16). PyTorch
// 2.6 has this op for CUDA only; here it runs on the device or not at all.
at::Tensor scaled_mm(const at::Tensor& a, const at::Tensor& b, const at::Tensor& scale_a, const at::Tensor& scale_b,
                     const std::optional<at::Tensor>& bias, const std::optional<at::Tensor>& scale_result,
                     std::optional<at::ScalarType> out_dtype, bool use_fast_accum) {
  (void)use_fast_accum;  // one accumulation: fp32
  TORCH_CHECK(a.dim() == 2 && b.dim() == 2, "_scaled_mm: expected 2-D tensors, got ", a.dim(), "-D and ", b.dim(), "-D");
  TORCH_CHECK(fp8_dtype(a.scalar_type()) && a.scalar_type() == b.scalar_type(),
              "_scaled_mm: expected two float8_e4m3fn or two float8_e5m2 operands, got ", a.scalar_type(), " and ",
              b.scalar_type());
  TORCH_CHECK(scale_a.numel() == 1 && scale_b.numel() == 1 && scale_a.scalar_type() == at::kFloat &&
                  scale_b.scalar_type() == at::kFloat,
              "_scaled_mm: spyre supports per-tensor scales (one float32 value each), got ", scale_a.sizes(), " ",
              scale_a.scalar_type(), " and ", scale_b.sizes(), " ", scale_b.scalar_type());
  const at::ScalarType out_t = out_dtype.value_or(a.scalar_type());
  TORCH_CHECK(out_t == at::kFloat || out_t == at::kHalf || out_t == at::kBFloat16,
              "_scaled_mm: spyre produces float32, float16 or bfloat16 results (pass out_dtype=), got ", out_t);
  (void)scale_result;  // (it scales fp8 results only)
  const c10::DeviceGuard guard(a.device());
  const at::Tensor scale = at::mul(scale_a.to(a.device()).reshape({}), scale_b.to(a.device()).reshape({}));
  Epilogue e;
  e.scale = &scale;
  e.out_dtype = out_t;
  at::Tensor bias_row;
  if (bias.has_value() && bias->defined()) {
    TORCH_CHECK(bias->numel() == b.size(1), "_scaled_mm: expected a bias of ", b.size(1), " values, got ", bias->sizes());
    TORCH_CHECK(device_float_dtype(bias->scalar_type()), "_scaled_mm: expected a float bias, got ", bias->scalar_type());
    bias_row = bias->to(a.device());
    e.bias = &bias_row;
  }
  return product("aten::_scaled_mm", a, b, e);
}
at::Tensor& scaled_mm_out(const at::Tensor& a, const at::Tensor& b, const at::Tensor& scale_a, const at::Tensor& scale_b,
                          const std::optional<at::Tensor>& bias, const std::optional<at::Tensor>& scale_result,
                          std::optional<at::ScalarType> out_dtype, bool use_fast_accum, at::Tensor& out) {
  deliver(scaled_mm(a, b, scale_a, scale_b, bias, scale_result, out_dtype.value_or(out.scalar_type()), use_fast_accum),
          out, OutDtype::exact);
  return out;
}
at::Tensor bmm(const at::Tensor& a, const at::Tensor& b) { return product("aten::bmm", a, b); }
at::Tensor& bmm_out(const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {
  deliver(product("aten::bmm.out", a, b), out, OutDtype::exact);
  return out;
}

// addmm with a row bias (nn.Linear's) adds it in the kernel's epilogue: one pass.
at::Tensor addmm(const at::Tensor& self, const at::Tensor& a, const at::Tensor& b, const c10::Scalar& beta,
                 const c10::Scalar& alpha) {
  if (fusable_bias(self, a, b, beta, alpha)) return product("aten::addmm", a, b, {.bias = &self});
  return with_bias(product("aten::addmm", a, b), self, beta, alpha);
}
at::Tensor& addmm_out(const at::Tensor& self, const at::Tensor& a, const at::Tensor& b, const c10::Scalar& beta,
                      const c10::Scalar& alpha, at::Tensor& out) {
  if (fusable_bias(self, a, b, beta, alpha)) {
    deliver(product("aten::addmm.out", a, b, {.bias = &self}), out, OutDtype::exact);
  } else {
    deliver(with_bias(product("aten::addmm.out", a, b), self, beta, alpha), out, OutDtype::exact);
  }
  return out;
}
at::Tensor& addmm_(at::Tensor& self, const at::Tensor& a, const at::Tensor& b, const c10::Scalar& beta,
                   const c10::Scalar& alpha) {
  self.copy_(with_bias(product("aten::addmm_", a, b), self, beta, alpha));
  return self;
}
at::Tensor baddbmm(const at::Tensor& self, const at::Tensor& a, const at::Tensor& b, const c10::Scalar& beta,
                   const c10::Scalar& alpha) {
  return with_bias(product("aten::baddbmm", a, b), self, beta, alpha);
}
at::Tensor& baddbmm_out(const at::Tensor& self, const at::Tensor& a, const at::Tensor& b, const c10::Scalar& beta,
                        const c10::Scalar& alpha, at::Tensor& out) {
  deliver(with_bias(product("aten::baddbmm.out", a, b), self, beta, alpha), out, OutDtype::exact);
  return out;
}
at::Tensor& baddbmm_(at::Tensor& self, const at::Tensor& a, const at::Tensor& b, const c10::Scalar& beta,
                     const c10::Scalar& alpha) {
  self.copy_(with_bias(product("aten::baddbmm_", a, b), self, beta, alpha));
  return self;
}

// Matrix-vector products (mv decomposes into addmv): a matmul with n = 1.
at::Tensor addmv_fn(const at::Tensor& self, const at::Tensor& mat, const at::Tensor& vec, const c10::Scalar& beta,
                 const c10::Scalar& alpha) {
  TORCH_CHECK(mat.dim() == 2 && vec.dim() == 1, "vector + matrix @ vector expected, got ", self.dim(), ", ", mat.dim(),
              ", ", vec.dim());
  return with_bias(product("aten::addmv", mat, vec.unsqueeze(1)).squeeze(1), self, beta, alpha);
}
at::Tensor& addmv_out(const at::Tensor& self, const at::Tensor& mat, const at::Tensor& vec, const c10::Scalar& beta,
                      const c10::Scalar& alpha, at::Tensor& out) {
  deliver(addmv_fn(self, mat, vec, beta, alpha), out, OutDtype::exact);
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("addmv", addmv_fn);
  m.impl("addmv.out", addmv_out);
  m.impl("mm", mm);
  m.impl("_int_mm", int_mm);
  m.impl("_int_mm.out", int_mm_out);
  m.impl("_scaled_mm", scaled_mm);
  m.impl("_scaled_mm.out", scaled_mm_out);
  m.impl("mm.out", mm_out);
  m.impl("bmm", bmm);
  m.impl("bmm.out", bmm_out);
  m.impl("addmm", addmm);
  m.impl("addmm.out", addmm_out);
  m.impl("addmm_", addmm_);
  m.impl("baddbmm", baddbmm);
  m.impl("baddbmm.out", baddbmm_out);
  m.impl("baddbmm_", baddbmm_);
}

}  // namespace spyre::backend
