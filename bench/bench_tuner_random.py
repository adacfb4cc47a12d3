"""Does tuning ever make a call slower than the untuned default? (DESIGN §6.4, docs/tuner.md)

    PYTHONPATH=python ATTNKIT_LIBRARY=build/cuda/libattnkit.so \\
        python3 bench/bench_tuner_random.py [--seed 0] [--count 48] [--json out.json]

Generates --count problems (at least 40) from --seed: every mask kind (none, causal, neighborhood
1-D/2-D/3-D with dilation, stride and causal dimensions, block mask, element mask), forward and
backward, sizes from tiny to large (mostly small and medium, so the whole run stays within a few
minutes on an H100). For each problem, in one process:

  1. tune: attnkit.tuner.configure(mode="on") with a fresh temporary cache folder and only the
     problem's direction enabled, then one call, which tunes (its wall time is reported);
  2. time the call with the tuner off (configure(mode="off"): the default config) and with mode "on"
     (the tuned winner, read back from that cache folder), interleaved: --reps rounds, each timing
     both settings in alternating order, each setting warmed up before its timed calls. A timed
     batch queues its calls behind a GPU sleep and brackets each call with CUDA events, so the
     times are the GPU's (back to back, as in a model), not Python's launch overhead.

speed = default time / tuned time (medians over every timed call): above 1 the tuned call is faster,
below 1 slower. The target is speed >= 0.97 on every problem. It prints a table, the min / median /
max speed and how many problems fall below 0.97, and writes everything to --json. Backward problems
time the backward alone (torch.autograd.grad on a forward made once). Exit status: 0 target met,
1 missed, 2 cannot run here (no GPU, or a libattnkit without CUDA).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import random
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field

TARGET = 0.97
KINDS = ("none", "causal", "na1d", "na2d", "na3d", "block", "element")
SIZES = ("tiny", "small", "medium", "large")
SIZE_WEIGHTS = (0.2, 0.4, 0.3, 0.1)


@dataclass
class Problem:
    index: int
    kind: str
    direction: str  # "forward" | "backward"
    size: str
    dtype: str
    batch: int
    heads: int
    heads_kv: int
    head_dim: int
    tokens: list
    kernel_size: list = field(default_factory=list)
    dilation: list = field(default_factory=list)
    stride: list = field(default_factory=list)
    causal: list = field(default_factory=list)
    block_size: int = 0
    density: float = 1.0

    def describe(self) -> str:
        shape = f"b{self.batch} h{self.heads}" + (f"/{self.heads_kv}" if self.heads_kv != self.heads else "")
        shape += f" d{self.head_dim} {'x'.join(map(str, self.tokens))}"
        if self.kind.startswith("na"):
            mask = f"k{'x'.join(map(str, self.kernel_size))}"
            if any(d != 1 for d in self.dilation):
                mask += f" dil{'x'.join(map(str, self.dilation))}"
            if any(s != 1 for s in self.stride):
                mask += f" st{'x'.join(map(str, self.stride))}"
            if any(self.causal):
                mask += f" causal{''.join('1' if c else '0' for c in self.causal)}"
        elif self.kind == "block":
            mask = f"block{self.block_size} {self.density:.0%}"
        elif self.kind == "element":
            mask = f"element {self.density:.0%}"
        else:
            mask = self.kind
        return f"{shape} {mask}"


# ---------------------------------------------------------------------------------------------
# Problems from a seed


def _sequence_length(rng: random.Random, size: str) -> int:
    low, high = {"tiny": (64, 256), "small": (512, 1024), "medium": (2048, 4096), "large": (8192, 16384)}[size]
    return rng.choice([n for n in (64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192,
                                   12288, 16384) if low <= n <= high])


def _neighborhood(rng: random.Random, extents: list, kernel_choices: list) -> tuple:
    kernel, dilation, stride, causal = [], [], [], []
    for extent in extents:
        k = rng.choice([w for w in kernel_choices if w <= extent])
        d = rng.choice([1, 1, 2, 3]) if rng.random() < 0.4 else 1
        while k * d > extent:
            d -= 1
        s = rng.choice([1, 1, 2, max(1, k // 2)]) if rng.random() < 0.3 else 1
        kernel.append(k)
        dilation.append(max(d, 1))
        stride.append(min(s, k))
        causal.append(rng.random() < 0.3)
    return kernel, dilation, stride, causal


def generate(seed: int, count: int, head_dims=None) -> list[Problem]:
    """`count` problems: kinds in turn (so every kind appears), about a third of each kind backward.
    `head_dims` (e.g. [64, 128] for a dev kernel set) limits the head dims drawn."""
    rng = random.Random(seed)
    problems = []
    for i in range(count):
        kind = KINDS[i % len(KINDS)]
        direction = "backward" if (i // len(KINDS)) % 3 == 2 else "forward"
        size = rng.choices(SIZES, weights=SIZE_WEIGHTS)[0]
        heads = rng.choice([2, 4, 8, 16])
        p = Problem(index=i, kind=kind, direction=direction, size=size, dtype=rng.choice(["bf16", "f16"]),
                    batch=rng.choice([1, 1, 2, 4]), heads=heads,
                    heads_kv=rng.choice([heads, heads, max(1, heads // 2)]),
                    head_dim=rng.choice([64, 64, 128] if direction == "backward" else [32, 64, 64, 128, 256]),
                    tokens=[])
        if head_dims and p.head_dim not in head_dims:
            p.head_dim = head_dims[i % len(head_dims)]
        if kind in ("none", "causal", "block", "element"):
            length = _sequence_length(rng, size)
            if kind == "element":
                length = min(length, 4096)  # the mask is length^2 bytes
            p.tokens = [length]
            if kind == "block":
                p.block_size = rng.choice([64, 128])
                p.density = rng.choice([0.1, 0.25, 0.5])
            elif kind == "element":
                p.density = rng.choice([0.05, 0.2, 0.5])
        elif kind == "na1d":
            p.tokens = [{"tiny": 256, "small": 1024, "medium": 4096, "large": 16384}[size] * rng.choice([1, 2]) // 2]
            p.kernel_size, p.dilation, p.stride, p.causal = _neighborhood(rng, p.tokens, [7, 13, 31, 63, 127, 255])
        elif kind == "na2d":
            side = {"tiny": [12, 16], "small": [24, 32, 40], "medium": [48, 64, 80], "large": [96, 128]}[size]
            p.tokens = [rng.choice(side), rng.choice(side)]
            p.kernel_size, p.dilation, p.stride, p.causal = _neighborhood(rng, p.tokens, [3, 5, 7, 9, 13])
        else:
            p.tokens = {"tiny": [4, 8, 8], "small": [8, 12, 12], "medium": [8, 24, 24], "large": [16, 32, 32]}[size]
            p.kernel_size, p.dilation, p.stride, p.causal = _neighborhood(rng, p.tokens, [3, 5, 7])
        if p.direction == "backward" and p.batch * math.prod(p.tokens) * p.heads > 4 * 16384 * 16:
            p.batch = 1  # keep the largest backward problems within a few milliseconds
        problems.append(p)
    return problems


# ---------------------------------------------------------------------------------------------
# Running and timing one problem


class Call:
    """The problem's inputs and a zero-argument function that makes the timed call."""

    def __init__(self, p: Problem, device):
        import torch

        import attnkit

        dtype = {"bf16": torch.bfloat16, "f16": torch.float16}[p.dtype]
        generator = torch.Generator(device=device).manual_seed(1000 + p.index)
        backward = p.direction == "backward"

        def tensor(heads):
            t = torch.randn([p.batch, *p.tokens, heads, p.head_dim], device=device, dtype=dtype, generator=generator)
            return t.requires_grad_(backward)

        self.q, self.k, self.v = tensor(p.heads), tensor(p.heads_kv), tensor(p.heads_kv)
        seq = math.prod(p.tokens)
        if p.kind == "none" or p.kind == "causal":
            causal = p.kind == "causal"
            op = lambda: attnkit.attention(self.q, self.k, self.v, is_causal=causal)  # noqa: E731
        elif p.kind.startswith("na"):
            na = {"na1d": attnkit.na1d, "na2d": attnkit.na2d, "na3d": attnkit.na3d}[p.kind]
            op = lambda: na(self.q, self.k, self.v, kernel_size=tuple(p.kernel_size),  # noqa: E731
                            dilation=tuple(p.dilation), stride=tuple(p.stride), is_causal=tuple(p.causal))
        elif p.kind == "block":
            blocks = -(-seq // p.block_size)
            self.block_mask = torch.rand(1, 1, blocks, blocks, device=device, generator=generator) < p.density
            op = lambda: attnkit.sparse_attention(self.q, self.k, self.v, block_mask=self.block_mask,  # noqa: E731
                                                  block_size=p.block_size)
        else:
            self.mask = torch.rand(seq, seq, device=device, generator=generator) < p.density
            op = lambda: attnkit.attention(self.q, self.k, self.v, mask=self.mask)  # noqa: E731
        if not backward:
            self.run = op
            return
        out = op()
        grad_out = torch.randn(out.shape, device=device, dtype=dtype, generator=generator)
        inputs = (self.q, self.k, self.v)
        self.run = lambda: torch.autograd.grad(out, inputs, grad_out, retain_graph=True)


def configure(mode: str, p: Problem, cache_dir: str, top_k: int) -> None:
    from attnkit import tuner

    backward = p.direction == "backward"
    # The library's own measurement defaults; only the problem's direction may tune.
    tuner.configure(mode=mode, forward_pass=not backward, backward_pass=backward, cache_dir=cache_dir,
                    thorough_mode_forward=False, thorough_mode_backward=False, warmup_steps_forward=5,
                    warmup_steps_backward=5, steps_forward=20, steps_backward=20, top_k=top_k,
                    deterministic=False)


def time_calls(run, calls: int, device) -> list[float]:
    """Seconds of each of `calls` calls, queued behind a GPU sleep long enough to cover queuing them
    all, so each pair of CUDA events brackets GPU work only."""
    import torch

    torch.cuda.synchronize(device)
    start = time.perf_counter()
    for _ in range(3):
        run()
    host_per_call = (time.perf_counter() - start) / 3
    torch.cuda.synchronize(device)
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(calls)]
    stops = [torch.cuda.Event(enable_timing=True) for _ in range(calls)]
    sleep = getattr(torch.cuda, "_sleep", None)
    if sleep is not None:
        sleep(int(min(2.0 * calls * host_per_call + 1e-3, 0.5) * 2e9))  # cycles at up to 2 GHz
    for i in range(calls):
        starts[i].record()
        run()
        stops[i].record()
    torch.cuda.synchronize(device)
    return [a.elapsed_time(b) * 1e-3 for a, b in zip(starts, stops)]


