"""The retention custom ops: attnkit::retention_forward and attnkit::retention_backward, and their eager front door.

Two front doors share the formula, as for attention and gemm: eager calls on plain tensors go through run_forward /
run_backward (library plans, attnkit_retention_*_plan, cached by call shape and run with only the data pointers, the
stream and the stream's kept workspace) and RetentionFunction for autograd, without the custom op's dispatch; under
torch.compile / export, or with a dispatch mode or tensor subclass active, the custom ops below.

The custom op's forward always writes the final state [B, H, Dk, Dv] (float32; float64 for float64 inputs), which
keeps its schema fixed; the eager path writes it only when the call asks for it (output_final_state). The normalised
and decay-matrix forms have no state and return an empty one. The backward takes the incoming gradients of the output
and of the final state (either may be absent) and returns the gradients of q, k, v and of the initial state (an empty
tensor when there was no initial state).
"""

from __future__ import annotations

import ctypes
import os
from typing import List, Optional, Tuple

import torch

from . import _capi
from . import _launch
from . import _plans


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


def _forward_args(lib, q, k, v, out, initial_state, final_state, decay, stateless):
    """The forward's argument struct but the shared fields (_set_common); final_state is left out when `stateless`
    (the normalised and decay-matrix forms have none; an eager call may not want it)."""
    args = _capi.RetentionForwardArgs()
    lib.attnkit_retention_forward_args_init(ctypes.byref(args))
    same = _launch.same_dtype(q, "q")
    args.q, args.k, args.v = _launch.view(q, "q"), _launch.view(k, "k", same), _launch.view(v, "v", same)
    args.out = _launch.view(out, "out")
    args.initial_state = _launch.view(initial_state, "initial_state", _STATE_DTYPE)
    if not stateless:
        args.final_state = _launch.view(final_state, "final_state", _STATE_DTYPE)
    args.decay = _launch.view(decay, "decay", _DECAY_DTYPE)
    return args


def _call_forward(q, k, v, initial_state, gamma, mode, chunk_size, normalize, scale, decay):
    """One call through attnkit_retention_forward: (out, final_state)."""
    _check_ranks(q, k, v)
    lib = _launch.library()
    device = _launch.check_device(lib, q, k, v, initial_state, decay, names=_FORWARD_NAMES)
    q, k, v, initial_state, decay = (_launch.contiguous_last(t) for t in (q, k, v, initial_state, decay))
    out = torch.empty(q.shape[:-1] + v.shape[-1:], dtype=q.dtype, device=device)
    final_state = torch.empty(_final_state_shape(q, v, normalize, decay), dtype=state_dtype(q.dtype), device=device)
    args = _forward_args(lib, q, k, v, out, initial_state, final_state, decay, normalize or decay is not None)
    keep = _set_common(args, gamma, mode, chunk_size, normalize, scale)
    with _launch.device_guard(device):
        _launch.call(lib.attnkit_retention_forward, args, _launch.run_options(lib, device))
    del keep
    return out, final_state


@torch.library.custom_op("attnkit::retention_forward", mutates_args=())
def retention_forward(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, initial_state: Optional[torch.Tensor],
    gamma: Optional[List[float]], mode: int, chunk_size: int, normalize: bool, scale: Optional[float],
    decay: Optional[torch.Tensor] = None,
) -> Tuple[torch.Tensor, torch.Tensor]:
    return _call_forward(q, k, v, initial_state, gamma, mode, chunk_size, normalize, scale, decay)


@retention_forward.register_fake
def _(q, k, v, initial_state, gamma, mode, chunk_size, normalize, scale, decay=None):
    _check_ranks(q, k, v)
    _launch.common_device((q, k, v, initial_state, decay), _FORWARD_NAMES)  # refuses meta tensors
    out = q.new_empty(q.shape[:-1] + v.shape[-1:])
    final_state = q.new_empty(_final_state_shape(q, v, normalize, decay), dtype=state_dtype(q.dtype))
    return out, final_state


def _backward_inputs(grad_out, grad_final_state, q, k, v, initial_state, normalize, decay, device):
    """The backward's inputs as the library takes them (last dims contiguous, gradients in the op's dtypes, an absent
    grad_out as zeros, no final-state gradient where the form has no state) and its fresh outputs:
    (grad_out, grad_final_state, q, k, v, initial_state, decay, grad_q, grad_k, grad_v, grad_initial_state)."""
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
    return grad_out, grad_final_state, q, k, v, initial_state, decay, grad_q, grad_k, grad_v, grad_initial_state


