"""The plan-based call path on the CPU: the eager fast path (functional._eager_fast_path: no custom-op
dispatch) and the custom ops give the same bits in value and gradient; a repeated call shape reuses its
library plan (attnkit._attention_ops._forward_plans) and a new shape or alignment makes one; gradients
through the lse (merge_attentions) stay right; torch.use_deterministic_algorithms(True) forbids tuning;
torch.compile(fullgraph=True) still traces the ops. CUDA-graph capture of a forward and backward runs on
a GPU (skips with the reason without one)."""

import pytest
import torch

import attnkit
import reference
from attnkit import _attention_ops, _mask_spec, _plans, functional, tuner
from conftest import Forwarding, randn
from gpu_support import replay_on_fresh_inputs, require_cuda, skip_if_unsupported


# Calls of the functional API, each returning (out, lse), on inputs made by _inputs.
_BLOCK_MASK = torch.tensor([[True, False, True], [False, True, True], [True, True, False], [False, False, True]])
_CALLS = {
    "dense": lambda q, k, v: attnkit.attention(q, k, v, scale=0.3, return_lse=True),
    "causal_bottom_right": lambda q, k, v: attnkit.attention(q, k, v, is_causal=True, causal_alignment="bottom_right",
                                                             return_lse=True),
    "element_mask": lambda q, k, v: attnkit.attention(
        q, k, v, mask=(torch.arange(q.shape[1])[:, None] * 7 + torch.arange(k.shape[1])[None, :] * 3) % 5 != 0,
        return_lse=True),
    "block_mask": lambda q, k, v: attnkit.sparse_attention(q, k, v, block_mask=_BLOCK_MASK, block_size=(4, 5),
                                                           return_lse=True),
    "na2d": lambda q, k, v: attnkit.na2d(q, k, v, kernel_size=(3, 5), dilation=(2, 1), stride=(1, 2),
                                         is_causal=(False, True), return_lse=True),
}


def _inputs(name, dtype=torch.float32):
    if name == "na2d":
        shapes = [(1, 7, 9, 2, 8)] * 3
    else:
        shapes = [(2, 13, 4, 8), (2, 15, 2, 8), (2, 15, 2, 12)]
    return [randn(*shape, dtype=dtype, requires_grad=True) for shape in shapes]


def _value_and_grads(call, inputs, grad_out, grad_lse):
    for t in inputs:
        t.grad = None
    out, lse = call(*inputs)
    ((out * grad_out).sum() + (lse * grad_lse).sum()).backward()
    return [out.detach(), lse.detach()] + [t.grad.clone() for t in inputs]


@pytest.mark.parametrize("name", sorted(_CALLS))
def test_eager_fast_path_and_custom_op_path_give_identical_values_and_gradients(name):
    inputs = _inputs(name)
    assert functional._eager_fast_path(*inputs), "plain CPU tensors take the fast path"
    with torch.no_grad():
        out, lse = _CALLS[name](*inputs)
    grad_out, grad_lse = torch.randn_like(out), torch.randn_like(lse)
    fast = _value_and_grads(_CALLS[name], inputs, grad_out, grad_lse)
    mode = Forwarding()
    with mode:
        assert not functional._eager_fast_path(*inputs)
        slow = _value_and_grads(_CALLS[name], inputs, grad_out, grad_lse)
    assert any("attnkit.attention_forward" in op for op in mode.ops)
    assert any("attnkit.attention_backward" in op for op in mode.ops)
    for what, a, b in zip(("out", "lse", "grad_q", "grad_k", "grad_v"), fast, slow):
        assert torch.equal(a, b), f"{name}: {what} differs between the fast path and the custom op"


def test_a_direct_custom_op_call_gives_the_fast_paths_bits():
    q, k, v = _inputs("dense")
    expected_out, expected_lse = attnkit.attention(q, k, v, is_causal=True, return_lse=True)
    out, lse = _attention_ops.attention_forward(q, k, v, None, None, 1, 0, [], [], [], [], 0, 0, None)
    assert torch.equal(out, expected_out) and torch.equal(lse, expected_lse)


