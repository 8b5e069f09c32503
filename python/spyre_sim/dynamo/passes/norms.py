"""Norm passes: an RMSNorm written out in ops becomes one ``spyre.rms_norm``, and a
LayerNorm or RMSNorm that only one matmul reads moves into that matmul's kernel as a
prologue on its A panels."""

from __future__ import annotations

import operator

import torch
import torch.fx

from ..graph import _VIEWS, _is_call, _matmul_input, _only_user, _other_arg, _val, recompiled
from ..ir import _FLOATS

aten = torch.ops.aten


def _rms_norm_at(mean: torch.fx.Node):
    """(x, weight, eps, last) when `mean` is the mean of squares of an RMSNorm written
    out, ``x * rsqrt(mean(x ** 2, -1, keepdim=True) + eps) [* weight]`` (Llama's
    reference code; Hugging Face's upcasts x to fp32 first and casts the normalised x
    back before the weight), its inner results read only inside it; `last` is the
    node the norm replaces. None otherwise."""
    if (not _is_call(mean, aten.mean.dim) or len(mean.args) < 3 or mean.args[2] is not True
            or mean.kwargs.get("dtype") is not None):
        return None
    square, dims = mean.args[0], mean.args[1]
    val = _val(mean)
    if val is None or not isinstance(dims, (list, tuple)) or len(dims) != 1 or dims[0] not in (-1, val.dim() - 1):
        return None
    if _is_call(square, aten.pow.Tensor_Scalar) and square.args[1] == 2:
        x = square.args[0]
    elif _is_call(square, aten.mul.Tensor) and len(square.args) == 2 and square.args[0] is square.args[1]:
        x = square.args[0]
    else:
        return None
    add, = mean.users if len(mean.users) == 1 else (None,)
    if (_only_user(square) is not mean or not _is_call(add, aten.add.Tensor) or add.args[0] is not mean
            or not isinstance(add.args[1], (int, float)) or add.kwargs):
        return None
    rsqrt = _only_user(add)
    scaled = _only_user(rsqrt) if _is_call(rsqrt, aten.rsqrt.default) else None
    if not _is_call(scaled, aten.mul.Tensor) or _other_arg(scaled, rsqrt) is not x:
        return None
    xv = _val(x)
    if (xv is None or xv.dtype not in _FLOATS or _val(scaled).shape != xv.shape
            or not isinstance(xv.shape[-1], int)):  # the normalised size is an int (not symbolic)
        return None
    source, last = x, scaled
    # Hugging Face's form: x upcast to fp32 for the statistics, the result cast back.
    if (_is_call(x, aten._to_copy.default) and set(x.kwargs) == {"dtype"} and x.kwargs["dtype"] == torch.float32
            and _val(x.args[0]) is not None and _val(x.args[0]).dtype in (torch.float16, torch.bfloat16)
            and len(x.users) == 2):
        back = _only_user(scaled)
        if (_is_call(back, aten._to_copy.default) and set(back.kwargs) == {"dtype"}
                and back.kwargs["dtype"] == _val(x.args[0]).dtype):
            source, last = x.args[0], back
    elif len(x.users) < 2:
        return None
    weight = None
    user = _only_user(last)
    if _is_call(user, aten.mul.Tensor):
        w = _other_arg(user, last)
        wv = _val(w)
        if (isinstance(w, torch.fx.Node) and wv is not None and wv.dim() == 1 and wv.shape[0] == xv.shape[-1]
                and wv.dtype == _val(last).dtype and _val(user).shape == xv.shape):
            weight, last = w, user
    return source, weight, float(add.args[1]), last


