"""Numerical robustness of the public ops on hard inputs (docs/reliability.md, "Numerical robustness"):
logits of magnitude 1e4, all-equal scores, fp16 values near the top of its range, long sequences,
rows without keys, NaN / infinity in the inputs, and retention with decays at both extremes.

Every case runs on CPU tensors and on CUDA tensors; the CUDA cases are skipped, with the reason,
when torch sees no CUDA device or libattnkit was built without CUDA, and with the library's answer
when it does not cover the problem (ATTNKIT_UNSUPPORTED). The GPU kernels take fp16 and bf16.
References are float64 (tests/python/reference.py, differentiated by torch autograd), tolerances
DESIGN §5's relative L2 errors."""

import math

import pytest
import torch

import attnkit
import reference
from gpu_support import skip_if_unsupported


def _cuda_missing():
    if not torch.cuda.is_available():
        return "no CUDA device visible to torch (GPU suites run on the GPU machine)"
    try:
        info = attnkit.library_info()
    except Exception as error:  # noqa: BLE001 - reported as the skip reason
        return f"libattnkit not loadable: {error}"
    if not info["cuda_compiled"]:
        return f"{info['path']} was built without CUDA (ATTNKIT_WITH_CUDA=OFF)"
    return None


_NO_CUDA = _cuda_missing()
_ON_CUDA = pytest.mark.skipif(_NO_CUDA is not None, reason=_NO_CUDA or "")
TOLERANCE = reference.TOLERANCE


def _lse_tolerance(device):
    """lse is float32 in both; the GPU sums its exponentials (ex2.approx) in float32 over up to 131072
    keys here: 3e-6 measured on an H200, hence its looser bound."""
    return 1e-5 if device == "cuda" else 1e-6


def _cases(cpu_dtypes, cuda_dtypes=(torch.float16, torch.bfloat16)):
    """(device, dtype) parameters: CUDA ones marked to skip without a CUDA device or build."""
    cases = [pytest.param("cpu", d, id=f"cpu-{str(d)[6:]}") for d in cpu_dtypes]
    cases += [pytest.param("cuda", d, id=f"cuda-{str(d)[6:]}", marks=_ON_CUDA) for d in cuda_dtypes]
    return cases


ALL = _cases([torch.float64, torch.float32, torch.float16, torch.bfloat16])
LOW = _cases([torch.float16], [torch.float16])
DEVICES = [pytest.param("cpu", id="cpu"), pytest.param("cuda", id="cuda", marks=_ON_CUDA)]


def _grads(out, inputs, grad_out):
    return torch.autograd.grad(out, inputs, grad_out)


def _grad_tolerance(dtype, lse):
    """DESIGN §5's tolerance plus what the float32 LSE costs: the backward recomputes P = exp(s - lse)
    from it, so every gradient is off by up to |lse| * 2^-24 relative (6e-4 at |lse| = 1e4; above the
    float64 tolerance at any |lse| and above fp32's at large logits; docs/reliability.md)."""
    finite = lse[torch.isfinite(lse)]
    largest = finite.abs().max().item() if finite.numel() else 0.0
    return TOLERANCE[dtype] + 2 * largest * 2.0**-24


def _reference_grads(q, k, v, grad_out, **mask):
    """float64 gradients of reference.attention on the same (rounded) values."""
    exact = [t.detach().double().requires_grad_() for t in (q, k, v)]
    out, _ = reference.attention(*exact, **mask)
    return _grads(out, exact, grad_out.double())


def _large_offsets(batch, tokens, heads, dtype, device):
    """q = (+-2496 x 8, a/8 x 8), k = (2 x 8, b/8 x 8), |a|, |b| <= 8: scores +-9984 plus a spread of about
    1, exact in every dtype and in the fp32 accumulator (D = 16, scale 1/4)."""
    q = torch.randint(-8, 9, (batch, tokens, heads, 16)).double() / 8
    k = torch.randint(-8, 9, (batch, tokens, heads, 16)).double() / 8
    sign = torch.tensor([1.0, -1.0]).repeat(tokens)[:tokens, None, None]
    q[..., :8] = 2496.0 * sign
    k[..., :8] = 2.0
    return q.to(device, dtype), k.to(device, dtype)


# ---- large logits ------------------------------------------------------------------------------


