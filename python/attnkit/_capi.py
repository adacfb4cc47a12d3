"""ctypes binding of attnkit's C ABI (include/attnkit/attnkit.h).

The structs below mirror the header field for field, in the same order and with the same C types,
so ctypes lays them out exactly as the C compiler does. Enum values are plain ints named as in the
header. `load_library()` finds libattnkit.so, declares every function's argument and result types,
and refuses a library whose attnkit_abi_version() differs from ATTNKIT_ABI_VERSION (a struct layout
changed, so passing these structs would corrupt memory).

Nothing here imports torch at module import time: `tensor_view()` imports it when called.
"""

from __future__ import annotations

import ctypes
import glob
import os
import threading
from pathlib import Path

# ---------------------------------------------------------------------------------------------
# Constants and enums (values as in attnkit.h)

ATTNKIT_ABI_VERSION = 5
ATTNKIT_MAX_RANK = 8
ATTNKIT_MAX_TOKEN_DIMS = 3

# attnkit_status
ATTNKIT_OK = 0
ATTNKIT_INVALID_ARGUMENT = 1
ATTNKIT_UNSUPPORTED = 2
ATTNKIT_CUDA_ERROR = 3
ATTNKIT_OUT_OF_MEMORY = 4
ATTNKIT_INTERNAL = 5

# attnkit_dtype
ATTNKIT_FLOAT32 = 0
ATTNKIT_FLOAT16 = 1
ATTNKIT_BFLOAT16 = 2
ATTNKIT_FLOAT64 = 3
ATTNKIT_BOOL = 4

# attnkit_device_type
ATTNKIT_DEVICE_CPU = 0
ATTNKIT_DEVICE_CUDA = 1

# attnkit_backend
ATTNKIT_BACKEND_AUTO = 0
ATTNKIT_BACKEND_CPU = 1
ATTNKIT_BACKEND_CUDA = 2

# attnkit_mask_kind
ATTNKIT_MASK_NONE = 0
ATTNKIT_MASK_CAUSAL = 1
ATTNKIT_MASK_NEIGHBORHOOD = 2
ATTNKIT_MASK_BLOCK = 3
ATTNKIT_MASK_ELEMENT = 4

# attnkit_element_mask_path
ATTNKIT_ELEMENT_PATH_AUTOMATIC = 0
ATTNKIT_ELEMENT_PATH_TILES = 1
ATTNKIT_ELEMENT_PATH_SCATTERED = 2

# attnkit_causal_alignment
ATTNKIT_CAUSAL_TOP_LEFT = 0
ATTNKIT_CAUSAL_BOTTOM_RIGHT = 1

# attnkit_retention_mode
ATTNKIT_RETENTION_PARALLEL = 0
ATTNKIT_RETENTION_CHUNKWISE = 1
ATTNKIT_RETENTION_RECURRENT = 2

# attnkit_tune_mode
ATTNKIT_TUNE_OFF = 0
ATTNKIT_TUNE_ON = 1
ATTNKIT_TUNE_LOAD_ONLY = 2

# attnkit_agreement
ATTNKIT_AGREE_ROOT_TUNES = 0
ATTNKIT_AGREE_SPLIT_CONFIGS = 1

# flags of attnkit_attention_*_plan
ATTNKIT_PLAN_NO_TUNING = 1

_STATUS_NAMES = {
    ATTNKIT_OK: "ATTNKIT_OK",
    ATTNKIT_INVALID_ARGUMENT: "ATTNKIT_INVALID_ARGUMENT",
    ATTNKIT_UNSUPPORTED: "ATTNKIT_UNSUPPORTED",
    ATTNKIT_CUDA_ERROR: "ATTNKIT_CUDA_ERROR",
    ATTNKIT_OUT_OF_MEMORY: "ATTNKIT_OUT_OF_MEMORY",
    ATTNKIT_INTERNAL: "ATTNKIT_INTERNAL",
}

# ---------------------------------------------------------------------------------------------
# Structs (field order and types exactly as in attnkit.h)

