"""torch.compile(model, backend="spyre"): graphs whose elementwise chains run as one
device kernel each.

Dynamo captures the Python code, AOTAutograd turns it into aten graphs (forward, and
backward when gradients are needed), and this pass rewrites each graph: a connected
group of pointwise aten ops (add, mul, gelu, where, comparisons, ...) whose inner
results nobody else reads becomes one ``torch.ops.spyre.fused_pointwise`` call, a
single kernel that reads the group's inputs once and writes its result once. The rest
of the graph (matmuls, reductions, views) runs the eager spyre kernels, except that an
activation right after a matmul (relu, gelu, silu, ... of mm or of nn.Linear's addmm)
moves into the matmul kernel's epilogue, and so does a residual add of the matmul's
result (``x + linear(h)``) or a multiply by it (SwiGLU's ``silu(gate) * up``), and an
RMSNorm written out in ops becomes the one rms_norm kernel, and an activation written out
in ops (Hugging Face's gelu_new) its one op, which then joins the matmul; K and V
repeated for grouped-query attention reach the attention unrepeated. Inner results stay in fp32 (no rounding to
fp16/bf16 between fused ops, as PyTorch's Inductor does).

The backend is registered with Dynamo through the ``torch_dynamo_backends`` entry point
of this package, so ``backend="spyre"`` works without importing anything first.
"""

from __future__ import annotations

import math
import operator
from typing import Callable

import torch
import torch.fx

__all__ = ["backend", "drop_layout_preserving_clones", "fold_conversions_into_arange", "fuse_pointwise", "fuse_rms_norms", "recognize_activations", "drop_repeated_kv", "fuse_matmul_epilogues", "fuse_mlps", "fuse_mlp_projections", "fuse_conv_epilogues",
           "fuse_matmul_residuals", "FUSIBLE_OPS"]

_FLOATS = (torch.float32, torch.float16, torch.bfloat16)
_DTYPE_NAMES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16", torch.bool: "bool",
                torch.int32: "int32", torch.int8: "int8"}

aten = torch.ops.aten


