"""Pointwise passes: connected groups of fusible elementwise ops (rotary embeddings'
rotate_half among them) become one ``spyre.fused_pointwise`` kernel each, and fused
kernels applying one program to adjacent column slices of one linear_concat result
(rotary embeddings of Q and of K) merge into one."""

from __future__ import annotations

import math

import torch
import torch.fx

from ..graph import _LAYOUTS, _VIEWS, _val, recompiled
from ..ir import _FLOATS, _Program
from ..ops import FUSIBLE_OPS

aten = torch.ops.aten


def _slice_of_last_dim(node):
    """(x, start, end) when node is x[..., start:end] (step 1) of a tensor x, else None."""
    if not isinstance(node, torch.fx.Node) or node.op != "call_function" or node.target is not aten.slice.Tensor:
        return None
    x, dim, start, end, step = (list(node.args) + [0, None, None, 1][len(node.args) - 1:])[:5]
    x_val = _val(x)
    if not isinstance(x_val, torch.Tensor) or step != 1 or not isinstance(dim, int):
        return None
    size = x_val.shape[-1]
    if dim % x_val.dim() != x_val.dim() - 1 or not isinstance(size, int):
        return None
    start = 0 if start is None else start
    end = size if end is None else end
    if not isinstance(start, int) or not isinstance(end, int):
        return None
    start, end = (s + size if s < 0 else s for s in (start, end))
    return x, max(0, min(start, size)), max(0, min(end, size))


def _rotate_half_source(node):
    """x when node is ``cat([-x[..., h:], x[..., :h]], dim=-1)`` (rotary embeddings'
    rotate_half) of a spyre float tensor x whose last dim is 2h, else None."""
    if node.op != "call_function" or node.target is not aten.cat.default:
        return None
    parts = node.args[0]
    dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)
    out = _val(node)
    if (not isinstance(out, torch.Tensor) or out.device.type != "spyre" or out.dtype not in _FLOATS
            or len(parts) != 2 or not isinstance(dim, int) or dim % out.dim() != out.dim() - 1):
        return None
    neg, lo = parts
    if not isinstance(neg, torch.fx.Node) or neg.op != "call_function" or neg.target is not aten.neg.default:
        return None
    hi, lo = _slice_of_last_dim(neg.args[0]), _slice_of_last_dim(lo)
    if hi is None or lo is None or hi[0] is not lo[0]:
        return None
    x = hi[0]
    x_val = _val(x)
    size = x_val.shape[-1]
    if (size % 2 or hi[1:] != (size // 2, size) or lo[1:] != (0, size // 2) or x_val.dtype != out.dtype
            or x_val.device != out.device or tuple(x_val.shape) != tuple(out.shape)):
        return None
    return x


def _fusible(node: torch.fx.Node) -> bool:
    """A pointwise aten op on spyre tensors the fused kernel computes exactly as aten
    does (up to the rounding of inner results)."""
    if node.op == "call_function" and _rotate_half_source(node) is not None:
        return True
    if node.op != "call_function" or node.target not in FUSIBLE_OPS:
        return False
    out = _val(node)
    if not isinstance(out, torch.Tensor) or out.device.type != "spyre" or out.dtype not in _FLOATS + (torch.bool,):
        return False
    if out.dtype == torch.bool and node.target in (aten.where.self, aten._to_copy.default):
        return False
    for arg in list(node.args) + list(node.kwargs.values()):
        if isinstance(arg, torch.fx.Node):
            v = _val(arg)
            if not isinstance(v, torch.Tensor) or v.dtype not in _FLOATS + (torch.bool,):
                return False
            if v.device.type != "spyre" and v.dim() > 0:
                return False
        elif isinstance(arg, bool) or not isinstance(arg, (int, float, str, torch.dtype, type(None))):
            return False
        elif isinstance(arg, float) and not math.isfinite(arg) and node.target is not aten.clamp.default:
            return False
    if node.target is aten._to_copy.default:
        return set(node.kwargs) <= {"dtype"} and node.kwargs.get("dtype") in _FLOATS
    if node.target is aten.pow.Tensor_Scalar:
        return isinstance(node.args[1], (int, float)) and float(node.args[1]) in _pow_exponents()
    if node.target in (aten.div.Tensor, aten.div.Scalar):
        return "rounding_mode" not in node.kwargs
    return True


def _pow_exponents():
    return set(torch.ops.spyre.pow_exponents())


def _has_device_kernel(op) -> bool:
    """Whether eager aten runs `op` on the device (its own kernel or a composite one),
    rather than through the CPU fallback."""
    return any(torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), key)
               for key in ("PrivateUse1", "CompositeExplicitAutograd", "CompositeImplicitAutograd"))


