#!/usr/bin/env python3
"""attnkit retention on the GPU against flash-linear-attention (fla-core 0.6.0), in the same process.

Rows (bf16 by default, default per-head decay gamma_h = 1 - 2^(-5-h), which is the only decay fla's
retention ops take):

  chunk     B8 T4096 H16 D128, B2 T16384 H16 D128 and the same at D64: forward, and backward
            (attnkit.retention(mode="chunk") against fla.ops.retention.chunk_retention); and the class's
            rows with fewer (batch, head) pairs than multiprocessors: B6 / B4 T4096 H16 D64, B3 T8192 H12
            D64, B4 T4096 H16 D128, B3 T4096 H12 D128
  parallel  B8 T4096 H16 D128 and D64: forward and backward (attnkit mode="parallel" against fla
            parallel_retention); the D128 row again with the same decay given as an explicit decay matrix
            [H, T, T] (attnkit decay=..., fp32, no gradient for the matrix; fla: its gamma form), and that
            form at B2 T8192 H8 D128 and B4 T2048 H16 D64
  decode    B64 H16 D128, one token against an fp32 state, state out (attnkit mode="recurrent" against
            fla fused_recurrent_retention)

fla's layout: read from its signature at run time. fla-core 0.6.0 documents q, k [B, T, H, K],
v [B, T, H, V] (head_first=False, the default; head_first=True is deprecated and raises) and states
[N, H, K, V] -- attnkit's own layout, so both get the same tensors. Should an fla version default to
head_first=True, it gets [B, H, T, D] transposed views instead (printed in the header).

Method (DESIGN §5): warm-up calls first; then --rounds rounds in which every candidate of the row (attnkit's
configurations and fla) in turn, starting one further along each round, runs a run of back-to-back calls between
two CUDA events (as many calls as fill about --run-ms, at least one); a candidate's time is the median over the
rounds of its per-call time, printed with the spread (lowest and highest round) so that a difference smaller than
the spread is read as none. Interleaving the candidates puts machine drift (clocks, the other candidates' caches)
on all of them alike. The backward is timed alone: torch.autograd.grad on a retained graph. GPU-only columns
("graph"): --graph-calls calls of each candidate captured in one CUDA graph and replayed in the same interleaved
rounds, so that a candidate whose host work per call outlasts its kernels (many small launches) is also seen without
it (forward only: a captured autograd backward is not supported here, and a failed capture leaves torch's CUDA
generator unusable for the rows after it). The backward's GPU-only column ("bwd kern"): --kernel-calls backward calls
under torch.profiler, the durations of the kernels they launch summed per call (bench_timing.kernel_ms), once per
candidate after the timed rounds. "TF/s" uses the issue's
nominal count: forward 2*B*H*T*64*2*D + 4*B*H*T*D^2 FLOPs, backward 2x that; decode rows report
GB/s of the state read and written (2 * B*H*D*D * 4 bytes) plus q, k, v, out. Each row also prints
attnkit's relative L2 distance to fla's output (a sanity check, not a test).

  python3 bench/bench_retention.py                 # all rows
  python3 bench/bench_retention.py --only 'chunk*' --json out.json
  python3 bench/bench_retention.py --config block=32,segments=4   # force attnkit's shape choice
  python3 bench/bench_retention.py --only 'chunk_b4_t8192*' --row chunk,4,8192,8,128   # a row of your own shape
  python3 bench/bench_retention.py --only 'chunk*' --configs "" joint=1   # both, fla timed once per row
  python3 bench/bench_retention.py --only 'parallel_decay*,chunk*' --configs "" joint=1 --fla-last
                                   # rows in that order; every attnkit candidate before fla's first (autotuning) call

--configs times attnkit once per configuration in the same process (fla once per row, its autotune paid once):
each attnkit candidate is named "attnkit" (empty configuration) or "attnkit:<config>", and gets its own ratios.
ATTNKIT_RETENTION_CONFIG is set before each candidate's calls; attnkit's plans are keyed by its value (the library's,
src/core/retention_plan.cpp, and the Python eager path's, attnkit/_retention_ops.py), so every configuration runs the
plan made under it.
"""

