"""Plain-PyTorch reference implementations the tests compare attnkit against.

Every mask is built explicitly as a bool matrix [Sq, Sk] over row-major flat token indices, from
the definitions in DESIGN §3 (written here independently of the library), and attention is
computed densely in float64: scores, -inf where masked, softmax; a row with no key gives 0 and
lse -inf. These functions are differentiable with torch autograd, which gives reference gradients.
"""

from __future__ import annotations

import itertools
import math

import torch


def neighborhood_keys(i: int, extent: int, window: int, dilation: int, stride: int, causal: bool) -> set:
    """Coordinates of the keys query coordinate i sees along one dimension (DESIGN §3)."""
    group = i % dilation
    n = -(-(extent - group) // dilation)  # tokens in this dilation group
    index = i // dilation
    if causal:
        leader = min((index // stride) * stride + stride - 1, n - 1)
        start = max(leader - window + 1, 0)
        stop = min(index + 1, n)
    else:
        left = window // 2
        right = window // 2 + window % 2 - 1
        leader = min((index // stride) * stride + stride // 2, n - 1)
        start = max(leader - left, 0)
        if leader + right >= n:
            start -= leader + right - (n - 1)
        stop = start + window
    return {j * dilation + group for j in range(start, stop)}


def neighborhood_mask(extents, kernel_size, dilation, stride, causal) -> torch.Tensor:
    """bool [S, S] over row-major flat tokens: query sees key iff in its window in every dim."""
    dims = len(extents)
    per_dim = [
        [neighborhood_keys(i, extents[d], kernel_size[d], dilation[d], stride[d], causal[d]) for i in range(extents[d])]
        for d in range(dims)
    ]
    coords = list(itertools.product(*[range(e) for e in extents]))
    mask = torch.zeros(len(coords), len(coords), dtype=torch.bool)
    for qi, qc in enumerate(coords):
        for ki, kc in enumerate(coords):
            mask[qi, ki] = all(kc[d] in per_dim[d][qc[d]] for d in range(dims))
    return mask


def causal_mask(sq: int, sk: int, bottom_right: bool = False) -> torch.Tensor:
    offset = sk - sq if bottom_right else 0
    rows = torch.arange(sq)[:, None]
    cols = torch.arange(sk)[None, :]
    return cols <= rows + offset


def block_to_element_mask(block_mask: torch.Tensor, sq: int, sk: int, block_q: int, block_k: int) -> torch.Tensor:
    """[..., ceil(Sq/bq), ceil(Sk/bk)] -> [..., Sq, Sk]."""
    expanded = block_mask.repeat_interleave(block_q, dim=-2).repeat_interleave(block_k, dim=-1)
    return expanded[..., :sq, :sk]


def attention(q, k, v, mask=None, scale=None):
    """q [B, *tokens, Hq, D], k/v [B, *tokens_kv, Hkv, D/Dv]; mask bool broadcastable to
    [B, Hq, Sq, Sk] or None. Returns (out [B, *tokens, Hq, Dv] in float64, lse [B, *tokens, Hq])."""
    batch, heads, dim = q.shape[0], q.shape[-2], q.shape[-1]
    kv_heads, dim_v = k.shape[-2], v.shape[-1]
    tokens = q.shape[1:-2]
    scale = 1.0 / math.sqrt(dim) if scale is None else scale
    qf = q.double().reshape(batch, -1, heads, dim).transpose(1, 2)
    kf = k.double().reshape(batch, -1, kv_heads, dim).transpose(1, 2)
    vf = v.double().reshape(batch, -1, kv_heads, dim_v).transpose(1, 2)
    group = heads // kv_heads
    kf = kf.repeat_interleave(group, dim=1)
    vf = vf.repeat_interleave(group, dim=1)
    scores = scale * qf @ kf.transpose(-1, -2)
    if mask is not None:
        scores = scores.masked_fill(~mask.to(scores.device), float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    finite = torch.isfinite(lse)
    probs = torch.exp(scores - torch.where(finite, lse, torch.zeros_like(lse))[..., None])
    probs = torch.where(finite[..., None], probs, torch.zeros_like(probs))
    out = probs @ vf
    out = out.transpose(1, 2).reshape(batch, *tokens, heads, dim_v)
    lse = lse.transpose(1, 2).reshape(batch, *tokens, heads)
    return out, lse


def default_gamma(heads: int) -> list:
    return [1.0 - 2.0 ** (-5 - h) for h in range(heads)]


def retention(q, k, v, gamma=None, initial_state=None, scale=None, normalize=False):
    """RetNet retention by its definition: o_t = scale * q_t S_t with
    S_t = gamma S_{t-1} + k_t^T v_t, S_{-1} = initial_state; returns (out, final_state) in float64.
    normalize: RetNet's parallel normalisation (decay rows / sqrt(row sum), scores / max(|row sum|, 1))."""
    batch, steps, heads, dim_k = q.shape
    dim_v = v.shape[-1]
    scale = 1.0 / math.sqrt(dim_k) if scale is None else scale
    gamma = torch.tensor(default_gamma(heads) if gamma is None else gamma, dtype=torch.float64)
    qf, kf, vf = (t.cpu().double().transpose(1, 2) for t in (q, k, v))  # [B, H, T, X], on the CPU
    t = torch.arange(steps, dtype=torch.float64)
    power = (t[:, None] - t[None, :])
    causal = power >= 0
    decay = torch.where(causal, gamma[:, None, None] ** power.clamp(min=0), torch.zeros(()))  # [H, T, T]
    if normalize:
        decay = decay / decay.sum(-1, keepdim=True).sqrt()
    scores = scale * (qf @ kf.transpose(-1, -2)) * decay
    if normalize:
        scores = scores / scores.abs().sum(-1, keepdim=True).clamp(min=1.0)
    out = scores @ vf
    tail = gamma[:, None] ** (steps - 1 - t)  # [H, T]: decay from step m to the last step
    final = torch.einsum("bhtk,bhtv,ht->bhkv", kf, vf, tail)
    if initial_state is not None:
        s0 = initial_state.cpu().double()
        lead = gamma[:, None] ** (t + 1)  # [H, T]
        out = out + scale * torch.einsum("bhtk,bhkv,ht->bhtv", qf, s0, lead)
        final = final + s0 * (gamma ** steps)[None, :, None, None]
    return out.transpose(1, 2), final


def relative_l2(actual: torch.Tensor, expected: torch.Tensor) -> float:
    actual = actual.detach().cpu().double()
    expected = expected.detach().cpu().double()
    assert not torch.isnan(actual).any(), "output holds NaN"
    denom = expected.norm().item()
    return (actual - expected).norm().item() / (denom if denom > 0 else 1.0)


TOLERANCE = {torch.float64: 1e-10, torch.float32: 1e-5, torch.float16: 5e-3, torch.bfloat16: 1.5e-2}
