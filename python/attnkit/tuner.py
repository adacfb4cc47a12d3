"""Auto-tuner settings and multi-rank agreement (DESIGN §6) over the C ABI's attnkit_tuner_*.

- settings() / configure(...): read and change the process-wide settings (mode "off" | "on" |
  "load-only", deterministic, NATTEN-named forward/backward toggles, thorough modes, warm-up and
  step counts, top_k, cache_dir). "load-only" is the documented spelling, as in ATTNKIT_TUNE;
  "load_only" is accepted too, and settings() reports "load-only".
- use_autotuner(...) / disable_autotuner(): NATTEN-compatible spellings of configure().
- sync(group): every later tuning decision is agreed across the ranks of a torch.distributed
  group (rank 0 tunes and broadcasts, or ranks split the configs and all-gather timings); the
  collectives are broadcast_object_list / all_gather_object, so a gloo group works on the CPU.
- forward_config(...): which config the tuner picks for an attention call, and whether it came
  from "default", "cache" or "tuned".

The C functions are looked up on first use: a library built before they existed still runs every
op, and these functions then raise RuntimeError saying so.
"""

from __future__ import annotations

import ctypes
import os
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple, Union

from . import _capi

if TYPE_CHECKING:
    import torch
    from torch.distributed import ProcessGroup

__all__ = ["available", "settings", "configure", "use_autotuner", "disable_autotuner", "sync", "unsync",
           "forward_config", "deterministic_backward"]

_MODES = {"off": _capi.ATTNKIT_TUNE_OFF, "on": _capi.ATTNKIT_TUNE_ON, "load-only": _capi.ATTNKIT_TUNE_LOAD_ONLY}
_MODE_NAMES = {value: name for name, value in _MODES.items()}
# Other spellings accepted wherever a mode is given (the library's environment parser takes the same).
_MODE_ALIASES = {"load_only": "load-only"}
_MODE_SPELLINGS = "'off', 'on', 'load-only' (also spelled 'load_only')"

_AGREEMENTS = {"root_tunes": _capi.ATTNKIT_AGREE_ROOT_TUNES, "split_configs": _capi.ATTNKIT_AGREE_SPLIT_CONFIGS}
_BOOL_FIELDS = ("deterministic", "forward_pass", "backward_pass", "thorough_mode_forward", "thorough_mode_backward")
_INT_FIELDS = ("warmup_steps_forward", "warmup_steps_backward", "steps_forward", "steps_backward", "top_k")

# The backward op reads this when autograd runs it, without a library call (so it also holds
# inside torch.compile's traced backward); configure() keeps it in step with the library.
_deterministic = os.environ.get("ATTNKIT_DETERMINISTIC", "0").lower() not in ("", "0", "false", "off", "no")
# The rank group in force and the ctypes objects its callbacks live in (they must outlive it).
_active_group = None


def _mode(value) -> str:
    """The canonical name of a mode given as any accepted spelling; ValueError otherwise."""
    name = _MODE_ALIASES.get(value, value) if isinstance(value, str) else value
    if name not in _MODES:
        raise ValueError(f"mode: {value!r}; allowed: {_MODE_SPELLINGS}")
    return name


def _fn(name: str):
    lib = _capi.load_library()
    return lib, _capi.optional_function(lib, name)


def available() -> bool:
    """Whether the loaded library exports the tuner's C API."""
    lib = _capi.load_library()
    return _capi.has_function(lib, "attnkit_tuner_configure")


def deterministic_backward() -> bool:
    return _deterministic


def settings() -> Dict[str, Any]:
    """The settings in force, as a dict of configure()'s keywords."""
    lib, get = _fn("attnkit_tuner_get_settings")
    raw = _capi.TunerSettings()
    _capi.check(get(ctypes.byref(raw)), lib)
    result = {"mode": _MODE_NAMES.get(raw.mode, raw.mode)}
    for name in _BOOL_FIELDS:
        result[name] = bool(getattr(raw, name))
    for name in _INT_FIELDS:
        result[name] = int(getattr(raw, name))
    result["cache_dir"] = (raw.cache_dir or b"").decode("utf-8", "replace")
    return result


