"""The order the backend runs its graph passes in: PASSES, each with why it stands where
it does, and run(), which applies them to one aten graph. A pass that builds on another's
kernels (a matmul_epilogue, a linear_concat, an rms_norm) comes after it, and the
specific patterns (norms, activations, matmul epilogues) are taken before fuse_pointwise
would fuse their elementwise ops into generic kernels."""

from __future__ import annotations

from typing import Callable

import torch.fx

from .passes import (drop_layout_preserving_clones, drop_repeated_kv, fold_conversions_into_arange, fuse_conv_epilogues,
                     fuse_gated_linears, fuse_matmul_epilogues, fuse_matmul_residuals, fuse_mlp_projections, fuse_mlps,
                     fuse_norm_prologues, fuse_pointwise, fuse_rms_norms, fuse_shared_input_linears,
                     merge_sibling_pointwise, recognize_activations, reinplace_input_mutations)

PASSES: list[Callable] = [
    # First, on AOTAutograd's functional graph: the slice_scatter + copy_ form it reinplaces.
    reinplace_input_mutations,
    # A cleanup of the traced graph that no other pass depends on: one arange kernel, no conversion.
    fold_conversions_into_arange,
    # Before fuse_pointwise takes the norm's ops, and before fuse_norm_prologues reads the rms_norm it makes.
    fuse_rms_norms,
    # A cleanup before the fusions: attention reads K and V unrepeated (the pattern takes the repeat's clone).
    drop_repeated_kv,
    # Before the fusions: eval dropout's clones would stand between a matmul and its activation or residual.
    drop_layout_preserving_clones,
    # Before fuse_matmul_epilogues, which takes the one op a written-out activation becomes.
    recognize_activations,
    # Before the residual and gated passes, which build on matmul_epilogue, and before fuse_pointwise.
    fuse_matmul_epilogues,
    # After recognize_activations, before fuse_pointwise takes the activation after the convolution.
    fuse_conv_epilogues,
    # After fuse_matmul_epilogues (a matmul with an activation epilogue takes the residual too).
    fuse_matmul_residuals,
    # After fuse_matmul_residuals: SwiGLU's gate is then a matmul_epilogue multiplying by the other matmul.
    fuse_gated_linears,
    # After the passes that take elementwise ops into matmul, norm and conv kernels: the chains left.
    fuse_pointwise,
    # After the matmul passes took their mms: the plain ones left (Q, K, V) share one read of x.
    fuse_shared_input_linears,
    # After fuse_pointwise and fuse_shared_input_linears: fused kernels over slices of one linear_concat.
    merge_sibling_pointwise,
    # After the matmul kernels (matmul_epilogue, linear_concat, linear_gated) and rms_norm exist.
    fuse_norm_prologues,
    # After fuse_norm_prologues: the first linear's matmul_epilogue or linear_gated, with its prologue.
    fuse_mlps,
    # Last: it reads the spyre.mlp calls fuse_mlps makes.
    fuse_mlp_projections,
]

# The passes that also take the graph's example inputs.
_TAKE_INPUTS = (reinplace_input_mutations,)


def run(gm: torch.fx.GraphModule, example_inputs) -> torch.fx.GraphModule:
    """Applies PASSES to `gm` in order and returns the rewritten graph module."""
    for graph_pass in PASSES:
        gm = graph_pass(gm, example_inputs) if graph_pass in _TAKE_INPUTS else graph_pass(gm)
    return gm
