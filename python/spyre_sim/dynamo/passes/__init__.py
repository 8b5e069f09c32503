"""The graph passes of the torch.compile backend, one module per family; each takes an
aten graph module and returns it rewritten (pipeline.PASSES gives the order they run in)."""

from .activations import recognize_activations
from .conv import fuse_conv_epilogues
from .layout import drop_layout_preserving_clones, drop_repeated_kv, fold_conversions_into_arange
from .matmul import fuse_gated_linears, fuse_matmul_epilogues, fuse_matmul_residuals, fuse_shared_input_linears
from .mlp import fuse_mlp_projections, fuse_mlps
from .mutations import reinplace_input_mutations
from .norms import fuse_norm_prologues, fuse_rms_norms
from .pointwise import fuse_pointwise, merge_sibling_pointwise

__all__ = ["drop_layout_preserving_clones", "drop_repeated_kv", "fold_conversions_into_arange", "fuse_conv_epilogues",
           "fuse_gated_linears", "fuse_matmul_epilogues", "fuse_matmul_residuals", "fuse_mlp_projections", "fuse_mlps",
           "fuse_norm_prologues", "fuse_pointwise", "fuse_rms_norms", "fuse_shared_input_linears",
           "merge_sibling_pointwise", "recognize_activations", "reinplace_input_mutations"]
