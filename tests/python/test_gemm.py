"""attnkit.gemm on the CPU: plain, batched, broadcast batch, transposed (column-major) views,
float64 gradients."""

import torch

import attnkit
import reference
from conftest import randn


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