_i32 = ctypes.c_int32
_i64 = ctypes.c_int64
_f64 = ctypes.c_double
_ptr = ctypes.c_void_p


class Tensor(ctypes.Structure):
    """attnkit_tensor: a non-owning strided view; data == NULL marks an absent optional tensor."""

    _fields_ = [
        ("data", _ptr),
        ("dtype", _i32),
        ("device_type", _i32),
        ("device_index", _i32),
        ("rank", _i32),
        ("extents", _i64 * ATTNKIT_MAX_RANK),
        ("strides", _i64 * ATTNKIT_MAX_RANK),
    ]


class RunOptions(ctypes.Structure):
    """attnkit_run_options."""

    _fields_ = [
        ("backend", _i32),
        ("num_threads", _i32),
        ("stream", _ptr),
        ("workspace", _ptr),
        ("workspace_bytes", _i64),
    ]


class NeighborhoodDim(ctypes.Structure):
    """attnkit_neighborhood_dim."""

    _fields_ = [
        ("kernel_size", _i64),
        ("dilation", _i64),
        ("stride", _i64),
        ("causal", _i32),
        ("reserved", _i32),
    ]


class AttentionMask(ctypes.Structure):
    """attnkit_attention_mask."""

    _fields_ = [
        ("kind", _i32),
        ("causal_alignment", _i32),
        ("dims", _i32),
        ("element_path", _i32),
        ("neighborhood", NeighborhoodDim * ATTNKIT_MAX_TOKEN_DIMS),
        ("block_mask", Tensor),
        ("block_q", _i64),
        ("block_k", _i64),
        ("element_mask", Tensor),
        ("rpb", Tensor),
    ]


class AttentionForwardArgs(ctypes.Structure):
    """attnkit_attention_forward_args."""

    _fields_ = [
        ("q", Tensor),
        ("k", Tensor),
        ("v", Tensor),
        ("out", Tensor),
        ("lse", Tensor),
        ("has_scale", _i32),
        ("reserved", _i32),
        ("scale", _f64),
        ("mask", AttentionMask),
    ]


class AttentionBackwardArgs(ctypes.Structure):
    """attnkit_attention_backward_args."""

    _fields_ = [
        ("q", Tensor),
        ("k", Tensor),
        ("v", Tensor),
        ("out", Tensor),
        ("lse", Tensor),
        ("grad_out", Tensor),
        ("grad_q", Tensor),
        ("grad_k", Tensor),
        ("grad_v", Tensor),
        ("has_scale", _i32),
        ("deterministic", _i32),
        ("scale", _f64),
        ("mask", AttentionMask),
        ("kv_splits", _i32),
        ("reserved", _i32),
        ("split_workspace_limit", _i64),
        ("grad_rpb", Tensor),
    ]


class RetentionForwardArgs(ctypes.Structure):
    """attnkit_retention_forward_args."""

    _fields_ = [
        ("q", Tensor),
        ("k", Tensor),
        ("v", Tensor),
        ("out", Tensor),
        ("initial_state", Tensor),
        ("final_state", Tensor),
        ("gamma", ctypes.POINTER(_f64)),
        ("gamma_count", _i64),
        ("mode", _i32),
        ("normalize", _i32),
        ("chunk_size", _i64),
        ("has_scale", _i32),
        ("reserved", _i32),
        ("scale", _f64),
        ("decay", Tensor),
    ]


class RetentionBackwardArgs(ctypes.Structure):
    """attnkit_retention_backward_args."""

    _fields_ = [
        ("q", Tensor),
        ("k", Tensor),
        ("v", Tensor),
        ("grad_out", Tensor),
        ("initial_state", Tensor),
        ("grad_final_state", Tensor),
        ("grad_q", Tensor),
        ("grad_k", Tensor),
        ("grad_v", Tensor),
        ("grad_initial_state", Tensor),
        ("gamma", ctypes.POINTER(_f64)),
        ("gamma_count", _i64),
        ("mode", _i32),
        ("normalize", _i32),
        ("chunk_size", _i64),
        ("has_scale", _i32),
        ("reserved", _i32),
        ("scale", _f64),
        ("decay", Tensor),
    ]


