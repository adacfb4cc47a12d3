#!/usr/bin/env python3
"""attnkit retention on the GPU against flash-linear-attention (fla-core 0.6.0), in the same process.

Rows (bf16 by default, default per-head decay gamma_h = 1 - 2^(-5-h), which is the only decay fla's
retention ops take):

  chunk     B8 T4096 H16 D128, B2 T16384 H16 D128 and the same at D64: forward, and backward
            (attnkit.retention(mode="chunk") against fla.ops.retention.chunk_retention)
  parallel  B8 T4096 H16 D128 and D64: forward and backward (attnkit mode="parallel" against fla
            parallel_retention); the D128 row again with the same decay given as an explicit decay matrix
            [H, T, T] (attnkit decay=..., fp32, no gradient for the matrix; fla: its gamma form)
  decode    B64 H16 D128, one token against an fp32 state, state out (attnkit mode="recurrent" against
            fla fused_recurrent_retention)

fla's layout: read from its signature at run time. fla-core 0.6.0 documents q, k [B, T, H, K],
v [B, T, H, V] (head_first=False, the default; head_first=True is deprecated and raises) and states
[N, H, K, V] -- attnkit's own layout, so both get the same tensors. Should an fla version default to
head_first=True, it gets [B, H, T, D] transposed views instead (printed in the header).

Method (DESIGN §5): CUDA events around each call, warm-up calls first, the median of --iters timed
calls. The backward is timed alone: torch.autograd.grad on a retained graph. "TF/s" uses the issue's
nominal count: forward 2*B*H*T*64*2*D + 4*B*H*T*D^2 FLOPs, backward 2x that; decode rows report
GB/s of the state read and written (2 * B*H*D*D * 4 bytes) plus q, k, v, out. Each row also prints
attnkit's relative L2 distance to fla's output (a sanity check, not a test).

  python3 bench/bench_retention.py                 # all rows
  python3 bench/bench_retention.py --only 'chunk*' --json out.json
  python3 bench/bench_retention.py --config block=32,segments=4   # force attnkit's shape choice
"""

from __future__ import annotations

import argparse
import fnmatch
import inspect
import json
import os
import statistics
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "python"))

import attnkit  # noqa: E402

try:
    from fla.ops.retention import chunk_retention, fused_recurrent_retention, parallel_retention

    FLA_ERROR = None
except Exception as error:  # noqa: BLE001 - any import failure means "no fla"
    chunk_retention = fused_recurrent_retention = parallel_retention = None
    FLA_ERROR = f"fla not installed ({type(error).__name__}: {error})"


def fla_head_first(fn) -> bool:
    """True when the fla op's default layout is [B, H, T, D] (head_first defaults to True)."""
    parameter = inspect.signature(fn).parameters.get("head_first")
    return parameter is not None and parameter.default is True


def fla_inputs(fn, *tensors):
    if fla_head_first(fn):
        return tuple(t.transpose(1, 2) for t in tensors)
    return tensors


def fla_output(fn, out):
    return out.transpose(1, 2) if fla_head_first(fn) else out


def time_ms(fn, warmup: int, iters: int) -> float:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def nominal_flops(b, t, h, d, backward=False):
    forward = 2 * b * h * t * 64 * 2 * d + 4 * b * h * t * d * d
    return 2 * forward if backward else forward


def relative_l2(a, b):
    a, b = a.detach().double(), b.detach().double()
    return float((a - b).norm() / b.norm().clamp(min=1e-30))


ROWS = [
    # name, kind, B, T, H, D
    ("chunk_b8_t4096_h16_d128", "chunk", 8, 4096, 16, 128),
    ("chunk_b2_t16384_h16_d128", "chunk", 2, 16384, 16, 128),
    ("chunk_b8_t4096_h16_d64", "chunk", 8, 4096, 16, 64),
    ("chunk_b2_t16384_h16_d64", "chunk", 2, 16384, 16, 64),
    ("parallel_b8_t4096_h16_d128", "parallel", 8, 4096, 16, 128),
    ("parallel_b8_t4096_h16_d64", "parallel", 8, 4096, 16, 64),
    ("parallel_decay_b8_t4096_h16_d128", "parallel_decay", 8, 4096, 16, 128),
    ("decode_b64_h16_d128", "decode", 64, 1, 16, 128),
]