def test_a_repeated_call_shape_reuses_its_plan():
    q, k, v = (randn(1, 17, 3, 8) for _ in range(3))
    attnkit.attention(q, k, v, is_causal=True)
    plans = len(_attention_ops._forward_plans)
    for _ in range(3):
        q, k, v = (randn(1, 17, 3, 8) for _ in range(3))  # other tensors (and data pointers) of the same shape
        out = attnkit.attention(q, k, v, is_causal=True)
    assert len(_attention_ops._forward_plans) == plans
    expected, _ = reference.attention(q, k, v, reference.causal_mask(17, 17))
    assert reference.relative_l2(out, expected) <= 1e-5


def test_the_custom_op_path_reuses_the_fast_paths_plan():
    q, k, v = (randn(1, 19, 3, 8) for _ in range(3))
    attnkit.attention(q, k, v, is_causal=True, return_lse=True)
    plans = len(_attention_ops._forward_plans)
    with Forwarding():
        attnkit.attention(q, k, v, is_causal=True, return_lse=True)
    assert len(_attention_ops._forward_plans) == plans


def test_a_repeated_backward_shape_reuses_its_plan():
    def step():
        q, k, v = (randn(1, 21, 3, 8, requires_grad=True) for _ in range(3))
        attnkit.attention(q, k, v, is_causal=True).sum().backward()

    step()
    plans = len(_attention_ops._backward_plans)
    step()
    assert len(_attention_ops._backward_plans) == plans


def test_a_backward_gradient_of_other_strides_makes_a_new_plan_and_is_still_right():
    # The eager backward keys its plan on the forward's key and the incoming gradient's layout.
    q, k, v = (randn(1, 21, 3, 8, requires_grad=True) for _ in range(3))
    expected_out, _ = reference.attention(q, k, v)
    plans = len(_attention_ops._backward_plans)
    for grad in (randn(1, 21, 3, 8), randn(1, 3, 21, 8).transpose(1, 2), randn(1, 3, 21, 8).transpose(1, 2)):
        got = torch.autograd.grad(attnkit.attention(q, k, v), (q, k, v), grad)
        expected = torch.autograd.grad(expected_out, (q, k, v), grad.double(), retain_graph=True)
        for g, e in zip(got, expected):
            assert reference.relative_l2(g, e) <= 1e-5
    assert len(_attention_ops._backward_plans) == plans + 2


def test_a_new_shape_makes_a_new_plan():
    q, k, v = (randn(1, 23, 3, 8) for _ in range(3))
    attnkit.attention(q, k, v)
    plans = len(_attention_ops._forward_plans)
    q, k, v = (randn(1, 24, 3, 8) for _ in range(3))
    attnkit.attention(q, k, v)
    assert len(_attention_ops._forward_plans) == plans + 1


def test_a_view_of_another_alignment_makes_a_new_plan_and_is_still_right():
    q, k, v = (randn(1, 25, 3, 8) for _ in range(3))
    attnkit.attention(q, k, v)
    plans = len(_attention_ops._forward_plans)
    storage = randn(1 * 25 * 3 * 8 + 1)
    shifted = storage[1:].view(1, 25, 3, 8)  # one float in: address mod 16 is 4
    assert shifted.data_ptr() % 16 != q.data_ptr() % 16
    out = attnkit.attention(shifted, k, v)
    assert len(_attention_ops._forward_plans) == plans + 1
    expected, _ = reference.attention(shifted, k, v)
    assert reference.relative_l2(out, expected) <= 1e-5


def test_expanded_gradients_of_separate_leaves_accumulate_right_over_two_backwards():
    # out.sum() hands back a stride-0 (expanded) gradient; each gradient is a standalone tensor, so the second
    # backward's accumulation into .grad touches only its own leaf.
    q, k, v = randn(1, 21, 3, 8, requires_grad=True), randn(1, 17, 3, 8, requires_grad=True), randn(
        1, 17, 3, 6, requires_grad=True)
    for _ in range(2):
        attnkit.attention(q, k, v).sum().backward()
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    expected, _ = reference.attention(q64, k64, v64)
    expected.sum().backward()
    for actual, wanted in ((q.grad, q64.grad), (k.grad, k64.grad), (v.grad, v64.grad)):
        assert actual.data_ptr() not in (t.grad.data_ptr() for t in (q, k, v) if t.grad is not actual)
        assert reference.relative_l2(actual, 2 * wanted) <= 1e-5


