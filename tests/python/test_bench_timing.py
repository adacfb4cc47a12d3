"""bench/bench_timing.py, the timing shared by bench_gemm.py and bench_retention.py: candidates take turns round by
round starting one further along each round, a time is the median round with the lowest and highest beside it, a run
holds as many back-to-back calls as fill the asked length, inside its context. CPU only (the CUDA events are
replaced by a clock of the test's own)."""

import sys
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

import bench_timing  # noqa: E402


def test_candidates_take_turns_starting_one_further_along_each_round():
    order = []
    runs = {name: (lambda name=name: order.append(name) or 1.0) for name in ("a", "b", "c")}
    bench_timing.interleaved_rounds(runs, 4)
    assert order == ["a", "b", "c", "b", "c", "a", "c", "a", "b", "a", "b", "c"]


def test_a_time_is_the_median_round_with_the_lowest_and_highest():
    samples = {"x": iter([5.0, 1.0, 3.0, 9.0, 2.0]), "y": iter([2.0, 2.0, 2.0, 2.0, 2.0])}
    result = bench_timing.interleaved_rounds({name: (lambda s=s: next(s)) for name, s in samples.items()}, 5)
    assert result == {"x": (3.0, 1.0, 9.0), "y": (2.0, 2.0, 2.0)}
    assert bench_timing.interleaved_rounds({}, 3) == {}


def test_a_run_holds_the_calls_that_fill_its_length_inside_its_context(monkeypatch):
    calls, entered = [], []
    monkeypatch.setattr(bench_timing, "event_ms", lambda work: (work(), 12.0)[1])  # 12 ms for the whole run

    @contextmanager
    def around():
        entered.append(len(calls))
        yield

    run = bench_timing.back_to_back_run(calls.append, one_call_ms=0.5, run_ms=3.0, around=around)
    assert run() == 2.0 and calls == [0, 1, 2, 3, 4, 5] and entered == [0]  # 3 ms / 0.5 ms: 6 calls, 12 ms / 6
    calls.clear()
    slow = bench_timing.back_to_back_run(calls.append, one_call_ms=50.0, run_ms=3.0)
    assert slow() == 12.0 and calls == [0]  # a call longer than the run: one call
    calls.clear()
    fast = bench_timing.back_to_back_run(calls.append, one_call_ms=0.0, run_ms=3.0, max_calls=7)
    assert fast() == 12.0 / 7 and len(calls) == 7


def test_the_device_time_per_call_sums_every_operations_self_device_time():
    class Average:
        def __init__(self, us):
            self.self_device_time_total = us

    class HostOnly:  # an entry without device time (a CPU-side operation)
        pass

    averages = [Average(1500.0), Average(500.0), HostOnly(), Average(0.0)]
    assert bench_timing.device_ms_per_call(averages, 4) == 0.5  # 2000 us over 4 calls
    assert bench_timing.device_ms_per_call([], 3) == 0.0
