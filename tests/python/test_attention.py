"""attnkit.attention on the CPU: dense, causal (both alignments), element masks, GQA, Dv != D,
strided views, lse, and float64 gradients — each against the plain-PyTorch reference."""

import pytest
import torch

import attnkit
import reference
from conftest import randn


def test_dense_attention_matches_reference_in_float32():
    q, k, v = randn(2, 13, 3, 16), randn(2, 13, 3, 16), randn(2, 13, 3, 16)
    expected, _ = reference.attention(q, k, v)
    assert reference.relative_l2(attnkit.attention(q, k, v), expected) <= 1e-5


def test_cross_attention_with_gqa_and_value_dim_different_from_head_dim():
    q, k, v = randn(2, 7, 6, 16), randn(2, 19, 2, 16), randn(2, 19, 2, 24)
    out = attnkit.attention(q, k, v)
    expected, _ = reference.attention(q, k, v)
    assert out.shape == (2, 7, 6, 24)
    assert reference.relative_l2(out, expected) <= 1e-5


@pytest.mark.parametrize("alignment", ["top_left", "bottom_right"])
def test_causal_attention_with_fewer_queries_than_keys_follows_alignment(alignment):
    q, k, v = randn(1, 5, 2, 8), randn(1, 11, 2, 8), randn(1, 11, 2, 8)
    out, lse = attnkit.attention(q, k, v, is_causal=True, causal_alignment=alignment, return_lse=True)
    mask = reference.causal_mask(5, 11, bottom_right=alignment == "bottom_right")
    expected, expected_lse = reference.attention(q, k, v, mask)
    assert reference.relative_l2(out, expected) <= 1e-5
    assert reference.relative_l2(lse, expected_lse) <= 1e-5


def test_lse_is_float32_natural_log_of_the_softmax_denominator():
    q, k, v = randn(2, 9, 2, 8, dtype=torch.float64), randn(2, 9, 2, 8, dtype=torch.float64), randn(
        2, 9, 2, 8, dtype=torch.float64)
    _, lse = attnkit.attention(q, k, v, return_lse=True)
    _, expected = reference.attention(q, k, v)
    assert lse.dtype == torch.float32
    assert reference.relative_l2(lse, expected) <= 1e-6


def test_element_mask_per_batch_and_head_is_applied():
    q, k, v = randn(2, 10, 3, 8), randn(2, 12, 3, 8), randn(2, 12, 3, 8)
    mask = torch.rand(2, 3, 10, 12) < 0.4
    expected, _ = reference.attention(q, k, v, mask)
    assert reference.relative_l2(attnkit.attention(q, k, v, mask=mask), expected) <= 1e-5


def test_two_dimensional_mask_broadcasts_over_batch_and_heads():
    q, k, v = randn(2, 10, 3, 8), randn(2, 12, 3, 8), randn(2, 12, 3, 8)
    mask = torch.rand(10, 12) < 0.5
    expected, _ = reference.attention(q, k, v, mask)
    assert reference.relative_l2(attnkit.attention(q, k, v, mask=mask), expected) <= 1e-5


def test_row_with_no_key_gives_zero_output_and_minus_inf_lse_and_zero_gradient():
    q, k, v = (randn(1, 6, 2, 8, dtype=torch.float64, requires_grad=True) for _ in range(3))
    mask = torch.ones(1, 1, 6, 6, dtype=torch.bool)
    mask[..., 2, :] = False
    out, lse = attnkit.attention(q, k, v, mask=mask, return_lse=True)
    assert torch.all(out[:, 2] == 0)
    assert torch.all(lse[:, 2] == float("-inf"))
    out.sum().backward()
    assert torch.all(q.grad[:, 2] == 0)
    assert not torch.isnan(q.grad).any() and not torch.isnan(k.grad).any()


def test_views_of_a_packed_qkv_projection_are_read_without_copy_errors():
    packed = randn(2, 11, 3, 4, 16)  # [B, L, (q, k, v), H, D]
    q, k, v = packed.unbind(dim=2)
    assert not q.is_contiguous()
    expected, _ = reference.attention(q, k, v)
    assert reference.relative_l2(attnkit.attention(q, k, v), expected) <= 1e-5


def test_non_contiguous_last_dimension_is_accepted():
    q = randn(2, 9, 2, 16).transpose(-1, -2).contiguous().transpose(-1, -2)  # last stride != 1
    k, v = randn(2, 9, 2, 16), randn(2, 9, 2, 16)
    expected, _ = reference.attention(q, k, v)
    assert reference.relative_l2(attnkit.attention(q, k, v), expected) <= 1e-5


def test_explicit_scale_is_used():
    q, k, v = randn(1, 8, 2, 8), randn(1, 8, 2, 8), randn(1, 8, 2, 8)
    expected, _ = reference.attention(q, k, v, scale=0.3)
    assert reference.relative_l2(attnkit.attention(q, k, v, scale=0.3), expected) <= 1e-5


def test_float64_dense_causal_gradients_pass_gradcheck():
    q, k, v = (randn(1, 7, 2, 4, dtype=torch.float64, requires_grad=True) for _ in range(3))
    assert torch.autograd.gradcheck(lambda q, k, v: attnkit.attention(q, k, v, is_causal=True), (q, k, v))


def test_float64_element_mask_gqa_gradients_pass_gradcheck():
    q = randn(1, 6, 4, 4, dtype=torch.float64, requires_grad=True)
    k = randn(1, 7, 2, 4, dtype=torch.float64, requires_grad=True)
    v = randn(1, 7, 2, 3, dtype=torch.float64, requires_grad=True)
    mask = torch.rand(1, 4, 6, 7) < 0.6
    assert torch.autograd.gradcheck(lambda q, k, v: attnkit.attention(q, k, v, mask=mask), (q, k, v))


def test_float32_gradients_match_reference_autograd():
    q, k, v = (randn(2, 9, 2, 8, requires_grad=True) for _ in range(3))
    grad = torch.randn(2, 9, 2, 8)
    attnkit.attention(q, k, v, is_causal=True).backward(grad)
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    expected, _ = reference.attention(q64, k64, v64, reference.causal_mask(9, 9))
    expected.backward(grad.double())
    for actual, wanted in ((q.grad, q64.grad), (k.grad, k64.grad), (v.grad, v64.grad)):
        assert reference.relative_l2(actual, wanted) <= 1e-5


def test_gradient_through_lse_matches_reference():
    q, k, v = (randn(1, 8, 2, 4, dtype=torch.float64, requires_grad=True) for _ in range(3))
    grad_out, grad_lse = torch.randn(1, 8, 2, 4, dtype=torch.float64), torch.randn(1, 8, 2, dtype=torch.float64)
    out, lse = attnkit.attention(q, k, v, return_lse=True)
    torch.autograd.backward((out, lse), (grad_out, grad_lse.float()))
    q64, k64, v64 = (t.detach().clone().requires_grad_() for t in (q, k, v))
    expected, expected_lse = reference.attention(q64, k64, v64)
    torch.autograd.backward((expected, expected_lse), (grad_out, grad_lse.float().double()))
    # lse is float32, so its share of the gradient carries float32 rounding.
    for actual, wanted in ((q.grad, q64.grad), (k.grad, k64.grad), (v.grad, v64.grad)):
        assert reference.relative_l2(actual, wanted) <= 1e-6
