"""attnkit.retention with an explicit decay matrix [H|1, Tq, Tk] (parallel form): against its literal
definition with Tq != Tk, against the gamma forms when the matrix holds gamma's powers, float64 gradients
(gradcheck), the custom op's opcheck, the arguments it refuses, and on CUDA against the CPU."""

import pytest
import torch

import attnkit
import reference
from attnkit import _retention_ops
from conftest import randn


def decay_definition(q, k, v, decay, scale=None, normalize=False):
    """out[b, t, h] = sum_m s[t, m] / n_t v[b, m, h], s = scale * decay[h, t, m] (q_t . k_m), in float64."""
    qf, kf, vf = (t.detach().cpu().double().transpose(1, 2) for t in (q, k, v))  # [B, H, T, X]
    d = decay.detach().cpu().double()
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    scores = scale * (qf @ kf.transpose(-1, -2)) * d  # d broadcasts over B (and over H when shared)
    if normalize:
        scores = scores / scores.abs().sum(-1, keepdim=True).clamp(min=1.0)
    return (scores @ vf).transpose(1, 2)


def gamma_matrix(gamma, tokens, normalize):
    t = torch.arange(tokens, dtype=torch.float64)
    power = t[:, None] - t[None, :]
    g = torch.tensor(gamma, dtype=torch.float64)[:, None, None]
    d = torch.where(power >= 0, g ** power.clamp(min=0), torch.zeros(()))
    return d / d.sum(-1, keepdim=True).sqrt() if normalize else d


@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("normalize", [False, True])
@pytest.mark.parametrize("tq,tk", [(7, 13), (13, 5)])
def test_decay_matrix_matches_its_definition(tq, tk, normalize, shared):
    q, k, v = randn(2, tq, 3, 8), randn(2, tk, 3, 8), randn(2, tk, 3, 6)
    decay = torch.rand(1 if shared else 3, tq, tk)
    out, final = attnkit.retention(q, k, v, decay=decay, normalize=normalize, scale=2.0 if normalize else None)
    assert final is None and out.shape == (2, tq, 3, 6)
    expected = decay_definition(q, k, v, decay, scale=2.0 if normalize else None, normalize=normalize)
    assert reference.relative_l2(out, expected) <= 1e-5


@pytest.mark.parametrize("normalize", [False, True])
def test_gamma_powers_reproduce_the_gamma_forms(normalize):
    gamma = [0.9, 0.5]
    q, k, v = randn(1, 19, 2, 8, requires_grad=True), randn(1, 19, 2, 8, requires_grad=True), \
        randn(1, 19, 2, 4, requires_grad=True)
    decay = gamma_matrix(gamma, 19, normalize).float()
    out, _ = attnkit.retention(q, k, v, decay=decay, normalize=normalize)
    expected, _ = attnkit.retention(q, k, v, gamma=gamma, mode="parallel", normalize=normalize)
    assert reference.relative_l2(out, expected) <= 1e-5
    grad = torch.randn_like(out)
    got = torch.autograd.grad(out, (q, k, v), grad)
    want = torch.autograd.grad(expected, (q, k, v), grad)
    for a, b in zip(got, want):
        assert reference.relative_l2(a, b) <= 1e-5


@pytest.mark.parametrize("normalize", [False, True])
def test_float64_gradients_pass_gradcheck(normalize):
    q = torch.randn(1, 4, 2, 3, dtype=torch.float64, requires_grad=True)
    k = torch.randn(1, 6, 2, 3, dtype=torch.float64, requires_grad=True)
    v = torch.randn(1, 6, 2, 2, dtype=torch.float64, requires_grad=True)
    decay = torch.rand(2, 4, 6, dtype=torch.float64)
    scale = 3.0 if normalize else 0.5  # with normalize, row sums of |score| past the clamp at 1

    def run(q, k, v):
        return attnkit.retention(q, k, v, decay=decay, normalize=normalize, scale=scale)[0]

    assert torch.autograd.gradcheck(run, (q, k, v))


def test_the_custom_op_with_a_decay_matrix_passes_opcheck():
    q, k, v = randn(1, 5, 2, 4), randn(1, 7, 2, 4), randn(1, 7, 2, 4)
    decay = torch.rand(2, 5, 7)
    torch.library.opcheck(_retention_ops.retention_forward, (q, k, v, None, None, 0, 64, False, None, decay))


def test_refused_combinations_say_what_is_allowed():
    q, k, v = randn(1, 5, 2, 4), randn(1, 5, 2, 4), randn(1, 5, 2, 4)
    decay = torch.rand(2, 5, 5)
    with pytest.raises(ValueError, match="decay alone"):
        attnkit.retention(q, k, v, decay=decay, gamma=[0.9, 0.8])
    with pytest.raises(ValueError, match="decay alone"):
        attnkit.retention(q, k, v, decay=decay, output_final_state=True)
    with pytest.raises(ValueError, match="mode=parallel"):
        attnkit.retention(q, k, v, decay=decay, mode="chunk")
    with pytest.raises(ValueError, match=r"\[H\|1, Tq, Tk\]"):
        attnkit.retention(q, k, v, decay=torch.rand(2, 6, 5))


def test_on_cuda_like_on_the_cpu():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: the decay matrix's CUDA kernels need one")
    torch.manual_seed(0)
    for dtype in (torch.bfloat16, torch.float16):
        for tq, tk, normalize in ((65, 130, False), (200, 77, True)):
            q = torch.randn(2, tq, 3, 64, device="cuda", dtype=dtype, requires_grad=True)
            k = torch.randn(2, tk, 3, 64, device="cuda", dtype=dtype, requires_grad=True)
            v = torch.randn(2, tk, 3, 64, device="cuda", dtype=dtype, requires_grad=True)
            decay = torch.rand(3, tq, tk, device="cuda")
            out, _ = attnkit.retention(q, k, v, decay=decay, normalize=normalize)
            expected = decay_definition(q, k, v, decay, normalize=normalize)
            assert reference.relative_l2(out, expected) <= reference.TOLERANCE[dtype]
            grad = torch.randn_like(out)
            got = torch.autograd.grad(out, (q, k, v), grad)
            q64, k64, v64 = (t.detach().cpu().double().requires_grad_() for t in (q, k, v))
            want = torch.autograd.grad(
                attnkit.retention(q64, k64, v64, decay=decay.cpu().double(), normalize=normalize)[0], (q64, k64, v64),
                grad.cpu().double())
            for a, b in zip(got, want):
                assert reference.relative_l2(a, b) <= 2 * reference.TOLERANCE[dtype]