def test_a_planned_call_allocates_outputs_of_the_first_calls_layout():
    # Dv != D: out is not shaped like q (the planned call allocates it from the entry's recorded layout).
    q, k, v = randn(2, 9, 4, 8), randn(2, 11, 2, 8), randn(2, 11, 2, 5)
    first = attnkit.attention(q, k, v, return_lse=True)
    plans = len(_attention_ops._forward_plans)
    second = attnkit.attention(q, k, v, return_lse=True)
    assert len(_attention_ops._forward_plans) == plans
    for a, b in zip(first, second):
        assert a.shape == b.shape and a.stride() == b.stride() and a.dtype == b.dtype and b.is_contiguous()
        assert torch.equal(a, b)
    assert second[0].dtype == q.dtype and second[1].dtype == torch.float32


def test_gradients_of_non_contiguous_inputs_with_a_mask_are_right():
    # Last dimension not contiguous (the forward and the backward copy it), and a mask tensor saved for the
    # backward.
    leaves = [randn(1, 8, 13, 3, requires_grad=True) for _ in range(3)]
    q, k, v = (t.permute(0, 2, 3, 1) for t in leaves)  # [1, 13, 3, 8], last stride 39
    assert all(t.stride(-1) != 1 for t in (q, k, v))
    mask = torch.rand(13, 13) < 0.6
    mask.fill_diagonal_(True)
    grad = randn(1, 13, 3, 8)
    got = torch.autograd.grad(attnkit.attention(q, k, v, mask=mask), leaves, grad)
    expected_out, _ = reference.attention(q.double(), k.double(), v.double(), mask=mask)
    expected = torch.autograd.grad(expected_out, leaves, grad.double())
    for g, e in zip(got, expected):
        assert reference.relative_l2(g, e) <= 1e-5


def test_a_backward_after_the_forward_plans_were_dropped_makes_its_plan_again_and_is_right():
    # The backward keys its plan on the forward's plan entry: a new entry for the same call shape gets its own.
    q, k, v = (randn(1, 15, 2, 8, requires_grad=True) for _ in range(3))
    grad = randn(1, 15, 2, 8)
    first = torch.autograd.grad(attnkit.attention(q, k, v, is_causal=True), (q, k, v), grad)
    _attention_ops._forward_plans.clear()
    plans = len(_attention_ops._backward_plans)
    second = torch.autograd.grad(attnkit.attention(q, k, v, is_causal=True), (q, k, v), grad)
    assert len(_attention_ops._backward_plans) == plans + 1
    for a, b in zip(first, second):
        assert torch.equal(a, b)


def test_a_plan_runs_with_none_for_absent_tensors_and_fewer_pointers():
    # _plans.run packs the pointers as bytes; None entries or a short tuple take the ctypes array instead.
    q, k, v = (randn(1, 12, 2, 8) for _ in range(3))
    params = _mask_spec.dense().params()
    expected, _ = _attention_ops.run_forward(q, k, v, None, None, params, None, False)
    entry = _attention_ops._forward_plans[next(reversed(_attention_ops._forward_plans))]
    for tail in ((0, 0, 0, 0), (None, None, None, None), (None,), ()):
        out = torch.full_like(q, float("nan"))
        _plans.run(entry.plan, (q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr()) + tail, q.device)
        assert torch.equal(out, expected)


@pytest.mark.parametrize("path", ["eager", "custom_op"])
def test_merge_gradients_through_the_lse_equal_full_attention_gradients(path):
    q, k, v = (randn(1, 7, 2, 4, dtype=torch.float64, requires_grad=True) for _ in range(3))
    grad_out, grad_lse = torch.randn(1, 7, 2, 4, dtype=torch.float64), torch.randn(1, 7, 2, dtype=torch.float64)
    cuts = [(0, 2), (2, 5), (5, 7)]
    mode = Forwarding() if path == "custom_op" else None
    if mode is not None:
        mode.__enter__()
    try:
        parts = [attnkit.attention(q, k[:, a:b], v[:, a:b], return_lse=True) for a, b in cuts]
        out, lse = attnkit.merge_attentions([p[0] for p in parts], [p[1] for p in parts])
        ((out * grad_out).sum() + (lse.double() * grad_lse).sum()).backward()
    finally:
        if mode is not None:
            mode.__exit__(None, None, None)
    q64, k64, v64 = (t.detach().clone().requires_grad_() for t in (q, k, v))
    expected, expected_lse = reference.attention(q64, k64, v64)
    ((expected * grad_out).sum() + (expected_lse * grad_lse).sum()).backward()
    # The lse is float32, so the merge weights carry float32 rounding.
    for actual, wanted in ((q.grad, q64.grad), (k.grad, k64.grad), (v.grad, v64.grad)):
        assert reference.relative_l2(actual, wanted) <= 1e-5


