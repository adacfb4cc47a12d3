"""The retention custom ops: attnkit::retention_forward and attnkit::retention_backward.

The forward always writes the final state [B, H, Dk, Dv] (float32; float64 for float64 inputs):
it is cheap next to the output and keeps the op's schema fixed; the functional API returns it
only when asked. The normalised form (parallel only) has no state and returns an empty one. The backward takes the incoming gradients of the output and of the final state
(either may be absent) and returns the gradients of q, k, v and of the initial state (an empty
tensor when there was no initial state).
"""

from __future__ import annotations

import ctypes
from typing import List, Optional, Tuple

import torch

from . import _capi
from . import _launch


def state_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


_STATE_DTYPE = "float32, or float64 when the inputs are float64 (the recurrent state)"
_DECAY_DTYPE = "float32 or q's dtype (the decay matrix)"


def _check_ranks(q, k, v) -> None:
    """Ranks first: the op reads the shapes of q and v (out, the state) before the library sees them."""
    _launch.check_rank(q, "q", 4, "[B, T, H, Dk]")
    _launch.check_rank(k, "k", 4, "[B, T, H, Dk]")
    _launch.check_rank(v, "v", 4, "[B, T, H, Dv]")
    # (decay, when given, is [H|1, Tq, Tk]: the library checks it and names what it allows.)


_FORWARD_NAMES = ("q", "k", "v", "initial_state", "decay")
_BACKWARD_NAMES = _FORWARD_NAMES + ("grad_out", "grad_final_state")


def _state_shape(q: torch.Tensor, v: torch.Tensor):
    return (q.shape[0], q.shape[2], q.shape[3], v.shape[3])


def _final_state_shape(q: torch.Tensor, v: torch.Tensor, normalize: bool, decay: Optional[torch.Tensor]):
    # The normalised form and the decay-matrix form have no recurrent state: their "final state" is empty.
    return (0,) if normalize or decay is not None else _state_shape(q, v)


def _set_common(args, gamma, mode, chunk_size, normalize, scale):
    """Fill the fields forward and backward args share; returns the gamma array to keep alive."""
    gamma_array = None
    if gamma is not None:
        gamma_array = (ctypes.c_double * len(gamma))(*[float(g) for g in gamma])
        args.gamma = ctypes.cast(gamma_array, ctypes.POINTER(ctypes.c_double))
        args.gamma_count = len(gamma)
    args.mode = mode
    args.chunk_size = chunk_size
    args.normalize = 1 if normalize else 0
    if scale is not None:
        args.has_scale = 1
        args.scale = float(scale)
    return gamma_array


@torch.library.custom_op("attnkit::retention_forward", mutates_args=())
def retention_forward(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, initial_state: Optional[torch.Tensor],
    gamma: Optional[List[float]], mode: int, chunk_size: int, normalize: bool, scale: Optional[float],
    decay: Optional[torch.Tensor] = None,
) -> Tuple[torch.Tensor, torch.Tensor]:
    _check_ranks(q, k, v)
    lib = _launch.library()
    device = _launch.check_device(lib, q, k, v, initial_state, decay, names=_FORWARD_NAMES)
    q, k, v, initial_state, decay = (_launch.contiguous_last(t) for t in (q, k, v, initial_state, decay))
    out = torch.empty(q.shape[:-1] + v.shape[-1:], dtype=q.dtype, device=device)
    final_state = torch.empty(_final_state_shape(q, v, normalize, decay), dtype=state_dtype(q.dtype), device=device)
    args = _capi.RetentionForwardArgs()
    lib.attnkit_retention_forward_args_init(ctypes.byref(args))
    same = _launch.same_dtype(q, "q")
    args.q, args.k, args.v = _launch.view(q, "q"), _launch.view(k, "k", same), _launch.view(v, "v", same)
    args.out = _launch.view(out, "out")
    args.initial_state = _launch.view(initial_state, "initial_state", _STATE_DTYPE)
    if not normalize and decay is None:
        args.final_state = _launch.view(final_state, "final_state", _STATE_DTYPE)
    args.decay = _launch.view(decay, "decay", _DECAY_DTYPE)
    keep = _set_common(args, gamma, mode, chunk_size, normalize, scale)
    with _launch.device_guard(device):
        _launch.call(lib.attnkit_retention_forward, args, _launch.run_options(lib, device))
    del keep
    return out, final_state


