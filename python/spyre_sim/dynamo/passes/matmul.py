"""Matmul passes: an activation after a matmul, and a residual add or a multiply of its
result, move into the matmul kernel's epilogue (``spyre.matmul_epilogue``); SwiGLU's
gate and up projections become one ``spyre.linear_gated``; linears without bias that
read one input become one ``spyre.linear_concat``."""

from __future__ import annotations

import torch
import torch.fx

from ..graph import _VIEWS, _erase_unread, _linear_weight, _val, recompiled
from ..ir import _FLOATS
from ..ops import _EPILOGUE_ACTIVATIONS, GATE_ACTIVATIONS

aten = torch.ops.aten


def fuse_matmul_epilogues(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """Replaces an activation whose input is an mm, or an addmm with a row bias (nn.Linear),
    read by nothing else with one ``torch.ops.spyre.matmul_epilogue`` call: the matmul
    kernel adds the bias and applies the activation to its fp32 tiles before rounding."""
    for node in list(gm.graph.nodes):
        act = _EPILOGUE_ACTIVATIONS.get(node.target) if node.op == "call_function" else None
        if act is None or not isinstance(node.args[0], torch.fx.Node):
            continue
        if node.target is aten.gelu.default:
            approximate = node.kwargs.get("approximate", node.args[1] if len(node.args) > 1 else "none")
            act = "gelu_tanh" if approximate == "tanh" else "gelu"
        mm, view = node.args[0], None
        if mm.op == "call_function" and mm.target in _VIEWS and len(mm.users) == 1 and isinstance(mm.args[0], torch.fx.Node):
            # Linear on a batch of sequences: mm, then a view back to 3-D (the activation,
            # elementwise, commutes with it).
            mm, view = mm.args[0], mm
        if mm.op != "call_function" or mm.target not in (aten.mm.default, aten.addmm.default) or len(mm.users) != 1:
            continue
        out = _val(mm)
        if not isinstance(out, torch.Tensor) or out.device.type != "spyre" or out.dtype not in _FLOATS:
            continue
        if mm.target is aten.addmm.default:
            bias, a, b = mm.args[:3]
            bias_val = _val(bias)
            n = out.shape[-1]
            if (mm.kwargs.get("beta", 1) != 1 or mm.kwargs.get("alpha", 1) != 1 or len(mm.args) > 3
                    or not isinstance(bias_val, torch.Tensor) or bias_val.dtype != out.dtype
                    or tuple(bias_val.shape) not in ((n,), (1, n))):
                continue
        else:
            bias, (a, b) = None, mm.args[:2]
        with gm.graph.inserting_before(node):
            call = gm.graph.call_function(torch.ops.spyre.matmul_epilogue.default, (a, b, bias, act))
            call.meta["val"] = _val(mm) if view is not None else _val(node)
            result = call
            if view is not None:
                result = gm.graph.call_function(view.target, (call,) + tuple(view.args[1:]), dict(view.kwargs))
                result.meta["val"] = _val(node)
        node.replace_all_uses_with(result)
        gm.graph.erase_node(node)
        if view is not None:
            gm.graph.erase_node(view)
        gm.graph.erase_node(mm)
    return recompiled(gm)


def _matmul_producer(arg):
    """(matmul node, view node or None) when `arg` is an mm, an addmm (beta = alpha = 1,
    row bias of the product's dtype), or a matmul_epilogue without a residual, on spyre
    float tensors, possibly seen through a view, and read by nothing else."""
    if not isinstance(arg, torch.fx.Node) or arg.op != "call_function":
        return None
    mm, view = arg, None
    if mm.target in _VIEWS and len(mm.users) == 1 and isinstance(mm.args[0], torch.fx.Node):
        mm, view = mm.args[0], mm
    if mm.op != "call_function" or len(mm.users) != 1:
        return None
    out = _val(mm)
    if not isinstance(out, torch.Tensor) or out.device.type != "spyre" or out.dtype not in _FLOATS or out.dim() != 2:
        return None
    if mm.target is aten.mm.default:
        return mm, view
    if mm.target is aten.addmm.default:
        bias_val, n = _val(mm.args[0]), out.shape[-1]
        if (mm.kwargs.get("beta", 1) != 1 or mm.kwargs.get("alpha", 1) != 1 or len(mm.args) > 3
                or not isinstance(bias_val, torch.Tensor) or bias_val.dtype != out.dtype
                or tuple(bias_val.shape) not in ((n,), (1, n))):
            return None
        return mm, view
    if mm.target is torch.ops.spyre.matmul_epilogue.default and (len(mm.args) < 5 or mm.args[4] is None):
        return mm, view
    return None


_COMBINED = {aten.add.Tensor: "add", aten.mul.Tensor: "mul"}


def fuse_matmul_residuals(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """Replaces ``x + matmul`` and ``x * matmul`` (an mm, nn.Linear's addmm or a matmul
    with an activation epilogue, possibly reshaped, read by nothing else; x a contiguous
    tensor of the same shape and dtype) with one ``torch.ops.spyre.matmul_epilogue`` call
    whose kernel adds x to (a residual connection) or multiplies it into (SwiGLU's
    ``silu(gate) * up``) each finished tile, without the op's own pass over DRAM. The
    product is rounded to its dtype first, as eagerly, so the values are the eager ones."""
    changed = False
    for node in list(gm.graph.nodes):
        if (node.op != "call_function" or node.target not in _COMBINED or len(node.args) != 2
                or node.kwargs.get("alpha", 1) != 1):
            continue
        out = _val(node)
        if not isinstance(out, torch.Tensor):
            continue
        for product, residual in ((node.args[1], node.args[0]), (node.args[0], node.args[1])):
            found = _matmul_producer(product)
            res_val = _val(residual)
            if found is None or not isinstance(res_val, torch.Tensor) or residual is product:
                continue
            mm, view = found
            mm_val = _val(mm)
            if (res_val.dtype != mm_val.dtype or out.dtype != mm_val.dtype or tuple(res_val.shape) != tuple(out.shape)
                    or tuple(_val(product).shape) != tuple(out.shape) or res_val.device != mm_val.device
                    or not res_val.is_contiguous() or res_val.numel() != mm_val.numel()):
                continue
            if mm.target is torch.ops.spyre.matmul_epilogue.default:
                a, b, bias, act = mm.args[:4]
            elif mm.target is aten.addmm.default:
                bias, a, b, act = mm.args[0], mm.args[1], mm.args[2], ""
            else:
                bias, (a, b), act = None, mm.args[:2], ""
            n_cols = mm_val.shape[-1]
            reshape = res_val.dim() != 2
            if reshape and not isinstance(n_cols, int):
                continue  # (a symbolic width: the rows' view would need a size node)
            with gm.graph.inserting_before(node):
                res2d = residual
                if reshape:
                    # [-1, n]: the rows may be a symbolic size (dynamic=True), the width is not.
                    res2d = gm.graph.call_function(aten.view.default, (residual, [-1, n_cols]))
                    res2d.meta["val"] = res_val.view(-1, n_cols)
                call = gm.graph.call_function(torch.ops.spyre.matmul_epilogue.default,
                                              (a, b, bias, act, res2d, _COMBINED[node.target]))
                call.meta["val"] = mm_val
                result = call
                if view is not None:
                    result = gm.graph.call_function(view.target, (call,) + tuple(view.args[1:]), dict(view.kwargs))
                    result.meta["val"] = out
            node.replace_all_uses_with(result)
            gm.graph.erase_node(node)
            if view is not None:
                gm.graph.erase_node(view)
            gm.graph.erase_node(mm)
            changed = True
            break
    return recompiled(gm, changed)


def _input_key(a):
    """One key for a tensor and every equal view of one tensor (AOTAutograd gives each
    linear of a 3-D input its own view to 2-D)."""
    return (a.args[0], tuple(_val(a).shape)) if a.op == "call_function" and a.target in _VIEWS else (a, None)


def fuse_gated_linears(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """Replaces a gate, ``act(x @ w1.t()) * (x @ w3.t())`` (SwiGLU's feed-forward, after
    fuse_matmul_epilogues and fuse_matmul_residuals made it a matmul whose epilogue
    multiplies by the other matmul's result), with one ``torch.ops.spyre.linear_gated``
    call: both products from one read of x, and the gate's never goes to DRAM. Both
    linears without bias, the activation on at most one of them; each product is
    rounded as in the two kernels it replaces."""
    changed = False
    for node in list(gm.graph.nodes):
        if (node.op != "call_function" or node.target is not torch.ops.spyre.matmul_epilogue.default
                or len(node.args) < 6 or node.args[5] != "mul" or node.args[2] is not None):
            continue
        chain, other = [], node.args[4]
        while (isinstance(other, torch.fx.Node) and other.op == "call_function" and other.target in _VIEWS
               and len(other.users) == 1):
            chain.append(other)
            other = other.args[0]
        if (not isinstance(other, torch.fx.Node) or other.target is not torch.ops.spyre.matmul_epilogue.default
                or len(other.users) != 1 or other.args[2] is not None
                or (len(other.args) > 4 and other.args[4] is not None)):
            continue
        w_up, w_other = _linear_weight(node.args[1]), _linear_weight(other.args[1])
        if w_up is None or w_other is None or _input_key(node.args[0]) != _input_key(other.args[0]):
            continue
        if tuple(_val(w_up).shape) != tuple(_val(w_other).shape) or _val(w_up).dtype != _val(node).dtype:
            continue
        if node.args[3] and other.args[3]:
            continue  # an activation on both sides
        gate, up, act = (w_up, w_other, node.args[3]) if node.args[3] else (w_other, w_up, other.args[3])
        if act and act not in GATE_ACTIVATIONS:
            continue  # linear_gated does not take it (backend/aten/op_table.h); the two kernels stay
        with gm.graph.inserting_before(node):
            call = gm.graph.call_function(torch.ops.spyre.linear_gated.default, (node.args[0], gate, up, act))
        call.meta["val"] = _val(node)
        node.replace_all_uses_with(call)
        operands = [node.args[1], other.args[0], other.args[1]]
        gm.graph.erase_node(node)
        for n in chain:
            gm.graph.erase_node(n)
        gm.graph.erase_node(other)
        _erase_unread(gm, operands)  # the transposes (and a view of x)
        changed = True
    return recompiled(gm, changed)


def fuse_shared_input_linears(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """Replaces linears without bias that read one input (``mm(x, w.t())`` with the same x,
    or the same view of one tensor; attention's Q, K and V projections) with one
    ``torch.ops.spyre.linear_concat`` call: one kernel reads x once for all of them, and
    each projection is a column slice of its result. The products are the separate
    mms' (fp32 accumulation, one rounding; the simulator's fp32 sums follow the host
    BLAS's order for the tile's shape, so the last bit may differ)."""
    groups: dict = {}
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target is not aten.mm.default or len(node.args) != 2:
            continue
        a, b = node.args
        w, out = _linear_weight(b), _val(node)
        if (w is None or not isinstance(a, torch.fx.Node) or not isinstance(out, torch.Tensor)
                or out.device.type != "spyre" or out.dtype not in _FLOATS or _val(w).dtype != out.dtype):
            continue
        # The same input seen through equal views counts as one input.
        groups.setdefault(_input_key(a), []).append((node, w))
    changed = False
    for members in groups.values():
        if len(members) < 2:
            continue
        first = members[0][0]
        a = first.args[0]
        widths = [_val(w).shape[0] for _, w in members]
        with gm.graph.inserting_before(first):
            call = gm.graph.call_function(torch.ops.spyre.linear_concat.default, (a, [w for _, w in members]))
            a_val = _val(a)
            call.meta["val"] = a_val.new_empty((a_val.shape[0], sum(widths)))
            at = 0
            for (mm, _), width in zip(members, widths):
                piece = gm.graph.call_function(aten.slice.Tensor, (call, 1, at, at + width))
                piece.meta["val"] = call.meta["val"][:, at:at + width]
                mm.replace_all_uses_with(piece)
                at += width
        for mm, _ in members:
            operands = mm.args
            gm.graph.erase_node(mm)
            _erase_unread(gm, operands)  # the transposes (and views of x)
        changed = True
    return recompiled(gm, changed)
