"""attnkit.na1d/na2d/na3d and attnkit.nn.NeighborhoodAttention1D/2D/3D follow NATTEN >= 0.20's API:
parameter names, order and defaults (positional NATTEN calls give NATTEN's results), additional
keys/values merged through the LSE (forward and backward), return_lse, attention_kwargs and NATTEN's
kernel knobs. Pinned against plain-PyTorch references written here, over reference.py's explicit
DESIGN §3 neighborhood masks (which follow NATTEN's window rules: stride-group leader, window
start and shift, causal window).

NATTEN >= 0.20's signatures this file pins (NATTEN src/natten/functional.py, src/natten/modules.py):
  na{1,2,3}d(query, key, value, kernel_size, stride=1, dilation=1, is_causal=False, scale=None,
             additional_keys=None, additional_values=None, attention_kwargs=None, <kernel knobs>,
             return_lse=False)  -- return_lse since 0.21.5, after the kernel knobs
  NeighborhoodAttention{1,2,3}D(embed_dim, num_heads, kernel_size, stride=1, dilation=1,
             is_causal=False, qkv_bias=True, qk_scale=None, proj_drop=0.0)
"""

import inspect

import pytest
import torch

import attnkit
import reference
from conftest import randn

NATTEN_NA_PARAMETERS = [
    ("query", inspect.Parameter.empty), ("key", inspect.Parameter.empty), ("value", inspect.Parameter.empty),
    ("kernel_size", inspect.Parameter.empty), ("stride", 1), ("dilation", 1), ("is_causal", False),
    ("scale", None), ("additional_keys", None), ("additional_values", None), ("attention_kwargs", None),
]
NATTEN_MODULE_PARAMETERS = [
    ("embed_dim", inspect.Parameter.empty), ("num_heads", inspect.Parameter.empty),
    ("kernel_size", inspect.Parameter.empty), ("stride", 1), ("dilation", 1), ("is_causal", False),
    ("qkv_bias", True), ("qk_scale", None), ("proj_drop", 0.0),
]


def _per_dim(value, dims):
    return list(value) if isinstance(value, (list, tuple)) else [value] * dims


def _window_mask(extents, kernel_size, stride=1, dilation=1, is_causal=False):
    """bool [S, S]: NATTEN's neighborhood (reference.py builds it from DESIGN §3)."""
    dims = len(extents)
    return reference.neighborhood_mask(extents, kernel_size=_per_dim(kernel_size, dims),
                                       dilation=_per_dim(dilation, dims), stride=_per_dim(stride, dims),
                                       causal=_per_dim(is_causal, dims))


def _reference_na(q, k, v, kernel_size, stride=1, dilation=1, is_causal=False, scale=None,
                  additional_keys=None, additional_values=None):
    """(out, lse) in float64: softmax over the query's window, plus, when given, every additional
    token (one mask over the concatenated keys [window keys | additional keys])."""
    extents = tuple(q.shape[1:-2])
    mask = _window_mask(extents, kernel_size, stride, dilation, is_causal)
    if additional_keys is None:
        return reference.attention(q, k, v, mask, scale=scale)
    batch = q.shape[0]
    keys = torch.cat([k.reshape(batch, -1, *k.shape[-2:]), additional_keys], dim=1)
    values = torch.cat([v.reshape(batch, -1, *v.shape[-2:]), additional_values], dim=1)
    extra = torch.ones(mask.shape[0], additional_keys.shape[1], dtype=torch.bool)
    return reference.attention(q, keys, values, torch.cat([mask, extra], dim=1), scale=scale)


def _close(actual, expected, tol=1e-5):
    return reference.relative_l2(actual, expected) <= tol


# ---------------------------------------------------------------------------------------------
# Signatures


@pytest.mark.parametrize("fn", [attnkit.na1d, attnkit.na2d, attnkit.na3d], ids=lambda f: f.__name__)
def test_functional_signature_is_nattens(fn):
    parameters = list(inspect.signature(fn).parameters.values())
    head = [(p.name, p.default) for p in parameters[:len(NATTEN_NA_PARAMETERS)]]
    assert head == NATTEN_NA_PARAMETERS
    assert all(p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD for p in parameters[:len(NATTEN_NA_PARAMETERS)])
    rest = {p.name: p for p in parameters[len(NATTEN_NA_PARAMETERS):]}
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in rest.values())
    assert rest["return_lse"].default is False
    for knob in ("backend", "q_tile_shape", "kv_tile_shape", "backward_q_tile_shape", "backward_kv_tile_shape",
                 "backward_kv_splits", "backward_use_pt_reduction", "run_persistent_kernel", "kernel_schedule",
                 "torch_compile"):
        assert knob in rest
    assert attnkit.functional.na2d is attnkit.na2d