@retention_forward.register_fake
def _(q, k, v, initial_state, gamma, mode, chunk_size, normalize, scale, decay=None):
    _check_ranks(q, k, v)
    _launch.common_device((q, k, v, initial_state, decay), _FORWARD_NAMES)  # refuses meta tensors
    out = q.new_empty(q.shape[:-1] + v.shape[-1:])
    final_state = q.new_empty(_final_state_shape(q, v, normalize, decay), dtype=state_dtype(q.dtype))
    return out, final_state


@torch.library.custom_op("attnkit::retention_backward", mutates_args=())
def retention_backward(
    grad_out: Optional[torch.Tensor], grad_final_state: Optional[torch.Tensor],
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, initial_state: Optional[torch.Tensor],
    gamma: Optional[List[float]], mode: int, chunk_size: int, normalize: bool, scale: Optional[float],
    decay: Optional[torch.Tensor] = None,
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    _check_ranks(q, k, v)
    lib = _launch.library()
    device = _launch.check_device(lib, q, k, v, initial_state, decay, grad_out, grad_final_state,
                                  names=_BACKWARD_NAMES)
    q, k, v, initial_state, decay = (_launch.contiguous_last(t) for t in (q, k, v, initial_state, decay))
    if grad_out is None:
        grad_out = torch.zeros(q.shape[:-1] + v.shape[-1:], dtype=q.dtype, device=device)
    grad_out = _launch.contiguous_last(grad_out.to(q.dtype))
    if normalize or decay is not None:
        grad_final_state = None
    if grad_final_state is not None:
        grad_final_state = _launch.contiguous_last(grad_final_state.to(state_dtype(q.dtype)))
    grad_q = torch.empty(q.shape, dtype=q.dtype, device=device)
    grad_k = torch.empty(k.shape, dtype=k.dtype, device=device)
    grad_v = torch.empty(v.shape, dtype=v.dtype, device=device)
    if initial_state is not None:
        grad_initial_state = torch.empty(initial_state.shape, dtype=initial_state.dtype, device=device)
    else:
        grad_initial_state = torch.empty(0, dtype=state_dtype(q.dtype), device=device)
    args = _capi.RetentionBackwardArgs()
    lib.attnkit_retention_backward_args_init(ctypes.byref(args))
    same = _launch.same_dtype(q, "q")
    args.q, args.k, args.v = _launch.view(q, "q"), _launch.view(k, "k", same), _launch.view(v, "v", same)
    args.grad_out = _launch.view(grad_out, "grad_out")
    args.initial_state = _launch.view(initial_state, "initial_state", _STATE_DTYPE)
    args.grad_final_state = _launch.view(grad_final_state, "grad_final_state", _STATE_DTYPE)
    args.grad_q, args.grad_k, args.grad_v = (_launch.view(t, name) for t, name in
                                             ((grad_q, "grad_q"), (grad_k, "grad_k"), (grad_v, "grad_v")))
    if initial_state is not None:
        args.grad_initial_state = _launch.view(grad_initial_state, "grad_initial_state", _STATE_DTYPE)
    args.decay = _launch.view(decay, "decay", _DECAY_DTYPE)
    keep = _set_common(args, gamma, mode, chunk_size, normalize, scale)
    with _launch.device_guard(device):
        _launch.call(lib.attnkit_retention_backward, args, _launch.run_options(lib, device))
    del keep
    return grad_q, grad_k, grad_v, grad_initial_state


@retention_backward.register_fake
def _(grad_out, grad_final_state, q, k, v, initial_state, gamma, mode, chunk_size, normalize, scale, decay=None):
    _check_ranks(q, k, v)
    _launch.common_device((q, k, v, initial_state, decay, grad_out, grad_final_state), _BACKWARD_NAMES)
    if initial_state is not None:
        grad_initial_state = initial_state.new_empty(initial_state.shape)
    else:
        grad_initial_state = q.new_empty((0,), dtype=state_dtype(q.dtype))
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape), grad_initial_state


def _setup_context(ctx, inputs, output):
    q, k, v, initial_state = inputs[:4]
    decay = inputs[9] if len(inputs) > 9 else None
    ctx.save_for_backward(q, k, v, initial_state, decay)
    ctx.set_materialize_grads(False)  # an unused final state's gradient stays None, not zeros
    ctx.params = inputs[4:9]


def _backward(ctx, grad_out, grad_final_state):
    q, k, v, initial_state, decay = ctx.saved_tensors
    grad_q, grad_k, grad_v, grad_initial_state = retention_backward(
        grad_out, grad_final_state, q, k, v, initial_state, *ctx.params, decay)
    # The decay matrix is a constant: no gradient.
    return grad_q, grad_k, grad_v, (grad_initial_state if initial_state is not None else None), None, None, \
        None, None, None, None


retention_forward.register_autograd(_backward, setup_context=_setup_context)