from __future__ import annotations

import argparse
import fnmatch
import inspect
import json
import os
import sys
import zlib
from contextlib import contextmanager
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "python"))

import attnkit  # noqa: E402
from bench_timing import back_to_back_run, event_ms, interleaved_rounds, kernel_ms  # noqa: E402

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


def time_interleaved(candidates, args, grad=False):
    """candidates: (name, fn, config) triples. Returns ({name: (median, lowest, highest) ms per call}, {name: error
    of a candidate whose warm-up failed}); see Method."""
    runs, errors = {}, {}
    for name, fn, config in candidates:
        try:
            with config_and_grad(config, grad):
                for _ in range(args.warmup):
                    fn()
                torch.cuda.synchronize()
                one_call_ms = event_ms(fn)
        except Exception as error:  # noqa: BLE001 - a failing candidate is reported, the others are timed
            errors[name] = f"{type(error).__name__}: {error}"
            continue
        runs[name] = back_to_back_run(lambda _, fn=fn: fn(), one_call_ms, args.run_ms,
                                      lambda config=config: config_and_grad(config, grad))
    return interleaved_rounds(runs, args.rounds), errors


def time_graphs(candidates, args):
    """GPU time per call without host work: each candidate's --graph-calls calls captured back to back in one CUDA
    graph, the graphs replayed in interleaved rounds as in time_interleaved. Same return shape; a candidate that
    cannot be captured is an error entry (its event times stand)."""
    runs, errors = {}, {}
    for name, fn, config in candidates:
        try:
            with retention_config(config or ""), torch.no_grad():
                side = torch.cuda.Stream()
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    for _ in range(2):
                        fn()
                torch.cuda.current_stream().wait_stream(side)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    for _ in range(args.graph_calls):
                        fn()
                graph.replay()
                torch.cuda.synchronize()
        except Exception as error:  # noqa: BLE001 - reported, the event times stand
            errors[name] = f"{type(error).__name__}: {error}"
            continue
        runs[name] = lambda graph=graph: event_ms(graph.replay) / args.graph_calls
    return interleaved_rounds(runs, args.rounds), errors


def record_time(row, key, timing):
    row[key] = timing[0]
    row[key.replace("_ms", "_spread_ms")] = [timing[1], timing[2]]


def nominal_flops(b, t, h, d, backward=False):
    forward = 2 * b * h * t * 64 * 2 * d + 4 * b * h * t * d * d
    return 2 * forward if backward else forward


def relative_l2(a, b):
    a, b = a.detach().double(), b.detach().double()
    return float((a - b).norm() / b.norm().clamp(min=1e-30))


def candidate_name(config: str) -> str:
    return f"attnkit:{config}" if config else "attnkit"


@contextmanager
def config_and_grad(config, grad: bool):
    """retention_config(config) with gradients enabled or not."""
    with retention_config(config or ""), torch.set_grad_enabled(grad):
        yield


@contextmanager
def retention_config(config: str):
    """ATTNKIT_RETENTION_CONFIG = config (unset when empty) for the calls inside, restored after."""
    before = os.environ.get("ATTNKIT_RETENTION_CONFIG")
    if config:
        os.environ["ATTNKIT_RETENTION_CONFIG"] = config
    else:
        os.environ.pop("ATTNKIT_RETENTION_CONFIG", None)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("ATTNKIT_RETENTION_CONFIG", None)
        else:
            os.environ["ATTNKIT_RETENTION_CONFIG"] = before


def is_attnkit(candidate: str) -> bool:
    return candidate == "attnkit" or candidate.startswith("attnkit:")


