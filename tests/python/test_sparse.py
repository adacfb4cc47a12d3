"""sparse_attention on the CPU: block masks (odd extents, partial last blocks) and element masks,
against the reference with the block mask expanded to elements."""

import torch

import attnkit
import reference
from conftest import randn


def test_block_mask_attends_true_blocks_in_full():
    q, k, v = randn(2, 21, 2, 8), randn(2, 19, 2, 8), randn(2, 19, 2, 8)
    block_mask = torch.rand(2, 2, 6, 4) < 0.5  # ceil(21/4) x ceil(19/5)
    block_mask[..., 0] = True
    out = attnkit.sparse_attention(q, k, v, block_mask=block_mask, block_size=(4, 5))
    expected, _ = reference.attention(q, k, v, reference.block_to_element_mask(block_mask, 21, 19, 4, 5))
    assert reference.relative_l2(out, expected) <= 1e-5


def test_block_mask_broadcast_over_batch_and_heads_with_square_blocks():
    q, k, v = randn(2, 16, 3, 8), randn(2, 16, 3, 8), randn(2, 16, 3, 8)
    block_mask = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [0, 1, 1, 0], [1, 0, 1, 1]], dtype=torch.bool)
    out = attnkit.sparse_attention(q, k, v, block_mask=block_mask, block_size=4)
    expected, _ = reference.attention(q, k, v, reference.block_to_element_mask(block_mask, 16, 16, 4, 4))
    assert reference.relative_l2(out, expected) <= 1e-5


def test_element_mask_through_sparse_attention():
    q, k, v = randn(1, 13, 2, 8), randn(1, 13, 2, 8), randn(1, 13, 2, 8)
    mask = torch.rand(1, 2, 13, 13) < 0.2
    expected, _ = reference.attention(q, k, v, mask)
    assert reference.relative_l2(attnkit.sparse_attention(q, k, v, mask=mask), expected) <= 1e-5


def test_block_sparse_float64_gradients_pass_gradcheck():
    q, k, v = (randn(1, 9, 2, 4, dtype=torch.float64, requires_grad=True) for _ in range(3))
    block_mask = torch.tensor([[True, False, False], [True, True, False], [False, True, True]])
    fn = lambda q, k, v: attnkit.sparse_attention(q, k, v, block_mask=block_mask, block_size=3)  # noqa: E731
    assert torch.autograd.gradcheck(fn, (q, k, v))
