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

import functools
import math
import random
from dataclasses import dataclass

# ---------------------------------------------------------------------------------------------
# Problem masks


@dataclass
class MaskSpec:
    """What a benchmark row attends: 'none' (dense), 'causal' (top-left, Sq == Sk),
    'neighborhood' (per-dim lists over `extents`) or 'block' (bool blocks [nbq, nbk], shared by
    every batch and head, or [B|1, H|1, nbq, nbk], per batch and/or head, possibly a stride-0
    view: the tensor exactly as it is handed to attnkit; `block_form` names the form)."""

    kind: str
    extents: tuple = ()
    kernel_size: tuple = ()
    dilation: tuple = ()
    stride: tuple = ()
    causal: tuple = ()
    block_size: int = 128
    blocks: object = None  # torch.bool [(B|1, H|1,) ceil(S/block), ceil(S/block)] for kind == "block"
    density: float = 0.0
    block_form: str = "shared"  # see BLOCK_FORMS

    @property
    def blocks4(self):
        """The block tensor as [B|1, H|1, nbq, nbk] (a view)."""
        return self.blocks if self.blocks.dim() == 4 else self.blocks[None, None]

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
            text = f"block{self.block_size} {self.density * 100:.0f}%"
            if self.blocks is not None and self.blocks.dim() == 4:
                text += " [" + ",".join(map(str, self.blocks.shape[:2])) + ",nb,nb]"
            return text + (f" {self.block_form}" if self.block_form != "shared" else "")
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


@functools.lru_cache(maxsize=256)  # rows are built in every child process; callers never modify it
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


# How a block pattern is handed over (issue #20's per-head block masks):
BLOCK_FORMS = {
    "shared": "one [nb, nb] tensor for every batch and head (attnkit: [1, 1, nb, nb])",
    "expand": "[1, H, nb, nb], a stride-0 expand of the shared pattern over the heads",
    "heads": "[1, H, nb, nb], contiguous, the same pattern in every head",
    "random": "[1, H, nb, nb], contiguous, a different random pattern (same density) per head",
}


def head_blocks(seq_len: int, block_size: int, density: float, seed: int, heads: int, form: str):
    """The block tensor of `form` (BLOCK_FORMS) for `heads` heads, on the CPU."""
    import torch

    base = random_blocks(seq_len, block_size, density, seed)
    if form == "shared":
        return base
    if form == "expand":
        return base[None, None].expand(1, heads, *base.shape)
    if form == "heads":
        return base[None, None].expand(1, heads, *base.shape).contiguous()
    if form == "random":
        return torch.stack([random_blocks(seq_len, block_size, density, seed + 7919 * (h + 1))
                            for h in range(heads)])[None]
    raise ValueError(f"unknown block form {form!r}; one of {', '.join(BLOCK_FORMS)}")


def to_device_keeping_broadcast(t, device):
    """t on `device` with its stride-0 dimensions still stride 0 (Tensor.to() would materialise an
    expanded view): the distinct elements are copied, then expanded again."""
    index = tuple(slice(0, 1) if stride == 0 and extent > 1 else slice(None)
                  for extent, stride in zip(t.shape, t.stride()))
    return t[index].contiguous().to(device).expand(t.shape)


def _pick(index, extent: int):
    """The batch/head index into a mask dimension of `extent` (1: broadcast)."""
    return 0 if extent == 1 else index


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


