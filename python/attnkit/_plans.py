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

import torch

from . import _capi
from . import _launch

_MAX_PLANS = 2048
_VoidPtr = ctypes.c_void_p

_run_fn = None


class Plan:
    """A library plan handle with its workspace size; destroyed with the object."""

    __slots__ = ("handle", "workspace_bytes", "count", "pointer_array", "_destroy")

    def __init__(self, lib, handle: ctypes.c_void_p, count: int):
        self.handle = handle
        self.count = count
        self.pointer_array = _VoidPtr * count
        self._destroy = lib.attnkit_plan_destroy
        size = ctypes.c_int64(0)
        _capi.check(lib.attnkit_plan_workspace_size(handle, ctypes.byref(size)), lib)
        self.workspace_bytes = size.value

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
    return Plan(lib, handle, count)


def run(plan: Plan, pointers, device: torch.device) -> None:
    """Runs `plan` on tensors given by their data pointers (None for absent ones), on the device's current
    stream, with a workspace from PyTorch's allocator when the plan needs one."""
    global _run_fn
    if _run_fn is None:
        _run_fn = _launch.library().attnkit_plan_run
    data = plan.pointer_array(*pointers)
    workspace = None
    if plan.workspace_bytes:
        # The caching allocator keeps stream order: freed after the enqueue, reused only after it ran.
        workspace = torch.empty(plan.workspace_bytes, dtype=torch.uint8, device=device)
    status = _run_fn(plan.handle, data, plan.count, _launch.stream_of(device),
                     workspace.data_ptr() if workspace is not None else None, plan.workspace_bytes)
    if status:
        _capi.check(status, _launch.library())
