#!/usr/bin/env python3
"""Scattered boolean element masks (issue 24): attnkit's automatic path choice against its forced paths, its
unmasked kernel, FlexAttention and SDPA with the same mask, in one process on one GPU, public APIs.

Rows: S 4096 / 8192 / 16384 / 32768, H 16, D 64 and D 128, bf16, batch 1, one broadcast mask [S, S] per
(S, density): uniformly scattered true entries at 0.1, 1, 3, 10, 30 and 50 % plus the diagonal (no row is
empty). Candidates per row:
  attnkit auto       attnkit.attention(q, k, v, mask=m)                      (mask_path="auto")
  attnkit tiles      the same with mask_path="tiles": the tile-list path, today's path
  attnkit scattered  the same with mask_path="scattered" ("unsupported: <message>" where it cannot run)
  attnkit unmasked   attnkit.attention(q, k, v): the dense reference (once per S and D)
  flex               torch.compile(flex_attention) with a BlockMask built from m (128 x 128 blocks, partial
                     and full blocks counted from the bool tensor) and a mask_mod reading m
  sdpa efficient     F.scaled_dot_product_attention(attn_mask=m) on the memory-efficient backend
  sdpa math          the same on the math backend (skipped where its [H, S, S] scores would not fit)
Times: CUDA events, warm-up, median, L2 flushed before each run (bench_attention.Timer); --backward adds
forward+backward (gradients of q, k, v). Derived: auto / best other candidate, the speed-up of auto over
the tiles path (today's) and over Flex, auto / unmasked, and whether auto was within 5 % of the faster of
its two paths. Outputs are compared with the tiles path's (relative L2) before timing.
Usage: python bench/bench_sparse_mask.py [--backward] [--json PATH] [--only SUBSTR,...] [--rep-ms MS]
"""
from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

from bench_attention import Timer  # noqa: E402

SEQS = (4096, 8192, 16384, 32768)
DIMS = (64, 128)
DENSITIES = (0.001, 0.01, 0.03, 0.10, 0.30, 0.50)
HEADS = 16
FLEX_BLOCK = 128
# The math backend materialises fp32 scores and probabilities per head: beyond this it is not run.
MATH_BYTES_LIMIT = 24 << 30
CANDIDATES = ("attnkit auto", "attnkit tiles", "attnkit scattered", "flex", "sdpa efficient", "sdpa math")


def row_name(seq: int, dim: int, density: float) -> str:
    return f"S{seq}-D{dim}-{density * 100:g}%"


def scattered_mask(seq: int, density: float, device, generator):
    """[S, S] bool, true with `density` independently per entry, plus the diagonal; built in row chunks."""
    import torch

    mask = torch.empty(seq, seq, dtype=torch.bool, device=device)
    chunk = max(1, (1 << 28) // seq)
    for r0 in range(0, seq, chunk):
        r1 = min(seq, r0 + chunk)
        mask[r0:r1] = torch.rand(r1 - r0, seq, device=device, generator=generator) < density
    diagonal = torch.arange(seq, device=device)
    mask[diagonal, diagonal] = True
    return mask


def flex_block_mask(mask, block: int):
    """Flex's BlockMask of a bool [S, S] mask (S a multiple of `block`): blocks with some true entries are
    partial (mask_mod applied), all-true blocks full; counted from the tensor in row chunks."""
    import torch
    from torch.nn.attention.flex_attention import BlockMask

    seq = mask.shape[0]
    nb = seq // block
    counts = torch.empty(nb, nb, dtype=torch.int32, device=mask.device)
    rows = max(1, (1 << 26) // (block * seq))
    for b0 in range(0, nb, rows):
        b1 = min(nb, b0 + rows)
        part = mask[b0 * block:b1 * block].view(b1 - b0, block, nb, block)
        counts[b0:b1] = part.sum(dim=(1, 3), dtype=torch.int32)
    full = counts == block * block
    partial = (counts > 0) & ~full

    def ordered(dense):
        num = dense.sum(dim=-1).to(torch.int32)[None, None].contiguous()
        indices = torch.argsort(dense.to(torch.int8), dim=-1, descending=True, stable=True).to(torch.int32)
        return num, indices[None, None].contiguous()

    def mask_mod(b, h, q_idx, kv_idx):
        return mask[q_idx, kv_idx]

    kv_num, kv_indices = ordered(partial)
    full_num, full_indices = ordered(full)
    return BlockMask.from_kv_blocks(kv_num, kv_indices, full_num, full_indices, BLOCK_SIZE=(block, block),
                                    mask_mod=mask_mod, seq_lengths=(seq, seq))


def unsupported_text(error) -> str | None:
    """'unsupported: <message>' for the library's ATTNKIT_UNSUPPORTED, else None."""
    from attnkit import _capi

    if isinstance(error, _capi.AttnkitError) and error.status == _capi.ATTNKIT_UNSUPPORTED:
        return f"unsupported: {error}"
    return None


def error_text(error) -> str:
    return unsupported_text(error) or f"{type(error).__name__}: {str(error)[:200]}"


class Problem:
    """q, k, v, grad_out [1, S, H, D] bf16 and the candidates' callables for one (S, D)."""

    def __init__(self, seq, dim, device, generator):
        import torch

        shape = (1, seq, HEADS, dim)
        self.seq, self.dim = seq, dim
        self.q, self.k, self.v, self.grad = (
            torch.randn(shape, device=device, dtype=torch.bfloat16, generator=generator) for _ in range(4))

    def attnkit(self, mask, path):
        import attnkit

        if mask is None:
            return lambda q, k, v: attnkit.attention(q, k, v)
        return lambda q, k, v: attnkit.attention(q, k, v, mask=mask, mask_path=path)

    def flex(self, mask, compiled):
        block_mask = flex_block_mask(mask, FLEX_BLOCK)

        def call(q, k, v):
            out = compiled(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), block_mask=block_mask)
            return out.transpose(1, 2)
        return call

    def sdpa(self, mask, backend):
        import torch
        import torch.nn.functional as F
        from torch.nn.attention import sdpa_kernel

        def call(q, k, v):
            with sdpa_kernel(backend):
                out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                     attn_mask=mask)
            return out.transpose(1, 2)
        return call