class GemmArgs(ctypes.Structure):
    """attnkit_gemm_args."""

    _fields_ = [
        ("a", Tensor),
        ("b", Tensor),
        ("c", Tensor),
        ("transpose_a", _i32),
        ("transpose_b", _i32),
        ("alpha", _f64),
        ("beta", _f64),
        ("allow_tf32", _i32),
        ("reserved", _i32),
    ]


class TunerSettings(ctypes.Structure):
    """attnkit_tuner_settings (names follow NATTEN's use_autotuner())."""

    _fields_ = [
        ("mode", _i32),
        ("deterministic", _i32),
        ("forward_pass", _i32),
        ("backward_pass", _i32),
        ("thorough_mode_forward", _i32),
        ("thorough_mode_backward", _i32),
        ("warmup_steps_forward", _i32),
        ("warmup_steps_backward", _i32),
        ("steps_forward", _i32),
        ("steps_backward", _i32),
        ("top_k", _i32),
        ("reserved", _i32),
        ("cache_dir", ctypes.c_char_p),
    ]


# attnkit_bytes is opaque: callbacks only pass its handle back to attnkit_bytes_append.
BytesHandle = ctypes.c_void_p

# int32_t (*)(void* context, const char* data, int64_t size, int32_t root, attnkit_bytes* result)
BroadcastFn = ctypes.CFUNCTYPE(_i32, _ptr, _ptr, _i64, _i32, BytesHandle)
# int32_t (*)(void* context, const char* data, int64_t size, attnkit_bytes** results)
AllGatherFn = ctypes.CFUNCTYPE(_i32, _ptr, _ptr, _i64, ctypes.POINTER(BytesHandle))


class RankGroup(ctypes.Structure):
    """attnkit_rank_group: collectives of a multi-process job for tuner agreement."""

    _fields_ = [
        ("rank", _i32),
        ("size", _i32),
        ("agreement", _i32),
        ("reserved", _i32),
        ("context", _ptr),
        ("broadcast", BroadcastFn),
        ("all_gather", AllGatherFn),
    ]


# ---------------------------------------------------------------------------------------------
# Function prototypes: name -> (restype, argtypes)

_status = ctypes.c_int  # a C enum return value is an int

