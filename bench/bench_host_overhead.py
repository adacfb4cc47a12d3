#!/usr/bin/env python3
"""Host time of small attnkit calls through the public Python API, against torch SDPA on the same
tensors in the same process, plus a per-layer breakdown of one tiny forward call.

The problems are tiny (e.g. q [1, 128, 1, 64] bf16), so the GPU work of a call is a few microseconds.
Each figure is in microseconds per call, median of --reps repetitions, after a warm-up and after
keeping the GPU busy for a second (an idle GPU's low clock makes tiny kernels long): `us` is the time
of N back-to-back calls (time.perf_counter before the loop and after torch.cuda.synchronize()) / N;
`us_host` stops before the synchronize; `us_host_chunks` ("host only") times chunks of 16 calls with a
synchronize between chunks outside the timing, so it stays the host's own cost even where the GPU's work
per call is longer than the host's (back-to-back loops then fill the launch queue and measure the GPU).

Rows compared with SDPA are measured interleaved (per_call_us_interleaved): round by round, each round
timing SDPA and attnkit once in turn, so that a slow phase of a shared machine hits both alike; "ratio" is
the median over rounds of attnkit's host-only time / SDPA's.

Sections:
  calls      attnkit vs SDPA: tiny forward, tiny forward+backward, causal S=256 (forward, forward+backward), GQA, na1d, na2d
  layers     the tiny forward taken apart: functional API -> custom op -> the op's Python body
             without torch's dispatch -> its pieces (argument structs, the two C ABI calls,
             torch.empty of out/lse, stream and device-guard queries); with requires_grad too
  backward   the tiny forward+backward taken apart: autograd floors (a native op, an identity
             autograd.Function), forward alone, run_backward alone, the backward plan's run, the copy of
             out.sum()'s expanded gradient, the gradient allocations; torch.profiler's op table of one
             attnkit and one SDPA forward+backward
  cold       fresh subprocesses: import attnkit, first call (synchronized), second call

Layers that do not exist in the attnkit version under test are skipped with a printed reason, so
the same script measures the code before and after a rewrite of the host path.

  python3 bench/bench_host_overhead.py --library build/gpu/libattnkit.so --json host.json
  python3 bench/bench_host_overhead.py --calls 500 --no-cold        # quicker
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--library", help="libattnkit.so to load (sets ATTNKIT_LIBRARY before importing attnkit)")
    p.add_argument("--calls", type=int, default=2000, help="back-to-back calls per repetition (2000)")
    p.add_argument("--reps", type=int, default=5, help="repetitions; the median is reported (5)")
    p.add_argument("--json", metavar="PATH", help="write every number as JSON")
    p.add_argument("--device", default="cuda", help="cuda (default) or cpu (a smoke test of the script itself)")
    p.add_argument("--cold-runs", type=int, default=3, help="fresh subprocesses per cold-start variant (3)")
    p.add_argument("--no-cold", action="store_true", help="skip the cold-start subprocesses")
    p.add_argument("--sections", default="calls,layers,backward,cold",
                   help="comma-separated subset of calls,layers,backward,cold")
    p.add_argument("--label", default=os.environ.get("ATTNKIT_COMMIT", ""),
                   help="free text recorded in the JSON (e.g. the commit); default $ATTNKIT_COMMIT")
    p.add_argument("--no-python-path", action="store_true",
                   help="import the installed attnkit instead of this checkout's python/ folder")
    return p.parse_args(argv)


ARGS = parse_args()
if ARGS.library:
    os.environ["ATTNKIT_LIBRARY"] = os.path.abspath(ARGS.library)
if not ARGS.no_python_path:
    sys.path.insert(0, str(ROOT / "python"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import attnkit  # noqa: E402

DEVICE = torch.device(ARGS.device if ARGS.device != "cuda" else "cuda:0")
CUDA = DEVICE.type == "cuda"
DTYPE = torch.bfloat16 if CUDA else torch.float32


def sync():
    if CUDA:
        torch.cuda.synchronize()


def _time_once(fn, calls: int):
    """(back-to-back us per call with the synchronize, without it, host-only chunks) of one repetition."""
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t1 = time.perf_counter()
    sync()
    t2 = time.perf_counter()
    # The host's own cost: chunks short enough never to fill the launch queue, each timed without
    # the synchronize that drains the GPU between chunks (back-to-back loops measure the GPU instead
    # when its work per call takes longer than the host's).
    spent = 0.0
    chunks = max(1, calls // CHUNK)
    for _ in range(chunks):
        c0 = time.perf_counter()
        for _ in range(CHUNK):
            fn()
        spent += time.perf_counter() - c0
        sync()
    return (t2 - t0) / calls * 1e6, (t1 - t0) / calls * 1e6, spent / (chunks * CHUNK) * 1e6


def _summary(samples, calls: int, reps: int) -> dict:
    with_sync, host, chunked = (list(x) for x in zip(*samples))
    return {
        "us": statistics.median(with_sync),
        "us_host": statistics.median(host),
        "us_host_chunks": statistics.median(chunked),
        "us_min": min(with_sync),
        "samples_us": [round(x, 3) for x in with_sync],
        "calls": calls,
        "reps": reps,
    }


def per_call_us(fn, calls=None, reps=None):
    """Median over `reps` of (time of `calls` back-to-back fn() calls) / calls, in microseconds."""
    calls = calls or ARGS.calls
    reps = reps or ARGS.reps
    for _ in range(max(50, calls // 5)):
        fn()
    sync()
    return _summary([_time_once(fn, calls) for _ in range(reps)], calls, reps)


def per_call_us_interleaved(fns: dict, calls=None, reps=None) -> dict:
    """per_call_us of several callables measured in turn, round by round (each round times every callable
    once, starting with a different one), so that a slow phase of a shared machine hits all of them alike.
    Adds "ratio_to_first": the median over rounds of (this one's us_host_chunks / the first one's)."""
    calls = calls or ARGS.calls
    reps = max(reps or ARGS.reps, 2 * len(fns) + 1)
    names = list(fns)
    for fn in fns.values():
        for _ in range(max(50, calls // 5)):
            fn()
    sync()
    samples = {name: [] for name in names}
    for rep in range(reps):
        for k in range(len(names)):
            name = names[(rep + k) % len(names)]
            samples[name].append(_time_once(fns[name], calls))
    first = names[0]
    results = {}
    for name in names:
        entry = _summary(samples[name], calls, reps)
        entry["ratio_to_first"] = statistics.median(
            mine[2] / base[2] for mine, base in zip(samples[name], samples[first]))
        results[name] = entry
    return results


CHUNK = 16  # calls per host-only chunk (per_call_us)
RESULTS: dict = {}
KEEP_ALIVE: list = []  # objects whose memory a timed C call keeps using


def print_entry(name: str, entry: dict, extra: str = "") -> None:
    print(f"  {name:58s} {entry['us']:9.2f} us/call  (host loop {entry['us_host']:8.2f}, host only "
          f"{entry['us_host_chunks']:8.2f}{extra})", flush=True)


def record(section: str, name: str, thunk, note: str = ""):
    """Time thunk() (which returns the callable to time, so setup errors are caught too); on any
    exception record and print a skip with the reason."""
    entry: dict = {"note": note} if note else {}
    try:
        fn = thunk()
        entry.update(per_call_us(fn))
        print_entry(name, entry)
    except Exception as error:  # noqa: BLE001 - a layer missing in another version is reported, not fatal
        entry["skipped"] = f"{type(error).__name__}: {error}"
        print(f"  {name:58s}   skipped: {entry['skipped'][:160]}", flush=True)
    RESULTS.setdefault(section, {})[name] = entry
    return entry


def record_interleaved(section: str, rows: dict, note: str = "") -> None:
    """Times rows {name: callable} with per_call_us_interleaved; the first row is the reference (SDPA) and
    the others get their per-round host-time ratio to it."""
    try:
        results = per_call_us_interleaved(rows)
    except Exception as error:  # noqa: BLE001
        for name in rows:
            RESULTS.setdefault(section, {})[name] = {"skipped": f"{type(error).__name__}: {error}"}
            print(f"  {name:58s}   skipped: {type(error).__name__}: {str(error)[:140]}", flush=True)
        return
    for name, entry in results.items():
        if note:
            entry["note"] = note
        RESULTS.setdefault(section, {})[name] = entry
        print_entry(name, entry, f", host-only ratio to {next(iter(rows))[:12]}: {entry['ratio_to_first']:.3f}")


def randn(*shape, requires_grad=False):
    t = torch.randn(*shape, device=DEVICE, dtype=DTYPE)
    return t.requires_grad_(requires_grad)


def heads_first(t):
    """[B, S, H, D] -> the [B, H, S, D] view SDPA takes (no copy)."""
    return t.transpose(1, 2)


def max_abs_diff(a, b) -> float:
    return float((a.float() - b.float()).abs().max())


# ---------------------------------------------------------------------------------------------
# calls: attnkit vs SDPA


def section_calls():
    print("\n== calls: attnkit vs torch SDPA, back-to-back, us per call ==", flush=True)
    checks = RESULTS.setdefault("checks", {})

    # tiny forward
    q = randn(1, 128, 1, 64)
    qt = heads_first(q)
    checks["tiny_forward_max_abs_diff_vs_sdpa"] = max_abs_diff(attnkit.attention(q, q, q),
                                                              heads_first(F.scaled_dot_product_attention(qt, qt, qt)))
    record_interleaved("calls", {
        "tiny fwd sdpa [1,1,128,64] view": lambda: F.scaled_dot_product_attention(qt, qt, qt),
        "tiny fwd attnkit.attention q[1,128,1,64]": lambda: attnkit.attention(q, q, q),
    })

    # tiny forward + backward (q.grad reset each call so that no accumulation kernel runs)
    qg = randn(1, 128, 1, 64, requires_grad=True)

    def attnkit_fwd_bwd():
        qg.grad = None
        attnkit.attention(qg, qg, qg).sum().backward()

    def sdpa_fwd_bwd():
        qg.grad = None
        v = heads_first(qg)  # inside the loop: a fresh autograd view each call
        F.scaled_dot_product_attention(v, v, v).sum().backward()

    record_interleaved("calls", {
        "tiny fwd+bwd sdpa (transpose in loop)": sdpa_fwd_bwd,
        "tiny fwd+bwd attnkit (out.sum().backward())": attnkit_fwd_bwd,
    })

    # causal dense S=256
    qc = randn(1, 256, 1, 64)
    qct = heads_first(qc)
    checks["causal_s256_max_abs_diff_vs_sdpa"] = max_abs_diff(
        attnkit.attention(qc, qc, qc, is_causal=True),
        heads_first(F.scaled_dot_product_attention(qct, qct, qct, is_causal=True)))
    record_interleaved("calls", {
        "causal fwd sdpa [1,1,256,64]": lambda: F.scaled_dot_product_attention(qct, qct, qct, is_causal=True),
        "causal fwd attnkit q[1,256,1,64]": lambda: attnkit.attention(qc, qc, qc, is_causal=True),
    })

    # causal forward + backward, separate q, k, v with two heads (a second class member of the tiny fwd+bwd)
    qs, ks, vs = (randn(1, 256, 2, 64, requires_grad=True) for _ in range(3))

    def attnkit_causal_fwd_bwd():
        qs.grad = ks.grad = vs.grad = None
        attnkit.attention(qs, ks, vs, is_causal=True).sum().backward()

    def sdpa_causal_fwd_bwd():
        qs.grad = ks.grad = vs.grad = None
        F.scaled_dot_product_attention(heads_first(qs), heads_first(ks), heads_first(vs),
                                       is_causal=True).sum().backward()

    record_interleaved("calls", {
        "causal fwd+bwd sdpa [1,2,256,64] q,k,v (transpose in loop)": sdpa_causal_fwd_bwd,
        "causal fwd+bwd attnkit q,k,v[1,256,2,64]": attnkit_causal_fwd_bwd,
    })

    # GQA: 4 query heads share 1 KV head
    qq, kk, vv = randn(1, 128, 4, 64), randn(1, 128, 1, 64), randn(1, 128, 1, 64)
    qqt, kkt, vvt = heads_first(qq), heads_first(kk), heads_first(vv)
    try:
        checks["gqa_max_abs_diff_vs_sdpa"] = max_abs_diff(
            attnkit.attention(qq, kk, vv), heads_first(F.scaled_dot_product_attention(qqt, kkt, vvt, enable_gqa=True)))
    except Exception as error:  # noqa: BLE001
        checks["gqa_max_abs_diff_vs_sdpa"] = f"{type(error).__name__}: {error}"
    record_interleaved("calls", {
        "gqa fwd sdpa enable_gqa=True": lambda: F.scaled_dot_product_attention(qqt, kkt, vvt, enable_gqa=True),
        "gqa fwd attnkit q[1,128,4,64] kv[1,128,1,64]": lambda: attnkit.attention(qq, kk, vv),
    })

    # neighborhood attention (no SDPA peer)
    s = randn(1, 256, 1, 64)
    record("calls", "na1d fwd attnkit q[1,256,1,64] K=7", lambda: (lambda: attnkit.na1d(s, s, s, kernel_size=7)))
    x = randn(1, 8, 8, 1, 32)
    record("calls", "na2d fwd attnkit q[1,8,8,1,32] K=3", lambda: (lambda: attnkit.na2d(x, x, x, kernel_size=3)))
    xg = randn(1, 8, 8, 1, 32, requires_grad=True)

    def na2d_fwd_bwd():
        xg.grad = None
        attnkit.na2d(xg, xg, xg, kernel_size=3).sum().backward()

    record("calls", "na2d fwd+bwd attnkit q[1,8,8,1,32] K=3", lambda: na2d_fwd_bwd)


# ---------------------------------------------------------------------------------------------
# layers: the tiny forward taken apart


def section_layers():
    print("\n== layers: tiny forward attnkit.attention(q, q, q), q [1,128,1,64], us per call ==", flush=True)
    q = randn(1, 128, 1, 64)
    k = v = q
    device = q.device
    ops = None
    try:
        from attnkit import _attention_ops as ops  # noqa: F811
    except Exception as error:  # noqa: BLE001
        print(f"  attnkit._attention_ops not importable: {error}")
    op_args = (None, None, 0, 0, [], [], [], [], 0, 0, None)

    record("layers", "(0) empty Python loop body (floor)", lambda: (lambda: None))
    record("layers", "(1) attnkit.attention(q, q, q)", lambda: (lambda: attnkit.attention(q, q, q)))

    def op_call():
        op = ops.attention_forward
        return lambda: op(q, k, v, *op_args)

    record("layers", "(2) _attention_ops.attention_forward(...) (custom op)", op_call)

    def opoverload():
        overload = torch.ops.attnkit.attention_forward.default
        return lambda: overload(q, k, v, *op_args)

    record("layers", "(2b) torch.ops.attnkit.attention_forward.default(...)", opoverload)

    def raw_fn():
        op = ops.attention_forward
        fn = getattr(op, "_init_fn", None)
        if fn is None:
            raise AttributeError(f"{type(op).__name__} has no _init_fn (attributes: "
                                 f"{[n for n in dir(op) if n.startswith('_') and not n.startswith('__')]})")
        return lambda: fn(q, k, v, *op_args)

    record("layers", "(3) op's Python body without torch dispatch (_init_fn)", raw_fn)

    # The pieces of the op body, each alone. They use 51268eb's helper names; a later version that
    # renamed them gets a skip with the reason.
    def pieces():
        from attnkit import _capi, _launch

        lib = _launch.library()
        out = torch.empty(q.shape[:-1] + v.shape[-1:], dtype=q.dtype, device=device)
        lse = torch.empty(q.shape[:-1], dtype=torch.float32, device=device)
        stream = torch.cuda.current_stream(device).cuda_stream if CUDA else None
        return _capi, _launch, lib, out, lse, stream

    def checks_only():
        _capi, _launch, lib, *_ = pieces()

        def fn():
            _launch.check_device(lib, q, k, v, None, None)
            for t in (q, k, v, None, None):
                _launch.contiguous_last(t)

        return fn

    record("layers", "(3a) check_device + 5x contiguous_last", checks_only)

    def library_lookup():
        _capi, _launch, *_ = pieces()
        return _launch.library

    record("layers", "(3b) _launch.library() (cached CDLL under a lock)", library_lookup)

    def build_structs():
        _capi, _launch, lib, out, lse, _ = pieces()
        fill_mask, set_scale = ops.fill_mask, ops._set_scale
        view = _launch.view

        def fn():
            args = _capi.AttentionForwardArgs()
            lib.attnkit_attention_forward_args_init(ctypes.byref(args))
            args.q, args.k, args.v = view(q), view(k), view(v)
            args.out, args.lse = view(out), view(lse)
            set_scale(args, None)
            fill_mask(args.mask, None, None, 0, 0, [], [], [], [], 0, 0)
            return args

        return fn

    record("layers", "(4) build AttentionForwardArgs (init, 5 views, mask)", build_structs,
           note="includes the C call attnkit_attention_forward_args_init (a struct initialiser)")

    def views_only():
        _capi, _launch, lib, out, lse, _ = pieces()
        view = _launch.view

        def fn():
            view(q), view(k), view(v), view(out), view(lse)

        return fn

    record("layers", "(4a) 5x _launch.view (tensor -> attnkit_tensor)", views_only)

    def one_view():
        _capi, _launch, *_ = pieces()
        view = _capi.tensor_view
        return lambda: view(q)

    record("layers", "(4b) 1x _capi.tensor_view", one_view)

    def absent_views():
        _capi, _launch, lib, *_ = pieces()
        fill_mask = ops.fill_mask

        def fn():
            m = _capi.AttentionMask()
            fill_mask(m, None, None, 0, 0, [], [], [], [], 0, 0)

        return fn

    record("layers", "(4c) AttentionMask() + fill_mask (2 absent views)", absent_views)

    def run_options():
        _capi, _launch, lib, out, lse, stream = pieces()
        return lambda: _capi.run_options(lib, stream=stream)

    record("layers", "(4d) _capi.run_options(lib, stream) (prebuilt stream)", run_options,
           note="includes the C call attnkit_run_options_init")

    def c_calls(which):
        def make():
            _capi, _launch, lib, out, lse, stream = pieces()
            builder = build_structs()  # owns the out/lse tensors the structs point to: kept alive below
            args = builder()
            KEEP_ALIVE.append(builder)
            options = _capi.run_options(lib, stream=stream)
            size = ctypes.c_int64(0)
            byref = ctypes.byref
            ws, fwd = lib.attnkit_attention_forward_workspace_size, lib.attnkit_attention_forward
            status = ws(byref(args), byref(options), byref(size))
            _capi.check(status, lib)
            if size.value > 0:
                raise RuntimeError(f"workspace {size.value} bytes: this layer assumes none (dense box policy)")
            _capi.check(fwd(byref(args), byref(options)), lib)
            sync()
            RESULTS.setdefault("checks", {})["tiny_forward_workspace_bytes"] = size.value
            if which == "both":
                def fn():
                    ws(byref(args), byref(options), byref(size))
                    fwd(byref(args), byref(options))
            elif which == "ws":
                def fn():
                    ws(byref(args), byref(options), byref(size))
            elif which == "fwd":
                def fn():
                    fwd(byref(args), byref(options))
            else:
                abi = lib.attnkit_abi_version

                def fn():
                    abi()
            return fn

        return make

    record("layers", "(5) C ABI workspace_size + forward (prebuilt structs)", c_calls("both"))
    record("layers", "(5a) C ABI attnkit_attention_forward_workspace_size", c_calls("ws"))
    record("layers", "(5b) C ABI attnkit_attention_forward", c_calls("fwd"))
    record("layers", "(5c) ctypes floor: attnkit_abi_version()", c_calls("abi"))

    def empties():
        shape_out, shape_lse = q.shape[:-1] + v.shape[-1:], q.shape[:-1]

        def fn():
            torch.empty(shape_out, dtype=q.dtype, device=device)
            torch.empty(shape_lse, dtype=torch.float32, device=device)

        return fn

    record("layers", "(6) torch.empty out + lse", empties)

    def stream_query():
        if not CUDA:
            raise RuntimeError("CPU run: no stream")
        return lambda: torch.cuda.current_stream(device).cuda_stream

    record("layers", "(7a) torch.cuda.current_stream(device).cuda_stream", stream_query)

    def guard():
        if not CUDA:
            raise RuntimeError("CPU run: no device guard")

        def fn():
            with torch.cuda.device(device):
                pass

        return fn

    record("layers", "(7b) with torch.cuda.device(device): pass", guard)

    # autograd registration cost: the same calls with requires_grad inputs (forward only)
    qg = randn(1, 128, 1, 64, requires_grad=True)
    record("layers", "(1g) attnkit.attention(q, q, q), q.requires_grad", lambda: (lambda: attnkit.attention(qg, qg, qg)))

    def op_call_grad():
        op = ops.attention_forward
        return lambda: op(qg, qg, qg, *op_args)

    record("layers", "(2g) _attention_ops.attention_forward(...), q.requires_grad", op_call_grad)

    # The plan-based host path (python/attnkit/_plans.py; absent before it existed: skipped there).
    def plan_pieces():
        from attnkit import _mask_spec, _plans

        params = _mask_spec.dense().params()
        plan = ops.run_forward_keyed(q, k, v, None, None, params, None, False)[2].plan  # makes the plan
        out = torch.empty(q.shape[:-1] + v.shape[-1:], dtype=q.dtype, device=device)
        return _plans, params, plan, out

    def run_forward_direct():
        _plans, params, _, _ = plan_pieces()
        return lambda: ops.run_forward(q, k, v, None, None, params, None, False)

    record("layers", "(P1) _attention_ops.run_forward (plan path, no functional wrapper)", run_forward_direct)

    def fast_path_checks():
        from attnkit import functional

        return lambda: (functional._eager_fast_path(q, k, v, None, None), torch.is_grad_enabled(),
                        torch.are_deterministic_algorithms_enabled())

    record("layers", "(P2) eager fast-path checks (compiling, modes, tensor types)", fast_path_checks)

    def key_only():
        _plans, params, _, _ = plan_pieces()
        tk = _plans.tensor_key
        return lambda: (tk(q), tk(k), tk(v), tk(None), tk(None), params, None, False, False)

    record("layers", "(P3) plan key tuple (3 tensors: shape, stride, dtype, device, ptr & 15)", key_only)

    def plan_run_only():
        _plans, _, plan, out = plan_pieces()
        pointers = (q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), None, None, None)
        KEEP_ALIVE.append(out)  # the timed runs write into it
        return lambda: _plans.run(plan, pointers, device)

    record("layers", "(P4) _plans.run alone (ctypes attnkit_plan_run + library)", plan_run_only)

    def stream_only():
        _plans, _, _, _ = plan_pieces()
        from attnkit import _launch

        return lambda: _launch.stream_of(device)

    record("layers", "(P5) _launch.stream_of(device) (raw current stream)", stream_only)

    def empty_out():
        return lambda: torch.empty(q.shape[:-1] + v.shape[-1:], dtype=q.dtype, device=device)

    record("layers", "(P6) torch.empty(out) alone", empty_out)

    # what the pieces add up to, next to the body they were taken from
    layers = RESULTS.get("layers", {})

    def us(name):
        entry = layers.get(name, {})
        return entry.get("us")

    parts = ["(3a) check_device + 5x contiguous_last", "(3b) _launch.library() (cached CDLL under a lock)",
             "(4) build AttentionForwardArgs (init, 5 views, mask)", "(4d) _capi.run_options(lib, stream) (prebuilt stream)",
             "(5) C ABI workspace_size + forward (prebuilt structs)", "(6) torch.empty out + lse",
             "(7a) torch.cuda.current_stream(device).cuda_stream", "(7b) with torch.cuda.device(device): pass"]
    values = [us(p) for p in parts]
    if all(x is not None for x in values):
        RESULTS["layers_sum"] = {"parts": parts, "sum_us": sum(values),
                                 "body_us": us("(3) op's Python body without torch dispatch (_init_fn)")}
        print(f"  sum of (3a)+(3b)+(4)+(4d)+(5)+(6)+(7a)+(7b) = {sum(values):.2f} us "
              f"(the body (3): {RESULTS['layers_sum']['body_us']})", flush=True)


# ---------------------------------------------------------------------------------------------
# backward: the tiny forward+backward taken apart


def section_backward():
    print("\n== backward: tiny forward+backward, q [1,128,1,64], us per call ==", flush=True)
    from attnkit import _attention_ops as ops
    from attnkit import _mask_spec, _plans

    qg = randn(1, 128, 1, 64, requires_grad=True)
    q = qg.detach()
    params = _mask_spec.dense().params()
    out, lse = ops.run_forward(q, q, q, None, None, params, None, True)
    grad_expanded = torch.ones((), device=DEVICE, dtype=DTYPE).expand(out.shape)  # what out.sum() hands back
    grad_dense = torch.ones_like(out)

    class Identity(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, grad):
            return grad

    class EightArguments(torch.autograd.Function):
        """AttentionFunction's shape without the work: 8 inputs, 8 saved, two fresh outputs."""

        @staticmethod
        def forward(ctx, q_, k_, v_, block_mask, element_mask, params_, scale, rpb):
            out_, lse_ = torch.empty_like(q_), torch.empty(q_.shape[:-1], dtype=torch.float32, device=q_.device)
            ctx.save_for_backward(q_, k_, v_, out_, lse_, block_mask, element_mask, rpb)
            ctx.set_materialize_grads(False)
            ctx.params, ctx.scale = params_, scale
            return out_, lse_

        @staticmethod
        def backward(ctx, grad_out, grad_lse):
            return (grad_out,) * 3 + (None,) * 5

    def floor_python_function():
        qg.grad = None
        Identity.apply(qg).sum().backward()

    def floor_native():
        qg.grad = None
        (qg * 1).sum().backward()

    def sdpa_forward_grad():
        v = heads_first(qg)
        F.scaled_dot_product_attention(v, v, v)

    record("backward", "(B0) floor: (q * 1).sum().backward() (native op)", lambda: floor_native)
    record("backward", "(B1) floor: Identity autograd.Function .sum().backward()", lambda: floor_python_function)
    record("backward", "(B2) attnkit.attention(qg, qg, qg) forward only", lambda: (lambda: attnkit.attention(qg, qg, qg)))
    record("backward", "(B2a) run_forward with lse, no autograd", lambda: (lambda: ops.run_forward(
        q, q, q, None, None, params, None, True)))
    record("backward", "(B2b) 8-input autograd.Function, 2 empty outputs", lambda: (lambda: EightArguments.apply(
        qg, qg, qg, None, None, params, None, None)))
    record("backward", "(B3) sdpa forward only (requires_grad)", lambda: sdpa_forward_grad)
    record("backward", "(B4) run_backward (grad of out.sum(): expanded)",
           lambda: (lambda: ops.run_backward(grad_expanded, None, q, q, q, out, lse, None, None, params, None, False)))
    record("backward", "(B5) run_backward (contiguous grad)",
           lambda: (lambda: ops.run_backward(grad_dense, None, q, q, q, out, lse, None, None, params, None, False)))

    def plan_run():
        key = None
        for candidate in ops._backward_plans:
            key = candidate
        plan = ops._backward_plans[key]
        grads = [torch.empty_like(q) for _ in range(3)]
        KEEP_ALIVE.extend(grads)
        pointers = (q.data_ptr(),) * 3 + (out.data_ptr(), lse.data_ptr(), grad_dense.data_ptr()) + tuple(
            g.data_ptr() for g in grads) + (None, None)
        return lambda: _plans.run(plan, pointers, DEVICE)

    record("backward", "(B6) _plans.run of the backward plan alone", plan_run)
    record("backward", "(B7) expanded grad .contiguous()", lambda: (lambda: grad_expanded.contiguous()))
    record("backward", "(B8) 3x torch.empty_like", lambda: (lambda: (torch.empty_like(q), torch.empty_like(q),
                                                                     torch.empty_like(q))))

    if CUDA:
        profile_fwd_bwd(qg)