def run_chunk_like(name, kind, b, t, h, d, args):
    dtype = getattr(torch, args.dtype)
    q, k, v = (torch.randn(b, t, h, d, device="cuda", dtype=dtype, requires_grad=True) for _ in range(3))
    grad = torch.randn(b, t, h, d, device="cuda", dtype=dtype)
    mode = "chunk" if kind == "chunk" else "parallel"
    fla_fn = chunk_retention if kind == "chunk" else parallel_retention
    results = []
    decay = None
    if kind == "parallel_decay":
        # The default gammas' powers, gamma_h^(t - m) for m <= t, as the [H, T, T] matrix (fp32).
        gamma = 1.0 - torch.exp2(-5.0 - torch.arange(h, device="cuda", dtype=torch.float64))
        steps = torch.arange(t, device="cuda", dtype=torch.float64)
        distance = steps[:, None] - steps[None, :]
        decay = torch.where(distance >= 0, gamma[:, None, None] ** distance.clamp(min=0), 0.0).float()
        del steps, distance

    def attnkit_forward():
        if decay is not None:
            return attnkit.retention(q, k, v, decay=decay)[0]
        return attnkit.retention(q, k, v, mode=mode)[0]

    candidates = [("attnkit", attnkit_forward)]
    if fla_fn is not None:
        def fla_forward():
            fq, fk, fv = fla_inputs(fla_fn, q, k, v)
            return fla_output(fla_fn, fla_fn(fq, fk, fv)[0])
        candidates.append(("fla", fla_forward))

    reference_out = None
    for candidate, forward in candidates:
        row = {"row": name, "candidate": candidate, "dtype": args.dtype}
        try:
            with torch.no_grad():
                ms = time_ms(forward, args.warmup, args.iters)
            row["forward_ms"] = ms
            row["forward_tflops"] = nominal_flops(b, t, h, d) / ms / 1e9
            out = forward()
            if candidate == "fla":
                reference_out = out.detach()
            row["_out"] = out.detach()
            if not args.no_backward:
                graph_out = forward()

                def backward():
                    torch.autograd.grad(graph_out, (q, k, v), grad, retain_graph=True)
                ms = time_ms(backward, args.warmup, args.iters)
                row["backward_ms"] = ms
                row["backward_tflops"] = nominal_flops(b, t, h, d, backward=True) / ms / 1e9
                del graph_out
        except Exception as error:  # noqa: BLE001 - a failing candidate is reported, the row goes on
            row["error"] = f"{type(error).__name__}: {error}"
        results.append(row)
        torch.cuda.empty_cache()
    for row in results:
        out = row.pop("_out", None)
        if out is not None and reference_out is not None and row["candidate"] == "attnkit":
            row["relative_l2_to_fla"] = relative_l2(out, reference_out)
    if fla_fn is None:
        results.append({"row": name, "candidate": "fla", "error": FLA_ERROR})
    return results


def run_decode(name, b, h, d, args):
    dtype = getattr(torch, args.dtype)
    q, k, v = (torch.randn(b, 1, h, d, device="cuda", dtype=dtype) for _ in range(3))
    state = torch.randn(b, h, d, d, device="cuda", dtype=torch.float32)
    moved = 2 * b * h * d * d * 4 + 4 * b * h * d * q.element_size()
    candidates = [("attnkit", lambda: attnkit.retention(q, k, v, mode="recurrent", initial_state=state,
                                                       output_final_state=True))]
    if fused_recurrent_retention is not None:
        fn = fused_recurrent_retention

        def fla_decode():
            fq, fk, fv = fla_inputs(fn, q, k, v)
            out, final = fn(fq, fk, fv, initial_state=state, output_final_state=True)
            return fla_output(fn, out), final
        candidates.append(("fla", fla_decode))
    results, outs = [], {}
    for candidate, step in candidates:
        row = {"row": name, "candidate": candidate, "dtype": args.dtype}
        try:
            with torch.no_grad():
                ms = time_ms(step, args.warmup, args.iters)
                outs[candidate] = step()
            row["forward_ms"] = ms
            row["gbps"] = moved / ms / 1e6
        except Exception as error:  # noqa: BLE001
            row["error"] = f"{type(error).__name__}: {error}"
        results.append(row)
    if "attnkit" in outs and "fla" in outs:
        results[0]["relative_l2_to_fla"] = relative_l2(outs["attnkit"][0], outs["fla"][0])
        results[0]["final_state_relative_l2_to_fla"] = relative_l2(outs["attnkit"][1], outs["fla"][1])
    if fused_recurrent_retention is None:
        results.append({"row": name, "candidate": "fla", "error": FLA_ERROR})
    return results


