"""attnkit's functional API over torch tensors (heads-last layout, DESIGN §2).

q [B, *tokens, Hq, D], k [B, *tokens_kv, Hkv, D], v [B, *tokens_kv, Hkv, Dv] -> out [B, *tokens, Hq, Dv]
and, with return_lse=True, lse [B, *tokens, Hq] (float32, natural log). Tokens are numbered
row-major over their extents for causal, block and element masks. Every op is a
torch.library.custom_op with a fake implementation and an autograd formula, so it works under
torch.compile(fullgraph=True) and CUDA-graph capture; CPU tensors run on the CPU backend, CUDA
tensors on the GPU backends.
"""

from __future__ import annotations

import enum
import functools
import warnings
from typing import Any, Callable, Dict, List, Literal, Optional, Protocol, Sequence, Tuple, Union, overload

import torch

from . import _attention_ops
from . import _capi
from . import _mask_spec
from ._attention_ops import attention_forward as _attention_op
from . import _gemm_ops
from ._gemm_ops import gemm as _gemm_op
from . import _retention_ops
from ._retention_ops import retention_forward as _retention_op

__all__ = ["attention", "na1d", "na2d", "na3d", "sparse_attention", "retention", "gemm", "merge_attentions"]

# Types of the public signatures: (out, lse); one int (bool) or one per token dimension.
_OutLse = Tuple[torch.Tensor, torch.Tensor]
_IntPerDim = Union[int, Sequence[int]]
_BoolPerDim = Union[bool, Sequence[bool]]