def profile_fwd_bwd(qg, iterations: int = 50) -> None:
    """torch.profiler's CPU-side op table for one attnkit and one SDPA forward+backward (host time by op)."""
    from torch.profiler import ProfilerActivity, profile

    def attnkit_step():
        qg.grad = None
        attnkit.attention(qg, qg, qg).sum().backward()

    def sdpa_step():
        qg.grad = None
        v = heads_first(qg)
        F.scaled_dot_product_attention(v, v, v).sum().backward()

    tables = RESULTS.setdefault("profiles", {})
    for name, step in (("attnkit", attnkit_step), ("sdpa", sdpa_step)):
        for _ in range(20):
            step()
        sync()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(iterations):
                step()
            sync()
        table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=22, max_name_column_width=55)
        tables[name] = table
        print(f"\n-- torch.profiler, {name} forward+backward x{iterations} (CPU side) --\n{table}", flush=True)


# ---------------------------------------------------------------------------------------------
# cold start in fresh subprocesses

COLD_CHILD = r"""
import json, os, sys, time
variant = sys.argv[1]
sys.path[:0] = [p for p in sys.argv[2:] if p]
t = {}
t0 = time.perf_counter()
import torch
t['import_torch_s'] = time.perf_counter() - t0
t0 = time.perf_counter()
torch.empty(1, device='cuda'); torch.cuda.synchronize()
t['cuda_context_s'] = time.perf_counter() - t0
q = torch.randn(1, 128, 1, 64, device='cuda', dtype=torch.bfloat16)
torch.cuda.synchronize()
if variant.startswith('attnkit'):
    t0 = time.perf_counter()
    import attnkit
    t['import_attnkit_s'] = time.perf_counter() - t0
    if variant == 'attnkit_split':
        t0 = time.perf_counter()
        attnkit.load_library()
        t['load_library_s'] = time.perf_counter() - t0
    call = lambda: attnkit.attention(q, q, q)
else:
    import torch.nn.functional as F
    qt = q.transpose(1, 2)
    call = lambda: F.scaled_dot_product_attention(qt, qt, qt)
t0 = time.perf_counter()
call(); torch.cuda.synchronize()
t['first_call_s'] = time.perf_counter() - t0
t0 = time.perf_counter()
call(); torch.cuda.synchronize()
t['second_call_s'] = time.perf_counter() - t0
print('COLD-JSON ' + json.dumps(t))
"""


