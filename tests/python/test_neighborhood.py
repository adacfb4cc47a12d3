"""na1d / na2d / na3d on the CPU against explicit masks built from DESIGN §3's window rules:
kernel size, dilation, stride and causality per dimension, odd extents, float64 gradients."""

import pytest
import torch

import attnkit
import reference
from conftest import randn

CASES_1D = [
    dict(kernel_size=5),
    dict(kernel_size=4, dilation=2),
    dict(kernel_size=5, stride=3),
    dict(kernel_size=3, is_causal=True),
    dict(kernel_size=4, dilation=3, stride=2, is_causal=True),
]


def _expected(q, k, v, extents, kernel_size, dilation=1, stride=1, is_causal=False):
    dims = len(extents)
    as_list = lambda x: list(x) if isinstance(x, (list, tuple)) else [x] * dims  # noqa: E731
    mask = reference.neighborhood_mask(extents, as_list(kernel_size), as_list(dilation), as_list(stride),
                                       as_list(is_causal))
    return reference.attention(q, k, v, mask)


@pytest.mark.parametrize("params", CASES_1D, ids=lambda p: "-".join(f"{k}{v}" for k, v in p.items()))
def test_na1d_matches_explicit_neighborhood_mask(params):
    q, k, v = randn(2, 17, 2, 8), randn(2, 17, 2, 8), randn(2, 17, 2, 8)
    out, lse = attnkit.na1d(q, k, v, return_lse=True, **params)
    expected, expected_lse = _expected(q, k, v, (17,), **params)
    assert reference.relative_l2(out, expected) <= 1e-5
    assert reference.relative_l2(lse, expected_lse) <= 1e-5


def test_na2d_with_per_dimension_dilation_stride_and_causality():
    params = dict(kernel_size=(3, 5), dilation=(2, 1), stride=(1, 2), is_causal=(False, True))
    q, k, v = randn(1, 9, 11, 2, 8), randn(1, 9, 11, 2, 8), randn(1, 9, 11, 2, 8)
    expected, _ = _expected(q, k, v, (9, 11), **params)
    assert reference.relative_l2(attnkit.na2d(q, k, v, **params), expected) <= 1e-5


def test_na3d_with_odd_extents():
    params = dict(kernel_size=(3, 3, 5), dilation=(1, 2, 1))
    q, k, v = randn(1, 5, 7, 6, 2, 8), randn(1, 5, 7, 6, 2, 8), randn(1, 5, 7, 6, 2, 8)
    expected, _ = _expected(q, k, v, (5, 7, 6), **params)
    assert reference.relative_l2(attnkit.na3d(q, k, v, **params), expected) <= 1e-5


def test_kernel_size_equal_to_extent_is_dense_attention():
    q, k, v = randn(1, 6, 7, 2, 8), randn(1, 6, 7, 2, 8), randn(1, 6, 7, 2, 8)
    expected, _ = reference.attention(q, k, v)
    assert reference.relative_l2(attnkit.na2d(q, k, v, kernel_size=(6, 7)), expected) <= 1e-5


def test_na2d_float64_gradients_pass_gradcheck():
    q, k, v = (randn(1, 5, 6, 2, 4, dtype=torch.float64, requires_grad=True) for _ in range(3))
    fn = lambda q, k, v: attnkit.na2d(q, k, v, kernel_size=3, dilation=(1, 2), is_causal=(True, False))  # noqa: E731
    assert torch.autograd.gradcheck(fn, (q, k, v))


def test_na1d_float64_strided_gradients_pass_gradcheck():
    q, k, v = (randn(1, 11, 1, 4, dtype=torch.float64, requires_grad=True) for _ in range(3))
    fn = lambda q, k, v: attnkit.na1d(q, k, v, kernel_size=5, stride=2, dilation=2)  # noqa: E731
    assert torch.autograd.gradcheck(fn, (q, k, v))
