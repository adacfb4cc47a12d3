"""NATTEN <= 0.17 compatibility: a program written for NATTEN 0.14 to 0.17 runs by changing its import to
``import attnkit.natten017 as natten`` (or ``from attnkit.natten017 import NeighborhoodAttention2D``), and its
checkpoints load unchanged. NATTEN's feature queries and switches (has_cuda, has_fused_na, use_fused_na, ...) are
here too (attnkit._natten_queries).

Modules: NeighborhoodAttention1D/2D/3D with NATTEN 0.17's constructor (dim, num_heads, kernel_size, dilation=1,
is_causal=False, rel_pos_bias=False, qkv_bias=True, qk_scale=None, attn_drop=0.0, proj_drop=0.0; the older
keyword ``bias=`` is accepted for rel_pos_bias) and its parameters: qkv, rpb [num_heads, 2K-1, ...], proj. x is
[B, *tokens, dim]; tokens shorter than kernel_size * dilation are zero-padded and the result cropped, as in
NATTEN. The attention runs fused (attnkit.na1d/na2d/na3d with rpb=...) unless attention dropout is active in
training, which needs the attention weights: then through the unfused ops below.

Unfused ops, NATTEN's heads-first layout (q, k, v [B, heads, *tokens, head_dim]; attn [B, heads, *tokens,
prod(kernel_size)], the window's keys in row-major order): na{1,2,3}d_qk(query, key, kernel_size, dilation,
is_causal=False, rpb=None), na{1,2,3}d_av(attn, value, kernel_size, dilation, is_causal=False), and the older
names natten{1,2,3}dqkrpb(query, key, rpb, kernel_size, dilation) and natten{1,2,3}dav(attn, value, kernel_size,
dilation). They follow NATTEN's window rule (a window of kernel_size keys in the query's dilation group, shifted
inward at the borders) and its bias indexing (entry pb_start + ki). Causal windows are not supported by the
unfused ops: use attnkit.na1d/na2d/na3d(..., is_causal=True).
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple, Union

import torch
from torch import nn

from . import _natten_queries, functional
from ._mask_spec import per_dim
from ._natten_queries import *  # noqa: F401,F403 - NATTEN's feature queries and switches (has_cuda, ...)

__all__ = [
    "NeighborhoodAttention1D", "NeighborhoodAttention2D", "NeighborhoodAttention3D",
    "na1d_qk", "na1d_av", "na2d_qk", "na2d_av", "na3d_qk", "na3d_av",
    "natten1dqkrpb", "natten1dav", "natten2dqkrpb", "natten2dav", "natten3dqkrpb", "natten3dav",
] + _natten_queries.__all__

_IntPerDim = Union[int, Sequence[int]]


# ---------------------------------------------------------------------------------------------
# Unfused ops


def _window(length: int, kernel: int, dilation: int, device) -> Tuple[torch.Tensor, torch.Tensor]:
    """Per coordinate of one token dimension: its window's key coordinates [length, kernel] and the bias entries
    they read [length, kernel] (NATTEN's window start and pb_start rules)."""
    i = torch.arange(length, device=device)
    nh = kernel // 2
    if dilation <= 1:
        start = (i - nh).clamp(min=0) + torch.where(i + nh >= length, length - i - nh - 1, 0)
        pb = nh + torch.where(i < nh, nh - i, 0) + torch.where(i + nh >= length, length - i - 1 - nh, 0)
    else:
        group, index = i % dilation, i // dilation
        group_length = (length - group + dilation - 1) // dilation
        start = (index - nh).clamp(min=0) + torch.where(index + nh >= group_length, group_length - index - nh - 1, 0)
        start = start * dilation + group
        pb = torch.where(i - nh * dilation < 0, kernel - 1 - index,
                         torch.where(i + nh * dilation >= length, (length - i - 1) // dilation, nh))
    steps = torch.arange(kernel, device=device)
    return start[:, None] + steps[None, :] * dilation, pb[:, None] + steps[None, :]


def _neighbors(tokens: Sequence[int], kernel: Sequence[int], dilation: Sequence[int], device):
    """Flat key indices [S, N] and flat bias entries [S, N] of every query (S tokens, N = prod(kernel))."""
    keys = torch.zeros((1, 1), dtype=torch.long, device=device)
    entries = torch.zeros((1, 1), dtype=torch.long, device=device)
    for length, k, d in zip(tokens, kernel, dilation):
        coordinate, pb = _window(length, k, d, device)
        keys = (keys[:, None, :, None] * length + coordinate[None, :, None, :]).reshape(keys.shape[0] * length, -1)
        entries = (entries[:, None, :, None] * (2 * k - 1) + pb[None, :, None, :]).reshape(entries.shape[0] * length,
                                                                                             -1)
    return keys, entries


def _check_unfused(dims: int, q: torch.Tensor, kernel_size, dilation, is_causal) -> Tuple[List[int], List[int]]:
    if q.dim() != dims + 3:
        raise ValueError(f"query: shape {tuple(q.shape)}; allowed: [batch, heads, {dims} token extents, head_dim] "
                         f"(NATTEN's heads-first layout)")
    if any(per_dim(is_causal, dims, "is_causal", kind=bool)):
        raise ValueError("is_causal=True in the unfused NATTEN <= 0.17 ops; allowed: False here, or "
                         f"attnkit.na{dims}d(..., is_causal=True), which runs causal windows fused")
    kernel = per_dim(kernel_size, dims, "kernel_size")
    dil = per_dim(dilation, dims, "dilation")
    for k, d, length in zip(kernel, dil, q.shape[2:-1]):
        if k % 2 == 0:
            raise ValueError(f"kernel_size: {k}; allowed: an odd kernel size in NATTEN <= 0.17's unfused ops "
                             f"(attnkit.na{dims}d takes even ones)")
        if k * d > length:
            raise ValueError(f"kernel_size {k} with dilation {d} spans {k * d} tokens but the input has {length}; "
                             f"allowed: kernel_size * dilation <= extent")
    return kernel, dil


def _qk(dims: int, query, key, kernel_size, dilation, is_causal=False, rpb=None):
    kernel, dil = _check_unfused(dims, query, kernel_size, dilation, is_causal)
    tokens = query.shape[2:-1]
    keys, entries = _neighbors(tokens, kernel, dil, query.device)
    b, h, d = query.shape[0], query.shape[1], query.shape[-1]
    q = query.reshape(b, h, -1, d)
    k = key.reshape(b, h, -1, d)[:, :, keys.reshape(-1)].reshape(b, h, keys.shape[0], keys.shape[1], d)
    attn = torch.einsum("bhsd,bhsnd->bhsn", q, k)
    if rpb is not None:
        attn = attn + rpb.reshape(h, -1)[:, entries].to(attn.dtype)
    return attn.reshape(b, h, *tokens, keys.shape[1])


def _av(dims: int, attn, value, kernel_size, dilation, is_causal=False):
    kernel, dil = _check_unfused(dims, value, kernel_size, dilation, is_causal)
    tokens = value.shape[2:-1]
    keys, _ = _neighbors(tokens, kernel, dil, value.device)
    b, h, d = value.shape[0], value.shape[1], value.shape[-1]
    v = value.reshape(b, h, -1, d)[:, :, keys.reshape(-1)].reshape(b, h, keys.shape[0], keys.shape[1], d)
    out = torch.einsum("bhsn,bhsnd->bhsd", attn.reshape(b, h, keys.shape[0], keys.shape[1]).to(v.dtype), v)
    return out.reshape(b, h, *tokens, d)


def na1d_qk(query, key, kernel_size, dilation=1, is_causal=False, rpb=None):
    return _qk(1, query, key, kernel_size, dilation, is_causal, rpb)


def na2d_qk(query, key, kernel_size, dilation=1, is_causal=False, rpb=None):
    return _qk(2, query, key, kernel_size, dilation, is_causal, rpb)


def na3d_qk(query, key, kernel_size, dilation=1, is_causal=False, rpb=None):
    return _qk(3, query, key, kernel_size, dilation, is_causal, rpb)


def na1d_av(attn, value, kernel_size, dilation=1, is_causal=False):
    return _av(1, attn, value, kernel_size, dilation, is_causal)


def na2d_av(attn, value, kernel_size, dilation=1, is_causal=False):
    return _av(2, attn, value, kernel_size, dilation, is_causal)


def na3d_av(attn, value, kernel_size, dilation=1, is_causal=False):
    return _av(3, attn, value, kernel_size, dilation, is_causal)


def natten1dqkrpb(query, key, rpb, kernel_size, dilation=1):
    return _qk(1, query, key, kernel_size, dilation, False, rpb)


def natten2dqkrpb(query, key, rpb, kernel_size, dilation=1):
    return _qk(2, query, key, kernel_size, dilation, False, rpb)


def natten3dqkrpb(query, key, rpb, kernel_size, dilation=1):
    return _qk(3, query, key, kernel_size, dilation, False, rpb)


natten1dav, natten2dav, natten3dav = na1d_av, na2d_av, na3d_av


# ---------------------------------------------------------------------------------------------
# Modules


class _NeighborhoodAttention(nn.Module):
    dims = 0

    def __init__(self, dim: int, num_heads: int, kernel_size: _IntPerDim, dilation: _IntPerDim = 1,
                 is_causal: Union[bool, Sequence[bool]] = False, rel_pos_bias: bool = False, qkv_bias: bool = True,
                 qk_scale: Optional[float] = None, attn_drop: float = 0.0, proj_drop: float = 0.0,
                 bias: Optional[bool] = None) -> None:
        super().__init__()
        if bias is not None:  # NATTEN <= 0.13's name of rel_pos_bias
            rel_pos_bias = bias
        if dim % num_heads != 0:
            raise ValueError(f"dim: {dim} with num_heads {num_heads}; allowed: a multiple of num_heads")
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.scale = qk_scale or self.head_dim ** -0.5
        self.kernel_size = tuple(per_dim(kernel_size, self.dims, "kernel_size"))
        self.dilation = tuple(per_dim(dilation, self.dims, "dilation"))
        self.is_causal = tuple(per_dim(is_causal, self.dims, "is_causal", kind=bool))
        if rel_pos_bias and any(self.is_causal):
            raise ValueError("rel_pos_bias=True with is_causal; allowed: one of them (as in NATTEN)")
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        if rel_pos_bias:
            self.rpb = nn.Parameter(torch.zeros(num_heads, *(2 * k - 1 for k in self.kernel_size)))
            nn.init.trunc_normal_(self.rpb, std=0.02, mean=0.0, a=-2.0, b=2.0)
        else:
            self.register_parameter("rpb", None)
        self.attn_drop_rate = attn_drop
        self.attn_drop = nn.Dropout(attn_drop)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != self.dims + 2:
            raise ValueError(f"x: shape {tuple(x.shape)}; allowed: [batch, {self.dims} token extents, dim]")
        tokens = list(x.shape[1:-1])
        # NATTEN pads inputs shorter than a window (kernel_size * dilation) with zeros and crops the result.
        padded = [max(t, k * d) for t, k, d in zip(tokens, self.kernel_size, self.dilation)]
        if padded != tokens:
            pad: List[int] = [0, 0]
            for t, p in reversed(list(zip(tokens, padded))):
                pad += [0, p - t]
            x = nn.functional.pad(x, pad)
        b, c = x.shape[0], x.shape[-1]
        qkv = self.qkv(x).reshape(b, *padded, 3, self.num_heads, self.head_dim)
        q, k, v = qkv.unbind(dim=-3)  # [B, *tokens, heads, head_dim] views
        if self.training and self.attn_drop_rate > 0:
            out = self._unfused(q, k, v)
        else:
            na = (functional.na1d, functional.na2d, functional.na3d)[self.dims - 1]
            out = na(q, k, v, self.kernel_size, dilation=self.dilation, is_causal=self.is_causal, scale=self.scale,
                     rpb=self.rpb)
        out = out.reshape(b, *padded, c)
        if padded != tokens:
            out = out[(slice(None),) + tuple(slice(0, t) for t in tokens)]
        return self.proj_drop(self.proj(out))

    def _unfused(self, q, k, v):
        """Attention weights materialised (for attention dropout), heads-first as NATTEN's ops take them."""
        order = (0, self.dims + 1) + tuple(range(1, self.dims + 1)) + (self.dims + 2,)
        q, k, v = (t.permute(order) for t in (q, k, v))
        attn = _qk(self.dims, q * self.scale, k, self.kernel_size, self.dilation, self.is_causal, self.rpb)
        attn = self.attn_drop(attn.softmax(dim=-1))
        out = _av(self.dims, attn, v, self.kernel_size, self.dilation, self.is_causal)
        back = (0,) + tuple(range(2, self.dims + 2)) + (1, self.dims + 2)
        return out.permute(back)

    def extra_repr(self) -> str:
        return (f"head_dim={self.head_dim}, num_heads={self.num_heads}, kernel_size={self.kernel_size}, "
                f"dilation={self.dilation}, is_causal={self.is_causal}, rel_pos_bias={self.rpb is not None}")


class NeighborhoodAttention1D(_NeighborhoodAttention):
    dims = 1


class NeighborhoodAttention2D(_NeighborhoodAttention):
    dims = 2


class NeighborhoodAttention3D(_NeighborhoodAttention):
    dims = 3
