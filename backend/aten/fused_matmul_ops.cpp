// The spyre:: matmul ops the torch.compile backend puts in place of a matmul and what
// surrounds it (backend/README.md): matmul_epilogue (a bias, an activation, a residual or
// gate, a norm prologue), linear_concat (linears of one input), linear_gated (a gated
// pair) and mlp (a feed-forward half, compiler/mlp.h), each one kernel on the device.
#include <optional>
#include <string>
#include <vector>

#include <ATen/ops/empty.h>
#include <c10/core/DeviceGuard.h>
#include <torch/csrc/autograd/autograd_not_implemented_fallback.h>
#include <torch/library.h>

#include "aten/cpu_fallback.h"
#include "aten/kernel_cache.h"
#include "aten/matmul_product.h"
#include "aten/op_table.h"
#include "aten/out.h"
#include "compiler/matmul.h"
#include "compiler/mlp.h"
#include "runtime/launch.h"

namespace spyre::backend {
namespace {

using namespace matmul;

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

}  // namespace spyre::backend
