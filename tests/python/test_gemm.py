"""attnkit.gemm on the CPU: plain, batched, broadcast batch, transposed (column-major) views,
float64 gradients. On CUDA (skipped without a device): an N that is not a multiple of 8 and the split-K
problems (small grids with a long K), plain, with transposed views, replayed from a CUDA graph, and
bitwise repeatable; the workspace kept per stream (shared by the runs of one stream, its own per stream, never
the one a CUDA graph captures)."""

import pytest
import torch

import attnkit
from attnkit import _gemm_ops, _plans
import reference
from conftest import randn
from gpu_support import poison_allocator, require_cuda, skip_if_unsupported


def test_gemm_matches_matmul():
    a, b = randn(37, 29), randn(29, 41)
    assert reference.relative_l2(attnkit.gemm(a, b), a.double() @ b.double()) <= 1e-5


def test_batched_gemm_with_broadcast_batch():
    a, b = randn(3, 17, 9), randn(1, 9, 13)
    assert reference.relative_l2(attnkit.gemm(a, b), a.double() @ b.double()) <= 1e-5


def test_two_dimensional_operand_broadcasts_against_a_batch():
    a, b = randn(17, 9), randn(4, 9, 13)
    assert reference.relative_l2(attnkit.gemm(a, b), a.double() @ b.double()) <= 1e-5


def test_transposed_views_are_column_major_operands():
    a, b = randn(9, 17).mT, randn(13, 9).mT
    assert reference.relative_l2(attnkit.gemm(a, b), a.double() @ b.double()) <= 1e-5


def test_views_without_a_unit_stride_are_copied_not_refused():
    """Operands whose last two dims have no stride 1 (column slices, strided vectors, a 1 x 1 view with any
    strides) are copied, as attention copies such inputs; the result is a @ b."""
    x = randn(6, 16)
    cases = [(x[:, ::2], randn(8, 5)), (x[:1, ::2], randn(8, 3)), (x[:, ::2][:, :1], randn(1, 4)),
             (randn(2, 2)[::2, ::2], randn(1, 7)), (randn(3, 4, 10)[:, :, ::2], randn(5, 6))]
    for a, b in cases:
        assert a.stride(-1) != 1 and a.stride(-2) != 1
        assert reference.relative_l2(attnkit.gemm(a, b), a.double() @ b.double()) <= 1e-5, tuple(a.stride())


def test_float16_gemm_within_tolerance():
    a, b = randn(33, 20, dtype=torch.float16), randn(20, 18, dtype=torch.float16)
    assert reference.relative_l2(attnkit.gemm(a, b), a.double() @ b.double()) <= 5e-3


