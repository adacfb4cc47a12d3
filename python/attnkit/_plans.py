"""The per-call fast path: library plans (attnkit_plan, see attnkit.h) cached by call shape.

A plan is made once per call shape through the full argument structs (validation, backend and kernel
choice happen then, in the library); every later call with the same shape builds a small key tuple,
finds the plan in a dict and hands the library only data pointers, the stream and a workspace from
PyTorch's caching allocator. The key holds what the library's own plan key holds: every tensor's
shape, strides, dtype, device and address alignment (mod 16), the mask, the scale, and whether tuning
is allowed (torch.use_deterministic_algorithms forbids it). Outputs are allocated here, contiguous,
so their shapes follow from the inputs.

The library refreshes a plan itself when the tuner's settings change, so the dict never goes stale.
"""

from __future__ import annotations

import ctypes
import struct

import torch

from . import _capi
from . import _launch

_MAX_PLANS = 2048
_VoidPtr = ctypes.c_void_p

# attnkit_plan_run as run() calls it (_run_function), made on the first run: without argtypes, which cost a
# conversion call per argument, so run() passes each argument as the C type it is (ctypes objects, None for
# NULL, a Python int for the int32_t count).
_run_fn = None
_current_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


class Plan:
    """A library plan handle with its workspace size; destroyed with the object."""

    __slots__ = ("handle", "workspace_bytes", "workspace_size", "count", "pointer_array", "pack", "cuda",
                 "reuse_workspace", "_destroy")

    def __init__(self, lib, handle: ctypes.c_void_p, count: int, device: torch.device | None = None):
        self.handle = handle
        self.count = count
        self.pointer_array = _VoidPtr * count
        # The pointer array as native pointers in a bytes object: a few times cheaper to build than a
        # ctypes array (the library only reads it); run() falls back to pointer_array for None entries.
        self.pack = struct.Struct(f"@{count}P").pack
        # Whether runs need the device's current stream (a CUDA plan: its key holds the device).
        self.cuda = device is not None and device.type == "cuda"
        # Whether runs take the stream's kept workspace (_stream_arguments) instead of a new one per call.
        self.reuse_workspace = False
        self._destroy = lib.attnkit_plan_destroy
        size = ctypes.c_int64(0)
        _capi.check(lib.attnkit_plan_workspace_size(handle, ctypes.byref(size)), lib)
        self.workspace_bytes = size.value
        self.workspace_size = size  # the int64_t argument of attnkit_plan_run (never changed)

    def __del__(self):
        if self.handle:
            self._destroy(self.handle)
            self.handle = None


class PlanCache(dict):
    """Plans by key; starts over when full (making a plan again costs one slow call)."""

    def put(self, key, plan: Plan) -> None:
        if len(self) >= _MAX_PLANS:
            self.clear()
        self[key] = plan


def pointer(t) -> int:
    """t's data pointer for run(); 0 (NULL) for an absent tensor."""
    return 0 if t is None else t.data_ptr()


def tensor_key(t):
    """What the library's plan key takes from a tensor (None for an absent one)."""
    if t is None:
        return None
    return (t.shape, t.stride(), t.dtype, t.device, t.data_ptr() & 15)


def make(lib, create, args, device: torch.device, no_tuning: bool, count: int) -> Plan:
    """A new plan from filled argument structs (`create` is attnkit_attention_*_plan)."""
    options = _capi.run_options(lib)
    handle = ctypes.c_void_p()
    flags = _capi.ATTNKIT_PLAN_NO_TUNING if no_tuning else 0
    with _launch.device_guard(device):
        _capi.check(create(ctypes.byref(args), ctypes.byref(options), flags, ctypes.byref(handle)), lib)
    return Plan(lib, handle, count, device)