@pytest.mark.parametrize("cls", [attnkit.nn.NeighborhoodAttention1D, attnkit.nn.NeighborhoodAttention2D,
                                 attnkit.nn.NeighborhoodAttention3D], ids=lambda c: c.__name__)
def test_module_constructor_signature_is_nattens(cls):
    parameters = list(inspect.signature(cls).parameters.values())
    assert [(p.name, p.default) for p in parameters] == NATTEN_MODULE_PARAMETERS


# ---------------------------------------------------------------------------------------------
# Argument order and defaults of the functional API


def test_na2d_positional_fifth_is_stride_and_sixth_is_dilation():
    q, k, v = (randn(1, 11, 12, 2, 8) for _ in range(3))
    out = attnkit.na2d(q, k, v, 5, 1, 2)  # NATTEN: stride 1, dilation 2
    expected, _ = _reference_na(q, k, v, 5, stride=1, dilation=2)
    swapped, _ = _reference_na(q, k, v, 5, stride=2, dilation=1)
    assert not _close(swapped, expected, 1e-2)  # the two readings differ on this input
    assert _close(out, expected)


def test_na1d_positional_fifth_is_stride():
    q, k, v = (randn(2, 17, 2, 8) for _ in range(3))
    out = attnkit.na1d(q, k, v, 3, 2)
    expected, _ = _reference_na(q, k, v, 3, stride=2)
    dilated, _ = _reference_na(q, k, v, 3, dilation=2)
    assert not _close(dilated, expected, 1e-2)
    assert _close(out, expected)


def test_na3d_every_positional_parameter_up_to_scale():
    q, k, v = (randn(1, 6, 7, 6, 2, 8) for _ in range(3))
    args = ((3, 3, 5), (1, 2, 1), (2, 1, 1), (False, True, False), 0.3)
    out = attnkit.na3d(q, k, v, *args)
    expected, _ = _reference_na(q, k, v, (3, 3, 5), stride=(1, 2, 1), dilation=(2, 1, 1),
                                is_causal=(False, True, False), scale=0.3)
    assert _close(out, expected)


def test_positional_is_causal_and_scale():
    q, k, v = (randn(1, 13, 2, 8) for _ in range(3))
    out = attnkit.na1d(q, k, v, 5, 1, 1, True, 0.5)
    expected, _ = _reference_na(q, k, v, 5, is_causal=True, scale=0.5)
    assert _close(out, expected)


def test_defaults_are_stride_1_dilation_1_not_causal_default_scale():
    q, k, v = (randn(1, 9, 10, 2, 8) for _ in range(3))
    expected, _ = _reference_na(q, k, v, 3, stride=1, dilation=1, is_causal=False)
    assert _close(attnkit.na2d(q, k, v, 3), expected)
    # NATTEN also takes None for stride, dilation, is_causal and scale (the defaults).
    assert _close(attnkit.na2d(q, k, v, 3, None, None, None, None), expected)


def test_query_key_value_keywords():
    q, k, v = (randn(1, 9, 10, 2, 8) for _ in range(3))
    out = attnkit.na2d(query=q, key=k, value=v, kernel_size=3, stride=2, dilation=(1, 2))
    expected, _ = _reference_na(q, k, v, 3, stride=2, dilation=(1, 2))
    assert _close(out, expected)


def test_old_q_k_v_keywords_still_work_with_a_deprecation_warning():
    q, k, v = (randn(1, 15, 2, 8) for _ in range(3))
    with pytest.warns(DeprecationWarning, match="query"):
        out = attnkit.na1d(q=q, k=k, v=v, kernel_size=5, dilation=2)
    expected, _ = _reference_na(q, k, v, 5, dilation=2)
    assert _close(out, expected)
    with pytest.raises(TypeError, match="key"):
        attnkit.na1d(q, k, v, 5, k=k)
    with pytest.raises(TypeError, match="query"):
        attnkit.na1d(q=q, query=q, key=k, value=v, kernel_size=5)


def test_more_than_eleven_positional_arguments_raise_instead_of_binding_a_knob():
    q = randn(1, 9, 2, 8)
    # NATTEN's 12th positional parameter is `backend`; attnkit's tail is keyword-only.
    with pytest.raises(TypeError):
        attnkit.na1d(q, q, q, 3, 1, 1, False, None, None, None, None, True)


