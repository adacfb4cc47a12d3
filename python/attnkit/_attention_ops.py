"""The fused-attention custom ops: attnkit::attention_forward and attnkit::attention_backward.

One op pair serves every mask (none, causal, neighborhood, block, element): the mask is described
by plain op arguments (ints, int lists, optional bool tensors), so torch.compile sees a fixed
schema and the fake implementations only need shapes. The forward always produces the LSE
(float32 [B, *tokens, Hq]), because the backward needs it; the functional API drops it unless
asked.

Gradient through the LSE (merge_attentions uses it): d lse_i / d s_ij = P_ij, so an incoming
grad_lse adds P_ij * grad_lse_i to dS. The library's backward computes dS = P (dO.v - dO.O); a
second backward call with v = 0, dO = e_0 and O = -grad_lse * e_0 yields exactly dS = P * grad_lse,
so its dq and dk are the LSE's contribution (its dv is discarded). This reuses the kernels as they
are, on every backend.
"""

from __future__ import annotations

import ctypes
from typing import List, Optional, Tuple

import torch

from . import _capi
from . import _launch

def fill_mask(mask: _capi.AttentionMask, block_mask, element_mask, kind, causal_alignment, kernel_size,
               dilation, stride, causal, block_q, block_k) -> None:
    mask.kind = kind
    mask.causal_alignment = causal_alignment
    if kind == _capi.ATTNKIT_MASK_NEIGHBORHOOD:
        _capi.neighborhood_mask(mask, kernel_size, dilation, stride, causal)
    mask.block_mask = _launch.view(block_mask)
    mask.block_q = block_q
    mask.block_k = block_k
    mask.element_mask = _launch.view(element_mask)


def _set_scale(args, scale: Optional[float]) -> None:
    if scale is not None:
        args.has_scale = 1
        args.scale = float(scale)


@torch.library.custom_op("attnkit::attention_forward", mutates_args=())
def attention_forward(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
    block_mask: Optional[torch.Tensor], element_mask: Optional[torch.Tensor],
    mask_kind: int, causal_alignment: int, kernel_size: List[int], dilation: List[int], stride: List[int],
    causal: List[bool], block_q: int, block_k: int, scale: Optional[float],
) -> Tuple[torch.Tensor, torch.Tensor]:
    lib = _launch.library()
    device = _launch.check_device(lib, q, k, v, block_mask, element_mask)
    q, k, v = (_launch.contiguous_last(t) for t in (q, k, v))
    block_mask, element_mask = _launch.contiguous_last(block_mask), _launch.contiguous_last(element_mask)
    out = torch.empty(q.shape[:-1] + v.shape[-1:], dtype=q.dtype, device=device)
    lse = torch.empty(q.shape[:-1], dtype=torch.float32, device=device)
    args = _capi.AttentionForwardArgs()
    lib.attnkit_attention_forward_args_init(ctypes.byref(args))
    args.q, args.k, args.v = _launch.view(q), _launch.view(k), _launch.view(v)
    args.out, args.lse = _launch.view(out), _launch.view(lse)
    _set_scale(args, scale)
    fill_mask(args.mask, block_mask, element_mask, mask_kind, causal_alignment, kernel_size, dilation, stride,
               causal, block_q, block_k)
    with _launch.device_guard(device):
        options = _launch.run_options(lib, device)
        workspace = _launch.attach_workspace(options, lib.attnkit_attention_forward_workspace_size, args, device)
        _launch.call(lib.attnkit_attention_forward, args, options)
        del workspace
    return out, lse


@attention_forward.register_fake
def _(q, k, v, block_mask, element_mask, mask_kind, causal_alignment, kernel_size, dilation, stride, causal,
      block_q, block_k, scale):
    out = q.new_empty(q.shape[:-1] + v.shape[-1:])
    lse = q.new_empty(q.shape[:-1], dtype=torch.float32)
    return out, lse


