"""The ops are proper torch.library custom ops: opcheck passes (schema, fake tensors, autograd
registration, AOT dispatch), and torch.compile(fullgraph=True) runs them forward and backward on
the CPU without graph breaks, giving the eager results."""

import pytest
import torch

import attnkit
from attnkit import _attention_ops, _gemm_ops, _retention_ops
from conftest import randn


def _na_args(q, k, v):
    return (q, k, v, None, None, 2, 0, [3, 4], [1, 2], [1, 1], [False, True], 0, 0, None)


def test_attention_forward_op_passes_opcheck():
    q, k, v = (randn(1, 6, 9, 2, 8, requires_grad=True) for _ in range(3))
    torch.library.opcheck(_attention_ops.attention_forward, _na_args(q, k, v))


def test_attention_forward_op_with_element_mask_passes_opcheck():
    q, k, v = (randn(1, 7, 2, 8, requires_grad=True) for _ in range(3))
    mask = torch.rand(1, 2, 7, 7) < 0.5
    torch.library.opcheck(_attention_ops.attention_forward, (q, k, v, None, mask, 4, 0, [], [], [], [], 0, 0, 0.5))


def test_retention_forward_op_passes_opcheck():
    q, k, v = (randn(1, 9, 2, 4, requires_grad=True) for _ in range(3))
    state = randn(1, 2, 4, 4, requires_grad=True)
    torch.library.opcheck(_retention_ops.retention_forward, (q, k, v, state, None, 1, 4, False, None))


def test_gemm_op_passes_opcheck():
    a, b = randn(2, 5, 7, requires_grad=True), randn(2, 7, 3, requires_grad=True)
    torch.library.opcheck(_gemm_ops.gemm, (a, b, False))


def _compiled(fn):
    torch._dynamo.reset()
    return torch.compile(fn, fullgraph=True, backend="aot_eager")


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_na2d_compiles_fullgraph_forward_and_backward(backend):
    def step(q, k, v):
        out, lse = attnkit.na2d(q, k, v, kernel_size=3, dilation=(1, 2), return_lse=True)
        return (out * 2).sum() + lse.sum()

    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=True, backend=backend)
    q, k, v = (randn(1, 6, 8, 2, 8, requires_grad=True) for _ in range(3))
    loss = compiled(q, k, v)
    loss.backward()
    grads = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    expected = step(q, k, v)
    expected.backward()
    assert torch.allclose(loss, expected, rtol=1e-5)
    for actual, t in zip(grads, (q, k, v)):
        assert torch.allclose(actual, t.grad, rtol=1e-4, atol=1e-5)


def test_retention_gemm_and_merge_compile_fullgraph():
    def step(q, k, v, w):
        out, state = attnkit.retention(q, k, v, mode="chunk", chunk_size=4, output_final_state=True)
        projected = attnkit.gemm(out.reshape(-1, out.shape[-1]), w)
        first = attnkit.attention(q, k, v, is_causal=True, return_lse=True)
        merged, _ = attnkit.merge_attentions([first[0], first[0]], [first[1], first[1]])
        return projected.sum() + state.sum() + merged.sum()

    compiled = _compiled(step)
    q, k, v = (randn(1, 9, 2, 4, requires_grad=True) for _ in range(3))
    w = randn(4, 5, requires_grad=True)
    loss = compiled(q, k, v, w)
    loss.backward()
    assert torch.allclose(loss, step(q, k, v, w), rtol=1e-5)
    assert q.grad is not None and w.grad is not None


def test_neighborhood_module_compiles_fullgraph():
    module = attnkit.nn.NeighborhoodAttention2D(16, 2, kernel_size=3)
    compiled = _compiled(module)
    x = randn(1, 5, 7, 16)
    assert torch.allclose(compiled(x), module(x), rtol=1e-5, atol=1e-6)
