"""Fused attention on torch tensors: the plan-based implementation, the custom ops built on it
(attnkit::attention_forward and attnkit::attention_backward, for torch.compile and tracing), and the
autograd.Function the functional API uses in eager mode.

Two front doors share one implementation (run_forward / run_backward over cached library plans,
_plans.py):
- eager calls (the common case) go through AttentionFunction, or straight to run_forward when no
  gradient is needed: no custom-op dispatch, no per-call argument structs;
- under torch.compile / export, or when a dispatch mode or tensor subclass is active, the functional
  API calls the custom ops, whose fake implementations need only shapes.

The mask is described by plain values (kind, alignment, per-dimension tuples, block sizes) plus the
optional bool mask tensors, so the custom ops have a fixed schema. The forward op always produces the
LSE (float32 [B, *tokens, Hq]), because the backward needs it.

Gradient through the LSE (merge_attentions uses it): d lse_i / d s_ij = P_ij, so an incoming
grad_lse adds P_ij * grad_lse_i to dS. The library's backward computes dS = P (dO.v - dO.O); a
second backward call with v = 0, dO = e_0 and O = -grad_lse * e_0 yields exactly dS = P * grad_lse,
so its dq and dk are the LSE's contribution (its dv is discarded). This reuses the kernels as they
are, on every backend.

torch.use_deterministic_algorithms(True) selects the deterministic backward and forbids timing
configs (plans are made with ATTNKIT_PLAN_NO_TUNING), as attnkit.tuner.configure(deterministic=True)
does.
"""

from __future__ import annotations

import ctypes
from typing import List, Optional, Tuple

import torch

from . import _capi
from . import _launch
from . import _natten_queries
from . import _plans
from . import tuner as _tuner

_FORWARD_TENSORS = 8  # q, k, v, out, lse, block_mask, element_mask, rpb (attnkit_plan_run's order)
# q, k, v, out, lse, grad_out, grad_q, grad_k, grad_v, block_mask, element_mask, rpb, grad_rpb
_BACKWARD_TENSORS = 13

_pointer = _plans.pointer  # a module global: one lookup less per call on the hot path
_forward_plans = _plans.PlanCache()
_backward_plans = _plans.PlanCache()


def forget_backward_plans() -> None:
    """Drops the cached backward plans (their KV-splitting settings changed)."""
    _backward_plans.clear()


def fill_mask(mask: _capi.AttentionMask, block_mask, element_mask, kind, causal_alignment, kernel_size,
              dilation, stride, causal, block_q, block_k, element_path=_capi.ATTNKIT_ELEMENT_PATH_AUTOMATIC,
              rpb=None) -> None:
    mask.kind = kind
    mask.causal_alignment = causal_alignment
    mask.element_path = element_path
    if kind == _capi.ATTNKIT_MASK_NEIGHBORHOOD:
        _capi.neighborhood_mask(mask, kernel_size, dilation, stride, causal)
    mask.block_mask = _launch.view(block_mask, "block_mask", "bool")
    mask.block_q = block_q
    mask.block_k = block_k
    mask.element_mask = _launch.view(element_mask, "mask", "bool")
    mask.rpb = _launch.view(rpb, "rpb", "float32 or q's dtype")


# Names of the tensors _forward_plan checks, in the order it passes them to _launch.check_device.
_FORWARD_NAMES = ("q", "k", "v", "block_mask", "mask", "rpb")
_BACKWARD_NAMES = ("q", "k", "v", "out", "lse", "grad_out", "grad_q", "grad_k", "grad_v")


def _set_scale(args, scale: Optional[float]) -> None:
    if scale is not None:
        args.has_scale = 1
        args.scale = float(scale)


def _params_key(params) -> tuple:
    """The mask values (kind, alignment, kernel_size, dilation, stride, causal, block_q, block_k, element_path)
    as a hashable tuple (the custom ops receive lists)."""
    kind, alignment, kernel_size, dilation, stride, causal, block_q, block_k, element_path = params
    return (kind, alignment, tuple(kernel_size), tuple(dilation), tuple(stride), tuple(causal), block_q, block_k,
            element_path)


def deterministic_backward() -> bool:
    return _tuner.deterministic_backward() or torch.are_deterministic_algorithms_enabled()