def section_cold():
    print(f"\n== cold start: fresh subprocesses, median of {ARGS.cold_runs} ==", flush=True)
    paths = [] if ARGS.no_python_path else [str(ROOT / "python")]
    cold = RESULTS.setdefault("cold", {})
    for variant in ("attnkit", "attnkit_split", "sdpa"):
        runs = []
        for _ in range(ARGS.cold_runs):
            proc = subprocess.run([sys.executable, "-c", COLD_CHILD, variant, *paths], capture_output=True,
                                  text=True, env=dict(os.environ), timeout=300)
            line = [x for x in proc.stdout.splitlines() if x.startswith("COLD-JSON ")]
            if proc.returncode != 0 or not line:
                runs.append({"error": f"exit {proc.returncode}: {(proc.stderr or proc.stdout)[-400:]}"})
                continue
            runs.append(json.loads(line[-1][len("COLD-JSON "):]))
        good = [r for r in runs if "error" not in r]
        summary = {"runs": runs}
        if good:
            for key in good[0]:
                if key.endswith("_s"):
                    summary[key[:-2] + "_ms_median"] = statistics.median(r[key] for r in good) * 1e3
        cold[variant] = summary
        shown = ", ".join(f"{k} {v:.2f}" for k, v in summary.items() if k.endswith("_ms_median"))
        print(f"  {variant:14s} {shown or runs[-1].get('error', '')[:300]}", flush=True)