def _halves_mask(gm: torch.fx.GraphModule, device: torch.device) -> torch.fx.Node:
    """A [2, 1] bool tensor on `device`, true for the first half of a split last dim (see
    spyre::fused_pointwise's split), as a buffer of the graph module, read once."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily  # noqa: PLC0415

    name = f"_spyre_first_half_{device.index or 0}"
    if not hasattr(gm, name):
        with unset_fake_temporarily():  # (the compiler runs under AOTAutograd's fake mode)
            gm.register_buffer(name, torch.tensor([[True], [False]], device=device))
    for n in gm.graph.nodes:
        if n.op == "get_attr" and n.target == name:
            return n
    first = next(n for n in gm.graph.nodes if n.op != "placeholder")
    with gm.graph.inserting_before(first):
        node = gm.graph.get_attr(name)
    node.meta["val"] = getattr(gm, name)
    return node


def fuse_pointwise(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """Replaces every group of two or more connected fusible ops, whose results other
    than the last are used only inside the group, with one fused kernel; and a lone
    fusible op too when eager aten has no device kernel for it (clamp_min, clamp_max),
    which would otherwise run on the CPU."""
    group_of: dict[torch.fx.Node, list[torch.fx.Node]] = {}
    rotations = {}  # rotate_half nodes -> the tensor they rotate
    for node in gm.graph.nodes:
        if not _fusible(node):
            continue
        group = [node]
        x = _rotate_half_source(node) if node.target is aten.cat.default else None
        if x is not None:
            rotations[node] = x
        # A rotate_half reads its source by halves, not its negation and slices.
        for arg in [] if x is not None else node.all_input_nodes:
            # A producer joins when this node is its only user (it is then inner).
            if arg in group_of and len(arg.users) == 1 and group_of[arg] is not group:
                producer_group = group_of[arg]
                group = producer_group + [n for n in group if n not in producer_group]
        for n in group:
            group_of[n] = group
    done = set()
    for node in list(gm.graph.nodes):
        group = group_of.get(node)
        if group is None or id(group) in done or group[-1] is not node:
            continue
        done.add(id(group))
        if len(group) < 2 and node not in rotations and _has_device_kernel(node.target):
            continue
        order = [n for n in gm.graph.nodes if n in set(group)]  # topological
        program, results = _Program(), {}
        rotated = [n for n in order if n in rotations]
        if rotated:
            program.rotated = {rotations[n] for n in rotated}
            program.split = _val(node).shape[-1] // 2
            program.mask = _halves_mask(gm, _val(node).device)
        for n in order:
            if n in rotations:
                results[n] = program.rotate_half(rotations[n])
            else:
                results[n] = FUSIBLE_OPS[n.target](program, lambda a: program.value(a, results), n)
        names = "_".join("rotate_half" if n in rotations else str(n.target).split(".")[1] for n in order)
        name = f"spyre::fused[{names}]" if len(names) <= 80 else f"spyre::fused[{len(order)} ops]"
        args = (name, program.words, program.constants, list(program.inputs), _val(node).dtype)
        if program.split:
            args += (program.split, program.halves)
        with gm.graph.inserting_before(node):
            call = gm.graph.call_function(torch.ops.spyre.fused_pointwise.default, args)
        call.meta["val"] = _val(node)
        node.replace_all_uses_with(call)
        for n in reversed(order):
            gm.graph.erase_node(n)
    # What rotate_halves read instead (their negations, slices) may have no reader left.
    for node in reversed(list(gm.graph.nodes)):
        if (node.op == "call_function" and not node.users
                and node.target in (aten.neg.default, aten.slice.Tensor)):
            gm.graph.erase_node(node)
    return recompiled(gm)


def _column_slice(x):
    """(linear_concat node, first column, end column, [layout nodes from the slice to x])
    when x is a column slice of a linear_concat result seen through views and
    transposes (a projection's heads, as attention takes them), else None."""
    chain = []
    while isinstance(x, torch.fx.Node) and x.op == "call_function" and x.target in _LAYOUTS:
        chain.append(x)
        x = x.args[0]
    if (not isinstance(x, torch.fx.Node) or x.op != "call_function" or x.target is not aten.slice.Tensor
            or len(x.args) != 4 or x.args[1] != 1 or x.kwargs or not isinstance(x.args[0], torch.fx.Node)
            or x.args[0].target is not torch.ops.spyre.linear_concat.default):
        return None
    return x.args[0], x.args[2], x.args[3], chain[::-1]


def _merged_args(nodes):
    """The layout node arguments of sibling chains with their one differing size summed
    (a view to [b, t, 16, 128] and one to [b, t, 4, 128]: [b, t, 20, 128]), or None when
    they differ otherwise."""
    first = nodes[0]
    if any(n.target is not first.target or n.kwargs or len(n.args) != len(first.args) for n in nodes):
        return None
    if first.target not in _VIEWS:
        return tuple(first.args[1:]) if all(tuple(n.args[1:]) == tuple(first.args[1:]) for n in nodes) else None
    shapes = [list(_val(n).shape) for n in nodes]  # (a -1 in the view's arguments resolved)
    if any(len(sh) != len(shapes[0]) or not all(isinstance(v, int) for v in sh) for sh in shapes):
        return None
    differ = [d for d in range(len(shapes[0])) if len({sh[d] for sh in shapes}) > 1]
    if len(differ) > 1:
        return None
    merged = list(shapes[0])
    if differ:
        merged[differ[0]] = sum(sh[differ[0]] for sh in shapes)
    return (merged,)


_PURE_LAYOUT = _LAYOUTS + (aten.slice.Tensor, aten._to_copy.default, aten.unsqueeze.default, aten.expand.default)


def _value_key(x):
    """A key equal for nodes that compute the same value: the same slice, view or
    conversion of the same tensor, each written out separately (`self.cos[:t]` evaluated
    once for Q's rotary embedding and once for K's)."""
    if not isinstance(x, torch.fx.Node) or x.op != "call_function" or x.target not in _PURE_LAYOUT:
        return tuple(_value_key(v) for v in x) if isinstance(x, (list, tuple)) else x
    return (x.target, tuple(_value_key(a) for a in x.args), tuple(sorted((k, _value_key(v)) for k, v in x.kwargs.items())))


def merge_sibling_pointwise(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """Merges fused pointwise kernels that apply one program to adjacent column slices of
    one linear_concat result, seen the same way, with their other inputs the same:
    rotary embeddings of Q and of K (their heads side by side in the projections'
    result, one cos/sin table) become one kernel over both; each result is a slice of
    its result along the dim where they differed."""
    groups: dict = {}
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target is not torch.ops.spyre.fused_pointwise.default:
            continue
        inputs = node.args[3]
        found = {i: _column_slice(x) for i, x in enumerate(inputs)}
        sliced = {i: f for i, f in found.items() if f is not None}
        if not sliced or len({inputs[i] for i in sliced}) != 1:
            continue
        concat, start, end, chain = next(iter(sliced.values()))
        others = tuple(_value_key(x) if i not in sliced else None for i, x in enumerate(inputs))
        key = (node.args[0], tuple(node.args[1]), tuple(node.args[2]), node.args[4],
               tuple(tuple(a) if isinstance(a, list) else a for a in node.args[5:]), others,
               concat, tuple(n.target for n in chain))
        groups.setdefault(key, []).append((start, end, chain, node, sorted(sliced)))
    changed = False
    for members in groups.values():
        members.sort(key=lambda m: m[0])
        run = [members[0]]
        for m in members[1:] + [None]:
            if m is not None and m[0] == run[-1][1]:
                run.append(m)
                continue
            if len(run) > 1 and _merge_run(gm, run):
                changed = True
            run = [m]
    return recompiled(gm, changed)


def _merge_run(gm, run) -> bool:
    chains = [m[2] for m in run]
    merged_args = [_merged_args([c[j] for c in chains]) for j in range(len(chains[0]))]
    outs = [_val(m[3]) for m in run]
    if any(a is None for a in merged_args) or any(o.dim() != outs[0].dim() for o in outs):
        return False
    differ = [d for d in range(outs[0].dim()) if len({o.shape[d] for o in outs}) > 1]
    if len(differ) != 1:
        return False
    dim = differ[0]
    first = min((m[3] for m in run), key=lambda n: list(gm.graph.nodes).index(n))
    concat = _column_slice(run[0][3].args[3][run[0][4][0]])[0]
    with gm.graph.inserting_before(first):
        x = gm.graph.call_function(aten.slice.Tensor, (concat, 1, run[0][0], run[-1][1]))
        x.meta["val"] = _val(concat)[:, run[0][0]:run[-1][1]]
        for j, args in enumerate(merged_args):
            target = chains[0][j].target
            prev = x
            x = gm.graph.call_function(target, (prev,) + tuple(args))
            x.meta["val"] = target(_val(prev), *args)
        template = run[0][3]
        inputs = [x if i in run[0][4] else a for i, a in enumerate(template.args[3])]
        call = gm.graph.call_function(template.target, (template.args[0], template.args[1], template.args[2], inputs)
                                      + tuple(template.args[4:]))
        call.meta["val"] = torch.cat(outs, dim)
        at = 0
        for m, out in zip(run, outs):
            part = gm.graph.call_function(aten.slice.Tensor, (call, dim, at, at + out.shape[dim]))
            part.meta["val"] = _val(call).narrow(dim, at, out.shape[dim])
            at += out.shape[dim]
            m[3].replace_all_uses_with(part)
    for m in run:
        todo = list(m[3].all_input_nodes)
        gm.graph.erase_node(m[3])
        while todo:  # the old chains and the copies of shared inputs, when nothing else reads them
            n = todo.pop()
            if n.op == "call_function" and n.target in _PURE_LAYOUT and not n.users and n.graph is gm.graph \
                    and n in gm.graph.nodes:
                todo.extend(n.all_input_nodes)
                gm.graph.erase_node(n)
    return True
