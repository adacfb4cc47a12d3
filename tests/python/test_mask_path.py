"""mask_path= of attention / sparse_attention (the C ABI's mask.element_path): the value reaches the
library through the eager path and the custom ops (schema, fake function, autograd), bad values are
refused, the CPU backend ignores it with identical results; on CUDA (skipped visibly without a GPU)
every path gives the reference's result, forward and backward, also inside a CUDA graph."""

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import attnkit
import reference
from attnkit import _attention_ops, _capi, _plans
from conftest import randn
from gpu_support import require_cuda, skip_if_unsupported

PATHS = {"auto": _capi.ATTNKIT_ELEMENT_PATH_AUTOMATIC, "tiles": _capi.ATTNKIT_ELEMENT_PATH_TILES,
         "scattered": _capi.ATTNKIT_ELEMENT_PATH_SCATTERED}


def _scattered_mask(sq, sk, density, device="cpu"):
    """Uniformly scattered true entries plus the diagonal, so that no row is empty."""
    mask = torch.rand(sq, sk, device=device) < density
    diagonal = torch.arange(min(sq, sk), device=device)
    mask[diagonal, diagonal] = True
    return mask


@pytest.fixture
def made_plans(monkeypatch):
    """The element_path of every attention plan made while the test runs (the C args struct's field)."""
    seen = []
    make = _plans.make

    def recording_make(lib, function, args, *rest):
        seen.append(args.mask.element_path)
        return make(lib, function, args, *rest)

    monkeypatch.setattr(_plans, "make", recording_make)
    _attention_ops._forward_plans.clear()
    _attention_ops._backward_plans.clear()
    yield seen
    _attention_ops._forward_plans.clear()
    _attention_ops._backward_plans.clear()


@pytest.mark.parametrize("name", list(PATHS))
def test_mask_path_reaches_the_c_abi_forward_and_backward(made_plans, name):
    q, k, v = (randn(1, 9, 2, 8, requires_grad=True) for _ in range(3))
    out = attnkit.attention(q, k, v, mask=_scattered_mask(9, 9, 0.3), mask_path=name)
    out.sum().backward()
    assert made_plans == [PATHS[name], PATHS[name]]  # the forward plan, then the backward plan


def test_sparse_attention_passes_mask_path_too(made_plans):
    q, k, v = (randn(1, 9, 2, 8) for _ in range(3))
    attnkit.sparse_attention(q, k, v, mask=_scattered_mask(9, 9, 0.3), mask_path="scattered")
    assert made_plans == [_capi.ATTNKIT_ELEMENT_PATH_SCATTERED]


def test_the_plans_of_two_paths_are_separate(made_plans):
    q, k, v = (randn(1, 9, 2, 8) for _ in range(3))
    mask = _scattered_mask(9, 9, 0.3)
    for name in ("tiles", "scattered", "tiles"):
        attnkit.attention(q, k, v, mask=mask, mask_path=name)
    assert made_plans == [PATHS["tiles"], PATHS["scattered"]]  # the second "tiles" call reuses its plan


class _OpRecorder(TorchDispatchMode):
    """Records the element_path argument of the attnkit ops dispatched under it."""

    def __init__(self):
        super().__init__()
        self.paths = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.name()
        if name.startswith("attnkit::attention_"):
            position = 15 if name == "attnkit::attention_forward" else 21
            path = kwargs.get("element_path", args[position] if len(args) > position else 0)
            self.paths[name] = path
        return func(*args, **kwargs)


def test_the_custom_ops_carry_mask_path_forward_and_backward():
    q, k, v = (randn(1, 9, 2, 8, requires_grad=True) for _ in range(3))
    mask = _scattered_mask(9, 9, 0.3)
    expected = attnkit.attention(q, k, v, mask=mask)
    recorder = _OpRecorder()
    with recorder:  # an active dispatch mode sends the call through the custom ops
        out = attnkit.attention(q, k, v, mask=mask, mask_path="scattered")
        out.sum().backward()
    assert recorder.paths == {"attnkit::attention_forward": PATHS["scattered"],
                              "attnkit::attention_backward": PATHS["scattered"]}
    assert torch.equal(out, expected)


def test_the_forward_op_with_a_mask_path_passes_opcheck():
    q, k, v = (randn(1, 7, 2, 8, requires_grad=True) for _ in range(3))
    mask = torch.rand(1, 2, 7, 7) < 0.5
    torch.library.opcheck(_attention_ops.attention_forward, (q, k, v, None, mask, 4, 0, [], [], [], [], 0, 0, 0.5),
                          {"element_path": PATHS["tiles"]})


