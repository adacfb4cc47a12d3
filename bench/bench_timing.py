"""Timing helpers shared by the benchmarks that compare attnkit with a peer in one process.

A candidate's per-call time is taken over a run of back-to-back calls between two CUDA events (the rate a caller
that does not wait between calls gets: the larger of the host's work per call and the GPU's), and candidates are
timed in interleaved rounds, so that a slow phase of the machine (clock ramp, a neighbour) falls on all of them
alike; the median over rounds is reported with the lowest and highest round.
"""

from __future__ import annotations

import contextlib
import statistics

import torch


def event_ms(work) -> float:
    """Milliseconds between CUDA events recorded around work() on the current stream."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    work()
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


def device_ms_per_call(averages, calls: int) -> float:
    """The GPU time per call in a profile of `calls` calls: the sum of the operations' self device time (each kernel,
    copy and set counted once, under the operation that launched it), in ms. `averages`: torch.profiler's
    key_averages() (entries with self_device_time_total in microseconds)."""
    total_us = sum(getattr(entry, "self_device_time_total", 0.0) for entry in averages)
    return total_us / 1000.0 / max(calls, 1)


def kernel_ms(call, calls: int) -> float:
    """GPU time per call of call(): its kernels' durations summed by torch.profiler (CUPTI) over `calls` calls after
    one warm call, so neither the host's work per call nor the gaps between launches count (what a CUDA graph's
    replay approaches). For calls that cannot be captured in a graph (an autograd backward)."""
    call()
    torch.cuda.synchronize()
    activities = [torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as profile:
        for _ in range(calls):
            call()
        torch.cuda.synchronize()
    return device_ms_per_call(profile.key_averages(), calls)


def interleaved_rounds(runs, rounds):
    """runs: {name: run}, each run() timing one run of its candidate and returning ms per call. Every round runs each
    candidate once, starting one further along each round. Returns {name: (median, lowest, highest)}."""
    names = list(runs)
    samples = {name: [] for name in names}
    for round_index in range(rounds if names else 0):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            samples[name].append(runs[name]())
    return {name: (statistics.median(times), min(times), max(times)) for name, times in samples.items()}


def back_to_back_run(call, one_call_ms: float, run_ms: float, around=contextlib.nullcontext, max_calls: int = 1000):
    """A run() for interleaved_rounds: as many back-to-back calls of call(i) (i counts from 0) as fill about run_ms
    (at least one), timed between two events inside the context around() (entered once per run, outside the
    timing); returns ms per call."""
    calls = max(1, min(max_calls, round(run_ms / max(one_call_ms, 1e-3))))

    def run():
        def calls_in_a_row():
            for i in range(calls):
                call(i)
        with around():
            return event_ms(calls_in_a_row) / calls
    return run
