"""index_select and embedding lookups on the device (dma_gather): only the selected rows
move, any dtype, against the CPU, without falling back; out-of-range indices are device
faults naming the index, and the device keeps working."""

import pytest
import torch
from torch.testing import assert_close

from test_pointwise import rand


def run(fn, *args):
    torch.spyre.reset_fallback_counts()
    got = fn(*[a.to("spyre") if isinstance(a, torch.Tensor) else a for a in args])
    assert torch.spyre.fallback_counts() == {}
    want = fn(*args)
    assert got.device.type == "spyre" and got.dtype == want.dtype and got.shape == want.shape
    assert torch.equal(got.cpu(), want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int64, torch.bool],
                         ids=str)
@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32], ids=str)
def test_index_select_along_each_dim(dtype, index_dtype):
    table = rand((7, 1000), torch.float32, 1).mul(100).to(dtype)
    rows = torch.tensor([6, 0, 3, 3, 6], dtype=index_dtype)
    run(lambda t, i: torch.index_select(t, 0, i), table, rows)
    run(lambda t, i: torch.index_select(t, 1, i), table, torch.tensor([999, 0, 4096 % 1000], dtype=index_dtype))
    run(lambda t, i: torch.index_select(t, -1, i), table.t(), rows)  # a transposed table
    run(lambda t, i: t.index_select(0, i), table, torch.tensor(2, dtype=index_dtype))  # a 0-d index
    run(lambda t, i: t.index_select(0, i), table, torch.tensor([], dtype=index_dtype))  # no index


def test_rows_larger_than_the_scratchpad_move_in_pieces():
    table = rand((3, 700_000), torch.float32, 2)  # 2.8 MB rows, more than a scratchpad
    run(lambda t, i: torch.index_select(t, 0, i), table, torch.tensor([2, 0, 2]))


def test_embedding_lookups_and_out():
    torch.manual_seed(0)
    emb = torch.nn.Embedding(1000, 64, padding_idx=0).half()
    ids = torch.randint(0, 1000, (4, 33))
    run(lambda i: emb.to(i.device)(i), ids)
    out = torch.empty(0, device="spyre")
    torch.index_select(emb.weight.detach().float().to("spyre"), 0, ids[0].to("spyre"), out=out)
    assert_close(out.cpu(), emb.weight.detach().float()[ids[0]])


def test_an_out_of_range_index_is_a_device_fault_and_the_device_keeps_working():
    table = torch.zeros(10, 4, device="spyre")
    got = torch.index_select(table, 0, torch.tensor([3, 10], device="spyre"))
    with pytest.raises(RuntimeError, match=r"aten::index_select.*DMA gather index 10 \(entry \d+ of \d+\) is outside the table's rows \[0, 10\)"):
        got.cpu()
    assert torch.index_select(table + 1, 0, torch.tensor([9], device="spyre")).cpu().tolist() == [[1.0] * 4]
