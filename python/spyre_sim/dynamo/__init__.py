"""torch.compile(model, backend="spyre"): graphs whose elementwise chains run as one
device kernel each.

Dynamo captures the Python code, AOTAutograd turns it into aten graphs (forward, and
backward when gradients are needed), and its passes rewrite each graph: a connected
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

The package: ir.py is the fused kernel's IR and its builder, ops.py the op tables
(FUSIBLE_OPS), graph.py the torch.fx helpers the passes share, passes/ the graph passes
by family, and pipeline.py the order they run in (pipeline.PASSES).
"""

from __future__ import annotations

import torch.fx

from . import pipeline
from .ops import FUSIBLE_OPS
from .passes import (drop_layout_preserving_clones, drop_repeated_kv, fold_conversions_into_arange, fuse_conv_epilogues,
                     fuse_gated_linears, fuse_matmul_epilogues, fuse_matmul_residuals, fuse_mlp_projections, fuse_mlps,
                     fuse_norm_prologues, fuse_pointwise, fuse_rms_norms, fuse_shared_input_linears,
                     merge_sibling_pointwise, recognize_activations, reinplace_input_mutations)

__all__ = ["backend", "drop_layout_preserving_clones", "fold_conversions_into_arange", "fuse_pointwise",
           "fuse_rms_norms", "recognize_activations", "drop_repeated_kv", "fuse_matmul_epilogues", "fuse_mlps",
           "fuse_mlp_projections", "fuse_conv_epilogues", "fuse_matmul_residuals", "FUSIBLE_OPS"]


def _compile_graph(gm: torch.fx.GraphModule, example_inputs):
    gm = pipeline.run(gm, example_inputs)
    # AOTAutograd calls compiled graphs with one list of arguments (boxed), which lets it
    # drop saved activations as soon as the backward graph has taken them.
    from functorch.compile import make_boxed_func  # noqa: PLC0415

    return make_boxed_func(gm.forward)


def backend(gm: torch.fx.GraphModule, example_inputs):
    """The Dynamo backend: AOTAutograd to aten graphs, then the passes (pipeline.PASSES,
    fuse_pointwise among them) on the forward and backward graphs; the result runs op by
    op on the device."""
    from torch._dynamo.backends.common import aot_autograd  # noqa: PLC0415

    # Input mutations stay in the graph (as copy_ into the input) for the reinplacing pass.
    return aot_autograd(fw_compiler=_compile_graph, bw_compiler=_compile_graph,
                        keep_inference_input_mutations=True)(gm, example_inputs)