def _forward_plan(lib, q, k, v, out, lse, block_mask, element_mask, params, scale, no_tuning, rpb):
    device = _launch.check_device(lib, q, k, v, block_mask, element_mask, rpb, names=_FORWARD_NAMES)
    args = _capi.AttentionForwardArgs()
    lib.attnkit_attention_forward_args_init(ctypes.byref(args))
    args.q = _launch.view(q, "q")
    args.k, args.v = _launch.view(k, "k", _launch.same_dtype(q, "q")), _launch.view(v, "v", _launch.same_dtype(q, "q"))
    args.out, args.lse = _launch.view(out, "out"), _launch.view(lse, "lse", "float32")
    _set_scale(args, scale)
    fill_mask(args.mask, block_mask, element_mask, *params, rpb=rpb)
    return _plans.make(lib, lib.attnkit_attention_forward_plan, args, device, no_tuning, _FORWARD_TENSORS)


class _ForwardEntry:
    """A forward plan with the layouts (shape and strides, plain tuples) of the contiguous out and lse its
    calls allocate; lse_layout None for calls without lse; the calls' params and scale (parts of its key). The
    backward of a call keys its plan on the entry itself (_backward_call): hashed and compared by identity, it
    stands for the forward key at no cost."""

    __slots__ = ("plan", "params", "scale", "out_like_q", "out_layout", "lse_layout")

    def __init__(self, plan, params, scale, q, out, lse):
        self.plan = plan
        self.params = params
        self.scale = scale
        self.out_like_q = out.shape == q.shape
        self.out_layout = (tuple(out.shape), out.stride())
        self.lse_layout = None if lse is None else (tuple(lse.shape), lse.stride())


def _new_outputs(q, v, need_lse: bool):
    """Contiguous out (q's dtype) and, when needed, lse (float32) for a call without a plan yet."""
    out = q.new_empty(q.shape[:-1] + v.shape[-1:])
    return out, (q.new_empty(q.shape[:-1], dtype=torch.float32) if need_lse else None)


def _outputs(entry: _ForwardEntry, q):
    """_new_outputs for a planned call, by the cheapest torch allocation for each: empty_like for an out shaped
    like q, else empty_strided of the entry's plain tuples (new_empty of a torch.Size shape with a dtype costs
    about twice as much: torch parses a torch.Size argument slowly)."""
    if entry.out_like_q:
        out = torch.empty_like(q, memory_format=torch.contiguous_format)
    else:
        shape, stride = entry.out_layout
        out = torch.empty_strided(shape, stride, dtype=q.dtype, device=q.device)
    if entry.lse_layout is None:
        return out, None
    shape, stride = entry.lse_layout
    return out, torch.empty_strided(shape, stride, dtype=torch.float32, device=q.device)


def run_forward(q, k, v, block_mask, element_mask, params: tuple, scale: Optional[float], need_lse: bool,
                rpb=None):
    """out [B, *tokens, Hq, Dv] and lse [B, *tokens, Hq] (None unless need_lse). `params` as _params_key; rpb the
    neighborhood's relative positional bias [Hq, 2K-1, ...] or None."""
    return run_forward_keyed(q, k, v, block_mask, element_mask, params, scale, need_lse, rpb)[:2]