class _NeighborhoodFunction(Protocol):
    """na1d/na2d/na3d as type checkers see them: the result is out, or (out, lse) with return_lse=True."""

    @overload
    def __call__(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, kernel_size: _IntPerDim,
                 stride: Optional[_IntPerDim] = ..., dilation: Optional[_IntPerDim] = ...,
                 is_causal: Optional[_BoolPerDim] = ..., scale: Optional[float] = ...,
                 additional_keys: Optional[torch.Tensor] = ..., additional_values: Optional[torch.Tensor] = ...,
                 attention_kwargs: Optional[Dict[str, Any]] = ..., *, return_lse: Literal[False] = ...,
                 backend: Optional[str] = ..., q_tile_shape: Optional[_IntPerDim] = ...,
                 kv_tile_shape: Optional[_IntPerDim] = ..., backward_q_tile_shape: Optional[_IntPerDim] = ...,
                 backward_kv_tile_shape: Optional[_IntPerDim] = ..., backward_kv_splits: Optional[_IntPerDim] = ...,
                 backward_use_pt_reduction: bool = ..., run_persistent_kernel: bool = ...,
                 kernel_schedule: Union[str, enum.Enum, None] = ..., torch_compile: bool = ...,
                 try_fuse_additional_kv: bool = ..., rpb: Optional[torch.Tensor] = ...) -> torch.Tensor: ...
    @overload
    def __call__(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, kernel_size: _IntPerDim,
                 stride: Optional[_IntPerDim] = ..., dilation: Optional[_IntPerDim] = ...,
                 is_causal: Optional[_BoolPerDim] = ..., scale: Optional[float] = ...,
                 additional_keys: Optional[torch.Tensor] = ..., additional_values: Optional[torch.Tensor] = ...,
                 attention_kwargs: Optional[Dict[str, Any]] = ..., *, return_lse: Literal[True],
                 backend: Optional[str] = ..., q_tile_shape: Optional[_IntPerDim] = ...,
                 kv_tile_shape: Optional[_IntPerDim] = ..., backward_q_tile_shape: Optional[_IntPerDim] = ...,
                 backward_kv_tile_shape: Optional[_IntPerDim] = ..., backward_kv_splits: Optional[_IntPerDim] = ...,
                 backward_use_pt_reduction: bool = ..., run_persistent_kernel: bool = ...,
                 kernel_schedule: Union[str, enum.Enum, None] = ..., torch_compile: bool = ...,
                 try_fuse_additional_kv: bool = ..., rpb: Optional[torch.Tensor] = ...) -> _OutLse: ...
    @overload
    def __call__(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, kernel_size: _IntPerDim,
                 stride: Optional[_IntPerDim] = ..., dilation: Optional[_IntPerDim] = ...,
                 is_causal: Optional[_BoolPerDim] = ..., scale: Optional[float] = ...,
                 additional_keys: Optional[torch.Tensor] = ..., additional_values: Optional[torch.Tensor] = ...,
                 attention_kwargs: Optional[Dict[str, Any]] = ..., *, return_lse: bool = ...,
                 backend: Optional[str] = ..., q_tile_shape: Optional[_IntPerDim] = ...,
                 kv_tile_shape: Optional[_IntPerDim] = ..., backward_q_tile_shape: Optional[_IntPerDim] = ...,
                 backward_kv_tile_shape: Optional[_IntPerDim] = ..., backward_kv_splits: Optional[_IntPerDim] = ...,
                 backward_use_pt_reduction: bool = ..., run_persistent_kernel: bool = ...,
                 kernel_schedule: Union[str, enum.Enum, None] = ..., torch_compile: bool = ...,
                 try_fuse_additional_kv: bool = ...,
                 rpb: Optional[torch.Tensor] = ...) -> Union[torch.Tensor, _OutLse]: ...
    def __call__(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, kernel_size: _IntPerDim,
                 stride: Optional[_IntPerDim] = 1, dilation: Optional[_IntPerDim] = 1,
                 is_causal: Optional[_BoolPerDim] = False, scale: Optional[float] = None,
                 additional_keys: Optional[torch.Tensor] = None, additional_values: Optional[torch.Tensor] = None,
                 attention_kwargs: Optional[Dict[str, Any]] = None, *, return_lse: bool = False,
                 backend: Optional[str] = None, q_tile_shape: Optional[_IntPerDim] = None,
                 kv_tile_shape: Optional[_IntPerDim] = None, backward_q_tile_shape: Optional[_IntPerDim] = None,
                 backward_kv_tile_shape: Optional[_IntPerDim] = None, backward_kv_splits: Optional[_IntPerDim] = None,
                 backward_use_pt_reduction: bool = False, run_persistent_kernel: bool = True,
                 kernel_schedule: Union[str, enum.Enum, None] = None, torch_compile: bool = False,
                 try_fuse_additional_kv: bool = False,
                 rpb: Optional[torch.Tensor] = None) -> Union[torch.Tensor, _OutLse]: ...


def _neighborhood_signature(function: Callable[..., Any]) -> _NeighborhoodFunction:
    """Typing only: na1d/na2d/na3d get _NeighborhoodFunction's overloads for type checkers and its
    annotations at run time (inspect.signature, help()); the function itself is returned unchanged."""
    annotations = _NeighborhoodFunction.__call__.__annotations__
    function.__annotations__ = {name: annotation for name, annotation in annotations.items() if name != "self"}
    return function


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
_functorch_transforms_active = getattr(torch._C, "_are_functorch_transforms_active", lambda: False)


def _eager_fast_path(q, k, v, block_mask=None, element_mask=None, rpb=None) -> bool:
    """Plain tensors, no tracing, no active mode: the call may skip the custom op's dispatch (a mode or a
    tensor subclass must see the op, so those calls take it; so does anything that is not a tensor, to be
    refused with a message)."""
    if type(q) not in _PLAIN_TENSORS or type(k) not in _PLAIN_TENSORS or type(v) not in _PLAIN_TENSORS:
        return False
    if block_mask is not None and type(block_mask) not in _PLAIN_TENSORS:
        return False
    if element_mask is not None and type(element_mask) not in _PLAIN_TENSORS:
        return False
    if rpb is not None and type(rpb) not in _PLAIN_TENSORS:
        return False
    return _eager_call_allowed()