def config_name(mode: str, call: Call, p: Problem, cache_dir: str, top_k: int) -> str:
    """The config a forward dense or neighborhood call runs with under `mode` (tuner.forward_config)."""
    from attnkit import tuner

    configure(mode, p, cache_dir, top_k)
    if p.kind.startswith("na"):
        name, _ = tuner.forward_config(call.q, call.k, call.v, kernel_size=tuple(p.kernel_size),
                                       dilation=tuple(p.dilation), stride=tuple(p.stride), is_causal=tuple(p.causal))
    else:
        name, _ = tuner.forward_config(call.q, call.k, call.v, is_causal=p.kind == "causal")
    return name


def run_problem(p: Problem, args, device) -> dict:
    import torch

    row = {"problem": asdict(p), "describe": p.describe()}
    call = Call(p, device)
    with tempfile.TemporaryDirectory(prefix="attnkit-tune-bench-") as cache_dir:
        configure("on", p, cache_dir, args.top_k)
        torch.cuda.synchronize(device)
        start = time.perf_counter()
        call.run()  # the first call of the problem: tunes it and writes the winner to cache_dir
        torch.cuda.synchronize(device)
        row["tune_seconds"] = time.perf_counter() - start
        # Calls per timed batch: about 20 ms of GPU work, 10 to 100 calls.
        one = statistics.median(time_calls(call.run, 5, device))
        calls = max(10, min(100, int(0.02 / max(one, 1e-6))))
        samples = {"off": [], "on": []}
        for rep in range(args.reps):
            for mode in (("off", "on") if rep % 2 == 0 else ("on", "off")):
                configure(mode, p, cache_dir, args.top_k)
                samples[mode] += time_calls(call.run, calls, device)
        if p.direction == "forward" and p.kind in ("none", "causal", "na1d", "na2d", "na3d"):
            row["default_config"], row["tuned_config"] = (config_name(mode, call, p, cache_dir, args.top_k)
                                                          for mode in ("off", "on"))
        configure("off", p, cache_dir, args.top_k)
    default_s, tuned_s = statistics.median(samples["off"]), statistics.median(samples["on"])
    row.update(default_ms=default_s * 1e3, tuned_ms=tuned_s * 1e3, speed=default_s / tuned_s,
               time_ratio=tuned_s / default_s, calls_per_setting=len(samples["on"]))
    return row