def configure(*, mode: Optional[str] = None, deterministic: Optional[bool] = None,
              forward_pass: Optional[bool] = None, backward_pass: Optional[bool] = None,
              thorough_mode_forward: Optional[bool] = None, thorough_mode_backward: Optional[bool] = None,
              warmup_steps_forward: Optional[int] = None, warmup_steps_backward: Optional[int] = None,
              steps_forward: Optional[int] = None, steps_backward: Optional[int] = None,
              top_k: Optional[int] = None, cache_dir: Union[str, os.PathLike[str], None] = None) -> Dict[str, Any]:
    """Change the given settings (None keeps a setting as it is) for every later call in this
    process; returns the settings now in force. cache_dir "" keeps the cache in memory only."""
    global _deterministic
    changes = dict(mode=mode, deterministic=deterministic, forward_pass=forward_pass, backward_pass=backward_pass,
                   thorough_mode_forward=thorough_mode_forward, thorough_mode_backward=thorough_mode_backward,
                   warmup_steps_forward=warmup_steps_forward, warmup_steps_backward=warmup_steps_backward,
                   steps_forward=steps_forward, steps_backward=steps_backward, top_k=top_k, cache_dir=cache_dir)
    current = settings()
    for name, value in changes.items():
        if value is None:
            continue
        if name == "mode":
            value = _mode(value)
        if name in _BOOL_FIELDS and not isinstance(value, bool):
            raise TypeError(f"{name}: {value!r}; allowed: True or False")
        if name in _INT_FIELDS and (isinstance(value, bool) or not isinstance(value, int)):
            raise TypeError(f"{name}: {value!r}; allowed: an int")
        if name == "cache_dir" and not isinstance(value, (str, os.PathLike)):
            raise TypeError(f"cache_dir: {value!r}; allowed: a path, or '' for memory only")
        current[name] = value
    raw = _capi.TunerSettings()
    raw.mode = _MODES[current["mode"]] if isinstance(current["mode"], str) else int(current["mode"])
    for name in _BOOL_FIELDS:
        setattr(raw, name, 1 if current[name] else 0)
    for name in _INT_FIELDS:
        setattr(raw, name, int(current[name]))
    cache_dir_bytes = os.fsencode(current["cache_dir"])
    raw.cache_dir = cache_dir_bytes
    lib, set_settings = _fn("attnkit_tuner_configure")
    _capi.check(set_settings(ctypes.byref(raw)), lib)
    _deterministic = bool(current["deterministic"])
    return settings()


def use_autotuner(forward_pass: bool = False, backward_pass: bool = False, thorough_mode_forward: bool = False,
                  thorough_mode_backward: bool = False, warmup_steps_forward: int = 5,
                  warmup_steps_backward: int = 5, steps_forward: int = 20,
                  steps_backward: int = 20) -> Dict[str, Any]:
    """NATTEN's spelling: tune forward and/or backward passes on their first call with each
    problem; with neither, cached or default configs are used without benchmarking."""
    tuning = forward_pass or backward_pass
    return configure(mode="on" if tuning else "load-only", forward_pass=forward_pass, backward_pass=backward_pass,
                     thorough_mode_forward=thorough_mode_forward, thorough_mode_backward=thorough_mode_backward,
                     warmup_steps_forward=warmup_steps_forward, warmup_steps_backward=warmup_steps_backward,
                     steps_forward=steps_forward, steps_backward=steps_backward)


def disable_autotuner() -> Dict[str, Any]:
    """NATTEN's spelling: default configs only, nothing benchmarked, the cache not read."""
    return configure(mode="off", forward_pass=False, backward_pass=False)


class _RankGroupBinding:
    """An attnkit_rank_group whose callbacks run torch.distributed collectives on `group`."""

    def __init__(self, group, agreement: int):
        import torch.distributed as dist

        self.dist = dist
        self.group = group
        self.lib, self.bytes_append = _fn("attnkit_bytes_append")
        self.rank = dist.get_rank(group)
        self.size = dist.get_world_size(group)
        self.last_error: Optional[BaseException] = None
        # The CFUNCTYPE objects are attributes, so they live as long as this binding.
        self.broadcast_fn = _capi.BroadcastFn(self._broadcast)
        self.all_gather_fn = _capi.AllGatherFn(self._all_gather)
        self.raw = _capi.RankGroup()
        self.raw.rank = self.rank
        self.raw.size = self.size
        self.raw.agreement = agreement
        self.raw.context = None
        self.raw.broadcast = self.broadcast_fn
        self.raw.all_gather = self.all_gather_fn

    def _global_rank(self, group_rank: int) -> int:
        if self.group is None:
            return group_rank
        return self.dist.get_global_rank(self.group, group_rank)

    def _broadcast(self, context, data, size, root, result) -> int:
        try:
            payload = ctypes.string_at(data, size) if size > 0 else b""
            objects: List[Any] = [payload if self.rank == root else None]
            self.dist.broadcast_object_list(objects, src=self._global_rank(root), group=self.group)
            received = objects[0]
            self.bytes_append(result, received, len(received))
            return 0
        except BaseException as error:  # an exception must not unwind through C frames
            self.last_error = error
            return 1

    def _all_gather(self, context, data, size, results) -> int:
        try:
            payload = ctypes.string_at(data, size) if size > 0 else b""
            gathered: List[Any] = [None] * self.size
            self.dist.all_gather_object(gathered, payload, group=self.group)
            for rank, received in enumerate(gathered):
                self.bytes_append(results[rank], received, len(received))
            return 0
        except BaseException as error:
            self.last_error = error
            return 1