def _eager_call_allowed() -> bool:
    """No tracing, no functorch transform, no active mode: a call on plain tensors may skip the custom op."""
    if torch.compiler.is_compiling() or _functorch_transforms_active():
        return False
    return not (_dispatch_modes is None or _function_modes is None or _dispatch_modes() or _function_modes())


def _run_attention(q, k, v, spec: _mask_spec.MaskSpec, scale, return_lse: bool, names=("q", "k", "v"), rpb=None):
    if scale is not None:
        scale = _check_scale(scale)
    if _eager_fast_path(q, k, v, spec.block_mask, spec.element_mask, rpb):
        needs_grad = q.requires_grad or k.requires_grad or v.requires_grad or (rpb is not None and rpb.requires_grad)
        if needs_grad and torch.is_grad_enabled():
            out, lse = _attention_ops.apply_attention_function(q, k, v, spec.block_mask, spec.element_mask,
                                                               spec.params(), scale, rpb)
        else:
            out, lse = _attention_ops.run_forward(q, k, v, spec.block_mask, spec.element_mask, spec.params(), scale,
                                                  return_lse, rpb)
    else:
        for t, name in zip((q, k, v), names):
            _check_tensor(t, name)
        if rpb is not None:
            _check_tensor(rpb, "rpb")
        out, lse = _attention_op(q, k, v, *spec.op_args(), scale, rpb, element_path=spec.element_path)
    return (out, lse) if return_lse else out


@overload
def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, is_causal: bool = ...,
              scale: Optional[float] = ..., mask: Optional[torch.Tensor] = ..., return_lse: Literal[False] = ...,
              causal_alignment: str = ..., mask_path: str = ...) -> torch.Tensor: ...
@overload
def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, is_causal: bool = ...,
              scale: Optional[float] = ..., mask: Optional[torch.Tensor] = ..., return_lse: Literal[True],
              causal_alignment: str = ..., mask_path: str = ...) -> _OutLse: ...
@overload
def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, is_causal: bool = ...,
              scale: Optional[float] = ..., mask: Optional[torch.Tensor] = ..., return_lse: bool = ...,
              causal_alignment: str = ..., mask_path: str = ...) -> Union[torch.Tensor, _OutLse]: ...
def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, is_causal: bool = False,
              scale: Optional[float] = None, mask: Optional[torch.Tensor] = None, return_lse: bool = False,
              causal_alignment: str = "top_left", mask_path: str = "auto") -> Union[torch.Tensor, _OutLse]:
    """Dense attention, optionally causal (top-left aligned like torch SDPA, or bottom-right) or
    with a bool element mask [B|1, Hq|1, Sq, Sk] or [Sq, Sk] (True = attend). A query row with no
    key gives 0 output and lse -inf.

    mask_path (CUDA, element masks; speed only, never results): "auto" chooses from the mask's measured
    density, once per mask tensor; "tiles" forces the tensor-core tile-list path (every non-empty tile
    computed); "scattered" forces the sparse path whose work follows the true entries. CPU tensors
    ignore it."""
    if mask is not None:
        if is_causal:
            raise ValueError("is_causal=True with a mask: give one of them (fold causality into the mask)")
        spec = _mask_spec.element(mask, mask_path)
    else:
        spec = _mask_spec.dense(is_causal, causal_alignment)
        if mask_path != "auto":
            # The library refuses a path choice without an element mask, naming what is allowed.
            spec = spec._replace(element_path=_mask_spec.element_path(mask_path))
    return _run_attention(q, k, v, spec, scale, return_lse)