ROWS = [
    # name, kind, B, T, H, D
    ("chunk_b8_t4096_h16_d128", "chunk", 8, 4096, 16, 128),
    ("chunk_b2_t16384_h16_d128", "chunk", 2, 16384, 16, 128),
    ("chunk_b8_t4096_h16_d64", "chunk", 8, 4096, 16, 64),
    ("chunk_b2_t16384_h16_d64", "chunk", 2, 16384, 16, 64),
    # Fewer (batch, head) pairs than an H100's or H200's 132 multiprocessors, and heads of 12.
    ("chunk_b6_t4096_h16_d64", "chunk", 6, 4096, 16, 64),
    ("chunk_b4_t4096_h16_d64", "chunk", 4, 4096, 16, 64),
    ("chunk_b3_t8192_h12_d64", "chunk", 3, 8192, 12, 64),
    ("chunk_b4_t4096_h16_d128", "chunk", 4, 4096, 16, 128),
    ("chunk_b3_t4096_h12_d128", "chunk", 3, 4096, 12, 128),
    ("parallel_b8_t4096_h16_d128", "parallel", 8, 4096, 16, 128),
    ("parallel_b8_t4096_h16_d64", "parallel", 8, 4096, 16, 64),
    ("parallel_decay_b8_t4096_h16_d128", "parallel_decay", 8, 4096, 16, 128),
    # The decay-matrix form with few batches to share each tile of the matrix, and at D64.
    ("parallel_decay_b2_t8192_h8_d128", "parallel_decay", 2, 8192, 8, 128),
    ("parallel_decay_b4_t2048_h16_d64", "parallel_decay", 4, 2048, 16, 64),
    ("decode_b64_h16_d128", "decode", 64, 1, 16, 128),
]


def extra_row(text: str):
    """A --row "KIND,B,T,H,D" as a ROWS entry."""
    parts = [p.strip() for p in text.split(",")]
    kinds = ("chunk", "parallel", "parallel_decay")
    if len(parts) != 5 or parts[0] not in kinds or not all(p.isdigit() and int(p) > 0 for p in parts[1:]):
        sys.exit(f"bench_retention: --row {text!r}; allowed: KIND,B,T,H,D with KIND chunk, parallel or "
                 "parallel_decay and positive integers")
    kind, (b, t, h, d) = parts[0], (int(p) for p in parts[1:])
    return (f"{kind}_b{b}_t{t}_h{h}_d{d}", kind, b, t, h, d)


def seed_row(name: str) -> None:
    """The row's inputs depend on its name only: its attnkit and fla candidates may run in different passes."""
    torch.manual_seed(zlib.crc32(name.encode()))


