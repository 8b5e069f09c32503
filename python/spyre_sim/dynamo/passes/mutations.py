"""Mutation pass: a functional graph's updates of a slice of an input (a KV cache's
slice_scatters and the copy back) become writes into the input in place."""

from __future__ import annotations

import torch.fx

from ..graph import recompiled


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
    return recompiled(gm)