# NATTEN >= 0.20 compatibility (docs/python.md, "Neighborhood attention and NATTEN").
#
# na1d/na2d/na3d take NATTEN's parameters in NATTEN's order, so a positional NATTEN call means the same
# here. Everything after attention_kwargs is keyword-only: in NATTEN the 12th positional parameter is
# `backend` (return_lse comes last, after the kernel knobs), so a longer positional call raises
# TypeError instead of binding a knob to the wrong parameter. NATTEN's kernel-selection knobs
# choose among NATTEN's own kernels and change speed, not results: attnkit accepts them and ignores
# them (it picks its kernels itself, see attnkit.tuner), but rejects an unknown backend or kernel
# schedule name, as NATTEN does.
_NATTEN_FNA_BACKENDS = ("cutlass-fna", "hopper-fna", "blackwell-fna", "flex-fna")
_NATTEN_FMHA_BACKENDS = ("cutlass-fmha", "hopper-fmha", "blackwell-fmha", "flex-fmha")
_NATTEN_KERNEL_SCHEDULES = ("non", "coop", "pp")
# Keys of attention_kwargs (NATTEN: arguments of natten.attention for the additional-KV attention)
# that are kernel knobs only; any other key (is_causal, scale, the varlen arguments, ...) would
# change results and is refused.
_NATTEN_ATTENTION_KNOBS = frozenset({
    "backend", "q_tile_size", "kv_tile_size", "backward_q_tile_size", "backward_kv_tile_size",
    "backward_kv_splits", "backward_use_pt_reduction", "run_persistent_kernel", "kernel_schedule",
    "torch_compile",
})
_LEGACY_QKV = {"q": "query", "k": "key", "v": "value"}


def _accept_legacy_qkv(fn):
    """Let the pre-NATTEN-order keyword names q=, k=, v= keep working (deprecated) for query=, key=,
    value=; giving both spellings of one argument is a TypeError."""
    positions = {"query": 0, "key": 1, "value": 2}

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if "q" in kwargs or "k" in kwargs or "v" in kwargs:
            renamed = []
            for old, new in _LEGACY_QKV.items():
                if old not in kwargs:
                    continue
                if new in kwargs or len(args) > positions[new]:
                    raise TypeError(f"{fn.__name__}(): got {new} twice, as {new} and as its old name {old}=; "
                                    f"allowed: {new} (or, deprecated, {old}=) once")
                kwargs[new] = kwargs.pop(old)
                renamed.append(f"{old}= -> {new}=")
            warnings.warn(f"{fn.__name__}(): the keyword names q=, k=, v= are deprecated; use NATTEN's "
                          f"query=, key=, value= ({', '.join(renamed)})", DeprecationWarning, stacklevel=2)
        return fn(*args, **kwargs)

    return wrapper


def _is_kernel_schedule(value) -> bool:
    if value is None or value in _NATTEN_KERNEL_SCHEDULES:
        return True
    return isinstance(value, enum.Enum) and type(value).__name__ == "KernelSchedule"  # natten.types.KernelSchedule


def _check_natten_knobs(name: str, backend, kernel_schedule, attention_kwargs) -> None:
    if backend is not None and backend not in _NATTEN_FNA_BACKENDS:
        raise ValueError(f"{name}: backend {backend!r}; allowed: None or one of NATTEN's "
                         f"{', '.join(_NATTEN_FNA_BACKENDS)} (accepted and ignored: attnkit picks its own kernels)")
    if not _is_kernel_schedule(kernel_schedule):
        raise ValueError(f"{name}: kernel_schedule {kernel_schedule!r}; allowed: None, 'non', 'coop' or 'pp' "
                         f"(accepted and ignored: attnkit picks its own kernels)")
    if attention_kwargs is None:
        return
    if not isinstance(attention_kwargs, dict):
        raise TypeError(f"{name}: attention_kwargs {type(attention_kwargs).__name__}; allowed: None or a dict")
    for key, value in attention_kwargs.items():
        if key not in _NATTEN_ATTENTION_KNOBS:
            raise ValueError(f"{name}: attention_kwargs[{key!r}]; allowed keys: NATTEN's kernel knobs "
                             f"{', '.join(sorted(_NATTEN_ATTENTION_KNOBS))} (accepted and ignored); arguments that "
                             f"change results are not taken here")
        if key == "backend" and value is not None and value not in _NATTEN_FMHA_BACKENDS:
            raise ValueError(f"{name}: attention_kwargs['backend'] {value!r}; allowed: None or one of NATTEN's "
                             f"{', '.join(_NATTEN_FMHA_BACKENDS)} (accepted and ignored)")
        if key == "kernel_schedule" and not _is_kernel_schedule(value):
            raise ValueError(f"{name}: attention_kwargs['kernel_schedule'] {value!r}; allowed: None, 'non', "
                             f"'coop' or 'pp' (accepted and ignored)")


