"""attnkit's functional API over torch tensors (heads-last layout, DESIGN §2).

q [B, *tokens, Hq, D], k [B, *tokens_kv, Hkv, D], v [B, *tokens_kv, Hkv, Dv] -> out [B, *tokens, Hq, Dv]
and, with return_lse=True, lse [B, *tokens, Hq] (float32, natural log). Tokens are numbered
row-major over their extents for causal, block and element masks. Every op is a
torch.library.custom_op with a fake implementation and an autograd formula, so it works under
torch.compile(fullgraph=True) and CUDA-graph capture; CPU tensors run on the CPU backend, CUDA
tensors on the GPU backends.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch

from . import _attention_ops
from . import _capi
from . import _mask_spec
from ._attention_ops import attention_forward as _attention_op
from ._gemm_ops import gemm as _gemm_op
from ._retention_ops import retention_forward as _retention_op

__all__ = ["attention", "na1d", "na2d", "na3d", "sparse_attention", "retention", "gemm", "merge_attentions"]


def _check_tensor(t, name: str) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: {type(t).__name__}; allowed: a torch.Tensor")


def _check_scale(scale) -> Optional[float]:
    if scale is None:
        return None
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise TypeError(f"scale: {scale!r}; allowed: a float or None (1/sqrt(head_dim))")
    return float(scale)


_PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)
_dispatch_modes = getattr(torch._C, "_len_torch_dispatch_stack", None)
_function_modes = getattr(torch._C, "_is_torch_function_mode_enabled", None)


def _eager_fast_path(*tensors) -> bool:
    """Plain tensors, no tracing, no active mode: the call may skip the custom op's dispatch (a mode or a
    tensor subclass must see the op, so those calls take it)."""
    if torch.compiler.is_compiling():
        return False
    if _dispatch_modes is None or _function_modes is None or _dispatch_modes() or _function_modes():
        return False
    return all(t is None or type(t) in _PLAIN_TENSORS for t in tensors)


def _run_attention(q, k, v, spec: _mask_spec.MaskSpec, scale, return_lse: bool):
    for t, name in ((q, "q"), (k, "k"), (v, "v")):
        _check_tensor(t, name)
    scale = _check_scale(scale)
    if _eager_fast_path(q, k, v, spec.block_mask, spec.element_mask):
        if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
            out, lse = _attention_ops.AttentionFunction.apply(q, k, v, spec.block_mask, spec.element_mask,
                                                              spec.params(), scale)
        else:
            out, lse = _attention_ops.run_forward(q, k, v, spec.block_mask, spec.element_mask, spec.params(), scale,
                                                  return_lse)
    else:
        out, lse = _attention_op(q, k, v, *spec.op_args(), scale)
    return (out, lse) if return_lse else out


def attention(q, k, v, *, is_causal: bool = False, scale: Optional[float] = None, mask=None,
              return_lse: bool = False, causal_alignment: str = "top_left"):
    """Dense attention, optionally causal (top-left aligned like torch SDPA, or bottom-right) or
    with a bool element mask [B|1, Hq|1, Sq, Sk] or [Sq, Sk] (True = attend). A query row with no
    key gives 0 output and lse -inf."""
    if mask is not None:
        if is_causal:
            raise ValueError("is_causal=True with a mask: give one of them (fold causality into the mask)")
        spec = _mask_spec.element(mask)
    else:
        spec = _mask_spec.dense(is_causal, causal_alignment)
    return _run_attention(q, k, v, spec, scale, return_lse)


def _neighborhood(dims, q, k, v, kernel_size, dilation, stride, is_causal, scale, return_lse):
    _check_tensor(q, "q")
    if q.dim() != dims + 3:
        raise ValueError(f"q: rank {q.dim()} (shape {tuple(q.shape)}); allowed: rank {dims + 3}, "
                         f"[B, {', '.join('X' + str(i) for i in range(dims))}, heads, head_dim] for na{dims}d")
    spec = _mask_spec.neighborhood(dims, kernel_size, dilation, stride, is_causal)
    return _run_attention(q, k, v, spec, scale, return_lse)


def na1d(q, k, v, kernel_size, dilation=1, stride=1, is_causal=False, scale=None, return_lse=False):
    """1-D neighborhood attention on [B, L, H, D]: each query sees `kernel_size` keys around it
    (DESIGN §3: dilation groups, stride groups, causal windows)."""
    return _neighborhood(1, q, k, v, kernel_size, dilation, stride, is_causal, scale, return_lse)


def na2d(q, k, v, kernel_size, dilation=1, stride=1, is_causal=False, scale=None, return_lse=False):
    """2-D neighborhood attention on [B, X, Y, H, D]; per-dimension ints or tuples of 2."""
    return _neighborhood(2, q, k, v, kernel_size, dilation, stride, is_causal, scale, return_lse)


def na3d(q, k, v, kernel_size, dilation=1, stride=1, is_causal=False, scale=None, return_lse=False):
    """3-D neighborhood attention on [B, X, Y, Z, H, D]; per-dimension ints or tuples of 3."""
    return _neighborhood(3, q, k, v, kernel_size, dilation, stride, is_causal, scale, return_lse)


def sparse_attention(q, k, v, *, block_mask=None, block_size=None, mask=None, scale=None, return_lse=False):
    """Block-sparse attention: block_mask bool [B|1, Hq|1, ceil(Sq/bq), ceil(Sk/bk)] with
    block_size = bq or (bq, bk); a True block is attended in full. Or element-sparse: mask bool
    [B|1, Hq|1, Sq, Sk]; the library skips empty tiles."""
    if (block_mask is None) == (mask is None):
        raise ValueError("sparse_attention: give exactly one of block_mask (with block_size) or mask")
    spec = _mask_spec.block(block_mask, block_size) if block_mask is not None else _mask_spec.element(mask)
    return _run_attention(q, k, v, spec, scale, return_lse)


_RETENTION_MODES = {
    "chunk": _capi.ATTNKIT_RETENTION_CHUNKWISE,
    "chunkwise": _capi.ATTNKIT_RETENTION_CHUNKWISE,
    "parallel": _capi.ATTNKIT_RETENTION_PARALLEL,
    "recurrent": _capi.ATTNKIT_RETENTION_RECURRENT,
}


def _gamma_list(gamma, heads: int) -> Optional[list]:
    if gamma is None:
        return None
    if isinstance(gamma, torch.Tensor):
        gamma = gamma.detach().cpu().reshape(-1).tolist()
    elif isinstance(gamma, (int, float)) and not isinstance(gamma, bool):
        gamma = [float(gamma)] * heads
    elif isinstance(gamma, Sequence):
        gamma = [float(g) for g in gamma]
    else:
        raise TypeError(f"gamma: {type(gamma).__name__}; allowed: None (1 - 2^(-5-h)), a float, a sequence of "
                        f"floats or a tensor with one decay per head")
    return gamma


def retention(q, k, v, *, gamma=None, mode: str = "chunk", chunk_size: int = 64, initial_state=None,
              output_final_state: bool = False, normalize: bool = False, scale: Optional[float] = None):
    """RetNet retention: q, k [B, T, H, Dk], v [B, T, H, Dv]; per-head decay gamma (default
    1 - 2^(-5-h)); mode "chunk" (chunkwise, chunk_size tokens), "parallel" or "recurrent".
    initial_state [B, H, Dk, Dv] (float32; float64 for float64 inputs). Returns (out, final_state)
    like flash-linear-attention, final_state None unless output_final_state."""
    for t, name in ((q, "q"), (k, "k"), (v, "v")):
        _check_tensor(t, name)
    if initial_state is not None:
        _check_tensor(initial_state, "initial_state")
    if mode not in _RETENTION_MODES:
        raise ValueError(f"mode: {mode!r}; allowed: 'chunk' (or 'chunkwise'), 'parallel', 'recurrent'")
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int):
        raise TypeError(f"chunk_size: {chunk_size!r}; allowed: a positive int")
    if normalize and (output_final_state or initial_state is not None):
        raise ValueError("normalize=True with initial_state or output_final_state: RetNet's normalised form has "
                         "no recurrent state; allowed: normalize=False to carry state, or no state")
    heads = q.shape[2] if q.dim() == 4 else 0
    out, final_state = _retention_op(q, k, v, initial_state, _gamma_list(gamma, heads), _RETENTION_MODES[mode],
                                     chunk_size, bool(normalize), _check_scale(scale))
    return out, (final_state if output_final_state else None)


def gemm(a, b, *, allow_tf32: bool = False):
    """a @ b for [M, K] @ [K, N] or batched [Bt|1, M, K] @ [Bt|1, K, N] (a batch of 1 broadcasts;
    a 2-D operand next to a 3-D one counts as a batch of 1). Row- and column-major operands (e.g.
    x.mT) pass without a copy."""
    _check_tensor(a, "a")
    _check_tensor(b, "b")
    if a.dim() == 2 and b.dim() == 3:
        a = a.unsqueeze(0)
    elif a.dim() == 3 and b.dim() == 2:
        b = b.unsqueeze(0)
    return _gemm_op(a, b, bool(allow_tf32))


def merge_attentions(outputs, lses):
    """Merge attention over disjoint key sets: outputs [B, *tokens, H, Dv] and their lses
    [B, *tokens, H] (as returned with return_lse=True) -> (out, lse) equal to attention over the
    union of the keys. Differentiable (the lse gradients flow back into each attention call).
    Rows with no key anywhere give 0 and lse -inf."""
    if not isinstance(outputs, (list, tuple)) or not isinstance(lses, (list, tuple)):
        raise TypeError("merge_attentions: outputs and lses must be lists of tensors")
    if len(outputs) != len(lses) or not outputs:
        raise ValueError(f"merge_attentions: {len(outputs)} outputs and {len(lses)} lses; allowed: the same "
                         f"number, at least one")
    for i, (o, lse) in enumerate(zip(outputs, lses)):
        _check_tensor(o, f"outputs[{i}]")
        _check_tensor(lse, f"lses[{i}]")
        if o.shape[:-1] != lse.shape or o.shape != outputs[0].shape:
            raise ValueError(f"merge_attentions: outputs[{i}] {tuple(o.shape)} with lses[{i}] {tuple(lse.shape)}; "
                             f"allowed: every output {tuple(outputs[0].shape)} and every lse its shape without "
                             f"the last dim")
    stacked = torch.stack([lse.float() for lse in lses])
    peak = stacked.amax(dim=0)
    peak = torch.where(torch.isinf(peak), torch.zeros_like(peak), peak)
    weights = torch.exp(stacked - peak)
    total = weights.sum(dim=0)
    nonempty = total > 0
    lse = torch.where(nonempty, peak + torch.log(torch.where(nonempty, total, torch.ones_like(total))),
                      torch.full_like(total, float("-inf")))
    shares = weights / torch.where(nonempty, total, torch.ones_like(total))
    out = sum(share.unsqueeze(-1) * o.float() for share, o in zip(shares, outputs))
    return out.to(outputs[0].dtype), lse
