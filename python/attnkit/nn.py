"""Neighborhood-attention modules, drop-in replacements for NATTEN's NeighborhoodAttention1D/2D/3D.

The constructor takes NATTEN >= 0.20's parameters in NATTEN's order and with its defaults:
(embed_dim, num_heads, kernel_size, stride=1, dilation=1, is_causal=False, qkv_bias=True,
qk_scale=None, proj_drop=0.0) — so NeighborhoodAttention2D(64, 4, 7, 2) has stride 2, as in NATTEN.
NATTEN 0.20.0 spelled the first parameter `dim`; dim= is accepted as a keyword for embed_dim.

x [B, *tokens, C] -> qkv projection (one Linear to 3*C, split as (3, heads, head_dim) so NATTEN
checkpoints load unchanged: parameters qkv.weight, qkv.bias, proj.weight, proj.bias) -> neighborhood
attention per head -> output projection -> dropout. q, k and v are strided views of the projection
(no copy): the library takes any stride but the last.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, ClassVar, Optional, Sequence, TypeVar, Union, cast

import torch
from torch import nn

from . import functional
from ._mask_spec import per_dim

__all__ = ["NeighborhoodAttention1D", "NeighborhoodAttention2D", "NeighborhoodAttention3D"]

_Init = TypeVar("_Init", bound=Callable[..., None])
_IntPerDim = Union[int, Sequence[int]]
_BoolPerDim = Union[bool, Sequence[bool]]


def _accept_dim_name(init: _Init) -> _Init:
    """dim= (NATTEN 0.20.0's name of the first parameter) as a keyword for embed_dim."""

    @functools.wraps(init)
    def wrapper(self: nn.Module, *args: Any, **kwargs: Any) -> None:
        if "dim" in kwargs:
            if "embed_dim" in kwargs or args:
                raise TypeError(f"{type(self).__name__}(): got embed_dim twice, as embed_dim and as dim= "
                                f"(NATTEN 0.20.0's name); allowed: one of them")
            kwargs["embed_dim"] = kwargs.pop("dim")
        init(self, *args, **kwargs)

    return cast(_Init, wrapper)


class _NeighborhoodAttention(nn.Module):
    dims: ClassVar[int] = 0

    @_accept_dim_name
    def __init__(self, embed_dim: int, num_heads: int, kernel_size: _IntPerDim, stride: Optional[_IntPerDim] = 1,
                 dilation: Optional[_IntPerDim] = 1, is_causal: Optional[_BoolPerDim] = False,
                 qkv_bias: bool = True, qk_scale: Optional[float] = None, proj_drop: float = 0.0) -> None:
        super().__init__()
        if embed_dim % num_heads != 0:
            raise ValueError(f"embed_dim: {embed_dim} with num_heads {num_heads}; allowed: a multiple of num_heads")
        self.na_dim = self.dims
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        # None means the default, as in NATTEN's functional API.
        self.kernel_size = tuple(per_dim(kernel_size, self.dims, "kernel_size"))
        self.stride = tuple(per_dim(1 if stride is None else stride, self.dims, "stride"))
        self.dilation = tuple(per_dim(1 if dilation is None else dilation, self.dims, "dilation"))
        self.is_causal = tuple(per_dim(False if is_causal is None else is_causal, self.dims, "is_causal", kind=bool))
        # As NATTEN (qk_scale or head_dim ** -0.5): None or 0 gives the default.
        self.scale = qk_scale or self.head_dim ** -0.5
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
        out = na(query=q, key=k, value=v, kernel_size=self.kernel_size, stride=self.stride, dilation=self.dilation,
                 is_causal=self.is_causal, scale=self.scale)
        return self.proj_drop(self.proj(out.reshape(x.shape[0], *tokens, self.embed_dim)))

    def extra_repr(self) -> str:
        return (f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, head_dim={self.head_dim}, "
                f"kernel_size={self.kernel_size}, stride={self.stride}, dilation={self.dilation}, "
                f"is_causal={self.is_causal}")


class NeighborhoodAttention1D(_NeighborhoodAttention):
    """x [B, L, C]. NeighborhoodAttention1D(embed_dim, num_heads, kernel_size, stride=1, dilation=1,
    is_causal=False, qkv_bias=True, qk_scale=None, proj_drop=0.0), as NATTEN >= 0.20."""

    dims = 1


class NeighborhoodAttention2D(_NeighborhoodAttention):
    """x [B, X, Y, C]. NeighborhoodAttention2D(embed_dim, num_heads, kernel_size, stride=1, dilation=1,
    is_causal=False, qkv_bias=True, qk_scale=None, proj_drop=0.0), as NATTEN >= 0.20."""

    dims = 2


class NeighborhoodAttention3D(_NeighborhoodAttention):
    """x [B, X, Y, Z, C]. NeighborhoodAttention3D(embed_dim, num_heads, kernel_size, stride=1, dilation=1,
    is_causal=False, qkv_bias=True, qk_scale=None, proj_drop=0.0), as NATTEN >= 0.20."""

    dims = 3