_PROTOTYPES = {
    "attnkit_abi_version": (_i32, []),
    "attnkit_version": (ctypes.c_char_p, []),
    "attnkit_cuda_compiled": (_i32, []),
    "attnkit_cuda_device_count": (_i32, []),
    "attnkit_last_error": (ctypes.c_char_p, []),
    "attnkit_status_name": (ctypes.c_char_p, [_i32]),
    "attnkit_tensor_contiguous": (
        _status,
        [ctypes.POINTER(Tensor), _ptr, _i32, _i32, _i32, _i32, ctypes.POINTER(_i64)],
    ),
    "attnkit_run_options_init": (None, [ctypes.POINTER(RunOptions)]),
    "attnkit_attention_forward_args_init": (None, [ctypes.POINTER(AttentionForwardArgs)]),
    "attnkit_attention_backward_args_init": (None, [ctypes.POINTER(AttentionBackwardArgs)]),
    "attnkit_retention_forward_args_init": (None, [ctypes.POINTER(RetentionForwardArgs)]),
    "attnkit_retention_backward_args_init": (None, [ctypes.POINTER(RetentionBackwardArgs)]),
    "attnkit_gemm_args_init": (None, [ctypes.POINTER(GemmArgs)]),
    "attnkit_attention_forward": (
        _status,
        [ctypes.POINTER(AttentionForwardArgs), ctypes.POINTER(RunOptions)],
    ),
    "attnkit_attention_backward": (
        _status,
        [ctypes.POINTER(AttentionBackwardArgs), ctypes.POINTER(RunOptions)],
    ),
    "attnkit_retention_forward": (
        _status,
        [ctypes.POINTER(RetentionForwardArgs), ctypes.POINTER(RunOptions)],
    ),
    "attnkit_retention_backward": (
        _status,
        [ctypes.POINTER(RetentionBackwardArgs), ctypes.POINTER(RunOptions)],
    ),
    "attnkit_gemm": (_status, [ctypes.POINTER(GemmArgs), ctypes.POINTER(RunOptions)]),
    "attnkit_attention_forward_workspace_size": (
        _status,
        [ctypes.POINTER(AttentionForwardArgs), ctypes.POINTER(RunOptions), ctypes.POINTER(_i64)],
    ),
    "attnkit_attention_backward_workspace_size": (
        _status,
        [ctypes.POINTER(AttentionBackwardArgs), ctypes.POINTER(RunOptions), ctypes.POINTER(_i64)],
    ),
    "attnkit_attention_forward_plan": (
        _status,
        [ctypes.POINTER(AttentionForwardArgs), ctypes.POINTER(RunOptions), _i32, ctypes.POINTER(_ptr)],
    ),
    "attnkit_attention_backward_plan": (
        _status,
        [ctypes.POINTER(AttentionBackwardArgs), ctypes.POINTER(RunOptions), _i32, ctypes.POINTER(_ptr)],
    ),
    "attnkit_plan_workspace_size": (_status, [_ptr, ctypes.POINTER(_i64)]),
    "attnkit_plan_run": (_status, [_ptr, ctypes.POINTER(_ptr), _i32, _ptr, _ptr, _i64]),
    "attnkit_plan_destroy": (None, [_ptr]),
}

# Functions a library of this ABI may not export yet (the tuner's C API landed after the ops):
# they are looked up on first use by optional_function(), so the package imports without them.
_OPTIONAL_PROTOTYPES = {
    "attnkit_gemm_plan": (
        _status,
        [ctypes.POINTER(GemmArgs), ctypes.POINTER(RunOptions), _i32, ctypes.POINTER(_ptr)],
    ),
    "attnkit_retention_forward_plan": (
        _status,
        [ctypes.POINTER(RetentionForwardArgs), ctypes.POINTER(RunOptions), _i32, ctypes.POINTER(_ptr)],
    ),
    "attnkit_retention_backward_plan": (
        _status,
        [ctypes.POINTER(RetentionBackwardArgs), ctypes.POINTER(RunOptions), _i32, ctypes.POINTER(_ptr)],
    ),
    "attnkit_tuner_get_settings": (_status, [ctypes.POINTER(TunerSettings)]),
    "attnkit_tuner_configure": (_status, [ctypes.POINTER(TunerSettings)]),
    "attnkit_bytes_append": (None, [BytesHandle, ctypes.c_char_p, _i64]),
    "attnkit_tuner_set_rank_group": (_status, [ctypes.POINTER(RankGroup)]),
    "attnkit_attention_forward_config": (
        _status,
        [ctypes.POINTER(AttentionForwardArgs), ctypes.POINTER(RunOptions), ctypes.c_char_p, _i64,
         ctypes.c_char_p, _i64],
    ),
    "attnkit_attention_backward_config": (
        _status,
        [ctypes.POINTER(AttentionBackwardArgs), ctypes.POINTER(RunOptions), ctypes.c_char_p, _i64,
         ctypes.c_char_p, _i64],
    ),
}

# ---------------------------------------------------------------------------------------------
# Loading

_LIBRARY_NAME = "libattnkit.so"
_lock = threading.Lock()
_loaded: dict[str, ctypes.CDLL] = {}
_default: ctypes.CDLL | None = None


class LibraryNotFoundError(ImportError, RuntimeError):
    """No usable libattnkit.so: raised on first use, naming every place that was tried."""


def packaged_library_path() -> str:
    """Where `pip install .` puts the library: attnkit/lib/libattnkit.so inside the package."""
    return str(Path(__file__).resolve().parent / "lib" / _LIBRARY_NAME)


