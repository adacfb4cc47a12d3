"""The ops on a CUDA device (Hopper in our GPU check): bf16/fp16/fp32 forward against the float64
reference, backward where the library has it (skips with the library's reason otherwise), outputs
fully written (NaN-poisoned allocator), non-contiguous views, side streams, CUDA-graph capture and
torch.compile. Skips with a visible reason without a GPU or a CUDA build of libattnkit."""

import pytest
import torch

import attnkit
import reference
from gpu_support import poison_allocator, require_cuda, skip_if_unsupported

pytestmark = pytest.mark.usefixtures("_cuda")


@pytest.fixture
def _cuda():
    require_cuda()


LOW_PRECISION = [torch.bfloat16, torch.float16]


def _rand(*shape, dtype=torch.bfloat16, requires_grad=False):
    return torch.randn(*shape, device="cuda", dtype=dtype).requires_grad_(requires_grad)


@pytest.mark.parametrize("dtype", LOW_PRECISION)
@pytest.mark.parametrize("head_dim", [64, 128])
def test_dense_causal_forward(dtype, head_dim):
    q, k, v = (_rand(2, 333, 4, head_dim, dtype=dtype) for _ in range(3))
    poison_allocator((2, 333, 4, head_dim), dtype)
    with skip_if_unsupported(f"causal forward {dtype} d{head_dim}"):
        out, lse = attnkit.attention(q, k, v, is_causal=True, return_lse=True)
    expected, expected_lse = reference.attention(q, k, v, reference.causal_mask(333, 333).cuda())
    assert reference.relative_l2(out, expected) <= reference.TOLERANCE[dtype]
    assert reference.relative_l2(lse, expected_lse) <= 1e-3


@pytest.mark.parametrize("dtype", LOW_PRECISION)
def test_na2d_forward_with_dilation_stride_causal_on_odd_extents(dtype):
    params = dict(kernel_size=(7, 5), dilation=(2, 1), stride=(1, 2), is_causal=(False, True))
    q, k, v = (_rand(1, 19, 23, 2, 128, dtype=dtype) for _ in range(3))
    poison_allocator((1, 19, 23, 2, 128), dtype)
    with skip_if_unsupported(f"na2d forward {dtype}"):
        out = attnkit.na2d(q, k, v, **params)
    mask = reference.neighborhood_mask((19, 23), [7, 5], [2, 1], [1, 2], [False, True]).cuda()
    expected, _ = reference.attention(q, k, v, mask)
    assert reference.relative_l2(out, expected) <= reference.TOLERANCE[dtype]


def test_na1d_and_na3d_forward_bf16():
    q, k, v = (_rand(2, 97, 2, 128) for _ in range(3))
    with skip_if_unsupported("na1d forward bf16"):
        out = attnkit.na1d(q, k, v, kernel_size=13, dilation=3)
    mask = reference.neighborhood_mask((97,), [13], [3], [1], [False]).cuda()
    assert reference.relative_l2(out, reference.attention(q, k, v, mask)[0]) <= 1.5e-2
    q, k, v = (_rand(1, 6, 7, 9, 2, 128) for _ in range(3))
    with skip_if_unsupported("na3d forward bf16"):
        out = attnkit.na3d(q, k, v, kernel_size=(3, 5, 3))
    mask = reference.neighborhood_mask((6, 7, 9), [3, 5, 3], [1, 1, 1], [1, 1, 1], [False] * 3).cuda()
    assert reference.relative_l2(out, reference.attention(q, k, v, mask)[0]) <= 1.5e-2


def test_gqa_on_views_of_packed_qkv_bf16():
    packed = _rand(2, 257, 3, 4, 128)
    q, k, v = packed.unbind(dim=2)
    k, v = k[:, :, :2], v[:, :, :2]  # 2 kv heads for 4 query heads, strided views
    with skip_if_unsupported("gqa forward bf16"):
        out = attnkit.attention(q, k, v)
    assert reference.relative_l2(out, reference.attention(q, k, v)[0]) <= 1.5e-2


