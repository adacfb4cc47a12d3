"""Shared helpers of the GPU suites: skip (with the reason) when there is no CUDA device or the
library was built without CUDA, and turn the library's ATTNKIT_UNSUPPORTED (a head dim or dtype
outside the built kernel set, a backward not written yet) into a visible skip."""

import contextlib

import pytest
import torch

import attnkit
from attnkit import _capi


def require_cuda():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device visible to torch (GPU suites run on the GPU machine)")
    try:
        info = attnkit.library_info()
    except Exception as error:  # noqa: BLE001 - reported as the skip reason
        pytest.skip(f"libattnkit not loadable: {error}")
    if not info["cuda_compiled"]:
        pytest.skip(f"{info['path']} was built without CUDA (ATTNKIT_WITH_CUDA=OFF)")


@contextlib.contextmanager
def skip_if_unsupported(what: str):
    try:
        yield
    except _capi.AttnkitError as error:
        if error.status == _capi.ATTNKIT_UNSUPPORTED:
            pytest.skip(f"{what}: the library answers ATTNKIT_UNSUPPORTED: {error}")
        raise


def poison_allocator(shape, dtype, device="cuda"):
    """Leave a NaN-filled block of this size in torch's caching allocator, so the next allocation
    of that size most likely reuses it: an op that fails to write every element then shows NaN."""
    block = torch.full(shape, float("nan"), dtype=dtype, device=device)
    del block


def replay_on_fresh_inputs(step, static):
    """Captures step() (a forward and backward on the leaf tensors `static`, after one warm-up on a side stream so that
    plans and tuning happen outside the capture) in a CUDA graph, copies fresh random values into `static` and replays
    it. Returns (the captured step's output, the fresh values)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for t in static:
            t.grad = None
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    for t in static:
        t.grad = None
    with torch.cuda.graph(graph):
        static_out = step()
    fresh = [torch.randn_like(t) for t in static]
    with torch.no_grad():
        for buffer, value in zip(static, fresh):
            buffer.copy_(value)
    graph.replay()
    torch.cuda.synchronize()
    return static_out, fresh
