"""Feed-forward passes: a transformer block's two linears with an activation between them
(plain or gated) become one ``spyre.mlp`` call, and the attention projection whose
result, plus the residual, feeds that half moves into the same call."""

from __future__ import annotations

import torch
import torch.fx

from ..graph import _VIEWS, _erase_unread, _linear_weight, _matmul_input, _val, _view_root, recompiled


def fuse_mlps(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """Replaces a transformer block's feed-forward half, two nn.Linears with an activation
    between them, ``act(x @ w1.t() + b1) @ w2.t() + b2`` (+ a residual; x possibly
    normalised by a prologue), with one ``torch.ops.spyre.mlp`` call: after the passes
    before, the first linear's matmul_epilogue whose result (through views) only the
    second's reads, as its input. The kernel splits the hidden units over the cores and
    reduces the second product over the ring (compiler::compile_mlp), so the hidden
    activation never goes to DRAM; it rounds as the two kernels do. A gated first half
    (SwiGLU's ``linear_gated``, Llama's feed-forward) is taken the same way, its up
    projection's weight as the call's ``up_weight``."""
    epilogue, gated = torch.ops.spyre.matmul_epilogue.default, torch.ops.spyre.linear_gated.default
    changed = False
    for node in list(gm.graph.nodes):
        found = _matmul_input(node)  # (the second linear: a matmul_epilogue, an addmm or an mm)
        if found is None or found[1] is not epilogue:
            continue
        a2, (b2, bias2, act2, residual, residual_op) = found[0], found[2]
        first, views = _view_root(a2)
        if (act2 or residual_op != "add" or not isinstance(first, torch.fx.Node) or first.op != "call_function"
                or first.target not in (epilogue, gated) or first.kwargs or len(first.users) != 1 or first is node):
            continue
        up = None
        if first.target is gated:  # (input, gate, up, activation[, norm, weight, bias, eps])
            a1, w1, up, act1, kind, norm_w, norm_b, eps = list(first.args) + ["", None, None, 0.0][len(first.args) - 4:]
            b1 = bias1 = residual1 = None
        else:
            args1 = list(first.args) + [None, "add", "", None, None, 0.0][len(first.args) - 4:]
            a1, b1, bias1, act1, residual1, _, kind, norm_w, norm_b, eps = args1[:10]
            w1 = _linear_weight(b1)
        w2 = _linear_weight(b2)
        x_val, h_val, out = _val(a1), _val(first), _val(node)
        if (residual1 is not None or w1 is None or w2 is None or not isinstance(x_val, torch.Tensor)
                or not isinstance(h_val, torch.Tensor) or not isinstance(out, torch.Tensor) or x_val.dim() != 2
                or tuple(_val(a2).shape) != tuple(h_val.shape) or x_val.dtype != out.dtype
                or tuple(out.shape) != tuple(x_val.shape) or tuple(_val(w2).shape) != tuple(reversed(_val(w1).shape))):
            continue
        with gm.graph.inserting_before(node):
            call = gm.graph.call_function(torch.ops.spyre.mlp.default,
                                          (a1, w1, bias1, act1, w2, bias2, residual, kind, norm_w, norm_b, eps)
                                          + ((None, None, None, up) if up is not None else ()))
            call.meta["val"] = out
        node.replace_all_uses_with(call)
        gm.graph.erase_node(node)
        for v in views:
            gm.graph.erase_node(v)
        gm.graph.erase_node(first)
        _erase_unread(gm, [b1, b2])
        changed = True
    return recompiled(gm, changed)


def _read_only_through_views_by(node, reader):
    """The views of `node` (views of views...) when every read of it goes through them to
    `reader` alone, else None."""
    views, stack = [], [node]
    while stack:
        for user in stack.pop().users:
            if user is reader:
                continue
            if user.op != "call_function" or user.target not in _VIEWS:
                return None
            views.append(user)
            stack.append(user)
    return views


def fuse_mlp_projections(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """Moves the linear before a feed-forward half into its kernel when its result, with a
    residual added, is both the half's input and its residual, and nothing else reads it:
    a transformer block's ``x1 = x + attn_proj(a)`` then ``x1 + mlp(norm(x1))`` (GPT-2's
    second half). The ``spyre.mlp`` call takes x, a, the projection's weight and bias
    (``proj_input``...): its kernel computes x1 over the ring and keeps each core's rows
    of it on chip (compiler::MlpShape::Projection), so x1 is neither written nor read back.
    The values are the two kernels', to the order of the fp32 sums."""
    epilogue, mlp = torch.ops.spyre.matmul_epilogue.default, torch.ops.spyre.mlp.default
    changed = False
    for node in list(gm.graph.nodes):
        if (node.op != "call_function" or node.target is not mlp or node.kwargs or len(node.args) not in (11, 15)
                or any(v is not None for v in node.args[11:14])):
            continue
        a, w1, b1, act, w2, b2, residual, kind, norm_w, norm_b, eps = node.args[:11]
        up = node.args[14] if len(node.args) == 15 else None
        source, _ = _view_root(a, read_once=False)
        if residual is None or _view_root(residual, read_once=False)[0] is not source:
            continue
        if (source.op != "call_function" or source.target is not epilogue or source.kwargs
                or len(source.args) != 6 or source.args[3] or source.args[5] != "add" or source.args[4] is None):
            continue
        p_in, b_proj, bias_proj, _, x, _ = source.args
        wp = _linear_weight(b_proj)
        views = _read_only_through_views_by(source, node)
        x_val, out = _val(x), _val(node)
        if (wp is None or views is None or not isinstance(x_val, torch.Tensor) or x_val.dim() != 2
                or tuple(x_val.shape) != tuple(out.shape) or x_val.dtype != out.dtype):
            continue
        with gm.graph.inserting_before(node):
            call = gm.graph.call_function(mlp, (x, w1, b1, act, w2, b2, None, kind, norm_w, norm_b, eps,
                                                p_in, wp, bias_proj) + ((up,) if up is not None else ()))
            call.meta["val"] = out
        node.replace_all_uses_with(call)
        gm.graph.erase_node(node)
        for v in reversed(views):
            if not v.users:
                gm.graph.erase_node(v)
        gm.graph.erase_node(source)
        _erase_unread(gm, [b_proj])
        changed = True
    return recompiled(gm, changed)
