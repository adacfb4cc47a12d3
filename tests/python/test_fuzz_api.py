"""Property-based fuzzing of the Python API with Hypothesis (issue #23, reliability item 3).

Random shapes, strides (padded, permuted, non-contiguous last dimension), dtypes, mask kinds, kernel
sizes, dilations, strides, causal flags, scales and positional biases go through attnkit.attention,
sparse_attention, na1d/na2d/na3d, retention and gemm on CPU tensors, together with targeted mistakes
(wrong ranks, heads that do not divide, mismatched head dims or batches, integer dtypes, non-tensors,
bad scales, oversized kernels, bad decays). The property of every call: either a result equal to the
plain-PyTorch reference of tests/python/reference.py within the dtype's tolerance (gradients too, for
some float32/float64 calls), or an exception of type ValueError, TypeError or RuntimeError with a
non-empty message; never a crash or another exception type. A call built valid must succeed, a call
with a mistake must raise.

Bounded and reproducible: derandomize=True (the examples are a function of the test's source), no
example database, max_examples per test and a per-example deadline; the whole file runs in well under
60 s on 2 cores. Set ATTNKIT_FUZZ_EXAMPLES to run more examples locally.
"""

import datetime
import math
import os

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (scripts/install-deps installs it)")
pytest.importorskip("hypothesis", reason="Hypothesis is not installed (scripts/install-deps installs it)")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import attnkit  # noqa: E402
import reference  # noqa: E402

ALLOWED_ERRORS = (ValueError, TypeError, RuntimeError)
FLOAT_DTYPES = [torch.float32, torch.float32, torch.float64, torch.float16, torch.bfloat16]


def fuzz_settings(examples):
    return settings(
        max_examples=int(os.environ.get("ATTNKIT_FUZZ_EXAMPLES", examples)),
        deadline=datetime.timedelta(seconds=10),  # a hang or a pathological slowdown fails the example
        derandomize=True,
        database=None,
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    )


class Case:
    """What the generator knows about one call: valid (must succeed) or broken by a named mistake (must
    raise)."""

    def __init__(self):
        self.mistakes = []

    def mistake(self, name):
        self.mistakes.append(name)

    @property
    def valid(self):
        return not self.mistakes


def run(case, fn, *args, **kwargs):
    """Calls fn; returns its result, or None after checking that the refusal is an allowed exception type with
    a message. Any other exception type propagates and fails the test."""
    try:
        result = fn(*args, **kwargs)
    except ALLOWED_ERRORS as error:
        assert str(error).strip(), f"{type(error).__name__} raised without a message"
        assert not case.valid, f"a valid call raised {type(error).__name__}: {error}"
        return None
    assert case.valid, f"a call with the mistake(s) {case.mistakes} was accepted"
    return result


def tensor(draw, shape, dtype, generator, layout=None):
    """A tensor of `shape` in a layout drawn from: contiguous, padded rows, permuted non-last dims, or a
    non-contiguous last dimension (every layout is valid: the library copies what it cannot read)."""
    layout = layout or draw(st.sampled_from(["contiguous", "contiguous", "padded", "permuted", "last_strided"]))
    shape = tuple(shape)
    if layout == "padded" and len(shape) >= 1:
        base = torch.randn(shape[:-1] + (shape[-1] + 3,), generator=generator, dtype=torch.float64)
        t = base[..., : shape[-1]]
    elif layout == "permuted" and len(shape) >= 3:
        perm = list(range(len(shape) - 1))
        perm[0], perm[-1] = perm[-1], perm[0]
        permuted_shape = tuple(shape[p] for p in perm) + (shape[-1],)
        base = torch.randn(permuted_shape, generator=generator, dtype=torch.float64)
        t = base.permute(*perm, len(shape) - 1)
    elif layout == "last_strided" and len(shape) >= 1:
        base = torch.randn(shape[:-1] + (2 * shape[-1],), generator=generator, dtype=torch.float64)
        t = base[..., ::2]
    else:
        t = torch.randn(shape, generator=generator, dtype=torch.float64)
    assert tuple(t.shape) == shape
    return t.to(dtype)


