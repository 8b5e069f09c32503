// Device kernels for mm, bmm, addmm, baddbmm, addmv (functional, out=, in-place) in fp32,
// fp16 and bf16, and _int_mm (int8 x int8 -> int32 on the arrays at their int8 depth); matmul and linear decompose into these. Operands are read in place
// when each matrix is row- or column-major (transposed views included) with any row
// pitch and any batch stride (0 for broadcast batches); other layouts get a device
// copy first. Bias terms
// (beta * self + alpha * product) run as pointwise device kernels, except a row bias
// (nn.Linear's), which the matmul kernel adds before rounding. Other dtypes run on
// the CPU, counted.
#include <ATen/native/Resize.h>
#include <ATen/ops/layer_norm.h>
#include <ATen/ops/rms_norm.h>
#include <torch/csrc/autograd/autograd_not_implemented_fallback.h>
#include <torch/library.h>
#include <c10/core/DeviceGuard.h>

#include "aten/cpu_fallback.h"
#include "aten/kernel_cache.h"
#include "aten/op_table.h"
#include "aten/out.h"
#include "compiler/matmul.h"
#include "compiler/mlp.h"
#include "runtime/launch.h"

namespace spyre::backend {
namespace {

bool is_spyre(const at::Tensor& t) { return t.device().type() == c10::DeviceType::PrivateUse1; }

// How the last two dims of t are stored: row-major (plain: element (i, j) at
// i * ld + j) or column-major (transposed: at j * ld + i), with any row pitch ld at
// least the row length (a slice of a wider matrix, e.g. one attention head's columns
// of a projection); or neither (then copied first).
struct Layout {
  bool ok = false, transposed = false;
  std::int64_t ld = 0;
};
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

struct NormPrologue;

// An epilogue the matmul kernel applies before rounding: + bias (n values, every row),
// then an activation.
struct Epilogue {
  const at::Tensor* bias = nullptr;
  std::optional<isa::UnaryOp> activation = std::nullopt;
  // _scaled_mm: fp8 operands, an fp32 device scalar multiplying every result before the
  // bias, and the result's dtype.
  const at::Tensor* scale = nullptr;
  std::optional<at::ScalarType> out_dtype = std::nullopt;
  // An [m, n] matrix of the result's dtype added (a residual connection: x + linear(h))
  // or multiplied (a gate: silu(gate) * up) after the rounding; unbatched products only.
  const at::Tensor* residual = nullptr;
  isa::BinaryOp residual_op = isa::BinaryOp::add;
  // A LayerNorm or RMSNorm of a's rows applied to A's panels (unbatched products only).
  const NormPrologue* norm = nullptr;
};

// A norm prologue (compiler::MatmulShape::Norm): a LayerNorm or RMSNorm of the input's
// rows that the matmul kernel applies to its A panels, with its weight and bias
// (contiguous, K values each; undefined when absent).
struct NormPrologue {
  compiler::MatmulShape::Norm norm;
  at::Tensor weight, bias;
  // The norm by its own kernel, for when the fused kernel does not fit the scratchpad.
  at::Tensor apply(const at::Tensor& x) const {
    const std::optional<at::Tensor> w = weight.defined() ? std::optional<at::Tensor>(weight) : std::nullopt;
    if (norm.rms) return at::rms_norm(x, {x.size(-1)}, w, norm.eps);
    const std::optional<at::Tensor> b = bias.defined() ? std::optional<at::Tensor>(bias) : std::nullopt;
    return at::layer_norm(x, {x.size(-1)}, w, b, norm.eps);
  }
  // What the kernel cache's key adds.
  std::string key() const {
    char eps[32];
    std::snprintf(eps, sizeof eps, "%a", norm.eps);  // exact
    return std::string(norm.rms ? "|rms" : "|ln") + (norm.weight ? std::string(isa::to_string(*norm.weight)) : "-") +
           (norm.bias ? std::string(isa::to_string(*norm.bias)) : "-") + eps;
  }
  void add_args(std::vector<std::uint64_t>& args) const {
    if (weight.defined()) args.push_back(device_address(weight));
    if (bias.defined()) args.push_back(device_address(bias));
  }
  std::uint64_t bytes() const {
    return (weight.defined() ? static_cast<std::uint64_t>(weight.numel() * weight.element_size()) : 0) +
           (bias.defined() ? static_cast<std::uint64_t>(bias.numel() * bias.element_size()) : 0);
  }
};

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
at::Tensor product(const char* name, const at::Tensor& a_in, const at::Tensor& b_in, Epilogue epilogue = {},
                   bool int8_to_int32 = false) {
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

// spyre::matmul_epilogue(a, b, bias, activation, residual, residual_op):
// activation(a @ b + bias) in one kernel, the epilogue applied to the fp32 tiles before
// their rounding, then + residual ("add") or * residual ("mul") after it (rounded again,
// as the op it replaces). What the torch.compile backend puts in place of an addmm or
// mm followed by an activation and/or a residual add or a gate's multiply.
at::Tensor matmul_epilogue(const at::Tensor& a, const at::Tensor& b, const std::optional<at::Tensor>& bias,
                           c10::string_view activation, const std::optional<at::Tensor>& residual_in,
                           c10::string_view residual_op, c10::string_view norm,
                           const std::optional<at::Tensor>& norm_weight, const std::optional<at::Tensor>& norm_bias,
                           double norm_eps) {
  std::optional<isa::UnaryOp> act;
  if (!activation.empty()) {
    act = epilogue_activation(std::string_view(activation.data(), activation.size()));
    TORCH_CHECK(act.has_value(), "spyre::matmul_epilogue: unknown activation '", activation, "' (expected ",
                epilogue_activation_names(), ")");
  }
  TORCH_CHECK(a.dim() == 2 && b.dim() == 2, "spyre::matmul_epilogue: expected 2-D a and b, got ", a.dim(), "-D and ",
              b.dim(), "-D");
  TORCH_CHECK(is_spyre(a) && b.device() == a.device() && device_float_dtype(a.scalar_type()),
              "spyre::matmul_epilogue: a and b must be float tensors on one spyre device");
  TORCH_CHECK(a.size(1) == b.size(0), "spyre::matmul_epilogue: a and b shapes cannot be multiplied (", a.size(0), "x",
              a.size(1), " and ", b.size(0), "x", b.size(1), ")");
  if (a.size(0) == 0 || b.size(1) == 0) return at::empty({a.size(0), b.size(1)}, a.options());
  const at::Tensor* residual = residual_in && residual_in->defined() ? &*residual_in : nullptr;
  TORCH_CHECK(residual_op == "add" || residual_op == "mul", "spyre::matmul_epilogue: unknown residual_op '",
              residual_op, "' (expected add or mul)");
  const isa::BinaryOp op = residual_op == "mul" ? isa::BinaryOp::mul : isa::BinaryOp::add;
  if (residual != nullptr) {
    TORCH_CHECK(residual->dim() == 2 && residual->size(0) == a.size(0) && residual->size(1) == b.size(1) &&
                    residual->scalar_type() == a.scalar_type() && residual->device() == a.device(),
                "spyre::matmul_epilogue: the residual must be a ", a.size(0), "x", b.size(1), " ", a.scalar_type(),
                " matrix on ", a.device(), ", got shape ", residual->sizes(), " ", residual->scalar_type(), " on ",
                residual->device());
  }
  if (bias) {
    TORCH_CHECK(fusable_bias(*bias, a, b, 1, 1), "spyre::matmul_epilogue: the bias must be a row of ", b.size(1),
                " values of the operands' dtype on their device, got shape ", bias->sizes(), " ", bias->scalar_type());
  }
  const std::optional<NormPrologue> prologue =
      norm_prologue("spyre::matmul_epilogue", norm, a, norm_weight, norm_bias, norm_eps);
  std::string parts = prologue ? std::string(norm) : "";
  if (bias) parts += (parts.empty() ? "" : ",") + std::string("bias");
  if (act) parts += (parts.empty() ? "" : ",") + std::string(activation);
  const char* combined = op == isa::BinaryOp::mul ? "gate" : "residual";
  if (residual != nullptr) parts += parts.empty() ? combined : std::string(",") + combined;
  const std::string name = "spyre::matmul[" + parts + "]";
  if (a.size(1) == 0 && act) {  // an empty sum: the epilogue on zeros (or the bias), by eager ops
    at::Tensor z = at::zeros({a.size(0), b.size(1)}, a.options());
    if (bias) z.add_(*bias);
    switch (*act) {
      case isa::UnaryOp::relu: z = at::relu(z); break;
      case isa::UnaryOp::gelu: z = at::gelu(z); break;
      case isa::UnaryOp::gelu_tanh: z = at::gelu(z, "tanh"); break;
      case isa::UnaryOp::silu: z = at::silu(z); break;
      case isa::UnaryOp::sigmoid: z = at::sigmoid(z); break;
      case isa::UnaryOp::hardswish: z = at::hardswish(z); break;
      case isa::UnaryOp::hardsigmoid: z = at::hardsigmoid(z); break;
      default: z = at::tanh(z);
    }
    if (residual == nullptr) return z;
    return op == isa::BinaryOp::mul ? z.mul_(*residual) : z.add_(*residual);
  }
  return product(name.c_str(), a, b,
                 {.bias = bias ? &*bias : nullptr, .activation = act, .residual = residual, .residual_op = op,
                  .norm = prologue ? &*prologue : nullptr});
}

// A product of an [m, k] input `x` (read in place when row- or column-major, else copied
// first: `x` becomes what the kernel reads) and transposed weights [n_p x K], each
// piece's rows read in place when its K values are contiguous (else copied): the
// shape of linear_concat's and linear_gated's kernels, B's pieces still to set.
compiler::MatmulShape linear_shape(at::Tensor& x, std::int64_t n, const std::optional<NormPrologue>& norm) {
  Layout la = layout_of(x);
  if (!la.ok || (norm && la.transposed)) x = x.contiguous(), la = layout_of(x);
  compiler::MatmulShape s;
  s.m = static_cast<std::uint64_t>(x.size(0));
  s.n = static_cast<std::uint64_t>(n);
  s.k = static_cast<std::uint64_t>(x.size(1));
  s.dtype = *device_float_dtype(x.scalar_type());
  s.a_transposed = la.transposed;
  s.lda = static_cast<std::uint64_t>(la.ld);
  s.b_transposed = true;
  if (norm) s.norm = norm->norm;
  return s;
}
at::Tensor weight_rows(const at::Tensor& w) {
  const std::int64_t k = w.size(1);
  return (w.stride(1) == 1 || k == 1) && (w.size(0) == 1 || w.stride(0) >= k) ? w : w.contiguous();
}
std::uint64_t row_pitch(const at::Tensor& w) {
  return static_cast<std::uint64_t>(w.size(0) > 1 ? w.stride(0) : w.size(1));
}

// spyre::linear_concat(input, weights): input @ cat(weights).t() for an [m, k] input and
// weights [n_p, k] (nn.Linear's, no bias), one kernel whose B is the weights as pieces
// (compiler::MatmulShape::b_pieces): the input is read once for all of them, and the
// result [m, sum n_p] holds each projection's columns side by side. What the
// torch.compile backend puts in place of several linears of one input (attention's Q,
// K and V); their results are column slices of it.
at::Tensor linear_concat(const at::Tensor& a, at::TensorList weights, c10::string_view norm,
                         const std::optional<at::Tensor>& norm_weight, const std::optional<at::Tensor>& norm_bias,
                         double norm_eps) {
  TORCH_CHECK(!weights.empty(), "spyre::linear_concat: needs at least one weight");
  TORCH_CHECK(a.dim() == 2, "spyre::linear_concat: expected a 2-D input, got ", a.dim(), "-D");
  TORCH_CHECK(is_spyre(a) && device_float_dtype(a.scalar_type()),
              "spyre::linear_concat: the input must be a float tensor on a spyre device, got ", a.scalar_type(), " on ",
              a.device());
  std::int64_t n = 0;
  for (std::size_t p = 0; p < weights.size(); ++p) {
    const at::Tensor& w = weights[p];
    TORCH_CHECK(w.dim() == 2 && w.size(1) == a.size(1) && w.scalar_type() == a.scalar_type() && w.device() == a.device(),
                "spyre::linear_concat: weight ", p, " must be an [n, ", a.size(1), "] ", a.scalar_type(), " matrix on ",
                a.device(), ", got shape ", w.sizes(), " ", w.scalar_type(), " on ", w.device());
    n += w.size(0);
  }
  const std::optional<NormPrologue> prologue =
      norm_prologue("spyre::linear_concat", norm, a, norm_weight, norm_bias, norm_eps);
  const std::int64_t m = a.size(0), k = a.size(1);
  at::Tensor out = at::empty({m, n}, a.options());
  if (out.numel() == 0) return out;
  if (k == 0) return out.zero_();
  std::vector<at::Tensor> pieces;
  for (const at::Tensor& w : weights) {
    if (w.size(0) > 0) pieces.push_back(weight_rows(w));  // (no columns: nothing to read)
  }
  at::Tensor x = a;
  compiler::MatmulShape s = linear_shape(x, n, prologue);
  const std::string name = prologue ? "spyre::linear_concat[" + std::string(norm) + "]" : "spyre::linear_concat";
  std::string key = name + "|" + std::string(isa::to_string(s.dtype)) + "|" + std::to_string(m) + "x" +
                    std::to_string(k) + (s.a_transposed ? "|at" : "|a") + std::to_string(s.lda) +
                    (prologue ? prologue->key() : "") + "|";
  std::vector<std::uint64_t> args{device_address(x), device_address(pieces[0]), device_address(out)};
  for (std::size_t p = 0; p < pieces.size(); ++p) {
    s.b_pieces.push_back(static_cast<std::uint64_t>(pieces[p].size(0)));
    s.b_piece_ld.push_back(row_pitch(pieces[p]));
    key += std::to_string(s.b_pieces.back()) + "/" + std::to_string(s.b_piece_ld.back()) + ",";
    if (p > 0) args.push_back(device_address(pieces[p]));
  }
  if (prologue) prologue->add_args(args);
  const c10::DeviceGuard guard(a.device());
  const std::uint64_t size = isa::dtype_size(s.dtype);
  const Traffic traffic{.read = (s.m * s.k + s.k * s.n) * size + (prologue ? prologue->bytes() : 0),
                        .written = s.m * s.n * size};
  if (!run_cached_if_fits(a.device().index(), key,
                          [&](const compiler::Target& t) { return compiler::compile_matmul(s, t, name); }, args, name,
                          traffic)) {
    TORCH_CHECK(prologue, name, ": no tiling fits the device's scratchpad");
    // Rows too long for the norm's buffers beside the tiles: the norm by its own kernel.
    return linear_concat(prologue->apply(a), weights, "", std::nullopt, std::nullopt, 0);
  }
  return out;
}

// spyre::linear_gated(input, gate, up, activation): activation(input @ gate.t()) *
// (input @ up.t()) for an [m, k] input and [n, k] weights (SwiGLU's feed-forward), one
// kernel (compiler::MatmulShape::gated): each tile computes both products from one read
// of the input, rounds each as the separate op does and multiplies them, so the gate's
// product never goes to DRAM. What the torch.compile backend puts in place of
// matmul_epilogue(h, w1, act) feeding matmul_epilogue(h, w3, residual_op="mul").
at::Tensor linear_gated(const at::Tensor& a, const at::Tensor& gate, const at::Tensor& up, c10::string_view activation,
                        c10::string_view norm, const std::optional<at::Tensor>& norm_weight,
                        const std::optional<at::Tensor>& norm_bias, double norm_eps) {
  const std::optional<isa::UnaryOp> act =
      epilogue_activation(std::string_view(activation.data(), activation.size()), /*gate=*/true);
  TORCH_CHECK(act.has_value() || activation.empty(), "spyre::linear_gated: unknown activation '", activation,
              "' (expected ", epilogue_activation_names(/*gate=*/true), ")");
  TORCH_CHECK(a.dim() == 2, "spyre::linear_gated: expected a 2-D input, got ", a.dim(), "-D");
  TORCH_CHECK(is_spyre(a) && device_float_dtype(a.scalar_type()),
              "spyre::linear_gated: the input must be a float tensor on a spyre device, got ", a.scalar_type(), " on ",
              a.device());
  for (const at::Tensor* w : {&gate, &up}) {
    TORCH_CHECK(w->dim() == 2 && w->size(0) == gate.size(0) && w->size(1) == a.size(1) &&
                    w->scalar_type() == a.scalar_type() && w->device() == a.device(),
                "spyre::linear_gated: the ", w == &gate ? "gate" : "up", " weight must be an [n, ", a.size(1), "] ",
                a.scalar_type(), " matrix on ", a.device(), " (n the gate's rows), got shape ", w->sizes(), " ",
                w->scalar_type(), " on ", w->device());
  }
  const std::optional<NormPrologue> prologue =
      norm_prologue("spyre::linear_gated", norm, a, norm_weight, norm_bias, norm_eps);
  const std::int64_t m = a.size(0), k = a.size(1), n = gate.size(0);
  // Nothing to read (k = 0: both products are zeros, and act(0) * 0 is 0).
  if (m == 0 || n == 0 || k == 0) return at::zeros({m, n}, a.options());
  const at::Tensor w1 = weight_rows(gate), w3 = weight_rows(up);
  at::Tensor x = a;
  at::Tensor out = at::empty({m, n}, a.options());
  compiler::MatmulShape s = linear_shape(x, n, prologue);
  s.gated = true;
  s.activation = act;
  s.b_pieces = {s.n, s.n};
  s.b_piece_ld = {row_pitch(w1), row_pitch(w3)};
  const std::string name = "spyre::linear_gated[" + (prologue ? std::string(norm) + "," : std::string()) +
                           (activation.empty() ? std::string("none") : std::string(activation)) + "]";
  const std::string key = name + "|" + std::string(isa::to_string(s.dtype)) + "|" + std::to_string(m) + "x" +
                          std::to_string(n) + "x" + std::to_string(k) + (s.a_transposed ? "|at" : "|a") +
                          std::to_string(s.lda) + "|" + std::to_string(s.b_piece_ld[0]) + "," +
                          std::to_string(s.b_piece_ld[1]) + (prologue ? prologue->key() : "");
  std::vector<std::uint64_t> args{device_address(x), device_address(w1), device_address(out), device_address(w3)};
  if (prologue) prologue->add_args(args);
  const c10::DeviceGuard guard(a.device());
  const std::uint64_t size = isa::dtype_size(s.dtype);
  const Traffic traffic{.read = (s.m * s.k + 2 * s.k * s.n) * size + (prologue ? prologue->bytes() : 0),
                        .written = s.m * s.n * size};
  if (!run_cached_if_fits(a.device().index(), key,
                          [&](const compiler::Target& t) { return compiler::compile_matmul(s, t, name); }, args, name,
                          traffic)) {
    TORCH_CHECK(prologue, name, ": no tiling fits the device's scratchpad");
    // Rows too long for the norm's buffers beside the tiles: the norm by its own kernel.
    return linear_gated(prologue->apply(a), gate, up, activation, "", std::nullopt, std::nullopt, 0);
  }
  return out;
}

// spyre::mlp(input, w1, b1, activation, w2, b2, residual, norm...): a transformer
// block's feed-forward half, activation(norm(input) @ w1.t() + b1) @ w2.t() + b2 (+
// residual), for an [m, d] input, w1 [h, d] and w2 [d, h] (nn.Linear's weights), in one
// kernel (compiler::compile_mlp): the cores split the hidden units and reduce the second
// product over the ring, so the [m, h] hidden activation never goes to DRAM. Rounded as
// the two linears are (the hidden activation to the input's dtype, the output before the
// residual's add). What the torch.compile backend puts in place of the two matmul
// kernels; when the kernel does not fit (or would read the weights too often), those
// two kernels run. With up_weight (w3, [h, d]) the first half is gated, SwiGLU's
// activation(input @ w1.t()) * (input @ w3.t()), rounded as spyre::linear_gated rounds
// it (no b1), and the kernels it replaces are linear_gated's and the second linear's.
at::Tensor mlp(const at::Tensor& a, const at::Tensor& w1, const std::optional<at::Tensor>& b1,
               c10::string_view activation, const at::Tensor& w2, const std::optional<at::Tensor>& b2,
               const std::optional<at::Tensor>& residual_in, c10::string_view norm,
               const std::optional<at::Tensor>& norm_weight, const std::optional<at::Tensor>& norm_bias,
               double norm_eps, const std::optional<at::Tensor>& proj_input,
               const std::optional<at::Tensor>& proj_weight, const std::optional<at::Tensor>& proj_bias,
               const std::optional<at::Tensor>& up_weight) {
  const bool projected = proj_input && proj_input->defined();
  const bool gated = up_weight && up_weight->defined();
  if (projected) {
    // x1 = proj_input @ proj_weight.t() + proj_bias + input, then the MLP of x1 + x1.
    const at::Tensor& pin = *proj_input;
    TORCH_CHECK(proj_weight && proj_weight->defined(), "spyre::mlp: proj_input without proj_weight");
    TORCH_CHECK(!(residual_in && residual_in->defined()),
                "spyre::mlp: with a projection the residual is its result (x1); got a residual too");
    TORCH_CHECK(pin.dim() == 2 && pin.size(0) == a.size(0) && pin.scalar_type() == a.scalar_type() &&
                    pin.device() == a.device(),
                "spyre::mlp: proj_input must be a [", a.size(0), ", dp] ", a.scalar_type(), " matrix on ", a.device(),
                ", got shape ", pin.sizes(), " ", pin.scalar_type(), " on ", pin.device());
    const at::Tensor& wp = *proj_weight;
    TORCH_CHECK(wp.dim() == 2 && wp.size(0) == a.size(1) && wp.size(1) == pin.size(1) &&
                    wp.scalar_type() == a.scalar_type() && wp.device() == a.device(),
                "spyre::mlp: proj_weight must be a [", a.size(1), ", ", pin.size(1), "] ", a.scalar_type(),
                " matrix on ", a.device(), ", got shape ", wp.sizes(), " ", wp.scalar_type(), " on ", wp.device());
    if (proj_bias && proj_bias->defined()) {
      TORCH_CHECK(proj_bias->dim() == 1 && proj_bias->size(0) == a.size(1) &&
                      proj_bias->scalar_type() == a.scalar_type() && proj_bias->device() == a.device(),
                  "spyre::mlp: proj_bias must be ", a.size(1), " ", a.scalar_type(), " values on ", a.device(),
                  ", got shape ", proj_bias->sizes(), " ", proj_bias->scalar_type());
    }
  } else {
    TORCH_CHECK(!(proj_weight && proj_weight->defined()) && !(proj_bias && proj_bias->defined()),
                "spyre::mlp: proj_weight or proj_bias without proj_input");
  }
  std::optional<isa::UnaryOp> act;
  if (!activation.empty()) {
    act = epilogue_activation(std::string_view(activation.data(), activation.size()));
    TORCH_CHECK(act.has_value(), "spyre::mlp: unknown activation '", activation, "' (expected ",
                epilogue_activation_names(), ")");
  }
  TORCH_CHECK(a.dim() == 2, "spyre::mlp: expected a 2-D input, got ", a.dim(), "-D");
  TORCH_CHECK(is_spyre(a) && device_float_dtype(a.scalar_type()),
              "spyre::mlp: the input must be a float tensor on a spyre device, got ", a.scalar_type(), " on ",
              a.device());
  const std::int64_t m = a.size(0), d = a.size(1), h = w1.dim() == 2 ? w1.size(0) : -1;
  const auto matrix = [&](const at::Tensor& t, std::int64_t rows, std::int64_t cols, const char* what) {
    TORCH_CHECK(t.dim() == 2 && t.size(0) == rows && t.size(1) == cols && t.scalar_type() == a.scalar_type() &&
                    t.device() == a.device(),
                "spyre::mlp: ", what, " must be a [", rows, ", ", cols, "] ", a.scalar_type(), " matrix on ",
                a.device(), ", got shape ", t.sizes(), " ", t.scalar_type(), " on ", t.device());
  };
  TORCH_CHECK(w1.dim() == 2, "spyre::mlp: w1 must be an [h, ", d, "] matrix, got shape ", w1.sizes());
  matrix(w1, h, d, "w1");
  matrix(w2, d, h, "w2 (the second linear's weight)");
  if (gated) {
    matrix(*up_weight, h, d, "up_weight (w3)");
    TORCH_CHECK(!(b1 && b1->defined()), "spyre::mlp: a gated first half (up_weight given) takes no b1");
    TORCH_CHECK(act != isa::UnaryOp::hardswish && act != isa::UnaryOp::hardsigmoid,
                "spyre::mlp: a gated first half takes spyre::linear_gated's activations (silu, gelu, gelu_tanh, "
                "relu, sigmoid, tanh or none), got '", activation, "'");
  }
  const at::Tensor* residual = residual_in && residual_in->defined() ? &*residual_in : nullptr;
  if (residual != nullptr) matrix(*residual, m, d, "the residual");
  for (const auto& [bias, n, what] : {std::tuple{&b1, h, "b1"}, std::tuple{&b2, d, "b2"}}) {
    if (!bias->has_value() || !(*bias)->defined()) continue;
    const at::Tensor& v = **bias;
    TORCH_CHECK(v.dim() == 1 && v.size(0) == n && v.scalar_type() == a.scalar_type() && v.device() == a.device(),
                "spyre::mlp: ", what, " must be ", n, " ", a.scalar_type(), " values on ", a.device(), ", got shape ",
                v.sizes(), " ", v.scalar_type(), " on ", v.device());
  }
  const std::optional<NormPrologue> prologue = norm_prologue("spyre::mlp", norm, a, norm_weight, norm_bias, norm_eps);
  const bool has_b1 = b1 && b1->defined(), has_b2 = b2 && b2->defined();
  // The linears as separate kernels: what the fused kernel replaces (with a projection:
  // it, then the MLP of its result, fused or not).
  const auto unfused = [&] {
    if (projected) {
      const at::Tensor x1 =
          matmul_epilogue(*proj_input, proj_weight->t(), proj_bias, "", a, "add", "", std::nullopt, std::nullopt, 0);
      return mlp(x1, w1, b1, activation, w2, b2, x1, norm, norm_weight, norm_bias, norm_eps, std::nullopt,
                 std::nullopt, std::nullopt, up_weight);
    }
    const at::Tensor hidden = gated ? linear_gated(a, w1, *up_weight, activation, norm, norm_weight, norm_bias, norm_eps)
                                    : matmul_epilogue(a, w1.t(), b1, activation, std::nullopt, "add", norm,
                                                      norm_weight, norm_bias, norm_eps);
    return matmul_epilogue(hidden, w2.t(), b2, "", residual_in, "add", "", std::nullopt, std::nullopt, 0);
  };
  if (m == 0 || d == 0 || h == 0) return unfused();
  const at::Tensor x = a.contiguous(), wa = weight_rows(w1), wb = weight_rows(w2);
  const at::Tensor wu = gated ? weight_rows(*up_weight) : at::Tensor();
  const at::Tensor res = residual != nullptr ? residual->contiguous() : at::Tensor();
  at::Tensor out = at::empty({m, d}, a.options());
  compiler::MlpShape s;
  s.m = static_cast<std::uint64_t>(m);
  s.d = static_cast<std::uint64_t>(d);
  s.h = static_cast<std::uint64_t>(h);
  s.dtype = *device_float_dtype(a.scalar_type());
  s.ld1 = row_pitch(wa);
  s.ld2 = row_pitch(wb);
  if (has_b1) s.bias1 = s.dtype;
  if (has_b2) s.bias2 = s.dtype;
  s.activation = act;
  s.residual = residual != nullptr;
  s.gated = gated;
  if (gated) s.ld3 = row_pitch(wu);
  if (prologue) s.norm = prologue->norm;
  const bool has_bp = projected && proj_bias && proj_bias->defined();
  at::Tensor pin, wp;
  if (projected) {
    pin = proj_input->contiguous();
    wp = proj_weight->contiguous();
    s.projection = compiler::MlpShape::Projection{static_cast<std::uint64_t>(pin.size(1)),
                                                  has_bp ? std::optional<isa::DType>(s.dtype) : std::nullopt};
  }
  std::string parts = projected ? std::string(has_bp ? "linear,bias,residual," : "linear,residual,") : "";
  parts += prologue ? std::string(norm) + "," : "";
  parts += activation.empty() ? std::string("none") : (gated ? "gated_" : "") + std::string(activation);
  if (s.residual || projected) parts += ",residual";
  const std::string name = "spyre::mlp[" + parts + "]";
  const std::string key = name + "|" + std::string(isa::to_string(s.dtype)) + "|" + std::to_string(m) + "x" +
                          std::to_string(d) + "x" + std::to_string(h) + "|" + std::to_string(s.ld1) + "," +
                          std::to_string(s.ld2) + (has_b1 ? "|b1" : "|-") + (has_b2 ? "b2" : "-") +
                          (prologue ? prologue->key() : "") +
                          (projected ? "|p" + std::to_string(pin.size(1)) + (has_bp ? "b" : "") : "") +
                          (gated ? "|g" + std::to_string(s.ld3) : "");
  std::vector<std::uint64_t> args{device_address(x), device_address(wa), device_address(out), device_address(wb)};
  if (has_b1) args.push_back(device_address(*b1));
  if (has_b2) args.push_back(device_address(*b2));
  if (s.residual) args.push_back(device_address(res));
  if (prologue) prologue->add_args(args);
  if (projected) {
    args.push_back(device_address(pin));
    args.push_back(device_address(wp));
    if (has_bp) args.push_back(device_address(*proj_bias));
  }
  if (gated) args.push_back(device_address(wu));
  const c10::DeviceGuard guard(a.device());
  const std::uint64_t size = isa::dtype_size(s.dtype);
  const std::uint64_t dp = projected ? static_cast<std::uint64_t>(pin.size(1)) : 0;
  const Traffic traffic{.read = (s.m * s.d * (s.residual ? 2 : 1) + (gated ? 3 : 2) * s.d * s.h + (has_b1 ? s.h : 0) +
                                 (has_b2 ? s.d : 0) + s.m * dp + s.d * dp + (has_bp ? s.d : 0)) * size +
                                (prologue ? prologue->bytes() : 0),
                        .written = s.m * s.d * size};
  if (!run_cached_if_fits(a.device().index(), key,
                          [&](const compiler::Target& t) { return compiler::compile_mlp(s, t, name); }, args, name,
                          traffic)) {
    return unfused();
  }
  return out;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(spyre, m) {
  // norm: a LayerNorm ("layer_norm") or RMSNorm ("rms_norm") of the input's rows, with
  // its weight, bias and eps, applied by the kernel to its A panels (no norm: "").
  m.def("matmul_epilogue(Tensor a, Tensor b, Tensor? bias, str activation, Tensor? residual=None, "
        "str residual_op=\"add\", str norm=\"\", Tensor? norm_weight=None, Tensor? norm_bias=None, "
        "float norm_eps=0.) -> Tensor");
  m.def("linear_concat(Tensor input, Tensor[] weights, str norm=\"\", Tensor? norm_weight=None, "
        "Tensor? norm_bias=None, float norm_eps=0.) -> Tensor");
  m.def("linear_gated(Tensor input, Tensor gate, Tensor up, str activation, str norm=\"\", "
        "Tensor? norm_weight=None, Tensor? norm_bias=None, float norm_eps=0.) -> Tensor");
  m.def("mlp(Tensor input, Tensor w1, Tensor? b1, str activation, Tensor w2, Tensor? b2, Tensor? residual=None, "
        "str norm=\"\", Tensor? norm_weight=None, Tensor? norm_bias=None, float norm_eps=0., "
        "Tensor? proj_input=None, Tensor? proj_weight=None, Tensor? proj_bias=None, Tensor? up_weight=None) -> Tensor");
}
TORCH_LIBRARY_IMPL(spyre, PrivateUse1, m) {
  m.impl("matmul_epilogue", matmul_epilogue);
  m.impl("linear_concat", linear_concat);
  m.impl("linear_gated", linear_gated);
  m.impl("mlp", mlp);
}
TORCH_LIBRARY_IMPL(spyre, Autograd, m) {
  m.impl("matmul_epilogue", torch::autograd::autogradNotImplementedFallback());
  m.impl("linear_concat", torch::autograd::autogradNotImplementedFallback());
  m.impl("linear_gated", torch::autograd::autogradNotImplementedFallback());
  m.impl("mlp", torch::autograd::autogradNotImplementedFallback());
}

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
