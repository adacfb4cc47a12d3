"""GEMM rows forced one at a time (ATTNKIT_GEMM_CONFIG) against cuBLAS on chosen shapes, to see which row a shape
should run on before the selection rule is changed.

Each config runs in its own process (the variable is read when a plan is made, and plans are cached per shape);
the empty config is the registry's own choice. Every process times cuBLAS (torch.matmul) beside attnkit with
bench_gemm.measure: per-call CUDA events and the kernel-only CUDA-graph time. A config that refuses a shape is
reported as refused.

    python bench/gemm_config_sweep.py --type bf16 --shapes 64x128x4096x128 1024x1024x1024 \\
        --configs "" sm90_bf16_ak_bmn_64x128x64_c1x1_pingpong --json sweep.json
    python bench/gemm_config_sweep.py --type fp32 --b-transposed --shapes 32x14336x4096 \
        --configs "" sm90_3xtf32_ak_bk_128x64x16_c1x1_swapped_splitk   # x @ W^T
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys


def parse_shape(text: str):
    parts = [int(x) for x in text.split("x")]
    return (0, *parts) if len(parts) == 3 else tuple(parts)


def child(kind: str, shapes: list[str], rounds: int, b_transposed: bool) -> int:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import bench_gemm  # noqa: PLC0415 - after the path

    dtype, tf32 = bench_gemm.TYPES[kind]
    for text in shapes:
        batch, m, n, k = parse_shape(text)
        try:
            r = bench_gemm.measure(bench_gemm.Row("sweep", batch, m, n, k), dtype, tf32, 5, rounds, 20, b_transposed)
        except Exception as error:  # noqa: BLE001 - a forced row that refuses the shape
            print(json.dumps({"shape": text, "refused": f"{type(error).__name__}: {error}"[:200]}), flush=True)
            continue
        print(json.dumps(r), flush=True)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--type", default="bf16", choices=["bf16", "fp16", "fp32", "tf32"])
    parser.add_argument("--shapes", nargs="+", required=True, help="MxNxK or BxMxNxK")
    parser.add_argument("--configs", nargs="+", default=[""], help="row names; '' is the registry's choice")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved timing rounds (bench_gemm.measure)")
    parser.add_argument("--b-transposed", action="store_true",
                        help="B = W^T of a row-major [N, K] weight (x @ W^T, B K-major), as bench_gemm.py's option")
    parser.add_argument("--json", metavar="PATH")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.type, args.shapes, args.rounds, args.b_transposed)
    results = []
    print(f"{'config':48} {'shape':18} {'ak TF/s':>8} {'cb TF/s':>8} {'ratio':>6} "
          f"{'graph us ak/cb':>16} {'g.ratio':>7}")
    for config in args.configs:
        env = dict(os.environ, ATTNKIT_GEMM_CONFIG=config)
        command = [sys.executable, os.path.abspath(__file__), "--child", "--type", args.type, "--rounds",
                   str(args.rounds), *(["--b-transposed"] if args.b_transposed else []), "--shapes", *args.shapes]
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            print(f"{config or '(default)':48} failed: {done.stderr[-300:]}")
        for line in done.stdout.splitlines():
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                continue
            r["config"] = config or "(default)"
            results.append(r)
            if "refused" in r:
                print(f"{r['config']:48} {r['shape']:18} refused")
                continue
            graphs = f"{r['us_graph_attnkit']:.1f}/{r['us_graph_cublas']:.1f}"
            print(f"{r['config']:48} {r['shape']:18} {r['tflops_attnkit']:8.1f} {r['tflops_cublas']:8.1f} "
                  f"{r['ratio']:6.3f} {graphs:>16} {r['ratio_graph']:7.3f}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
