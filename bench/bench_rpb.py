#!/usr/bin/env python3
"""Neighborhood attention with NATTEN <= 0.17's relative positional bias (rpb), fused in attnkit, against
FlexAttention with the same window (block mask from a mask_mod) and the same bias (a score_mod), in one
process on one GPU, through the public APIs with default settings. NATTEN >= 0.20 has no fused rpb: Flex
with a score_mod is what a user leaving NATTEN 0.17 would otherwise run.

Rows are NAT/DiNAT-style layers (2-D K7 at 14^2-56^2 tokens, dilation 1 and > 1, D32 and D64) plus a 1-D and
a 3-D window. Each row times the forward and the forward+backward (gradients of q, k, v and rpb) of:
attnkit with rpb, attnkit without rpb (what the bias costs), Flex with rpb. TF/s counts useful FLOPs only
(4*B*H*pairs*D forward, 2.5x that for the backward). The attnkit and Flex outputs are compared (relative L2)
before timing. Usage: python bench/bench_rpb.py [--json PATH] [--only NAME,...]
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

import attention_masks as masks  # noqa: E402
from bench_attention import Timer  # noqa: E402

# name, batch, heads, head dim, token extents, kernel size, dilation
ROWS = [
    ("nat-56x56-K7-D32", 16, 4, 32, (56, 56), (7, 7), (1, 1)),
    ("dinat-56x56-K7-dil8-D32", 16, 4, 32, (56, 56), (7, 7), (8, 8)),
    ("nat-28x28-K7-D32", 32, 8, 32, (28, 28), (7, 7), (1, 1)),
    ("dinat-14x14-K7-dil2-D32", 32, 16, 32, (14, 14), (7, 7), (2, 2)),
    ("na2d-64x64-K13-D64", 8, 4, 64, (64, 64), (13, 13), (1, 1)),
    ("na1d-4096-K33-D64", 8, 8, 64, (4096,), (33,), (1,)),
    ("na3d-8x32x32-K3x7x7-D64", 2, 4, 64, (8, 32, 32), (3, 7, 7), (1, 1, 1)),
]


def bias_score_mod(rpb, extents, kernel, dilation):
    """score + rpb[h, (k_0 - q_0)/d_0 + K_0 - 1, ...] on flat token indices (NATTEN <= 0.17's indexing)."""
    def score_mod(score, b, h, q_idx, kv_idx):
        qc = masks.unflatten(q_idx, extents)
        kc = masks.unflatten(kv_idx, extents)
        index = [h]
        for dim in range(len(extents)):
            offset = (kc[dim] - qc[dim]) // dilation[dim] + kernel[dim] - 1
            index.append(offset.clamp(0, 2 * kernel[dim] - 2))  # pairs outside the window: masked, any entry
        return score + rpb[tuple(index)].to(score.dtype)
    return score_mod


def run_row(row, timer, device):
    import torch
    from torch.nn.attention.flex_attention import flex_attention

    import attnkit

    name, batch, heads, dim, extents, kernel, dilation = row
    seq = math.prod(extents)
    spec = masks.neighborhood(extents, kernel, dilation)
    pairs = masks.count_pairs(spec, seq, seq)
    op = {1: attnkit.na1d, 2: attnkit.na2d, 3: attnkit.na3d}[len(extents)]
    gen = torch.Generator(device=device).manual_seed(0)
    shape = (batch, *extents, heads, dim)
    q, k, v = (torch.randn(shape, device=device, dtype=torch.bfloat16, generator=gen) for _ in range(3))
    rpb = torch.randn(heads, *(2 * w - 1 for w in kernel), device=device, generator=gen) * 0.5
    grad = torch.randn(shape, device=device, dtype=torch.bfloat16, generator=gen)

    def attnkit_call(with_bias):
        return lambda q_, k_, v_, b_: op(q_, k_, v_, kernel_size=kernel, dilation=dilation,
                                          rpb=b_ if with_bias else None)

    block_mask, _ = masks.flex_block_mask(spec, seq, seq, device, 128)
    compiled = torch.compile(flex_attention, dynamic=False)

    def flex_call(q_, k_, v_, b_):
        flat = [t.reshape(batch, seq, heads, dim).transpose(1, 2) for t in (q_, k_, v_)]
        out = compiled(*flat, score_mod=bias_score_mod(b_, extents, kernel, dilation), block_mask=block_mask)
        return out.transpose(1, 2).reshape(shape)

    candidates = {"attnkit rpb": attnkit_call(True), "attnkit no rpb": attnkit_call(False), "flex rpb": flex_call}
    result = {"name": name, "shape": list(shape), "kernel": list(kernel), "dilation": list(dilation),
              "pairs_per_head": pairs}
    check = {}
    for key in ("attnkit rpb", "flex rpb"):
        try:
            with torch.no_grad():
                check[key] = candidates[key](q, k, v, rpb).float()
        except Exception as error:  # noqa: BLE001 - e.g. Flex's compile running out of shared memory
            result[f"forward {key} error"] = result[f"forward+backward {key} error"] = (
                f"{type(error).__name__}: {str(error)[:160]}")
            del candidates[key]
    if len(check) == 2:
        ref = check["flex rpb"]
        result["rel_l2_attnkit_vs_flex"] = float((check["attnkit rpb"] - ref).norm() / ref.norm())
    flops_forward = 4.0 * batch * heads * pairs * dim
    for direction in ("forward", "forward+backward"):
        for key, fn in candidates.items():
            if direction == "forward":
                def work(fn=fn):
                    with torch.no_grad():
                        fn(q, k, v, rpb)
                flops = flops_forward
            else:
                leaves = [t.detach().clone().requires_grad_() for t in (q, k, v, rpb)]
                if key == "attnkit no rpb":
                    leaves[3].requires_grad_(False)

                def work(fn=fn, leaves=leaves):
                    fn(*leaves).backward(grad)
                flops = flops_forward * 3.5
            try:
                timing = timer(work)
                result[f"{direction} {key} ms"] = timing["ms"]
                result[f"{direction} {key} TF/s"] = flops / timing["ms"] / 1e9
            except Exception as error:  # noqa: BLE001 - a peer that cannot run this row is reported, not fatal
                result[f"{direction} {key} error"] = f"{type(error).__name__}: {str(error)[:160]}"
        fused = result.get(f"{direction} attnkit rpb ms")
        peer = result.get(f"{direction} flex rpb ms")
        if fused and peer:
            result[f"{direction} speedup vs flex"] = peer / fused
        plain = result.get(f"{direction} attnkit no rpb ms")
        if fused and plain:
            result[f"{direction} rpb cost"] = fused / plain
    torch.cuda.empty_cache()
    return result


def table(results):
    lines = ["| row | rel L2 vs Flex | fwd ms (TF/s) attnkit rpb | fwd Flex rpb | fwd ×Flex | fwd rpb cost | "
             "fwd+bwd ms (TF/s) attnkit rpb | fwd+bwd Flex rpb | fwd+bwd ×Flex | fwd+bwd rpb cost |",
             "|---|---|---|---|---|---|---|---|---|---|"]

    def cell(r, direction, key):
        if f"{direction} {key} ms" in r:
            return f"{r[f'{direction} {key} ms']:.3f} ({r[f'{direction} {key} TF/s']:.0f})"
        return r.get(f"{direction} {key} error", "-")[:40]

    def ratio(r, key):
        return f"{r[key]:.2f}" if key in r else "-"
    for r in results:
        rel = f"{r['rel_l2_attnkit_vs_flex']:.1e}" if "rel_l2_attnkit_vs_flex" in r else "-"
        lines.append(f"| {r['name']} | {rel} | {cell(r, 'forward', 'attnkit rpb')} | "
                     f"{cell(r, 'forward', 'flex rpb')} | {ratio(r, 'forward speedup vs flex')} | "
                     f"{ratio(r, 'forward rpb cost')} | {cell(r, 'forward+backward', 'attnkit rpb')} | "
                     f"{cell(r, 'forward+backward', 'flex rpb')} | {ratio(r, 'forward+backward speedup vs flex')} | "
                     f"{ratio(r, 'forward+backward rpb cost')} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--only", help="comma-separated row names (substrings)")
    parser.add_argument("--rep-ms", type=float, default=300.0)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_rpb: no CUDA device; nothing to time")
        return 0
    device = torch.device("cuda")
    rows = [r for r in ROWS if not args.only or any(p in r[0] for p in args.only.split(","))]
    # Every row's shapes, mask and score_mod compile Flex anew: past dynamo's default limit of 8 recompiles
    # flex_attention would silently run unfused.
    torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 256)
    torch._dynamo.config.accumulated_cache_size_limit = max(torch._dynamo.config.accumulated_cache_size_limit, 4096)
    timer = Timer(device, warmup_ms=100.0, rep_ms=args.rep_ms)
    results = []
    for row in rows:
        results.append(run_row(row, timer, device))
        print(table(results[-1:]).splitlines()[-1], flush=True)  # each row as soon as it is measured
        if args.json:
            args.json.write_text(json.dumps({"device": torch.cuda.get_device_name(), "rows": results}, indent=1))
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
