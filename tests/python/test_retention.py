"""attnkit.retention on the CPU: every mode against RetNet's definition, initial and final state,
custom decay, normalisation, float64 gradients of every mode."""

import pytest
import torch

import attnkit
import reference
from conftest import randn

MODES = ["chunk", "parallel", "recurrent"]


@pytest.mark.parametrize("mode", MODES)
def test_retention_matches_definition(mode):
    q, k, v = randn(2, 23, 3, 8), randn(2, 23, 3, 8), randn(2, 23, 3, 12)
    out, final = attnkit.retention(q, k, v, mode=mode, chunk_size=8, output_final_state=True)
    expected, expected_final = reference.retention(q, k, v)
    assert out.shape == (2, 23, 3, 12)
    assert reference.relative_l2(out, expected) <= 1e-5
    assert final.dtype == torch.float32 and final.shape == (2, 3, 8, 12)
    assert reference.relative_l2(final, expected_final) <= 1e-5


@pytest.mark.parametrize("mode", MODES)
def test_initial_state_and_custom_gamma(mode):
    q, k, v = randn(1, 10, 2, 4), randn(1, 10, 2, 4), randn(1, 10, 2, 4)
    state = randn(1, 2, 4, 4)
    gamma = [0.9, 0.75]
    out, final = attnkit.retention(q, k, v, mode=mode, chunk_size=4, gamma=gamma, initial_state=state,
                                   output_final_state=True)
    expected, expected_final = reference.retention(q, k, v, gamma=gamma, initial_state=state)
    assert reference.relative_l2(out, expected) <= 1e-5
    assert reference.relative_l2(final, expected_final) <= 1e-5


def test_final_state_is_none_unless_asked():
    q, k, v = randn(1, 5, 1, 4), randn(1, 5, 1, 4), randn(1, 5, 1, 4)
    _, final = attnkit.retention(q, k, v)
    assert final is None


def test_chunked_state_carries_into_a_continuation():
    q, k, v = randn(1, 16, 2, 4), randn(1, 16, 2, 4), randn(1, 16, 2, 4)
    whole, _ = attnkit.retention(q, k, v, mode="chunk", chunk_size=4)
    first, state = attnkit.retention(q[:, :9], k[:, :9], v[:, :9], output_final_state=True)
    second, _ = attnkit.retention(q[:, 9:], k[:, 9:], v[:, 9:], mode="recurrent", initial_state=state)
    assert reference.relative_l2(torch.cat([first, second], dim=1), whole) <= 1e-5


def test_normalized_parallel_retention_matches_retnet_normalisation():
    q, k, v = randn(1, 12, 2, 8), randn(1, 12, 2, 8), randn(1, 12, 2, 8)
    out, _ = attnkit.retention(q, k, v, mode="parallel", normalize=True)
    expected, _ = reference.retention(q, k, v, normalize=True)
    assert reference.relative_l2(out, expected) <= 1e-5


@pytest.mark.parametrize("mode", MODES)
def test_float64_gradients_with_initial_state_pass_gradcheck(mode):
    q, k, v = (randn(1, 9, 2, 3, dtype=torch.float64, requires_grad=True) for _ in range(3))
    state = randn(1, 2, 3, 3, dtype=torch.float64, requires_grad=True)

    def fn(q, k, v, state):
        return attnkit.retention(q, k, v, mode=mode, chunk_size=4, initial_state=state, output_final_state=True)

    assert torch.autograd.gradcheck(fn, (q, k, v, state))


def test_normalized_float64_gradients_pass_gradcheck():
    q, k, v = (randn(1, 7, 1, 3, dtype=torch.float64, requires_grad=True) for _ in range(3))
    fn = lambda q, k, v: attnkit.retention(q, k, v, mode="parallel", normalize=True)[0]  # noqa: E731
    assert torch.autograd.gradcheck(fn, (q, k, v))
