"""Layout passes: clones that change nothing are dropped, K and V repeated for
grouped-query attention reach the attention unrepeated, and an integer arange
converted to a float dtype becomes a float arange."""

from __future__ import annotations

import operator

import torch
import torch.fx

from ..graph import _is_call, _val, recompiled

aten = torch.ops.aten


def drop_layout_preserving_clones(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """Removes ``aten.clone`` nodes that change nothing: AOTAutograd writes eval-mode
    dropout as a clone, and a clone of a contiguous tensor read only by other ops of a
    graph that mutates nothing is that tensor (each would be a device copy, a pass over
    DRAM for nothing). Kept: clones that change the layout (their readers may need it),
    clones the graph returns (outputs must not alias), and every clone of a graph with
    an in-place op (the clone may hold a value from before the mutation)."""
    nodes = list(gm.graph.nodes)
    for node in nodes:
        schema = getattr(node.target, "_schema", None) if node.op == "call_function" else None
        if schema is not None and schema.is_mutable:
            return gm
    # The graph's outputs and what they view: a clone seen through a view by an output
    # stays, else that output would alias the clone's source.
    outputs, todo = set(), []
    for node in nodes:
        if node.op == "output":
            torch.fx.node.map_arg(node.args, todo.append)
    while todo:
        n = todo.pop()
        if n in outputs:
            continue
        outputs.add(n)
        schema = getattr(n.target, "_schema", None) if n.op == "call_function" else None
        aliases = schema is not None and schema.returns and schema.returns[0].alias_info is not None
        if aliases or n.target is operator.getitem:
            todo.extend(a for a in n.args if isinstance(a, torch.fx.Node))
    changed = False
    for node in nodes:
        if node.op != "call_function" or node.target is not aten.clone.default or node in outputs:
            continue
        src = node.args[0]
        src_val, val = (_val(src) if isinstance(src, torch.fx.Node) else None), _val(node)
        if not isinstance(src_val, torch.Tensor) or not isinstance(val, torch.Tensor):
            continue
        if not src_val.is_contiguous() or src_val.stride() != val.stride() or src_val.dtype != val.dtype:
            continue
        node.replace_all_uses_with(src)
        gm.graph.erase_node(node)
        changed = True
    return recompiled(gm, changed)


def _without_full_slices(node):
    """`node` with the slices that keep a whole dim (``x[:, :]``) peeled off."""
    while (_is_call(node, aten.slice.Tensor) and len(node.args) >= 4 and node.args[2] == 0
           and (len(node.args) < 5 or node.args[4] == 1) and not node.kwargs):
        src, dim, end = node.args[0], node.args[1], node.args[3]
        shape = _val(src).shape if isinstance(_val(src), torch.Tensor) else None
        if shape is None or not isinstance(end, int) or end < shape[dim]:
            break
        node = src
    return node


def _repeated_kv_source(node):
    """K (or V) of shape [b, kv_heads, s, d] when `node` is its heads repeated for grouped-
    query attention the way Llama's reference code and Hugging Face's ``repeat_kv`` do it
    (``k[:, :, None].expand(b, kv_heads, groups, s, d).reshape(b, kv_heads * groups, s, d)``:
    a copy of the whole K), read by nothing else; else None."""
    if not _is_call(node, aten._unsafe_view.default, aten.view.default, aten.reshape.default):
        return None
    inner = node.args[0]
    if _is_call(inner, aten.clone.default) and len(inner.users) == 1:
        inner = inner.args[0]
    if not _is_call(inner, aten.expand.default) or len(inner.users) != 1:
        return None
    unsqueezed = _without_full_slices(inner.args[0])
    if not _is_call(unsqueezed, aten.unsqueeze.default) or unsqueezed.args[1] != 2:
        return None
    k = _without_full_slices(unsqueezed.args[0])
    kv, out, expanded = _val(k), _val(node), _val(inner)
    if not all(isinstance(t, torch.Tensor) for t in (kv, out, expanded)) or kv.dim() != 4 or expanded.dim() != 5:
        return None
    b, heads, s, d = kv.shape
    groups = expanded.shape[2]
    if (tuple(expanded.shape) != (b, heads, groups, s, d) or tuple(out.shape) != (b, heads * groups, s, d)
            or groups < 2):
        return None
    return k


# The ops a repeat of K or V is made of (what drop_repeated_kv erases once unread).
_REPEAT_OPS = (aten._unsafe_view.default, aten.view.default, aten.reshape.default, aten.clone.default,
               aten.expand.default, aten.unsqueeze.default, aten.slice.Tensor)


def drop_repeated_kv(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """Grouped-query attention with K and V repeated to every query head before the
    attention (Llama's reference code, Hugging Face's ``repeat_kv``): the attention takes
    the K and V of the KV heads themselves, as ``enable_gqa=True`` would give it (the
    fused kernel infers the groups from the head counts, and reads each KV head once per
    group of query heads), and the two copies of K and V (with a KV cache: of the whole
    cache, every token) are not made. The result is the same: every query head attends
    to the same values."""
    erased = False
    for node in list(gm.graph.nodes):
        if not _is_call(node, aten._scaled_dot_product_fused_attention_overrideable.default):
            continue
        q = _val(node.args[0])
        args = list(node.args)
        for i in (1, 2):
            repeated = args[i]
            source = _repeated_kv_source(repeated) if isinstance(repeated, torch.fx.Node) else None
            if source is None or len(repeated.users) != 1 or not isinstance(q, torch.Tensor):
                continue
            if q.dim() != 4 or q.shape[1] != _val(repeated).shape[1]:
                continue
            args[i] = source
        if args != list(node.args):
            old = [a for a in node.args[1:3] if isinstance(a, torch.fx.Node)]
            node.args = tuple(args)
            stack = old
            while stack:  # the repeats' nodes nothing reads any more
                n = stack.pop()
                if _is_call(n, *_REPEAT_OPS) and not n.users:
                    stack.extend(n.all_input_nodes)
                    gm.graph.erase_node(n)
                    erased = True
    return recompiled(gm, erased)


_ARANGES = (aten.arange.default, aten.arange.start, aten.arange.start_step)


def fold_conversions_into_arange(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """``arange(...)`` of integers converted to a float dtype (``torch.arange(n).float()``,
    rotary embeddings' positions) becomes ``arange(..., dtype=float)``: one kernel
    instead of an integer sequence and a conversion. The values are the same: an integer
    arange's values are exact, and a float arange of integer bounds computes each value
    exactly before its one rounding, as the conversion rounds it. Only when the integer
    sequence has no other reader."""
    changed = False
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target is not aten._to_copy.default:
            continue
        dtype = node.kwargs.get("dtype")
        src = node.args[0]
        if (set(node.kwargs) - {"dtype"} or dtype not in (torch.float32, torch.float16, torch.bfloat16)
                or not isinstance(src, torch.fx.Node) or src.op != "call_function" or src.target not in _ARANGES
                or len(src.users) != 1 or src.kwargs.get("dtype", torch.int64) != torch.int64):
            continue
        if any(isinstance(a, float) for a in src.args):
            continue
        with gm.graph.inserting_before(node):
            folded = gm.graph.call_function(src.target, src.args, {**src.kwargs, "dtype": dtype})
        folded.meta.update(node.meta)
        node.replace_all_uses_with(folded)
        gm.graph.erase_node(node)
        gm.graph.erase_node(src)
        changed = True
    return recompiled(gm, changed)