def time_candidate(timer, fn, problem, backward: bool) -> dict:
    import torch

    if not backward:
        def work():
            with torch.no_grad():
                fn(problem.q, problem.k, problem.v)
    else:
        leaves = [t.detach().clone().requires_grad_() for t in (problem.q, problem.k, problem.v)]

        def work():
            fn(*leaves).backward(problem.grad)
    return timer(work)


def run_rows(seq, dim, masks, timer, device, directions, compiled_flex):
    """The rows of one (S, D); `masks` maps each density to its mask, alive for the whole run: a new mask at a
    freed one's address would keep the freed one's automatic choice (the choice is cached per mask view)."""
    import torch
    from torch.nn.attention import SDPBackend

    generator = torch.Generator(device=device).manual_seed(seq * 7 + dim)
    problem = Problem(seq, dim, device, generator)
    flops_per_pair = 4.0 * HEADS * dim
    unmasked = {}
    for direction in directions:
        try:
            unmasked[direction] = time_candidate(timer, problem.attnkit(None, "auto"), problem,
                                                 direction != "forward")["ms"]
        except Exception as error:  # noqa: BLE001 - reported in the rows
            unmasked[direction] = error_text(error)
    results = []
    for density, mask in masks.items():
        pairs = int(mask.sum())
        result = {"name": row_name(seq, dim, density), "seq": seq, "heads": HEADS, "dim": dim, "density": density,
                  "attended_fraction": pairs / (seq * seq)}
        candidates = {"attnkit auto": lambda: problem.attnkit(mask, "auto"),
                      "attnkit tiles": lambda: problem.attnkit(mask, "tiles"),
                      "attnkit scattered": lambda: problem.attnkit(mask, "scattered"),
                      "flex": lambda: problem.flex(mask, compiled_flex),
                      "sdpa efficient": lambda: problem.sdpa(mask, SDPBackend.EFFICIENT_ATTENTION),
                      "sdpa math": lambda: problem.sdpa(mask, SDPBackend.MATH)}
        callables = {}
        try:  # every candidate's output is compared with the tiles path's
            with torch.no_grad():
                reference = problem.attnkit(mask, "tiles")(problem.q, problem.k, problem.v).float()
        except Exception as error:  # noqa: BLE001
            reference = None
            result["attnkit tiles error"] = error_text(error)
        for key, make in candidates.items():
            if key == "sdpa math" and HEADS * seq * seq * 4 * 3 > MATH_BYTES_LIMIT:
                result[f"{key} skipped"] = "skipped: [H, S, S] scores would not fit"
                continue
            try:
                fn = make()
                with torch.no_grad():
                    out = fn(problem.q, problem.k, problem.v).float()
                if reference is not None:
                    result[f"{key} rel_l2"] = float((out - reference).norm() / reference.norm())
                callables[key] = fn
                del out
            except Exception as error:  # noqa: BLE001 - a candidate that cannot run is reported, not fatal
                result[f"{key} error"] = error_text(error)
                torch.cuda.empty_cache()
        for direction in directions:
            result[f"{direction} attnkit unmasked ms"] = unmasked[direction]
            flops = flops_per_pair * pairs * (1.0 if direction == "forward" else 3.5)
            for key, fn in callables.items():
                try:
                    ms = time_candidate(timer, fn, problem, direction != "forward")["ms"]
                    result[f"{direction} {key} ms"] = ms
                    result[f"{direction} {key} TF/s"] = flops / ms / 1e9
                except Exception as error:  # noqa: BLE001
                    result[f"{direction} {key} error"] = error_text(error)
                    torch.cuda.empty_cache()
            derive(result, direction)
        results.append(result)
        torch.cuda.empty_cache()
    return results


