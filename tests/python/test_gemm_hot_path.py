"""attnkit.gemm's cached eager path (_gemm_ops.run_gemm): a call whose key matches a cached plan runs it with the
call's pointers, and anything the key holds (dtype, device, strides, rank, address mod 16 of either operand) that
differs makes another plan or is refused as on a first call; batched broadcast, column-major (.mT) operands and
autograd keep working when the plan is already cached."""

import pytest
import torch

import attnkit
import reference
from attnkit import _gemm_ops
from conftest import randn


def _plans():
    return len(_gemm_ops._gemm_plans)


def _offset(*shape, elements=1, dtype=torch.float32):
    """A row-major tensor whose data starts `elements` past an allocation (its address mod 16 differs)."""
    count = 1
    for extent in shape:
        count *= extent
    return torch.randn(count + elements, dtype=dtype)[elements:].view(shape)


def _close(c, a, b, tolerance=1e-5):
    return reference.relative_l2(c, a.double() @ b.double()) <= tolerance


@pytest.fixture(autouse=True)
def _fresh_plans():
    _gemm_ops._gemm_plans.clear()
    yield


def test_cached_entry_keeps_a_plain_tuple_shape_and_each_call_gets_its_own_output():
    a, b = randn(9, 5), randn(5, 7)
    first, second = attnkit.gemm(a, b), attnkit.gemm(a, b)
    (entry,) = _gemm_ops._gemm_plans.values()
    assert type(entry.c_shape) is tuple and entry.c_shape == (9, 7)
    assert first.shape == second.shape == torch.Size([9, 7]) and first.is_contiguous()
    assert first.data_ptr() != second.data_ptr()
    assert torch.equal(first, second) and _close(second, a, b)


def test_another_dtype_is_not_run_on_a_cached_plan():
    a, b = randn(6, 5), randn(5, 4)
    attnkit.gemm(a, b)
    for _ in range(2):
        with pytest.raises(ValueError, match="dtype"):
            attnkit.gemm(a, b.double())
        with pytest.raises(ValueError, match="dtype"):
            attnkit.gemm(a.to(torch.bfloat16), b)
    assert _plans() == 1
    assert _close(attnkit.gemm(a.double(), b.double()), a, b, 1e-12)
    half_a, half_b = a.to(torch.bfloat16), b.to(torch.bfloat16)
    assert _close(attnkit.gemm(half_a, half_b), half_a, half_b, reference.TOLERANCE[torch.bfloat16])
    assert _plans() == 3


def test_another_device_is_refused_after_a_plan_of_the_same_shape():
    a, b = randn(6, 5), randn(5, 4)
    attnkit.gemm(a, b)
    for _ in range(2):
        with pytest.raises(ValueError, match="a: device meta"):
            attnkit.gemm(torch.empty(6, 5, device="meta"), b)
        with pytest.raises(ValueError, match="b: device meta"):
            attnkit.gemm(a, torch.empty(5, 4, device="meta"))
    assert _plans() == 1


def test_cuda_operand_beside_a_cached_cpu_plan_is_refused():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    a, b = randn(6, 5), randn(5, 4)
    attnkit.gemm(a, b)
    with pytest.raises((ValueError, RuntimeError), match="device"):
        attnkit.gemm(a, b.cuda())


def test_strides_and_alignment_of_either_operand_make_their_own_plans():
    a, b = randn(12, 8), randn(8, 6)
    assert _close(attnkit.gemm(a, b), a, b)
    variants = [
        (randn(8, 12).mT, b),  # column-major a
        (a, randn(6, 8).mT),  # column-major b
        (_offset(12, 8), b),  # a's address mod 16 differs
        (a, _offset(8, 6)),  # b's
        (_offset(12, 8, elements=2), _offset(8, 6, elements=3)),
    ]
    for i, (x, y) in enumerate(variants):
        for _ in range(2):  # the second call runs the cached plan
            assert _close(attnkit.gemm(x, y), x, y), i
        assert _plans() == 2 + i, i


def test_views_without_a_unit_stride_are_copied_on_the_cached_path():
    wide = randn(3, 10, 16)
    b = randn(8, 5)
    for _ in range(3):
        wide.normal_()
        a = wide[:, :, ::2]
        assert a.stride(-1) != 1 and a.stride(-2) != 1
        assert _close(attnkit.gemm(a, b), a, b)
        assert _close(attnkit.gemm(b.mT, a.mT), b.mT, a.mT)


