"""Neighborhood-attention modules, drop-in replacements for NATTEN's NeighborhoodAttention1D/2D/3D.

x [B, *tokens, C] -> qkv projection (one Linear to 3*C, split as (3, heads, head_dim) so NATTEN
checkpoints load unchanged: parameters qkv.weight, qkv.bias, proj.weight, proj.bias) -> neighborhood
attention per head -> output projection -> dropout. q, k and v are strided views of the projection
(no copy): the library takes any stride but the last.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from . import functional
from ._mask_spec import per_dim

__all__ = ["NeighborhoodAttention1D", "NeighborhoodAttention2D", "NeighborhoodAttention3D"]


class _NeighborhoodAttention(nn.Module):
    dims = 0

    def __init__(self, embed_dim: int, num_heads: int, kernel_size, dilation=1, stride=1, is_causal=False,
                 qkv_bias: bool = True, qk_scale: Optional[float] = None, proj_drop: float = 0.0):
        super().__init__()
        if embed_dim % num_heads != 0:
            raise ValueError(f"embed_dim: {embed_dim} with num_heads {num_heads}; allowed: a multiple of num_heads")
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.kernel_size = tuple(per_dim(kernel_size, self.dims, "kernel_size"))
        self.dilation = tuple(per_dim(dilation, self.dims, "dilation"))
        self.stride = tuple(per_dim(stride, self.dims, "stride"))
        self.is_causal = tuple(per_dim(is_causal, self.dims, "is_causal", kind=bool))
        self.scale = qk_scale if qk_scale is not None else self.head_dim ** -0.5
        self.qkv = nn.Linear(embed_dim, embed_dim * 3, bias=qkv_bias)
        self.proj = nn.Linear(embed_dim, embed_dim)
        self.proj_drop = nn.Dropout(proj_drop)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != self.dims + 2 or x.shape[-1] != self.embed_dim:
            raise ValueError(f"x: shape {tuple(x.shape)}; allowed: [batch, {self.dims} token extents, "
                             f"{self.embed_dim}] for {type(self).__name__}")
        tokens = x.shape[1:-1]
        qkv = self.qkv(x).reshape(x.shape[0], *tokens, 3, self.num_heads, self.head_dim)
        q, k, v = qkv.unbind(dim=-3)
        na = (functional.na1d, functional.na2d, functional.na3d)[self.dims - 1]
        out = na(q, k, v, self.kernel_size, self.dilation, self.stride, self.is_causal, self.scale)
        return self.proj_drop(self.proj(out.reshape(x.shape[0], *tokens, self.embed_dim)))

    def extra_repr(self) -> str:
        return (f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, kernel_size={self.kernel_size}, "
                f"dilation={self.dilation}, stride={self.stride}, is_causal={self.is_causal}")


class NeighborhoodAttention1D(_NeighborhoodAttention):
    """x [B, L, C]."""

    dims = 1


class NeighborhoodAttention2D(_NeighborhoodAttention):
    """x [B, X, Y, C]."""

    dims = 2


class NeighborhoodAttention3D(_NeighborhoodAttention):
    """x [B, X, Y, Z, C]."""

    dims = 3