# Workspaces kept per (device index, stream) for plans with reuse_workspace (gemm's split-K partial sums, stream-K
# barriers, staged operands): runs enqueued on one stream execute in order, so one buffer serves every such run
# there, and an allocation per call (some microseconds of host time, a GEMM's kernel time at small sizes) is saved.
# The library also keeps its launch parameters per workspace address, so a steady address lets it skip even the
# patching of its TMA descriptors. Not under CUDA graph capture: a graph would keep the address of a buffer that a
# larger workspace later replaces (then freed and handed out again), so capture takes a new workspace from the
# graph's pool per call, as before. Each buffer is as large as the largest workspace asked for on its stream, at
# most _MAX_KEPT_WORKSPACE (larger ones are allocated per call); clear_workspaces() lets them go.
_MAX_KEPT_WORKSPACE = 64 << 20
_stream_capturing = getattr(torch._C, "_cuda_isCurrentStreamCapturing", None)
_current_device = getattr(torch._C, "_cuda_getDevice", None)


class KeptWorkspace:
    """A kept workspace with the run arguments that point at it: the stream and the buffer as the C pointers
    attnkit_plan_run takes, made once so that a run on it builds no ctypes object."""

    __slots__ = ("tensor", "stream", "pointer")

    def __init__(self, tensor: torch.Tensor, stream: int):
        self.tensor = tensor
        self.stream = _VoidPtr(stream)
        self.pointer = _VoidPtr(tensor.data_ptr())


_kept_workspaces = {}  # (device index, stream) -> KeptWorkspace


def clear_workspaces() -> None:
    """Drops the workspaces kept for reuse (the caching allocator frees them in stream order)."""
    _kept_workspaces.clear()


def _stream_arguments(bytes_needed: int, device: torch.device, stream: int):
    """(stream, workspace) as attnkit_plan_run's C pointers for a run on `stream` with the stream's kept workspace, of
    at least bytes_needed bytes (made or grown here); the workspace None where none may be kept (capture, a device other
    than the current one, whose capture state torch does not tell, or a size beyond the limit): the caller allocates
    one then."""
    if (bytes_needed > _MAX_KEPT_WORKSPACE or _stream_capturing is None or _current_device is None
            or _current_device() != device.index or _stream_capturing()):
        return _VoidPtr(stream), None
    key = (device.index, stream)
    kept = _kept_workspaces.get(key)
    if kept is None or kept.tensor.numel() < bytes_needed:
        kept = KeptWorkspace(torch.empty(bytes_needed, dtype=torch.uint8, device=device), stream)
        _kept_workspaces[key] = kept
    return kept.stream, kept.pointer


def _run_function():
    """attnkit_plan_run without argtypes (a function object of its own: the library's prototype stays as _capi
    declares it)."""
    global _run_fn
    lib = _launch.library()
    fn = lib["attnkit_plan_run"]
    fn.restype = lib.attnkit_plan_run.restype
    _run_fn = fn
    return fn


def run(plan: Plan, pointers, device: torch.device) -> None:
    """Runs `plan` on tensors given by their data pointers (0 or None for absent ones), on the device's current
    stream, with a workspace from PyTorch's allocator when the plan needs one."""
    run_fn = _run_fn
    if run_fn is None:
        run_fn = _run_function()
    try:
        data = plan.pack(*pointers)
    except struct.error:  # a None entry, or fewer pointers than the plan takes (the rest are NULL)
        data = plan.pointer_array(*pointers)
    workspace = workspace_pointer = None
    if plan.cuda:
        raw_stream = (_current_raw_stream(device.index) if _current_raw_stream is not None
                      else _launch.stream_of(device))
        if plan.reuse_workspace and plan.workspace_bytes:
            stream, workspace_pointer = _stream_arguments(plan.workspace_bytes, device, raw_stream or 0)
        else:
            stream = _VoidPtr(raw_stream)
    else:
        stream = None
    if plan.workspace_bytes and workspace_pointer is None:
        # The caching allocator keeps stream order: freed after the enqueue, reused only after it ran.
        workspace = torch.empty(plan.workspace_bytes, dtype=torch.uint8, device=device)
        workspace_pointer = _VoidPtr(workspace.data_ptr())
    status = run_fn(plan.handle, data, plan.count, stream, workspace_pointer, plan.workspace_size)
    if status:
        _capi.check(status, _launch.library())