@pytest.mark.parametrize("device,dtype", ALL)
@pytest.mark.parametrize("is_causal", [False, True])
def test_logits_of_magnitude_1e4_give_finite_exact_forward_and_backward(device, dtype, is_causal):
    q, k = _large_offsets(2, 67, 2, dtype, device)
    v = torch.randn(2, 67, 2, 16, device=device, dtype=dtype)
    mask = {"mask": reference.causal_mask(67, 67).to(device)} if is_causal else {}
    with skip_if_unsupported(f"attention {dtype} on {device}"):
        out, lse = attnkit.attention(q, k, v, is_causal=is_causal, return_lse=True)
    expected, expected_lse = reference.attention(q, k, v, **mask)
    assert torch.isfinite(out).all() and torch.isfinite(lse).all()
    assert lse.abs().min().item() > 9000.0
    assert reference.relative_l2(out, expected) <= TOLERANCE[dtype]
    assert reference.relative_l2(lse, expected_lse) <= _lse_tolerance(device)
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    grad_out = torch.randn_like(out)
    with skip_if_unsupported(f"attention backward {dtype} on {device}"):
        grads = _grads(attnkit.attention(q, k, v, is_causal=is_causal), (q, k, v), grad_out)
    for grad, expected_grad in zip(grads, _reference_grads(q, k, v, grad_out, **mask)):
        assert torch.isfinite(grad).all()
        assert reference.relative_l2(grad, expected_grad) <= _grad_tolerance(dtype, lse)


@pytest.mark.parametrize("device,dtype", ALL)
def test_random_logits_of_magnitude_1e4_match_the_reference(device, dtype):
    q, k = ((torch.rand(2, 67, 2, 16, device=device) * 200 - 100).to(dtype) for _ in range(2))
    v = torch.randn(2, 67, 2, 16, device=device, dtype=dtype)
    with skip_if_unsupported(f"attention {dtype} on {device}"):
        out, lse = attnkit.attention(q, k, v, return_lse=True)
    expected, expected_lse = reference.attention(q, k, v)
    assert reference.relative_l2(out, expected) <= TOLERANCE[dtype]
    assert reference.relative_l2(lse, expected_lse) <= _lse_tolerance(device)


# ---- all-equal scores ------------------------------------------------------------------------------


@pytest.mark.parametrize("device,dtype", ALL)
@pytest.mark.parametrize("equal", ["zero queries", "constant keys"])
def test_equal_scores_give_the_running_mean_of_the_values(device, dtype, equal):
    q = torch.randn(2, 37, 2, 16, device=device, dtype=dtype)
    k = torch.randn(2, 37, 2, 16, device=device, dtype=dtype)
    v = torch.randn(2, 37, 2, 16, device=device, dtype=dtype)
    if equal == "zero queries":
        q.zero_()
    else:
        k = k[:, :1].expand_as(k).contiguous()
    with skip_if_unsupported(f"causal attention {dtype} on {device}"):
        out, lse = attnkit.attention(q, k, v, is_causal=True, return_lse=True)
    count = torch.arange(1, 38, device=device, dtype=torch.float64)[None, :, None]
    running_mean = v.double().cumsum(dim=1) / count[..., None]
    common = (q.double() * k.double()[:, :1]).sum(-1) / 4.0
    assert reference.relative_l2(out, running_mean) <= TOLERANCE[dtype]
    assert reference.relative_l2(lse, count.log() + common) <= _lse_tolerance(device)
    if equal == "zero queries":
        q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
        grad_out = torch.randn_like(out)
        with skip_if_unsupported(f"causal attention backward {dtype} on {device}"):
            dq, dk, dv = _grads(attnkit.attention(q, k, v, is_causal=True), (q, k, v), grad_out)
        # dK = scale * sum_i dS_ij q_i = 0; dV_j = sum_{i >= j} dO_i / (i + 1).
        assert (dk == 0).all()
        expected_dv = (grad_out.double() / count[..., None]).flip(1).cumsum(1).flip(1)
        assert reference.relative_l2(dv, expected_dv) <= _grad_tolerance(dtype, lse)
        mask = {"mask": reference.causal_mask(37, 37).to(device)}
        expected_dq = _reference_grads(q, k, v, grad_out, **mask)[0]
        assert reference.relative_l2(dq, expected_dq) <= _grad_tolerance(dtype, lse)


