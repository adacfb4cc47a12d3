"""The retention's eager call path (attnkit._retention_ops.eager_retention: library plans by call shape, autograd
without the custom ops' dispatch) against the custom ops: the same bits in value and gradient for every form (chunk
with per-head gamma, scale and states, recurrent, normalised parallel, an explicit decay matrix, no tokens), with or
without the final state written; a repeated call shape reuses its plan, another gamma, shape or forced config makes one; a dispatch
mode sees the custom ops; on a GPU, the same on CUDA tensors and a CUDA-graph capture of forward and backward (skips
with the reason without one)."""

import pytest
import torch

import attnkit
from attnkit import _retention_ops
from conftest import Forwarding, randn
from gpu_support import replay_on_fresh_inputs, require_cuda, skip_if_unsupported


def _chunk_inputs(dtype=torch.float64, tokens=37, device="cpu"):
    q, k = (randn(2, tokens, 3, 8, dtype=dtype, device=device, requires_grad=True) for _ in range(2))
    v = randn(2, tokens, 3, 6, dtype=dtype, device=device, requires_grad=True)
    state_dtype = torch.float64 if dtype == torch.float64 else torch.float32
    s0 = randn(2, 3, 8, 6, dtype=state_dtype, device=device, requires_grad=True)
    return q, k, v, s0


# Calls of the functional API, each returning (out, final state or None), and whether they take an initial state.
_CALLS = {
    "chunk": (lambda q, k, v, s0: attnkit.retention(q, k, v, gamma=[0.5, 0.9, 0.99], scale=0.3, initial_state=s0,
                                                    output_final_state=True, chunk_size=16), True),
    "chunk_default_gamma": (lambda q, k, v, s0: attnkit.retention(q, k, v), False),
    "recurrent": (lambda q, k, v, s0: attnkit.retention(q, k, v, mode="recurrent", initial_state=s0,
                                                        output_final_state=True), True),
    "parallel_normalized": (lambda q, k, v, s0: attnkit.retention(q, k, v, mode="parallel", normalize=True), False),
    "decay_matrix": (lambda q, k, v, s0: attnkit.retention(
        q, k, v, decay=torch.tril(torch.rand(3, q.shape[1], k.shape[1], dtype=torch.float32))), False),
}


def _value_and_grads(call, inputs):
    for t in inputs:
        t.grad = None
    out, state = call(*inputs)
    torch.manual_seed(5)
    loss = (out * torch.randn_like(out)).sum()
    if state is not None:
        loss = loss + (state * torch.randn_like(state)).sum()
    loss.backward()
    values = [out.detach()] + ([state.detach()] if state is not None else [])
    return values + [t.grad.clone() if t.grad is not None else None for t in inputs]


@pytest.mark.parametrize("name", sorted(_CALLS))
def test_eager_path_and_custom_ops_give_identical_values_and_gradients(name):
    call, with_state = _CALLS[name]
    inputs = _chunk_inputs()
    if not with_state:
        inputs[3].requires_grad_(False)
    torch.manual_seed(3)
    fast = _value_and_grads(call, inputs)
    mode = Forwarding()
    with mode:
        torch.manual_seed(3)
        slow = _value_and_grads(call, inputs)
    assert any("attnkit.retention_forward" in op for op in mode.ops)
    assert any("attnkit.retention_backward" in op for op in mode.ops)
    assert len(fast) == len(slow)
    for i, (a, b) in enumerate(zip(fast, slow)):
        if a is None or b is None:
            assert a is None and b is None, f"{name}: result {i} present on one path only"
        else:
            assert torch.equal(a, b), f"{name}: result {i} differs between the eager path and the custom ops"


def test_a_call_without_tokens_passes_the_state_through_on_both_paths():
    q, k, v, s0 = _chunk_inputs(tokens=0)
    out, state = attnkit.retention(q, k, v, initial_state=s0, output_final_state=True)
    assert out.shape == (2, 0, 3, 6)
    assert torch.equal(state, s0.detach())
    with Forwarding():
        _, slow_state = attnkit.retention(q, k, v, initial_state=s0, output_final_state=True)
    assert torch.equal(slow_state, state)


def test_a_repeated_call_shape_reuses_its_plan_and_another_gamma_makes_one():
    _retention_ops.clear_plans()
    q, k, v, s0 = (t.detach() for t in _chunk_inputs(dtype=torch.float32))
    attnkit.retention(q, k, v, gamma=[0.5, 0.9, 0.99])
    assert len(_retention_ops._forward_plans) == 1
    for _ in range(3):
        q, k, v, _ = (t.detach() for t in _chunk_inputs(dtype=torch.float32))  # other tensors of the same shape
        out, _ = attnkit.retention(q, k, v, gamma=[0.5, 0.9, 0.99])
    assert len(_retention_ops._forward_plans) == 1
    expected, _ = _retention_ops.retention_forward(q, k, v, None, [0.5, 0.9, 0.99], 1, 64, False, None, None)
    assert torch.equal(out, expected)
    out, _ = attnkit.retention(q, k, v, gamma=[0.6, 0.9, 0.99])
    assert len(_retention_ops._forward_plans) == 2
    expected, _ = _retention_ops.retention_forward(q, k, v, None, [0.6, 0.9, 0.99], 1, 64, False, None, None)
    assert torch.equal(out, expected)