def attends_scalar(spec: MaskSpec, q: int, k: int, b: int = 0, h: int = 0) -> bool:
    """Brute-force reading of DESIGN §3 for one (query, key) pair of flat token indices (in batch b,
    head h)."""
    if spec.kind == "none":
        return True
    if spec.kind == "causal":
        return k <= q
    if spec.kind == "block":
        blocks = spec.blocks4
        return bool(blocks[_pick(b, blocks.shape[0]), _pick(h, blocks.shape[1]),
                           q // spec.block_size, k // spec.block_size])
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


def count_pairs(spec: MaskSpec, seq_q: int, seq_k: int):
    """Attended (query, key) pairs of one (batch, head), exactly; for a block mask that differs
    between batches or heads, the mean over them (B·H·pairs is then still the exact total; a float
    when the mean is not whole)."""
    if spec.kind == "none":
        return seq_q * seq_k
    if spec.kind == "causal":
        if seq_q != seq_k:
            raise ValueError("causal pair count assumes seq_q == seq_k")
        return seq_q * (seq_q + 1) // 2
    if spec.kind == "block":
        import torch

        b = spec.block_size
        blocks = spec.blocks4.to("cpu")
        rows = torch.tensor([min(b, seq_q - i * b) for i in range(blocks.shape[2])], dtype=torch.int64)
        cols = torch.tensor([min(b, seq_k - j * b) for j in range(blocks.shape[3])], dtype=torch.int64)
        total = int((blocks.to(torch.int64) * (rows[:, None] * cols[None, :])).sum())
        masks = blocks.shape[0] * blocks.shape[1]
        return total // masks if total % masks == 0 else total / masks
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
        size = spec.block_size
        if spec.blocks.dim() == 2:
            blocks = spec.blocks

            def block_mask_mod(b, h, q_idx, kv_idx):
                return blocks[q_idx // size, kv_idx // size]
            return block_mask_mod
        blocks = spec.blocks4
        per_batch, per_head = blocks.shape[0] > 1, blocks.shape[1] > 1

        def head_block_mask_mod(b, h, q_idx, kv_idx):
            return blocks[b if per_batch else 0, h if per_head else 0, q_idx // size, kv_idx // size]
        return head_block_mask_mod
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


def mask_rows(spec: MaskSpec, rows, seq_k: int, batch: int = 0):
    """Bool [len(rows), seq_k]: which keys each query in `rows` (a 1-D index tensor) attends; for a
    block mask given per batch/head ([B|1, H|1, nb, nb]): [H|1, len(rows), seq_k] of batch `batch`."""
    import torch

    device = rows.device
    keys = torch.arange(seq_k, device=device)
    if spec.kind == "none":
        return torch.ones(rows.numel(), seq_k, dtype=torch.bool, device=device)
    if spec.kind == "causal":
        return keys[None, :] <= rows[:, None]
    if spec.kind == "block":
        qb, kb = (rows // spec.block_size)[:, None], (keys // spec.block_size)[None, :]
        if spec.blocks.dim() == 2:
            return spec.blocks.to(device)[qb, kb]
        blocks = spec.blocks4[_pick(batch, spec.blocks4.shape[0])].to(device)  # [H|1, nbq, nbk]
        return blocks[:, qb, kb]
    return mask_mod_for(spec)(None, None, rows[:, None], keys[None, :])


def mask_heads(spec: MaskSpec) -> tuple[int, int]:
    """(B|1, H|1): the batch and head extents of the mask (1, 1 unless a per-batch/head block mask)."""
    if spec.kind == "block" and spec.blocks.dim() == 4:
        return tuple(spec.blocks.shape[:2])
    return 1, 1


def dense_mask(spec: MaskSpec, seq_q: int, seq_k: int, device, chunk: int = 1024):
    """Bool [seq_q, seq_k] built in row chunks (for SDPA's attn_mask and small references); a block
    mask given per batch/head gives [B|1, H|1, seq_q, seq_k] (SDPA broadcasts it)."""
    import torch

    if spec.kind == "block" and spec.blocks.dim() == 4:
        batches, heads = mask_heads(spec)
        out = torch.empty(batches, heads, seq_q, seq_k, dtype=torch.bool, device=device)
        for b in range(batches):
            for start in range(0, seq_q, chunk):
                rows = torch.arange(start, min(start + chunk, seq_q), device=device)
                out[b, :, start:start + rows.numel()] = mask_rows(spec, rows, seq_k, batch=b)
        return out
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
    or when create_block_mask fails. A block mask given per batch/head ([B|1, H|1, nb, nb]) gives a
    BlockMask with the same leading extents (per-head kv_num_blocks / kv_indices), built from the
    block tensor without an [Sq, Sk] mask when its blocks are Flex's blocks.
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
        batches, heads = mask_heads(spec)
        try:
            return create_block_mask(mask_mod, batches if batches > 1 else None, heads if heads > 1 else None,
                                     seq_q, seq_k, device=device, BLOCK_SIZE=block_size), "create_block_mask"
        except Exception as error:  # noqa: BLE001 - e.g. out of memory; the chunked build is equal
            print(f"  note: create_block_mask failed ({type(error).__name__}: {str(error)[:120]}); "
                  f"building the BlockMask in chunks")
            _free_cuda_memory()
    return chunked_block_mask(spec, mask_mod, seq_q, seq_k, device, block_size), "chunked"


def block_aligned_block_mask(spec: MaskSpec, seq_q: int, seq_k: int, device, block_size: int):
    """A block mask whose blocks are Flex's blocks: every true block is a full block and no mask_mod
    runs (Flex's fastest path; a mask_mod indexing the block tensor fails to lower in Inductor,
    "Buffers cannot be created while lowering a pointwise subgraph"). A per-batch/head block tensor
    [B|1, H|1, nb, nb] (a stride-0 view included) gives kv_num_blocks [B|1, H|1, nb] and kv_indices
    [B|1, H|1, nb, nb] (materialised: Flex reads them per head, as the same pattern in every head)."""
    import torch
    from torch.nn.attention.flex_attention import BlockMask

    full = spec.blocks4.to(device=device, dtype=torch.int32).contiguous()
    num = full.sum(dim=-1).to(torch.int32).contiguous()
    indices = torch.argsort(full, dim=-1, descending=True, stable=True).to(torch.int32).contiguous()
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

    batches, heads = mask_heads(spec)
    partial = torch.zeros(batches, heads, -(-seq_q // block_size), -(-seq_k // block_size), dtype=torch.int32,
                          device=device)
    full = torch.zeros_like(partial)
    for b in range(batches):
        for h in range(heads):
            partial[b, h], full[b, h] = _chunked_blocks(spec, mask_mod, seq_q, seq_k, device, block_size,
                                                        max_chunk_elements, b, h)

    def ordered(dense):
        num = dense.sum(dim=-1).to(torch.int32)
        indices = torch.argsort(dense, dim=-1, descending=True, stable=True).to(torch.int32)
        return num.contiguous(), indices.contiguous()

    kv_num, kv_indices = ordered(partial)
    full_num, full_indices = ordered(full)
    return BlockMask.from_kv_blocks(kv_num, kv_indices, full_num, full_indices,
                                    BLOCK_SIZE=(block_size, block_size), mask_mod=mask_mod,
                                    seq_lengths=(seq_q, seq_k))


def _chunked_blocks(spec: MaskSpec, mask_mod, seq_q: int, seq_k: int, device, block_size: int,
                    max_chunk_elements: int, batch: int, head: int):
    """(partial, full) int32 [nbq, nbk] of batch `batch`, head `head`."""
    import torch

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
            attend = mask_rows(spec, rows.clamp(max=seq_q - 1), padded_k, batch=batch)
            if attend.dim() == 3:
                attend = attend[_pick(head, attend.shape[0])]
        else:
            attend = mask_mod(None, None, rows[:, None], keys[None, :])
        attend = attend & key_valid[None, :] & row_valid[:, None]
        counts = attend.view(last - first, block_size, nbk, block_size).sum(dim=(1, 3))
        partial[first:last] = ((counts > 0) & (counts < block_size * block_size)).int()
        full[first:last] = (counts == block_size * block_size).int()
    return partial, full


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
    head_masks = _self_test_head_blocks(note)
    if verbose:
        print(f"  self-test: {checked} single-dimension windows, {len(specs)} masks, "
              f"{len(specs) - 2} BlockMask builds, {head_masks} per-batch/head block masks: "
              f"{'ok' if not failures else f'{len(failures)} failures'}")
    return failures


def _self_test_head_blocks(note) -> int:
    """Block masks given per batch/head (issue #20's forms, and a per-batch one): dense_mask,
    mask_rows, mask_mod, count_pairs and the three BlockMask builders against a brute-force dense
    mask [B|1, H|1, S, S] from attends_scalar. Returns how many masks were checked."""
    import torch

    seq, size, heads = 100, 16, 3  # 7 blocks per side, the last one partial
    specs = []
    for form in BLOCK_FORMS:
        blocks = head_blocks(seq, size, 0.3, seed=11, heads=heads, form=form)
        specs.append(MaskSpec("block", block_size=size, blocks=blocks, density=0.3, block_form=form))
    per_batch = torch.stack([head_blocks(seq, size, 0.2, seed=20 + b, heads=heads, form="random")[0]
                             for b in range(2)])  # [2, H, nb, nb]
    specs.append(MaskSpec("block", block_size=size, blocks=per_batch, density=0.2, block_form="random"))
    shared = specs[0].blocks
    if specs[1].blocks.stride()[1] != 0 or to_device_keeping_broadcast(specs[1].blocks, "cpu").stride()[1] != 0:
        note("the expand form is not a stride-0 view over the heads")
    if not torch.equal(specs[2].blocks, specs[1].blocks) or not torch.equal(specs[2].blocks[0, 1], shared):
        note("the per-head contiguous form does not repeat the shared pattern")
    random_heads = specs[3].blocks[0]
    if all(torch.equal(random_heads[h], random_heads[0]) for h in range(1, heads)):
        note("the per-head random form has the same pattern in every head")
    if any(int(random_heads[h].sum()) != int(shared.sum()) for h in range(heads)):
        note("the per-head random form's density differs from the shared one's")
    for spec in specs:
        batches, mheads = mask_heads(spec)
        label = f"{spec.describe()} {tuple(spec.blocks.shape)}"
        want = torch.tensor([[[[attends_scalar(spec, q, k, b, h) for k in range(seq)] for q in range(seq)]
                              for h in range(mheads)] for b in range(batches)])
        if spec.blocks.dim() == 2:
            want = want[0, 0]
        dense = dense_mask(spec, seq, seq, "cpu", chunk=17)
        if not torch.equal(dense, want):
            note(f"dense mask differs from the scalar reading for {label}")
        want4 = want if want.dim() == 4 else want[None, None]
        if count_pairs(spec, seq, seq) * batches * mheads != int(want4.sum()):
            note(f"count_pairs {count_pairs(spec, seq, seq)} x {batches * mheads} != {int(want4.sum())} for {label}")
        rows = torch.tensor([0, 5, 16, 50, 99])
        for b in range(batches):
            got = mask_rows(spec, rows, seq, batch=b)
            if not torch.equal(got if got.dim() == 3 else got[None], want4[b][:, rows]):
                note(f"mask_rows of batch {b} differs for {label}")
        mask_mod = mask_mod_for(spec)
        index = torch.arange(seq)
        for b in range(batches):
            for h in range(mheads):
                got = mask_mod(torch.tensor(b), torch.tensor(h), index[:, None], index[None, :])
                if not torch.equal(got, want4[b, h]):
                    note(f"mask_mod of batch {b} head {h} differs for {label}")
        # BlockMasks: element-level expansion of each builder's blocks against the brute force.
        nb = -(-seq // size)
        for builder in ("auto", "create_block_mask", "chunked"):
            block_mask, used = flex_block_mask(spec, seq, seq, "cpu", size, builder=builder)
            if builder == "auto" and used != "from_blocks":
                note(f"aligned per-head block mask built by {used}, not from the blocks, for {label}")
            if tuple(block_mask.kv_num_blocks.shape) != (batches, mheads, nb):
                note(f"{used} BlockMask kv_num_blocks shape {tuple(block_mask.kv_num_blocks.shape)} for {label}")
                continue
            blocks = block_mask.to_dense().bool()  # [B|1, H|1, nb, nb]: partial or full blocks
            elements = blocks.repeat_interleave(size, dim=2).repeat_interleave(size, dim=3)[..., :seq, :seq]
            if not torch.equal(elements, want4):
                note(f"{used} BlockMask differs from the brute-force dense mask for {label}")
    return len(specs)


if __name__ == "__main__":
    import sys

    sys.exit(1 if self_test() else 0)