def _call_backward(grad_out, grad_final_state, q, k, v, initial_state, gamma, mode, chunk_size, normalize, scale,
                   decay):
    """One call through attnkit_retention_backward: (grad_q, grad_k, grad_v, grad_initial_state)."""
    _check_ranks(q, k, v)
    lib = _launch.library()
    device = _launch.check_device(lib, q, k, v, initial_state, decay, grad_out, grad_final_state,
                                  names=_BACKWARD_NAMES)
    (grad_out, grad_final_state, q, k, v, initial_state, decay, grad_q, grad_k, grad_v,
     grad_initial_state) = _backward_inputs(grad_out, grad_final_state, q, k, v, initial_state, normalize, decay,
                                            device)
    args = _backward_args(lib, grad_out, grad_final_state, q, k, v, initial_state, decay, grad_q, grad_k, grad_v,
                          grad_initial_state)
    keep = _set_common(args, gamma, mode, chunk_size, normalize, scale)
    with _launch.device_guard(device):
        _launch.call(lib.attnkit_retention_backward, args, _launch.run_options(lib, device))
    del keep
    return grad_q, grad_k, grad_v, grad_initial_state


def _backward_args(lib, grad_out, grad_final_state, q, k, v, initial_state, decay, grad_q, grad_k, grad_v,
                   grad_initial_state):
    """The backward's argument struct but the shared fields (_set_common)."""
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
    return args


@torch.library.custom_op("attnkit::retention_backward", mutates_args=())
def retention_backward(
    grad_out: Optional[torch.Tensor], grad_final_state: Optional[torch.Tensor],
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, initial_state: Optional[torch.Tensor],
    gamma: Optional[List[float]], mode: int, chunk_size: int, normalize: bool, scale: Optional[float],
    decay: Optional[torch.Tensor] = None,
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    return _call_backward(grad_out, grad_final_state, q, k, v, initial_state, gamma, mode, chunk_size, normalize,
                          scale, decay)


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


# ---------------------------------------------------------------------------------------------
# Eager front door: library plans by call shape, autograd without the custom op's dispatch

_FORWARD_TENSORS = 7  # q, k, v, out, initial_state, final_state, decay (attnkit_plan_run's order)
# q, k, v, grad_out, initial_state, grad_final_state, grad_q, grad_k, grad_v, grad_initial_state, decay
_BACKWARD_TENSORS = 11

_pointer = _plans.pointer  # a module global: one lookup less per call on the hot path
_forward_plans = _plans.PlanCache()
_backward_plans = _plans.PlanCache()
_has_plans = None
# The library reads this variable when it makes a retention plan and keys its plans on its value (a forced kernel
# shape for benchmarks and tests): so do these caches, so that a process that changes it runs what it asks for.
_FORCED_CONFIG = "ATTNKIT_RETENTION_CONFIG"
_environ_get = os.environ.get


def _plans_available() -> bool:
    """Whether the library has the retention plans (a libattnkit built before them takes one call each time)."""
    global _has_plans
    if _has_plans is None:
        lib = _launch.library()
        _has_plans = (_capi.has_function(lib, "attnkit_retention_forward_plan")
                      and _capi.has_function(lib, "attnkit_retention_backward_plan"))
    return _has_plans


def clear_plans() -> None:
    """Drops the cached retention plans."""
    _forward_plans.clear()
    _backward_plans.clear()


def _make_plan(create_name: str, args, params, device, count: int):
    gamma, mode, chunk_size, normalize, scale = params
    lib = _launch.library()
    keep = _set_common(args, gamma, mode, chunk_size, normalize, scale)  # the plan copies gamma
    plan = _plans.make(lib, _capi.optional_function(lib, create_name), args, device,
                       torch.are_deterministic_algorithms_enabled(), count)
    del keep
    plan.reuse_workspace = True  # the stream's kept workspace (segment states)
    return plan


class _ForwardEntry:
    """A forward plan with the shapes of the outputs its calls allocate (plain tuples of ints)."""

    __slots__ = ("plan", "out_shape", "state_shape", "writes_state")

    def __init__(self, plan, out_shape, state_shape, writes_state):
        self.plan = plan
        self.out_shape = tuple(out_shape)
        self.state_shape = tuple(state_shape)
        self.writes_state = writes_state


def run_forward(q, k, v, initial_state, gamma, mode, chunk_size, normalize, scale, decay, want_state=True):
    """(out, final_state) as the custom op returns them, through a cached plan of the call's shape. `gamma`: a list or
    tuple of floats, or None. want_state False: the final state is neither written nor returned (None)."""
    if not _plans_available():
        out, final_state = _call_forward(q, k, v, initial_state, gamma, mode, chunk_size, normalize, scale, decay)
        return out, final_state if want_state else None
    q, k, v, initial_state, decay = (_launch.contiguous_last(t) for t in (q, k, v, initial_state, decay))
    gamma = None if gamma is None else tuple(gamma)
    params = (gamma, mode, chunk_size, normalize, scale)
    key = (_plans.tensor_key(q), _plans.tensor_key(k), _plans.tensor_key(v), _plans.tensor_key(initial_state),
           _plans.tensor_key(decay), params, want_state, torch.are_deterministic_algorithms_enabled(),
           _environ_get(_FORCED_CONFIG))
    entry = _forward_plans.get(key)
    if entry is None:
        _check_ranks(q, k, v)
        lib = _launch.library()
        device = _launch.check_device(lib, q, k, v, initial_state, decay, names=_FORWARD_NAMES)
        out = torch.empty(q.shape[:-1] + v.shape[-1:], dtype=q.dtype, device=device)
        final_state = torch.empty(_final_state_shape(q, v, normalize, decay), dtype=state_dtype(q.dtype),
                                  device=device)
        writes_state = want_state and not normalize and decay is None
        args = _forward_args(lib, q, k, v, out, initial_state, final_state, decay, not writes_state)
        plan = _make_plan("attnkit_retention_forward_plan", args, params, device, _FORWARD_TENSORS)
        entry = _ForwardEntry(plan, out.shape, final_state.shape, writes_state)
        _forward_plans.put(key, entry)
    else:
        out = q.new_empty(entry.out_shape)
        final_state = q.new_empty(entry.state_shape, dtype=state_dtype(q.dtype)) if want_state else None
    _plans.run(entry.plan, (q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), _pointer(initial_state),
                            final_state.data_ptr() if entry.writes_state else 0, _pointer(decay)), q.device)
    return out, final_state if want_state else None


