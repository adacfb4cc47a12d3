"""GEMM benchmark: attnkit.gemm against torch.matmul (cuBLAS) in the same process, on the same GPU.

Rows (issue #22): square 1024-8192; LLM shapes, decode-like (M 1-256 against N, K 4096-16384) and
training-like (M 4096-16384); K-heavy; odd sizes; batched. Types bf16, fp16, fp32 without TF32 and
fp32 with TF32 (attnkit's allow_tf32 and torch.backends.cuda.matmul.allow_tf32 set alike).

Timing (DESIGN §5, bench/bench_timing.py): warm-up calls first; then --rounds rounds in which attnkit and cuBLAS in
turn (starting one further along each round) run back-to-back calls for about --run-ms between two CUDA events;
a time is the median over rounds of the per-call time (the rate of a caller that does not wait between calls: the
larger of the call's host work and its GPU work). Inputs larger than L2 are rotated between several copies so a
call does not find its operands in L2. TF/s
counts 2*B*M*N*K. Prints a table with the ratio attnkit / cuBLAS per row and the geometric mean per
type; --json writes the rows (with the device, torch and CUDA versions) to a file.

Kernel-only time: the per-call time includes each call's host work (the Python front door, plan
lookup, launch) wherever that is longer than the GPU work before it (decode rows, 1024^3). So each
candidate is also captured as --graph-calls back-to-back calls (same input rotation) in one CUDA graph,
and the graph's replay time (median of several replays) divided by the calls is reported beside the
event time: the GPU time of a call, its kernels and launch gaps, without host overhead. Event time well
above graph time means the host is the limit. A candidate that cannot be captured reports nan.

    python bench/bench_gemm.py                  # every row, every type
    python bench/bench_gemm.py --quick          # a few rows
    python bench/bench_gemm.py --types bf16 --groups square --json docs/perf/gemm.json
    python bench/bench_gemm.py --groups decode --b-transposed   # x @ W^T with a row-major [N, K] weight
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from dataclasses import dataclass

import torch

import attnkit
from bench_timing import back_to_back_run, event_ms, interleaved_rounds

L2_BYTES = 50 * 2**20  # H100: 50 MiB


@dataclass
class Row:
    group: str
    batch: int  # 0: rank-2 operands
    m: int
    n: int
    k: int

    def label(self) -> str:
        shape = f"{self.m}x{self.n}x{self.k}"
        return f"{self.batch}x{shape}" if self.batch else shape


def rows(quick: bool) -> list[Row]:
    if quick:
        return [Row("square", 0, 4096, 4096, 4096), Row("decode", 0, 16, 4096, 4096),
                Row("odd", 0, 1023, 1025, 1027), Row("batched", 8, 1024, 1024, 1024)]
    out = [Row("square", 0, s, s, s) for s in (1024, 2048, 4096, 8192)]
    out += [Row("decode", 0, m, n, k) for m in (1, 16, 64, 256) for (n, k) in ((4096, 4096), (16384, 4096),
                                                                              (4096, 16384))]
    # LLM decode: a few tokens against a 4096 x 4096 projection, a batch of 32 against a 14336-wide MLP.
    out += [Row("decode", 0, 8, 4096, 4096), Row("decode", 0, 32, 14336, 4096)]
    out += [Row("training", 0, m, n, k) for m in (4096, 16384) for (n, k) in ((4096, 4096), (14336, 4096),
                                                                              (4096, 14336))]
    out += [Row("k-heavy", 0, m, n, k) for (m, n, k) in ((1024, 1024, 16384), (2048, 2048, 32768),
                                                         (256, 256, 65536))]
    out += [Row("odd", 0, m, n, k) for (m, n, k) in ((1023, 1025, 1027), (4095, 4097, 4099), (1000, 3000, 777),
                                                    (4096, 4096, 4100))]
    out += [Row("batched", b, m, n, k) for (b, m, n, k) in ((8, 1024, 1024, 1024), (32, 512, 512, 512),
                                                           (64, 128, 4096, 128))]
    return out


TYPES = {"bf16": (torch.bfloat16, False), "fp16": (torch.float16, False), "fp32": (torch.float32, False),
         "tf32": (torch.float32, True)}


def time_pair_ms(candidates, sets, warmup: int, rounds: int, run_ms: float) -> dict:
    """{name: (median, lowest, highest) ms per call} of each (name, fn) candidate, cycling through the input
    sets: interleaved rounds of back-to-back runs (bench/bench_timing.py)."""
    runs = {}
    for name, fn in candidates:
        for i in range(warmup):
            fn(*sets[i % len(sets)])
        torch.cuda.synchronize()
        one_call_ms = event_ms(lambda fn=fn: fn(*sets[0]))
        runs[name] = back_to_back_run(lambda i, fn=fn: fn(*sets[i % len(sets)]), one_call_ms, run_ms)
    return interleaved_rounds(runs, rounds)


def graph_us_per_call(fn, sets, calls: int, replays: int) -> float:
    """GPU time per call, in us: `calls` calls captured back to back in one CUDA graph (cycling through the
    input sets), the median time of 3 to `replays` replays (after an untimed first) divided by `calls`; nan
    when the capture fails."""
    try:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):  # warm-up on the capture's side stream (plans, workspaces)
            for i in range(len(sets)):
                fn(*sets[i])
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for i in range(calls):
                fn(*sets[i % len(sets)])
        def replay_ms() -> float:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            return start.elapsed_time(end)

        first = replay_ms()  # uploads the graph; not counted
        # About a second of timed replays for the long rows, 3 at least.
        times = [replay_ms() for _ in range(max(3, min(replays, int(1000.0 / max(first, 1e-3)))))]
        del graph
        return statistics.median(times) * 1e3 / calls
    except Exception as error:  # noqa: BLE001 - reported, the row's event timings stand
        print(f"bench_gemm: graph timing failed ({type(error).__name__}: {error})", file=sys.stderr)
        torch.cuda.synchronize()
        return float("nan")


def measure(row: Row, dtype: torch.dtype, tf32: bool, warmup: int, rounds: int, graph_calls: int,
            b_transposed: bool = False, run_ms: float = 10.0) -> dict:
    shape_a = (row.batch, row.m, row.k) if row.batch else (row.m, row.k)
    shape_b = (row.batch, row.k, row.n) if row.batch else (row.k, row.n)
    if b_transposed:  # B = W.mT of a row-major [N, K] weight: x @ W^T, nn.Linear's layout (B K-major)
        shape_b = shape_b[:-2] + (row.n, row.k)
    element = torch.finfo(dtype).bits // 8
    batch = max(row.batch, 1)
    bytes_per_set = element * batch * (row.m * row.k + row.k * row.n + row.m * row.n)
    copies = max(1, min(8, math.ceil(2 * L2_BYTES / max(bytes_per_set, 1))))
    sets = [(torch.randn(shape_a, device="cuda", dtype=dtype), torch.randn(shape_b, device="cuda", dtype=dtype))
            for _ in range(copies)]
    if b_transposed:
        sets = [(x, w.mT) for x, w in sets]
    torch.backends.cuda.matmul.allow_tf32 = tf32
    a, b = sets[0]
    ours = attnkit.gemm(a, b, allow_tf32=tf32)
    theirs = torch.matmul(a, b)
    reference = a.double() @ b.double()
    error = ((ours.double() - reference).norm() / reference.norm()).item()
    error_cublas = ((theirs.double() - reference).norm() / reference.norm()).item()
    del reference
    times = time_pair_ms((("attnkit", lambda x, y: attnkit.gemm(x, y, allow_tf32=tf32)), ("cublas", torch.matmul)),
                         sets, warmup, rounds, run_ms)
    ms_ours, ms_cublas = times["attnkit"][0], times["cublas"][0]
    nan = float("nan")
    us_graph_ours = us_graph_cublas = nan
    if graph_calls > 0:
        us_graph_ours = graph_us_per_call(lambda x, y: attnkit.gemm(x, y, allow_tf32=tf32), sets, graph_calls, 10)
        us_graph_cublas = graph_us_per_call(torch.matmul, sets, graph_calls, 10)
    flops = 2.0 * batch * row.m * row.n * row.k
    return {"group": row.group, "shape": row.label(), "b_transposed": b_transposed, "batch": row.batch, "m": row.m, "n": row.n, "k": row.k,
            "ms_attnkit": ms_ours, "ms_cublas": ms_cublas, "ms_spread_attnkit": times["attnkit"][1:],
            "ms_spread_cublas": times["cublas"][1:], "tflops_attnkit": flops / ms_ours / 1e9,
            "tflops_cublas": flops / ms_cublas / 1e9, "ratio": ms_cublas / ms_ours, "rel_l2_attnkit": error,
            "rel_l2_cublas": error_cublas, "graph_calls": graph_calls, "us_graph_attnkit": us_graph_ours,
            "us_graph_cublas": us_graph_cublas, "ratio_graph": us_graph_cublas / us_graph_ours,
            "tflops_graph_attnkit": flops / us_graph_ours / 1e6, "tflops_graph_cublas": flops / us_graph_cublas / 1e6}


def warm_up_gpu(seconds: float = 1.0) -> None:
    """About `seconds` of back-to-back GEMMs before the first row: without it the first rows' per-call times of both
    candidates came out up to 2.4x longer than in another run (bf16 1024^3: 48.8 against 20.0 us; an idle GPU's clock,
    a cold process)."""
    a = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        for _ in range(20):
            torch.matmul(a, a)
            attnkit.gemm(a, a)
        torch.cuda.synchronize()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--types", nargs="+", default=list(TYPES), choices=list(TYPES))
    parser.add_argument("--groups", nargs="+", default=None,
                        help="square decode training k-heavy odd batched (default: all)")
    parser.add_argument("--quick", action="store_true", help="four rows")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=7, help="interleaved timing rounds (median reported)")
    parser.add_argument("--run-ms", type=float, default=10.0,
                        help="about this long of back-to-back calls per run (at least one call)")
    parser.add_argument("--graph-calls", type=int, default=20,
                        help="calls per CUDA graph for the kernel-only time (0: skip it)")
    parser.add_argument("--json", metavar="PATH", help="write the rows as JSON")
    parser.add_argument("--b-transposed", action="store_true",
                        help="B as W.mT of a row-major [N, K] weight (x @ W^T, nn.Linear's layout) instead of a "
                             "row-major [K, N] B (x @ W)")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("bench_gemm: no CUDA device", file=sys.stderr)
        return 1
    selected = [r for r in rows(args.quick) if args.groups is None or r.group in args.groups]
    results = []
    header = (f"{'type':5} {'group':9} {'shape':22} {'attnkit TF/s':>12} {'cuBLAS TF/s':>12} {'ratio':>6} "
              f"{'err':>9} | {'call us ak/cb':>15} {'graph us ak/cb':>15} {'g.ratio':>7}")
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}  CUDA {torch.version.cuda}")
    warm_up_gpu()
    print(header)
    print("-" * len(header))
    tf32_before = torch.backends.cuda.matmul.allow_tf32
    try:
        for name in args.types:
            dtype, tf32 = TYPES[name]
            for row in selected:
                r = measure(row, dtype, tf32, args.warmup, args.rounds, args.graph_calls, args.b_transposed, args.run_ms)
                r["type"] = name
                results.append(r)
                calls = f"{r['ms_attnkit'] * 1e3:.1f}/{r['ms_cublas'] * 1e3:.1f}"
                graphs = f"{r['us_graph_attnkit']:.1f}/{r['us_graph_cublas']:.1f}"
                print(f"{name:5} {r['group']:9} {r['shape']:22} {r['tflops_attnkit']:12.1f} "
                      f"{r['tflops_cublas']:12.1f} {r['ratio']:6.3f} {r['rel_l2_attnkit']:9.2e} | "
                      f"{calls:>15} {graphs:>15} {r['ratio_graph']:7.3f}", flush=True)
                torch.cuda.empty_cache()
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32_before
    print()
    for name in args.types:
        ratios = [r["ratio"] for r in results if r["type"] == name]
        if ratios:
            geomean = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
            print(f"{name}: geometric mean ratio {geomean:.3f}, lowest {min(ratios):.3f} over {len(ratios)} rows")
        graph_ratios = [r["ratio_graph"] for r in results if r["type"] == name and r["ratio_graph"] > 0]
        if graph_ratios:
            geomean = math.exp(sum(math.log(x) for x in graph_ratios) / len(graph_ratios))
            print(f"{name}: kernel-only (graph) geometric mean ratio {geomean:.3f}, lowest {min(graph_ratios):.3f} "
                  f"over {len(graph_ratios)} rows")
    if args.json:
        meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "cuda": torch.version.cuda,
                "attnkit": getattr(attnkit, "__version__", "")}
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "rows": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
