#!/usr/bin/env python3
"""attnkit fused attention against its peers on one GPU (each row's candidates in one process).

Each row is one problem (dense, causal, neighborhood 1/2/3-D, block-sparse; forward, and with
--backward also backward). For every row the same random bf16 inputs (heads-last, as attnkit takes
them: Q [B, *tokens, H, D]) go to:

  attnkit         through the C ABI (python/attnkit/_capi.py), on torch's current CUDA stream
  sdpa_flash      torch SDPA, FLASH_ATTENTION backend   (dense and causal rows only)
  sdpa_cudnn      torch SDPA, CUDNN_ATTENTION backend   (masked rows: a dense bool attn_mask)
  sdpa_efficient  torch SDPA, EFFICIENT_ATTENTION       (masked rows: a dense bool attn_mask)
  flex            torch.compile(flex_attention) with a BlockMask from a mask_mod that implements
                  DESIGN §3 exactly (bench/attention_masks.py), BLOCK_SIZE 128

Torch peers see [B, H, S, D] views of the heads-last tensors (transposes, no copies;
--peer-layout contiguous hands them packed copies made outside the timed region instead).

Method (DESIGN §5): CUDA events around each call, L2 flushed (256 MB written) before each timed
call, warm-up first, median of many calls. TF/s counts useful FLOPs only: forward
2*B*H*pairs*(D + Dv) (= 4*B*H*pairs*D), backward 2.5x that, with pairs = attended (query, key)
pairs counted exactly from the mask (the same count for attnkit's fast backward, the default, and
for its deterministic mode, which the bwd-*-deterministic rows run). Correctness: every candidate's output on a random slice of
query rows (all heads of the last batch) is compared with an fp32 softmax reference built from the
same mask (relative L2, DESIGN tolerances: bf16 1.5e-2); attnkit's output is also compared with the
best peer's in full, and is poisoned with NaN first so unwritten elements show up. A peer that
disagrees with the reference is reported and not counted as "best peer".

On CUDA each row runs in a child process (--no-isolate: all in one), so a crash (illegal address,
abort) in one candidate loses that row's remaining candidates, never the run; the child saves its
results after every candidate, and bench.json / bench.md are rewritten after every row.

  python3 bench/bench_attention.py                     # all forward rows
  python3 bench/bench_attention.py --quick --backward  # small shapes, forward and backward
  python3 bench/bench_attention.py --only 'na2d*'      # rows by glob (comma-separated)
  python3 bench/bench_attention.py --set classes --backward --only 'cls-na2d-*'  # issue #20's classes
  python3 bench/bench_attention.py --row na:32,4,64,28x28,7 --row causal:16,16,1024,64  # shapes of your own
  python3 bench/bench_attention.py --smoke-cpu         # tiny shapes on CPU: attnkit CPU vs SDPA math
  python3 bench/bench_attention.py --self-test         # mask math vs the scalar reading of DESIGN §3
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import fnmatch
import gc
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import zlib
from dataclasses import dataclass
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
sys.path.insert(0, str(BENCH_DIR))
sys.path.insert(0, str(REPO / "python"))

import attention_masks as masks  # noqa: E402
import report_plots  # noqa: E402

TOLERANCE = {"float32": 1e-5, "float16": 5e-3, "bfloat16": 1.5e-2, "float64": 1e-10}
# The backward reads the forward's LSE, which the ABI keeps in float32: its rounding (~1e-7 relative)
# bounds how close float64 gradients can get.
TOLERANCE_BACKWARD = {**TOLERANCE, "float64": 1e-6}
PEERS_GPU = ("sdpa_flash", "sdpa_cudnn", "sdpa_efficient", "flex")
PEERS_CPU = ("sdpa_math",)
DENSE_MASK_LIMIT = 16384 * 16384  # largest Sq*Sk for which SDPA peers get a dense bool attn_mask


# ---------------------------------------------------------------------------------------------
# Problems


@dataclass
class Problem:
    name: str
    batch: int
    heads: int
    head_dim: int
    extents: tuple  # token extents, row-major
    mask: masks.MaskSpec
    backward: bool = False
    dtype: str = "bfloat16"
    deterministic: bool = False  # backward: attnkit's deterministic mode (default: fast, atomic dQ)
    kv_splits: int = 0  # backward: attnkit's KV-parallel splits (0: automatic, 1: never)
    peers: tuple | None = None  # the peers this row runs (None: all; --peers narrows further)
    target: str | None = None  # the peer issue #20's target for this row is stated against
    core: bool = False  # also in --set classes-core

    @property
    def seq(self) -> int:
        return math.prod(self.extents)

    def shape_text(self) -> str:
        tokens = "x".join(map(str, self.extents)) if len(self.extents) > 1 else f"S{self.extents[0]}"
        return f"B{self.batch} H{self.heads} {tokens} D{self.head_dim}"

    def pairs(self):
        """Attended pairs per (batch, head): the mean when a block mask differs per head."""
        return masks.count_pairs(self.mask, self.seq, self.seq)

    def flops(self) -> float:
        forward = 2.0 * self.batch * self.heads * self.pairs() * (self.head_dim + self.head_dim)
        return forward * 2.5 if self.backward else forward


def dense(name, b, h, s, d, causal=False, **kw):
    return Problem(name, b, h, d, (s,), masks.MaskSpec("causal" if causal else "none"), **kw)


def na(name, b, h, d, extents, kernel, **kw):
    return Problem(name, b, h, d, tuple(extents), masks.neighborhood(extents, kernel), **kw)


def block(name, b, h, d, s, density, block_size=128, seed=0, **kw):
    spec = masks.MaskSpec("block", block_size=block_size, density=density,
                          blocks=masks.random_blocks(s, block_size, density, seed))
    return Problem(name, b, h, d, (s,), spec, **kw)


def full_rows(backward: bool) -> list[Problem]:
    rows = [
        dense("dense-s16384-d128", 2, 16, 16384, 128),
        dense("dense-causal-s16384-d128", 2, 16, 16384, 128, causal=True),
        dense("dense-s16384-d64", 2, 16, 16384, 64),
        dense("dense-causal-s16384-d64", 2, 16, 16384, 64, causal=True),
        na("na1d-32768-k2049", 1, 16, 128, (32768,), (2049,)),
        na("na2d-128x128-k31", 1, 16, 128, (128, 128), (31, 31)),
        na("na2d-64x64-k13-b4", 4, 16, 128, (64, 64), (13, 13)),
        na("na3d-16x64x64-k7x15x15", 1, 16, 128, (16, 64, 64), (7, 15, 15)),
        block("block10-s16384", 1, 16, 128, 16384, 0.10, seed=10),
        block("block30-s16384", 1, 16, 128, 16384, 0.30, seed=30),
    ]
    if backward:
        rows += [
            dense("bwd-dense-s8192-d128", 2, 16, 8192, 128, backward=True),
            dense("bwd-dense-s8192-d128-deterministic", 2, 16, 8192, 128, backward=True, deterministic=True),
            dense("bwd-causal-s8192-d128", 2, 16, 8192, 128, causal=True, backward=True),
            dense("bwd-causal-s8192-d128-deterministic", 2, 16, 8192, 128, causal=True, backward=True,
                  deterministic=True),
            na("bwd-na2d-128x128-k31", 1, 16, 128, (128, 128), (31, 31), backward=True),
            na("bwd-na2d-128x128-k31-deterministic", 1, 16, 128, (128, 128), (31, 31), backward=True,
               deterministic=True),
            na("bwd-na3d-16x64x64-k7x15x15", 1, 16, 128, (16, 64, 64), (7, 15, 15), backward=True),
            na("bwd-na3d-16x64x64-k7x15x15-deterministic", 1, 16, 128, (16, 64, 64), (7, 15, 15), backward=True,
               deterministic=True),
            # A grid of 64 KV-tile CTAs on a 132-SM GPU: KV-parallel splitting (automatic) vs none.
            dense("bwd-dense-s4096-d128-h2", 1, 2, 4096, 128, backward=True),
            dense("bwd-dense-s4096-d128-h2-nosplit", 1, 2, 4096, 128, backward=True, kv_splits=1),
        ]
    return rows


def quick_rows(backward: bool) -> list[Problem]:
    rows = [
        dense("dense-s4096-d128", 1, 8, 4096, 128),
        dense("dense-causal-s4096-d128", 1, 8, 4096, 128, causal=True),
        na("na2d-64x64-k13", 1, 8, 128, (64, 64), (13, 13)),
        na("na3d-8x16x16-k3x7x7", 1, 8, 128, (8, 16, 16), (3, 7, 7)),
        block("block30-s4096", 1, 8, 128, 4096, 0.30, seed=30),
    ]
    if backward:
        rows += [
            dense("bwd-dense-s2048-d128", 1, 8, 2048, 128, backward=True),
            na("bwd-na2d-32x32-k7", 1, 8, 128, (32, 32), (7, 7), backward=True),
        ]
    return rows


def smoke_rows(backward: bool) -> list[Problem]:
    f32 = {"dtype": "float32"}
    rows = [
        dense("smoke-dense", 2, 3, 67, 32, **f32),
        dense("smoke-dense-causal", 1, 2, 50, 16, causal=True, **f32),
        Problem("smoke-na1d-dil-stride", 2, 2, 16, (37,),
                masks.neighborhood((37,), (7,), (2,), (3,), (False,)), **f32),
        Problem("smoke-na2d-mixed", 1, 2, 16, (9, 11),
                masks.neighborhood((9, 11), (3, 5), (1, 2), (2, 1), (False, True)), **f32),
        na("smoke-na3d", 1, 2, 8, (5, 6, 7), (3, 3, 5), **f32),
        block("smoke-block30", 1, 2, 16, 100, 0.30, block_size=16, seed=3, **f32),
        dense("smoke-dense-bf16", 1, 2, 40, 32, dtype="bfloat16"),
        na("smoke-na2d-f64", 1, 2, 8, (7, 9), (3, 5), dtype="float64"),
    ]
    if backward:
        rows += [
            dense("smoke-bwd-dense", 1, 2, 33, 16, backward=True, dtype="float64"),
            na("smoke-bwd-na2d", 1, 2, 8, (7, 9), (3, 5), backward=True, dtype="float64"),
            dense("smoke-bwd-causal", 1, 2, 29, 8, causal=True, backward=True, dtype="float64"),
            block("smoke-bwd-block30", 1, 2, 8, 100, 0.30, block_size=16, seed=4, backward=True,
                  dtype="float64"),
        ]
    return rows


# Issue #20's problem classes (--set classes): the problems most users of neighborhood and sparse
# attention run. Rows are named cls-<class>-... (forward) and cls-<class>-bwd-... (backward, with
# --backward), so `--only 'cls-na2d-*'` picks a class and `--only 'cls-na2d-bwd-*'` its backward rows.
# Each row runs the peers its class is measured against (DENSE_PEERS / MASKED_PEERS / BLOCK_PEERS) and
# names the one issue #20's target is stated against (row "target_peer", "ratio_target").
CLASSES = ("na2d", "na3d", "dense", "na1d", "blockhead")
DENSE_PEERS = ("sdpa_flash", "sdpa_cudnn", "sdpa_efficient")
# Neighborhood rows: Flex with the same mask, and SDPA cuDNN / memory-efficient with a dense bool mask
# (dense work, but at these sizes a real option for a user).
MASKED_PEERS = ("sdpa_cudnn", "sdpa_efficient", "flex")
# Per-head block rows at 8k-32k tokens: Flex only (a dense [1, H, S, S] SDPA mask would be 1-16 GB).
BLOCK_PEERS = ("flex",)


def class_rows(backward: bool) -> list[Problem]:
    forward, backward_rows = [], []

    def add(problem_of, name, bwd=False, core=False, core_bwd=False, **kw):
        """A forward row cls-<name>, and with bwd=True its backward row cls-<class>-bwd-<rest>."""
        klass, rest = name.split("-", 1)
        forward.append(problem_of(f"cls-{name}", core=core, **kw))
        if bwd:
            backward_rows.append(problem_of(f"cls-{klass}-bwd-{rest}", backward=True, core=core_bwd, **kw))

    def na2d(name, b, h, d, side, k, dil=1, **kw):
        return Problem(name, b, h, d, (side, side), masks.neighborhood((side, side), (k, k), (dil, dil)),
                       peers=MASKED_PEERS, target="flex", **kw)

    # Small-window 2-D neighborhoods: NAT/DiNAT stages (D32, heads 2/4/8 at 56²/28²/14², batch 64),
    # D64 and D128 layers, K3 to K13, dilation 1 and the DiNAT dilations (8 at 56², 4 at 28², 2 at 14²);
    # every stage forward and backward.
    for side, h, dil in ((56, 2, 8), (28, 4, 4), (14, 8, 2)):
        add(lambda n, **kw: na2d(n, 64, h, 32, side, 7, **kw), f"na2d-{side}x{side}-k7-d32-b64h{h}",
            bwd=True, core=side == 56, core_bwd=side == 56)
        add(lambda n, **kw: na2d(n, 64, h, 32, side, 7, dil, **kw), f"na2d-{side}x{side}-k7-dil{dil}-d32-b64h{h}",
            bwd=True)
    add(lambda n, **kw: na2d(n, 32, 8, 64, 32, 7, **kw), "na2d-32x32-k7-d64-b32h8", bwd=True, core=True,
        core_bwd=True)
    add(lambda n, **kw: na2d(n, 32, 4, 64, 56, 7, **kw), "na2d-56x56-k7-d64-b32h4")
    add(lambda n, **kw: na2d(n, 32, 4, 64, 56, 7, 8, **kw), "na2d-56x56-k7-dil8-d64-b32h4", bwd=True, core=True)
    add(lambda n, **kw: na2d(n, 32, 8, 64, 32, 3, **kw), "na2d-32x32-k3-d64-b32h8", bwd=True)
    add(lambda n, **kw: na2d(n, 32, 8, 64, 32, 5, **kw), "na2d-32x32-k5-d64-b32h8")
    add(lambda n, **kw: na2d(n, 16, 8, 64, 56, 13, **kw), "na2d-56x56-k13-d64-b16h8", bwd=True)
    add(lambda n, **kw: na2d(n, 16, 8, 128, 32, 7, **kw), "na2d-32x32-k7-d128-b16h8", bwd=True)

    # 3-D video windows: 8x32² tokens, K <= 7 per dimension, D64 (one D128).
    def na3d(name, b, h, d, extents, kernel, dilation=None, **kw):
        return Problem(name, b, h, d, extents, masks.neighborhood(extents, kernel, dilation),
                       peers=MASKED_PEERS, target="flex", **kw)

    video = (8, 32, 32)
    add(lambda n, **kw: na3d(n, 8, 8, 64, video, (3, 7, 7), **kw), "na3d-8x32x32-k3x7x7-d64-b8h8", bwd=True,
        core=True, core_bwd=True)
    add(lambda n, **kw: na3d(n, 8, 8, 64, video, (5, 5, 5), **kw), "na3d-8x32x32-k5x5x5-d64-b8h8", bwd=True)
    add(lambda n, **kw: na3d(n, 8, 8, 64, video, (7, 7, 7), **kw), "na3d-8x32x32-k7x7x7-d64-b8h8", bwd=True)
    add(lambda n, **kw: na3d(n, 8, 8, 64, video, (3, 7, 7), (1, 2, 2), **kw),
        "na3d-8x32x32-k3x7x7-dil1x2x2-d64-b8h8", bwd=True)
    add(lambda n, **kw: na3d(n, 8, 8, 64, video, (3, 3, 3), **kw), "na3d-8x32x32-k3x3x3-d64-b8h8")
    add(lambda n, **kw: na3d(n, 4, 8, 128, video, (3, 7, 7), **kw), "na3d-8x32x32-k3x7x7-d128-b4h8")

    # Short dense sequences: S 512-2048, B·H 64-512, D64 and D128, causal and not (SDPA peers).
    def dense_row(name, b, h, s, d, causal=False, **kw):
        return dense(name, b, h, s, d, causal=causal, peers=DENSE_PEERS, target="sdpa_cudnn", **kw)

    for s, b, d, causal_too, core in ((512, 32, 64, True, False), (1024, 16, 64, True, True),
                                      (2048, 8, 64, True, True), (1024, 4, 64, False, False),
                                      (512, 16, 128, False, False), (1024, 8, 128, True, False),
                                      (2048, 4, 128, True, False)):
        for causal in (False, True) if causal_too else (False,):
            tag = "-causal" if causal else ""
            add(lambda n, **kw: dense_row(n, b, 16, s, d, causal, **kw), f"dense{tag}-s{s}-d{d}-b{b}h16",
                bwd=d == 64 or s == 2048 or (s == 1024 and not causal), core=core and not causal,
                core_bwd=core and not causal)

    # 1-D windows at L 8192 (D64; one D128), causal and not, K 64-4096; the large one.
    def na1d(name, b, h, d, length, k, causal=False, **kw):
        return Problem(name, b, h, d, (length,), masks.neighborhood((length,), (k,), causal=(causal,)),
                       peers=MASKED_PEERS, target="flex", **kw)

    for k in (64, 256, 1024, 4096):
        for causal in (False, True):
            tag = "-causal" if causal else ""
            add(lambda n, **kw: na1d(n, 4, 16, 64, 8192, k, causal, **kw), f"na1d{tag}-8192-k{k}-d64-b4h16",
                bwd=k in (256, 1024) or (k == 4096 and causal), core=k == 256 and causal,
                core_bwd=k == 256 and causal)
    add(lambda n, **kw: na1d(n, 4, 16, 128, 8192, 1024, **kw), "na1d-8192-k1024-d128-b4h16", bwd=True)
    add(lambda n, **kw: na1d(n, 1, 16, 128, 32768, 2049, **kw), "na1d-32768-k2049-d128-b1h16")

    # Per-head block masks (block 128 = Flex's block): the same density given shared [nb, nb], as a
    # stride-0 expand [1, H, nb, nb], per-head contiguous with the same pattern, per-head random.
    def blockhead(name, s, density, form, seed, b=1, h=16, d=128, **kw):
        spec = masks.MaskSpec("block", block_size=128, density=density, block_form=form,
                              blocks=masks.head_blocks(s, 128, density, seed, h, form))
        return Problem(name, b, h, d, (s,), spec, peers=BLOCK_PEERS, target="flex", **kw)

    for s, percent, forms, bwd_forms in ((16384, 10, masks.BLOCK_FORMS, masks.BLOCK_FORMS),
                                         (8192, 30, ("shared", "random"), ()),
                                         (32768, 5, masks.BLOCK_FORMS, ("shared", "random"))):
        for form in forms:
            add(lambda n, **kw: blockhead(n, s, percent / 100, form, seed=s + percent, **kw),
                f"blockhead-s{s}-p{percent}-{form}", bwd=form in bwd_forms,
                core=s == 16384 and form in ("shared", "expand", "random"),
                core_bwd=s == 16384 and form in ("shared", "random"))
    return forward + (backward_rows if backward else [])


def class_cpu_rows(backward: bool) -> list[Problem]:
    """CPU-sized rows of every class and block form (--smoke-cpu --set classes-cpu): the code paths
    of --set classes (per-head block tensors in all four forms, dilated 2-D, 3-D, causal 1-D) on
    attnkit's CPU backend against SDPA math, float32."""
    f32 = {"dtype": "float32"}
    rows = [
        Problem("clscpu-na2d-14x14-k7-dil2", 2, 2, 32, (14, 14), masks.neighborhood((14, 14), (7, 7), (2, 2)), **f32),
        Problem("clscpu-na3d-4x8x8-k3x5x5", 1, 2, 16, (4, 8, 8), masks.neighborhood((4, 8, 8), (3, 5, 5)), **f32),
        Problem("clscpu-na1d-causal-300-k64", 1, 2, 16, (300,), masks.neighborhood((300,), (64,), causal=(True,)),
                **f32),
        dense("clscpu-dense-causal-s130", 2, 2, 130, 32, causal=True, **f32),
    ]
    for form in masks.BLOCK_FORMS:
        spec = masks.MaskSpec("block", block_size=16, density=0.3, block_form=form,
                              blocks=masks.head_blocks(200, 16, 0.3, 5, 3, form))
        rows.append(Problem(f"clscpu-blockhead-s200-p30-{form}", 2, 3, 16, (200,), spec, **f32))
    if backward:
        for form in masks.BLOCK_FORMS:
            spec = masks.MaskSpec("block", block_size=16, density=0.3, block_form=form,
                                  blocks=masks.head_blocks(120, 16, 0.3, 6, 3, form))
            rows.append(Problem(f"clscpu-blockhead-bwd-s120-p30-{form}", 1, 3, 8, (120,), spec, backward=True,
                                dtype="float64"))
        rows.append(Problem("clscpu-na1d-bwd-causal-90-k17", 1, 2, 8, (90,),
                            masks.neighborhood((90,), (17,), causal=(True,)), backward=True, dtype="float64"))
    return rows


