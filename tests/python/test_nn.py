"""attnkit.nn.NeighborhoodAttention1D/2D/3D: NATTEN-shaped modules (qkv, proj parameters) that
compute projection -> neighborhood attention per head -> projection."""

import torch

import attnkit
import reference
from conftest import randn


def test_module_equals_projections_around_na2d():
    module = attnkit.nn.NeighborhoodAttention2D(24, 3, kernel_size=3, dilation=(1, 2), is_causal=(False, True))
    x = randn(2, 7, 9, 24)
    qkv = module.qkv(x).reshape(2, 7, 9, 3, 3, 8)
    mask = reference.neighborhood_mask((7, 9), [3, 3], [1, 2], [1, 1], [False, True])
    attended, _ = reference.attention(qkv[..., 0, :, :], qkv[..., 1, :, :], qkv[..., 2, :, :], mask)
    expected = module.proj(attended.float().reshape(2, 7, 9, 24))
    assert reference.relative_l2(module(x), expected) <= 1e-5


def test_parameter_names_match_natten_checkpoints():
    module = attnkit.nn.NeighborhoodAttention1D(16, 2, kernel_size=5)
    assert sorted(module.state_dict()) == ["proj.bias", "proj.weight", "qkv.bias", "qkv.weight"]
    assert module.qkv.weight.shape == (48, 16)


def test_modules_of_each_rank_train_a_step():
    for cls, shape in ((attnkit.nn.NeighborhoodAttention1D, (2, 11, 16)),
                       (attnkit.nn.NeighborhoodAttention2D, (1, 5, 6, 16)),
                       (attnkit.nn.NeighborhoodAttention3D, (1, 3, 4, 5, 16))):
        module = cls(16, 4, kernel_size=3, stride=2 if cls is attnkit.nn.NeighborhoodAttention1D else 1)
        out = module(randn(*shape))
        assert out.shape == shape
        out.square().mean().backward()
        assert module.qkv.weight.grad is not None and torch.isfinite(module.qkv.weight.grad).all()


def test_module_rejects_input_of_wrong_rank():
    module = attnkit.nn.NeighborhoodAttention2D(16, 2, kernel_size=3)
    try:
        module(randn(2, 9, 16))
    except ValueError as error:
        assert "NeighborhoodAttention2D" in str(error)
    else:
        raise AssertionError("a 1-D input to a 2-D module must raise ValueError")