@pytest.mark.parametrize("kind", ["block", "element"])
def test_sparse_forward_bf16(kind):
    q, k, v = (_rand(1, 300, 2, 128) for _ in range(3))
    if kind == "block":
        block_mask = torch.rand(1, 2, 5, 5, device="cuda") < 0.4
        block_mask[..., 0] = True
        with skip_if_unsupported("block-sparse forward"):
            out = attnkit.sparse_attention(q, k, v, block_mask=block_mask, block_size=64)
        mask = reference.block_to_element_mask(block_mask, 300, 300, 64, 64)
    else:
        mask = torch.rand(1, 2, 300, 300, device="cuda") < 0.1
        with skip_if_unsupported("element-sparse forward"):
            out = attnkit.sparse_attention(q, k, v, mask=mask)
    assert reference.relative_l2(out, reference.attention(q, k, v, mask)[0]) <= 1.5e-2


@pytest.mark.parametrize("dtype", LOW_PRECISION)
def test_dense_causal_backward(dtype):
    q, k, v = (_rand(1, 200, 2, 128, dtype=dtype, requires_grad=True) for _ in range(3))
    grad = torch.randn(1, 200, 2, 128, device="cuda", dtype=dtype)
    with skip_if_unsupported(f"causal backward {dtype}"):
        attnkit.attention(q, k, v, is_causal=True).backward(grad)
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    expected, _ = reference.attention(q64, k64, v64, reference.causal_mask(200, 200).cuda())
    expected.backward(grad.double())
    for actual, wanted in ((q.grad, q64.grad), (k.grad, k64.grad), (v.grad, v64.grad)):
        assert reference.relative_l2(actual, wanted) <= 2 * reference.TOLERANCE[dtype]


def test_na2d_backward_bf16():
    q, k, v = (_rand(1, 17, 18, 2, 128, requires_grad=True) for _ in range(3))
    grad = torch.randn(1, 17, 18, 2, 128, device="cuda", dtype=torch.bfloat16)
    with skip_if_unsupported("na2d backward bf16"):
        attnkit.na2d(q, k, v, kernel_size=5, dilation=(1, 2)).backward(grad)
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    mask = reference.neighborhood_mask((17, 18), [5, 5], [1, 2], [1, 1], [False, False]).cuda()
    expected, _ = reference.attention(q64, k64, v64, mask)
    expected.backward(grad.double())
    for actual, wanted in ((q.grad, q64.grad), (k.grad, k64.grad), (v.grad, v64.grad)):
        assert reference.relative_l2(actual, wanted) <= 3e-2


@pytest.mark.parametrize("mode", ["chunk", "parallel", "recurrent"])
def test_retention_forward_bf16(mode):
    q, k, v = (_rand(2, 130, 2, 64) for _ in range(3))
    with skip_if_unsupported(f"retention {mode} forward"):
        out, _ = attnkit.retention(q, k, v, mode=mode)
    assert reference.relative_l2(out, reference.retention(q, k, v)[0]) <= 1.5e-2


@pytest.mark.parametrize("dtype", LOW_PRECISION)
def test_retention_forward_with_states_odd_length_d128(dtype):
    q, k = (_rand(2, 201, 3, 128, dtype=dtype) for _ in range(2))
    v = _rand(2, 201, 3, 64, dtype=dtype)
    s0 = torch.randn(2, 3, 128, 64, device="cuda", dtype=torch.float32)
    gamma = [0.7, 0.95, 0.999]
    with skip_if_unsupported(f"retention forward {dtype} with states"):
        out, final = attnkit.retention(q, k, v, gamma=gamma, initial_state=s0, output_final_state=True, scale=0.2)
    expected, expected_final = reference.retention(q, k, v, gamma=gamma, initial_state=s0, scale=0.2)
    assert reference.relative_l2(out, expected) <= reference.TOLERANCE[dtype]
    assert reference.relative_l2(final, expected_final) <= reference.TOLERANCE[dtype]


@pytest.mark.parametrize("dtype", LOW_PRECISION)
def test_retention_normalized_parallel_forward(dtype):
    q, k, v = (_rand(2, 130, 3, 64, dtype=dtype) for _ in range(3))
    gamma = [0.6, 0.99, 0.9995]
    with skip_if_unsupported(f"retention normalized parallel forward {dtype}"):
        out, _ = attnkit.retention(q, k, v, gamma=gamma, mode="parallel", normalize=True)
    expected, _ = reference.retention(q, k, v, gamma=gamma, normalize=True)
    assert reference.relative_l2(out, expected) <= reference.TOLERANCE[dtype]