def add_ratios(results):
    by_row = {}
    for row in results:
        by_row.setdefault(row["row"], {})[row["candidate"]] = row
    for candidates in by_row.values():
        ours, theirs = candidates.get("attnkit"), candidates.get("fla")
        if not ours or not theirs:
            continue
        for key in ("forward_ms", "backward_ms"):
            if key in ours and key in theirs:
                ours[key.replace("_ms", "_speedup_vs_fla")] = theirs[key] / ours[key]


def print_table(results):
    header = f"{'row':28} {'candidate':9} {'fwd ms':>9} {'fwd TF/s':>9} {'bwd ms':>9} {'bwd TF/s':>9} " \
             f"{'GB/s':>8} {'fwd x':>6} {'bwd x':>6} {'L2 vs fla':>10}"
    print(header)
    for r in results:
        if "error" in r:
            print(f"{r['row']:28} {r['candidate']:9} {r['error']}")
            continue

        def cell(key, width, fmt):
            return f"{r[key]:{width}{fmt}}" if key in r else " " * width
        print(f"{r['row']:28} {r['candidate']:9} {cell('forward_ms', 9, '.3f')} {cell('forward_tflops', 9, '.1f')} "
              f"{cell('backward_ms', 9, '.3f')} {cell('backward_tflops', 9, '.1f')} {cell('gbps', 8, '.0f')} "
              f"{cell('forward_speedup_vs_fla', 6, '.2f')} {cell('backward_speedup_vs_fla', 6, '.2f')} "
              f"{cell('relative_l2_to_fla', 10, '.2e')}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="*", help="row names, comma-separated globs")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16"])
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--no-backward", action="store_true")
    parser.add_argument("--json", help="write the results to this file")
    parser.add_argument("--config",
                        help="ATTNKIT_RETENTION_CONFIG for attnkit: block=32|64,segments=N,decode=0|1,joint=0|1")
    args = parser.parse_args()
    if args.config:
        os.environ["ATTNKIT_RETENTION_CONFIG"] = args.config  # read when attnkit makes each shape's plan
    if not torch.cuda.is_available():
        sys.exit("bench_retention: no CUDA device")
    torch.manual_seed(0)
    patterns = [p.strip() for p in args.only.split(",")]
    device = torch.cuda.get_device_name()
    print(f"device: {device}; torch {torch.__version__}; dtype {args.dtype}; "
          f"ATTNKIT_RETENTION_CONFIG={os.environ.get('ATTNKIT_RETENTION_CONFIG', '')!r}")
    if chunk_retention is None:
        print(f"fla: {FLA_ERROR}")
    else:
        import fla
        layout = "[B, H, T, D]" if fla_head_first(chunk_retention) else "[B, T, H, D]"
        print(f"fla {getattr(fla, '__version__', '?')}: layout {layout} (read from chunk_retention's signature)")
    results = []
    for name, kind, b, t, h, d in ROWS:
        if not any(fnmatch.fnmatch(name, p) for p in patterns):
            continue
        rows = run_decode(name, b, h, d, args) if kind == "decode" else run_chunk_like(name, kind, b, t, h, d, args)
        add_ratios(rows)
        print_table(rows)  # each row as soon as it is measured; the whole table again at the end
        sys.stdout.flush()
        results += rows
    add_ratios(results)
    print_table(results)
    if args.json:
        summary = {"device": device, "dtype": args.dtype, "config": os.environ.get("ATTNKIT_RETENTION_CONFIG", ""),
                   "rows": results}
        Path(args.json).write_text(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