def run_chunk_like(name, kind, b, t, h, d, args, sides):
    seed_row(name)
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

    # (name, forward, ATTNKIT_RETENTION_CONFIG or None for fla)
    candidates = [(candidate_name(config), attnkit_forward, config) for config in args.configs]
    if "attnkit" not in sides:
        candidates = []
    if fla_fn is not None and "fla" in sides:
        def fla_forward():
            fq, fk, fv = fla_inputs(fla_fn, q, k, v)
            return fla_output(fla_fn, fla_fn(fq, fk, fv)[0])
        candidates.append(("fla", fla_forward, None))

    rows = {}
    for candidate, _, config in candidates:
        rows[candidate] = {"row": name, "candidate": candidate, "dtype": args.dtype}
        if config is not None:
            rows[candidate]["config"] = config
    working = []
    for candidate, forward, config in candidates:
        try:
            with retention_config(config or ""), torch.no_grad():
                rows[candidate]["_out"] = forward().detach()
            working.append((candidate, forward, config))
        except Exception as error:  # noqa: BLE001 - a failing candidate is reported, the row goes on
            rows[candidate]["error"] = f"{type(error).__name__}: {error}"
    timings, errors = time_interleaved(working, args)
    working = [entry for entry in working if entry[0] not in errors]
    for candidate, error in errors.items():
        rows[candidate]["error"] = error
    for candidate, timing in timings.items():
        record_time(rows[candidate], "forward_ms", timing)
        rows[candidate]["forward_tflops"] = nominal_flops(b, t, h, d) / timing[0] / 1e9
    if args.graph_calls > 0:
        timings, errors = time_graphs(working, args)
        for candidate, timing in timings.items():
            record_time(rows[candidate], "forward_graph_ms", timing)
        for candidate, error in errors.items():
            rows[candidate]["graph_error"] = error
    if not args.no_backward:
        backwards = []
        for candidate, forward, config in working:
            with retention_config(config or ""):
                graph_out = forward()

            def backward(graph_out=graph_out):
                torch.autograd.grad(graph_out, (q, k, v), grad, retain_graph=True)
            backwards.append((candidate, backward, config))
        timings, errors = time_interleaved(backwards, args, grad=True)
        for candidate, error in errors.items():
            rows[candidate]["error"] = f"backward: {error}"
        for candidate, timing in timings.items():
            record_time(rows[candidate], "backward_ms", timing)
            rows[candidate]["backward_tflops"] = nominal_flops(b, t, h, d, backward=True) / timing[0] / 1e9
        if args.kernel_calls > 0:
            for candidate, backward, config in backwards:
                if candidate in errors:
                    continue
                try:
                    with retention_config(config or ""):
                        rows[candidate]["backward_kernel_ms"] = kernel_ms(backward, args.kernel_calls)
                except Exception as error:  # noqa: BLE001 - the profiler's failure costs this column only
                    rows[candidate]["kernel_error"] = f"{type(error).__name__}: {error}"
        del backwards
    for row in rows.values():
        results.append(row)
        print_measured(row)
    torch.cuda.empty_cache()
    if fla_fn is None and "fla" in sides:
        results.append({"row": name, "candidate": "fla", "error": FLA_ERROR})
    return results


def run_decode(name, b, h, d, args, sides):
    seed_row(name)
    dtype = getattr(torch, args.dtype)
    q, k, v = (torch.randn(b, 1, h, d, device="cuda", dtype=dtype) for _ in range(3))
    state = torch.randn(b, h, d, d, device="cuda", dtype=torch.float32)
    moved = 2 * b * h * d * d * 4 + 4 * b * h * d * q.element_size()
    def attnkit_decode():
        return attnkit.retention(q, k, v, mode="recurrent", initial_state=state, output_final_state=True)

    candidates = [(candidate_name(config), attnkit_decode, config) for config in args.configs]
    if "attnkit" not in sides:
        candidates = []
    if fused_recurrent_retention is not None and "fla" in sides:
        fn = fused_recurrent_retention

        def fla_decode():
            fq, fk, fv = fla_inputs(fn, q, k, v)
            out, final = fn(fq, fk, fv, initial_state=state, output_final_state=True)
            return fla_output(fn, out), final
        candidates.append(("fla", fla_decode, None))
    results = []
    working = []
    for candidate, step, config in candidates:
        row = {"row": name, "candidate": candidate, "dtype": args.dtype}
        if config is not None:
            row["config"] = config
        try:
            with retention_config(config or ""), torch.no_grad():
                row["_out"] = step()
            working.append((candidate, step, config))
        except Exception as error:  # noqa: BLE001
            row["error"] = f"{type(error).__name__}: {error}"
        results.append(row)
    timings, errors = time_interleaved(working, args)
    for row in results:
        if row["candidate"] in errors:
            row["error"] = errors[row["candidate"]]
        if row["candidate"] in timings:
            record_time(row, "forward_ms", timings[row["candidate"]])
            row["gbps"] = moved / row["forward_ms"] / 1e6
    if args.graph_calls > 0:
        timings, errors = time_graphs([entry for entry in working if entry[0] not in errors], args)
        for row in results:
            if row["candidate"] in timings:
                record_time(row, "forward_graph_ms", timings[row["candidate"]])
            if row["candidate"] in errors:
                row["graph_error"] = errors[row["candidate"]]
    for row in results:
        print_measured(row)
    if fused_recurrent_retention is None and "fla" in sides:
        results.append({"row": name, "candidate": "fla", "error": FLA_ERROR})
    return results


