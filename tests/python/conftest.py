"""Shared fixtures: fresh random inputs per test (seeded per test for reproducibility) and the
loaded library, skipping the whole suite with a visible reason when attnkit cannot be imported."""

import os
import sys
import zlib

import pytest

sys.path.insert(0, os.path.dirname(__file__))  # reference.py

torch = pytest.importorskip("torch", reason="PyTorch is not installed (scripts/install-deps installs it)")
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402 (after the importorskip)


@pytest.fixture(autouse=True)
def _seed(request):
    # Fresh inputs per test, reproducible per test name.
    torch.manual_seed(zlib.crc32(request.node.nodeid.encode()))
    yield


def randn(*shape, dtype=torch.float32, device="cpu", requires_grad=False):
    t = torch.randn(*shape, dtype=dtype, device=device)
    return t.requires_grad_(requires_grad)


class Forwarding(TorchDispatchMode):
    """A dispatch mode that runs every op as it is and records its name: while it is active the
    functional API must take the custom ops (the slow path)."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))
