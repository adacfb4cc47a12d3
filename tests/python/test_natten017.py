"""NATTEN <= 0.17 compatibility (attnkit.natten017) and the fused relative positional bias (rpb=) of
attnkit.na1d/na2d/na3d, on CPU tensors in float64.

The reference here is written from NATTEN's documented behaviour, query by query in plain Python: a window of
kernel_size keys inside the query's dilation group, shifted inward at the borders, and the bias entry
"pb_start + ki" per dimension. Nothing in it comes from attnkit.
"""

import itertools

import pytest
import torch

import attnkit
from attnkit import natten017

torch.manual_seed(0)


def window_start(i, length, kernel, dilation):
    nh = kernel // 2
    if dilation <= 1:
        start = max(i - nh, 0)
        if i + nh >= length:
            start += length - i - nh - 1
        return start
    group, index = i % dilation, i // dilation
    group_length = len(range(group, length, dilation))
    start = max(index - nh, 0)
    if index + nh >= group_length:
        start += group_length - index - nh - 1
    return start * dilation + group


def pb_start(i, length, kernel, dilation):
    nh = kernel // 2
    if dilation <= 1:
        pb = nh
        if i < nh:
            pb += nh - i
        if i + nh >= length:
            pb += length - i - 1 - nh
        return pb
    if i - nh * dilation < 0:
        return kernel - 1 - i // dilation
    if i + nh * dilation >= length:
        return (length - i - 1) // dilation
    return nh


def reference(q, k, v, kernel, dilation, rpb, scale):
    """out [B, heads, *tokens, D] of heads-first q, k, v by NATTEN's rules, one query at a time."""
    b, h, *tokens, d = q.shape
    out = torch.empty_like(v)
    for query in itertools.product(*(range(t) for t in tokens)):
        starts = [window_start(i, t, kk, dd) for i, t, kk, dd in zip(query, tokens, kernel, dilation)]
        pbs = [pb_start(i, t, kk, dd) for i, t, kk, dd in zip(query, tokens, kernel, dilation)]
        scores, values = [], []
        for offsets in itertools.product(*(range(kk) for kk in kernel)):
            key = tuple(s + o * dd for s, o, dd in zip(starts, offsets, dilation))
            score = scale * (q[(slice(None), slice(None)) + query] * k[(slice(None), slice(None)) + key]).sum(-1)
            if rpb is not None:
                score = score + rpb[(slice(None),) + tuple(p + o for p, o in zip(pbs, offsets))]
            scores.append(score)
            values.append(v[(slice(None), slice(None)) + key])
        weights = torch.stack(scores, -1).softmax(-1)
        out[(slice(None), slice(None)) + query] = (weights[..., None] * torch.stack(values, -2)).sum(-2)
    return out


def heads_first(t):
    return t.movedim(-2, 1)


def heads_last(t):
    return t.movedim(1, -2)


CASES = [
    ([13], [5], [1]),
    ([17], [3], [4]),
    ([7, 9], [3, 5], [2, 1]),
    ([6, 5, 7], [3, 3, 3], [1, 1, 2]),
]