def run_forward_keyed(q, k, v, block_mask, element_mask, params: tuple, scale: Optional[float], need_lse: bool,
                      rpb=None):
    """run_forward's (out, lse) and the plan entry of the call (_ForwardEntry), which stands for its key and fixes
    the layout of out and lse (fresh contiguous allocations): the backward of the same tensors keys its plan on it
    (_backward_call)."""
    # Inline form of _launch.contiguous_last and _plans.tensor_key: this runs on every call (stride() once per
    # tensor: cheaper than stride(-1)).
    q_stride, k_stride, v_stride = q.stride(), k.stride(), v.stride()
    try:
        if q_stride[-1] != 1:
            q = _launch.contiguous_last(q)
            q_stride = q.stride()
        if k_stride[-1] != 1:
            k = _launch.contiguous_last(k)
            k_stride = k.stride()
        if v_stride[-1] != 1:
            v = _launch.contiguous_last(v)
            v_stride = v.stride()
    except IndexError:
        pass  # a 0-d tensor: making the plan below refuses it with the library's message
    no_tuning = torch.are_deterministic_algorithms_enabled()
    q_pointer, k_pointer, v_pointer = q.data_ptr(), k.data_ptr(), v.data_ptr()
    key = (q.shape, q_stride, q.dtype, q.device, q_pointer & 15,
           k.shape, k_stride, k.dtype, k.device, k_pointer & 15,
           v.shape, v_stride, v.dtype, v.device, v_pointer & 15,
           params, scale, need_lse, no_tuning)
    if block_mask is None and element_mask is None and rpb is None:
        masks = (0, 0, 0)  # the usual call: no mask tensors, no bias
    else:
        block_mask, element_mask = _launch.contiguous_last(block_mask), _launch.contiguous_last(element_mask)
        key += (_plans.tensor_key(block_mask), _plans.tensor_key(element_mask), _plans.tensor_key(rpb))
        masks = (_pointer(block_mask), _pointer(element_mask), _pointer(rpb))
    entry = _forward_plans.get(key)
    if entry is None:
        out, lse = _new_outputs(q, v, need_lse)
        plan = _forward_plan(_launch.library(), q, k, v, out, lse, block_mask, element_mask, params, scale,
                             no_tuning, rpb)
        entry = _ForwardEntry(plan, params, scale, q, out, lse)
        _forward_plans.put(key, entry)
    else:
        out, lse = _outputs(entry, q)
    _plans.run(entry.plan, (q_pointer, k_pointer, v_pointer, out.data_ptr(), _pointer(lse)) + masks, q.device)
    return out, lse, entry


def _backward_plan(lib, tensors, block_mask, element_mask, params, scale, deterministic, no_tuning, rpb, grad_rpb):
    device = _launch.check_device(lib, *tensors, block_mask, element_mask, rpb,
                                  names=_BACKWARD_NAMES + _FORWARD_NAMES[3:])
    args = _capi.AttentionBackwardArgs()
    lib.attnkit_attention_backward_args_init(ctypes.byref(args))
    # KV-parallel splitting as NATTEN's switches set it (automatic within the default bound unless changed).
    args.kv_splits, args.split_workspace_limit = _natten_queries.backward_split_settings()
    (args.q, args.k, args.v, args.out, args.lse, args.grad_out, args.grad_q, args.grad_k,
     args.grad_v) = (_launch.view(t, name) for t, name in zip(tensors, _BACKWARD_NAMES))
    args.deterministic = 1 if deterministic else 0
    _set_scale(args, scale)
    fill_mask(args.mask, block_mask, element_mask, *params, rpb=rpb)
    args.grad_rpb = _launch.view(grad_rpb, "grad_rpb")
    return _plans.make(lib, lib.attnkit_attention_backward_plan, args, device, no_tuning, _BACKWARD_TENSORS)


def _backward_call(q, k, v, out, lse, grad_out, block_mask, element_mask, params, scale, deterministic, rpb=None,
                   rpb_grad=False, forward_entry=None):
    """(grad_q, grad_k, grad_v, grad_rpb); grad_rpb is None unless rpb_grad. forward_entry: the plan entry of the
    run_forward_keyed call that made out and lse from these q, k, v and masks (None: key on every tensor)."""
    # The gradients are contiguous and shaped like q, k, v, so the key needs only the inputs' entries.
    contiguous = torch.contiguous_format
    grad_q = torch.empty_like(q, memory_format=contiguous)
    grad_k = torch.empty_like(k, memory_format=contiguous)
    grad_v = torch.empty_like(v, memory_format=contiguous)
    grad_rpb = torch.empty_like(rpb, memory_format=contiguous) if rpb_grad else None
    no_tuning = torch.are_deterministic_algorithms_enabled()
    if forward_entry is not None:
        # The forward entry stands for its key, which holds q, k, v, the masks, params and scale; out and lse are
        # its fresh contiguous outputs (fresh allocations: 16-byte aligned); autograd hands grad_out on out's
        # device. A backward key keeps its entry alive, so the entry's identity is never reused while it is here.
        key = (forward_entry, grad_out.shape, grad_out.stride(), grad_out.dtype, grad_out.data_ptr() & 15,
               deterministic, no_tuning, rpb_grad)
    else:
        key = (q.shape, q.stride(), q.dtype, q.device, q.data_ptr() & 15,
               k.shape, k.stride(), k.dtype, k.device, k.data_ptr() & 15,
               v.shape, v.stride(), v.dtype, v.device, v.data_ptr() & 15,
               out.shape, out.stride(), out.dtype, out.device, out.data_ptr() & 15,
               lse.shape, lse.stride(), lse.dtype, lse.device, lse.data_ptr() & 15,
               grad_out.shape, grad_out.stride(), grad_out.dtype, grad_out.device, grad_out.data_ptr() & 15,
               params, scale, deterministic, no_tuning)
        if block_mask is not None or element_mask is not None or rpb is not None:
            key += (_plans.tensor_key(block_mask), _plans.tensor_key(element_mask), _plans.tensor_key(rpb), rpb_grad)
    plan = _backward_plans.get(key)
    if plan is None:
        plan = _backward_plan(_launch.library(), (q, k, v, out, lse, grad_out, grad_q, grad_k, grad_v), block_mask,
                              element_mask, params, scale, deterministic, no_tuning, rpb, grad_rpb)
        _backward_plans.put(key, plan)
    if block_mask is None and element_mask is None and rpb is None:
        masks = (0, 0, 0, 0)  # the usual call: no mask tensors, no bias
    else:
        masks = (_pointer(block_mask), _pointer(element_mask), _pointer(rpb), _pointer(grad_rpb))
    _plans.run(plan, (q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), lse.data_ptr(), grad_out.data_ptr(),
                      grad_q.data_ptr(), grad_k.data_ptr(), grad_v.data_ptr()) + masks, q.device)
    return grad_q, grad_k, grad_v, grad_rpb


