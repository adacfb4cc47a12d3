"""Attention masks for the peer benchmark, written independently of attnkit's C++ code.

DESIGN §3 defines the neighborhood window per token dimension (extent L, window w, dilation d,
stride s, causal c). The coordinate splits into d dilation groups by `coord mod d`; group r holds
n = ceil((L - r) / d) tokens indexed i = coord div d, and windows live on group indices:

  non-causal: leader g = min(floor(i/s)*s + floor(s/2), n-1); start a = max(g - floor(w/2), 0),
              shifted back by g + right - (n-1) when g + right >= n (right = floor(w/2) + w%2 - 1);
              window [a, a + w).
  causal:     g = min(floor(i/s)*s + s - 1, n-1); start a = max(g - w + 1, 0); end min(i + 1, n).

A query sees a key iff, in every dimension, both are in the same dilation group and the key's group
index is in the query's window. Tokens are flattened row-major, so the FlexAttention mask_mod
unflattens q_idx / kv_idx into coordinates and applies the window per dimension with torch ops
(they work both on the scalars that flex's vmap passes and on broadcast index grids).

Because the attended set of a query is a box (product of per-dimension sets), the number of
attended pairs factorises: pairs = prod over dims of (sum over that dim's coordinates of the
window size). That gives exact useful-FLOP counts without enumerating S^2 pairs.

`window_range_scalar` is a plain-Python transcription used by the self-test as a second, loop-based
reading of the same text.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

# ---------------------------------------------------------------------------------------------
# Problem masks


@dataclass
class MaskSpec:
    """What a benchmark row attends: 'none' (dense), 'causal' (top-left, Sq == Sk),
    'neighborhood' (per-dim lists over `extents`) or 'block' (bool blocks [nbq, nbk])."""

    kind: str
    extents: tuple = ()
    kernel_size: tuple = ()
    dilation: tuple = ()
    stride: tuple = ()
    causal: tuple = ()
    block_size: int = 128
    blocks: object = None  # torch.bool [ceil(S/block), ceil(S/block)] for kind == "block"
    density: float = 0.0

    def describe(self) -> str:
        if self.kind == "neighborhood":
            parts = [f"K{'x'.join(map(str, self.kernel_size))}"]
            if any(d != 1 for d in self.dilation):
                parts.append(f"dil{'x'.join(map(str, self.dilation))}")
            if any(s != 1 for s in self.stride):
                parts.append(f"str{'x'.join(map(str, self.stride))}")
            if any(self.causal):
                parts.append(f"causal{''.join('1' if c else '0' for c in self.causal)}")
            return " ".join(parts)
        if self.kind == "block":
            return f"block{self.block_size} {self.density * 100:.0f}%"
        return self.kind


def neighborhood(extents, kernel_size, dilation=None, stride=None, causal=None) -> MaskSpec:
    dims = len(extents)
    return MaskSpec(
        kind="neighborhood",
        extents=tuple(extents),
        kernel_size=tuple(kernel_size),
        dilation=tuple(dilation or (1,) * dims),
        stride=tuple(stride or (1,) * dims),
        causal=tuple(bool(c) for c in (causal or (False,) * dims)),
    )


def random_blocks(seq_len: int, block_size: int, density: float, seed: int, device="cpu"):
    """A block mask with exactly round(density * blocks) true blocks, chosen by a seeded generator."""
    import torch

    nb = -(-seq_len // block_size)
    total = nb * nb
    count = max(1, round(density * total))
    generator = torch.Generator().manual_seed(seed)
    chosen = torch.randperm(total, generator=generator)[:count]
    flat = torch.zeros(total, dtype=torch.bool)
    flat[chosen] = True
    return flat.view(nb, nb).to(device)


# ---------------------------------------------------------------------------------------------
# The window, in plain Python (self-test and pair counts)


def window_range_scalar(i: int, n: int, w: int, s: int, causal: bool) -> tuple[int, int]:
    """Keys [begin, end) (group indices) of the query with group index i in a group of n tokens."""
    if causal:
        g = min((i // s) * s + s - 1, n - 1)
        return max(g - w + 1, 0), min(i + 1, n)
    left = w // 2
    right = w // 2 + w % 2 - 1
    g = min((i // s) * s + s // 2, n - 1)
    a = max(g - left, 0)
    if g + right >= n:
        a -= g + right - (n - 1)
    return a, a + w


def window_sizes_1d(extent: int, w: int, d: int, s: int, causal: bool) -> list[int]:
    sizes = []
    for x in range(extent):
        r = x % d
        n = (extent - r + d - 1) // d
        a, b = window_range_scalar(x // d, n, w, s, causal)
        sizes.append(b - a)
    return sizes


def attends_scalar(spec: MaskSpec, q: int, k: int) -> bool:
    """Brute-force reading of DESIGN §3 for one (query, key) pair of flat token indices."""
    if spec.kind == "none":
        return True
    if spec.kind == "causal":
        return k <= q
    if spec.kind == "block":
        return bool(spec.blocks[q // spec.block_size, k // spec.block_size])
    qc = unflatten_scalar(q, spec.extents)
    kc = unflatten_scalar(k, spec.extents)
    for dim, extent in enumerate(spec.extents):
        d = spec.dilation[dim]
        if qc[dim] % d != kc[dim] % d:
            return False
        n = (extent - qc[dim] % d + d - 1) // d
        a, b = window_range_scalar(qc[dim] // d, n, spec.kernel_size[dim], spec.stride[dim], spec.causal[dim])
        if not a <= kc[dim] // d < b:
            return False
    return True


def unflatten_scalar(index: int, extents) -> list[int]:
    coords = []
    for extent in reversed(extents):
        coords.append(index % extent)
        index //= extent
    return coords[::-1]


def count_pairs(spec: MaskSpec, seq_q: int, seq_k: int) -> int:
    """Attended (query, key) pairs of one (batch, head), exactly."""
    if spec.kind == "none":
        return seq_q * seq_k
    if spec.kind == "causal":
        if seq_q != seq_k:
            raise ValueError("causal pair count assumes seq_q == seq_k")
        return seq_q * (seq_q + 1) // 2
    if spec.kind == "block":
        b = spec.block_size
        rows = [min(b, seq_q - i * b) for i in range(spec.blocks.shape[0])]
        cols = [min(b, seq_k - j * b) for j in range(spec.blocks.shape[1])]
        blocks = spec.blocks.to("cpu").tolist()
        return sum(rows[i] * cols[j] for i, row in enumerate(blocks) for j, on in enumerate(row) if on)
    pairs = 1
    for dim, extent in enumerate(spec.extents):
        pairs *= sum(window_sizes_1d(extent, spec.kernel_size[dim], spec.dilation[dim], spec.stride[dim],
                                     spec.causal[dim]))
    return pairs


# ---------------------------------------------------------------------------------------------
# The window, in torch ops (FlexAttention mask_mod, dense masks for SDPA, reference slices)


def _minimum(a, b):
    import torch

    return torch.minimum(a, b) if isinstance(b, torch.Tensor) else a.clamp(max=b)


def window_contains(qc, kc, extent: int, w: int, d: int, s: int, causal: bool):
    """Bool tensor: key coordinate kc is in the window of query coordinate qc (one dimension)."""
    if d == 1:
        n = extent
        i, j = qc, kc
        same_group = None
    else:
        rq = qc % d
        n = (extent - rq + d - 1) // d
        i, j = qc // d, kc // d
        same_group = rq == kc % d
    if causal:
        g = _minimum((i // s) * s + (s - 1), n - 1)
        begin = (g - (w - 1)).clamp(min=0)
        end = _minimum(i + 1, n)
    else:
        left = w // 2
        right = w // 2 + w % 2 - 1
        g = _minimum((i // s) * s + s // 2, n - 1)
        begin = (g - left).clamp(min=0) - (g + right - (n - 1)).clamp(min=0)
        end = begin + w
    inside = (j >= begin) & (j < end)
    return inside if same_group is None else inside & same_group


def unflatten(index, extents):
    """Row-major coordinates of flat token indices (tensors); the outermost needs no modulo."""
    coords = []
    inner = math.prod(extents)
    for dim, extent in enumerate(extents):
        inner //= extent
        coord = index // inner if inner > 1 else index
        coords.append(coord if dim == 0 else coord % extent)
    return coords


def mask_mod_for(spec: MaskSpec):
    """A FlexAttention mask_mod(b, h, q_idx, kv_idx) implementing `spec` on flat token indices."""
    if spec.kind == "causal":
        def causal_mask_mod(b, h, q_idx, kv_idx):
            return q_idx >= kv_idx
        return causal_mask_mod
    if spec.kind == "block":
        blocks = spec.blocks
        size = spec.block_size

        def block_mask_mod(b, h, q_idx, kv_idx):
            return blocks[q_idx // size, kv_idx // size]
        return block_mask_mod
    if spec.kind == "neighborhood":
        extents = spec.extents
        params = list(zip(extents, spec.kernel_size, spec.dilation, spec.stride, spec.causal))

        def neighborhood_mask_mod(b, h, q_idx, kv_idx):
            qc = unflatten(q_idx, extents)
            kc = unflatten(kv_idx, extents)
            result = None
            for dim, (extent, w, d, s, c) in enumerate(params):
                inside = window_contains(qc[dim], kc[dim], extent, w, d, s, c)
                result = inside if result is None else result & inside
            return result
        return neighborhood_mask_mod
    return None


def mask_rows(spec: MaskSpec, rows, seq_k: int):
    """Bool [len(rows), seq_k]: which keys each query in `rows` (a 1-D index tensor) attends."""
    import torch

    device = rows.device
    keys = torch.arange(seq_k, device=device)
    if spec.kind == "none":
        return torch.ones(rows.numel(), seq_k, dtype=torch.bool, device=device)
    if spec.kind == "causal":
        return keys[None, :] <= rows[:, None]
    if spec.kind == "block":
        blocks = spec.blocks.to(device)
        return blocks[(rows // spec.block_size)[:, None], (keys // spec.block_size)[None, :]]
    return mask_mod_for(spec)(None, None, rows[:, None], keys[None, :])


def dense_mask(spec: MaskSpec, seq_q: int, seq_k: int, device, chunk: int = 1024):
    """Bool [seq_q, seq_k] built in row chunks (for SDPA's attn_mask and small references)."""
    import torch

    out = torch.empty(seq_q, seq_k, dtype=torch.bool, device=device)
    for start in range(0, seq_q, chunk):
        rows = torch.arange(start, min(start + chunk, seq_q), device=device)
        out[start:start + rows.numel()] = mask_rows(spec, rows, seq_k)
    return out


# ---------------------------------------------------------------------------------------------
# FlexAttention BlockMask


def flex_block_mask(spec: MaskSpec, seq_q: int, seq_k: int, device, block_size: int = 128,
                    builder: str = "auto"):
    """(BlockMask or None, builder used). None means dense: no mask at all.

    builder 'create_block_mask' calls torch's create_block_mask(mask_mod, ...), which materialises
    the full [Sq, Sk] mask and its index grids; 'chunked' evaluates the same mask_mod in query-block
    chunks and assembles the identical BlockMask with BlockMask.from_kv_blocks, so memory stays
    bounded at 64K tokens. 'auto' uses create_block_mask up to 16384 x 16384 and chunked above,
    or when create_block_mask fails.
    """
    if spec.kind == "none":
        return None, "none"
    from torch.nn.attention.flex_attention import create_block_mask

    if spec.kind == "block" and spec.block_size == block_size and builder == "auto":
        return block_aligned_block_mask(spec, seq_q, seq_k, device, block_size), "from_blocks"
    mask_mod = mask_mod_for(spec)
    if builder == "auto":
        builder = "create_block_mask" if seq_q * seq_k <= 16384 * 16384 else "chunked"
    if builder == "create_block_mask":
        try:
            return create_block_mask(mask_mod, None, None, seq_q, seq_k, device=device,
                                     BLOCK_SIZE=block_size), "create_block_mask"
        except Exception as error:  # noqa: BLE001 - e.g. out of memory; the chunked build is equal
            print(f"  note: create_block_mask failed ({type(error).__name__}: {str(error)[:120]}); "
                  f"building the BlockMask in chunks")
            _free_cuda_memory()
    return chunked_block_mask(spec, mask_mod, seq_q, seq_k, device, block_size), "chunked"


def block_aligned_block_mask(spec: MaskSpec, seq_q: int, seq_k: int, device, block_size: int):
    """A block mask whose blocks are Flex's blocks: every true block is a full block and no mask_mod
    runs (Flex's fastest path; a mask_mod indexing the block tensor fails to lower in Inductor,
    "Buffers cannot be created while lowering a pointwise subgraph")."""
    import torch
    from torch.nn.attention.flex_attention import BlockMask

    full = spec.blocks.to(device=device, dtype=torch.int32)
    num = full.sum(dim=-1).to(torch.int32)[None, None].contiguous()
    indices = torch.argsort(full, dim=-1, descending=True, stable=True).to(torch.int32)[None, None].contiguous()
    empty_num = torch.zeros_like(num)
    return BlockMask.from_kv_blocks(empty_num, torch.zeros_like(indices), num, indices,
                                    BLOCK_SIZE=(block_size, block_size), mask_mod=None,
                                    seq_lengths=(seq_q, seq_k))


def _free_cuda_memory():
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def chunked_block_mask(spec: MaskSpec, mask_mod, seq_q: int, seq_k: int, device, block_size: int,
                       max_chunk_elements: int = 1 << 27):
    import torch
    from torch.nn.attention.flex_attention import BlockMask

    nbq = -(-seq_q // block_size)
    nbk = -(-seq_k // block_size)
    padded_k = nbk * block_size
    partial = torch.zeros(nbq, nbk, dtype=torch.int32, device=device)
    full = torch.zeros(nbq, nbk, dtype=torch.int32, device=device)
    keys = torch.arange(padded_k, device=device)
    key_valid = keys < seq_k
    blocks_per_chunk = max(1, max_chunk_elements // (block_size * padded_k))
    for first in range(0, nbq, blocks_per_chunk):
        last = min(first + blocks_per_chunk, nbq)
        rows = torch.arange(first * block_size, last * block_size, device=device)
        row_valid = rows < seq_q
        if spec.kind == "block":
            attend = mask_rows(spec, rows.clamp(max=seq_q - 1), padded_k)
        else:
            attend = mask_mod(None, None, rows[:, None], keys[None, :])
        attend = attend & key_valid[None, :] & row_valid[:, None]
        counts = attend.view(last - first, block_size, nbk, block_size).sum(dim=(1, 3))
        partial[first:last] = ((counts > 0) & (counts < block_size * block_size)).int()
        full[first:last] = (counts == block_size * block_size).int()

    def ordered(dense):
        num = dense.sum(dim=-1).to(torch.int32)
        indices = torch.argsort(dense, dim=-1, descending=True, stable=True).to(torch.int32)
        return num[None, None].contiguous(), indices[None, None].contiguous()

    kv_num, kv_indices = ordered(partial)
    full_num, full_indices = ordered(full)
    return BlockMask.from_kv_blocks(kv_num, kv_indices, full_num, full_indices,
                                    BLOCK_SIZE=(block_size, block_size), mask_mod=mask_mod,
                                    seq_lengths=(seq_q, seq_k))


# ---------------------------------------------------------------------------------------------
# Self-test: the torch window, pair counts and BlockMask builders against the scalar reading


def self_test(verbose: bool = True) -> list[str]:
    """Returns a list of failures (empty when everything agrees)."""
    import torch

    failures = []
    rng = random.Random(1234)

    def note(message):
        failures.append(message)
        if verbose:
            print("  SELF-TEST FAILED:", message)

    # 1. Per-dimension window: torch version vs scalar reading, every (w, d, s, c) on odd extents.
    checked = 0
    for extent in (1, 2, 5, 7, 12, 13):
        for w in range(1, extent + 1):
            for d in range(1, extent // w + 1):
                for s in range(1, w + 1):
                    for c in (False, True):
                        coords = torch.arange(extent)
                        got = window_contains(coords[:, None], coords[None, :], extent, w, d, s, c)
                        for x in range(extent):
                            n = (extent - x % d + d - 1) // d
                            a, b = window_range_scalar(x // d, n, w, s, c)
                            want = [(y % d == x % d) and a <= y // d < b for y in range(extent)]
                            if got[x].tolist() != want:
                                note(f"window L={extent} w={w} d={d} s={s} causal={c} x={x}")
                                break
                            if not c and b - a != w:
                                note(f"non-causal window size {b - a} != {w} (L={extent} d={d} s={s} x={x})")
                                break
                        checked += 1
    # 2. Multi-dimensional masks: mask_mod (broadcast and vmap-shaped scalars), dense_mask and
    #    count_pairs agree with the brute-force scalar test.
    specs = [
        MaskSpec("none"),
        MaskSpec("causal"),
        neighborhood((37,), (7,), (2,), (3,), (False,)),
        neighborhood((37,), (7,), (2,), (3,), (True,)),
        neighborhood((9, 11), (3, 5), (1, 2), (2, 1), (False, True)),
        neighborhood((5, 6, 7), (3, 3, 5), (1, 2, 1), (1, 1, 3), (True, False, False)),
        neighborhood((4, 8, 8), (3, 7, 7)),
    ]
    for _ in range(6):
        dims = rng.randint(1, 3)
        extents = [rng.randint(3, 9) for _ in range(dims)]
        ks, ds, ss, cs = [], [], [], []
        for extent in extents:
            w = rng.randint(1, extent)
            d = rng.randint(1, extent // w)
            ks.append(w), ds.append(d), ss.append(rng.randint(1, w)), cs.append(rng.random() < 0.4)
        specs.append(neighborhood(extents, ks, ds, ss, cs))
    block_spec = MaskSpec("block", block_size=16, blocks=random_blocks(100, 16, 0.3, seed=7), density=0.3)
    specs.append(block_spec)
    for spec in specs:
        seq = math.prod(spec.extents) if spec.kind == "neighborhood" else (100 if spec.kind == "block" else 29)
        dense = dense_mask(spec, seq, seq, "cpu", chunk=17)
        want = torch.tensor([[attends_scalar(spec, q, k) for k in range(seq)] for q in range(seq)])
        if not torch.equal(dense, want):
            note(f"dense mask differs from the scalar reading for {spec.kind} {spec.extents} {spec.describe()}")
        if int(want.sum()) != count_pairs(spec, seq, seq):
            note(f"count_pairs {count_pairs(spec, seq, seq)} != {int(want.sum())} for {spec.extents} "
                 f"{spec.describe()}")
        mask_mod = mask_mod_for(spec)
        if mask_mod is not None:
            index = torch.arange(seq)
            if not torch.equal(mask_mod(None, None, index[:, None], index[None, :]), want):
                note(f"mask_mod on an index grid differs for {spec.kind} {spec.extents} {spec.describe()}")
            samples = [(q, q) for q in range(0, seq, 5)] + [(rng.randrange(seq), rng.randrange(seq))
                                                            for _ in range(40)]
            for q, k in samples:
                got = bool(mask_mod(torch.tensor(0), torch.tensor(0), torch.tensor(q), torch.tensor(k)))
                if got != bool(want[q, k]):
                    note(f"mask_mod on scalars differs at ({q}, {k}) for {spec.extents} {spec.describe()}")
                    break
    # 3. FlexAttention BlockMask: create_block_mask and the chunked builder give the same blocks,
    #    and expanding the BlockMask with its mask_mod gives the dense mask.
    try:
        import torch.nn.attention.flex_attention  # noqa: F401 - only whether it exists
    except ImportError as error:
        note(f"flex_attention not importable: {error}")
        return failures
    for spec in specs[2:]:
        seq = math.prod(spec.extents) if spec.kind == "neighborhood" else 100
        block = 16 if spec.kind == "block" else 8
        reference, _ = flex_block_mask(spec, seq, seq, "cpu", block, builder="create_block_mask")
        chunked, _ = flex_block_mask(spec, seq, seq, "cpu", block, builder="chunked")
        for name in ("kv_num_blocks", "full_kv_num_blocks"):
            if not torch.equal(getattr(reference, name), getattr(chunked, name)):
                note(f"chunked BlockMask {name} differs for {spec.extents} {spec.describe()}")
        if spec.kind == "block":
            aligned, _ = flex_block_mask(spec, seq, seq, "cpu", block)
            if not torch.equal(reference.to_dense(), aligned.to_dense()):
                note(f"block-aligned BlockMask differs for {spec.describe()}")
        if not torch.equal(reference.to_dense(), chunked.to_dense()):
            note(f"chunked BlockMask blocks differ for {spec.extents} {spec.describe()}")
    if verbose:
        print(f"  self-test: {checked} single-dimension windows, {len(specs)} masks, "
              f"{len(specs) - 2} BlockMask builds: {'ok' if not failures else f'{len(failures)} failures'}")
    return failures


if __name__ == "__main__":
    import sys

    sys.exit(1 if self_test() else 0)