@pytest.fixture
def _tuning_on(tmp_path):
    """Tuning on, as fast as it goes, into an empty cache folder; settings and torch's deterministic flag
    restored after."""
    if not tuner.available():
        pytest.skip("the loaded libattnkit does not export attnkit_tuner_configure yet")
    before = tuner.settings()
    deterministic = torch.are_deterministic_algorithms_enabled()
    tuner.configure(mode="on", deterministic=False, forward_pass=True, backward_pass=True, cache_dir=str(tmp_path),
                    warmup_steps_forward=0, warmup_steps_backward=0, steps_forward=2, steps_backward=2, top_k=2)
    try:
        yield tmp_path
    finally:
        torch.use_deterministic_algorithms(deterministic)
        tuner.configure(**before)


def _cache_files(folder):
    return sorted(p.name for p in folder.glob("*.json"))


def test_deterministic_algorithms_keep_a_call_from_tuning_in_mode_on(_tuning_on):
    q, k, v = (randn(1, 27, 2, 16, requires_grad=True) for _ in range(3))
    torch.use_deterministic_algorithms(True)
    try:
        out = attnkit.attention(q, k, v, is_causal=True)
        out.sum().backward()
    finally:
        torch.use_deterministic_algorithms(False)
    assert _cache_files(_tuning_on) == [], "nothing was timed, so no winner was written"
    assert torch.isfinite(q.grad).all()
    # Nothing was tuned for this problem: the first query that may tune does.
    assert tuner.forward_config(q.detach(), k.detach(), v.detach(), is_causal=True)[1] == "tuned"


def test_the_same_call_without_deterministic_algorithms_tunes(_tuning_on):
    q, k, v = (randn(1, 27, 2, 16) for _ in range(3))
    attnkit.attention(q, k, v, is_causal=True)
    assert _cache_files(_tuning_on), "the call tuned and wrote its winner"
    assert tuner.forward_config(q, k, v, is_causal=True)[1] == "cache"


def test_compile_fullgraph_traces_attention_forward_and_backward():
    mask = torch.rand(11, 14) < 0.7

    def step(q, k, v):
        out, lse = attnkit.attention(q, k, v, mask=mask, return_lse=True)
        causal = attnkit.attention(q, k, v, is_causal=True, causal_alignment="bottom_right")
        return (out * 2).sum() + lse.sum() + causal.sum()

    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    q, k, v = randn(2, 11, 4, 8, requires_grad=True), randn(2, 14, 2, 8, requires_grad=True), randn(
        2, 14, 2, 8, requires_grad=True)
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


def test_cuda_graph_capture_and_replay_of_forward_and_backward():
    require_cuda()
    static = [torch.randn(1, 128, 2, 64, device="cuda", dtype=torch.bfloat16).requires_grad_() for _ in range(3)]
    grad = torch.randn(1, 128, 2, 64, device="cuda", dtype=torch.bfloat16)

    def step():
        out = attnkit.attention(*static, is_causal=True)
        out.backward(grad)
        return out

    with skip_if_unsupported("causal forward and backward bf16 d64"):
        step()  # plans (and any tuning) outside capture
    static_out, fresh = replay_on_fresh_inputs(step, static)
    eager = [t.detach().clone().requires_grad_() for t in fresh]
    expected = attnkit.attention(*eager, is_causal=True)
    expected.backward(grad)
    assert reference.relative_l2(static_out, expected) <= 1e-2
    for captured, t in zip(static, eager):
        assert reference.relative_l2(captured.grad, t.grad) <= 1e-2
