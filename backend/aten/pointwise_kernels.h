// What the pointwise ops' kernel files (pointwise_ops.cpp, activation_ops.cpp,
// ternary_ops.cpp, logical_ops.cpp) share: a built TensorIterator run as one device
// kernel of pointwise steps, or on CPU copies when the device cannot run it.
#pragma once

#include <initializer_list>
#include <optional>
#include <vector>

#include <ATen/ScalarOps.h>
#include <ATen/TensorIterator.h>
#include <ATen/native/BinaryOps.h>
#include <ATen/native/TypeProperties.h>

#include "aten/cpu_fallback.h"
#include "aten/kernel_cache.h"
#include "aten/out.h"
#include "aten/pointwise.h"

namespace spyre::backend::pointwise_kernels {

using compiler::Step;
using compiler::Value;
using isa::BinaryOp;
using isa::CompareOp;
using isa::UnaryOp;
using Steps = std::vector<Step>;

// Runs the built iterator on the device, or `cpu()` (the op on CPU copies) into its
// output when the device cannot; returns the output.
template <class MakeSteps, class Cpu>
at::Tensor finish(const char* name, at::TensorIteratorBase& iter, c10::ScalarType common, std::size_t steps,
                  MakeSteps&& make, Cpu&& cpu, std::optional<c10::ScalarType> round_scalars = std::nullopt) {
  at::Tensor out(iter.output());
  if (iter.numel() == 0) return out;
  if (device_can_run(iter) && device_dtype(common)) {
    run_pointwise(name, iter, make(compute_dtype(common, steps)), round_scalars);
  } else {
    count_fallback(name);
    out.copy_(cpu());
  }
  return out;
}

inline at::Tensor cpu(const at::Tensor& t) { return t.defined() ? t.cpu() : t; }

inline Value in(std::uint32_t i) { return Value::input(i); }
inline Value st(std::uint32_t i) { return Value::step(i); }
inline Value k(double v) { return Value::constant(v); }

// The spyre device among the operands (else the first's).
inline c10::Device device_of(std::initializer_list<const at::Tensor*> ts) {
  for (const at::Tensor* t : ts) {
    if (t->defined() && t->device().type() == c10::DeviceType::PrivateUse1) return t->device();
  }
  return (*ts.begin())->device();
}

// A 0-d CPU operand of a device op moves to the device (as PyTorch's where does).
inline at::Tensor on(const at::Tensor& t, c10::Device device) {
  return t.dim() == 0 && t.is_cpu() && device.type() == c10::DeviceType::PrivateUse1 ? t.to(device) : t;
}

// gelu's ISA op for its `approximate` argument (PyTorch's check and message).
inline UnaryOp gelu_op(c10::string_view approximate) {
  TORCH_CHECK(approximate == "none" || approximate == "tanh", "approximate argument must be either none or tanh.");
  return approximate == "tanh" ? UnaryOp::gelu_tanh : UnaryOp::gelu;
}

}  // namespace spyre::backend::pointwise_kernels