def check_close(actual, expected, dtype, what, factor=1.0):
    assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)}, expected {tuple(expected.shape)}"
    if actual.numel() == 0:
        return
    actual = actual.detach().double()
    finite = torch.isfinite(expected)
    assert torch.equal(torch.isfinite(actual), finite), f"{what}: non-finite where the reference is finite, or not"
    assert torch.equal(actual[~finite], expected[~finite]), f"{what}: differs where the reference is infinite"
    error = reference.relative_l2(actual[finite], expected[finite])
    assert error <= factor * reference.TOLERANCE[dtype], f"{what}: relative L2 error {error:.3g} ({dtype})"


def scale_mistake(draw, case):
    """A scale the library must refuse, or None."""
    if not draw(st.booleans()):
        return None
    bad = draw(st.sampled_from([0.0, -1.0, float("nan"), float("inf"), float("-inf"), "0.5", True]))
    case.mistake(f"scale {bad!r}")
    return bad


def tokens_strategy(dims, largest):
    return st.lists(st.sampled_from([1, 2, 3, 4, 5, largest] + [0]), min_size=dims, max_size=dims)


# --- attention and sparse_attention ---------------------------------------------------------------


@fuzz_settings(250)
@given(st.data())
def test_attention_matches_the_reference_or_raises_a_clear_error(data):
    draw = data.draw
    case = Case()
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    dtype = draw(st.sampled_from(FLOAT_DTYPES))
    dims = draw(st.integers(1, 3))
    tokens = draw(tokens_strategy(dims, 9 if dims == 1 else 4))
    tokens_kv = tokens if draw(st.booleans()) else draw(tokens_strategy(draw(st.integers(1, 3)), 4))
    batch = draw(st.sampled_from([1, 1, 2, 0]))
    heads_kv = draw(st.integers(1, 2))
    heads = heads_kv * draw(st.integers(1, 3))
    head_dim = draw(st.integers(1, 16))
    head_dim_v = head_dim if draw(st.booleans()) else draw(st.integers(1, 16))
    sq, sk = math.prod(tokens), math.prod(tokens_kv)

    k_heads, k_dim, kv_batch = heads_kv, head_dim, batch
    mistake = draw(st.sampled_from([None] * 6 + ["heads", "head_dim", "batch", "rank", "int", "mixed", "list"]))
    if mistake == "heads":
        k_heads = heads + 1  # never divides Hq
    elif mistake == "head_dim":
        k_dim = head_dim + 1
    elif mistake == "batch":
        kv_batch = batch + 1
    if mistake in ("heads", "head_dim", "batch"):
        case.mistake(mistake)
    q = tensor(draw, (batch, *tokens, heads, head_dim), dtype, gen)
    k = tensor(draw, (kv_batch, *tokens_kv, k_heads, k_dim), dtype, gen)
    v = tensor(draw, (kv_batch, *tokens_kv, k_heads, head_dim_v), dtype, gen)
    if mistake == "rank":
        q = q.reshape(-1, head_dim)
        case.mistake("q of rank 2")
    elif mistake == "int":
        q = q.to(torch.int32)
        case.mistake("integer q")
    elif mistake == "mixed":
        v = v.to(torch.float64 if dtype != torch.float64 else torch.float32)
        case.mistake("v of another dtype")
    elif mistake == "list":
        k = k.tolist()
        case.mistake("k not a tensor")

    kwargs = {}
    mask_kind = draw(st.sampled_from(["none", "causal", "element", "element_2d", "block"]))
    ref_mask = None
    if mask_kind == "causal":
        alignment = draw(st.sampled_from(["top_left", "bottom_right"]))
        kwargs.update(is_causal=True, causal_alignment=alignment)
        ref_mask = reference.causal_mask(sq, sk, alignment == "bottom_right")
        if draw(st.integers(0, 9)) == 0:
            kwargs["causal_alignment"] = "middle"
            case.mistake("causal_alignment 'middle'")
    elif mask_kind in ("element", "element_2d"):
        shape = (sq, sk) if mask_kind == "element_2d" else (draw(st.sampled_from([1, batch])),
                                                              draw(st.sampled_from([1, heads])), sq, sk)
        mask = torch.rand(shape, generator=gen) < draw(st.sampled_from([0.0, 0.3, 0.8, 1.0]))
        ref_mask = mask
        bad = draw(st.sampled_from([None] * 5 + ["float", "shape", "with_causal"]))
        if bad == "float":
            mask = mask.float()
        elif bad == "shape":
            mask = torch.ones(shape[:-1] + (sk + 1,), dtype=torch.bool)
        elif bad == "with_causal":
            kwargs["is_causal"] = True
        if bad:
            case.mistake(f"mask {bad}")
        kwargs["mask"] = mask
    elif mask_kind == "block":
        block_q, block_k = draw(st.integers(1, 4)), draw(st.integers(1, 4))
        blocks = torch.rand(draw(st.sampled_from([1, batch])), draw(st.sampled_from([1, heads])),
                            -(-sq // block_q), -(-sk // block_k), generator=gen) < 0.6
        ref_mask = reference.block_to_element_mask(blocks, sq, sk, block_q, block_k)
        kwargs.update(block_mask=blocks, block_size=(block_q, block_k))
        if draw(st.integers(0, 7)) == 0:
            kwargs["block_size"] = 0
            case.mistake("block_size 0")

    scale = scale_mistake(draw, case) if draw(st.booleans()) else draw(st.sampled_from([None, 0.3, 1.0, 2.5]))
    kwargs["scale"] = scale
    want_grad = case.valid and dtype in (torch.float32, torch.float64) and draw(st.integers(0, 3)) == 0
    if want_grad:
        for t in (q, k, v):
            t.requires_grad_(True)
    fn = attnkit.sparse_attention if mask_kind == "block" else attnkit.attention
    result = run(case, fn, q, k, v, return_lse=True, **kwargs)
    if result is None:
        return
    out, lse = result
    assert out.shape == (batch, *tokens, heads, head_dim_v) and lse.shape == (batch, *tokens, heads)
    if q.numel() == 0 or k.numel() == 0:
        # Zero-size (the reference cannot reshape an empty batch): no key gives out 0 and lse -inf.
        assert torch.all(out == 0) and torch.all(lse == float("-inf"))
        return
    expected_out, expected_lse = reference.attention(q, k, v, mask=ref_mask, scale=scale)
    check_close(out, expected_out, dtype, "out")
    check_close(lse, expected_lse, torch.float32 if dtype == torch.float64 else dtype, "lse (float32)")
    # The reference's gradient is NaN in rows with no key (logsumexp of -inf only): compared without them.
    if want_grad and out.numel() and torch.isfinite(expected_lse).all():
        grad_out = torch.randn(out.shape, generator=gen, dtype=torch.float64).to(dtype)
        got = torch.autograd.grad(out, (q, k, v), grad_out)
        want = torch.autograd.grad(expected_out, (q, k, v), grad_out.double())
        # The backward reads the float32 LSE, so float64 gradients are float32-accurate (~1e-8 relative).
        grad_tolerance = torch.float32 if dtype == torch.float64 else dtype
        for name, g, w in zip(("grad_q", "grad_k", "grad_v"), got, want):
            check_close(g, w.double(), grad_tolerance, name, factor=10.0)


# --- neighborhood attention ------------------------------------------------------------------------


def positional_bias_reference(rpb, tokens, kernel, dilation, visible):
    """bias [Hq, S, S]: rpb[h, (key - query) / dilation + K - 1 per dimension] where the pair is visible."""
    import itertools

    coords = list(itertools.product(*[range(t) for t in tokens]))
    bias = torch.zeros(rpb.shape[0], len(coords), len(coords), dtype=torch.float64)
    for i, qc in enumerate(coords):
        for j, kc in enumerate(coords):
            if visible[i, j]:
                index = tuple((kc[d] - qc[d]) // dilation[d] + kernel[d] - 1 for d in range(len(tokens)))
                bias[:, i, j] = rpb[(slice(None),) + index].double()
    return bias


def attention_with_bias(q, k, v, mask, bias, scale):
    """reference.attention with an additive score bias [Hq, Sq, Sk] (the rpb)."""
    batch, heads, dim = q.shape[0], q.shape[-2], q.shape[-1]
    kv_heads, dim_v = k.shape[-2], v.shape[-1]
    tokens = q.shape[1:-2]
    scale = 1.0 / math.sqrt(dim) if scale is None else scale
    qf = q.double().reshape(batch, -1, heads, dim).transpose(1, 2)
    kf = k.double().reshape(batch, -1, kv_heads, dim).transpose(1, 2).repeat_interleave(heads // kv_heads, dim=1)
    vf = v.double().reshape(batch, -1, kv_heads, dim_v).transpose(1, 2).repeat_interleave(heads // kv_heads, dim=1)
    scores = (scale * qf @ kf.transpose(-1, -2) + bias).masked_fill(~mask, float("-inf"))
    out = torch.softmax(scores, dim=-1) @ vf  # every neighborhood row has keys
    return out.transpose(1, 2).reshape(batch, *tokens, heads, dim_v)


@fuzz_settings(200)
@given(st.data())
def test_neighborhood_attention_matches_the_reference_or_raises_a_clear_error(data):
    draw = data.draw
    case = Case()
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    dims = draw(st.integers(1, 3))
    fn = (attnkit.na1d, attnkit.na2d, attnkit.na3d)[dims - 1]
    dtype = draw(st.sampled_from(FLOAT_DTYPES))
    tokens = draw(st.lists(st.integers(1, 7 if dims == 1 else 4), min_size=dims, max_size=dims))
    kernel, dilation, stride, causal = [], [], [], []
    for extent in tokens:
        w = draw(st.integers(1, extent))
        d = draw(st.integers(1, extent // w))
        kernel.append(w)
        dilation.append(d)
        stride.append(draw(st.integers(1, w)))
        causal.append(draw(st.booleans()))
    use_rpb = draw(st.integers(0, 3)) == 0
    if use_rpb:
        stride, causal = [1] * dims, [False] * dims
    mistake = draw(st.sampled_from([None] * 5 + ["kernel", "stride", "dilation", "rank", "entries", "kernel_type"]))
    kernel_arg, stride_arg, dilation_arg = tuple(kernel), tuple(stride), tuple(dilation)
    if mistake == "kernel":
        kernel_arg = (tokens[0] // dilation[0] + 1,) + kernel_arg[1:]  # spans more than the extent
    elif mistake == "stride":
        stride_arg = (kernel[0] + 1,) + stride_arg[1:]
    elif mistake == "dilation":
        dilation_arg = (draw(st.sampled_from([0, -1])),) + dilation_arg[1:]
    elif mistake == "entries":
        kernel_arg = kernel_arg + (1,)
    elif mistake == "kernel_type":
        kernel_arg = tuple(float(x) + 0.5 for x in kernel_arg)
    if mistake:
        case.mistake(mistake)
    # A single int stands for every dimension when they agree.
    if mistake is None and len(set(kernel_arg)) == 1 and draw(st.booleans()):
        kernel_arg = kernel_arg[0]
    batch = draw(st.sampled_from([1, 2]))
    heads_kv = draw(st.integers(1, 2))
    heads = heads_kv * draw(st.integers(1, 2))
    head_dim = draw(st.integers(1, 12))
    query = tensor(draw, (batch, *tokens, heads, head_dim), dtype, gen)
    key = tensor(draw, (batch, *tokens, heads_kv, head_dim), dtype, gen)
    value = tensor(draw, (batch, *tokens, heads_kv, draw(st.integers(1, 12))), dtype, gen)
    if mistake == "rank":
        query = query.unsqueeze(1)
    rpb = None
    if use_rpb:
        rpb_dtype = draw(st.sampled_from([torch.float32, dtype]))
        rpb = torch.randn((heads,) + tuple(2 * w - 1 for w in kernel), generator=gen).to(rpb_dtype)
    scale = scale_mistake(draw, case) if draw(st.integers(0, 3)) == 0 else draw(st.sampled_from([None, 0.5, 0]))
    if isinstance(scale, float) and scale == 0.0 and "scale 0.0" in case.mistakes:
        case.mistakes.remove("scale 0.0")  # NATTEN's convention: scale 0 means head_dim ** -0.5
        scale = 0
    result = run(case, fn, query, key, value, kernel_arg, stride_arg, dilation_arg, tuple(causal), scale=scale,
                 rpb=rpb)
    if result is None:
        return
    visible = reference.neighborhood_mask(tokens, kernel, dilation, stride, causal)
    ref_scale = None if not scale else scale
    if rpb is None:
        expected, _ = reference.attention(query, key, value, mask=visible, scale=ref_scale)
    else:
        bias = positional_bias_reference(rpb, tokens, kernel, dilation, visible)
        expected = attention_with_bias(query, key, value, visible, bias, ref_scale)
    check_close(result, expected, dtype, f"na{dims}d out")


# --- retention -------------------------------------------------------------------------------------


@fuzz_settings(200)
@given(st.data())
def test_retention_matches_the_reference_or_raises_a_clear_error(data):
    draw = data.draw
    case = Case()
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    dtype = draw(st.sampled_from(FLOAT_DTYPES))
    batch, steps = draw(st.integers(1, 2)), draw(st.integers(0, 11))
    heads, dim_k, dim_v = draw(st.integers(1, 3)), draw(st.integers(1, 8)), draw(st.integers(1, 8))
    mode = draw(st.sampled_from(["chunk", "chunkwise", "parallel", "recurrent"]))
    chunk_size = draw(st.sampled_from([1, 2, 3, 5, 64]))
    gamma_kind = draw(st.sampled_from(["default", "float", "list", "tensor"]))
    gammas = [draw(st.sampled_from([0.5, 0.9, 0.99, 1 - 2**-20, 1e-3])) for _ in range(heads)]
    gamma = {"default": None, "float": gammas[0], "list": gammas, "tensor": torch.tensor(gammas, dtype=torch.float64)}[gamma_kind]
    if gamma_kind == "float":
        gammas = [gammas[0]] * heads
    with_state = draw(st.booleans())
    normalize = mode == "parallel" and not with_state and draw(st.integers(0, 2)) == 0
    q = tensor(draw, (batch, steps, heads, dim_k), dtype, gen)
    k = tensor(draw, (batch, steps, heads, dim_k), dtype, gen)
    v = tensor(draw, (batch, steps, heads, dim_v), dtype, gen)
    state_dtype = torch.float64 if dtype == torch.float64 else torch.float32
    initial_state = torch.randn(batch, heads, dim_k, dim_v, generator=gen).to(state_dtype) if with_state else None
    mistake = draw(st.sampled_from([None] * 6 + ["gamma", "gamma_count", "chunk", "chunk_type", "mode", "shape",
                                                 "state", "normalize", "int"]))
    if mistake == "gamma":
        gamma = [draw(st.sampled_from([0.0, 1.0, 1.5, -0.5, float("nan")]))] * heads
    elif mistake == "gamma_count":
        gamma = [0.9] * (heads + 1)
    elif mistake == "chunk":
        chunk_size = draw(st.sampled_from([0, -1]))
        mode = "chunk"
    elif mistake == "chunk_type":
        chunk_size = 2.0
    elif mistake == "mode":
        mode = "fast"
    elif mistake == "shape":
        k = k[..., :-1] if dim_k > 1 else torch.cat([k, k], dim=-1)
    elif mistake == "state":
        initial_state = torch.zeros(batch, heads, dim_k + 1, dim_v, dtype=state_dtype)
        normalize = False
    elif mistake == "normalize":
        normalize, initial_state = True, torch.zeros(batch, heads, dim_k, dim_v, dtype=state_dtype)
    elif mistake == "int":
        v = v.to(torch.int64)
    if mistake:
        case.mistake(mistake)
    scale = scale_mistake(draw, case) if draw(st.integers(0, 4)) == 0 else draw(st.sampled_from([None, 0.25]))
    output_final_state = draw(st.booleans()) and not normalize
    result = run(case, attnkit.retention, q, k, v, gamma=gamma, mode=mode, chunk_size=chunk_size,
                 initial_state=initial_state, output_final_state=output_final_state, normalize=normalize,
                 scale=scale)
    if result is None:
        return
    out, final_state = result
    expected_out, expected_final = reference.retention(q, k, v, gamma=None if gamma_kind == "default" else gammas,
                                                       initial_state=initial_state, scale=scale, normalize=normalize)
    check_close(out, expected_out, dtype, f"retention ({mode}) out")
    if output_final_state:
        check_close(final_state, expected_final, dtype, f"retention ({mode}) final_state")
    else:
        assert final_state is None


# --- gemm --------------------------------------------------------------------------------------------


@fuzz_settings(200)
@given(st.data())
def test_gemm_matches_the_reference_or_raises_a_clear_error(data):
    draw = data.draw
    case = Case()
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    dtype = draw(st.sampled_from(FLOAT_DTYPES))
    m, n, inner = draw(st.integers(0, 9)), draw(st.integers(0, 9)), draw(st.integers(0, 9))
    batch = draw(st.sampled_from([None, 1, 2, 3]))
    a_batch = (batch,) if batch is not None and draw(st.integers(0, 3)) else ()
    b_batch = (batch if draw(st.booleans()) else 1,) if batch is not None and draw(st.integers(0, 3)) else ()

    def operand(batch_dims, rows, cols):
        # Row- or column-major, packed or with padded rows: what gemm takes without a copy (other strides
        # are refused with a ValueError, which the property allows but a valid call may not give).
        layout = draw(st.sampled_from(["contiguous", "padded"]))
        if draw(st.booleans()):  # column-major: the transpose of a row-major tensor
            return tensor(draw, batch_dims + (cols, rows), dtype, gen, layout=layout).transpose(-1, -2)
        return tensor(draw, batch_dims + (rows, cols), dtype, gen, layout=layout)

    a = operand(a_batch, m, inner)
    b = operand(b_batch, inner, n)
    mistake = draw(st.sampled_from([None] * 6 + ["inner", "rank1", "rank4", "int", "mixed", "batch"]))
    if mistake == "inner":
        b = operand(b_batch, inner + 1, n)
    elif mistake == "rank1":
        a = a.reshape(-1)
    elif mistake == "rank4":
        a = a.reshape((1, 1) + tuple(a.shape[-2:])) if a.dim() == 2 else a.unsqueeze(0).unsqueeze(0)
    elif mistake == "int":
        b = b.to(torch.int32)
    elif mistake == "mixed":
        b = b.to(torch.float64 if dtype != torch.float64 else torch.float32)
    elif mistake == "batch":
        a = operand((2,), m, inner)
        b = operand((3,), inner, n)
    if mistake:
        case.mistake(mistake)
    allow_tf32 = draw(st.booleans())
    result = run(case, attnkit.gemm, a, b, allow_tf32=allow_tf32)
    if result is None:
        return
    expected = torch.matmul(a.double(), b.double())
    check_close(result, expected, dtype, "gemm", factor=30.0 if allow_tf32 and dtype == torch.float32 else 1.0)
