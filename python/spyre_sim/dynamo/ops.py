"""Op tables: how each aten op the fused kernel takes becomes IR steps (FUSIBLE_OPS, one
entry per row of the backend's op table, backend/aten/op_table.h), and the activations
a matmul or convolution kernel applies in its epilogue."""

from __future__ import annotations

from typing import Callable

import torch
import torch.fx

from .graph import _val
from .ir import _DTYPE_NAMES

aten = torch.ops.aten


def _unary(op: str):
    return lambda p, v, n: p.emit("unary", op, "fp32", v(n.args[0]))


def _binary(op: str):
    def emit(p, v, n):
        alpha = n.kwargs.get("alpha", 1)
        b = v(n.args[1])
        if alpha != 1:
            b = p.emit("binary", "mul", "fp32", b, p.value(float(alpha), {}))
        return p.emit("binary", op, "fp32", v(n.args[0]), b)

    return emit


def _compare(op: str):
    def emit(p, v, n):
        a, b = n.args[0], n.args[1]
        if not isinstance(b, torch.fx.Node) and isinstance(_val(a), torch.Tensor):
            # As eager compares: the scalar rounded to the tensor's dtype first.
            b = torch.tensor(float(b), dtype=_val(a).dtype).item()
        return p.emit("compare", op, "fp32", v(a), v(b))

    return emit


def _rsub(p, v, n):  # other - alpha * self
    alpha = n.kwargs.get("alpha", 1)
    x = v(n.args[0])
    if alpha != 1:
        x = p.emit("binary", "mul", "fp32", x, p.value(float(alpha), {}))
    return p.emit("binary", "sub", "fp32", v(n.args[1]), x)


def _clamp(p, v, n):
    lo = n.args[1] if len(n.args) > 1 else n.kwargs.get("min")
    hi = n.args[2] if len(n.args) > 2 else n.kwargs.get("max")
    x = v(n.args[0])
    if lo is not None:
        x = p.emit("binary", "max", "fp32", x, v(lo))
    if hi is not None:
        x = p.emit("binary", "min", "fp32", x, v(hi))
    return x


def _pow(p, v, n):
    # The eager kernel's own steps for the exponent (torch.ops.spyre.pow_program, the one
    # C++ list; _fusible admits only exponents that have them), spliced in.
    x, e = v(n.args[0]), float(n.args[1])
    words = torch.ops.spyre.pow_program(e)
    if not words:
        raise ValueError(f"pow exponent {e} has no device steps (torch.ops.spyre.pow_exponents())")
    return p.splice(words, [x])


def _gelu(p, v, n):
    approximate = n.kwargs.get("approximate", n.args[1] if len(n.args) > 1 else "none")
    return p.emit("unary", "gelu_tanh" if approximate == "tanh" else "gelu", "fp32", v(n.args[0]))


def _to_copy(p, v, n):
    return p.emit("convert", _DTYPE_NAMES[n.kwargs["dtype"]], v(n.args[0]))


# Ops with their own device kernels (several steps, or arguments beyond tensors):
# aten overload name -> how it becomes steps. Which of them are fusible is the C++
# table's decision (torch.ops.spyre.fusible_ops); every one it lists needs an entry.
_COMPOSITE_EMITTERS: dict[str, Callable] = {
    "rsub.Scalar": _rsub,
    "clamp.default": _clamp,
    "clamp_min.default": _clamp,
    "clamp_max.default": lambda p, v, n: p.emit("binary", "min", "fp32", v(n.args[0]), v(n.args[1])),
    "pow.Tensor_Scalar": _pow,
    "gelu.default": _gelu,
    "where.self": lambda p, v, n: p.emit("select", "fp32", v(n.args[0]), v(n.args[1]), v(n.args[2])),
    "_to_copy.default": _to_copy,
}


def _aten_overload(name: str):
    packet, overload = name.split(".")
    return getattr(getattr(aten, packet), overload)


def _fusible_ops() -> dict[object, Callable]:
    """aten op -> how it becomes steps, for every row of the backend's op table
    (backend/aten/op_table.h, read through torch.ops.spyre.fusible_ops)."""
    table: dict[object, Callable] = {}
    for row in torch.ops.spyre.fusible_ops():
        family, name, *op = row.split(" ")
        if family == "composite":
            if name not in _COMPOSITE_EMITTERS:
                raise RuntimeError(f"spyre_sim.dynamo: the op table fuses {name} but no emitter writes its steps")
            table[_aten_overload(name)] = _COMPOSITE_EMITTERS[name]
        else:
            table[_aten_overload(name)] = {"unary": _unary, "binary": _binary, "compare": _compare}[family](op[0])
    return table


# aten op -> how it becomes steps (each emitter returns the value of its result).
FUSIBLE_OPS: dict[object, Callable] = _fusible_ops()


def _epilogue_activations() -> tuple[dict[object, str], frozenset[str]]:
    """The activations a matmul kernel applies in its epilogue (aten op -> the name
    matmul_epilogue takes; gelu's tanh form is told apart by _activation_of), and the
    names linear_gated takes as a gate's: from the backend's one table
    (backend/aten/op_table.h, read through torch.ops.spyre.epilogue_activations)."""
    by_op: dict[object, str] = {}
    gates = set()
    for row in torch.ops.spyre.epilogue_activations():
        name, overload, gate = row.split(" ")
        by_op.setdefault(_aten_overload(overload), name)
        if gate == "1":
            gates.add(name)
    return by_op, frozenset(gates)


_EPILOGUE_ACTIVATIONS, GATE_ACTIVATIONS = _epilogue_activations()


def _activation_of(node):
    """The epilogue name of `node` when it is an activation the kernels apply, else None."""
    if node.op != "call_function" or node.target not in _EPILOGUE_ACTIVATIONS:
        return None
    if node.target is aten.gelu.default:
        approximate = node.kwargs.get("approximate", node.args[1] if len(node.args) > 1 else "none")
        return "gelu_tanh" if approximate == "tanh" else "gelu"
    return _EPILOGUE_ACTIVATIONS[node.target]