@pytest.mark.parametrize("tokens,kernel,dilation", CASES)
def test_fused_rpb_follows_nattens_window_and_bias_indexing(tokens, kernel, dilation):
    heads, d = 2, 4
    q, k, v = (torch.randn(2, *tokens, heads, d, dtype=torch.float64) for _ in range(3))
    rpb = torch.randn(heads, *(2 * kk - 1 for kk in kernel), dtype=torch.float64)
    na = (attnkit.na1d, attnkit.na2d, attnkit.na3d)[len(tokens) - 1]
    out = na(q, k, v, kernel, dilation=dilation, rpb=rpb)
    expected = heads_last(reference(heads_first(q), heads_first(k), heads_first(v), kernel, dilation, rpb, d ** -0.5))
    torch.testing.assert_close(out, expected, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("tokens,kernel,dilation", CASES)
def test_unfused_ops_match_the_reference(tokens, kernel, dilation):
    dims, heads, d = len(tokens), 2, 4
    q, k, v = (torch.randn(2, heads, *tokens, d, dtype=torch.float64) for _ in range(3))
    rpb = torch.randn(heads, *(2 * kk - 1 for kk in kernel), dtype=torch.float64)
    qk = getattr(natten017, f"natten{dims}dqkrpb")
    av = getattr(natten017, f"natten{dims}dav")
    attn = qk(q * d ** -0.5, k, rpb, kernel, dilation).softmax(-1)
    torch.testing.assert_close(av(attn, v, kernel, dilation), reference(q, k, v, kernel, dilation, rpb, d ** -0.5),
                               rtol=1e-10, atol=1e-10)


def test_fused_rpb_gradients_match_the_unfused_composition():
    tokens, kernel, dilation, heads, d = [7, 8], [3, 5], [2, 1], 2, 4
    q, k, v = (torch.randn(2, *tokens, heads, d, dtype=torch.float64, requires_grad=True) for _ in range(3))
    rpb = torch.randn(heads, 5, 9, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(2, *tokens, heads, d, dtype=torch.float64)
    fused = attnkit.na2d(q, k, v, kernel, dilation=dilation, rpb=rpb)
    grads = torch.autograd.grad((fused * weight).sum(), (q, k, v, rpb))
    attn = natten017.na2d_qk(heads_first(q) * d ** -0.5, heads_first(k), kernel, dilation, rpb=rpb).softmax(-1)
    unfused = heads_last(natten017.na2d_av(attn, heads_first(v), kernel, dilation))
    expected = torch.autograd.grad((unfused * weight).sum(), (q, k, v, rpb))
    torch.testing.assert_close(fused, unfused, rtol=1e-10, atol=1e-10)
    # The backward reads the forward's LSE, which is stored in float32: gradients carry its rounding (~1e-7).
    for name, got, want in zip(("q", "k", "v", "rpb"), grads, expected):
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6, msg=lambda m, n=name: f"grad {n}: {m}")


def test_rpb_gradcheck_and_lse_gradient():
    q, k, v = (torch.randn(1, 11, 2, 3, dtype=torch.float64, requires_grad=True) for _ in range(3))
    rpb = torch.randn(2, 9, dtype=torch.float64, requires_grad=True)
    # Finite differences of out (the LSE itself is float32, too coarse for them; its gradient is checked below).
    assert torch.autograd.gradcheck(lambda q, k, v, rpb: attnkit.na1d(q, k, v, 5, dilation=2, rpb=rpb),
                                    (q, k, v, rpb), atol=1e-5, rtol=1e-4)
    # d lse / d rpb through the library's LSE path against the unfused logsumexp.
    weight = torch.randn(1, 11, 2, dtype=torch.float64)
    _, lse = attnkit.na1d(q, k, v, 5, dilation=2, rpb=rpb, return_lse=True)
    got = torch.autograd.grad((lse * weight).sum(), (q, k, rpb))
    scores = natten017.na1d_qk(heads_first(q) * 3 ** -0.5, heads_first(k), 5, 2, rpb=rpb)
    want = torch.autograd.grad((heads_last(scores.logsumexp(-1)[..., None])[..., 0] * weight).sum(), (q, k, rpb))
    for name, a, b in zip(("q", "k", "rpb"), got, want):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5, msg=lambda m, n=name: f"lse grad {n}: {m}")


def test_rpb_in_float32_with_a_bfloat16_query():
    q, k, v = (torch.randn(1, 6, 6, 2, 8, dtype=torch.bfloat16) for _ in range(3))
    rpb = torch.randn(2, 5, 5)
    out = attnkit.na2d(q, k, v, 3, rpb=rpb)
    expected = attnkit.na2d(q.double(), k.double(), v.double(), 3, rpb=rpb.double())
    assert (out.double() - expected).norm() / expected.norm() < 1.5e-2


def test_rpb_errors_say_what_is_allowed():
    q = torch.randn(1, 8, 2, 4)
    with pytest.raises(ValueError, match=r"mask.rpb.*\[2, 5\]"):
        attnkit.na1d(q, q, q, 3, rpb=torch.zeros(2, 7))
    with pytest.raises(ValueError, match="stride 1 and no causal"):
        attnkit.na1d(q, q, q, 3, is_causal=True, rpb=torch.zeros(2, 5))
    with pytest.raises(ValueError, match="stride 1 and no causal"):
        attnkit.na1d(q, q, q, 3, stride=2, rpb=torch.zeros(2, 5))


# ---------------------------------------------------------------------------------------------
# Modules and checkpoints


class TinyNAT(torch.nn.Module):
    """A NAT-style stage written against NATTEN 0.17's documented module API."""

    def __init__(self, na_module, dim=16, heads=2, kernel=3, dilations=(1, 2)):
        super().__init__()
        self.blocks = torch.nn.ModuleList()
        for dilation in dilations:
            self.blocks.append(torch.nn.ModuleDict({
                "norm": torch.nn.LayerNorm(dim),
                "attn": na_module(dim=dim, num_heads=heads, kernel_size=kernel, dilation=dilation, rel_pos_bias=True,
                                  qkv_bias=True, attn_drop=0.0, proj_drop=0.0),
            }))

    def forward(self, x):
        for block in self.blocks:
            x = x + block["attn"](block["norm"](x))
        return x