def _check_additional_kv(query, key, value, additional_keys, additional_values) -> None:
    """NATTEN's rules: both or neither; [batch, tokens, heads_kv, head_dim] each, batch of query, the
    same token count, head dims of key and value; heads dividing the query heads (GQA/MQA)."""
    if (additional_keys is None) != (additional_values is None):
        given, missing = (("additional_keys", "additional_values") if additional_values is None
                          else ("additional_values", "additional_keys"))
        raise ValueError(f"{given} given without {missing}; allowed: both (extra tokens every query attends "
                         f"to) or neither")
    for t, name in ((additional_keys, "additional_keys"), (additional_values, "additional_values")):
        _check_tensor(t, name)
        if t.dim() != 4:
            raise ValueError(f"{name}: rank {t.dim()} (shape {tuple(t.shape)}); allowed: rank 4, "
                             f"[batch, tokens, heads_kv, head_dim]")
        if t.dtype != query.dtype or t.device != query.device:
            raise ValueError(f"{name}: {t.dtype} on {t.device}; allowed: query's dtype and device "
                             f"({query.dtype} on {query.device})")
        if t.shape[0] != query.shape[0]:
            raise ValueError(f"{name}: batch {t.shape[0]} (shape {tuple(t.shape)}); allowed: query's batch "
                             f"{query.shape[0]}")
    if additional_values.shape[1] != additional_keys.shape[1] or additional_values.shape[2] != additional_keys.shape[2]:
        raise ValueError(f"additional_values: shape {tuple(additional_values.shape)} with additional_keys "
                         f"{tuple(additional_keys.shape)}; allowed: the same tokens and heads")
    if additional_keys.shape[3] != query.shape[-1]:
        raise ValueError(f"additional_keys: head_dim {additional_keys.shape[3]}; allowed: query's head_dim "
                         f"{query.shape[-1]}")
    if isinstance(value, torch.Tensor) and additional_values.shape[3] != value.shape[-1]:
        raise ValueError(f"additional_values: head_dim {additional_values.shape[3]}; allowed: value's head_dim "
                         f"{value.shape[-1]}")
    heads, extra_heads = query.shape[-2], additional_keys.shape[2]
    if extra_heads == 0 or heads % extra_heads != 0:
        raise ValueError(f"additional_keys: {extra_heads} heads; allowed: a divisor of query's {heads} heads "
                         f"(GQA/MQA)")


