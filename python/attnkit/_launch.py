"""How a torch op reaches the C ABI: views, device, stream, workspace and errors.

Every custom op's real implementation goes through here, so the rules live in one place:
- CPU tensors run on the CPU backend and CUDA tensors on the GPU backends (backend AUTO); a CUDA
  tensor given to a library built without CUDA raises RuntimeError saying how to get one that has it.
- Kernels run on torch's current stream of the inputs' device, with that device current.
- Workspace comes from PyTorch's allocator (torch.empty of uint8), sized by the library's
  *_workspace_size query, so a call allocates nothing itself and is safe under CUDA-graph capture.
- A failed call raises ValueError (invalid argument) or RuntimeError (anything else) carrying
  attnkit_last_error()'s text.
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


def check_device(lib: ctypes.CDLL, *tensors: torch.Tensor | None) -> torch.device:
    """The device all given tensors share; RuntimeError for a CUDA tensor without a CUDA build."""
    present = [t for t in tensors if t is not None]
    device = present[0].device
    for t in present[1:]:
        if t.device != device:
            raise ValueError(
                f"attnkit: tensors on different devices ({device} and {t.device}); allowed: all on one device"
            )
    if device.type == "cuda" and not lib.attnkit_cuda_compiled():
        raise RuntimeError(
            f"attnkit: CUDA tensors were given but {_capi.library_path(lib)} was built without the CUDA "
            "backend (ATTNKIT_WITH_CUDA=OFF); reinstall with `ATTNKIT_WITH_CUDA=ON pip install .` on a "
            "machine with nvcc, or point ATTNKIT_LIBRARY at a CUDA build"
        )
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"attnkit: device {device} is not supported; allowed: cpu, cuda")
    return device


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


def view(t: torch.Tensor | None) -> _capi.Tensor:
    return _capi.tensor_view(t)
