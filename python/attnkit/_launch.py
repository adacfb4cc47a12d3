"""How a torch op reaches the C ABI: views, device, stream, workspace and errors.

Every custom op's real implementation goes through here, so the rules live in one place:
- CPU tensors run on the CPU backend and CUDA tensors on the GPU backends (backend AUTO); a CUDA
  tensor given to a library built without CUDA raises RuntimeError saying how to get one that has it.
- Kernels run on torch's current stream of the inputs' device, with that device current.
- Workspace comes from PyTorch's allocator (torch.empty of uint8), sized by the library's
  *_workspace_size query, so a call allocates nothing itself and is safe under CUDA-graph capture.
- A failed call raises ValueError (invalid argument) or RuntimeError (anything else) carrying
  attnkit_last_error()'s text. Errors found here name the argument and list what it allows, as the
  library's do: tensors on a device other than cpu or cuda (meta tensors included: they would reach
  only the ops' fake implementations) or on different devices, and dtypes the C ABI has no code for.
- A tensor with no elements is passed at its own data_ptr(), usually 0: it needs no memory, and the C ABI
  reads a NULL data pointer as an absent tensor only when the tensor has elements.
"""

from __future__ import annotations

import contextlib
import ctypes

import torch

from . import _capi


def library() -> ctypes.CDLL:
    return _capi.load_library()


def contiguous_last(t: torch.Tensor | None) -> torch.Tensor | None:
    """The library needs the last dimension contiguous (every other stride is free): copy only
    when it is not, so views of packed qkv pass through without a copy."""
    if t is None:
        return None
    if t.dim() > 0 and t.stride(-1) != 1 and t.shape[-1] > 1:
        return t.contiguous()
    if t.dim() > 0 and t.stride(-1) != 1:
        # extent 1: the stride is meaningless to torch but the library checks it; restride.
        return t.as_strided(t.shape, t.stride()[:-1] + (1,))
    return t


def common_device(tensors, names=()) -> torch.device:
    """The device the given tensors (None entries skipped) share, without the library: the ops' fake
    implementations call it too, so a meta tensor, which dispatches to them, is refused, while the fake
    tensors of torch.compile, which report the device they stand for, pass. ValueError naming the
    argument (names[i], else "tensor i") for a device other than cpu or cuda, or another device than
    the first tensor's."""
    device = first_name = None
    for i, t in enumerate(tensors):
        if t is None:
            continue
        name = names[i] if i < len(names) else f"tensor {i}"
        if t.device.type not in ("cpu", "cuda"):
            raise ValueError(f"{name}: device {t.device}; allowed: cpu or cuda")
        if device is None:
            device, first_name = t.device, name
        elif t.device != device:
            raise ValueError(f"{name}: device {t.device} differs from {first_name}'s device {device}; allowed: "
                             f"{device}, all tensors of a call on one device")
    return device


def check_device(lib: ctypes.CDLL, *tensors: torch.Tensor | None, names=()) -> torch.device:
    """The device all given tensors share (common_device); RuntimeError for a CUDA tensor without a CUDA
    build."""
    device = common_device(tensors, names)
    if device.type == "cuda" and not lib.attnkit_cuda_compiled():
        raise RuntimeError(
            f"attnkit: CUDA tensors were given but {_capi.library_path(lib)} was built without the CUDA "
            "backend (ATTNKIT_WITH_CUDA=OFF); reinstall with `ATTNKIT_WITH_CUDA=ON pip install .` on a "
            "machine with nvcc, or point ATTNKIT_LIBRARY at a CUDA build"
        )
    return device


def check_rank(t: torch.Tensor, name: str, rank: int, layout: str) -> None:
    """ValueError, worded as the library's rank check, before Python indexes a shape the library has not
    validated yet."""
    if t.dim() != rank:
        raise ValueError(f"{name}: rank {t.dim()} (shape {list(t.shape)}); allowed: rank {rank}, layout {layout}")


def device_guard(device: torch.device):
    if device.type == "cuda":
        return torch.cuda.device(device)
    return contextlib.nullcontext()


_current_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def stream_of(device: torch.device):
    """The device's current CUDA stream as an int (None on the CPU); the raw query when torch has it
    (no Stream object per call)."""
    if device.type != "cuda":
        return None
    if _current_raw_stream is not None:
        return _current_raw_stream(device.index)
    return torch.cuda.current_stream(device).cuda_stream


def run_options(lib: ctypes.CDLL, device: torch.device) -> _capi.RunOptions:
    return _capi.run_options(lib, stream=stream_of(device))


def attach_workspace(options: _capi.RunOptions, size_query, args, device: torch.device):
    """Ask the library how much scratch the call needs, allocate it from torch and put it in
    `options`. Returns the tensor, which must stay alive until the call has been enqueued (torch's
    caching allocator keeps stream order for later reuse)."""
    lib = library()
    size = ctypes.c_int64(0)
    _capi.check(size_query(ctypes.byref(args), ctypes.byref(options), ctypes.byref(size)), lib)
    if size.value <= 0:
        return None
    workspace = torch.empty(size.value, dtype=torch.uint8, device=device)
    options.workspace = workspace.data_ptr()
    options.workspace_bytes = size.value
    return workspace


def call(function, args, options) -> None:
    """Run one C ABI operation and raise with the library's message on failure."""
    status = function(ctypes.byref(args), ctypes.byref(options))
    _capi.check(status, library())


# The dtypes of the floating-point arguments (q, k, v, a, b, ...), as the library lists them.
FLOATING = "float32, float16, bfloat16, float64"


def same_dtype(reference: torch.Tensor, reference_name: str) -> str:
    """What an argument that must share `reference`'s dtype allows, for view()'s message."""
    return f"{str(reference.dtype).removeprefix('torch.')} ({reference_name}'s dtype)"


def view(t: torch.Tensor | None, name: str = "tensor", allowed: str = FLOATING) -> _capi.Tensor:
    """The attnkit_tensor of argument `name` (errors name it; `allowed` lists its dtypes); None gives an absent
    tensor, a tensor with no elements keeps its data pointer, NULL included."""
    return _capi.tensor_view(t, name, allowed)