def checkout_build_paths() -> list[str]:
    """Run from a source checkout (PYTHONPATH=python): its build/*/libattnkit.so, newest first, so
    tools in the repository (bench/) find a fresh build without being told. Empty for an installed
    package."""
    root = Path(__file__).resolve().parent.parent.parent
    if not (root / "CMakeLists.txt").exists():
        return []
    builds = [p for p in glob.glob(str(root / "build" / "*" / _LIBRARY_NAME)) if os.path.exists(p)]
    return sorted(builds, key=os.path.getmtime, reverse=True)


def candidate_paths() -> list[str]:
    """Where load_library() looks when given no path: $ATTNKIT_LIBRARY alone when it is set (a library
    asked for by name is the one used, or an error: never silently another), else the copy installed
    inside the package, then (in a source checkout only) the newest build folder's."""
    env = os.environ.get("ATTNKIT_LIBRARY")
    if env:
        return [env]
    return [packaged_library_path(), *checkout_build_paths()]


def cuda_runtime_hint(tried: list[str]) -> str:
    """What to do when the loader did not find the CUDA runtime a CUDA build of libattnkit links: its wheels
    do not bundle libcudart (docs/python.md, "Wheels and variants"), they use the one PyTorch brings."""
    if not any("libcudart" in entry or "libcuda.so" in entry for entry in tried):
        return ""
    return (". This libattnkit was built with CUDA: it needs libcudart.so.<major> of the CUDA it was built with (a "
            "CUDA wheel of attnkit does not bundle it; the CUDA build of PyTorch brings it: attnkit's +cu130 wheel goes "
            "with torch's +cu130 wheels) and, for libcuda.so.1, an NVIDIA driver; install the matching torch or put "
            "that CUDA runtime on LD_LIBRARY_PATH, or install attnkit's +cpu variant")


def _declare(lib: ctypes.CDLL, path: str) -> None:
    missing = []
    for name, (restype, argtypes) in _PROTOTYPES.items():
        try:
            fn = getattr(lib, name)
        except AttributeError:
            missing.append(name)
            continue
        fn.restype = restype
        fn.argtypes = argtypes
    if missing:
        raise RuntimeError(
            f"{path} does not export {', '.join(missing)}: it is not an attnkit library of ABI "
            f"version {ATTNKIT_ABI_VERSION}; rebuild attnkit or point ATTNKIT_LIBRARY at a current build"
        )


def optional_function(lib: ctypes.CDLL, name: str):
    """A function of _OPTIONAL_PROTOTYPES, declared on first use; RuntimeError when the library
    does not export it (built from a source tree before that function existed)."""
    restype, argtypes = _OPTIONAL_PROTOTYPES[name]
    try:
        fn = getattr(lib, name)
    except AttributeError:
        raise RuntimeError(
            f"{library_path(lib)} does not export {name}: this libattnkit was built before that part "
            f"of the C ABI existed; rebuild it from the same source tree as this package"
        ) from None
    fn.restype = restype
    fn.argtypes = argtypes
    return fn


def has_function(lib: ctypes.CDLL, name: str) -> bool:
    return hasattr(lib, name)