def test_retention_decode_step_against_state_bf16():
    q, k, v = (_rand(4, 1, 16, 128) for _ in range(3))
    s0 = torch.randn(4, 16, 128, 128, device="cuda", dtype=torch.float32)
    with skip_if_unsupported("retention recurrent decode"):
        out, final = attnkit.retention(q, k, v, mode="recurrent", initial_state=s0, output_final_state=True)
    expected, expected_final = reference.retention(q, k, v, initial_state=s0)
    assert reference.relative_l2(out, expected) <= 1.5e-2
    assert reference.relative_l2(final, expected_final) <= 1.5e-2


@pytest.mark.parametrize("dtype", LOW_PRECISION)
def test_retention_backward_with_states(dtype):
    q, k = (_rand(2, 150, 2, 64, dtype=dtype, requires_grad=True) for _ in range(2))
    v = _rand(2, 150, 2, 128, dtype=dtype, requires_grad=True)
    s0 = torch.randn(2, 2, 64, 128, device="cuda", dtype=torch.float32, requires_grad=True)
    grad_out = torch.randn(2, 150, 2, 128, device="cuda", dtype=dtype)
    grad_final = torch.randn(2, 2, 64, 128, device="cuda", dtype=torch.float32)
    with skip_if_unsupported(f"retention backward {dtype}"):
        out, final = attnkit.retention(q, k, v, initial_state=s0, output_final_state=True)
        torch.autograd.backward((out, final), (grad_out, grad_final))
    q64, k64, v64, s064 = (t.detach().double().requires_grad_() for t in (q, k, v, s0))
    expected, expected_final = reference.retention(q64, k64, v64, initial_state=s064)
    # The reference computes on the CPU: its gradients come from the CPU too.
    torch.autograd.backward((expected, expected_final), (grad_out.cpu().double(), grad_final.cpu().double()))
    for actual, wanted in ((q.grad, q64.grad), (k.grad, k64.grad), (v.grad, v64.grad), (s0.grad, s064.grad)):
        assert reference.relative_l2(actual, wanted) <= 2 * reference.TOLERANCE[dtype]


@pytest.mark.parametrize("dtype", LOW_PRECISION + [torch.float32])
def test_gemm(dtype):
    a, b = _rand(3, 129, 257, dtype=dtype), _rand(1, 257, 67, dtype=dtype).mT.contiguous().mT
    with skip_if_unsupported(f"gemm {dtype}"):
        c = attnkit.gemm(a, b)
    assert reference.relative_l2(c, a.double() @ b.double()) <= reference.TOLERANCE[dtype]


def _operand(rows, cols, dtype, transposed):
    """A [rows, cols] operand, stored transposed (column-major, a .mT view) when asked."""
    return _rand(cols, rows, dtype=dtype).mT if transposed else _rand(rows, cols, dtype=dtype)


@pytest.mark.parametrize("dtype", LOW_PRECISION + [torch.float32])
@pytest.mark.parametrize("transpose_a", [False, True])
@pytest.mark.parametrize("transpose_b", [False, True])
@pytest.mark.parametrize("shape", [(256, 512, 128), (16, 4096, 1024), (136, 264, 72), (67, 131, 173)])
def test_gemm_both_transposes_on_aligned_and_odd_shapes(dtype, transpose_a, transpose_b, shape):
    m, n, k = shape
    a, b = _operand(m, k, dtype, transpose_a), _operand(k, n, dtype, transpose_b)
    poison_allocator((m, n), dtype)
    with skip_if_unsupported(f"gemm {dtype}"):
        c = attnkit.gemm(a, b)
    assert reference.relative_l2(c, a.double() @ b.double()) <= reference.TOLERANCE[dtype]