# ---- fp16 near the top of its range ------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_fp16_values_near_the_range_limit_give_an_output_in_range(device):
    magnitude = torch.rand(2, 37, 2, 16, device=device) * (65504 - 3e4) + 3e4
    v = (magnitude * torch.tensor([1.0, -1.0], device=device).repeat(8)).half()
    q, k = (torch.randn(2, 37, 2, 16, device=device, dtype=torch.float16) for _ in range(2))
    with skip_if_unsupported(f"causal attention float16 on {device}"):
        out, lse = attnkit.attention(q, k, v, is_causal=True, return_lse=True)
    expected, expected_lse = reference.attention(q, k, v, reference.causal_mask(37, 37).to(device))
    assert torch.isfinite(out).all() and out.abs().max().item() <= 65504
    assert reference.relative_l2(out, expected) <= TOLERANCE[torch.float16]
    assert reference.relative_l2(lse, expected_lse) <= _lse_tolerance(device)
    # The mean of the largest finite value is that value, not inf.
    top = torch.full_like(v, 65504.0)
    top[:, :, 1] = -65504.0
    with skip_if_unsupported(f"causal attention float16 on {device}"):
        out = attnkit.attention(q, k, top, is_causal=True)
    assert torch.equal(out, top)


@pytest.mark.parametrize("device", DEVICES)
def test_fp16_logits_beyond_the_fp16_range_keep_the_lse_finite(device):
    # The CUDA kernels' documented limit (docs/reliability.md): exp2(FFMA(s, c, -round(m * c))) leaves the
    # rounding of m * c (up to 2^6 at 1e9) in every probability of a row, and P overflows (or flushes to
    # 0) when it is converted to fp16 for the P.V product; that case is CPU-only.
    if device == "cuda":
        pytest.skip("documented limit of the CUDA kernels: scores beyond ~1e8 lose the exponent's precision "
                    "(docs/reliability.md, Numerical robustness)")
    sign = torch.randint(0, 2, (2, 2, 37, 2, 16), device=device) * 2 - 1
    q, k = ((torch.rand(2, 37, 2, 16, device=device) * 2e4 + 1e4) * sign[i] for i in range(2))
    q, k, v = q.half(), k.half(), torch.randn(2, 37, 2, 16, device=device, dtype=torch.float16)
    with skip_if_unsupported(f"attention float16 on {device}"):
        out, lse = attnkit.attention(q, k, v, return_lse=True)
    expected, expected_lse = reference.attention(q, k, v)
    assert torch.isfinite(lse).all() and lse.abs().max().item() > 1e8
    assert reference.relative_l2(out, expected) <= TOLERANCE[torch.float16]
    assert reference.relative_l2(lse, expected_lse) <= _lse_tolerance(device)


# ---- long sequences ---------------------------------------------------------------------------------


@pytest.mark.parametrize("device,dtype", _cases([torch.float32, torch.bfloat16]))
def test_long_kv_cache_accumulates_within_tolerance(device, dtype):
    keys = 65536 if device == "cpu" else 131072
    q = torch.randn(1, 5, 2, 16, device=device, dtype=dtype, requires_grad=True)
    k, v = (torch.randn(1, keys, 2, 16, device=device, dtype=dtype, requires_grad=True) for _ in range(2))
    with skip_if_unsupported(f"bottom-right causal attention {dtype} on {device}"):
        out, lse = attnkit.attention(q, k, v, is_causal=True, causal_alignment="bottom_right", return_lse=True)
    mask = {"mask": reference.causal_mask(5, keys, bottom_right=True).to(device)}
    expected, expected_lse = reference.attention(q, k, v, **mask)
    assert reference.relative_l2(out, expected) <= TOLERANCE[dtype]
    assert reference.relative_l2(lse, expected_lse) <= _lse_tolerance(device)
    grad_out = torch.randn_like(out)
    with skip_if_unsupported(f"bottom-right causal attention backward {dtype} on {device}"):
        grads = _grads(out, (q, k, v), grad_out)
    for grad, expected_grad in zip(grads, _reference_grads(q, k, v, grad_out, **mask)):
        assert reference.relative_l2(grad, expected_grad) <= _grad_tolerance(dtype, lse)


# ---- rows without keys -------------------------------------------------------------------------------