# ---------------------------------------------------------------------------------------------
# Report


def summary(rows: list[dict]) -> dict:
    speeds = [r["speed"] for r in rows if "speed" in r]
    if not speeds:
        return {"problems": len(rows), "timed": 0, "errors": sum("error" in r for r in rows),
                "skipped": sum("skipped" in r for r in rows)}
    return {"problems": len(rows), "timed": len(speeds), "min": min(speeds), "median": statistics.median(speeds),
            "max": max(speeds), "below_target": sum(s < TARGET for s in speeds), "target": TARGET,
            "errors": sum("error" in r for r in rows), "skipped": sum("skipped" in r for r in rows)}


def print_header() -> None:
    print(f"{'#':>3} {'dir':<4} {'kind':<7} {'size':<6} {'problem':<46} {'default':>10} {'tuned':>10} "
          f"{'speed':>6} {'tune s':>7}  configs (forward dense/neighborhood: default -> tuned)")


def print_row(r: dict) -> None:
    p = r["problem"]
    head = f"{p['index']:>3} {p['direction'][:3]:<4} {p['kind']:<7} {p['size']:<6} {r['describe'][:46]:<46}"
    if "error" in r or "skipped" in r:
        print(f"{head} {'skipped' if 'skipped' in r else 'ERROR'}: {r.get('skipped', r.get('error'))[:100]}")
        return
    flag = " <" if r["speed"] < TARGET else "  "
    configs = f"  {r['default_config']} -> {r['tuned_config']}" if "tuned_config" in r else ""
    print(f"{head} {r['default_ms']:8.3f}ms {r['tuned_ms']:8.3f}ms {r['speed']:6.3f} {r['tune_seconds']:7.2f}"
          f"{flag}{configs}")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0, help="problem generator seed (default 0)")
    parser.add_argument("--count", type=int, default=48, help="problems to generate (at least 40; default 48)")
    parser.add_argument("--reps", type=int, default=5, help="interleaved rounds of off/on timing (default 5)")
    parser.add_argument("--top-k", type=int, default=4, help="the tuner's top_k (default 4, the library's)")
    parser.add_argument("--device", type=int, default=0, help="CUDA device (default 0)")
    parser.add_argument("--head-dims", help="comma-separated head dims to draw from, e.g. 64,128 for a build with "
                        "the dev kernel set (default: 32, 64, 128, 256 forward; 64, 128 backward)")
    parser.add_argument("--json", help="write the rows and the summary to this file")
    parser.add_argument("--list", action="store_true", help="print the generated problems and exit (no GPU needed)")
    args = parser.parse_args(argv)
    if args.count < 40:
        parser.error(f"--count: {args.count}; allowed: >= 40 (the benchmark's coverage of kinds and sizes)")
    try:
        args.head_dims = [int(d) for d in args.head_dims.split(",")] if args.head_dims else None
    except ValueError:
        parser.error(f"--head-dims: {args.head_dims!r}; allowed: comma-separated integers, e.g. 64,128")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    problems = generate(args.seed, args.count, args.head_dims)
    if args.list:
        for p in problems:
            print(f"{p.index:>3} {p.direction:<8} {p.kind:<7} {p.size:<6} {p.dtype:<4} {p.describe()}")
        return 0
    try:
        import torch

        import attnkit
    except ImportError as error:
        print(f"bench_tuner_random: cannot import torch and attnkit ({error}); set PYTHONPATH=python", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("bench_tuner_random: no CUDA GPU is visible; this benchmark times CUDA kernels and only runs on a GPU",
              file=sys.stderr)
        return 2
    info = attnkit.library_info()
    if not info["cuda_compiled"]:
        print(f"bench_tuner_random: {info['path']} was built without CUDA; build with the cuda preset "
              "(cmake --preset cuda) and set ATTNKIT_LIBRARY to its libattnkit.so", file=sys.stderr)
        return 2
    device = torch.device("cuda", args.device)
    torch.cuda.set_device(device)
    before = attnkit.tuner.settings()
    rows = []
    started = time.perf_counter()
    print_header()
    try:
        for p in problems:
            row = {"problem": asdict(p), "describe": p.describe()}
            try:
                row = run_problem(p, args, device)
            except attnkit.AttnkitError as error:
                # A shape this build has no kernel for (e.g. a head dim outside a dev kernel set) says
                # nothing about the tuner: reported as skipped. Anything else is an error.
                key = "skipped" if "unsupported" in str(error) else "error"
                row[key] = f"{type(error).__name__}: {error}"
            except Exception as error:
                row["error"] = f"{type(error).__name__}: {error}"
            rows.append(row)
            print_row(row)
            sys.stdout.flush()
    finally:
        attnkit.tuner.configure(**before)
    result = summary(rows)
    result["seconds"] = time.perf_counter() - started
    print(f"\n{result.get('timed', 0)} problems timed in {result['seconds']:.0f} s; speed = default time / tuned time")
    if result.get("timed"):
        print(f"speed min {result['min']:.3f}  median {result['median']:.3f}  max {result['max']:.3f}; "
              f"{result['below_target']} below {TARGET}; {result['errors']} errors, {result['skipped']} skipped")
    if args.json:
        report = {"seed": args.seed, "count": args.count, "reps": args.reps, "top_k": args.top_k,
                  "head_dims": args.head_dims,
                  "device": torch.cuda.get_device_name(device), "torch": torch.__version__, "python": platform.python_version(),
                  "attnkit": info, "summary": result, "rows": rows}
        with open(args.json, "w") as out:
            json.dump(report, out, indent=1)
    met = result.get("timed", 0) > 0 and result["below_target"] == 0 and result["errors"] == 0
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