def run_backward(grad_out, grad_lse, q, k, v, out, lse, block_mask, element_mask, params: tuple,
                 scale: Optional[float], deterministic: bool, rpb=None, rpb_grad: bool = False, forward_entry=None):
    """(grad_q, grad_k, grad_v, grad_rpb) from the incoming gradients of out and lse (either may be None);
    grad_rpb is None unless rpb_grad. forward_entry: see _backward_call."""
    device = q.device
    # stride()[-1]: cheaper than stride(-1). With a forward entry, out and lse are its fresh contiguous outputs.
    if (q.stride()[-1] != 1 or k.stride()[-1] != 1 or v.stride()[-1] != 1
            or (forward_entry is None and (out.stride()[-1] != 1 or lse.stride()[-1] != 1))):
        q, k, v, out, lse = (_launch.contiguous_last(t) for t in (q, k, v, out, lse))
    if block_mask is not None or element_mask is not None:
        block_mask, element_mask = _launch.contiguous_last(block_mask), _launch.contiguous_last(element_mask)
    rpb_grad = rpb_grad and rpb is not None
    grads = None
    if grad_out is not None:
        if grad_out.dtype != q.dtype:
            grad_out = grad_out.to(q.dtype)
        grad_out_stride = grad_out.stride()
        if grad_out_stride and grad_out_stride[-1] != 1:  # e.g. out.sum()'s expanded gradient (stride 0)
            grad_out = _launch.contiguous_last(grad_out)
        grads = _backward_call(q, k, v, out, lse, grad_out, block_mask, element_mask, params, scale, deterministic,
                               rpb, rpb_grad, forward_entry)
    if grad_lse is not None:
        # e_0 needs a value dim: with Dv = 0 the call below runs on one value dim (v = 0 there anyway).
        shape = out.shape if out.shape[-1] else out.shape[:-1] + (1,)
        unit = torch.zeros(shape, dtype=q.dtype, device=device)
        unit[..., 0] = 1
        lse_out = torch.zeros(shape, dtype=q.dtype, device=device)
        # Rows with no key have lse = -inf and get zero gradients from the library anyway.
        lse_out[..., 0] = -torch.nan_to_num(grad_lse.to(torch.float32), nan=0.0, posinf=0.0, neginf=0.0).to(q.dtype)
        zero_v = torch.zeros(v.shape[:-1] + shape[-1:], dtype=v.dtype, device=device)
        lse_q, lse_k, _, lse_rpb = _backward_call(q, k, zero_v, lse_out, lse, unit, block_mask, element_mask, params,
                                                  scale, deterministic, rpb, rpb_grad)
        if grads is None:
            grads = (lse_q, lse_k, torch.zeros(v.shape, dtype=v.dtype, device=device), lse_rpb)
        else:
            grads = (grads[0] + lse_q, grads[1] + lse_k, grads[2],
                     grads[3] + lse_rpb if rpb_grad else None)
    if grads is None:
        grads = tuple(torch.zeros(t.shape, dtype=t.dtype, device=device) for t in (q, k, v)) + (
            torch.zeros_like(rpb) if rpb_grad else None,)
    return grads