def test_in_place_changes_of_one_tensor_are_seen():
    t, b = randn(8, 6), randn(6, 5)
    assert _close(attnkit.gemm(t, b), t, b)
    t.t_()  # the same object, now [6, 8] column-major
    c = randn(8, 3)
    assert _close(attnkit.gemm(t, c), t, c)
    t.resize_(4, 6)
    assert _close(attnkit.gemm(t, b), t, b)
    with pytest.raises(ValueError):
        attnkit.gemm(t, c)


@pytest.mark.parametrize("shapes", [((3, 7, 5), (1, 5, 4)), ((1, 7, 5), (3, 5, 4)), ((7, 5), (3, 5, 4)),
                                    ((3, 7, 5), (5, 4)), ((3, 7, 5), (3, 5, 4)), ((0, 7, 5), (1, 5, 4))])
@pytest.mark.parametrize("transposed", [False, True])
def test_batched_broadcast_on_the_cached_path(shapes, transposed):
    def operand(shape):
        if transposed:
            return randn(*shape[:-2], shape[-1], shape[-2]).mT
        return randn(*shape)

    for _ in range(3):  # fresh data each call, one plan
        a, b = operand(shapes[0]), operand(shapes[1])
        c = attnkit.gemm(a, b)
        assert c.shape == torch.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1])
        if c.numel():
            assert _close(c, a, b)
    assert _plans() == 1


def test_column_major_operands_keep_one_plan_per_layout():
    for _ in range(3):
        a, b = randn(6, 9).mT, randn(4, 6).mT
        assert _close(attnkit.gemm(a, b), a, b)
        assert _close(attnkit.gemm(a.mT.mT.contiguous(), b), a, b)
    assert _plans() == 2


@pytest.mark.parametrize("shapes", [((3, 5, 4), (1, 4, 6)), ((5, 4), (3, 4, 6)), ((3, 5, 4), (4, 6)),
                                    ((5, 4), (4, 6))])
def test_requires_grad_inputs_get_gradients_after_a_cached_call(shapes):
    a0, b0 = randn(*shapes[0], dtype=torch.float64), randn(*shapes[1], dtype=torch.float64)
    attnkit.gemm(a0, b0)  # the plan, made without autograd
    a = randn(*shapes[0], dtype=torch.float64, requires_grad=True)
    b = randn(*shapes[1], dtype=torch.float64).mT.contiguous().mT.requires_grad_()
    c = attnkit.gemm(a, b)
    assert c.grad_fn is not None
    grad = torch.randn_like(c)
    c.backward(grad)
    ref_a, ref_b = a.detach().clone().requires_grad_(), b.detach().clone().requires_grad_()
    torch.matmul(ref_a, ref_b).backward(grad)
    assert a.grad.shape == a.shape and b.grad.shape == b.shape
    assert torch.allclose(a.grad, ref_a.grad) and torch.allclose(b.grad, ref_b.grad)
    with torch.no_grad():
        assert attnkit.gemm(a, b).grad_fn is None
    assert not attnkit.gemm(a.detach(), b.detach()).requires_grad


def test_refusals_repeat_on_every_call_and_cache_nothing():
    b = randn(5, 3)
    cases = [((randn(5), b), ValueError, "rank 1"),
             ((randn(2, 2, 4, 5), b), ValueError, "rank 4"),
             ((randn(2, 2, 4, 10)[..., ::2], b), ValueError, "rank 4"),
             ((randn(4, 6), b), ValueError, None),
             ((randn(2, 4, 5), randn(3, 5, 3)), ValueError, "batch"),
             (([[1.0]], b), TypeError, "a: list"),
             ((randn(4, 5), "b"), TypeError, "b: str"),
             ((torch.ones(4, 5, dtype=torch.int32), torch.ones(5, 3, dtype=torch.int32)), TypeError, "dtype")]
    for _ in range(2):
        for (a, b_), error, match in cases:
            with pytest.raises(error, match=match):
                attnkit.gemm(a, b_)
    assert _plans() == 0