def test_a_call_without_output_final_state_writes_none_and_gives_the_same_output_and_gradients():
    _retention_ops.clear_plans()
    q, k, v, s0 = _chunk_inputs()
    with_state, state = attnkit.retention(q, k, v, initial_state=s0, output_final_state=True)
    without_state, none = attnkit.retention(q, k, v, initial_state=s0)
    assert none is None and state is not None
    assert torch.equal(with_state, without_state)
    assert len(_retention_ops._forward_plans) == 2, "a plan with the final state and one without"
    grads = torch.autograd.grad(without_state.sum(), (q, k, v, s0))
    expected = torch.autograd.grad(with_state.sum(), (q, k, v, s0))
    for g, e in zip(grads, expected):
        assert torch.equal(g, e)


def test_a_forced_config_set_after_a_plan_was_made_gets_its_own_plan(monkeypatch):
    # The library keys its retention plans on ATTNKIT_RETENTION_CONFIG (read when a plan is made); so does the
    # eager path's cache: a benchmark that switches it between candidates in one process runs each.
    _retention_ops.clear_plans()
    q, k, v, _ = (t.detach() for t in _chunk_inputs(dtype=torch.float32))
    expected, _ = attnkit.retention(q, k, v)
    monkeypatch.setenv("ATTNKIT_RETENTION_CONFIG", "segments=2")  # a CUDA shape: the CPU backend computes alike
    out, _ = attnkit.retention(q, k, v)
    assert len(_retention_ops._forward_plans) == 2
    assert torch.equal(out, expected)
    monkeypatch.delenv("ATTNKIT_RETENTION_CONFIG")
    attnkit.retention(q, k, v)
    assert len(_retention_ops._forward_plans) == 2, "back to the first plan"


def test_a_repeated_backward_shape_reuses_its_plan():
    _retention_ops.clear_plans()

    def step():
        q, k, v, _ = _chunk_inputs(dtype=torch.float32)
        attnkit.retention(q, k, v)[0].sum().backward()

    step()
    assert len(_retention_ops._backward_plans) == 1
    step()
    assert len(_retention_ops._backward_plans) == 1


def test_non_contiguous_inputs_take_the_eager_path_with_the_custom_ops_result():
    q, k, v = (randn(2, 3, 21, 8).transpose(1, 2) for _ in range(3))  # [B, T, H, D] views, T-major storage
    out, state = attnkit.retention(q, k, v, output_final_state=True)
    expected_out, expected_state = _retention_ops.retention_forward(q, k, v, None, None, 1, 64, False, None, None)
    assert torch.equal(out, expected_out) and torch.equal(state, expected_state)


def test_cuda_eager_path_matches_the_custom_ops_and_replays_in_a_cuda_graph():
    require_cuda()
    torch.manual_seed(11)
    q, k, v = (torch.randn(2, 200, 4, 64, device="cuda", dtype=torch.bfloat16).requires_grad_() for _ in range(3))
    s0 = torch.randn(2, 4, 64, 64, device="cuda").requires_grad_()

    def call(q, k, v, s0):
        return attnkit.retention(q, k, v, initial_state=s0, output_final_state=True)

    with skip_if_unsupported("chunkwise retention bf16 d64 forward and backward"):
        fast = _value_and_grads(call, [q, k, v, s0])
    with Forwarding():
        slow = _value_and_grads(call, [q, k, v, s0])
    for i, (a, b) in enumerate(zip(fast, slow)):
        assert torch.equal(a, b), f"result {i} differs between the eager path and the custom ops on CUDA"
    # Forward and backward captured once and replayed on new inputs (plans made outside the capture).
    static = [t.detach().clone().requires_grad_() for t in (q, k, v, s0)]
    grad = torch.randn(2, 200, 4, 64, device="cuda", dtype=torch.bfloat16)

    def step():
        out, _ = call(*static)
        out.backward(grad)
        return out

    step()
    static_out, fresh = replay_on_fresh_inputs(step, static)
    eager = [t.detach().clone().requires_grad_() for t in fresh]
    expected, _ = call(*eager)
    expected.backward(grad)
    assert torch.equal(static_out, expected)
    for t, e in zip(static, eager):
        assert torch.equal(t.grad, e.grad)