ROW_SPEC_HELP = ("na:B,H,D,EXTENTS,KERNEL[,DILATION[,CAUSAL]] (EXTENTS e.g. 28x28 or 8x32x32; KERNEL, DILATION and "
                 "CAUSAL one value for every dimension or one per dimension, e.g. 7 or 3x7x7, 2 or 1x2, 1 or 0x1), "
                 "dense:B,H,S,D or causal:B,H,S,D")


def _spec_ints(text: str, what: str, spec: str, minimum: int = 1) -> list[int]:
    try:
        values = [int(v) for v in text.split("x")]
    except ValueError:
        values = []
    if not values or any(v < minimum for v in values):
        raise ValueError(f"--row {spec!r}: {what} {text!r}; allowed: integers >= {minimum} joined by x")
    return values


def _per_dimension(values: list[int], dims: int, what: str, spec: str) -> tuple:
    if len(values) == 1:
        return tuple(values * dims)
    if len(values) != dims:
        raise ValueError(f"--row {spec!r}: {what} has {len(values)} values for {dims} dimensions; allowed: 1 or "
                         f"{dims}")
    return tuple(values)


def spec_rows(spec: str, backward: bool) -> list[Problem]:
    """The rows of one --row SPEC (ROW_SPEC_HELP), bf16, measured against the peers of its class in the
    classes set: a forward row row-<shape>, and with --backward its backward row row-bwd-<shape>."""
    kind, _, fields_text = spec.partition(":")
    fields = fields_text.split(",") if fields_text else []

    def positive(text, what):
        return _spec_ints(text, what, spec)

    if kind in ("dense", "causal"):
        if len(fields) != 4:
            raise ValueError(f"--row {spec!r}: {len(fields)} fields; allowed: {kind}:B,H,S,D")
        (b,), (h,), (seq,), (d,) = (positive(f, name) for f, name in zip(fields, ("B", "H", "S", "D")))
        causal = kind == "causal"
        shape = f"{'dense-causal' if causal else 'dense'}-s{seq}-d{d}-b{b}h{h}"

        def make(name, bwd):
            return dense(name, b, h, seq, d, causal=causal, backward=bwd, peers=DENSE_PEERS, target="sdpa_cudnn")
    elif kind == "na":
        if not 5 <= len(fields) <= 7:
            raise ValueError(f"--row {spec!r}: {len(fields)} fields; allowed: na:B,H,D,EXTENTS,KERNEL[,DILATION"
                             f"[,CAUSAL]]")
        (b,), (h,), (d,) = (positive(f, name) for f, name in zip(fields[:3], ("B", "H", "D")))
        extents = tuple(positive(fields[3], "EXTENTS"))
        dims = len(extents)
        if not 1 <= dims <= 3:
            raise ValueError(f"--row {spec!r}: {dims} token dimensions; allowed: 1 to 3")
        kernel = _per_dimension(positive(fields[4], "KERNEL"), dims, "KERNEL", spec)
        dilation = _per_dimension(positive(fields[5], "DILATION") if len(fields) > 5 else [1], dims, "DILATION",
                                  spec)
        causal = _per_dimension(_spec_ints(fields[6], "CAUSAL", spec, 0) if len(fields) > 6 else [0], dims,
                                "CAUSAL", spec)
        if any(c > 1 for c in causal):
            raise ValueError(f"--row {spec!r}: CAUSAL {fields[6]!r}; allowed: 0 or 1 per dimension")

        def joined(values):
            return "x".join(map(str, values))

        shape = f"na{dims}d-{joined(extents)}-k{joined(kernel)}"
        if any(v != 1 for v in dilation):
            shape += f"-dil{joined(dilation)}"
        if any(causal):
            shape += f"-causal{joined(causal)}"
        shape += f"-d{d}-b{b}h{h}"
        mask = masks.neighborhood(extents, kernel, dilation, None, tuple(bool(c) for c in causal))

        def make(name, bwd):
            return Problem(name, b, h, d, extents, mask, backward=bwd, peers=MASKED_PEERS, target="flex")
    else:
        raise ValueError(f"--row {spec!r}: kind {kind!r}; allowed: {ROW_SPEC_HELP}")
    rows = [make(f"row-{shape}", False)]
    if backward:
        rows.append(make(f"row-bwd-{shape}", True))
    return rows


