"""Bad inputs raise ValueError / TypeError / RuntimeError carrying the library's message: the
argument, the value received and what is allowed. Nothing is computed on bad input."""

import pytest
import torch

import attnkit
from conftest import randn


def test_kernel_too_large_for_extent_raises_value_error_naming_kernel_size():
    q, k, v = randn(1, 8, 2, 8), randn(1, 8, 2, 8), randn(1, 8, 2, 8)
    with pytest.raises(ValueError, match="kernel_size") as info:
        attnkit.na1d(q, k, v, kernel_size=5, dilation=2)
    assert "allowed" in str(info.value)


def test_heads_not_divisible_for_gqa_raises_value_error():
    q, k, v = randn(1, 8, 3, 8), randn(1, 8, 2, 8), randn(1, 8, 2, 8)
    with pytest.raises(ValueError, match="allowed"):
        attnkit.attention(q, k, v)


def test_mixed_dtypes_raise_value_error():
    q, k, v = randn(1, 8, 2, 8), randn(1, 8, 2, 8, dtype=torch.float64), randn(1, 8, 2, 8)
    with pytest.raises(ValueError, match="dtype"):
        attnkit.attention(q, k, v)


def test_unsupported_dtype_raises_type_error():
    q = torch.randint(0, 4, (1, 8, 2, 8))
    with pytest.raises(TypeError, match="dtype"):
        attnkit.attention(q, q, q)


def test_non_bool_mask_raises_type_error():
    q = randn(1, 8, 2, 8)
    with pytest.raises(TypeError, match="torch.bool"):
        attnkit.attention(q, q, q, mask=torch.ones(8, 8))


def test_mask_and_is_causal_together_raise_value_error():
    q = randn(1, 8, 2, 8)
    with pytest.raises(ValueError, match="is_causal"):
        attnkit.attention(q, q, q, is_causal=True, mask=torch.ones(8, 8, dtype=torch.bool))


def test_wrong_rank_for_na2d_raises_value_error_with_expected_layout():
    q = randn(1, 8, 2, 8)
    with pytest.raises(ValueError, match="rank 5"):
        attnkit.na2d(q, q, q, kernel_size=3)


def test_kernel_size_tuple_of_wrong_length_raises_value_error():
    q = randn(1, 6, 6, 2, 8)
    with pytest.raises(ValueError, match="kernel_size"):
        attnkit.na2d(q, q, q, kernel_size=(3, 3, 3))


def test_float_kernel_size_raises_type_error():
    q = randn(1, 9, 2, 8)
    with pytest.raises(TypeError, match="kernel_size"):
        attnkit.na1d(q, q, q, kernel_size=3.0)


def test_unknown_retention_mode_raises_value_error_listing_modes():
    q = randn(1, 8, 2, 8)
    with pytest.raises(ValueError, match="parallel"):
        attnkit.retention(q, q, q, mode="fused")


def test_gamma_outside_unit_interval_raises_value_error():
    q = randn(1, 8, 2, 8)
    with pytest.raises(ValueError, match="gamma"):
        attnkit.retention(q, q, q, gamma=[0.5, 1.5])


def test_gemm_inner_dimension_mismatch_raises_value_error():
    with pytest.raises(ValueError, match="allowed"):
        attnkit.gemm(randn(4, 5), randn(6, 3))


def test_sparse_attention_needs_exactly_one_mask():
    q = randn(1, 8, 2, 8)
    with pytest.raises(ValueError, match="exactly one"):
        attnkit.sparse_attention(q, q, q)


def test_merge_attentions_with_mismatched_lists_raises_value_error():
    out = randn(1, 4, 2, 8)
    with pytest.raises(ValueError, match="lses"):
        attnkit.merge_attentions([out, out], [torch.zeros(1, 4, 2)])


def test_library_errors_are_attnkit_errors_with_a_status():
    q = randn(1, 8, 2, 8)
    with pytest.raises(attnkit.AttnkitInvalidArgument) as info:
        attnkit.na1d(q, q, q, kernel_size=9)
    assert info.value.status == 1  # ATTNKIT_INVALID_ARGUMENT