def _neighborhood(dims, query, key, value, kernel_size, stride, dilation, is_causal, scale, additional_keys,
                  additional_values, attention_kwargs, return_lse, backend, kernel_schedule, rpb=None):
    _check_tensor(query, "query")
    if query.dim() != dims + 3:
        raise ValueError(f"query: rank {query.dim()} (shape {tuple(query.shape)}); allowed: rank {dims + 3}, "
                         f"[B, {', '.join('X' + str(i) for i in range(dims))}, heads, head_dim] for na{dims}d")
    if backend is not None or kernel_schedule is not None or attention_kwargs is not None:
        _check_natten_knobs(f"na{dims}d", backend, kernel_schedule, attention_kwargs)
    # As NATTEN: None means the default, and a scale of None or 0 means head_dim ** -0.5.
    scale = _check_scale(scale) or None
    spec = _mask_spec.neighborhood(dims, kernel_size, 1 if dilation is None else dilation,
                                   1 if stride is None else stride, False if is_causal is None else is_causal)
    names = ("query", "key", "value")
    if additional_keys is None and additional_values is None:
        return _run_attention(query, key, value, spec, scale, return_lse, names, rpb)
    _check_additional_kv(query, key, value, additional_keys, additional_values)
    out, lse = _run_attention(query, key, value, spec, scale, True, names, rpb)
    if additional_keys.shape[1] > 0:  # with no extra token the result is the neighborhood's alone
        # Every query attends to every additional token (never causal), merged through the LSE, so
        # the gradients reach query, key, value and the additional tokens through autograd.
        extra_out, extra_lse = _run_attention(query.flatten(1, dims), additional_keys, additional_values,
                                              _mask_spec.dense(), scale, True,
                                              ("query", "additional_keys", "additional_values"))
        out, lse = merge_attentions([out, extra_out.reshape(out.shape)], [lse, extra_lse.reshape(lse.shape)])
    return (out, lse) if return_lse else out


_NA_DOC = """{dims}-D neighborhood attention with NATTEN >= 0.20's parameters (names, order, defaults).

    query [B, {tokens}, heads, head_dim], key/value [B, {tokens}, heads_kv, head_dim(_v)]: each
    query sees the `kernel_size` keys of its window (DESIGN §3: stride groups, dilation groups,
    causal windows). kernel_size, stride, dilation and is_causal are one value or one per token
    dimension (None: the default); scale None (or 0, as in NATTEN) means head_dim ** -0.5.

    additional_keys / additional_values [B, tokens_extra, heads_kv, head_dim(_v)] (both or neither):
    extra tokens every query attends to besides its neighborhood (never causal), combined with it
    through the LSE (attention + merge_attentions), differentiable. return_lse=True returns
    (out, lse), lse [B, {tokens}, heads] float32. attention_kwargs and NATTEN's kernel knobs
    (backend, tile shapes, backward_kv_splits, backward_use_pt_reduction, run_persistent_kernel,
    kernel_schedule, torch_compile, try_fuse_additional_kv) are accepted and ignored; an unknown
    backend or kernel_schedule, or an attention_kwargs key that would change results, raises. The
    old names q=, k=, v= still work (deprecated).

    rpb (attnkit's extension, NATTEN <= 0.17's relative positional bias): [heads, 2*K-1 per token
    dimension], float32 or query's dtype, added to the scaled scores inside the kernel: the score of a
    query and a key gets rpb[h, key offset / dilation + K - 1 per dimension]; differentiable. Allowed with
    stride 1 and no causal dimension; CPU tensors only in this version. attnkit.natten017 has NATTEN
    0.17's modules and unfused ops over it."""


@_neighborhood_signature
def na1d(query, key, value, kernel_size, stride=1, dilation=1, is_causal=False, scale=None,
         additional_keys=None, additional_values=None, attention_kwargs=None, *, return_lse=False,
         backend=None, q_tile_shape=None, kv_tile_shape=None, backward_q_tile_shape=None,
         backward_kv_tile_shape=None, backward_kv_splits=None, backward_use_pt_reduction=False,
         run_persistent_kernel=True, kernel_schedule=None, torch_compile=False, try_fuse_additional_kv=False,
         rpb=None):
    return _neighborhood(1, query, key, value, kernel_size, stride, dilation, is_causal, scale, additional_keys,
                         additional_values, attention_kwargs, return_lse, backend, kernel_schedule, rpb)