ROW_SETS = {
    "full": full_rows,
    "quick": quick_rows,
    "smoke": smoke_rows,
    "classes": class_rows,
    "classes-core": lambda backward: [r for r in class_rows(backward) if r.core],
    "classes-cpu": class_cpu_rows,
}


# ---------------------------------------------------------------------------------------------
# Timing


class Timer:
    """Median time of fn() in ms. CUDA: events, L2 flushed before each timed call."""

    def __init__(self, device, warmup_ms: float, rep_ms: float):
        import torch

        self.device = device
        self.warmup_ms = warmup_ms
        self.rep_ms = rep_ms
        self.flush = (torch.empty(256 << 20, dtype=torch.int8, device=device)
                      if device.type == "cuda" else None)

    def __call__(self, fn) -> dict:
        import torch

        if self.device.type != "cuda":
            times = []
            fn()
            deadline = time.perf_counter() + self.rep_ms / 1000
            while len(times) < 3 or (time.perf_counter() < deadline and len(times) < 50):
                start = time.perf_counter()
                fn()
                times.append((time.perf_counter() - start) * 1000)
            return _summary(times)
        fn()  # compile, autotune, lazy initialisation
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(3):
            fn()
        end.record()
        torch.cuda.synchronize()
        estimate = max(start.elapsed_time(end) / 3, 1e-3)
        for _ in range(max(2, int(self.warmup_ms / estimate))):
            fn()
        reps = min(200, max(10, int(self.rep_ms / estimate)))
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        for i in range(reps):
            self.flush.zero_()
            starts[i].record()
            fn()
            ends[i].record()
        torch.cuda.synchronize()
        return _summary([s.elapsed_time(e) for s, e in zip(starts, ends)])