# ---------------------------------------------------------------------------------------------


def environment() -> dict:
    env = {
        "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "label": ARGS.label,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "host": platform.node(),
        "cpu": platform.processor() or platform.machine(),
        "calls": ARGS.calls,
        "reps": ARGS.reps,
        "attnkit_module": getattr(attnkit, "__file__", "?"),
        "timing": "perf_counter around N back-to-back calls, then torch.cuda.synchronize(); us includes the "
                  "synchronize, us_host stops before it; median of reps",
    }
    if CUDA:
        env["gpu"] = torch.cuda.get_device_name(DEVICE)
    try:
        env["attnkit"] = attnkit.library_info()
    except Exception as error:  # noqa: BLE001
        env["attnkit"] = f"{type(error).__name__}: {error}"
    return env


def warm_up_clocks(seconds: float = 1.0) -> None:
    """Keep the GPU busy for a moment first: an idle GPU runs at a low clock, which makes tiny kernels
    several times longer and the first section's back-to-back loops GPU-bound."""
    if not CUDA:
        return
    a = torch.randn(4096, 4096, device=DEVICE, dtype=torch.bfloat16)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(10):
            a @ a
        sync()


def main() -> int:
    sections = {s.strip() for s in ARGS.sections.split(",") if s.strip()}
    if ARGS.no_cold or not CUDA:
        sections.discard("cold")
    if CUDA and not torch.cuda.is_available():
        print("no CUDA device visible to torch", file=sys.stderr)
        return 2
    RESULTS["environment"] = environment()
    print(json.dumps(RESULTS["environment"], indent=1), flush=True)
    warm_up_clocks()
    status = 0
    for name, fn in (("calls", section_calls), ("layers", section_layers), ("backward", section_backward),
                     ("cold", section_cold)):
        if name not in sections:
            continue
        try:
            fn()
        except Exception:  # noqa: BLE001 - keep the other sections and the JSON
            traceback.print_exc()
            RESULTS.setdefault("errors", {})[name] = traceback.format_exc()[-2000:]
            status = 1
        if ARGS.json:
            Path(ARGS.json).write_text(json.dumps(RESULTS, indent=1))
    print_table()
    if ARGS.json:
        Path(ARGS.json).write_text(json.dumps(RESULTS, indent=1))
        print(f"wrote {ARGS.json}")
    return status


def print_table():
    print("\n==================== summary: us per call (median of reps): back-to-back, host only ====================")
    for section in ("calls", "layers", "backward"):
        for name, entry in RESULTS.get(section, {}).items():
            value = f"{entry['us']:9.2f} {entry['us_host_chunks']:9.2f}" if "us" in entry else "  skipped"
            if "ratio_to_first" in entry:
                value += f"   ratio {entry['ratio_to_first']:.3f}"
            print(f"{section:7s} {name:60s} {value}")
    if "layers_sum" in RESULTS:
        print(f"layers  sum of the body's pieces: {RESULTS['layers_sum']['sum_us']:.2f} us")
    for variant, summary in RESULTS.get("cold", {}).items():
        shown = ", ".join(f"{k[:-10]} {v:.2f} ms" for k, v in summary.items() if k.endswith("_ms_median"))
        print(f"cold    {variant:14s} {shown}")
    for name, value in RESULTS.get("checks", {}).items():
        print(f"check   {name}: {value}")


if __name__ == "__main__":
    sys.exit(main())
