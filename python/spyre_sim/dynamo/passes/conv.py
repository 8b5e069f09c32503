"""Convolution pass: an inference batch norm and/or an activation after a convolution
move into the convolution kernel's epilogue (``spyre.conv_epilogue``)."""

from __future__ import annotations

import operator

import torch
import torch.fx

from ..graph import _emit, _val, recompiled
from ..ir import _FLOATS
from ..ops import _activation_of

aten = torch.ops.aten


def fuse_conv_epilogues(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """Replaces a convolution followed by an inference batch norm
    (``_native_batch_norm_legit_no_training``, what a model in eval mode gives) and/or an
    activation, each read by nothing else, with one ``torch.ops.spyre.conv_epilogue``
    call: the batch norm is folded into a per-channel scale and shift, scale = gamma /
    sqrt(running_var + eps) and shift = beta - running_mean x scale (+ the convolution's
    bias x scale), computed in fp32 by small pointwise kernels over the channels, and the
    convolution kernel applies them and the activation to its fp32 tiles before its one
    rounding, so the batch norm's and the activation's passes over the feature map are
    gone. (The values differ from eager ones only by the roundings saved.)"""
    changed = False
    for conv in list(gm.graph.nodes):
        if conv.op != "call_function" or conv.target is not aten.convolution.default or len(conv.users) != 1:
            continue
        x, w, bias, stride, padding, dilation, transposed, output_padding, groups = conv.args[:9]
        out = _val(conv)
        if (transposed or any(output_padding) or not isinstance(out, torch.Tensor) or out.device.type != "spyre"
                or out.dtype not in _FLOATS or out.dim() not in (3, 4) or _val(w).dtype != out.dtype):
            continue
        tail, scale, shift = conv, None, bias
        bn = next(iter(conv.users))
        if (bn.op == "call_function" and bn.target is aten._native_batch_norm_legit_no_training.default
                and bn.args[0] is conv and len(bn.users) == 1):
            item = next(iter(bn.users))
            if item.op == "call_function" and item.target is operator.getitem and item.args[1] == 0:
                _, gamma, beta, mean, var = bn.args[:5]
                eps = bn.args[6] if len(bn.args) > 6 else bn.kwargs.get("eps", 1e-5)
                with gm.graph.inserting_before(conv):
                    f32 = dict(dtype=torch.float32)
                    as32 = lambda t: t if _val(t).dtype == torch.float32 else _emit(gm, aten._to_copy.default, (t,), f32)  # noqa: E731
                    scale = _emit(gm, aten.rsqrt.default, (_emit(gm, aten.add.Tensor, (as32(var), eps)),))
                    if gamma is not None:
                        scale = _emit(gm, aten.mul.Tensor, (scale, as32(gamma)))
                    centre = as32(mean) if bias is None else _emit(gm, aten.sub.Tensor, (as32(mean), as32(bias)))
                    shift = _emit(gm, aten.neg.default, (_emit(gm, aten.mul.Tensor, (centre, scale)),))
                    if beta is not None:
                        shift = _emit(gm, aten.add.Tensor, (shift, as32(beta)))
                tail = item
        act = ""
        if len(tail.users) == 1:
            act = _activation_of(next(iter(tail.users))) or ""
            if act:
                tail = next(iter(tail.users))
        if tail is conv:
            continue  # a plain convolution: nothing to fuse
        with gm.graph.inserting_before(tail):
            call = gm.graph.call_function(torch.ops.spyre.conv_epilogue.default,
                                          (x, w, shift, scale, stride, padding, dilation, groups, act))
            call.meta["val"] = _val(tail)
        tail.replace_all_uses_with(call)
        node = tail
        while node is not conv:  # the activation, the getitem, the batch norm, then the convolution
            previous = node.args[0]
            gm.graph.erase_node(node)
            node = previous
        gm.graph.erase_node(conv)
        changed = True
    return recompiled(gm, changed)