def _summary(times: list[float]) -> dict:
    ordered = sorted(times)
    quartile = lambda f: ordered[min(len(ordered) - 1, int(f * len(ordered)))]  # noqa: E731
    median = statistics.median(ordered)
    return {"ms": median, "reps": len(times), "min_ms": ordered[0],
            "iqr_rel": (quartile(0.75) - quartile(0.25)) / median if median > 0 else 0.0}


# ---------------------------------------------------------------------------------------------
# Inputs and reference


class Inputs:
    """Random heads-last q, k, v (and grad_out for backward) for one problem."""

    def __init__(self, problem: Problem, device, seed: int = 0):
        import torch

        self.problem = problem
        self.device = device
        self.dtype = getattr(torch, problem.dtype)
        generator = torch.Generator(device=device).manual_seed(seed)
        shape = (problem.batch, *problem.extents, problem.heads, problem.head_dim)

        def draw():
            return torch.randn(shape, generator=generator, device=device, dtype=torch.float32).to(self.dtype)

        self.q, self.k, self.v = draw(), draw(), draw()
        self.grad_out = draw() if problem.backward else None
        self.scale = 1.0 / math.sqrt(problem.head_dim)

    def flat(self, t):
        """[B, S, H, D] view of a heads-last tensor."""
        p = self.problem
        return t.reshape(p.batch, p.seq, p.heads, t.shape[-1])

    def bhsd(self, t, layout: str):
        view = self.flat(t).transpose(1, 2)
        return view.contiguous() if layout == "contiguous" else view


def reference_rows(inputs: Inputs, rows, batch_index: int):
    """fp32 (fp64 on CPU) softmax attention for query `rows` of one batch, all heads: [R, H, Dv].
    Rows that attend no key give 0 (DESIGN §3)."""
    import torch

    p = inputs.problem
    work = torch.float64 if inputs.device.type == "cpu" else torch.float32
    q = inputs.flat(inputs.q)[batch_index, rows].to(work).transpose(0, 1)  # [H, R, D]
    k = inputs.flat(inputs.k)[batch_index].to(work).transpose(0, 1)  # [H, S, D]
    v = inputs.flat(inputs.v)[batch_index].to(work).transpose(0, 1)
    allowed = masks.mask_rows(p.mask, rows, p.seq, batch=batch_index)  # [R, S], or [H|1, R, S] per head
    out = torch.empty(q.shape[0], rows.numel(), v.shape[-1], dtype=work, device=q.device)
    for h0 in range(0, q.shape[0], 4):
        scores = torch.matmul(q[h0:h0 + 4], k[h0:h0 + 4].transpose(-1, -2)) * inputs.scale
        heads_allowed = allowed[h0:h0 + 4] if allowed.dim() == 3 and allowed.shape[0] > 1 else allowed
        scores = scores.masked_fill(~heads_allowed, float("-inf"))
        top = scores.amax(dim=-1, keepdim=True)
        top = torch.where(torch.isinf(top), torch.zeros_like(top), top)
        weights = torch.exp(scores - top)
        total = weights.sum(dim=-1, keepdim=True)
        weights = weights / torch.where(total > 0, total, torch.ones_like(total))
        out[h0:h0 + 4] = torch.matmul(weights, v[h0:h0 + 4])
    return out.transpose(0, 1)


