// The fused LSTM and GRU cells nn.LSTM and nn.GRU call on every device but the CPU
// (PyTorch has CUDA kernels for them only, so the CPU fallback has nothing to run).
// Written with the device's pointwise, concatenation and reduction kernels; the
// workspace holds what the backward needs, laid out as CUDA's does, so PyTorch's
// autograd formulas (derivatives.yaml: the fused backward, or the differentiable
// composite one when a graph of the gradient is built) apply unchanged.
#include <ATen/ops/add.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/ones_like.h>
#include <ATen/ops/sigmoid.h>
#include <ATen/ops/sub.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/tanh.h>
#include <ATen/ops/zeros_like.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <optional>
#include <tuple>
#include <vector>

namespace spyre::backend {
namespace {

bool given(const std::optional<at::Tensor>& t) { return t.has_value() && t->defined(); }

// The shapes a fused cell takes: gates [batch, gates * hidden] for a state [batch, hidden].
void check_cell(const char* cell, const at::Tensor& input_gates, const at::Tensor& hidden_gates,
                const at::Tensor& state, const std::optional<at::Tensor>& input_bias,
                const std::optional<at::Tensor>& hidden_bias, std::int64_t gates) {
  TORCH_CHECK(input_gates.dim() == 2 && input_gates.sizes() == hidden_gates.sizes(), cell,
              ": input_gates and hidden_gates must be 2-D and of one shape, got ", input_gates.sizes(), " and ",
              hidden_gates.sizes());
  TORCH_CHECK(state.dim() == 2 && input_gates.size(0) == state.size(0) && input_gates.size(1) == gates * state.size(1),
              cell, ": expected gates of shape [", state.size(0), ", ", gates, " * ", state.size(1), "] for a state of ",
              "shape ", state.sizes(), ", got ", input_gates.sizes());
  TORCH_CHECK(given(input_bias) == given(hidden_bias), cell, ": give both biases or neither");
}

at::Tensor d_sigmoid(const at::Tensor& s) { return at::mul(s, at::sub(at::ones_like(s), s)); }  // s (1 - s)
at::Tensor d_tanh(const at::Tensor& t) { return at::sub(at::ones_like(t), at::mul(t, t)); }      // 1 - t^2

// aten::_thnn_fused_lstm_cell -> (hy, cy, workspace = [i, f, g, o] activations)
std::tuple<at::Tensor, at::Tensor, at::Tensor> fused_lstm_cell(const at::Tensor& input_gates,
                                                               const at::Tensor& hidden_gates, const at::Tensor& cx,
                                                               const std::optional<at::Tensor>& input_bias,
                                                               const std::optional<at::Tensor>& hidden_bias) {
  const c10::DeviceGuard guard(input_gates.device());
  check_cell("_thnn_fused_lstm_cell", input_gates, hidden_gates, cx, input_bias, hidden_bias, 4);
  at::Tensor sum = at::add(input_gates, hidden_gates);
  if (given(input_bias)) sum = at::add(at::add(sum, *input_bias), *hidden_bias);
  const std::vector<at::Tensor> g = sum.chunk(4, 1);
  const at::Tensor i = at::sigmoid(g[0]), f = at::sigmoid(g[1]), c = at::tanh(g[2]), o = at::sigmoid(g[3]);
  const at::Tensor cy = at::add(at::mul(f, cx), at::mul(i, c));
  const at::Tensor hy = at::mul(o, at::tanh(cy));
  return {hy, cy, at::cat({i, f, c, o}, 1)};
}

// aten::_thnn_fused_lstm_cell_backward_impl -> (grad_gates, grad_cx, grad_bias)
std::tuple<at::Tensor, at::Tensor, at::Tensor> fused_lstm_cell_backward(
    const std::optional<at::Tensor>& grad_hy_in, const std::optional<at::Tensor>& grad_cy_in, const at::Tensor& cx,
    const at::Tensor& cy, const at::Tensor& workspace, bool has_bias) {
  if (!given(grad_hy_in) && !given(grad_cy_in)) return {at::Tensor(), at::Tensor(), at::Tensor()};
  const c10::DeviceGuard guard(workspace.device());
  const at::Tensor grad_hy = given(grad_hy_in) ? *grad_hy_in : at::zeros_like(cx);
  const std::vector<at::Tensor> w = workspace.chunk(4, 1);
  const at::Tensor &i = w[0], &f = w[1], &c = w[2], &o = w[3];
  const at::Tensor tanh_cy = at::tanh(cy);
  const at::Tensor grad_o = at::mul(at::mul(grad_hy, tanh_cy), d_sigmoid(o));
  // dL/dcy through hy = o tanh(cy), plus the gradient that arrives at cy directly.
  at::Tensor grad_c_state = at::mul(at::mul(grad_hy, o), d_tanh(tanh_cy));
  if (given(grad_cy_in)) grad_c_state = at::add(grad_c_state, *grad_cy_in);
  const at::Tensor grad_i = at::mul(at::mul(grad_c_state, c), d_sigmoid(i));
  const at::Tensor grad_f = at::mul(at::mul(grad_c_state, cx), d_sigmoid(f));
  const at::Tensor grad_c = at::mul(at::mul(grad_c_state, i), d_tanh(c));
  const at::Tensor grad_cx = at::mul(grad_c_state, f);
  const at::Tensor grad_gates = at::cat({grad_i, grad_f, grad_c, grad_o}, 1);
  return {grad_gates, grad_cx, has_bias ? at::sum(grad_gates, 0) : at::Tensor()};
}

// aten::_thnn_fused_gru_cell -> (hy, workspace = [r, z, n, hx, hidden n-gate + bias])
std::tuple<at::Tensor, at::Tensor> fused_gru_cell(const at::Tensor& input_gates, const at::Tensor& hidden_gates,
                                                  const at::Tensor& hx, const std::optional<at::Tensor>& input_bias,
                                                  const std::optional<at::Tensor>& hidden_bias) {
  const c10::DeviceGuard guard(input_gates.device());
  check_cell("_thnn_fused_gru_cell", input_gates, hidden_gates, hx, input_bias, hidden_bias, 3);
  std::vector<at::Tensor> in = input_gates.chunk(3, 1), hid = hidden_gates.chunk(3, 1);
  if (given(input_bias)) {
    const std::vector<at::Tensor> bi = input_bias->chunk(3, 0), bh = hidden_bias->chunk(3, 0);
    for (int k = 0; k < 3; ++k) {
      in[k] = at::add(in[k], bi[k]);
      hid[k] = at::add(hid[k], bh[k]);
    }
  }
  const at::Tensor r = at::sigmoid(at::add(in[0], hid[0]));
  const at::Tensor z = at::sigmoid(at::add(in[1], hid[1]));
  const at::Tensor n = at::tanh(at::add(in[2], at::mul(r, hid[2])));
  const at::Tensor hy = at::add(n, at::mul(z, at::sub(hx, n)));
  return {hy, at::cat({r, z, n, hx, hid[2]}, 1)};
}

// aten::_thnn_fused_gru_cell_backward -> (grad_input_gates, grad_hidden_gates, grad_hx,
//                                         grad_input_bias, grad_hidden_bias)
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> fused_gru_cell_backward(
    const at::Tensor& grad_hy, const at::Tensor& workspace, bool has_bias) {
  const c10::DeviceGuard guard(workspace.device());
  const std::vector<at::Tensor> w = workspace.chunk(5, 1);
  const at::Tensor &r = w[0], &z = w[1], &n = w[2], &hx = w[3], &hn = w[4];
  const at::Tensor grad_z = at::mul(at::mul(grad_hy, at::sub(hx, n)), d_sigmoid(z));
  const at::Tensor grad_hx = at::mul(grad_hy, z);
  const at::Tensor grad_n = at::mul(at::mul(grad_hy, at::sub(at::ones_like(z), z)), d_tanh(n));
  const at::Tensor grad_hn = at::mul(grad_n, r);
  const at::Tensor grad_r = at::mul(at::mul(grad_n, hn), d_sigmoid(r));
  const at::Tensor grad_input_gates = at::cat({grad_r, grad_z, grad_n}, 1);
  const at::Tensor grad_hidden_gates = at::cat({grad_r, grad_z, grad_hn}, 1);
  if (!has_bias) return {grad_input_gates, grad_hidden_gates, grad_hx, at::Tensor(), at::Tensor()};
  return {grad_input_gates, grad_hidden_gates, grad_hx, at::sum(grad_input_gates, 0), at::sum(grad_hidden_gates, 0)};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_thnn_fused_lstm_cell", fused_lstm_cell);
  m.impl("_thnn_fused_lstm_cell_backward_impl", fused_lstm_cell_backward);
  m.impl("_thnn_fused_gru_cell", fused_gru_cell);
  m.impl("_thnn_fused_gru_cell_backward", fused_gru_cell_backward);
}

}  // namespace spyre::backend
