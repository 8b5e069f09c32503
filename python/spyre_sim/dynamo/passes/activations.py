"""Activation pass: a chain of smooth elementwise ops that computes a known activation
(Hugging Face's gelu_new, ``x * sigmoid(x)``, ...) becomes that activation's one op."""

from __future__ import annotations

import torch
import torch.fx

from ..graph import _val, recompiled
from ..ir import _FLOATS
from ..ops import _aten_overload

aten = torch.ops.aten


# Smooth elementwise ops an activation is written out in (Hugging Face's gelu_new and
# FastGELU, BLOOM's GELU, x * sigmoid(x)): a chain of these from one tensor, with scalar
# constants, is a function of that tensor alone. Which fusible ops are analytic is the
# backend's op table's call (torch.ops.spyre.analytic_ops).
_ANALYTIC_OPS = frozenset(_aten_overload(name) for name in torch.ops.spyre.analytic_ops())
# The activations the kernels apply (matmul epilogues, one vector op), as the op a
# written-out chain becomes and its fp64 reference.
_KNOWN_ACTIVATIONS = (
    (aten.gelu.default, {"approximate": "tanh"}, lambda t: torch.nn.functional.gelu(t, approximate="tanh")),
    (aten.gelu.default, {}, torch.nn.functional.gelu),
    (aten.silu.default, {}, torch.nn.functional.silu),
    (aten.sigmoid.default, {}, torch.sigmoid),
)
_MAX_ACTIVATION_OPS = 16


def _activation_probe() -> torch.Tensor:
    """Where a chain is compared with the activations: 321 points over [-8, 8] (every
    activation's curved part), and far out on both sides."""
    far = torch.tensor([-1e4, -300.0, -60.0, -20.0, -12.0, 12.0, 20.0, 60.0, 300.0, 1e4], dtype=torch.float64)
    return torch.cat([torch.linspace(-8, 8, 321, dtype=torch.float64), far])


def recognize_activations(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A chain of smooth elementwise ops of one tensor with scalar constants that computes
    a known activation (``0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x ** 3)))``,
    Hugging Face's gelu_new; ``x * sigmoid(x)``; ...) becomes that activation's one op, so
    fuse_matmul_epilogues moves it into the matmul before it instead of a separate pass
    over its result. The chain is recognised by what it computes, not by how it is
    spelled: evaluated in fp64 on 331 points from -1e4 to 1e4, it must agree with the
    activation to 1e-6 relative (the constants models write, 0.7978845608 for
    sqrt(2 / pi), are closer than that). Its ops are analytic, so agreeing on so many
    points is agreeing everywhere. Only chains whose inner results nothing else reads;
    the fused kernel computes the activation in fp32 and rounds once, as the fused
    chain did."""
    source = {}  # an analytic float op -> the one tensor its chain starts from
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target not in _ANALYTIC_OPS:
            continue
        val = _val(node)
        if not isinstance(val, torch.Tensor) or val.dtype not in _FLOATS:
            continue
        starts = {source.get(a, a) for a in node.all_input_nodes}
        if len(starts) == 1:
            source[node] = starts.pop()
    # Real CPU arithmetic, outside the fake-tensor mode the compiler runs in.
    from torch._subclasses.fake_tensor import unset_fake_temporarily  # noqa: PLC0415

    probe, references, replaced = None, None, set()
    for y in reversed(list(gm.graph.nodes)):  # the last op of a chain first: the longest chain wins
        if y not in source or y in replaced:
            continue
        x = source[y]
        cone, stack = set(), [y]
        while stack and len(cone) <= _MAX_ACTIVATION_OPS:
            n = stack.pop()
            if n is x or n in cone:
                continue
            if source.get(n) is not x:
                cone = set()
                break
            cone.add(n)
            stack.extend(n.all_input_nodes)
        xv, yv = _val(x), _val(y)
        if (not 2 <= len(cone) <= _MAX_ACTIVATION_OPS or cone & replaced or not isinstance(xv, torch.Tensor)
                or yv.shape != xv.shape or yv.dtype != xv.dtype
                or any(u not in cone for n in cone if n is not y for u in n.users)):
            continue
        order = [n for n in gm.graph.nodes if n in cone]
        with unset_fake_temporarily():
            if probe is None:  # once per graph, when a chain is first compared
                probe = _activation_probe()
                references = [reference(probe) for _, _, reference in _KNOWN_ACTIVATIONS]
            values = {x: probe}
            for n in order:
                args = torch.fx.node.map_arg(n.args, lambda a: values[a])
                kwargs = torch.fx.node.map_arg(n.kwargs, lambda a: values[a])
                values[n] = n.target(*args, **kwargs)
            got = values[y]
            matches = [got.shape == probe.shape and torch.allclose(got, want, rtol=1e-6, atol=1e-12)
                       for want in references]
        for (target, kwargs, _), match in zip(_KNOWN_ACTIVATIONS, matches):
            if match:
                with gm.graph.inserting_before(y):
                    act = gm.graph.call_function(target, (x,), dict(kwargs))
                act.meta["val"] = yv
                y.replace_all_uses_with(act)
                for n in reversed(order):
                    gm.graph.erase_node(n)
                replaced |= cone
                break
    return recompiled(gm, replaced)