# ---------------------------------------------------------------------------------------------
# return_lse


@pytest.mark.parametrize("fn, shape, kernel", [(attnkit.na1d, (2, 13, 2, 8), 5), (attnkit.na2d, (1, 7, 9, 2, 8), 3),
                                              (attnkit.na3d, (1, 4, 5, 6, 2, 8), 3)], ids=["1d", "2d", "3d"])
def test_return_lse_gives_output_and_natural_log_lse(fn, shape, kernel):
    q, k, v = (randn(*shape) for _ in range(3))
    out, lse = fn(q, k, v, kernel, 2, return_lse=True)
    expected, expected_lse = _reference_na(q, k, v, kernel, stride=2)
    assert lse.shape == shape[:-1] and lse.dtype == torch.float32
    assert _close(out, expected) and _close(lse, expected_lse)


# ---------------------------------------------------------------------------------------------
# additional_keys / additional_values


def test_additional_kv_forward_equals_attention_over_neighborhood_and_extra_tokens():
    q, k, v = (randn(2, 9, 10, 2, 8) for _ in range(3))
    extra_k, extra_v = randn(2, 5, 2, 8), randn(2, 5, 2, 8)
    out, lse = attnkit.na2d(q, k, v, 3, 2, (1, 2), False, None, extra_k, extra_v, return_lse=True)
    expected, expected_lse = _reference_na(q, k, v, 3, stride=2, dilation=(1, 2), additional_keys=extra_k,
                                           additional_values=extra_v)
    assert out.shape == q.shape and lse.shape == q.shape[:-1]
    assert _close(out, expected) and _close(lse, expected_lse)
    plain, _ = _reference_na(q, k, v, 3, stride=2, dilation=(1, 2))
    assert not _close(plain, expected, 1e-2)  # the extra tokens matter


def test_additional_kv_are_seen_by_every_query_even_when_causal_with_gqa_and_value_dim():
    q = randn(1, 13, 4, 8)
    k, v = randn(1, 13, 2, 8), randn(1, 13, 2, 6)
    extra_k, extra_v = randn(1, 3, 2, 8), randn(1, 3, 2, 6)
    out = attnkit.na1d(q, k, v, kernel_size=4, stride=2, is_causal=True, scale=0.4, additional_keys=extra_k,
                       additional_values=extra_v)
    expected, _ = _reference_na(q, k, v, 4, stride=2, is_causal=True, scale=0.4, additional_keys=extra_k,
                                additional_values=extra_v)
    assert out.shape == (1, 13, 4, 6)
    assert _close(out, expected)


def test_additional_kv_in_3d():
    q, k, v = (randn(1, 4, 5, 6, 2, 8) for _ in range(3))
    extra_k, extra_v = randn(1, 7, 2, 8), randn(1, 7, 2, 8)
    out = attnkit.na3d(q, k, v, (3, 3, 3), dilation=(1, 1, 2), additional_keys=extra_k, additional_values=extra_v)
    expected, _ = _reference_na(q, k, v, 3, dilation=(1, 1, 2), additional_keys=extra_k, additional_values=extra_v)
    assert _close(out, expected)


def test_additional_kv_gradients_match_reference_autograd_in_float64():
    shape = (1, 6, 7, 2, 4)
    inputs = [randn(*shape, dtype=torch.float64, requires_grad=True) for _ in range(3)]
    inputs += [randn(1, 3, 2, 4, dtype=torch.float64, requires_grad=True) for _ in range(2)]
    grad_out = torch.randn(shape, dtype=torch.float64)
    grad_lse = torch.randn(shape[:-1], dtype=torch.float64)
    params = dict(kernel_size=3, stride=(2, 1), dilation=(1, 2), is_causal=(True, False))

    q, k, v, extra_k, extra_v = inputs
    out, lse = attnkit.na2d(q, k, v, additional_keys=extra_k, additional_values=extra_v, return_lse=True, **params)
    ((out * grad_out).sum() + (lse * grad_lse).sum()).backward()

    copies = [t.detach().clone().requires_grad_() for t in inputs]
    expected, expected_lse = _reference_na(*copies[:3], additional_keys=copies[3], additional_values=copies[4],
                                           **params)
    ((expected * grad_out).sum() + (expected_lse * grad_lse).sum()).backward()
    assert _close(out, expected) and _close(lse, expected_lse)
    # The lse is float32 (as everywhere in attnkit), so the merge weights carry float32 rounding.
    for name, actual, wanted in zip(("query", "key", "value", "additional_keys", "additional_values"), inputs,
                                    copies):
        assert actual.grad is not None, name
        assert _close(actual.grad, wanted.grad), name