def rel_l2(got, want) -> float:
    got = got.double() if got.device.type == "cpu" else got.float()
    want = want.to(got.dtype)
    denominator = want.norm().item()
    error = (got - want).norm().item()
    if math.isnan(error):
        return float("nan")
    return error / denominator if denominator > 0 else error


# ---------------------------------------------------------------------------------------------
# Candidates: each returns (run, result) where run() does one timed call and result() gives the
# output (forward) or (dq, dk, dv) (backward) of the last call.


class Unsupported(Exception):
    """The candidate cannot express this problem (reported as n/a, not as an error)."""


def attnkit_config(lib, direction: str, args_ref, options_ref) -> str:
    """The kernel config attnkit runs the call with ("<name> (<source>)"), or why it is unknown."""
    from attnkit import _capi as capi

    name, source = ctypes.create_string_buffer(128), ctypes.create_string_buffer(32)
    try:
        query = capi.optional_function(lib, f"attnkit_attention_{direction}_config")
        capi.check(query(args_ref, options_ref, name, 128, source, 32), lib)
    except Exception as e:  # an older library, or a call the query refuses: the timing still counts
        return f"unknown ({e})"
    return f"{name.value.decode()} ({source.value.decode()})"


def attnkit_candidate(inputs: Inputs, lib, entry: dict):
    import torch
    from attnkit import _capi as capi

    p = inputs.problem
    q, k, v = inputs.q, inputs.k, inputs.v
    stream = torch.cuda.current_stream(q.device).cuda_stream if q.is_cuda else None
    options = capi.run_options(lib, capi.ATTNKIT_BACKEND_AUTO, stream)
    keep = [q, k, v]  # every tensor the C views point into must outlive the timed calls

    def fill_mask(mask):
        spec = p.mask
        if spec.kind == "causal":
            mask.kind = capi.ATTNKIT_MASK_CAUSAL
            mask.causal_alignment = capi.ATTNKIT_CAUSAL_TOP_LEFT
        elif spec.kind == "neighborhood":
            capi.neighborhood_mask(mask, spec.kernel_size, spec.dilation, spec.stride, spec.causal)
        elif spec.kind == "block":
            # As the row gives it: [nb, nb] as [1, 1, nb, nb]; [B|1, H|1, nb, nb] with its strides (a
            # stride-0 expand stays one).
            blocks = (spec.blocks.to(q.device)[None, None].contiguous() if spec.blocks.dim() == 2
                      else masks.to_device_keeping_broadcast(spec.blocks, q.device))
            keep.append(blocks)
            mask.kind = capi.ATTNKIT_MASK_BLOCK
            mask.block_mask = capi.tensor_view(blocks)
            mask.block_q = mask.block_k = spec.block_size

    out = torch.full_like(q, float("nan"))
    keep.append(out)
    forward = capi.AttentionForwardArgs()
    lib.attnkit_attention_forward_args_init(ctypes.byref(forward))
    forward.q, forward.k, forward.v = capi.tensor_view(q), capi.tensor_view(k), capi.tensor_view(v)
    forward.out = capi.tensor_view(out)
    fill_mask(forward.mask)
    forward_ref, options_ref = ctypes.byref(forward), ctypes.byref(options)
    entry["config"] = attnkit_config(lib, "forward", forward_ref, options_ref)

    if not p.backward:
        def run():
            capi.check(lib.attnkit_attention_forward(forward_ref, options_ref), lib)
        return run, lambda: out, keep

    lse = torch.empty(p.batch, *p.extents, p.heads, dtype=torch.float32, device=q.device)
    forward.lse = capi.tensor_view(lse)
    capi.check(lib.attnkit_attention_forward(forward_ref, options_ref), lib)
    grads = [torch.full_like(t, float("nan")) for t in (q, k, v)]
    backward = capi.AttentionBackwardArgs()
    lib.attnkit_attention_backward_args_init(ctypes.byref(backward))
    backward.q, backward.k, backward.v = capi.tensor_view(q), capi.tensor_view(k), capi.tensor_view(v)
    backward.out, backward.lse = capi.tensor_view(out), capi.tensor_view(lse)
    backward.grad_out = capi.tensor_view(inputs.grad_out)
    backward.grad_q, backward.grad_k, backward.grad_v = (capi.tensor_view(g) for g in grads)
    fill_mask(backward.mask)
    backward.deterministic = 1 if p.deterministic else 0
    backward.kv_splits = p.kv_splits
    backward_ref = ctypes.byref(backward)
    entry["config"] = attnkit_config(lib, "backward", backward_ref, options_ref)
    keep += [lse, inputs.grad_out, *grads]

    def run_backward():
        capi.check(lib.attnkit_attention_backward(backward_ref, options_ref), lib)
    return run_backward, lambda: tuple(grads), keep


def sdpa_candidate(inputs: Inputs, backend_name: str, layout: str):
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    p = inputs.problem
    backend = {"sdpa_flash": SDPBackend.FLASH_ATTENTION, "sdpa_cudnn": SDPBackend.CUDNN_ATTENTION,
               "sdpa_efficient": SDPBackend.EFFICIENT_ATTENTION, "sdpa_math": SDPBackend.MATH}[backend_name]
    is_causal = p.mask.kind == "causal"
    attn_mask = None
    if p.mask.kind in ("neighborhood", "block"):
        if backend_name == "sdpa_flash":
            raise Unsupported("takes no arbitrary mask")
        mask_batches, mask_heads = masks.mask_heads(p.mask)
        if p.seq * p.seq * mask_batches * mask_heads > DENSE_MASK_LIMIT:
            raise Unsupported(f"dense attn_mask of {mask_batches * mask_heads}x{p.seq}^2 too large")
        attn_mask = masks.dense_mask(p.mask, p.seq, p.seq, inputs.device)
    return _torch_candidate(inputs, layout, lambda q, k, v: _sdpa(F, sdpa_kernel, backend, q, k, v,
                                                                     attn_mask, is_causal))


def _sdpa(F, sdpa_kernel, backend, q, k, v, attn_mask, is_causal):
    with sdpa_kernel(backend):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal)


def flex_candidate(inputs: Inputs, layout: str, info: dict):
    import torch
    from torch.nn.attention.flex_attention import flex_attention

    p = inputs.problem
    block_mask, builder = masks.flex_block_mask(p.mask, p.seq, p.seq, inputs.device, 128)
    info["block_mask_builder"] = builder
    if block_mask is not None:
        info["block_mask_sparsity"] = round(float(block_mask.sparsity()), 2)
        info["block_mask_heads"] = list(block_mask.kv_num_blocks.shape[:2])
    compiled = torch.compile(flex_attention, dynamic=False)
    return _torch_candidate(inputs, layout, lambda q, k, v: compiled(q, k, v, block_mask=block_mask))


def _torch_candidate(inputs: Inputs, layout: str, attend):
    """Forward or backward of a torch attention function on [B, H, S, D] tensors."""
    import torch

    p = inputs.problem
    if not p.backward:
        q, k, v = (inputs.bhsd(t, layout) for t in (inputs.q, inputs.k, inputs.v))
        holder = {}

        def run():
            holder["out"] = attend(q, k, v)
        return run, lambda: holder["out"].transpose(1, 2), [q, k, v]

    leaves = [t.detach().clone().requires_grad_() for t in (inputs.q, inputs.k, inputs.v)]
    q, k, v = (inputs.bhsd(t, layout) for t in leaves)
    out = attend(q, k, v)
    grad_out = inputs.bhsd(inputs.grad_out, layout)
    holder = {}

    def run_backward():
        holder["grads"] = torch.autograd.grad(out, leaves, grad_out, retain_graph=True)
    return run_backward, lambda: holder["grads"], [out, grad_out, *leaves]


