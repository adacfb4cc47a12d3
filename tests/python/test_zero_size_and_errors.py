"""Zero-size problems (an extent 0 in batch, tokens, heads or a head dim) give correctly shaped results that
match the definition, forward and backward, for every op and mask kind; and the errors a new user meets name
the argument and list only what it allows: dtypes the C ABI has no code for, float arguments given bool, a
retention q of the wrong rank, and tensors on a device other than cpu or cuda (meta) or on mixed devices."""

import re
import types

import pytest
import torch

import attnkit
import reference
from attnkit import _attention_ops, _gemm_ops, _launch, _retention_ops
from conftest import randn

FLOATS = "allowed: float32, float16, bfloat16, float64"


def _grads(*tensors):
    return [t.grad for t in tensors]


def _finite(t):
    """lse with the -inf of rows with no key replaced by 0 (their gradient is 0)."""
    return torch.where(torch.isfinite(t), t, torch.zeros_like(t))


def _reference_attention(q, k, v, mask=None, scale=None):
    """reference.attention's definition, with flattening that keeps extents 0 (reshape(-1) cannot)."""
    heads, kv_heads = q.shape[-2], k.shape[-2]
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    qf, kf, vf = (t.double().flatten(1, t.dim() - 3).transpose(1, 2) for t in (q, k, v))  # [B, H, S, X]
    if kv_heads:
        kf, vf = (t.repeat_interleave(heads // kv_heads, dim=1) for t in (kf, vf))
    scores = scale * qf @ kf.transpose(-1, -2)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    finite = torch.isfinite(lse)
    probs = torch.where(finite[..., None], torch.exp(scores - torch.where(finite, lse, 0.0)[..., None]), 0.0)
    out = (probs @ vf).transpose(1, 2).reshape(*q.shape[:-1], v.shape[-1])
    return out, lse.transpose(1, 2).reshape(q.shape[:-1])


def _attention_loss(out, lse, weight):
    return (out.double() * weight).sum() + _finite(lse.double()).sum()


# (q shape, k shape, Dv): batch 0, no query token, no key token, no query head (with and without key heads),
# head_dim 0, value dim 0, and a 2-D token grid with an extent 0.
ATTENTION_SHAPES = [
    ((0, 5, 2, 8), (0, 6, 2, 8), 8),
    ((2, 0, 2, 8), (2, 6, 2, 8), 8),
    ((2, 5, 2, 8), (2, 0, 2, 8), 8),
    ((2, 5, 0, 8), (2, 6, 0, 8), 8),
    ((2, 5, 0, 8), (2, 6, 2, 8), 8),
    ((2, 5, 4, 0), (2, 6, 2, 0), 8),
    ((2, 5, 4, 8), (2, 6, 2, 8), 0),
    ((1, 3, 0, 2, 8), (1, 4, 2, 8), 8),
]


@pytest.mark.parametrize("q_shape,k_shape,dv", ATTENTION_SHAPES)
@pytest.mark.parametrize("is_causal", [False, True])
def test_zero_size_attention_matches_the_definition_forward_and_backward(q_shape, k_shape, dv, is_causal):
    q = randn(*q_shape, dtype=torch.float64, requires_grad=True)
    k = randn(*k_shape, dtype=torch.float64, requires_grad=True)
    v = randn(*k_shape[:-1], dv, dtype=torch.float64, requires_grad=True)
    out, lse = attnkit.attention(q, k, v, is_causal=is_causal, return_lse=True)
    assert out.shape == q_shape[:-1] + (dv,) and lse.shape == q_shape[:-1]
    sq, sk = q.shape[1:-2].numel(), k.shape[1]  # flattened query tokens, key tokens
    mask = reference.causal_mask(sq, sk) if is_causal else None
    scale = None if q_shape[-1] else 1.0  # head_dim 0: every score is 0 whatever the scale
    expected, expected_lse = _reference_attention(q, k, v, mask=mask, scale=scale)
    assert torch.allclose(out, expected, atol=1e-12)
    assert torch.equal(torch.isinf(lse), torch.isinf(expected_lse))
    assert torch.allclose(_finite(lse).double(), _finite(expected_lse), atol=1e-6)

    weight = torch.randn(out.shape, dtype=torch.float64)
    _attention_loss(out, lse, weight).backward()
    actual = _grads(q, k, v)
    for t in (q, k, v):
        t.grad = None
    _attention_loss(expected, expected_lse, weight).backward()
    for got, t in zip(actual, (q, k, v)):
        assert got.shape == t.shape
        assert torch.allclose(got, t.grad, atol=1e-6)


def test_no_key_gives_zero_output_minus_inf_lse_and_zero_gradients():
    q = randn(1, 4, 2, 8, requires_grad=True)
    k, v = randn(1, 0, 2, 8, requires_grad=True), randn(1, 0, 2, 8, requires_grad=True)
    out, lse = attnkit.attention(q, k, v, return_lse=True)
    assert torch.equal(out, torch.zeros(1, 4, 2, 8))
    assert torch.equal(lse, torch.full((1, 4, 2), float("-inf")))
    out.sum().backward()
    assert torch.equal(q.grad, torch.zeros_like(q))
    assert k.grad.shape == k.shape and v.grad.shape == v.shape


def test_zero_size_element_and_block_masks():
    q, k, v = randn(2, 5, 2, 8), randn(2, 0, 2, 8), randn(2, 0, 2, 8)
    out, lse = attnkit.attention(q, k, v, mask=torch.ones(2, 2, 5, 0, dtype=torch.bool), return_lse=True)
    assert torch.equal(out, torch.zeros(2, 5, 2, 8)) and bool(torch.isneginf(lse).all())
    out = attnkit.sparse_attention(q, k, v, block_mask=torch.ones(1, 1, 2, 0, dtype=torch.bool), block_size=4)
    assert torch.equal(out, torch.zeros(2, 5, 2, 8))
    empty_q = randn(2, 0, 2, 8)
    out = attnkit.sparse_attention(empty_q, randn(2, 6, 2, 8), randn(2, 6, 2, 8),
                                   mask=torch.ones(2, 2, 0, 6, dtype=torch.bool))
    assert out.shape == (2, 0, 2, 8)


def test_neighborhood_with_a_token_extent_zero_is_empty_with_any_kernel_size_there():
    q = randn(1, 0, 5, 2, 8, requires_grad=True)
    out = attnkit.na2d(q, q, q, kernel_size=(7, 3), dilation=(2, 1))
    assert out.shape == (1, 0, 5, 2, 8)
    out.sum().backward()
    assert q.grad.shape == q.shape
    with pytest.raises(ValueError, match=r"mask\.neighborhood\[1\]\.kernel_size: 7.*an extent 0 has no tokens"):
        attnkit.na2d(q, q, q, kernel_size=(3, 7))


def test_neighborhood_with_batch_zero_gives_zero_positional_bias_gradient():
    q = randn(0, 9, 2, 8, requires_grad=True)
    rpb = randn(2, 5, requires_grad=True)
    out = attnkit.na1d(q, q, q, kernel_size=3, rpb=rpb)
    out.sum().backward()
    assert torch.equal(rpb.grad, torch.zeros(2, 5))


def test_lse_gradient_of_value_dim_zero_reaches_q_and_k():
    q, k = randn(1, 4, 2, 8, dtype=torch.float64, requires_grad=True), randn(1, 6, 2, 8, dtype=torch.float64,
                                                                             requires_grad=True)
    v = randn(1, 6, 2, 0, dtype=torch.float64, requires_grad=True)
    _, lse = attnkit.attention(q, k, v, return_lse=True)
    lse.sum().backward()
    _, expected = _reference_attention(q, k, v)
    grads = torch.autograd.grad(expected.sum(), (q, k))
    assert torch.allclose(q.grad, grads[0]) and torch.allclose(k.grad, grads[1])


RETENTION_SHAPES = [(0, 6, 2, 4, 4), (2, 0, 2, 4, 4), (2, 6, 0, 4, 4), (2, 6, 2, 0, 4), (2, 6, 2, 4, 0)]


@pytest.mark.parametrize("batch,tokens,heads,dk,dv", RETENTION_SHAPES)
@pytest.mark.parametrize("mode", ["chunk", "parallel", "recurrent"])
def test_zero_size_retention_matches_the_definition_forward_and_backward(batch, tokens, heads, dk, dv, mode):
    q = randn(batch, tokens, heads, dk, dtype=torch.float64, requires_grad=True)
    k = randn(batch, tokens, heads, dk, dtype=torch.float64, requires_grad=True)
    v = randn(batch, tokens, heads, dv, dtype=torch.float64, requires_grad=True)
    state = randn(batch, heads, dk, dv, dtype=torch.float64, requires_grad=True)
    out, final = attnkit.retention(q, k, v, mode=mode, chunk_size=4, initial_state=state, output_final_state=True)
    assert out.shape == (batch, tokens, heads, dv) and final.shape == (batch, heads, dk, dv)
    expected, expected_final = reference.retention(q, k, v, initial_state=state, scale=None if dk else 1.0)
    assert torch.allclose(out, expected) and torch.allclose(final, expected_final)

    weight, final_weight = torch.randn(out.shape, dtype=torch.float64), torch.randn(final.shape, dtype=torch.float64)
    ((out * weight).sum() + (final * final_weight).sum()).backward()
    actual = _grads(q, k, v, state)
    for t in (q, k, v, state):
        t.grad = None
    ((expected * weight).sum() + (expected_final * final_weight).sum()).backward()
    for got, t in zip(actual, (q, k, v, state)):
        assert got.shape == t.shape
        assert torch.allclose(got, t.grad if t.grad is not None else torch.zeros_like(t))


@pytest.mark.parametrize("a_shape,b_shape", [((0, 3), (3, 5)), ((4, 3), (3, 0)), ((4, 0), (0, 5)),
                                             ((0, 4, 3), (1, 3, 5)), ((2, 4, 0), (2, 0, 5))])
def test_zero_size_gemm_forward_and_backward(a_shape, b_shape):
    a, b = randn(*a_shape, requires_grad=True), randn(*b_shape, requires_grad=True)
    c = attnkit.gemm(a, b)
    expected = a.detach() @ b.detach()
    assert c.shape == expected.shape and torch.equal(c, expected)  # k = 0: zeros
    weight = torch.randn(c.shape)
    (c * weight).sum().backward()
    grad_a, grad_b = a.grad, b.grad
    a.grad = b.grad = None
    ((a @ b) * weight).sum().backward()
    assert grad_a.shape == a.shape and torch.allclose(grad_a, a.grad)
    assert grad_b.shape == b.shape and torch.allclose(grad_b, b.grad)


# --- empty tensors reach the library at NULL, through the cached plans -----------------------------------

REPEATS = 3  # the first call makes and caches the plan, the later ones run it


def test_an_empty_tensor_goes_to_the_library_at_a_null_data_pointer():
    view = _launch.view(torch.empty(2, 0, 3), "q")
    assert view.data is None  # NULL: present (rank 3, an extent 0), not absent
    assert view.rank == 3 and list(view.extents[:3]) == [2, 0, 3]
    assert _launch.view(None, "lse").rank == 0  # absent


def test_zero_size_attention_forward_uses_a_cached_plan_on_repeated_calls():
    _attention_ops._forward_plans.clear()
    q, k, v = randn(1, 4, 2, 8), randn(1, 0, 2, 8), randn(1, 0, 2, 8)  # no key
    entries = []
    for _ in range(REPEATS):
        out, lse = attnkit.attention(q, k, v, return_lse=True)
        assert torch.equal(out, torch.zeros(1, 4, 2, 8))
        assert torch.equal(lse, torch.full((1, 4, 2), float("-inf")))
        assert len(_attention_ops._forward_plans) == 1
        entries.append(next(iter(_attention_ops._forward_plans.values())))
    assert all(entry is entries[0] for entry in entries)


def test_zero_size_attention_backward_uses_a_cached_plan_on_repeated_calls():
    _attention_ops._backward_plans.clear()
    plans = []
    for _ in range(REPEATS):
        q = randn(2, 5, 2, 8, requires_grad=True)
        k, v = randn(2, 0, 2, 8, requires_grad=True), randn(2, 0, 2, 6, requires_grad=True)
        out, lse = attnkit.attention(q, k, v, is_causal=True, return_lse=True)
        (out.sum() + _finite(lse).sum()).backward()
        assert torch.equal(q.grad, torch.zeros_like(q))
        assert k.grad.shape == k.shape and v.grad.shape == v.shape
        plans.append(dict(_attention_ops._backward_plans))
    assert len(plans[0]) >= 1 and all(p == plans[0] for p in plans)  # the same plans, none made again


@pytest.mark.parametrize("q_shape,k_shape,dv", ATTENTION_SHAPES)
def test_repeated_zero_size_attention_calls_give_the_definitions_results(q_shape, k_shape, dv):
    results = []
    for _ in range(REPEATS):
        q = randn(*q_shape, dtype=torch.float64, requires_grad=True)
        k = randn(*k_shape, dtype=torch.float64, requires_grad=True)
        v = randn(*k_shape[:-1], dv, dtype=torch.float64, requires_grad=True)
        out, lse = attnkit.attention(q, k, v, return_lse=True)
        _attention_loss(out, lse, torch.ones(out.shape, dtype=torch.float64)).backward()
        scale = None if q_shape[-1] else 1.0
        expected, expected_lse = _reference_attention(q, k, v, scale=scale)
        assert torch.allclose(out, expected, atol=1e-12)
        assert torch.equal(torch.isinf(lse), torch.isinf(expected_lse))
        results.append((out.detach(), [t.grad.shape for t in (q, k, v)]))
        if k_shape[1] == 0 or q_shape[1] == 0 or q_shape[0] == 0:  # no key or no query: gradients are 0
            for t in (q, k, v):
                assert torch.equal(t.grad, torch.zeros_like(t))
    assert all(shapes == results[0][1] for _, shapes in results)


@pytest.mark.parametrize("q_shape,dv", [((0, 9, 2, 8), 8), ((1, 9, 0, 8), 8), ((1, 9, 2, 8), 0)],
                         ids=["batch0", "heads0", "dv0"])
def test_zero_size_na1d_forward_and_backward_on_repeated_calls(q_shape, dv):
    for _ in range(REPEATS):
        q = randn(*q_shape, requires_grad=True)
        k = randn(*q_shape, requires_grad=True)
        v = randn(*q_shape[:-1], dv, requires_grad=True)
        out = attnkit.na1d(q, k, v, kernel_size=3)
        assert out.shape == q_shape[:-1] + (dv,)
        out.sum().backward()
        for t in (q, k, v):
            assert torch.equal(t.grad, torch.zeros_like(t))  # nothing depends on them, or they are empty


def test_zero_size_retention_forward_and_backward_on_repeated_calls():
    for mode in ("chunk", "parallel", "recurrent"):
        for _ in range(REPEATS):
            q, k = randn(2, 5, 3, 0, requires_grad=True), randn(2, 5, 3, 0, requires_grad=True)  # Dk = 0
            v = randn(2, 5, 3, 4, requires_grad=True)
            state = randn(2, 3, 0, 4, requires_grad=True)
            out, final = attnkit.retention(q, k, v, mode=mode, chunk_size=4, initial_state=state,
                                           output_final_state=True)
            assert torch.equal(out, torch.zeros(2, 5, 3, 4)) and final.shape == (2, 3, 0, 4)
            out.sum().backward()
            assert torch.equal(v.grad, torch.zeros_like(v))
            assert q.grad.shape == q.shape and k.grad.shape == k.shape and state.grad.shape == state.shape


def test_zero_size_gemm_forward_and_backward_on_repeated_calls():
    for _ in range(REPEATS):
        a, b = randn(4, 0, requires_grad=True), randn(0, 5, requires_grad=True)
        c = attnkit.gemm(a, b)
        assert torch.equal(c, torch.zeros(4, 5))
        c.sum().backward()
        assert a.grad.shape == a.shape and b.grad.shape == b.shape
        a, b = randn(0, 4, 3, requires_grad=True), randn(1, 3, 5, requires_grad=True)
        c = attnkit.gemm(a, b)
        assert c.shape == (0, 4, 5)
        c.sum().backward()
        assert torch.equal(b.grad, torch.zeros_like(b))


def test_zero_size_ops_compile_fullgraph_forward_and_backward():
    def step(q, k, v):
        out, lse = attnkit.attention(q, k, v, is_causal=True, return_lse=True)
        return out.sum() + _finite(lse).sum()

    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    q = randn(1, 4, 2, 8, requires_grad=True)
    k, v = (randn(1, 0, 2, 8, requires_grad=True) for _ in range(2))  # no key: out 0, lse -inf, grads 0
    compiled(q, k, v).backward()
    assert torch.equal(q.grad, torch.zeros_like(q))


def test_zero_size_ops_pass_opcheck():
    q, k, v = (randn(1, 0, 2, 8, requires_grad=True) for _ in range(3))
    torch.library.opcheck(_attention_ops.attention_forward, (q, k, v, None, None, 1, 0, [], [], [], [], 0, 0, None))
    q, k, v = (randn(1, 5, 2, 0, requires_grad=True) for _ in range(3))
    torch.library.opcheck(_retention_ops.retention_forward, (q, k, v, None, None, 1, 4, False, None))
    torch.library.opcheck(_gemm_ops.gemm, (randn(3, 0, requires_grad=True), randn(0, 4, requires_grad=True), False))


# --- dtype errors -------------------------------------------------------------------------------------

@pytest.mark.parametrize("position", [0, 1, 2])
def test_integer_attention_input_names_the_argument_and_lists_float_dtypes(position):
    tensors = [randn(1, 8, 2, 8) for _ in range(3)]
    tensors[position] = torch.zeros(1, 8, 2, 8, dtype=torch.int32)
    name = "qkv"[position]
    allowed = FLOATS if position == 0 else "allowed: float32 (q's dtype)"
    with pytest.raises(TypeError, match=re.escape(f"{name}: dtype torch.int32; {allowed}")) as info:
        attnkit.attention(*tensors)
    assert "bool" not in str(info.value)


def test_bool_query_is_refused_by_the_library_listing_float_dtypes():
    q = torch.ones(1, 8, 2, 8, dtype=torch.bool)
    with pytest.raises(ValueError, match=rf"q: dtype bool; {FLOATS}") as info:
        attnkit.attention(q, randn(1, 8, 2, 8), randn(1, 8, 2, 8))
    assert "float64, bool" not in str(info.value)


def test_mixed_float_dtypes_name_the_argument():
    with pytest.raises(ValueError, match="v: dtype float16 differs from q's float32"):
        attnkit.attention(randn(1, 8, 2, 8), randn(1, 8, 2, 8), randn(1, 8, 2, 8, dtype=torch.float16))


def test_float64_runs_on_the_cpu():
    q = randn(1, 8, 2, 8, dtype=torch.float64)
    assert attnkit.attention(q, q, q).dtype == torch.float64


def test_integer_retention_gemm_and_neighborhood_inputs_name_the_argument():
    ints = torch.zeros(1, 8, 2, 8, dtype=torch.int64)
    with pytest.raises(TypeError, match=rf"^q: dtype torch.int64; {FLOATS}$"):
        attnkit.retention(ints, randn(1, 8, 2, 8), randn(1, 8, 2, 8))
    with pytest.raises(TypeError, match=rf"^q: dtype torch.int64; {FLOATS}$"):
        attnkit.na1d(ints, randn(1, 8, 2, 8), randn(1, 8, 2, 8), kernel_size=3)
    with pytest.raises(TypeError, match=rf"^b: dtype torch.int32; allowed: float32 \(a's dtype\)$"):
        attnkit.gemm(randn(2, 3), torch.zeros(3, 4, dtype=torch.int32))
    with pytest.raises(TypeError, match=r"^initial_state: dtype torch.int32; allowed: float32, or float64 when"):
        attnkit.retention(randn(1, 8, 2, 8), randn(1, 8, 2, 8), randn(1, 8, 2, 8),
                          initial_state=torch.zeros(1, 2, 8, 8, dtype=torch.int32))


# --- rank errors --------------------------------------------------------------------------------------

def test_rank_three_retention_query_raises_the_library_message():
    with pytest.raises(ValueError, match=r"^q: rank 3 \(shape \[1, 4, 8\]\); allowed: rank 4, layout \[B, T, H, Dk\]$"):
        attnkit.retention(randn(1, 4, 8), randn(1, 4, 8), randn(1, 4, 8))
    with pytest.raises(ValueError, match=r"^v: rank 3"):
        attnkit.retention(randn(1, 4, 2, 8), randn(1, 4, 2, 8), randn(1, 4, 8))


def test_rank_three_retention_query_raises_under_torch_compile_too():
    torch._dynamo.reset()
    compiled = torch.compile(lambda q: attnkit.retention(q, q, q)[0], fullgraph=True, backend="aot_eager")
    with pytest.raises(Exception, match=r"q: rank 3"):
        compiled(randn(1, 4, 8))


def test_rank_one_gemm_operand_names_it():
    with pytest.raises(ValueError, match=r"^b: rank 1 \(shape \[3\]\); allowed: rank 2 to 3"):
        attnkit.gemm(randn(2, 3), randn(3))


# --- device errors ------------------------------------------------------------------------------------

def _meta(*shape):
    return torch.empty(*shape, device="meta")


@pytest.mark.parametrize("call", [
    lambda q, k: attnkit.attention(q, k, k),
    lambda q, k: attnkit.attention(q.requires_grad_(), k, k),
    lambda q, k: attnkit.na1d(q, k, k, kernel_size=3),
    lambda q, k: attnkit.sparse_attention(q, k, k, mask=torch.ones(1, 1, 8, 8, dtype=torch.bool)),
    lambda q, k: attnkit.retention(q, k, k),
    lambda q, k: _attention_ops.attention_forward(q, k, k, None, None, 0, 0, [], [], [], [], 0, 0, None),
], ids=["attention", "attention_grad", "na1d", "sparse", "retention", "custom_op"])
def test_meta_query_with_cpu_keys_is_refused_naming_q(call):
    with pytest.raises(ValueError, match=r"^q: device meta; allowed: cpu or cuda$"):
        call(_meta(1, 8, 2, 8), randn(1, 8, 2, 8))


def test_meta_tensors_are_refused_wherever_they_are():
    with pytest.raises(ValueError, match=r"^k: device meta; allowed: cpu or cuda$"):
        attnkit.attention(randn(1, 8, 2, 8), _meta(1, 8, 2, 8), randn(1, 8, 2, 8))
    with pytest.raises(ValueError, match=r"^q: device meta"):
        attnkit.attention(_meta(1, 8, 2, 8), _meta(1, 8, 2, 8), _meta(1, 8, 2, 8))
    with pytest.raises(ValueError, match=r"^a: device meta; allowed: cpu or cuda$"):
        attnkit.gemm(_meta(2, 3), randn(3, 4))
    with pytest.raises(ValueError, match=r"^b: device meta; allowed: cpu or cuda$"):
        attnkit.gemm(randn(2, 3), _meta(3, 4))
    with pytest.raises(ValueError, match=r"^initial_state: device meta"):
        attnkit.retention(randn(1, 8, 2, 4), randn(1, 8, 2, 4), randn(1, 8, 2, 4), initial_state=_meta(1, 2, 4, 4))


def test_mixed_devices_name_the_argument_and_the_device_allowed():
    cpu = types.SimpleNamespace(device=torch.device("cpu"))
    cuda = types.SimpleNamespace(device=torch.device("cuda", 0))
    with pytest.raises(ValueError, match=r"^v: device cuda:0 differs from q's device cpu; allowed: cpu, all tensors"):
        _launch.common_device((cpu, None, cuda), ("q", "k", "v"))


def test_fake_tensors_still_reach_the_fake_implementations():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        q = torch.empty(1, 8, 2, 8)
        out, lse = _attention_ops.attention_forward(q, q, q, None, None, 0, 0, [], [], [], [], 0, 0, None)
        retained, state = _retention_ops.retention_forward(q, q, q, None, None, 1, 4, False, None)
        product = _gemm_ops.gemm(torch.empty(2, 3), torch.empty(3, 4), False)
    assert out.shape == (1, 8, 2, 8) and lse.shape == (1, 8, 2)
    assert retained.shape == (1, 8, 2, 8) and state.shape == (1, 2, 8, 8)
    assert product.shape == (2, 4)