class AttentionFunction(torch.autograd.Function):
    """Eager autograd over run_forward / run_backward (the custom ops' formula, without their dispatch)."""

    @staticmethod
    def forward(ctx, q, k, v, block_mask, element_mask, params, scale, rpb=None):
        # The entry also carries params and scale to the backward.
        out, lse, ctx.forward_entry = run_forward_keyed(q, k, v, block_mask, element_mask, params, scale, True, rpb)
        if block_mask is None and element_mask is None and rpb is None:
            ctx.save_for_backward(q, k, v, out, lse)  # the usual call: no None slots to save and unpack
        else:
            ctx.save_for_backward(q, k, v, out, lse, block_mask, element_mask, rpb)
        # An unused output's gradient stays None instead of zeros: an unused lse then costs no second
        # backward call.
        ctx.set_materialize_grads(False)
        return out, lse

    @staticmethod
    def backward(ctx, grad_out, grad_lse):
        saved = ctx.saved_tensors
        if len(saved) == 5:
            (q, k, v, out, lse), block_mask, element_mask, rpb = saved, None, None, None
        else:
            q, k, v, out, lse, block_mask, element_mask, rpb = saved
        entry = ctx.forward_entry
        needs_input_grad = ctx.needs_input_grad
        with_rpb = len(needs_input_grad) > 7  # apply() was given the rpb argument
        grad_q, grad_k, grad_v, grad_rpb = run_backward(
            grad_out, grad_lse, q, k, v, out, lse, block_mask, element_mask, entry.params, entry.scale,
            deterministic_backward(), rpb, with_rpb and needs_input_grad[7], entry)
        return (grad_q, grad_k, grad_v, None, None, None, None) + ((grad_rpb,) if with_rpb else ())


# torch.autograd.Function.apply is a Python wrapper around the C entry point: it binds default arguments
# (only for functions with a separate setup_context, which AttentionFunction has not), unwraps functorch's
# dead wrappers and, under functorch transforms, takes another route. With no transform active the eager
# path calls the C entry point itself and unwraps the tensors as the wrapper would: about 5 us less per call.
_apply_c = getattr(torch._C._FunctionBase, "__dict__", {}).get("apply")
_apply_c = _apply_c.__get__(None, AttentionFunction) if _apply_c is not None else None
_unwrap_if_dead = getattr(getattr(torch._C, "_functorch", None), "unwrap_if_dead", None)
_transforms_active = getattr(torch._C, "_are_functorch_transforms_active", None)
if _apply_c is None or _unwrap_if_dead is None or _transforms_active is None:
    _apply_c = None


def apply_attention_function(q, k, v, block_mask, element_mask, params, scale, rpb):
    """AttentionFunction.apply(q, k, v, block_mask, element_mask, params, scale, rpb), without the Python
    wrapper when that is equivalent."""
    if _apply_c is None or _transforms_active():
        return AttentionFunction.apply(q, k, v, block_mask, element_mask, params, scale, rpb)
    unwrap = _unwrap_if_dead
    return _apply_c(unwrap(q), unwrap(k), unwrap(v), None if block_mask is None else unwrap(block_mask),
                    None if element_mask is None else unwrap(element_mask), params, scale,
                    None if rpb is None else unwrap(rpb))


# ---------------------------------------------------------------------------------------------
# Custom ops (torch.compile, export, opcheck, dispatch modes)


@torch.library.custom_op("attnkit::attention_forward", mutates_args=())
def attention_forward(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
    block_mask: Optional[torch.Tensor], element_mask: Optional[torch.Tensor],
    mask_kind: int, causal_alignment: int, kernel_size: List[int], dilation: List[int], stride: List[int],
    causal: List[bool], block_q: int, block_k: int, scale: Optional[float], rpb: Optional[torch.Tensor] = None,
    element_path: int = 0,
) -> Tuple[torch.Tensor, torch.Tensor]:
    params = _params_key((mask_kind, causal_alignment, kernel_size, dilation, stride, causal, block_q, block_k,
                          element_path))
    return run_forward(q, k, v, block_mask, element_mask, params, scale, True, rpb)


