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


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_embedding_gradients_sum_the_rows_of_each_index_on_the_device(dtype):
    # embedding_dense_backward: the rows of each index summed pairwise on the device
    # (log2 of the most repeats levels), against the CPU's sums in float64 rounded to
    # the dtype: every index repeated (37 times: odd at every level), every index once,
    # a mix, a padding index, scale_grad_by_freq, 2-d and int32 indices.
    g = torch.Generator().manual_seed(0)
    cases = [
        (torch.full((37,), 4), 9),
        (torch.randperm(50, generator=g), 50),
        (torch.randint(0, 12, (4, 29), generator=g), 12),
        (torch.tensor([[3, 1, 3], [3, 0, 7]], dtype=torch.int32), 8),
    ]
    for indices, rows in cases:
        for padding_idx, scale in ((-1, False), (3, False), (-1, True), (3, True)):
            grad = torch.randn(*indices.shape, 24, generator=g).to(dtype)
            torch.spyre.reset_fallback_counts()
            got = torch.ops.aten.embedding_dense_backward(grad.to("spyre"), indices.to("spyre"), rows, padding_idx,
                                                          scale)
            assert torch.spyre.fallback_counts() == {}
            want = torch.ops.aten.embedding_dense_backward(grad.double(), indices, rows, padding_idx, scale).to(dtype)
            assert got.dtype == dtype and got.shape == (rows, 24)
            most = int(torch.bincount(indices.reshape(-1).long()).max())
            eps = torch.finfo(dtype).eps
            assert_close(got.cpu().double(), want.double(), rtol=2 * eps * (1 + most).bit_length(),
                         atol=eps * most ** 0.5 * (1 + most).bit_length())


def test_embedding_training_runs_its_backward_on_the_device_and_checks_its_indices():
    torch.manual_seed(0)
    emb = torch.nn.Embedding(100, 16, padding_idx=1)
    ids = torch.randint(0, 100, (3, 40))
    ids[0, :5] = 1
    dev = torch.nn.Embedding(100, 16, padding_idx=1).to("spyre")
    dev.load_state_dict(emb.state_dict())
    torch.spyre.reset_fallback_counts()
    (dev(ids.to("spyre")) ** 2).sum().backward()
    assert torch.spyre.fallback_counts() == {}
    (emb(ids) ** 2).sum().backward()
    assert_close(dev.weight.grad.cpu(), emb.weight.grad, rtol=1e-5, atol=1e-5)
    with pytest.raises(IndexError, match=r"index 100 at 2 is out of range for 100 rows"):
        torch.ops.aten.embedding_dense_backward(torch.ones(3, 4, device="spyre"),
                                                torch.tensor([0, 5, 100], device="spyre"), 100, -1, False)
    assert dev(torch.tensor([2], device="spyre")).shape == (1, 16)  # the device keeps working


def test_an_out_of_range_index_is_a_device_fault_and_the_device_keeps_working():
    table = torch.zeros(10, 4, device="spyre")
    got = torch.index_select(table, 0, torch.tensor([3, 10], device="spyre"))
    with pytest.raises(RuntimeError, match=r"aten::index_select.*DMA gather index 10 \(entry \d+ of \d+\) is outside the table's rows \[0, 10\)"):
        got.cpu()
    assert torch.index_select(table + 1, 0, torch.tensor([9], device="spyre")).cpu().tolist() == [[1.0] * 4]