def add_distances(results):
    """Each attnkit candidate's relative L2 distance to fla's output of the same row (and final state, decode);
    drops the kept outputs."""
    reference = {r["row"]: r["_out"] for r in results if r["candidate"] == "fla" and "_out" in r}
    for row in results:
        out = row.pop("_out", None)
        theirs = reference.get(row["row"])
        if out is None or theirs is None or not is_attnkit(row["candidate"]):
            continue
        if isinstance(out, tuple):
            row["relative_l2_to_fla"] = relative_l2(out[0], theirs[0])
            row["final_state_relative_l2_to_fla"] = relative_l2(out[1], theirs[1])
        else:
            row["relative_l2_to_fla"] = relative_l2(out, theirs)
    for row in results:
        row.pop("_out", None)


def add_ratios(results):
    by_row = {}
    for row in results:
        by_row.setdefault(row["row"], {})[row["candidate"]] = row
    for candidates in by_row.values():
        theirs = candidates.get("fla")
        if not theirs:
            continue
        for candidate, ours in candidates.items():
            if not is_attnkit(candidate):
                continue
            for key in ("forward_ms", "backward_ms", "forward_graph_ms", "backward_kernel_ms"):
                if key in ours and key in theirs:
                    ours[key.replace("_ms", "_speedup_vs_fla")] = theirs[key] / ours[key]


def print_measured(row):
    """One candidate's times as soon as they are measured (a run cut short keeps them)."""
    times = " ".join(f"{key} {row[key]:.3f} ({row[key.replace('_ms', '_spread_ms')][0]:.3f}-"
                     f"{row[key.replace('_ms', '_spread_ms')][1]:.3f})"
                     for key in ("forward_ms", "backward_ms", "forward_graph_ms")
                     if key in row)
    if "backward_kernel_ms" in row:
        times += f" backward_kernel_ms {row['backward_kernel_ms']:.3f}"
    notes = " ".join(f"[{key}: {row[key]}]" for key in ("error", "graph_error", "kernel_error") if key in row)
    print(f"  measured {row['row']} {row['candidate']}: {times} {notes}".rstrip(), flush=True)


