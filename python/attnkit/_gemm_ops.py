"""The GEMM custom op: attnkit::gemm computes C = A @ B for [M, K] @ [K, N] or batched
[Bt|1, M, K] @ [Bt|1, K, N] (a batch extent of 1 broadcasts).

The library takes row- or column-major matrices, so transposed views (x.mT) go in without a copy;
that is how the backward is written: dA = dC @ B^T and dB = A^T @ dC are the same op on transposed
views, summed over the batch where the forward broadcast.
"""

from __future__ import annotations

import ctypes

import torch

from . import _capi
from . import _launch


def matrix_operand(t: torch.Tensor) -> torch.Tensor:
    """Row-major or column-major matrices (a stride 1 in one of the last two dims, as the library takes them)
    pass as they are; anything else is copied, including a row or column vector with other strides."""
    if t.stride(-1) == 1 or t.stride(-2) == 1:
        return t
    # Not t.contiguous(): torch calls a view with size-1 dims contiguous whatever its strides.
    return torch.empty(t.shape, dtype=t.dtype, device=t.device).copy_(t)


_MATRIX_LAYOUT = "[rows, cols] or [batch, rows, cols]"


def _check_ranks(a: torch.Tensor, b: torch.Tensor) -> None:
    """Ranks first, worded as the library's check: the result's shape reads them."""
    for t, name in ((a, "a"), (b, "b")):
        if t.dim() not in (2, 3):
            raise ValueError(f"{name}: rank {t.dim()} (shape {list(t.shape)}); allowed: rank 2 to 3, layout "
                             f"{_MATRIX_LAYOUT}")


def _result_shape(a: torch.Tensor, b: torch.Tensor):
    """[M, N], or [batch, M, N] when an operand has a batch: the largest, or 0 when one is 0 (as the library's
    batch rule: an extent 1 broadcasts)."""
    if a.dim() == 2 and b.dim() == 2:
        return (a.shape[0], b.shape[1])
    batches = [t.shape[0] for t in (a, b) if t.dim() == 3]
    return (0 if 0 in batches else max(batches), a.shape[-2], b.shape[-1])


@torch.library.custom_op("attnkit::gemm", mutates_args=())
def gemm(a: torch.Tensor, b: torch.Tensor, allow_tf32: bool) -> torch.Tensor:
    _check_ranks(a, b)
    lib = _launch.library()
    device = _launch.check_device(lib, a, b, names=("a", "b"))
    a, b = matrix_operand(a), matrix_operand(b)
    c = torch.empty(_result_shape(a, b), dtype=a.dtype, device=device)
    args = _capi.GemmArgs()
    lib.attnkit_gemm_args_init(ctypes.byref(args))
    args.a, args.b = _launch.view(a, "a"), _launch.view(b, "b", _launch.same_dtype(a, "a"))
    args.c = _launch.view(c, "c")
    args.allow_tf32 = 1 if allow_tf32 else 0
    with _launch.device_guard(device):
        _launch.call(lib.attnkit_gemm, args, _launch.run_options(lib, device))
    return c


@gemm.register_fake
def _(a, b, allow_tf32):
    _check_ranks(a, b)
    _launch.common_device((a, b), ("a", "b"))  # refuses meta tensors
    return a.new_empty(_result_shape(a, b))


def _setup_context(ctx, inputs, output):
    a, b, allow_tf32 = inputs
    ctx.save_for_backward(a, b)
    ctx.allow_tf32 = allow_tf32


def _reduce_broadcast(grad: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    if grad.dim() == 3 and like.shape[0] == 1 and grad.shape[0] != 1:
        return grad.sum(dim=0, keepdim=True)
    return grad


def _backward(ctx, grad_c):
    a, b = ctx.saved_tensors
    grad_a = grad_b = None
    if ctx.needs_input_grad[0]:
        grad_a = _reduce_broadcast(gemm(grad_c, b.mT, ctx.allow_tf32), a)
    if ctx.needs_input_grad[1]:
        grad_b = _reduce_broadcast(gemm(a.mT, grad_c, ctx.allow_tf32), b)
    return grad_a, grad_b, None


gemm.register_autograd(_backward, setup_context=_setup_context)
