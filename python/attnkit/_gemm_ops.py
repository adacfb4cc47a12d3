"""The GEMM custom op: attnkit::gemm computes C = A @ B for [M, K] @ [K, N] or batched
[Bt|1, M, K] @ [Bt|1, K, N] (a batch extent of 1 broadcasts).

The library takes row- or column-major matrices, so transposed views (x.mT) go in without a copy;
that is how the backward is written: dA = dC @ B^T and dB = A^T @ dC are the same op on transposed
views, summed over the batch where the forward broadcast.

Two front doors share the formula, as for attention (_attention_ops.py):
- eager calls go through eager_gemm: library plans (attnkit_gemm_plan) cached by call shape, run with
  only the data pointers, the stream and a workspace (the split-K, stream-K and staged kernels need one) kept
  per stream and reused by every gemm run there (_plans._stream_arguments), and GemmFunction for autograd — no custom-op dispatch, no per-call argument
  structs (the custom op costs some 40 us of host time per call, more than a 1024^3 GEMM's kernel);
- under torch.compile / export, or with a dispatch mode or tensor subclass active, the custom op below.
"""

from __future__ import annotations

import ctypes

import torch

from . import _capi
from . import _launch
from . import _plans


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


def _gemm_args(lib, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, allow_tf32: bool):
    args = _capi.GemmArgs()
    lib.attnkit_gemm_args_init(ctypes.byref(args))
    args.a, args.b = _launch.view(a, "a"), _launch.view(b, "b", _launch.same_dtype(a, "a"))
    args.c = _launch.view(c, "c")
    args.allow_tf32 = 1 if allow_tf32 else 0
    return args


def _call_gemm(a: torch.Tensor, b: torch.Tensor, allow_tf32: bool) -> torch.Tensor:
    """One call through attnkit_gemm (a library without attnkit_gemm_plan)."""
    _check_ranks(a, b)
    lib = _launch.library()
    device = _launch.check_device(lib, a, b, names=("a", "b"))
    a, b = matrix_operand(a), matrix_operand(b)
    c = torch.empty(_result_shape(a, b), dtype=a.dtype, device=device)
    args = _gemm_args(lib, a, b, c, allow_tf32)
    with _launch.device_guard(device):  # attnkit_gemm takes stream-ordered scratch when it needs workspace
        _launch.call(lib.attnkit_gemm, args, _launch.run_options(lib, device))
    return c


_GEMM_TENSORS = 3  # a, b, c (attnkit_plan_run's order)
_gemm_plans = _plans.PlanCache()
_has_gemm_plan = None


class _GemmEntry:
    """A gemm plan with the shape of the C its calls allocate (a tuple of ints: torch parses a plain tuple faster
    than a torch.Size, some 0.5 us per new_empty)."""

    __slots__ = ("plan", "c_shape")

    def __init__(self, plan, c_shape):
        self.plan = plan
        self.c_shape = tuple(c_shape)


def run_gemm(a: torch.Tensor, b: torch.Tensor, allow_tf32: bool) -> torch.Tensor:
    """C = a @ b through a cached library plan (made on the first call of a shape).

    The key holds what the library's plan key holds (shapes, strides, dtypes, devices, both addresses mod 16, tf32),
    each read from the tensor once: the strides also decide whether an operand is copied (matrix_operand's rule),
    the data pointers and the device are the run's."""
    global _has_gemm_plan
    if _has_gemm_plan is None:
        _has_gemm_plan = _capi.has_function(_launch.library(), "attnkit_gemm_plan")
    if not _has_gemm_plan:
        return _call_gemm(a, b, allow_tf32)
    a_strides = a.stride()
    if len(a_strides) >= 2 and a_strides[-1] != 1 and a_strides[-2] != 1:
        a = matrix_operand(a)
        a_strides = a.stride()
    b_strides = b.stride()
    if len(b_strides) >= 2 and b_strides[-1] != 1 and b_strides[-2] != 1:
        b = matrix_operand(b)
        b_strides = b.stride()
    a_ptr, b_ptr, device = a.data_ptr(), b.data_ptr(), a.device
    key = (a.shape, a_strides, b.shape, b_strides, a.dtype, b.dtype, device, b.device,
           (a_ptr & 15) | (b_ptr & 15) << 4, allow_tf32)
    entry = _gemm_plans.get(key)
    if entry is None:
        _check_ranks(a, b)
        lib = _launch.library()
        device = _launch.check_device(lib, a, b, names=("a", "b"))
        c = torch.empty(_result_shape(a, b), dtype=a.dtype, device=device)
        args = _gemm_args(lib, a, b, c, allow_tf32)
        create = _capi.optional_function(lib, "attnkit_gemm_plan")
        plan = _plans.make(lib, create, args, device, False, _GEMM_TENSORS)
        plan.reuse_workspace = True  # the stream's kept workspace (_plans._stream_arguments)
        entry = _GemmEntry(plan, c.shape)
        _gemm_plans.put(key, entry)
    else:
        c = a.new_empty(entry.c_shape)
    _plans.run(entry.plan, (a_ptr, b_ptr, c.data_ptr()), device)
    return c


@torch.library.custom_op("attnkit::gemm", mutates_args=())
def gemm(a: torch.Tensor, b: torch.Tensor, allow_tf32: bool) -> torch.Tensor:
    return run_gemm(a, b, allow_tf32)


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


def _gradients(ctx, grad_c, product):
    a, b = ctx.saved_tensors
    grad_a = grad_b = None
    if ctx.needs_input_grad[0]:
        grad_a = _reduce_broadcast(product(grad_c, b.mT, ctx.allow_tf32), a)
    if ctx.needs_input_grad[1]:
        grad_b = _reduce_broadcast(product(a.mT, grad_c, ctx.allow_tf32), b)
    return grad_a, grad_b, None


def _backward(ctx, grad_c):
    return _gradients(ctx, grad_c, gemm)


gemm.register_autograd(_backward, setup_context=_setup_context)


class GemmFunction(torch.autograd.Function):
    """Eager autograd over run_gemm (the custom op's formula, without its dispatch)."""

    @staticmethod
    def forward(ctx, a, b, allow_tf32):
        ctx.save_for_backward(a, b)
        ctx.allow_tf32 = allow_tf32
        return run_gemm(a, b, allow_tf32)

    @staticmethod
    def backward(ctx, grad_c):
        return _gradients(ctx, grad_c, eager_gemm)


def eager_gemm(a: torch.Tensor, b: torch.Tensor, allow_tf32: bool) -> torch.Tensor:
    """The eager front door (plain tensors, no tracing or mode active: functional.gemm checks)."""
    if (a.requires_grad or b.requires_grad) and torch.is_grad_enabled():
        return GemmFunction.apply(a, b, allow_tf32)
    return run_gemm(a, b, allow_tf32)
