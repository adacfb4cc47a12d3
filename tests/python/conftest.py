"""Shared fixtures: fresh random inputs per test (seeded per test for reproducibility) and the
loaded library, skipping the whole suite with a visible reason when attnkit cannot be imported."""

import os
import sys
import zlib

import pytest

sys.path.insert(0, os.path.dirname(__file__))  # reference.py

torch = pytest.importorskip("torch", reason="PyTorch is not installed (scripts/install-deps installs it)")


@pytest.fixture(autouse=True)
def _seed(request):
    # Fresh inputs per test, reproducible per test name.
    torch.manual_seed(zlib.crc32(request.node.nodeid.encode()))
    yield


def randn(*shape, dtype=torch.float32, device="cpu", requires_grad=False):
    t = torch.randn(*shape, dtype=dtype, device=device)
    return t.requires_grad_(requires_grad)