@_neighborhood_signature
def na2d(query, key, value, kernel_size, stride=1, dilation=1, is_causal=False, scale=None,
         additional_keys=None, additional_values=None, attention_kwargs=None, *, return_lse=False,
         backend=None, q_tile_shape=None, kv_tile_shape=None, backward_q_tile_shape=None,
         backward_kv_tile_shape=None, backward_kv_splits=None, backward_use_pt_reduction=False,
         run_persistent_kernel=True, kernel_schedule=None, torch_compile=False, try_fuse_additional_kv=False,
         rpb=None):
    return _neighborhood(2, query, key, value, kernel_size, stride, dilation, is_causal, scale, additional_keys,
                         additional_values, attention_kwargs, return_lse, backend, kernel_schedule, rpb)


@_neighborhood_signature
def na3d(query, key, value, kernel_size, stride=1, dilation=1, is_causal=False, scale=None,
         additional_keys=None, additional_values=None, attention_kwargs=None, *, return_lse=False,
         backend=None, q_tile_shape=None, kv_tile_shape=None, backward_q_tile_shape=None,
         backward_kv_tile_shape=None, backward_kv_splits=None, backward_use_pt_reduction=False,
         run_persistent_kernel=True, kernel_schedule=None, torch_compile=False, try_fuse_additional_kv=False,
         rpb=None):
    return _neighborhood(3, query, key, value, kernel_size, stride, dilation, is_causal, scale, additional_keys,
                         additional_values, attention_kwargs, return_lse, backend, kernel_schedule, rpb)


na1d.__doc__ = _NA_DOC.format(dims=1, tokens="L")
na2d.__doc__ = _NA_DOC.format(dims=2, tokens="X, Y")
na3d.__doc__ = _NA_DOC.format(dims=3, tokens="X, Y, Z")
na1d = _accept_legacy_qkv(na1d)
na2d = _accept_legacy_qkv(na2d)
na3d = _accept_legacy_qkv(na3d)


@overload
def sparse_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, block_mask: Optional[torch.Tensor] = ...,
                     block_size: Optional[_IntPerDim] = ..., mask: Optional[torch.Tensor] = ...,
                     scale: Optional[float] = ..., return_lse: Literal[False] = ...,
                     mask_path: str = ...) -> torch.Tensor: ...
@overload
def sparse_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, block_mask: Optional[torch.Tensor] = ...,
                     block_size: Optional[_IntPerDim] = ..., mask: Optional[torch.Tensor] = ...,
                     scale: Optional[float] = ..., return_lse: Literal[True],
                     mask_path: str = ...) -> _OutLse: ...
@overload
def sparse_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, block_mask: Optional[torch.Tensor] = ...,
                     block_size: Optional[_IntPerDim] = ..., mask: Optional[torch.Tensor] = ...,
                     scale: Optional[float] = ..., return_lse: bool = ...,
                     mask_path: str = ...) -> Union[torch.Tensor, _OutLse]: ...
def sparse_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, block_mask: Optional[torch.Tensor] = None,
                     block_size: Optional[_IntPerDim] = None, mask: Optional[torch.Tensor] = None,
                     scale: Optional[float] = None, return_lse: bool = False,
                     mask_path: str = "auto") -> Union[torch.Tensor, _OutLse]:
    """Block-sparse attention: block_mask bool [B|1, Hq|1, ceil(Sq/bq), ceil(Sk/bk)] with
    block_size = bq or (bq, bk); a True block is attended in full. Or element-sparse: mask bool
    [B|1, Hq|1, Sq, Sk]; the library skips empty tiles, or (mask_path, as in attention) follows the
    true entries of a scattered mask."""
    if (block_mask is None) == (mask is None):
        raise ValueError("sparse_attention: give exactly one of block_mask (with block_size) or mask")
    if block_mask is not None:
        spec = _mask_spec.block(block_mask, block_size)
        if mask_path != "auto":
            spec = spec._replace(element_path=_mask_spec.element_path(mask_path))
    else:
        spec = _mask_spec.element(mask, mask_path)
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


