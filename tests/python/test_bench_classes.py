"""bench/bench_attention.py --set classes (issue #20's problem classes): the rows, their selection,
the per-head block masks (all four forms) against a brute-force dense mask, the report's target
column, and the CPU-sized class rows end to end on the CPU backend. CPU only."""

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

import attention_masks as masks  # noqa: E402
import bench_attention as bench  # noqa: E402

CLASSES = ("na2d", "na3d", "dense", "na1d", "blockhead")


def rows(*argv):
    return bench.select_rows(bench.parse_args(list(argv)))


def test_every_class_has_forward_and_backward_rows_selected_by_glob():
    forward = rows("--set", "classes")
    both = rows("--set", "classes", "--backward")
    assert all(not r.backward for r in forward) and len(both) > len(forward)
    assert len({r.name for r in both}) == len(both)
    for klass in CLASSES:
        picked = rows("--set", "classes", "--backward", "--only", f"cls-{klass}-*")
        assert sum(not r.backward for r in picked) >= 5, klass
        assert sum(r.backward for r in picked) >= 4, klass
        assert all(r.name.startswith(f"cls-{klass}-") and r.dtype == "bfloat16" for r in picked)
        backward_only = rows("--set", "classes", "--backward", "--only", f"cls-{klass}-bwd-*")
        assert backward_only and all(r.backward for r in backward_only)
        assert all(r.target for r in picked) and all(r.peers for r in picked)
    core = rows("--set", "classes-core", "--backward")
    assert {r.name.split("-")[1] for r in core} == set(CLASSES)


def test_per_head_block_rows_hand_over_each_form():
    blockhead = rows("--set", "classes", "--only", "cls-blockhead-s16384-p10-*")
    forms = {r.mask.block_form: r.mask.blocks for r in blockhead}
    assert set(forms) == set(masks.BLOCK_FORMS)
    assert forms["shared"].dim() == 2
    assert forms["expand"].shape == (1, 16, 128, 128) and forms["expand"].stride()[1] == 0
    assert forms["heads"].is_contiguous() and bool((forms["heads"] == forms["shared"]).all())
    assert forms["random"].is_contiguous() and not bool((forms["random"][0, 1] == forms["random"][0, 0]).all())
    # The same density (true blocks) in every form and head, so the same useful FLOPs.
    assert len({r.flops() for r in blockhead}) == 1
    assert all(r.peers == ("flex",) and r.target == "flex" for r in blockhead)


def test_set_comes_from_the_option_then_quick_then_the_environment(monkeypatch):
    monkeypatch.delenv("ATTNKIT_BENCH_SET", raising=False)
    assert bench.parse_args([]).set == "full"
    assert bench.parse_args(["--quick"]).set == "quick"
    assert bench.parse_args(["--smoke-cpu"]).set == "smoke"
    monkeypatch.setenv("ATTNKIT_BENCH_SET", "classes")
    assert bench.parse_args([]).set == "classes"
    assert bench.parse_args(["--quick"]).set == "quick"
    assert bench.parse_args(["--set", "classes-core"]).set == "classes-core"
    monkeypatch.setenv("ATTNKIT_BENCH_SET", "nonsense")
    with pytest.raises(SystemExit):
        bench.parse_args([])


def test_per_head_block_masks_match_a_brute_force_dense_mask():
    failures = []
    assert masks._self_test_head_blocks(failures.append) == 5
    assert failures == []


def test_report_gives_the_target_ratio_and_the_shared_form_ratio():
    def row(name, attnkit_ms, flex_ms):
        return {"name": name, "direction": "forward", "shape": "B1 H16 S16384 D128", "mask": "block128 10%",
                "density": 0.1, "target_peer": "flex", "best_peer": "flex", "ratio": flex_ms / attnkit_ms,
                "ratio_target": flex_ms / attnkit_ms,
                "candidates": {"flex": {"ms": flex_ms, "tflops": 1.0, "correct": True},
                               "attnkit": {"ms": attnkit_ms, "tflops": 1.0, "correct": True}}}

    report = {"environment": {"date": "d", "commit": "c", "torch": "t", "python": "p"},
              "rows": [row("cls-blockhead-s16384-p10-shared", 1.0, 1.5),
                       row("cls-blockhead-s16384-p10-random", 2.0, 1.5)]}
    text = bench.markdown(report)
    assert "vs target" in text
    assert "| 1.50× flex |" in text
    assert "| 0.75× flex; 0.50× shared |" in text


def test_class_rows_run_on_the_cpu_backend(tmp_path):
    lib, error = bench.load(bench.parse_args([]))
    if lib is None:
        pytest.skip(f"libattnkit not loadable: {error}")
    import torch

    threads = torch.get_num_threads()  # --smoke-cpu sets 1
    try:
        code = bench.main(["--smoke-cpu", "--set", "classes-cpu", "--backward", "--no-isolate", "--no-plots",
                           "--out", str(tmp_path)])
    finally:
        torch.set_num_threads(threads)
    assert code == 0
    report = (tmp_path / "bench.md").read_text()
    for form in masks.BLOCK_FORMS:
        assert f"clscpu-blockhead-s200-p30-{form}" in report
    assert "WRONG" not in report
