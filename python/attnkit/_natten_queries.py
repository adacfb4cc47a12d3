"""NATTEN's feature queries and global switches, so that programs written for NATTEN keep running when they
import attnkit in its place (attnkit and attnkit.natten017 export them).

Queries answer for attnkit: has_cuda() is true when this library was built with its CUDA backend and torch
sees a GPU of compute capability 8.0 or newer (what attnkit's kernels need); has_half() / has_bfloat() say
whether float16 / bfloat16 run on that device (always on the CPU); has_fna() / has_fused_na() whether fused
neighborhood attention runs there (attnkit's only kind). has_gemm() and its precision variants are false:
attnkit has no GEMM-based (unfused) neighborhood kernels, so a program that asks before choosing them takes
the fused path.

Switches of NATTEN's own kernel choice (use_fused_na, use_gemm_na, use_tiled_na, use_tf32_in_gemm_na, their
enable_/disable_ spellings) change which NATTEN kernels run, not results: attnkit records them for the
is_*_enabled() queries and picks its kernels itself (attnkit.tuner). Two switches do reach attnkit's backward,
whose KV-parallel splitting (several CTAs share a KV tile's dK/dV work, partials summed in a fixed order) is
NATTEN's KV parallelism: use_kv_parallelism_in_fused_na(False) (or use_fused_na(kv_parallel=False)) turns it
off, True (attnkit's default) lets the backward split where the cost model gains; set_memory_usage_preference
bounds its workspace: "default" 64 MiB, "strict" none (never split), "unrestricted" no bound. The CPU backend
ignores both. use_autotuner / disable_autotuner are attnkit.tuner's (same keywords as NATTEN's).
"""

from __future__ import annotations

from typing import Optional

import torch

from . import _capi, tuner

__all__ = [
    "has_cuda", "has_half", "has_bfloat", "has_fna", "has_fused_na", "has_gemm", "has_tf32_gemm", "has_fp32_gemm",
    "has_fp64_gemm", "use_fused_na", "is_fused_na_enabled", "use_kv_parallelism_in_fused_na",
    "is_kv_parallelism_in_fused_na_enabled", "use_gemm_na", "enable_gemm_na", "disable_gemm_na", "is_gemm_na_enabled",
    "use_tiled_na", "enable_tiled_na", "disable_tiled_na", "is_tiled_na_enabled", "use_tf32_in_gemm_na",
    "enable_tf32", "disable_tf32", "is_tf32_in_gemm_na_enabled", "set_memory_usage_preference",
    "get_memory_usage_preference", "are_deterministic_algorithms_enabled", "use_autotuner", "disable_autotuner",
]

_MEMORY_PREFERENCES = ("default", "strict", "unrestricted")
_switches = {"fused_na": True, "kv_parallel": True, "gemm_na": True, "tiled_na": True, "tf32": True,
             "memory": "default"}
# attnkit_attention_backward_args.split_workspace_limit per memory preference (-1: the library's 64 MiB bound).
_SPLIT_WORKSPACE_LIMITS = {"default": -1, "strict": 0, "unrestricted": 1 << 62}


def backward_split_settings() -> tuple:
    """(kv_splits, split_workspace_limit) of the backward plans: 0 (automatic) within the memory preference's
    bound, or 1 (never) with KV parallelism off."""
    if not _switches["kv_parallel"]:
        return 1, -1
    return 0, _SPLIT_WORKSPACE_LIMITS[_switches["memory"]]


def _backward_settings_changed() -> None:
    from . import _attention_ops  # the plans made with the old settings

    _attention_ops.forget_backward_plans()


def _cuda_device(index: Optional[int]) -> Optional[int]:
    """The CUDA device a query is about, or None when attnkit cannot run there."""
    if not torch.cuda.is_available() or not _capi.load_library().attnkit_cuda_compiled():
        return None
    device = torch.cuda.current_device() if index is None or index < 0 else index
    major, _ = torch.cuda.get_device_capability(device)
    return device if major >= 8 else None


def has_cuda() -> bool:
    return _cuda_device(None) is not None


def has_half(device_index: Optional[int] = None) -> bool:
    return not torch.cuda.is_available() or _cuda_device(device_index) is not None


def has_bfloat(device_index: Optional[int] = None) -> bool:
    return has_half(device_index)


def has_fna(device_index: Optional[int] = None) -> bool:
    return _cuda_device(device_index) is not None


has_fused_na = has_fna


def has_gemm(device_index: Optional[int] = None) -> bool:
    return False


has_tf32_gemm = has_fp32_gemm = has_fp64_gemm = has_gemm


def use_fused_na(mode: bool = True, kv_parallel: bool = True, use_flex_attention: bool = False) -> None:
    _switches["fused_na"] = bool(mode)
    use_kv_parallelism_in_fused_na(bool(kv_parallel))


def is_fused_na_enabled() -> bool:
    return _switches["fused_na"]


def use_kv_parallelism_in_fused_na(mode: bool = True) -> None:
    _switches["kv_parallel"] = bool(mode)
    _backward_settings_changed()


def is_kv_parallelism_in_fused_na_enabled() -> bool:
    return _switches["kv_parallel"]


def _switch(key: str, use_name: str, enable_name: str, disable_name: str, query_name: str):
    """NATTEN's use_X(mode) / enable_X() / disable_X() / is_X_enabled() for one recorded switch."""

    def use(mode: bool = True) -> None:
        _switches[key] = bool(mode)

    def enable() -> None:
        use(True)

    def disable() -> None:
        use(False)

    def enabled() -> bool:
        return _switches[key]

    for function, name in ((use, use_name), (enable, enable_name), (disable, disable_name), (enabled, query_name)):
        function.__name__ = function.__qualname__ = name
    return use, enable, disable, enabled


use_gemm_na, enable_gemm_na, disable_gemm_na, is_gemm_na_enabled = _switch(
    "gemm_na", "use_gemm_na", "enable_gemm_na", "disable_gemm_na", "is_gemm_na_enabled")
use_tiled_na, enable_tiled_na, disable_tiled_na, is_tiled_na_enabled = _switch(
    "tiled_na", "use_tiled_na", "enable_tiled_na", "disable_tiled_na", "is_tiled_na_enabled")
use_tf32_in_gemm_na, enable_tf32, disable_tf32, is_tf32_in_gemm_na_enabled = _switch(
    "tf32", "use_tf32_in_gemm_na", "enable_tf32", "disable_tf32", "is_tf32_in_gemm_na_enabled")


def set_memory_usage_preference(pref: str = "default") -> None:
    if pref not in _MEMORY_PREFERENCES:
        raise ValueError(f"pref: {pref!r}; allowed: {', '.join(map(repr, _MEMORY_PREFERENCES))} (NATTEN's choices)")
    _switches["memory"] = pref
    _backward_settings_changed()


def get_memory_usage_preference() -> str:
    return _switches["memory"]


def are_deterministic_algorithms_enabled() -> bool:
    return torch.are_deterministic_algorithms_enabled() or tuner.deterministic_backward()


use_autotuner = tuner.use_autotuner
disable_autotuner = tuner.disable_autotuner