def test_no_additional_token_gives_the_neighborhood_alone():
    q, k, v = (randn(1, 11, 2, 8) for _ in range(3))
    empty = randn(1, 0, 2, 8)
    out = attnkit.na1d(q, k, v, 3, additional_keys=empty, additional_values=empty)
    assert torch.equal(out, attnkit.na1d(q, k, v, 3))


@pytest.mark.parametrize("extra_k, extra_v, match", [
    ((1, 4, 2, 8), None, "additional_values"),
    (None, (1, 4, 2, 8), "additional_keys"),
    ((1, 4, 2, 8, 1), (1, 4, 2, 8), "additional_keys: rank 5"),
    ((1, 4, 2, 8), (1, 5, 2, 8), "additional_values"),
    ((1, 4, 2, 6), (1, 4, 2, 8), "additional_keys: head_dim"),
    ((1, 4, 2, 8), (1, 4, 2, 4), "additional_values: head_dim"),
    ((2, 4, 2, 8), (2, 4, 2, 8), "additional_keys: batch"),
    ((1, 4, 3, 8), (1, 4, 3, 8), "additional_keys: 3 heads"),
], ids=["keys-only", "values-only", "rank", "tokens", "key-dim", "value-dim", "batch", "heads"])
def test_bad_additional_kv_raise_value_error_naming_the_argument(extra_k, extra_v, match):
    q = randn(1, 9, 2, 8)
    extra_k = None if extra_k is None else randn(*extra_k)
    extra_v = None if extra_v is None else randn(*extra_v)
    with pytest.raises(ValueError, match=match):
        attnkit.na1d(q, q, q, 3, additional_keys=extra_k, additional_values=extra_v)


def test_additional_kv_of_another_dtype_raise_value_error():
    q = randn(1, 9, 2, 8)
    extra = randn(1, 4, 2, 8, dtype=torch.float64)
    with pytest.raises(ValueError, match="additional_keys: torch.float64"):
        attnkit.na1d(q, q, q, 3, additional_keys=extra, additional_values=extra)


# ---------------------------------------------------------------------------------------------
# attention_kwargs and NATTEN's kernel knobs


def test_kernel_knobs_and_attention_kwargs_knobs_are_accepted_and_change_nothing():
    q, k, v = (randn(1, 9, 10, 2, 8) for _ in range(3))
    extra_k, extra_v = randn(1, 4, 2, 8), randn(1, 4, 2, 8)
    plain = attnkit.na2d(q, k, v, 3, 2, additional_keys=extra_k, additional_values=extra_v)
    knobs = attnkit.na2d(q, k, v, 3, 2, None, False, None, extra_k, extra_v,
                         {"backend": "cutlass-fmha", "q_tile_size": 64, "torch_compile": False},
                         backend="cutlass-fna", q_tile_shape=(8, 8), kv_tile_shape=(8, 8), backward_kv_splits=(1, 1),
                         backward_use_pt_reduction=True, run_persistent_kernel=False, kernel_schedule="coop",
                         torch_compile=False, try_fuse_additional_kv=True)
    assert torch.equal(plain, knobs)
    assert torch.equal(attnkit.na2d(q, k, v, 3, attention_kwargs={}), attnkit.na2d(q, k, v, 3))


@pytest.mark.parametrize("kwargs, match", [
    (dict(attention_kwargs={"is_causal": True}), "attention_kwargs\\['is_causal'\\]"),
    (dict(attention_kwargs={"seqlens_KV": None}), "attention_kwargs\\['seqlens_KV'\\]"),
    (dict(attention_kwargs={"backend": "fast"}), "attention_kwargs\\['backend'\\]"),
    (dict(backend="cutlass-fmha"), "backend 'cutlass-fmha'"),
    (dict(kernel_schedule="persistent"), "kernel_schedule"),
], ids=["causal-kwarg", "varlen-kwarg", "fmha-backend", "fna-backend", "schedule"])
def test_knobs_natten_would_refuse_or_that_change_results_raise(kwargs, match):
    q = randn(1, 9, 2, 8)
    with pytest.raises(ValueError, match=match):
        attnkit.na1d(q, q, q, 3, **kwargs)