class _Program:
    """Steps of one fused kernel, as the IR spyre::fused_pointwise reads: per step the
    kind, op and dtype codes and three (kind, index) arguments, from the backend's own
    code table (torch.ops.spyre.pointwise_codes)."""

    def __init__(self) -> None:
        self.codes = _codes()
        self.words: list[int] = []
        self.constants: list[float] = []
        self.inputs: list[torch.fx.Node] = []
        self.halves: list[int] = []  # per input: -1 whole, 0/1 that half of the last dim, 2 the mask
        self.names: list[str] = []
        # Rotary embeddings (see _rotate_half_source): tensors read by halves, the half
        # size, the [2, 1] mask node telling the halves apart, and x rebuilt from its halves.
        self.rotated: set[torch.fx.Node] = set()
        self.split = 0
        self.mask: torch.fx.Node | None = None
        self._whole: dict[torch.fx.Node, tuple[str, int]] = {}

    def input(self, node: torch.fx.Node, half: int = -1) -> tuple[str, int]:
        for i, (n, h) in enumerate(zip(self.inputs, self.halves)):
            if n is node and h == half:
                return ("input", i)
        self.inputs.append(node)
        self.halves.append(half)
        return ("input", len(self.inputs) - 1)

    def value(self, arg, results: dict) -> tuple[str, int]:
        if isinstance(arg, torch.fx.Node):
            if arg in results:
                return results[arg]
            if arg in self.rotated:
                # Read by halves anyway: the whole is the first half, then the second.
                if arg not in self._whole:
                    self._whole[arg] = self.emit("select", "fp32", self.input(self.mask, 2), self.input(arg, 0),
                                                 self.input(arg, 1))
                return self._whole[arg]
            return self.input(arg)
        self.constants.append(float(arg))
        return ("constant", len(self.constants) - 1)

    def rotate_half(self, x: torch.fx.Node) -> tuple[str, int]:
        """cat(-x[..., h:], x[..., :h]): in the split space, -(half 1) in the first half,
        half 0 in the second."""
        neg = self.emit("unary", "neg", "fp32", self.input(x, 1))
        return self.emit("select", "fp32", self.input(self.mask, 2), neg, self.input(x, 0))

    def emit(self, kind: str, *words) -> tuple[str, int]:
        """emit("unary", op, dtype, a), ("binary"|"compare", op, dtype, a, b),
        ("select", dtype, cond, a, b), ("convert", dtype, a)."""
        c = self.codes
        if kind in ("select", "convert"):
            op, dtype, args = 0, words[0], words[1:]
        else:
            op, dtype, args = c[f"{kind}.{words[0]}"], words[1], words[2:]
        step = [c[f"kind.{kind}"], op, c[f"dtype.{dtype}"]]
        for a in range(3):
            step += [c[f"arg.{args[a][0]}"], args[a][1]] if a < len(args) else [c["arg.none"], 0]
        self.words += step
        return ("step", len(self.words) // c["step_words"] - 1)


def _codes() -> dict:
    global _CODES
    if _CODES is None:
        _CODES = dict(torch.ops.spyre.pointwise_codes())
    return _CODES


_CODES = None


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
    # Every exponent the eager kernel runs on the device (torch.ops.spyre.pow_exponents,
    # the C++ list; _fusible admits only those), as the same steps.
    x, e = v(n.args[0]), float(n.args[1])
    if e == 1.0:
        return p.emit("unary", "copy", "fp32", x)
    if e in (2.0, 3.0, -2.0):
        sq = p.emit("binary", "mul", "fp32", x, x)
        if e == 3.0:
            return p.emit("binary", "mul", "fp32", sq, x)
        return sq if e == 2.0 else p.emit("unary", "reciprocal", "fp32", sq)
    if e == 0.5:
        return p.emit("unary", "sqrt", "fp32", x)
    if e == -0.5:
        return p.emit("unary", "rsqrt", "fp32", x)
    if e == -1.0:
        return p.emit("unary", "reciprocal", "fp32", x)
    raise ValueError(f"pow exponent {e} has no device steps (torch.ops.spyre.pow_exponents())")


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


def _val(node):
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else None


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
    gm.graph.lint()
    gm.recompile()
    return gm


# Activations a matmul kernel applies in its epilogue, by the name matmul_epilogue takes.
_EPILOGUE_ACTIVATIONS = {aten.relu.default: "relu", aten.silu.default: "silu", aten.sigmoid.default: "sigmoid",
                         aten.tanh.default: "tanh", aten.gelu.default: "gelu", aten.hardswish.default: "hardswish",
                         aten.hardsigmoid.default: "hardsigmoid"}


_VIEWS = (aten.view.default, aten._unsafe_view.default, aten.reshape.default)


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
    gm.graph.lint()
    gm.recompile()
    return gm


def _activation_of(node):
    """The epilogue name of `node` when it is an activation the kernels apply, else None."""
    if node.op != "call_function" or node.target not in _EPILOGUE_ACTIVATIONS:
        return None
    if node.target is aten.gelu.default:
        approximate = node.kwargs.get("approximate", node.args[1] if len(node.args) > 1 else "none")
        return "gelu_tanh" if approximate == "tanh" else "gelu"
    return _EPILOGUE_ACTIVATIONS[node.target]


def _emit(gm: torch.fx.GraphModule, target, args, kwargs=None) -> torch.fx.Node:
    """A new call of `target`, its meta value computed from its arguments' (fake) values."""
    kwargs = kwargs or {}
    node = gm.graph.call_function(target, tuple(args), kwargs)
    vals = torch.fx.node.map_arg(tuple(args), _val)
    node.meta["val"] = target(*vals, **kwargs)
    return node


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
    if changed:
        gm.graph.lint()
        gm.recompile()
    return gm


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
    if changed:
        gm.graph.lint()
        gm.recompile()
    return gm


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


def _erase_unread(gm: torch.fx.GraphModule, nodes) -> None:
    """Erases the op nodes among `nodes` that nothing reads any more."""
    for node in nodes:
        if isinstance(node, torch.fx.Node) and node.op == "call_function" and not node.users:
            gm.graph.erase_node(node)


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
    if changed:
        gm.graph.lint()
        gm.recompile()
    return gm


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
    if changed:
        gm.graph.lint()
        gm.recompile()
    return gm


_LAYOUTS = _VIEWS + (aten.transpose.int, aten.permute.default)


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
    if changed:
        gm.graph.lint()
        gm.recompile()
    return gm


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
    if changed:
        gm.graph.lint()
        gm.recompile()
    return gm


_ARANGES = (aten.arange.default, aten.arange.start, aten.arange.start_step)


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
    if erased:
        gm.graph.lint()
        gm.recompile()
    return gm


# Smooth elementwise ops an activation is written out in (Hugging Face's gelu_new and
# FastGELU, BLOOM's GELU, x * sigmoid(x)): a chain of these from one tensor, with scalar
# constants, is a function of that tensor alone.
_ANALYTIC_OPS = (aten.add.Tensor, aten.sub.Tensor, aten.mul.Tensor, aten.div.Tensor, aten.rsub.Scalar,
                 aten.pow.Tensor_Scalar, aten.neg.default, aten.tanh.default, aten.erf.default, aten.exp.default,
                 aten.sigmoid.default, aten.reciprocal.default, aten.sqrt.default, aten.rsqrt.default)
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
    if replaced:
        gm.graph.lint()
        gm.recompile()
    return gm


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
    if erased:
        gm.graph.lint()
        gm.recompile()
    return gm


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
    if changed:
        gm.graph.lint()
        gm.recompile()
    return gm


def reinplace_input_mutations(gm: torch.fx.GraphModule, example_inputs=()) -> torch.fx.GraphModule:
    """Writes into mutated inputs in place. A functional graph updates a slice of an
    input (a KV cache: ``cache[:, :, pos] = k``) as slice_scatters that rebuild the whole
    tensor, then copies the result back into the input: two passes over the whole
    cache per step for a write of one position. PyTorch's reinplacing pass (the one
    Inductor runs) turns the pattern back into a copy into the input's view."""
    from torch._guards import detect_fake_mode  # noqa: PLC0415
    from torch._inductor.fx_passes.reinplace import reinplace_inplaceable_ops  # noqa: PLC0415
    from torch._inductor.virtualized import V  # noqa: PLC0415
    from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: PLC0415

    with V.set_fake_mode(detect_fake_mode(example_inputs) or FakeTensorMode()):
        reinplace_inplaceable_ops(gm.graph)
    gm.graph.lint()
    gm.recompile()
    return gm


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
    if changed:
        gm.graph.lint()
        gm.recompile()
    return gm


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
    if changed:
        gm.graph.lint()
        gm.recompile()
    return gm


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
    if changed:
        gm.graph.lint()
        gm.recompile()
    return gm


def _compile_graph(gm: torch.fx.GraphModule, example_inputs):
    gm = reinplace_input_mutations(gm, example_inputs)
    gm = drop_layout_preserving_clones(drop_repeated_kv(fuse_rms_norms(fold_conversions_into_arange(gm))))
    gm = fuse_matmul_epilogues(recognize_activations(gm))
    gm = fuse_conv_epilogues(gm)
    gm = fuse_gated_linears(fuse_matmul_residuals(gm))
    gm = merge_sibling_pointwise(fuse_shared_input_linears(fuse_pointwise(gm)))
    gm = fuse_mlp_projections(fuse_mlps(fuse_norm_prologues(gm)))
    # AOTAutograd calls compiled graphs with one list of arguments (boxed), which lets it
    # drop saved activations as soon as the backward graph has taken them.
    from functorch.compile import make_boxed_func  # noqa: PLC0415

    return make_boxed_func(gm.forward)


def backend(gm: torch.fx.GraphModule, example_inputs):
    """The Dynamo backend: AOTAutograd to aten graphs, then fuse_pointwise on the
    forward and backward graphs; the result runs op by op on the device."""
    from torch._dynamo.backends.common import aot_autograd  # noqa: PLC0415

    # Input mutations stay in the graph (as copy_ into the input) for the reinplacing pass.
    return aot_autograd(fw_compiler=_compile_graph, bw_compiler=_compile_graph,
                        keep_inference_input_mutations=True)(gm, example_inputs)