def load_library(path: str | os.PathLike | None = None) -> ctypes.CDLL:
    """Load libattnkit.so and declare its functions.

    With no path: $ATTNKIT_LIBRARY, then attnkit/lib/libattnkit.so inside this package (put there
    by `pip install .`), then, only when run from a source checkout, the newest build/*/libattnkit.so
    there. Raises LibraryNotFoundError (an ImportError and a RuntimeError) when none
    is found or loadable, naming both places, and RuntimeError when the library's ABI version
    differs from this binding's. Loaded libraries are cached per resolved path; the first one
    loaded without a path becomes the default that later calls return.
    """
    global _default
    with _lock:
        if path is None and _default is not None:
            return _default
        candidates = [os.fspath(path)] if path is not None else candidate_paths()
        tried = []
        if path is None and not os.environ.get("ATTNKIT_LIBRARY"):
            tried.append("$ATTNKIT_LIBRARY (not set)")
        for candidate in candidates:
            if not os.path.exists(candidate):
                tried.append(f"{candidate} (absent)")
                continue
            resolved = os.path.realpath(candidate)
            lib = _loaded.get(resolved)
            if lib is None:
                try:
                    lib = ctypes.CDLL(resolved)
                except OSError as error:
                    tried.append(f"{candidate} ({error})")
                    continue
                _declare(lib, resolved)
                version = lib.attnkit_abi_version()
                if version != ATTNKIT_ABI_VERSION:
                    raise RuntimeError(
                        f"{resolved}: attnkit_abi_version() is {version} but this Python binding "
                        f"expects {ATTNKIT_ABI_VERSION}; rebuild attnkit from the same source tree as "
                        f"python/attnkit, or set ATTNKIT_LIBRARY to a matching libattnkit.so"
                    )
                lib._attnkit_path = resolved  # type: ignore[attr-defined]
                _loaded[resolved] = lib
            if path is None or _default is None:
                _default = lib
            return lib
        if path is None and os.environ.get("ATTNKIT_LIBRARY"):
            raise LibraryNotFoundError(
                f"attnkit: ATTNKIT_LIBRARY={os.environ['ATTNKIT_LIBRARY']} cannot be used: {'; '.join(tried)}; "
                "allowed: the path of a libattnkit.so built from this source tree, or unset ATTNKIT_LIBRARY to "
                "use the copy installed with the package" + cuda_runtime_hint(tried))
        raise LibraryNotFoundError(
            "attnkit: libattnkit.so not found or not loadable; tried: " + "; ".join(tried)
            + ". Install the package with `pip install .` from the attnkit repository (it builds and "
            "bundles the library), or build it (cmake --preset cpu && cmake --build --preset cpu) and "
            "set ATTNKIT_LIBRARY=/path/to/build/cpu/libattnkit.so" + cuda_runtime_hint(tried)
        )


def library_path(lib: ctypes.CDLL) -> str:
    return getattr(lib, "_attnkit_path", getattr(lib, "_name", "?"))


# ---------------------------------------------------------------------------------------------
# Errors


class AttnkitError(RuntimeError):
    """A failed call whose status is not ATTNKIT_INVALID_ARGUMENT; `.status` holds the code."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class AttnkitInvalidArgument(ValueError):
    """ATTNKIT_INVALID_ARGUMENT: the arguments were rejected before any memory was touched."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def status_name(status: int, lib: ctypes.CDLL | None = None) -> str:
    if lib is not None:
        name = lib.attnkit_status_name(int(status))
        if name:
            return name.decode("utf-8", "replace")
    return _STATUS_NAMES.get(int(status), f"status {int(status)}")


def check(status: int, lib: ctypes.CDLL | None = None) -> None:
    """Raise for a non-zero attnkit_status, with attnkit_last_error()'s text.

    Call it on the thread that made the call, right after it (the message is per thread).
    ATTNKIT_INVALID_ARGUMENT raises ValueError (AttnkitInvalidArgument); every other failure
    raises RuntimeError (AttnkitError, whose .status tells e.g. ATTNKIT_UNSUPPORTED apart).
    """
    status = int(status)
    if status == ATTNKIT_OK:
        return
    if lib is None:
        lib = load_library()
    raw = lib.attnkit_last_error()
    message = raw.decode("utf-8", "replace") if raw else ""
    text = f"{status_name(status, lib)}: {message or '(no message)'}"
    if status == ATTNKIT_INVALID_ARGUMENT:
        raise AttnkitInvalidArgument(status, text)
    raise AttnkitError(status, text)


# ---------------------------------------------------------------------------------------------
# Building arguments


def absent_tensor() -> Tensor:
    """An absent optional tensor (data == NULL)."""
    return Tensor()