def print_table(results):
    header = f"{'row':32} {'candidate':20} {'fwd ms':>9} {'fwd TF/s':>9} {'bwd ms':>9} {'bwd TF/s':>9} " \
             f"{'GB/s':>8} {'fwd x':>6} {'bwd x':>6} {'L2 vs fla':>10} {'fwd graph':>9} {'g.fwd x':>7} " \
             f"{'bwd kern':>9} {'k.bwd x':>7}"
    print(header)
    for r in results:
        if "error" in r:
            print(f"{r['row']:32} {r['candidate']:20} {r['error']}")
            continue

        def cell(key, width, fmt):
            return f"{r[key]:{width}{fmt}}" if key in r else " " * width
        print(f"{r['row']:32} {r['candidate']:20} {cell('forward_ms', 9, '.3f')} {cell('forward_tflops', 9, '.1f')} "
              f"{cell('backward_ms', 9, '.3f')} {cell('backward_tflops', 9, '.1f')} {cell('gbps', 8, '.0f')} "
              f"{cell('forward_speedup_vs_fla', 6, '.2f')} {cell('backward_speedup_vs_fla', 6, '.2f')} "
              f"{cell('relative_l2_to_fla', 10, '.2e')} {cell('forward_graph_ms', 9, '.3f')} "
              f"{cell('forward_graph_speedup_vs_fla', 7, '.2f')} {cell('backward_kernel_ms', 9, '.3f')} "
              f"{cell('backward_kernel_speedup_vs_fla', 7, '.2f')}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="*",
                        help="row names, comma-separated globs; rows run in the order of the first glob each matches")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16"])
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=9, help="timed rounds over the row's candidates (Method)")
    parser.add_argument("--run-ms", type=float, default=20.0,
                        help="about how long each candidate's run of back-to-back calls in a round lasts")
    parser.add_argument("--graph-calls", type=int, default=10,
                        help="calls per CUDA graph for the GPU-only columns (0: none); see time_graphs")
    parser.add_argument("--no-backward", action="store_true")
    parser.add_argument("--kernel-calls", type=int, default=5,
                        help="backward calls profiled for the GPU-only backward column (torch.profiler: the kernels' "
                             "own durations; 0: none); see kernel_ms")
    parser.add_argument("--json", help="write the results to this file")
    forcing = parser.add_mutually_exclusive_group()
    forcing.add_argument("--config",
                         help="ATTNKIT_RETENTION_CONFIG for attnkit: "
                              "block=32|64,segments=N,splits=N,decode=0|1,joint=0|1,wgmma=0|1")
    forcing.add_argument("--configs", nargs="+", metavar="CONFIG",
                         help='several of them, each timed in this process ("" = none), fla once per row')
    parser.add_argument("--row", action="append", default=[], metavar="KIND,B,T,H,D",
                        help="a further row (chunk, parallel or parallel_decay), named like the built-in ones, "
                             "e.g. chunk,4,8192,8,128; repeatable; --only selects among all rows")
    parser.add_argument("--fla-last", action="store_true",
                        help="time every row's attnkit candidates first, then fla's (whose first calls autotune): a "
                             "run cut short keeps attnkit's rows")
    args = parser.parse_args()
    if args.configs is None:
        args.configs = [args.config or os.environ.get("ATTNKIT_RETENTION_CONFIG", "")]
    if not torch.cuda.is_available():
        sys.exit("bench_retention: no CUDA device")
    patterns = [p.strip() for p in args.only.split(",")]
    device = torch.cuda.get_device_name()
    print(f"device: {device}; torch {torch.__version__}; dtype {args.dtype}; "
          f"ATTNKIT_RETENTION_CONFIG per attnkit candidate: {args.configs!r}")
    if chunk_retention is None:
        print(f"fla: {FLA_ERROR}")
    else:
        import fla
        layout = "[B, H, T, D]" if fla_head_first(chunk_retention) else "[B, T, H, D]"
        print(f"fla {getattr(fla, '__version__', '?')}: layout {layout} (read from chunk_retention's signature)")
    results = []
    rows_known = ROWS + [row for row in map(extra_row, args.row) if row not in ROWS]  # a built-in row runs once
    first_match = {row[0]: next((i for i, p in enumerate(patterns) if fnmatch.fnmatch(row[0], p)), None)
                   for row in rows_known}
    selected = sorted((row for row in rows_known if first_match[row[0]] is not None),
                      key=lambda row: first_match[row[0]])
    # Passes over the rows: attnkit and fla together, or (--fla-last) every attnkit candidate first.
    passes = [{"attnkit"}, {"fla"}] if args.fla_last else [{"attnkit", "fla"}]
    for sides in passes:
        for name, kind, b, t, h, d in selected:
            if kind == "decode":
                rows = run_decode(name, b, h, d, args, sides)
            else:
                rows = run_chunk_like(name, kind, b, t, h, d, args, sides)
            if len(passes) == 1:
                add_distances(rows)
                add_ratios(rows)
                print_table(rows)  # each row as soon as it is measured; the whole table again at the end
                sys.stdout.flush()
            results += rows
    add_distances(results)
    add_ratios(results)
    print_table(results)
    if args.json:
        summary = {"device": device, "dtype": args.dtype, "configs": args.configs, "rows": results}
        Path(args.json).write_text(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
