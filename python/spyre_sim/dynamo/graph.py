"""torch.fx helpers the passes share: a node's (fake) value, who reads a node, new calls
with their values, erasing what nothing reads, views and layout changes seen through,
and the matmuls (and their weights) that later passes build on."""

from __future__ import annotations

import torch
import torch.fx

aten = torch.ops.aten


def _val(node):
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else None


_VIEWS = (aten.view.default, aten._unsafe_view.default, aten.reshape.default)


_LAYOUTS = _VIEWS + (aten.transpose.int, aten.permute.default)


def _only_user(node: torch.fx.Node):
    """The one node that reads `node`, or None."""
    return next(iter(node.users)) if len(node.users) == 1 else None


def _is_call(node, *targets) -> bool:
    return isinstance(node, torch.fx.Node) and node.op == "call_function" and node.target in targets


def _other_arg(node: torch.fx.Node, one):
    """The argument of a two-operand mul that is not `one`, or None."""
    if len(node.args) != 2 or node.kwargs:
        return None
    a, b = node.args
    return b if a is one else a if b is one else None


def _emit(gm: torch.fx.GraphModule, target, args, kwargs=None) -> torch.fx.Node:
    """A new call of `target`, its meta value computed from its arguments' (fake) values."""
    kwargs = kwargs or {}
    node = gm.graph.call_function(target, tuple(args), kwargs)
    vals = torch.fx.node.map_arg(tuple(args), _val)
    node.meta["val"] = target(*vals, **kwargs)
    return node


def _erase_unread(gm: torch.fx.GraphModule, nodes) -> None:
    """Erases the op nodes among `nodes` that nothing reads any more."""
    for node in nodes:
        if isinstance(node, torch.fx.Node) and node.op == "call_function" and not node.users:
            gm.graph.erase_node(node)


def _view_root(node, read_once=True):
    """(source, views): the node `node` is a view of, through a chain of views, and those
    views; with `read_once`, only through views each read by nothing but the next
    (``view(view(x))``). `node` itself when it is no view."""
    views = []
    while (isinstance(node, torch.fx.Node) and node.op == "call_function" and node.target in _VIEWS
           and (len(node.users) == 1 or not read_once) and isinstance(node.args[0], torch.fx.Node)):
        views.append(node)
        node = node.args[0]
    return node, views


def _linear_weight(b):
    """The weight node w when `b` is ``w.t()`` (a permute or t of a 2-D graph input or
    attribute, as nn.Linear's ``x @ w.t()`` appears in an aten graph), else None."""
    if not isinstance(b, torch.fx.Node) or b.op != "call_function":
        return None
    if not (b.target is aten.t.default or (b.target is aten.permute.default and list(b.args[1]) == [1, 0])):
        return None
    w = b.args[0]
    if not isinstance(w, torch.fx.Node) or w.op not in ("placeholder", "get_attr"):
        return None
    val = _val(w)
    return w if isinstance(val, torch.Tensor) and val.dim() == 2 else None


def _matmul_input(node):
    """(a, target, rest) when `node` is a matmul on spyre floats that a norm prologue can
    join: its input a, and the call that computes it from a new input x,
    ``target(x, *rest, norm, weight, bias, eps)``. An mm or an addmm with a row bias
    (nn.Linear's) becomes a matmul_epilogue. None otherwise."""
    if node.op != "call_function":
        return None
    out, args = _val(node), node.args
    if not isinstance(out, torch.Tensor) or out.device.type != "spyre" or out.dim() != 2 or node.kwargs:
        return None
    epilogue = torch.ops.spyre.matmul_epilogue.default
    if node.target is epilogue and len(args) <= 6:  # (more: a prologue already)
        residual = args[4] if len(args) > 4 else None
        return args[0], epilogue, (args[1], args[2], args[3], residual, args[5] if len(args) > 5 else "add")
    if node.target is aten.addmm.default and len(args) == 3:
        bias = _val(args[0])
        if (isinstance(bias, torch.Tensor) and bias.dtype == out.dtype
                and tuple(bias.shape) in ((out.shape[-1],), (1, out.shape[-1]))):
            return args[1], epilogue, (args[2], args[0], "", None, "add")
    if node.target is aten.mm.default and len(args) == 2:
        return args[0], epilogue, (args[1], None, "", None, "add")
    if node.target is torch.ops.spyre.linear_concat.default and len(args) == 2:
        return args[0], node.target, (args[1],)
    if node.target is torch.ops.spyre.linear_gated.default and len(args) == 4:
        return args[0], node.target, tuple(args[1:])
    return None


def recompiled(gm: torch.fx.GraphModule, changed: bool = True) -> torch.fx.GraphModule:
    """A pass's last step: when it changed the graph, the graph checked and the module's
    code regenerated; the module either way."""
    if changed:
        gm.graph.lint()
        gm.recompile()
    return gm