@attention_forward.register_fake
def _(q, k, v, block_mask, element_mask, mask_kind, causal_alignment, kernel_size, dilation, stride, causal,
      block_q, block_k, scale, rpb=None, element_path=0):
    _launch.common_device((q, k, v, block_mask, element_mask, rpb), _FORWARD_NAMES)  # refuses meta tensors
    out = q.new_empty(q.shape[:-1] + v.shape[-1:])
    lse = q.new_empty(q.shape[:-1], dtype=torch.float32)
    return out, lse


@torch.library.custom_op("attnkit::attention_backward", mutates_args=())
def attention_backward(
    grad_out: Optional[torch.Tensor], grad_lse: Optional[torch.Tensor],
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, lse: torch.Tensor,
    block_mask: Optional[torch.Tensor], element_mask: Optional[torch.Tensor],
    mask_kind: int, causal_alignment: int, kernel_size: List[int], dilation: List[int], stride: List[int],
    causal: List[bool], block_q: int, block_k: int, scale: Optional[float], deterministic: bool,
    rpb: Optional[torch.Tensor] = None, rpb_grad: bool = False, element_path: int = 0,
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """grad_q, grad_k, grad_v and grad_rpb (an empty tensor unless rpb_grad: op outputs cannot be None)."""
    params = _params_key((mask_kind, causal_alignment, kernel_size, dilation, stride, causal, block_q, block_k,
                          element_path))
    grad_q, grad_k, grad_v, grad_rpb = run_backward(grad_out, grad_lse, q, k, v, out, lse, block_mask, element_mask,
                                                    params, scale, deterministic, rpb, rpb_grad)
    return grad_q, grad_k, grad_v, grad_rpb if grad_rpb is not None else q.new_empty(0)


@attention_backward.register_fake
def _(grad_out, grad_lse, q, k, v, out, lse, block_mask, element_mask, mask_kind, causal_alignment, kernel_size,
      dilation, stride, causal, block_q, block_k, scale, deterministic, rpb=None, rpb_grad=False, element_path=0):
    _launch.common_device((q, k, v, out, lse, grad_out, grad_lse, block_mask, element_mask, rpb),
                          _BACKWARD_NAMES[:6] + ("grad_lse",) + _FORWARD_NAMES[3:])
    grad_rpb = rpb.new_empty(rpb.shape) if rpb is not None and rpb_grad else q.new_empty(0)
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape), grad_rpb


# Inputs of attention_forward after q, k, v that get no gradient (block_mask ... scale): 11 of them; then rpb,
# then element_path (no gradient).
_FORWARD_EXTRA_INPUTS = 11
_RPB_INPUT = 3 + _FORWARD_EXTRA_INPUTS
_ELEMENT_PATH_INPUT = _RPB_INPUT + 1


def _setup_context(ctx, inputs, output):
    q, k, v, block_mask, element_mask = inputs[:5]
    rpb = inputs[_RPB_INPUT] if len(inputs) > _RPB_INPUT else None
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse, block_mask, element_mask, rpb)
    ctx.set_materialize_grads(False)
    ctx.mask_params = inputs[5:13]
    ctx.scale = inputs[13]
    ctx.element_path = inputs[_ELEMENT_PATH_INPUT] if len(inputs) > _ELEMENT_PATH_INPUT else 0
    ctx.inputs = len(inputs)


def _backward(ctx, grad_out, grad_lse):
    q, k, v, out, lse, block_mask, element_mask, rpb = ctx.saved_tensors
    rpb_grad = rpb is not None and len(ctx.needs_input_grad) > _RPB_INPUT and ctx.needs_input_grad[_RPB_INPUT]
    grad_q, grad_k, grad_v, grad_rpb = attention_backward(
        grad_out, grad_lse, q, k, v, out, lse, block_mask, element_mask, *ctx.mask_params, ctx.scale,
        deterministic_backward(), rpb, rpb_grad, element_path=ctx.element_path,
    )
    grads = (grad_q, grad_k, grad_v) + (None,) * _FORWARD_EXTRA_INPUTS + ((grad_rpb if rpb_grad else None),)
    return grads + (None,) * (ctx.inputs - len(grads))


attention_forward.register_autograd(_backward, setup_context=_setup_context)