# ---------------------------------------------------------------------------------------------
# One row


def error_text(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}".strip()
    return " ".join(text.split())[:600]


def run_row(problem: Problem, device, args, lib, lib_error: str | None, partial_path: str | None) -> dict:
    import torch

    row = {
        "name": problem.name, "direction": "backward" if problem.backward else "forward",
        "shape": problem.shape_text(), "mask": problem.mask.describe(), "dtype": problem.dtype,
        "batch": problem.batch, "heads": problem.heads, "head_dim": problem.head_dim,
        "extents": list(problem.extents), "pairs": problem.pairs(), "flops": problem.flops(),
        "density": problem.pairs() / (problem.seq * problem.seq), "candidates": {},
    }
    if problem.target:
        row["target_peer"] = problem.target

    def save():
        if partial_path:
            with open(partial_path, "w") as f:
                json.dump(row, f)

    save()
    inputs = Inputs(problem, device, seed=zlib.crc32(problem.name.encode()))
    timer = Timer(device, args.warmup_ms, args.rep_ms)
    tolerance = (TOLERANCE_BACKWARD if problem.backward else TOLERANCE)[problem.dtype]
    generator = torch.Generator().manual_seed(1)
    check_count = min(problem.seq, args.check_rows)
    rows = torch.randperm(problem.seq, generator=generator)[:check_count]
    rows = torch.unique(torch.cat([rows, torch.tensor([0, problem.seq - 1])])).to(device)
    batch_index = problem.batch - 1
    reference = None if problem.backward else reference_rows(inputs, rows, batch_index)

    peers = PEERS_CPU if device.type == "cpu" else PEERS_GPU
    peers = [name for name in peers if (not args.peers or name in args.peers)
             and (problem.peers is None or name in problem.peers)]
    outputs = {}
    candidate = None
    for name in [*peers, "attnkit"]:
        entry = row["candidates"].setdefault(name, {})
        started = time.time()
        try:
            if name == "attnkit":
                if lib is None:
                    raise Unsupported(f"library not loaded: {lib_error}")
                candidate = attnkit_candidate(inputs, lib, entry)
            elif name == "flex":
                candidate = flex_candidate(inputs, args.peer_layout, entry)
            else:
                candidate = sdpa_candidate(inputs, name, args.peer_layout)
            # (run, result, tensors kept alive while run() may be called)
            run, result = candidate[0], candidate[1]
            run()  # the checked call (attnkit's outputs start as NaN)
            if device.type == "cuda":
                torch.cuda.synchronize()
            got = result()
            if problem.backward:
                got = tuple(inputs.flat(g).detach() for g in got)
                entry["nan"] = any(bool(torch.isnan(g).any()) for g in got)
            else:
                got = inputs.flat(got).detach()
                entry["nan"] = bool(torch.isnan(got).any())
                entry["rel_l2_ref"] = rel_l2(got[batch_index, rows], reference)
            outputs[name] = got
            entry.update(timer(run))
            entry["tflops"] = problem.flops() / (entry["ms"] * 1e-3) / 1e12
        except Unsupported as error:
            entry["na"] = str(error)
        except RuntimeError as error:
            if getattr(error, "status", None) == 2:  # ATTNKIT_UNSUPPORTED: a limitation, not a fault
                entry["na"] = error_text(error)
            else:
                entry["error"] = error_text(error)
            if args.verbose:
                traceback.print_exc()
            _settle(device)
        except Exception as error:  # noqa: BLE001 - one failing candidate must not end the row
            entry["error"] = error_text(error)
            if args.verbose:
                traceback.print_exc()
            _settle(device)
        candidate = run = result = None  # drop this candidate's buffers before the next one
        entry["wall_s"] = round(time.time() - started, 1)
        config = f"  [{entry['config']}]" if "config" in entry else ""
        print(f"    {name:15s} {_cell(entry)}{config}", flush=True)
        save()

    _judge(row, outputs, tolerance, problem)
    save()
    del outputs, inputs, reference
    _release(device)
    return row


def _settle(device) -> None:
    import torch

    if device.type == "cuda":
        try:
            torch.cuda.synchronize()
            torch.cuda.empty_cache()  # after an out-of-memory error, give the next candidate room
        except Exception:  # noqa: BLE001 - a sticky CUDA error; later candidates report it
            pass


def _judge(row: dict, outputs: dict, tolerance: float, problem: Problem) -> None:
    """Mark wrong candidates, pick the best correct peer, compare attnkit with it."""
    candidates = row["candidates"]
    for name, entry in candidates.items():
        wrong = entry.get("nan") or (entry.get("rel_l2_ref", 0.0) > tolerance) or \
            math.isnan(entry.get("rel_l2_ref", 0.0))
        entry["correct"] = (not wrong) if "ms" in entry else None  # None: it did not run
    good_peers = [(e["ms"], n) for n, e in candidates.items()
                  if n != "attnkit" and e.get("correct") and "ms" in e]
    row["best_peer"] = min(good_peers)[1] if good_peers else None
    best = row["best_peer"]
    attnkit = candidates.get("attnkit", {})
    if best and "attnkit" in outputs and best in outputs:
        if problem.backward:
            errors = [rel_l2(a, b) for a, b in zip(outputs["attnkit"], outputs[best])]
            attnkit["rel_l2_peer"] = max(errors)
            if any(math.isnan(e) for e in errors) or max(errors) > tolerance:
                attnkit["correct"] = False
        else:
            attnkit["rel_l2_peer"] = rel_l2(outputs["attnkit"], outputs[best])
    if problem.backward and "ms" in attnkit and not best:
        attnkit["unchecked"] = "no correct peer to compare gradients with"
    if best and "ms" in attnkit:
        row["ratio"] = candidates[best]["ms"] / attnkit["ms"]
    target = candidates.get(row.get("target_peer") or "", {})
    if "ms" in attnkit and target.get("correct") and "ms" in target:
        row["ratio_target"] = target["ms"] / attnkit["ms"]


def _release(device) -> None:
    import torch

    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    try:
        torch._dynamo.reset()
    except Exception:  # noqa: BLE001
        pass


# ---------------------------------------------------------------------------------------------
# Reporting


def _cell(entry: dict, width: int = 0) -> str:
    if "ms" in entry:
        text = f"{entry['ms']:.3f} ms / {entry['tflops']:.0f}" if entry["tflops"] >= 10 else \
            f"{entry['ms']:.3f} ms / {entry['tflops']:.3g}"
        if not entry.get("correct", True) or entry.get("nan"):
            text += " WRONG"
        return text
    if "na" in entry:
        return f"n/a ({entry['na']})"
    if "error" in entry:
        return f"n/a ({entry['error'][:width] if width else entry['error']})"
    return "n/a (not run)"