# ---------------------------------------------------------------------------------------------
# Modules


def _reference_module(module, x, stride, dilation=1, is_causal=False):
    batch, *tokens, channels = x.shape
    qkv = module.qkv(x).reshape(batch, *tokens, 3, module.num_heads, module.head_dim).double()
    out, _ = _reference_na(qkv[..., 0, :, :], qkv[..., 1, :, :], qkv[..., 2, :, :], module.kernel_size,
                           stride=stride, dilation=dilation, is_causal=is_causal, scale=module.scale)
    return module.proj(out.float().reshape(batch, *tokens, channels))


def test_module_positional_fourth_is_stride():
    module = attnkit.nn.NeighborhoodAttention2D(64, 4, 7, 2)
    assert module.stride == (2, 2) and module.dilation == (1, 1) and module.is_causal == (False, False)
    assert module.embed_dim == 64 and module.num_heads == 4 and module.head_dim == 16
    x = randn(1, 15, 16, 64)
    with torch.no_grad():
        out = module(x)
        expected = _reference_module(module, x, stride=2)
        dilated = _reference_module(module, x, stride=1, dilation=2)
    assert not _close(dilated, expected, 1e-2)
    assert _close(out, expected)


def test_module_positional_dilation_causal_bias_scale():
    module = attnkit.nn.NeighborhoodAttention1D(16, 2, 3, 1, 2, True, False, 0.5)
    assert module.stride == (1,) and module.dilation == (2,) and module.is_causal == (True,)
    assert module.qkv.bias is None and module.scale == 0.5
    x = randn(2, 11, 16)
    with torch.no_grad():
        assert _close(module(x), _reference_module(module, x, stride=1, dilation=2, is_causal=True))


def test_module_defaults_and_natten_0_20_0_dim_name():
    module = attnkit.nn.NeighborhoodAttention3D(dim=16, num_heads=2, kernel_size=3)
    assert module.stride == (1, 1, 1) and module.dilation == (1, 1, 1) and module.is_causal == (False,) * 3
    assert module.scale == 8 ** -0.5 and module.qkv.bias is not None and module.proj_drop.p == 0.0
    with pytest.raises(TypeError, match="embed_dim"):
        attnkit.nn.NeighborhoodAttention3D(16, dim=16, num_heads=2, kernel_size=3)


def test_module_forward_calls_the_functional_api_with_keywords(monkeypatch):
    calls = []
    original = attnkit.functional.na2d

    def spy(*args, **kwargs):
        calls.append((args, kwargs))
        return original(*args, **kwargs)

    monkeypatch.setattr(attnkit.functional, "na2d", spy)
    module = attnkit.nn.NeighborhoodAttention2D(16, 2, 3, 2, 1)
    module(randn(1, 5, 6, 16))
    (args, kwargs), = calls
    assert args == ()
    assert kwargs["stride"] == (2, 2) and kwargs["dilation"] == (1, 1) and kwargs["scale"] == module.scale


def test_state_dict_loads_into_a_fresh_module():
    first = attnkit.nn.NeighborhoodAttention2D(32, 4, 5, 2, 1)
    assert sorted(first.state_dict()) == ["proj.bias", "proj.weight", "qkv.bias", "qkv.weight"]
    second = attnkit.nn.NeighborhoodAttention2D(32, 4, 5, 2, 1)
    second.load_state_dict(first.state_dict())
    x = randn(2, 7, 9, 32)
    with torch.no_grad():
        assert torch.equal(first(x), second(x))


def test_additional_kv_compile_fullgraph_forward_and_backward():
    def step(q, k, v, extra_k, extra_v):
        out, lse = attnkit.na2d(q, k, v, 3, 2, additional_keys=extra_k, additional_values=extra_v, return_lse=True)
        return (out * 2).sum() + lse.sum()

    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    inputs = [randn(1, 5, 6, 2, 8, requires_grad=True) for _ in range(3)]
    inputs += [randn(1, 3, 2, 8, requires_grad=True) for _ in range(2)]
    loss = compiled(*inputs)
    loss.backward()
    grads = [t.grad.clone() for t in inputs]
    for t in inputs:
        t.grad = None
    expected = step(*inputs)
    expected.backward()
    assert torch.allclose(loss, expected, rtol=1e-5)
    for actual, t in zip(grads, inputs):
        assert torch.allclose(actual, t.grad, rtol=1e-4, atol=1e-5)