def fuse_rms_norms(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """An RMSNorm written out in elementwise ops and a mean (Llama's and Hugging Face's
    ``LlamaRMSNorm``: pow, mean, add, rsqrt, mul, [casts,] mul by the weight: three
    kernels after fuse_pointwise) becomes one ``torch.ops.spyre.rms_norm`` call, the
    kernel ``nn.RMSNorm`` runs: one read of x and one write. Its statistics are in fp32
    and the normalised x is rounded once to x's dtype before the weight's multiply, as
    PyTorch's rms_norm (and Hugging Face's upcast form) compute; eps is rounded to x's
    dtype, as rms_norm does. Only in graphs that keep none of the inner results (a
    training forward that saves them for its backward keeps its ops)."""
    erased = set()
    for node in list(gm.graph.nodes):
        found = None if node in erased else _rms_norm_at(node)
        if found is None:
            continue
        x, weight, eps, last = found
        inner = []
        stack = [last]
        while stack:  # the pattern's nodes, from the last back to x
            n = stack.pop()
            if n is x or n is weight or n in inner or not isinstance(n, torch.fx.Node):
                continue
            inner.append(n)
            stack.extend(n.all_input_nodes)
        with gm.graph.inserting_before(last):
            norm = gm.graph.call_function(torch.ops.spyre.rms_norm.default,
                                          (x, [_val(x).shape[-1]], weight, eps))
        norm.meta["val"] = _val(last)
        last.replace_all_uses_with(norm)
        for n in [n for n in gm.graph.nodes if n in set(inner)][::-1]:
            if not n.users:
                gm.graph.erase_node(n)
                erased.add(n)
    return recompiled(gm, erased)


def _norm_source(a):
    """(x, kind, weight, bias, eps, [nodes the norm replaces]) when `a`, a matmul's 2-D
    input, is the output of a LayerNorm (``native_layer_norm`` over the last dim whose
    mean and rstd nothing reads) or an RMSNorm (``spyre.rms_norm`` over the last dim, its
    output of x's dtype), seen through views, read by nothing else; x then contiguous,
    of the matmul's dtype, and eps as the norm kernel takes it (RMSNorm's rounded to x's
    dtype, as rms_norm rounds it). None otherwise."""
    chain = []
    node = a
    while _is_call(node, *_VIEWS) and len(node.users) == 1:
        chain.append(node)
        node = node.args[0]
    if not isinstance(node, torch.fx.Node) or len(node.users) != 1:
        return None
    norm = node
    if _is_call(node, operator.getitem) and node.args[1] == 0:
        norm = node.args[0]
        if not _is_call(norm, aten.native_layer_norm.default) or len(norm.users) != 1:
            return None
        x, shape, weight, bias, eps = norm.args[:5]
        kind, nodes = "layer_norm", chain + [node, norm]
    elif _is_call(node, torch.ops.spyre.rms_norm.default):
        x, shape = node.args[:2]
        weight = node.args[2] if len(node.args) > 2 else node.kwargs.get("weight")
        eps = node.args[3] if len(node.args) > 3 else node.kwargs.get("eps")
        bias, kind, nodes = None, "rms_norm", chain + [node]
    else:
        return None
    xv, out = _val(x), _val(node)
    if (not isinstance(xv, torch.Tensor) or not isinstance(out, torch.Tensor) or xv.device.type != "spyre"
            or xv.dtype not in _FLOATS or out.dtype != xv.dtype or not xv.is_contiguous()
            or not isinstance(xv.shape[-1], int) or list(shape) != [xv.shape[-1]]
            or tuple(_val(a).shape[-1:]) != (xv.shape[-1],)):
        return None
    if kind == "rms_norm":
        eps = float(torch.tensor(torch.finfo(xv.dtype).eps if eps is None else eps, dtype=xv.dtype))
    return x, kind, weight, bias, float(eps), nodes


def fuse_norm_prologues(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """Moves a LayerNorm or RMSNorm whose output only one matmul reads (GPT-2's and
    Llama's pre-norms before their QKV projection and feed-forward: an nn.Linear's addmm,
    an mm, or the kernels the passes before made of them, matmul_epilogue, linear_concat
    and linear_gated) into that matmul's kernel as a prologue on its A panels: the cores
    share out the rows' statistics, then normalise each A panel as it arrives, so the
    normalised activations never go to DRAM (compiler::MatmulShape::Norm). The kernel
    computes the norm with the norm kernel's operations, so the values are the eager
    ones."""
    changed = False
    for node in list(gm.graph.nodes):
        found = _matmul_input(node)
        if found is None:
            continue
        a, target, rest = found
        norm = _norm_source(a)
        if norm is None or _val(norm[0]).dtype != _val(node).dtype:
            continue
        x, kind, weight, bias, eps, replaced = norm
        k = _val(x).shape[-1]
        with gm.graph.inserting_before(node):
            x2d = gm.graph.call_function(aten.view.default, (x, [-1, k]))
            x2d.meta["val"] = _val(x).view(-1, k)
            call = gm.graph.call_function(target, (x2d, *rest, kind, weight, bias, eps))
            call.meta["val"] = _val(node)
        node.replace_all_uses_with(call)
        gm.graph.erase_node(node)
        for n in replaced:
            gm.graph.erase_node(n)
        changed = True
    return recompiled(gm, changed)