def test_gemm_float32_with_tf32_is_within_the_tf32_tolerance():
    # Uniform inputs: TF32 rounding gives about 2.6e-4 relative L2 on them (2.9e-4 on normal ones).
    a = torch.rand(512, 1024, device="cuda") * 2 - 1
    b = torch.rand(1024, 256, device="cuda") * 2 - 1
    with skip_if_unsupported("gemm float32 allow_tf32"):
        c = attnkit.gemm(a, b, allow_tf32=True)
    assert reference.relative_l2(c, a.double() @ b.double()) <= 3e-4


@pytest.mark.parametrize("dtype", LOW_PRECISION + [torch.float32])
def test_gemm_batched_with_a_broadcast_operand_and_its_backward(dtype):
    a = _rand(4, 136, 72, dtype=dtype, requires_grad=True)
    b = _rand(1, 72, 264, dtype=dtype, requires_grad=True)
    with skip_if_unsupported(f"gemm {dtype}"):
        c = attnkit.gemm(a, b)
        grad = _rand(4, 136, 264, dtype=dtype)
        c.backward(grad)
    a64, b64, g64 = a.detach().double(), b.detach().double(), grad.double()
    tolerance = reference.TOLERANCE[dtype]
    assert reference.relative_l2(c, a64 @ b64) <= tolerance
    assert reference.relative_l2(a.grad, g64 @ b64.mT) <= tolerance
    assert reference.relative_l2(b.grad, (a64.mT @ g64).sum(0, keepdim=True)) <= tolerance


@pytest.mark.parametrize("dtype", LOW_PRECISION + [torch.float32])
def test_gemm_on_misaligned_views_runs_staged_and_matches(dtype):
    """Views one element into their buffer and odd leading dimensions: the operands are staged into aligned
    workspace (torch-allocated through the plan) and the tensor-core kernels run; C is copied back."""
    m, n, k = 257, 131, 173
    a = _rand(m * k + 1, dtype=dtype)[1:].view(m, k)
    b = _rand(k * n + 1, dtype=dtype)[1:].view(k, n)
    with skip_if_unsupported(f"gemm {dtype}"):
        c = attnkit.gemm(a, b)
        again = attnkit.gemm(a, b)  # the plan's second run (its cached kernel parameters)
    assert reference.relative_l2(c, a.double() @ b.double()) <= reference.TOLERANCE[dtype]
    assert reference.relative_l2(again, a.double() @ b.double()) <= reference.TOLERANCE[dtype]


def test_gemm_in_a_cuda_graph_and_under_torch_compile():
    a, b = _rand(256, 128), _rand(128, 512)
    with skip_if_unsupported("gemm bf16"):
        attnkit.gemm(a, b)  # warm-up outside the capture: the plan is made there
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        c = attnkit.gemm(a, b)
    a.copy_(_rand(256, 128))
    g.replay()
    torch.cuda.synchronize()
    assert reference.relative_l2(c, a.double() @ b.double()) <= reference.TOLERANCE[torch.bfloat16]
    compiled = torch.compile(lambda x, y: attnkit.gemm(x, y), fullgraph=True)
    assert reference.relative_l2(compiled(a, b), a.double() @ b.double()) <= reference.TOLERANCE[torch.bfloat16]


def test_runs_on_the_current_side_stream():
    q, k, v = (_rand(1, 512, 2, 128) for _ in range(3))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), skip_if_unsupported("causal forward bf16"):
        out = attnkit.attention(q, k, v, is_causal=True)
    torch.cuda.current_stream().wait_stream(side)
    expected, _ = reference.attention(q, k, v, reference.causal_mask(512, 512).cuda())
    assert reference.relative_l2(out, expected) <= 1.5e-2


def test_cuda_graph_capture_and_replay_with_new_inputs():
    static = [_rand(1, 16, 16, 2, 128) for _ in range(3)]
    with skip_if_unsupported("na2d forward bf16"):
        attnkit.na2d(*static, kernel_size=5)  # warm-up (and any tuning) outside capture
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        attnkit.na2d(*static, kernel_size=5)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = attnkit.na2d(*static, kernel_size=5)
    fresh = [torch.randn_like(t) for t in static]
    for buffer, value in zip(static, fresh):
        buffer.copy_(value)
    graph.replay()
    torch.cuda.synchronize()
    mask = reference.neighborhood_mask((16, 16), [5, 5], [1, 1], [1, 1], [False, False]).cuda()
    assert reference.relative_l2(static_out, reference.attention(*fresh, mask)[0]) <= 1.5e-2