def retention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *,
              gamma: Union[float, Sequence[float], torch.Tensor, None] = None, mode: Optional[str] = None,
              chunk_size: int = 64, initial_state: Optional[torch.Tensor] = None, output_final_state: bool = False,
              normalize: bool = False, scale: Optional[float] = None,
              decay: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    """RetNet retention: q, k [B, T, H, Dk], v [B, T, H, Dv]; per-head decay gamma (default
    1 - 2^(-5-h)); mode "chunk" (chunkwise, chunk_size tokens; the default), "parallel" or "recurrent".
    initial_state [B, H, Dk, Dv] (float32; float64 for float64 inputs). Returns (out, final_state)
    like flash-linear-attention, final_state None unless output_final_state.
    decay: an explicit decay matrix [H|1, Tq, Tk] (float32 or q's dtype) instead of gamma, parallel form
    only (the mode defaults to "parallel" with it): out_t = scale * sum_m decay[h, t, m] (q_t . k_m) v_m, q
    with Tq tokens, k and v with Tk; with normalize only the score normalisation applies. No state, and no
    gradient for the matrix."""
    for t, name in ((q, "q"), (k, "k"), (v, "v")):
        _check_tensor(t, name)
    if initial_state is not None:
        _check_tensor(initial_state, "initial_state")
    if decay is not None:
        _check_tensor(decay, "decay")
    if mode is None:
        mode = "parallel" if decay is not None else "chunk"
    if mode not in _RETENTION_MODES:
        raise ValueError(f"mode: {mode!r}; allowed: 'chunk' (or 'chunkwise'), 'parallel', 'recurrent'")
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int):
        raise TypeError(f"chunk_size: {chunk_size!r}; allowed: a positive int")
    if normalize and (output_final_state or initial_state is not None):
        raise ValueError("normalize=True with initial_state or output_final_state: RetNet's normalised form has "
                         "no recurrent state; allowed: normalize=False to carry state, or no state")
    if decay is not None and (output_final_state or initial_state is not None or gamma is not None):
        raise ValueError("decay given with gamma, initial_state or output_final_state: the decay matrix replaces "
                         "gamma and has no recurrent state; allowed: decay alone, or gamma with states")
    heads = q.shape[2] if q.dim() == 4 else 0
    gammas = None if decay is not None else _gamma_list(gamma, heads)
    arguments = (q, k, v, initial_state, gammas, _RETENTION_MODES[mode], chunk_size, bool(normalize),
                 _check_scale(scale), decay)
    plain = all(t is None or type(t) in _PLAIN_TENSORS for t in (q, k, v, initial_state, decay))
    if plain and _eager_call_allowed():
        out, final_state = _retention_ops.eager_retention(*arguments, bool(output_final_state))
    else:
        out, final_state = _retention_op(*arguments)
    return out, (final_state if output_final_state else None)


def gemm(a: torch.Tensor, b: torch.Tensor, *, allow_tf32: bool = False) -> torch.Tensor:
    """a @ b for [M, K] @ [K, N] or batched [Bt|1, M, K] @ [Bt|1, K, N] (a batch of 1 broadcasts;
    a 2-D operand next to a 3-D one counts as a batch of 1). Row- and column-major operands (e.g.
    x.mT) pass without a copy."""
    plain = type(a) in _PLAIN_TENSORS and type(b) in _PLAIN_TENSORS
    if not plain:
        _check_tensor(a, "a")
        _check_tensor(b, "b")
    a_dim, b_dim = a.dim(), b.dim()
    if a_dim == 2 and b_dim == 3:
        a = a.unsqueeze(0)
    elif a_dim == 3 and b_dim == 2:
        b = b.unsqueeze(0)
    if plain and _eager_call_allowed():
        return _gemm_ops.eager_gemm(a, b, bool(allow_tf32))
    return _gemm_op(a, b, bool(allow_tf32))


def merge_attentions(outputs: Union[List[torch.Tensor], Tuple[torch.Tensor, ...]],
                     lses: Union[List[torch.Tensor], Tuple[torch.Tensor, ...]]) -> _OutLse:
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
