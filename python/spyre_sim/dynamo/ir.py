"""The fused pointwise kernel's IR and its builder: the steps spyre::fused_pointwise
reads (kind, op and dtype codes and three (kind, index) arguments each), written with
the codes of the backend's own table (torch.ops.spyre.pointwise_codes), and the dtypes
the compiler fuses and their names in that table."""

from __future__ import annotations

import torch
import torch.fx


_FLOATS = (torch.float32, torch.float16, torch.bfloat16)
_DTYPE_NAMES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16", torch.bool: "bool",
                torch.int32: "int32", torch.int8: "int8"}


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

    def splice(self, words: list[int], inputs: list[tuple[str, int]]) -> tuple[str, int]:
        """Appends steps the backend encoded itself (its input i is inputs[i], its step s
        this program's step base + s, base the steps before); returns the last one."""
        c = self.codes
        n, base = c["step_words"], len(self.words) // c["step_words"]
        for at in range(0, len(words), n):
            step = list(words[at:at + 3])
            for a in range(3):
                kind, index = words[at + 3 + 2 * a], words[at + 4 + 2 * a]
                if kind == c["arg.input"]:
                    kind, index = c[f"arg.{inputs[index][0]}"], inputs[index][1]
                elif kind == c["arg.step"]:
                    index += base
                elif kind != c["arg.none"]:
                    raise ValueError(f"spliced steps take inputs and steps, not argument kind {kind}")
                step += [kind, index]
            self.words += step
        return ("step", len(self.words) // n - 1)


def _codes() -> dict:
    global _CODES
    if _CODES is None:
        _CODES = dict(torch.ops.spyre.pointwise_codes())
    return _CODES


_CODES = None