def sync(group: Optional[ProcessGroup] = None, agreement: str = "root_tunes") -> None:
    """Make every later tuning decision agree across the ranks of a torch.distributed group
    (default: the world). Every rank must call sync() and then make the same attnkit calls in the
    same order. agreement: "root_tunes" (rank 0 tunes and broadcasts the winner) or
    "split_configs" (ranks time disjoint configs and all-gather the timings)."""
    global _active_group
    import torch.distributed as dist

    if agreement not in _AGREEMENTS:
        raise ValueError(f"agreement: {agreement!r}; allowed: 'root_tunes', 'split_configs'")
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("attnkit.tuner.sync: torch.distributed is not initialized; call "
                           "torch.distributed.init_process_group first")
    binding = _RankGroupBinding(group, _AGREEMENTS[agreement])
    lib, set_group = _fn("attnkit_tuner_set_rank_group")
    _capi.check(set_group(ctypes.byref(binding.raw)), lib)
    _active_group = binding


def unsync() -> None:
    """This process decides alone again."""
    global _active_group
    lib, set_group = _fn("attnkit_tuner_set_rank_group")
    _capi.check(set_group(None), lib)
    _active_group = None


def forward_config(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, is_causal: bool = False,
                   kernel_size: Union[int, Sequence[int], None] = None, dilation: Union[int, Sequence[int]] = 1,
                   stride: Union[int, Sequence[int]] = 1, scale: Optional[float] = None) -> Tuple[str, str]:
    """(name, source) of the config a forward attention call with these tensors runs with —
    dense/causal, or neighborhood when kernel_size is given — tuning first when the settings
    allow it. source is "default", "cache" or "tuned"."""
    import torch

    from . import _attention_ops, _launch, _mask_spec

    if kernel_size is None:
        spec = _mask_spec.dense(is_causal)
    else:
        spec = _mask_spec.neighborhood(q.dim() - 3, kernel_size, dilation, stride, is_causal)
    lib, pick = _fn("attnkit_attention_forward_config")
    device = _launch.check_device(lib, q, k, v)
    q, k, v = (_launch.contiguous_last(t) for t in (q, k, v))  # type: ignore[assignment]  # never None here
    out = torch.empty(q.shape[:-1] + v.shape[-1:], dtype=q.dtype, device=device)
    lse = torch.empty(q.shape[:-1], dtype=torch.float32, device=device)
    args = _capi.AttentionForwardArgs()
    lib.attnkit_attention_forward_args_init(ctypes.byref(args))
    args.q, args.k, args.v = _launch.view(q), _launch.view(k), _launch.view(v)
    args.out, args.lse = _launch.view(out), _launch.view(lse)
    if scale is not None:
        args.has_scale, args.scale = 1, float(scale)
    _attention_ops.fill_mask(args.mask, *spec.op_args())
    name = ctypes.create_string_buffer(256)
    source = ctypes.create_string_buffer(32)
    with _launch.device_guard(device):
        options = _launch.run_options(lib, device)
        status = pick(ctypes.byref(args), ctypes.byref(options), name, len(name), source, len(source))
    if status != _capi.ATTNKIT_OK and _active_group is not None and _active_group.last_error is not None:
        error, _active_group.last_error = _active_group.last_error, None
        raise RuntimeError(f"attnkit.tuner: a torch.distributed collective failed: {error!r}") from error
    _capi.check(status, lib)
    return name.value.decode(), source.value.decode()