def derive(result: dict, direction: str) -> None:
    ms = {key: result.get(f"{direction} {key} ms") for key in CANDIDATES}
    auto = ms["attnkit auto"]
    if auto is None:
        return
    others = [value for key, value in ms.items() if key != "attnkit auto" and value is not None]
    if others:
        result[f"{direction} auto / best other"] = auto / min(others)
    if ms["attnkit tiles"] is not None:
        result[f"{direction} speedup vs tiles"] = ms["attnkit tiles"] / auto
    if ms["flex"] is not None:
        result[f"{direction} speedup vs flex"] = ms["flex"] / auto
    unmasked = result.get(f"{direction} attnkit unmasked ms")
    if isinstance(unmasked, float):
        result[f"{direction} auto / unmasked"] = auto / unmasked
    paths = [value for value in (ms["attnkit tiles"], ms["attnkit scattered"]) if value is not None]
    if paths:
        result[f"{direction} auto picked best"] = auto <= 1.05 * min(paths)


def table(results, direction: str) -> str:
    header = ("| row | auto | tiles | scattered | unmasked | flex | sdpa eff | sdpa math | auto/best other | "
              "× tiles | × flex | auto/unmasked | auto best (5 %) |")
    lines = [f"{direction}:", header, "|" + "---|" * 13]

    def cell(r, key):
        value = r.get(f"{direction} {key} ms")
        if isinstance(value, float):
            return f"{value:.3f}"
        if isinstance(value, str):
            return value[:60]
        return (r.get(f"{direction} {key} error") or r.get(f"{key} error") or r.get(f"{key} skipped") or "-")[:60]

    def ratio(r, key):
        value = r.get(f"{direction} {key}")
        if isinstance(value, bool):
            return "yes" if value else "NO"
        return f"{value:.2f}" if value is not None else "-"
    for r in results:
        lines.append(f"| {r['name']} | {cell(r, 'attnkit auto')} | {cell(r, 'attnkit tiles')} | "
                     f"{cell(r, 'attnkit scattered')} | {cell(r, 'attnkit unmasked')} | {cell(r, 'flex')} | "
                     f"{cell(r, 'sdpa efficient')} | {cell(r, 'sdpa math')} | {ratio(r, 'auto / best other')} | "
                     f"{ratio(r, 'speedup vs tiles')} | {ratio(r, 'speedup vs flex')} | "
                     f"{ratio(r, 'auto / unmasked')} | {ratio(r, 'auto picked best')} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backward", action="store_true", help="also time forward+backward")
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--only", help="comma-separated substrings of row names, e.g. S8192-D64,-1%%")
    parser.add_argument("--rep-ms", type=float, default=200.0)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_sparse_mask: no CUDA device; nothing to time")
        return 0
    from torch.nn.attention.flex_attention import flex_attention

    device = torch.device("cuda")
    torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 256)
    torch._dynamo.config.accumulated_cache_size_limit = max(torch._dynamo.config.accumulated_cache_size_limit, 4096)
    compiled_flex = torch.compile(flex_attention, dynamic=False)
    timer = Timer(device, warmup_ms=50.0, rep_ms=args.rep_ms)
    directions = ("forward", "forward+backward") if args.backward else ("forward",)
    wanted = args.only.split(",") if args.only else None
    results = []
    document = {"device": torch.cuda.get_device_name(), "date": datetime.date.today().isoformat(),
                "torch": torch.__version__, "rows": results}
    for seq in SEQS:
        masks = {}  # per density, shared by both head dims and kept alive until the next S
        generator = torch.Generator(device=device).manual_seed(seq)
        for dim in DIMS:
            densities = [d for d in DENSITIES if wanted is None or any(w in row_name(seq, dim, d) for w in wanted)]
            if not densities:
                continue
            try:
                for density in densities:
                    if density not in masks:
                        masks[density] = scattered_mask(seq, density, device, generator)
                rows = run_rows(seq, dim, {d: masks[d] for d in densities}, timer, device, directions, compiled_flex)
            except torch.cuda.OutOfMemoryError as error:
                rows = [{"name": row_name(seq, dim, d), "error": error_text(error)} for d in densities]
                torch.cuda.empty_cache()
            results.extend(rows)
            for direction in directions:
                print(table(rows, direction), flush=True)
            if args.json:
                args.json.write_text(json.dumps(document, indent=1))
        del masks
        torch.cuda.empty_cache()
    for direction in directions:
        print(table(results, direction))
    return 0


if __name__ == "__main__":
    sys.exit(main())
