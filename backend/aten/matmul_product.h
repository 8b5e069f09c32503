// What the matmul ops' files share: matmul_ops.cpp (the aten products: mm, bmm, addmm,
// baddbmm, addmv, _int_mm, _scaled_mm) and fused_matmul_ops.cpp (the spyre:: ops the
// torch.compile backend puts in place of a matmul and what surrounds it): how an
// operand is laid out, a norm prologue, an epilogue, and the one product kernel.
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <ATen/ops/layer_norm.h>
#include <ATen/ops/rms_norm.h>

#include "aten/kernel_cache.h"
#include "compiler/matmul.h"

namespace spyre::backend::matmul {

inline bool is_spyre(const at::Tensor& t) { return t.device().type() == c10::DeviceType::PrivateUse1; }

// How the last two dims of t are stored: row-major (plain: element (i, j) at
// i * ld + j) or column-major (transposed: at j * ld + i), with any row pitch ld at
// least the row length (a slice of a wider matrix, e.g. one attention head's columns
// of a projection); or neither (then copied first).
struct Layout {
  bool ok = false, transposed = false;
  std::int64_t ld = 0;
};
Layout layout_of(const at::Tensor& t);

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
                                          const std::optional<at::Tensor>& bias, double eps);

// a @ b for [m, k] @ [k, n] or batched [B, m, k] @ [B, k, n], on the device when it
// can (else on the CPU, counted), as a new contiguous tensor. `int8_to_int32`:
// _int_mm's int8 operands, accumulated and returned in int32.
at::Tensor product(const char* name, const at::Tensor& a_in, const at::Tensor& b_in, Epilogue epilogue = {},
                   bool int8_to_int32 = false);

// Whether addmm's `self` can be the kernel's bias epilogue: beta and alpha 1, a row of
// n values of the product's dtype on its device (nn.Linear's bias).
bool fusable_bias(const at::Tensor& self, const at::Tensor& a, const at::Tensor& b, const c10::Scalar& beta,
                  const c10::Scalar& alpha);

}  // namespace spyre::backend::matmul