def test_float64_gradients_of_broadcast_batched_gemm_pass_gradcheck():
    a = randn(3, 5, 4, dtype=torch.float64, requires_grad=True)
    b = randn(1, 4, 6, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(attnkit.gemm, (a, b))


def test_eager_calls_reuse_one_library_plan_per_call_shape():
    """Eager calls skip the custom op: the first call of a shape makes a library plan (attnkit_gemm_plan),
    later ones run it on their own tensors."""
    from attnkit import _gemm_ops

    _gemm_ops._gemm_plans.clear()
    a, b = randn(21, 11), randn(11, 6)
    first = attnkit.gemm(a, b)
    assert len(_gemm_ops._gemm_plans) == 1
    for _ in range(3):
        a2, b2 = randn(21, 11), randn(11, 6)
        assert reference.relative_l2(attnkit.gemm(a2, b2), a2.double() @ b2.double()) <= 1e-5
    assert len(_gemm_ops._gemm_plans) == 1
    attnkit.gemm(a.mT.contiguous().mT, b)  # another layout: another plan
    assert len(_gemm_ops._gemm_plans) == 2
    assert reference.relative_l2(first, a.double() @ b.double()) <= 1e-5


def test_eager_path_and_custom_op_agree_with_gradients():
    from attnkit import _gemm_ops

    a = randn(3, 7, 5, dtype=torch.float64).requires_grad_()
    b = randn(1, 5, 4, dtype=torch.float64).requires_grad_()
    grad = randn(3, 7, 4, dtype=torch.float64)
    eager = attnkit.gemm(a, b)
    eager.backward(grad)
    eager_grads = (a.grad.clone(), b.grad.clone())
    a.grad = b.grad = None
    op = _gemm_ops.gemm(a, b, False)
    op.backward(grad)
    assert torch.equal(eager, op)
    assert torch.equal(eager_grads[0], a.grad) and torch.equal(eager_grads[1], b.grad)


def test_eager_path_refuses_what_the_op_refuses():
    import pytest

    with pytest.raises(ValueError, match="rank"):
        attnkit.gemm(randn(5), randn(5, 3))
    with pytest.raises((ValueError, RuntimeError)):
        attnkit.gemm(randn(4, 5), randn(6, 3))


# --- CUDA: odd N (B and C staged with N rounded up to 8) and split-K (gemm_split_k.hpp) -----------------

_LOW_PRECISION = [torch.bfloat16, torch.float16]


def _cuda_operand(rows, cols, dtype, transposed):
    """A [rows, cols] CUDA operand, stored transposed (a column-major .mT view) when asked."""
    if transposed:
        return torch.randn(cols, rows, dtype=dtype, device="cuda").mT
    return torch.randn(rows, cols, dtype=dtype, device="cuda")


@pytest.mark.parametrize("dtype", _LOW_PRECISION)
@pytest.mark.parametrize("transpose_a", [False, True])
@pytest.mark.parametrize("transpose_b", [False, True])
@pytest.mark.parametrize("shape", [(64, 1, 64), (37, 7, 96), (1023, 1025, 1027), (16, 4097, 1024),
                                   (16, 512, 4096), (256, 256, 8192), (24, 1001, 2048)])
def test_cuda_gemm_odd_n_and_split_k_shapes_match(dtype, transpose_a, transpose_b, shape):
    require_cuda()
    m, n, k = shape
    a, b = _cuda_operand(m, k, dtype, transpose_a), _cuda_operand(k, n, dtype, transpose_b)
    poison_allocator((m, n), dtype)
    with skip_if_unsupported(f"gemm {dtype}"):
        c = attnkit.gemm(a, b)
    assert torch.isfinite(c).all()
    assert reference.relative_l2(c, a.double() @ b.double()) <= reference.TOLERANCE[dtype]


@pytest.mark.parametrize("shape", [(16, 512, 4096), (16, 4097, 1024)])
def test_cuda_gemm_split_k_and_odd_n_are_repeatable_and_replay_from_a_cuda_graph(shape):
    require_cuda()
    m, n, k = shape
    a = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(n, k, dtype=torch.bfloat16, device="cuda").mT  # x @ W^T: K-major B
    with skip_if_unsupported("gemm bf16"):
        first = attnkit.gemm(a, b)  # the plan is made outside the capture
    second = attnkit.gemm(a, b)
    assert torch.equal(first, second), "two runs of one plan differ"
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        c = attnkit.gemm(a, b)
    a.copy_(torch.randn(m, k, dtype=torch.bfloat16, device="cuda"))
    graph.replay()
    torch.cuda.synchronize()
    assert reference.relative_l2(c, a.double() @ b.double()) <= reference.TOLERANCE[torch.bfloat16]


# --- CUDA: the workspace kept per stream (_plans._stream_arguments) -------------------------------------------


def _split_k_operands():
    """A decode-like problem whose plan needs a workspace on Hopper (split-K partial sums)."""
    a = torch.randn(16, 4096, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(512, 4096, dtype=torch.bfloat16, device="cuda").mT
    return a, b


def _workspace_plan_or_skip(a, b):
    with skip_if_unsupported("gemm bf16"):
        c = attnkit.gemm(a, b)
    (entry,) = [e for e in _gemm_ops._gemm_plans.values() if e.c_shape == tuple(c.shape)]
    if entry.plan.workspace_bytes == 0:
        pytest.skip("this device's kernel for the problem needs no workspace (no split-K: not a Hopper GPU)")
    return c


def test_cuda_runs_on_one_stream_share_its_kept_workspace_and_other_streams_get_their_own():
    require_cuda()
    _gemm_ops._gemm_plans.clear()
    _plans.clear_workspaces()
    a, b = _split_k_operands()
    first = _workspace_plan_or_skip(a, b)
    assert len(_plans._kept_workspaces) == 1
    (kept,) = [k.tensor for k in _plans._kept_workspaces.values()]
    for _ in range(3):
        c = attnkit.gemm(a, b)
        assert torch.equal(c, first), "runs on the kept workspace differ"
        assert next(iter(_plans._kept_workspaces.values())).tensor.data_ptr() == kept.data_ptr()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        on_side = attnkit.gemm(a, b)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    assert len(_plans._kept_workspaces) == 2
    assert torch.equal(on_side, first)
    assert reference.relative_l2(first, a.double() @ b.double()) <= reference.TOLERANCE[torch.bfloat16]
    _plans.clear_workspaces()


def test_cuda_graph_capture_takes_its_own_workspace_not_the_kept_one():
    require_cuda()
    _gemm_ops._gemm_plans.clear()
    _plans.clear_workspaces()
    a, b = _split_k_operands()
    _workspace_plan_or_skip(a, b)
    before = {key: kept.tensor.data_ptr() for key, kept in _plans._kept_workspaces.items()}
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        c = attnkit.gemm(a, b)
    assert {key: kept.tensor.data_ptr() for key, kept in _plans._kept_workspaces.items()} == before
    _plans.clear_workspaces()  # the graph does not depend on the kept buffers
    attnkit.gemm(a, b)  # eager runs on a new kept workspace meanwhile
    a.copy_(torch.randn_like(a))
    graph.replay()
    torch.cuda.synchronize()
    assert reference.relative_l2(c, a.double() @ b.double()) <= reference.TOLERANCE[torch.bfloat16]