def test_compiled_fullgraph_forward_and_backward():
    def step(q, k, v):
        out, lse = attnkit.na2d(q, k, v, kernel_size=3, return_lse=True)
        return out.float().sum() + lse.sum()

    q, k, v = (_rand(1, 12, 12, 2, 128, requires_grad=True) for _ in range(3))
    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=True)
    with skip_if_unsupported("na2d forward/backward bf16"):
        loss = compiled(q, k, v)
        loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(q.grad.float()).all()


def test_neighborhood_module_on_gpu():
    module = attnkit.nn.NeighborhoodAttention2D(256, 2, kernel_size=7).cuda().to(torch.bfloat16)
    x = _rand(2, 14, 15, 256)
    with skip_if_unsupported("na2d forward bf16"):
        out = module(x)
    assert out.shape == x.shape and torch.isfinite(out.float()).all()


@pytest.mark.parametrize("rpb_dtype", [torch.float32, torch.bfloat16])
def test_rpb_forward_on_cuda_matches_the_cpu_backend(rpb_dtype):
    """The fused CUDA forward adds NATTEN's relative positional bias as the CPU backend does (1-D, 2-D with
    dilation, 3-D; the CPU kernels are checked against a brute-force reference in test_natten017)."""
    cases = [((1, 45, 2, 64), dict(kernel_size=7, dilation=3), (2, 13)),
             ((2, 13, 17, 2, 64), dict(kernel_size=(5, 7), dilation=(2, 1)), (2, 9, 13)),
             ((1, 6, 7, 9, 2, 64), dict(kernel_size=(3, 5, 3)), (2, 5, 9, 5))]
    for shape, params, rpb_shape in cases:
        q, k, v = (_rand(*shape) for _ in range(3))
        rpb = torch.randn(*rpb_shape, device="cuda", dtype=rpb_dtype)
        op = {2: attnkit.na1d, 3: attnkit.na2d, 4: attnkit.na3d}[len(rpb_shape)]
        out, lse = op(q, k, v, **params, rpb=rpb, return_lse=True)
        expected, expected_lse = op(q.float().cpu(), k.float().cpu(), v.float().cpu(), **params,
                                    rpb=rpb.float().cpu(), return_lse=True)
        assert reference.relative_l2(out.float().cpu(), expected) <= 1.5e-2
        assert (lse.cpu() - expected_lse).abs().max() <= 2e-2


@pytest.mark.parametrize("deterministic", [False, True])
def test_rpb_trains_on_cuda_like_on_the_cpu(deterministic):
    """Gradients of q, k, v and rpb from the fused CUDA backward against the CPU backend's (float32 copies),
    2-D with dilation and GQA-free heads; deterministic mode gives the same bits twice."""
    shape, params = (2, 13, 17, 2, 64), dict(kernel_size=(5, 7), dilation=(2, 1))
    q, k, v = (_rand(*shape, requires_grad=True) for _ in range(3))
    rpb = (torch.randn(2, 9, 13, device="cuda") * 0.5).requires_grad_()
    grad = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
    previous = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(deterministic)
    try:
        grads = []
        for _ in range(2 if deterministic else 1):
            for t in (q, k, v, rpb):
                t.grad = None
            attnkit.na2d(q, k, v, **params, rpb=rpb).backward(grad)
            grads.append([t.grad.clone() for t in (q, k, v, rpb)])
    finally:
        torch.use_deterministic_algorithms(previous)
    if deterministic:
        assert all(torch.equal(a, b) for a, b in zip(*grads))
    cpu = [t.detach().float().cpu().requires_grad_() for t in (q, k, v, rpb)]
    attnkit.na2d(*cpu[:3], **params, rpb=cpu[3]).backward(grad.float().cpu())
    for name, got, want in zip(("q", "k", "v", "rpb"), grads[0], cpu):
        assert reference.relative_l2(got.float().cpu(), want.grad) <= 2e-2, name