def test_a_nat_style_checkpoint_with_rpb_loads_and_runs_fused():
    model = TinyNAT(natten017.NeighborhoodAttention2D).double().eval()
    state = model.state_dict()
    assert state["blocks.0.attn.rpb"].shape == (2, 5, 5)
    assert set(k.split(".", 3)[-1] for k in state if ".attn." in k) == {
        "qkv.weight", "qkv.bias", "rpb", "proj.weight", "proj.bias"}
    # A checkpoint saved by NATTEN 0.17 has exactly these names and shapes: load it into a fresh model.
    checkpoint = {name: torch.randn_like(value) for name, value in state.items()}
    fresh = TinyNAT(natten017.NeighborhoodAttention2D).double().eval()
    fresh.load_state_dict(checkpoint, strict=True)
    x = torch.randn(2, 9, 10, 16, dtype=torch.float64)
    out = fresh(x)
    # The same model through the unfused ops (what NATTEN 0.17 computes).
    expected = x
    for block in fresh.blocks:
        attn = block["attn"]
        y = block["norm"](expected)
        qkv = attn.qkv(y).reshape(2, 9, 10, 3, 2, 8)
        q, k, v = qkv.unbind(-3)
        o = heads_last(natten017.na2d_av(
            natten017.natten2dqkrpb(heads_first(q) * attn.scale, heads_first(k), attn.rpb, 3,
                                    attn.dilation).softmax(-1), heads_first(v), 3, attn.dilation))
        expected = expected + attn.proj(o.reshape(2, 9, 10, 16))
    torch.testing.assert_close(out, expected, rtol=1e-10, atol=1e-10)


def test_rpb_trains():
    module = natten017.NeighborhoodAttention1D(dim=8, num_heads=2, kernel_size=5, rel_pos_bias=True).double()
    before = module.rpb.detach().clone()
    optimizer = torch.optim.SGD(module.parameters(), lr=0.5)
    x = torch.randn(2, 12, 8, dtype=torch.float64)
    loss = module(x).square().mean()
    loss.backward()
    assert module.rpb.grad is not None and module.rpb.grad.abs().sum() > 0
    optimizer.step()
    assert not torch.equal(module.rpb.detach(), before)


def test_attention_dropout_in_training_takes_the_unfused_path_and_eval_is_fused():
    module = natten017.NeighborhoodAttention2D(dim=8, num_heads=2, kernel_size=3, rel_pos_bias=True,
                                               attn_drop=0.5).double()
    x = torch.randn(1, 6, 7, 8, dtype=torch.float64)
    module.eval()
    fused = module(x)
    module.attn_drop.p = 0.0  # training mode, unfused path, no dropout: the same function
    module.train()
    torch.testing.assert_close(module(x), fused, rtol=1e-10, atol=1e-10)


def test_inputs_smaller_than_a_window_are_padded_as_natten_does():
    module = natten017.NeighborhoodAttention2D(dim=8, num_heads=2, kernel_size=5, dilation=2,
                                               rel_pos_bias=True).double().eval()
    x = torch.randn(1, 6, 11, 8, dtype=torch.float64)  # height 6 < 5 * 2
    out = module(x)
    assert out.shape == x.shape
    padded = torch.nn.functional.pad(x, (0, 0, 0, 0, 0, 4))
    torch.testing.assert_close(out, module(padded)[:, :6], rtol=1e-10, atol=1e-10)


def test_even_kernels_are_refused_by_the_unfused_ops_but_run_fused():
    q = torch.randn(1, 2, 9, 4, dtype=torch.float64)
    with pytest.raises(ValueError, match="odd kernel size"):
        natten017.na1d_qk(q, q, 4)
    x = q.movedim(1, -2)
    assert attnkit.na1d(x, x, x, 4, rpb=torch.zeros(2, 7, dtype=torch.float64)).shape == x.shape


def test_the_older_bias_keyword_and_rpb_free_modules():
    with_bias = natten017.NeighborhoodAttention1D(8, 2, 3, bias=True)
    assert with_bias.rpb is not None
    without = natten017.NeighborhoodAttention1D(8, 2, 3)
    assert without.rpb is None and "rpb" not in without.state_dict()
    with pytest.raises(ValueError, match="rel_pos_bias=True with is_causal"):
        natten017.NeighborhoodAttention1D(8, 2, 3, is_causal=True, rel_pos_bias=True)


def test_rpb_through_the_custom_ops_under_torch_compile():
    q, k, v = (torch.randn(1, 7, 8, 2, 4, dtype=torch.float64, requires_grad=True) for _ in range(3))
    rpb = torch.randn(2, 5, 5, dtype=torch.float64, requires_grad=True)

    def f(q, k, v, rpb):
        return attnkit.na2d(q, k, v, 3, dilation=(2, 1), rpb=rpb)

    eager = f(q, k, v, rpb)
    eager_grads = torch.autograd.grad(eager.square().sum(), (q, k, v, rpb))
    compiled = torch.compile(f, backend="aot_eager", fullgraph=True)(q, k, v, rpb)
    compiled_grads = torch.autograd.grad(compiled.square().sum(), (q, k, v, rpb))
    torch.testing.assert_close(compiled, eager)
    for got, want in zip(compiled_grads, eager_grads):
        torch.testing.assert_close(got, want)


def test_the_custom_ops_pass_opcheck_with_rpb():
    q, k, v = (torch.randn(1, 7, 2, 4, dtype=torch.float64, requires_grad=True) for _ in range(3))
    rpb = torch.randn(2, 5, dtype=torch.float64, requires_grad=True)
    args = (q, k, v, None, None, 2, 0, [3], [1], [1], [False], 0, 0, None, rpb)
    torch.library.opcheck(torch.ops.attnkit.attention_forward.default, args)