def _no_key_problem(kind, device):
    """(call, mask [Sq, Sk], rows without keys): a problem of one mask kind that leaves rows without keys."""
    if kind == "block":
        blocks = torch.rand(1, 1, 5, 5) < 0.7  # 4 x 5 blocks over 19 x 23: block row 1 empty
        blocks[..., 1, :] = False
        blocks[..., 0, 0] = True

        def call(q, k, v, **kw):
            return attnkit.sparse_attention(q, k, v, block_mask=blocks.to(device), block_size=(4, 5), **kw)
        return call, reference.block_to_element_mask(blocks, 19, 23, 4, 5)[0, 0], [4, 5, 6, 7]
    if kind == "bottom-right causal":  # Sq = 13 > Sk = 9: query i sees keys [0, i - 4]

        def call(q, k, v, **kw):
            return attnkit.attention(q, k, v, is_causal=True, causal_alignment="bottom_right", **kw)
        return call, reference.causal_mask(13, 9, bottom_right=True), [0, 1, 2, 3]
    if kind == "element":
        mask = torch.rand(23, 29) < 0.5
        mask[[3, 20]] = False
        rows = [3, 20]
    else:
        mask = torch.zeros(11, 14, dtype=torch.bool)
        rows = list(range(11))

    def call(q, k, v, **kw):
        return attnkit.attention(q, k, v, mask=mask.to(device), **kw)
    return call, mask, rows


@pytest.mark.parametrize("device,dtype", ALL)
@pytest.mark.parametrize("kind", ["element", "block", "bottom-right causal", "all false"])
def test_rows_without_keys_give_zeros_minus_infinity_and_zero_gradients(device, dtype, kind):
    call, mask, rows = _no_key_problem(kind, device)
    sq, sk = mask.shape
    q = torch.randn(2, sq, 2, 16, device=device, dtype=dtype, requires_grad=True)
    k, v = (torch.randn(2, sk, 2, 16, device=device, dtype=dtype, requires_grad=True) for _ in range(2))
    with skip_if_unsupported(f"{kind} attention {dtype} on {device}"):
        out, lse = call(q, k, v, return_lse=True)
    expected, expected_lse = reference.attention(q, k, v, mask.to(device))
    assert not torch.isnan(out).any() and not torch.isnan(lse).any()
    assert (out[:, rows] == 0).all() and (lse[:, rows] == -math.inf).all()
    assert reference.relative_l2(out, expected) <= TOLERANCE[dtype]
    finite = torch.isfinite(expected_lse)
    assert reference.relative_l2(lse[finite], expected_lse[finite]) <= _lse_tolerance(device)
    grad_out = torch.randn_like(out)
    with skip_if_unsupported(f"{kind} attention backward {dtype} on {device}"):
        dq, dk, dv = _grads(out, (q, k, v), grad_out)
    assert not any(torch.isnan(g).any() for g in (dq, dk, dv))
    assert (dq[:, rows] == 0).all()
    unattended = ~mask.any(dim=0)
    assert (dk[:, unattended.to(device)] == 0).all() and (dv[:, unattended.to(device)] == 0).all()
    for grad, expected_grad in zip((dq, dk, dv), _reference_grads(q, k, v, grad_out, mask=mask.to(device))):
        assert reference.relative_l2(grad, expected_grad) <= _grad_tolerance(dtype, lse)


# ---- NaN and infinity in the inputs ----------------------------------------------------------------


def _poisoned(device, dtype, which, value=math.nan):
    """Causal problem of 40 tokens, batch 2, 2 heads; `value` at token 30 of batch 0, head 0 of `which`."""
    q, k, v = (torch.randn(2, 40, 2, 16, device=device, dtype=dtype) for _ in range(3))
    {"q": q, "k": k, "v": v}[which][0, 30, 0, 3] = value
    return q, k, v