def test_mask_path_compiles_fullgraph():
    def step(q, k, v, mask):
        return attnkit.attention(q, k, v, mask=mask, mask_path="tiles").sum()

    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    q, k, v = (randn(1, 9, 2, 8, requires_grad=True) for _ in range(3))
    mask = _scattered_mask(9, 9, 0.3)
    loss = compiled(q, k, v, mask)
    loss.backward()
    assert torch.allclose(loss, step(q.detach(), k.detach(), v.detach(), mask), rtol=1e-5)
    assert all(t.grad is not None and torch.isfinite(t.grad).all() for t in (q, k, v))


@pytest.mark.parametrize("value, error", [("dense", ValueError), ("Tiles", ValueError), (1, TypeError),
                                          (None, TypeError)])
def test_a_bad_mask_path_is_refused_naming_the_allowed_values(value, error):
    q, k, v = (randn(1, 5, 2, 8) for _ in range(3))
    with pytest.raises(error, match=r"mask_path: .*allowed: 'auto'"):
        attnkit.attention(q, k, v, mask=_scattered_mask(5, 5, 0.5), mask_path=value)


def test_a_path_without_an_element_mask_is_refused_by_the_library():
    q, k, v = (randn(1, 5, 2, 8) for _ in range(3))
    with pytest.raises(ValueError, match=r"mask.element_path: 2 with mask.kind 0"):
        attnkit.attention(q, k, v, mask_path="scattered")
    with pytest.raises(ValueError, match=r"mask.element_path: 1 with mask.kind 3"):
        attnkit.sparse_attention(q, k, v, block_mask=torch.ones(1, 1, 1, 1, dtype=torch.bool), block_size=8,
                                 mask_path="tiles")


def test_cpu_ignores_the_mask_path_with_identical_results():
    q, k, v = (randn(1, 33, 2, 16, dtype=torch.float64, requires_grad=True) for _ in range(3))
    mask = _scattered_mask(33, 33, 0.05)
    results = {}
    for name in PATHS:
        out, lse = attnkit.attention(q, k, v, mask=mask, mask_path=name, return_lse=True)
        grads = torch.autograd.grad(out.sum(), (q, k, v))
        results[name] = (out, lse) + grads
    for name in ("tiles", "scattered"):
        assert all(torch.equal(a, b) for a, b in zip(results[name], results["auto"])), name
    expected, _ = reference.attention(q.detach(), k.detach(), v.detach(), mask)
    assert reference.relative_l2(results["auto"][0], expected) <= 1e-10


# --- CUDA --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(PATHS))
@pytest.mark.parametrize("density, per_head", [(0.01, False), (0.3, True)])
def test_cuda_every_path_matches_the_reference(name, density, per_head):
    require_cuda()
    heads, s = 2, 300
    q, k, v = (randn(1, s, heads, 64, dtype=torch.bfloat16, device="cuda", requires_grad=True) for _ in range(3))
    mask = _scattered_mask(s, s, density, device="cuda")
    if per_head:
        mask = torch.stack([mask, _scattered_mask(s, s, density, device="cuda")])[None]
    with skip_if_unsupported(f"mask_path={name!r} on this device"):
        out = attnkit.attention(q, k, v, mask=mask, mask_path=name)
        grads = torch.autograd.grad(out.float().square().sum(), (q, k, v))
    qf, kf, vf = (t.detach().float().requires_grad_() for t in (q, k, v))
    expected, _ = reference.attention(qf, kf, vf, mask)
    expected_grads = torch.autograd.grad(expected.square().sum(), (qf, kf, vf))
    assert reference.relative_l2(out.float(), expected) <= 1.5e-2
    for got, want in zip(grads, expected_grads):
        assert reference.relative_l2(got.float(), want) <= 2e-2


def test_cuda_automatic_path_inside_a_cuda_graph_matches_eager():
    require_cuda()
    q, k, v = (randn(1, 256, 2, 64, dtype=torch.bfloat16, device="cuda") for _ in range(3))
    mask = _scattered_mask(256, 256, 0.01, device="cuda")
    eager = attnkit.attention(q, k, v, mask=mask)  # makes the plan and measures the mask
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        captured = attnkit.attention(q, k, v, mask=mask)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured, eager)