def markdown(report: dict) -> str:
    env = report["environment"]
    lines = [
        f"# attnkit attention benchmark — {env.get('device', '?')}",
        "",
        f"- date {env['date']}, commit `{env['commit']}`, attnkit {env.get('attnkit_version', '?')} "
        f"({env.get('library', 'not loaded')})",
        f"- torch {env['torch']}, CUDA {env.get('cuda', '-')}, cuDNN {env.get('cudnn', '-')}, "
        f"triton {env.get('triton', '-')}, python {env['python']}",
        "- cells: median ms / TF/s (useful FLOPs: 4·B·H·pairs·D forward, 2.5× backward); "
        "ratio = best correct peer ms ÷ attnkit ms (> 1: attnkit faster); rel L2: attnkit vs fp32 "
        "reference on sampled query rows (forward) or vs the best peer's gradients (backward)",
        "- masked rows give sdpa_cudnn / sdpa_efficient a dense bool attn_mask (dense work)",
        *(["- vs target = the ms of the peer issue #20's target names (flex; sdpa_cudnn for dense) "
           "÷ attnkit ms; per-head block rows add attnkit's ms with the same pattern given shared ÷ "
           "its ms here (\"× shared\")"] if any(r.get("target_peer") for r in report["rows"]) else []),
        "",
    ]
    names = ["attnkit"] + [n for n in (*PEERS_GPU, *PEERS_CPU)
                           if any(n in r["candidates"] for r in report["rows"])]
    targets = any(r.get("target_peer") for r in report["rows"])
    header = ["row", "dir", "problem", "mask", "density"] + names + ["best peer", "ratio"] + \
        (["vs target"] if targets else []) + ["rel L2"]
    lines.append("| " + " | ".join(header) + " |")
    lines.append("|" + "---|" * len(header))
    for row in report["rows"]:
        cells = [row["name"], {"forward": "fwd", "backward": "bwd"}.get(row.get("direction"), ""),
                 row.get("shape", ""), row.get("mask", ""),
                 f"{row['density'] * 100:.1f}%" if "density" in row else ""]
        for name in names:
            cells.append(_cell(row.get("candidates", {}).get(name, {}), width=80))
        cells.append(row.get("best_peer") or "—")
        cells.append(f"{row['ratio']:.2f}×" if row.get("ratio") else "—")
        if targets:
            cell = (f"{row['ratio_target']:.2f}× {row['target_peer']}" if row.get("ratio_target") else
                    (f"— ({row['target_peer']})" if row.get("target_peer") else ""))
            shared = _shared_form_ratio(row, report["rows"])
            cells.append(cell + (f"; {shared:.2f}× shared" if shared else ""))
        attnkit = row.get("candidates", {}).get("attnkit", {})
        error = attnkit.get("rel_l2_ref", attnkit.get("rel_l2_peer"))
        verdict = " WRONG" if attnkit.get("correct") is False else ""
        cells.append(f"{error:.1e}{verdict}" if error is not None else (row.get("error", "—")[:80]))
        lines.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    return "\n".join(lines) + "\n"


def _shared_form_ratio(row: dict, rows: list):
    """For a per-head block row (name ending -expand/-heads/-random): attnkit ms of the row of the same
    pattern given shared (-shared) ÷ this row's attnkit ms (issue #20: >= 0.95), else None."""
    name = row.get("name", "")
    stem, _, form = name.rpartition("-")
    if form not in ("expand", "heads", "random"):
        return None
    shared = next((r for r in rows if r.get("name") == f"{stem}-shared"), None)
    mine = row.get("candidates", {}).get("attnkit", {})
    theirs = (shared or {}).get("candidates", {}).get("attnkit", {})
    return theirs["ms"] / mine["ms"] if "ms" in mine and "ms" in theirs else None


def environment(device, lib, lib_error) -> dict:
    import torch

    env = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": git_commit(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "host": platform.node(),
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        env.update({
            "device": torch.cuda.get_device_name(device),
            "compute_capability": f"{props.major}.{props.minor}",
            "sm_count": props.multi_processor_count,
            "cuda": torch.version.cuda,
            "cudnn": str(torch.backends.cudnn.version()),
        })
        try:
            import triton

            env["triton"] = triton.__version__
        except ImportError:
            env["triton"] = "not installed"
        try:
            env["driver"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True, text=True, timeout=20).stdout.strip().splitlines()[0]
        except Exception:  # noqa: BLE001
            pass
    else:
        env["device"] = f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} threads)"
    if lib is not None:
        from attnkit import _capi as capi

        env["attnkit_version"] = lib.attnkit_version().decode()
        env["attnkit_cuda_compiled"] = bool(lib.attnkit_cuda_compiled())
        env["library"] = capi.library_path(lib)
    else:
        env["library_error"] = lib_error
    return env


def write_report(report: dict, out: Path) -> None:
    for name, text in (("bench.json", json.dumps(report, indent=1, default=str) + "\n"),
                       ("bench.md", markdown(report))):
        temporary = out / (name + ".tmp")
        temporary.write_text(text)
        temporary.replace(out / name)


def write_plots(report: dict, out: Path) -> None:
    """Figures of attnkit against each peer (bench/report_plots.py) into out/plots, linked from
    bench.md. The tables are written first and stay valid whatever happens here."""
    try:
        plots = report_plots.write(report, out / "plots", out / "bench.md")
    except report_plots.PlotsUnavailable as reason:
        print(f"plots skipped: {reason}; the tables are in bench.md")
        return
    except Exception as error:  # noqa: BLE001 - a plotting fault must not cost the measured results
        print(f"plots failed: {error_text(error)}; the tables are in bench.md "
              f"(re-plot: python3 bench/report_plots.py {out / 'bench.json'})")
        return
    if plots:
        print(f"wrote {len(plots)} plots (PNG and SVG) into {out / 'plots'}, linked from bench.md")


def git_commit() -> str:
    if os.environ.get("ATTNKIT_COMMIT"):
        return os.environ["ATTNKIT_COMMIT"]
    try:
        head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True,
                              text=True, timeout=10)
        if head.returncode != 0:
            return "unknown"
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return head.stdout.strip()[:12] + ("-dirty" if dirty else "")
    except Exception:  # noqa: BLE001
        return "unknown"


# ---------------------------------------------------------------------------------------------
# Driver


def select_rows(args) -> list[Problem]:
    # --row alone runs its rows only; with a set named (--set, --quick, --smoke-cpu, $ATTNKIT_BENCH_SET) both.
    rows = ROW_SETS[args.set](args.backward) if args.set_named or not args.row else []
    for spec in args.row:
        rows += spec_rows(spec, args.backward)
    if args.only:
        patterns = [p.strip() for p in args.only.split(",") if p.strip()]
        rows = [r for r in rows if any(fnmatch.fnmatch(r.name, p) or p in r.name for p in patterns)]
    return rows


def load(args):
    try:
        from attnkit import _capi as capi

        return capi.load_library(args.library), None
    except Exception as error:  # noqa: BLE001 - the peers still run
        return None, error_text(error)