@pytest.mark.parametrize("device,dtype", ALL)
@pytest.mark.parametrize("which", ["q", "k", "v"])
def test_nan_reaches_the_rows_that_depend_on_it_and_no_other_slice(device, dtype, which):
    q, k, v = _poisoned(device, dtype, which)
    with skip_if_unsupported(f"causal attention {dtype} on {device}"):
        out, lse = attnkit.attention(q, k, v, is_causal=True, return_lse=True)
    expected, expected_lse = reference.attention(q, k, v, reference.causal_mask(40, 40).to(device))
    affected = [30] if which == "q" else list(range(30, 40))
    assert torch.isnan(out[0, affected, 0]).any(dim=-1).all(), "a NaN input was dropped silently"
    # Other (batch, head) slices are exact.
    assert reference.relative_l2(out[1], expected[1]) <= TOLERANCE[dtype]
    assert reference.relative_l2(out[0, :, 1], expected[0, :, 1]) <= TOLERANCE[dtype]
    if which == "v":
        assert torch.isfinite(lse).all(), "the LSE does not read V"
        assert reference.relative_l2(lse, expected_lse) <= _lse_tolerance(device)
    elif device == "cpu":
        # A NaN score makes its row's LSE NaN, never -inf (the mark of a row without keys), and rows
        # that do not read the NaN are exact.
        assert torch.isnan(lse[0, affected, 0]).all()
        others = [i for i in range(40) if i not in affected]
        assert reference.relative_l2(out[0, others, 0], expected[0, others, 0]) <= TOLERANCE[dtype]


@pytest.mark.parametrize("device,dtype", ALL)
def test_an_infinite_key_component_is_ignored_where_its_score_is_minus_infinity(device, dtype):
    q, k, v = _poisoned(device, dtype, "k", -math.inf)
    q[0, :, 0, 3] = 0.5  # every score with key 30 is -inf: the key is ignored as if masked ...
    q[0, 35, 0, 3] = -0.75  # ... except for row 35, where it is +inf: inf - inf gives NaN
    with skip_if_unsupported(f"causal attention {dtype} on {device}"):
        out = attnkit.attention(q, k, v, is_causal=True)
    expected, _ = reference.attention(q, k, v, reference.causal_mask(40, 40).to(device))
    assert torch.isnan(out[0, 35, 0]).any()
    rows = [i for i in range(40) if i != 35]
    assert reference.relative_l2(out[0, rows], expected[0, rows]) <= TOLERANCE[dtype]
    assert reference.relative_l2(out[1], expected[1]) <= TOLERANCE[dtype]


# ---- retention -------------------------------------------------------------------------------------

MODES = ["chunk", "parallel", "recurrent"]


def _recurrent_drift(gamma, steps):
    """The recurrent form decays by float32(gamma)^t: T * |float32(gamma) / gamma - 1| off, relative."""
    return max(steps * abs(torch.tensor(g, dtype=torch.float32).item() / g - 1) for g in gamma)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("gamma", [[1 - 1e-6, 1 - 2.0**-12], [0.5, 1e-3], [1e-30, 1e-30]],
                         ids=["close to 1", "underflowing", "diagonal only"])
def test_retention_with_extreme_decays_over_long_sequences(device, mode, gamma):
    steps = 2048
    q = torch.rand(1, steps, 2, 4, device=device) * 2 - 1
    k, v = (torch.rand(1, steps, 2, 4, device=device) for _ in range(2))  # positive: the state grows
    state = torch.randn(1, 2, 4, 4, device=device)
    with skip_if_unsupported(f"retention ({mode}) on {device}"):
        out, final = attnkit.retention(q, k, v, gamma=gamma, mode=mode, initial_state=state, output_final_state=True)
    expected, expected_final = reference.retention(q, k, v, gamma=gamma, initial_state=state)
    tolerance = 1e-5 + (_recurrent_drift(gamma, steps) if mode == "recurrent" else 0.0)
    assert torch.isfinite(out).all() and torch.isfinite(final).all()
    assert reference.relative_l2(out, expected) <= tolerance
    assert reference.relative_l2(final, expected_final) <= tolerance


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", MODES)
def test_retention_gradients_with_extreme_decays(device, mode):
    gamma, steps = [1 - 1e-6, 1e-3], 512
    q, k, v = (torch.rand(1, steps, 2, 4, device=device, requires_grad=True) for _ in range(3))
    grad_out = torch.randn(1, steps, 2, 4, device=device)
    with skip_if_unsupported(f"retention ({mode}) on {device}"):
        out, _ = attnkit.retention(q, k, v, gamma=gamma, mode=mode)
        grads = _grads(out, (q, k, v), grad_out)
    exact = [t.detach().double().requires_grad_() for t in (q, k, v)]
    expected = _grads(reference.retention(*exact, gamma=gamma)[0], exact, grad_out.double())
    tolerance = 1e-5 + (_recurrent_drift(gamma, steps) if mode == "recurrent" else 0.0)
    for grad, expected_grad in zip(grads, expected):
        assert reference.relative_l2(grad, expected_grad) <= tolerance
