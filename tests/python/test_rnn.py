"""nn.LSTM, nn.GRU and their cells on spyre against the CPU.

PyTorch runs recurrent layers on any device but the CPU through the fused cells
(_thnn_fused_lstm_cell, _thnn_fused_gru_cell and their backwards), which it implements
for CUDA only; spyre implements them with its own kernels (backend/aten/rnn_ops.cpp).
"""

import pytest
import torch


def _run(module, x, state):
    out, final = module(x, state)
    finals = final if isinstance(final, tuple) else (final,)
    (out.square().sum() + sum(f.sum() for f in finals)).backward()
    return out, finals


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
@pytest.mark.parametrize("layers,bidirectional,bias,batch_first", [
    (1, False, True, False), (2, True, True, True), (1, False, False, False)])
def test_a_recurrent_layer_matches_the_cpu_forward_and_backward(kind, layers, bidirectional, bias, batch_first):
    torch.manual_seed(0)
    cpu = getattr(torch.nn, kind)(7, 5, num_layers=layers, bidirectional=bidirectional, bias=bias,
                                  batch_first=batch_first)
    dev = getattr(torch.nn, kind)(7, 5, num_layers=layers, bidirectional=bidirectional, bias=bias,
                                  batch_first=batch_first).to("spyre")
    dev.load_state_dict(cpu.state_dict())
    x = torch.randn(3, 6, 7)  # (seq, batch) or (batch, seq)
    directions = 2 if bidirectional else 1
    h0 = torch.randn(layers * directions, 6 if not batch_first else 3, 5)
    state = (h0, torch.randn_like(h0)) if kind == "LSTM" else h0
    xc, xd = x.clone().requires_grad_(), x.to("spyre").requires_grad_()
    torch.spyre.reset_fallback_counts()
    out_d, finals_d = _run(dev, xd, tuple(s.to("spyre") for s in state) if kind == "LSTM" else state.to("spyre"))
    out_c, finals_c = _run(cpu, xc, state)
    assert not [op for op in torch.spyre.fallback_counts() if "_thnn" in op]
    torch.testing.assert_close(out_d.cpu(), out_c, rtol=1e-4, atol=1e-5)
    for a, b in zip(finals_d, finals_c):
        torch.testing.assert_close(a.detach().cpu(), b.detach(), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(xd.grad.cpu(), xc.grad, rtol=1e-4, atol=1e-5)
    for (name, p), q in zip(dev.named_parameters(), cpu.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-4, atol=1e-5, msg=name)


@pytest.mark.parametrize("kind", ["LSTMCell", "GRUCell"])
def test_a_cell_matches_the_cpu_and_its_gradient_of_a_gradient_too(kind):
    torch.manual_seed(1)
    cpu = getattr(torch.nn, kind)(4, 3).double()
    dev = getattr(torch.nn, kind)(4, 3).double().to("spyre")
    dev.load_state_dict(cpu.state_dict())
    x = torch.randn(2, 4, dtype=torch.float64)
    results = {}
    for d, cell in (("cpu", cpu), ("spyre", dev)):
        xi = x.to(d).requires_grad_()
        out = cell(xi)
        h = out[0] if isinstance(out, tuple) else out
        (g,) = torch.autograd.grad(h.square().sum(), xi, create_graph=True)  # the differentiable backward
        (gg,) = torch.autograd.grad(g.sum(), xi)
        results[d] = [t.detach().cpu() for t in (h, g, gg)]
    for a, b in zip(results["spyre"], results["cpu"]):
        torch.testing.assert_close(a, b)


def test_the_fused_cells_check_their_shapes():
    gates = torch.randn(2, 8, device="spyre")
    with pytest.raises(RuntimeError, match=r"_thnn_fused_lstm_cell: expected gates of shape \[2, 4 \* 3\]"):
        torch.ops.aten._thnn_fused_lstm_cell(gates, gates, torch.randn(2, 3, device="spyre"))
