"""Every output element is written by the library: the ops' output allocations are poisoned with
NaN (torch.empty patched for the duration of one call) and the results must hold no NaN."""

import pytest
import torch

import attnkit
from conftest import randn


@pytest.fixture
def nan_poisoned_empty(monkeypatch):
    real_empty = torch.empty

    def poisoned(*args, **kwargs):
        t = real_empty(*args, **kwargs)
        if t.is_floating_point():
            t.fill_(float("nan"))
        return t

    monkeypatch.setattr(torch, "empty", poisoned)


def _no_nan(*tensors):
    for t in tensors:
        assert t.numel() > 0 and not torch.isnan(t).any()


def test_attention_outputs_and_gradients_fully_written(nan_poisoned_empty):
    q, k, v = (randn(2, 7, 5, 3, 8, requires_grad=True) for _ in range(3))
    out, lse = attnkit.na2d(q, k, v, kernel_size=3, dilation=(2, 1), return_lse=True)
    (out.sum() + lse.sum()).backward()
    _no_nan(out, lse, q.grad, k.grad, v.grad)


def test_retention_outputs_states_and_gradients_fully_written(nan_poisoned_empty):
    q, k, v = (randn(2, 13, 2, 4, requires_grad=True) for _ in range(3))
    state = randn(2, 2, 4, 4, requires_grad=True)
    out, final = attnkit.retention(q, k, v, chunk_size=4, initial_state=state, output_final_state=True)
    (out.sum() + final.sum()).backward()
    _no_nan(out, final, q.grad, k.grad, v.grad, state.grad)


def test_gemm_output_and_gradients_fully_written(nan_poisoned_empty):
    a, b = randn(3, 9, 7, requires_grad=True), randn(1, 7, 5, requires_grad=True)
    c = attnkit.gemm(a, b)
    c.sum().backward()
    _no_nan(c, a.grad, b.grad)