def _backward_call(lib, device, q, k, v, out, lse, grad_out, mask_args, scale, deterministic):
    grad_q = torch.empty(q.shape, dtype=q.dtype, device=device)
    grad_k = torch.empty(k.shape, dtype=k.dtype, device=device)
    grad_v = torch.empty(v.shape, dtype=v.dtype, device=device)
    args = _capi.AttentionBackwardArgs()
    # kv_splits and split_workspace_limit keep the init defaults (0: automatic, -1: default bound).
    lib.attnkit_attention_backward_args_init(ctypes.byref(args))
    args.q, args.k, args.v = _launch.view(q), _launch.view(k), _launch.view(v)
    args.out, args.lse, args.grad_out = _launch.view(out), _launch.view(lse), _launch.view(grad_out)
    args.grad_q, args.grad_k, args.grad_v = _launch.view(grad_q), _launch.view(grad_k), _launch.view(grad_v)
    args.deterministic = 1 if deterministic else 0
    _set_scale(args, scale)
    fill_mask(args.mask, *mask_args)
    with _launch.device_guard(device):
        options = _launch.run_options(lib, device)
        workspace = _launch.attach_workspace(options, lib.attnkit_attention_backward_workspace_size, args, device)
        _launch.call(lib.attnkit_attention_backward, args, options)
        del workspace
    return grad_q, grad_k, grad_v


@torch.library.custom_op("attnkit::attention_backward", mutates_args=())
def attention_backward(
    grad_out: Optional[torch.Tensor], grad_lse: Optional[torch.Tensor],
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, lse: torch.Tensor,
    block_mask: Optional[torch.Tensor], element_mask: Optional[torch.Tensor],
    mask_kind: int, causal_alignment: int, kernel_size: List[int], dilation: List[int], stride: List[int],
    causal: List[bool], block_q: int, block_k: int, scale: Optional[float], deterministic: bool,
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    lib = _launch.library()
    device = _launch.check_device(lib, q, k, v, out, lse, grad_out, grad_lse)
    q, k, v, out, lse = (_launch.contiguous_last(t) for t in (q, k, v, out, lse))
    mask_args = (_launch.contiguous_last(block_mask), _launch.contiguous_last(element_mask), mask_kind,
                 causal_alignment, kernel_size, dilation, stride, causal, block_q, block_k)
    grads = None
    if grad_out is not None:
        grad_out = _launch.contiguous_last(grad_out.to(q.dtype))
        grads = _backward_call(lib, device, q, k, v, out, lse, grad_out, mask_args, scale, deterministic)
    if grad_lse is not None:
        unit = torch.zeros(out.shape, dtype=q.dtype, device=device)
        unit[..., 0] = 1
        lse_out = torch.zeros(out.shape, dtype=q.dtype, device=device)
        # Rows with no key have lse = -inf and get zero gradients from the library anyway.
        lse_out[..., 0] = -torch.nan_to_num(grad_lse.to(torch.float32), nan=0.0, posinf=0.0, neginf=0.0).to(q.dtype)
        zero_v = torch.zeros(v.shape, dtype=v.dtype, device=device)
        lse_q, lse_k, _ = _backward_call(lib, device, q, k, zero_v, lse_out, lse, unit, mask_args, scale,
                                         deterministic)
        if grads is None:
            grads = (lse_q, lse_k, torch.zeros(v.shape, dtype=v.dtype, device=device))
        else:
            grads = (grads[0] + lse_q, grads[1] + lse_k, grads[2])
    if grads is None:
        grads = tuple(torch.zeros(t.shape, dtype=t.dtype, device=device) for t in (q, k, v))
    return grads


@attention_backward.register_fake
def _(grad_out, grad_lse, q, k, v, out, lse, block_mask, element_mask, mask_kind, causal_alignment, kernel_size,
      dilation, stride, causal, block_q, block_k, scale, deterministic):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


# Non-tensor inputs of attention_forward after q, k, v (block_mask ... scale): 11 of them.
_FORWARD_EXTRA_INPUTS = 11


def _setup_context(ctx, inputs, output):
    q, k, v, block_mask, element_mask = inputs[:5]
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse, block_mask, element_mask)
    # An unused output's gradient stays None instead of zeros: an unused lse then costs no second
    # backward call.
    ctx.set_materialize_grads(False)
    ctx.mask_params = inputs[5:13]
    ctx.scale = inputs[13]


def _backward(ctx, grad_out, grad_lse):
    q, k, v, out, lse, block_mask, element_mask = ctx.saved_tensors
    from . import tuner

    grad_q, grad_k, grad_v = attention_backward(
        grad_out, grad_lse, q, k, v, out, lse, block_mask, element_mask, *ctx.mask_params, ctx.scale,
        tuner.deterministic_backward(),
    )
    return (grad_q, grad_k, grad_v) + (None,) * _FORWARD_EXTRA_INPUTS


attention_forward.register_autograd(_backward, setup_context=_setup_context)