def run_backward(grad_out, grad_final_state, q, k, v, initial_state, gamma, mode, chunk_size, normalize, scale,
                 decay):
    """(grad_q, grad_k, grad_v, grad_initial_state) as the custom op returns them, through a cached plan."""
    if not _plans_available():
        return _call_backward(grad_out, grad_final_state, q, k, v, initial_state, gamma, mode, chunk_size, normalize,
                              scale, decay)
    (grad_out, grad_final_state, q, k, v, initial_state, decay, grad_q, grad_k, grad_v,
     grad_initial_state) = _backward_inputs(grad_out, grad_final_state, q, k, v, initial_state, normalize, decay,
                                            q.device)
    gamma = None if gamma is None else tuple(gamma)
    params = (gamma, mode, chunk_size, normalize, scale)
    # The gradients are fresh contiguous tensors shaped like their inputs: the inputs' entries key them.
    key = (_plans.tensor_key(q), _plans.tensor_key(k), _plans.tensor_key(v), _plans.tensor_key(grad_out),
           _plans.tensor_key(initial_state), _plans.tensor_key(grad_final_state), _plans.tensor_key(decay), params,
           torch.are_deterministic_algorithms_enabled(), _environ_get(_FORCED_CONFIG))
    plan = _backward_plans.get(key)
    if plan is None:
        _check_ranks(q, k, v)
        lib = _launch.library()
        device = _launch.check_device(lib, q, k, v, initial_state, decay, grad_out, grad_final_state,
                                      names=_BACKWARD_NAMES)
        args = _backward_args(lib, grad_out, grad_final_state, q, k, v, initial_state, decay, grad_q, grad_k, grad_v,
                              grad_initial_state)
        plan = _make_plan("attnkit_retention_backward_plan", args, params, device, _BACKWARD_TENSORS)
        _backward_plans.put(key, plan)
    _plans.run(plan, (q.data_ptr(), k.data_ptr(), v.data_ptr(), grad_out.data_ptr(), _pointer(initial_state),
                      _pointer(grad_final_state), grad_q.data_ptr(), grad_k.data_ptr(), grad_v.data_ptr(),
                      grad_initial_state.data_ptr() if initial_state is not None else 0, _pointer(decay)), q.device)
    return grad_q, grad_k, grad_v, grad_initial_state


class RetentionFunction(torch.autograd.Function):
    """Eager autograd over run_forward / run_backward (the custom ops' formula, without their dispatch)."""

    @staticmethod
    def forward(ctx, q, k, v, initial_state, gamma, mode, chunk_size, normalize, scale, decay, want_state):
        out, final_state = run_forward(q, k, v, initial_state, gamma, mode, chunk_size, normalize, scale, decay,
                                       want_state)
        ctx.save_for_backward(q, k, v, initial_state, decay)
        ctx.set_materialize_grads(False)  # an unused final state's gradient stays None, not zeros
        ctx.params = (gamma, mode, chunk_size, normalize, scale)
        return out, final_state

    @staticmethod
    def backward(ctx, grad_out, grad_final_state):
        q, k, v, initial_state, decay = ctx.saved_tensors
        grad_q, grad_k, grad_v, grad_initial_state = run_backward(grad_out, grad_final_state, q, k, v, initial_state,
                                                                  *ctx.params, decay)
        # The decay matrix is a constant: no gradient.
        return (grad_q, grad_k, grad_v, grad_initial_state if initial_state is not None else None, None, None, None,
                None, None, None, None)


def eager_retention(q, k, v, initial_state, gamma, mode, chunk_size, normalize, scale, decay, want_state=True):
    """The eager front door (plain tensors, no tracing or mode active: functional.retention checks). want_state
    False: no final state is written (None in its place)."""
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad
                                    or (initial_state is not None and initial_state.requires_grad)):
        return RetentionFunction.apply(q, k, v, initial_state, gamma, mode, chunk_size, normalize, scale, decay,
                                       want_state)
    return run_forward(q, k, v, initial_state, gamma, mode, chunk_size, normalize, scale, decay, want_state)