def _torch_dtype_codes() -> dict:
    import torch

    return {
        torch.float32: ATTNKIT_FLOAT32,
        torch.float16: ATTNKIT_FLOAT16,
        torch.bfloat16: ATTNKIT_BFLOAT16,
        torch.float64: ATTNKIT_FLOAT64,
        torch.bool: ATTNKIT_BOOL,
    }


# What tensor_view accepts when its caller names nothing narrower: every dtype the C ABI has.
ANY_DTYPE = "float32, float16, bfloat16, float64 or bool"


def tensor_view(t, name: str = "tensor", allowed: str = ANY_DTYPE) -> Tensor:
    """An attnkit_tensor viewing a torch tensor (no copy; the tensor must outlive the call).

    Maps dtype (float32/float16/bfloat16/float64/bool), device (cpu, or cuda with its index),
    shape and strides in elements. None gives an absent tensor. A dtype the C ABI has no code for, or a
    device other than cpu and cuda, raises naming the argument `name`; the dtype error lists `allowed`,
    the dtypes this argument may have.
    """
    if t is None:
        return absent_tensor()
    import torch

    if not isinstance(t, torch.Tensor):
        raise TypeError(f"tensor_view: expected a torch.Tensor or None, got {type(t).__name__}")
    code = _torch_dtype_codes().get(t.dtype)
    if code is None:
        raise TypeError(f"{name}: dtype {t.dtype}; allowed: {allowed}")
    if t.dim() > ATTNKIT_MAX_RANK:
        raise ValueError(f"tensor_view: rank {t.dim()} exceeds ATTNKIT_MAX_RANK = {ATTNKIT_MAX_RANK}")
    view = Tensor()
    view.data = t.data_ptr() or None
    view.dtype = code
    if t.device.type == "cuda":
        view.device_type = ATTNKIT_DEVICE_CUDA
        index = t.device.index
        view.device_index = torch.cuda.current_device() if index is None else index
    elif t.device.type == "cpu":
        view.device_type = ATTNKIT_DEVICE_CPU
        view.device_index = 0
    else:
        raise ValueError(f"{name}: device {t.device}; allowed: cpu or cuda")
    view.rank = t.dim()
    for i, (extent, stride) in enumerate(zip(t.shape, t.stride())):
        view.extents[i] = extent
        view.strides[i] = stride
    return view


def run_options(lib: ctypes.CDLL, backend: int = ATTNKIT_BACKEND_AUTO, stream=None,
                num_threads: int = 0, workspace=None, workspace_bytes: int = 0) -> RunOptions:
    """attnkit_run_options with defaults from attnkit_run_options_init; stream is a cudaStream_t
    as an int (e.g. torch.cuda.current_stream().cuda_stream) or None for the default stream;
    workspace a device address (int) of at least workspace_bytes, or None."""
    options = RunOptions()
    lib.attnkit_run_options_init(ctypes.byref(options))
    options.backend = backend
    options.num_threads = num_threads
    options.stream = stream or None
    options.workspace = workspace or None
    options.workspace_bytes = int(workspace_bytes) if workspace else 0
    return options


def neighborhood_mask(mask: AttentionMask, kernel_size, dilation=None, stride=None, causal=None) -> None:
    """Fill `mask` as a neighborhood mask; per-dimension lists (missing entries: 1 / 1 / False)."""
    dims = len(kernel_size)
    if not 1 <= dims <= ATTNKIT_MAX_TOKEN_DIMS:
        raise ValueError(f"neighborhood_mask: {dims} dimensions; allowed: 1 to {ATTNKIT_MAX_TOKEN_DIMS}")
    mask.kind = ATTNKIT_MASK_NEIGHBORHOOD
    mask.dims = dims
    for i in range(dims):
        entry = mask.neighborhood[i]
        entry.kernel_size = int(kernel_size[i])
        entry.dilation = int(dilation[i]) if dilation else 1
        entry.stride = int(stride[i]) if stride else 1
        entry.causal = 1 if (causal and causal[i]) else 0