def run_in_child(problem: Problem, args, timeout: float) -> dict:
    """Runs one row in a child process; returns whatever it finished, with the reason if it died."""
    with tempfile.TemporaryDirectory() as scratch:
        partial = os.path.join(scratch, "row.json")
        command = [sys.executable, "-u", str(Path(__file__).resolve()), "--child-row", problem.name,
                   "--child-json", partial, *args.child_argv]
        try:
            process = subprocess.run(command, timeout=timeout, stdout=None, stderr=subprocess.PIPE,
                                     text=True)
            rc, stderr = process.returncode, process.stderr
        except subprocess.TimeoutExpired as expired:
            rc, stderr = "timeout", (expired.stderr or b"").decode(errors="replace") \
                if isinstance(expired.stderr, bytes) else (expired.stderr or "")
        row = None
        if os.path.exists(partial):
            with open(partial) as f:
                try:
                    row = json.load(f)
                except json.JSONDecodeError:
                    row = None
    if rc != 0:
        tail = " ".join(" ".join((stderr or "").strip().splitlines()[-3:]).split())[-400:]
        reason = f"row timed out after {timeout:.0f} s" if rc == "timeout" else \
            f"row process exited with {rc}: {tail}"
        print(f"    row failed: {reason}", flush=True)
        if row is None:
            row = {"name": problem.name, "shape": problem.shape_text(), "mask": problem.mask.describe(),
                   "direction": "backward" if problem.backward else "forward", "candidates": {}}
        row["error"] = reason
        for entry in row.get("candidates", {}).values():
            if "ms" not in entry and "na" not in entry and "error" not in entry:
                entry["error"] = reason
    elif stderr and args.verbose:
        sys.stderr.write(stderr)
    return row


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a few small shapes (= --set quick)")
    parser.add_argument("--set", choices=tuple(ROW_SETS),
                        help="the rows: full (default), quick, smoke (--smoke-cpu's), classes (issue #20's "
                             "problem classes: cls-na2d-*, cls-na3d-*, cls-dense-*, cls-na1d-*, "
                             "cls-blockhead-*), classes-core (a few rows of each class), classes-cpu "
                             "(CPU-sized rows of each class, for --smoke-cpu); default: --quick / "
                             "--smoke-cpu's set, else $ATTNKIT_BENCH_SET, else full")
    parser.add_argument("--only", help="rows whose name matches (glob or substring; comma-separated)")
    parser.add_argument("--row", action="append", default=[], metavar="SPEC",
                        help="a row of your own shape (repeatable), against its class's peers: " + ROW_SPEC_HELP +
                             "; without a set named, only these rows run")
    parser.add_argument("--out", default=os.environ.get("ATTNKIT_BENCH_OUT", "bench-out"),
                        help="folder for bench.json and bench.md (default: bench-out)")
    parser.add_argument("--backward", action="store_true", help="add backward rows")
    parser.add_argument("--library", help="path of libattnkit.so (default: see _capi.load_library)")
    parser.add_argument("--smoke-cpu", action="store_true",
                        help="tiny shapes on CPU tensors: attnkit's CPU backend vs torch SDPA math")
    parser.add_argument("--self-test", action="store_true", help="check the mask math and exit")
    parser.add_argument("--list", action="store_true", help="list the selected rows and exit")
    parser.add_argument("--peers", help="comma-separated subset of peers to run")
    parser.add_argument("--peer-layout", choices=("view", "contiguous"), default="view",
                        help="torch peers get [B,H,S,D] transposed views (default) or packed copies")
    parser.add_argument("--warmup-ms", type=float, default=50.0)
    parser.add_argument("--rep-ms", type=float, default=300.0)
    parser.add_argument("--check-rows", type=int, default=256, help="query rows in the reference check")
    parser.add_argument("--no-isolate", action="store_true", help="run all rows in this process")
    parser.add_argument("--isolate", action="store_true",
                        help="one child process per row on CPU too (the default on CUDA)")
    parser.add_argument("--row-timeout", type=int, default=420, help="seconds per row (child process)")
    parser.add_argument("--time-budget", type=float, default=0,
                        help="seconds for the whole run; rows that would start later are skipped (0: none)")
    parser.add_argument("--no-plots", action="store_true",
                        help="no figures (by default out/plots/*.png and *.svg, linked from bench.md; "
                             "needs matplotlib)")
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--child-row", help=argparse.SUPPRESS)
    parser.add_argument("--child-json", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.set_named = args.set is not None or args.quick or args.smoke_cpu or bool(os.environ.get("ATTNKIT_BENCH_SET"))
    for spec in args.row:
        try:
            spec_rows(spec, False)
        except ValueError as error:
            parser.error(str(error))
    if args.set is None:
        environment_set = os.environ.get("ATTNKIT_BENCH_SET") or None
        if environment_set is not None and environment_set not in ROW_SETS:
            parser.error(f"ATTNKIT_BENCH_SET={environment_set!r}: not one of {', '.join(ROW_SETS)}")
        args.set = "quick" if args.quick else "smoke" if args.smoke_cpu else environment_set or "full"
    args.peers = [p.strip() for p in args.peers.split(",")] if args.peers else None
    # What a child needs to rebuild the same row and settings.
    args.child_argv = [a for a in (argv if argv is not None else sys.argv[1:])]
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        import torch
    except ImportError:
        print("bench_attention.py needs PyTorch (pip install torch)", file=sys.stderr)
        return 2
    if args.self_test:
        print("mask self-test (bench/attention_masks.py):")
        return 1 if masks.self_test() else 0

    rows = select_rows(args)
    if args.list:
        for row in rows:
            print(f"{row.name:32s} {'bwd' if row.backward else 'fwd'} {row.shape_text():28s} "
                  f"{row.mask.describe():24s} pairs {row.pairs():.4g}")
        return 0

    if args.smoke_cpu:
        device = torch.device("cpu")
        # torch's and attnkit's OpenMP pools would otherwise spin against each other; the smoke
        # test is about correctness, its timings mean little.
        torch.set_num_threads(1)
    elif torch.cuda.is_available():
        device = torch.device("cuda", torch.cuda.current_device())
    else:
        print("no CUDA device visible to torch; use --smoke-cpu for the CPU smoke test", file=sys.stderr)
        return 2

    lib, lib_error = load(args)

    if args.child_row:
        problem = next(r for r in rows if r.name == args.child_row)
        run_row(problem, device, args, lib, lib_error, args.child_json)
        return 0

    print(f"attnkit attention benchmark on {device}: {len(rows)} rows", flush=True)
    if lib is None:
        print(f"  attnkit: not loaded ({lib_error}); peers still run", flush=True)
    if args.smoke_cpu:
        print("  flex: skipped on --smoke-cpu (FlexAttention is timed on CUDA only; its mask_mod "
              "and BlockMask are checked by the self-test)")
        print("  sdpa_flash / sdpa_cudnn / sdpa_efficient: skipped on --smoke-cpu (CUDA backends)")
        print("  mask self-test:", flush=True)
        failures = masks.self_test()
        if failures:
            print(f"  mask self-test: {len(failures)} failures", flush=True)
    else:
        failures = []

    report = {"environment": environment(device, lib, lib_error),
              "settings": {k: v for k, v in vars(args).items() if k not in ("child_argv", "child_row", "child_json")},
              "rows": []}
    isolate = not args.no_isolate and (device.type == "cuda" or args.isolate)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.time()
    for problem in rows:
        print(f"  {problem.name}: {problem.shape_text()} {problem.mask.describe()} "
              f"({'backward' if problem.backward else 'forward'})", flush=True)
        left = args.time_budget - (time.time() - started) if args.time_budget else None
        if left is not None and left < 20:
            print("    skipped: time budget spent", flush=True)
            row = {"name": problem.name, "shape": problem.shape_text(), "mask": problem.mask.describe(),
                   "direction": "backward" if problem.backward else "forward", "candidates": {},
                   "error": "skipped: --time-budget spent"}
        elif isolate:
            row = run_in_child(problem, args, timeout=min(args.row_timeout, left or args.row_timeout))
        else:
            try:
                row = run_row(problem, device, args, lib, lib_error, None)
            except Exception as error:  # noqa: BLE001
                row = {"name": problem.name, "shape": problem.shape_text(), "candidates": {},
                       "error": error_text(error)}
        report["rows"].append(row)
        write_report(report, out)  # after every row, so a run cut short still leaves its results

    print()
    print(markdown(report), flush=True)
    print(f"wrote {out / 'bench.json'} and {out / 'bench.md'}")
    if not args.no_plots:
        write_plots(report, out)
    wrong = [r["name"] for r in report["rows"]
             if r.get("candidates", {}).get("attnkit", {}).get("correct") is False]
    if wrong:
        print(f"attnkit WRONG on: {', '.join(wrong)}")
    failed = [r["name"] for r in report["rows"]
              if "error" in r.get("candidates", {}).get("attnkit", {}) or "error" in r]
    if failed:
        print(f"attnkit did not run on: {', '.join(failed)} (see the table)")
    if args.smoke_cpu:
        # The smoke test fails when attnkit ran and was wrong, or when the mask math is off.
        return 1 if wrong or failures else 0
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
