"""merge_attentions: attention over a key set split in two parts, merged by lse, equals attention
over all keys — in value and in gradient (which flows through each part's lse)."""

import torch

import attnkit
import reference
from conftest import randn


def test_merging_two_key_halves_equals_attention_over_all_keys():
    q, k, v = randn(2, 9, 2, 8), randn(2, 14, 2, 8), randn(2, 14, 2, 8)
    first = attnkit.attention(q, k[:, :6], v[:, :6], return_lse=True)
    second = attnkit.attention(q, k[:, 6:], v[:, 6:], return_lse=True)
    out, lse = attnkit.merge_attentions([first[0], second[0]], [first[1], second[1]])
    expected, expected_lse = reference.attention(q, k, v)
    assert reference.relative_l2(out, expected) <= 1e-5
    assert reference.relative_l2(lse, expected_lse) <= 1e-5


def test_merge_gradients_equal_full_attention_gradients():
    q, k, v = (randn(1, 7, 2, 4, dtype=torch.float64, requires_grad=True) for _ in range(3))
    grad = torch.randn(1, 7, 2, 4, dtype=torch.float64)
    parts = [attnkit.attention(q, k[:, :3], v[:, :3], return_lse=True),
             attnkit.attention(q, k[:, 3:], v[:, 3:], return_lse=True)]
    out, _ = attnkit.merge_attentions([p[0] for p in parts], [p[1] for p in parts])
    out.backward(grad)
    q64, k64, v64 = (t.detach().clone().requires_grad_() for t in (q, k, v))
    expected, _ = reference.attention(q64, k64, v64)
    expected.backward(grad)
    # The lse is float32, so the merge weights carry float32 rounding.
    for actual, wanted in ((q.grad, q64.grad), (k.grad, k64.grad), (v.grad, v64.grad)):
        assert reference.relative_l2(actual, wanted) <= 1e-5


def test_rows_empty_in_every_part_stay_zero_with_minus_inf_lse():
    q, k, v = randn(1, 4, 1, 8), randn(1, 4, 1, 8), randn(1, 4, 1, 8)
    mask = torch.ones(4, 4, dtype=torch.bool)
    mask[1] = False
    parts = [attnkit.attention(q, k, v, mask=mask, return_lse=True) for _ in range(2)]
    out, lse = attnkit.merge_attentions([p[0] for p in parts], [p[1] for p in parts])
    assert torch.all(out[:, 1] == 0) and torch.all(lse[:, 1] == float("-inf"))
    assert not torch.isnan(out).any()
