"""bench/bench_attention.py --set classes (issue #20's problem classes): the rows, their selection,
the per-head block masks (all four forms) against a brute-force dense mask, the report's target
column, the CPU-sized class rows end to end on the CPU backend, and rows of one's own shape (--row).
CPU only."""

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


def report_of_a_cpu_run(tmp_path, *argv) -> str:
    """bench.md of `bench_attention.py --smoke-cpu ARGV` run in this process (skips without the library)."""
    lib, error = bench.load(bench.parse_args([]))
    if lib is None:
        pytest.skip(f"libattnkit not loadable: {error}")
    import torch

    threads = torch.get_num_threads()  # --smoke-cpu sets 1
    try:
        code = bench.main(["--smoke-cpu", *argv, "--no-isolate", "--no-plots", "--out", str(tmp_path)])
    finally:
        torch.set_num_threads(threads)
    assert code == 0
    return (tmp_path / "bench.md").read_text()


def test_class_rows_run_on_the_cpu_backend(tmp_path):
    report = report_of_a_cpu_run(tmp_path, "--set", "classes-cpu", "--backward")
    for form in masks.BLOCK_FORMS:
        assert f"clscpu-blockhead-s200-p30-{form}" in report
    assert "WRONG" not in report


def test_rows_of_ones_own_shape_take_their_class_peers_and_run_alone_unless_a_set_is_named(monkeypatch):
    monkeypatch.delenv("ATTNKIT_BENCH_SET", raising=False)
    own = rows("--row", "na:32,4,64,28x28,7", "--row", "na:8,8,64,8x32x32,3x7x7,1x2x2",
               "--row", "na:4,16,64,8192,256,1,1", "--row", "causal:16,16,1024,64", "--backward")
    assert [r.name for r in own] == [
        "row-na2d-28x28-k7x7-d64-b32h4", "row-bwd-na2d-28x28-k7x7-d64-b32h4",
        "row-na3d-8x32x32-k3x7x7-dil1x2x2-d64-b8h8", "row-bwd-na3d-8x32x32-k3x7x7-dil1x2x2-d64-b8h8",
        "row-na1d-8192-k256-causal1-d64-b4h16", "row-bwd-na1d-8192-k256-causal1-d64-b4h16",
        "row-dense-causal-s1024-d64-b16h16", "row-bwd-dense-causal-s1024-d64-b16h16"]
    window, video, line, dense = own[0], own[2], own[4], own[6]
    assert (window.batch, window.heads, window.head_dim, window.extents) == (32, 4, 64, (28, 28))
    assert window.mask == masks.neighborhood((28, 28), (7, 7))
    assert video.mask == masks.neighborhood((8, 32, 32), (3, 7, 7), (1, 2, 2))
    assert line.mask == masks.neighborhood((8192,), (256,), causal=(True,))
    assert dense.mask.kind == "causal" and dense.extents == (1024,)
    assert all(r.dtype == "bfloat16" for r in own)
    assert window.peers == bench.MASKED_PEERS and window.target == "flex"
    assert dense.peers == bench.DENSE_PEERS and dense.target == "sdpa_cudnn"
    # With a set named, its rows come first; --only filters both.
    both = rows("--set", "classes", "--row", "na:32,4,64,28x28,7")
    assert len(both) == len(rows("--set", "classes")) + 1 and both[-1].name == "row-na2d-28x28-k7x7-d64-b32h4"
    assert [r.name for r in rows("--set", "classes", "--row", "dense:4,2,300,64", "--only", "row-*")] == [
        "row-dense-s300-d64-b4h2"]


@pytest.mark.parametrize("spec, says", [
    ("foo:1,2,3,4", "kind 'foo'"),
    ("dense:1,2,3", "3 fields; allowed: dense:B,H,S,D"),
    ("na:1,2,16,9x11", "4 fields"),
    ("na:1,2,16,9x11,3x3x3", "KERNEL has 3 values for 2 dimensions; allowed: 1 or 2"),
    ("na:0,2,16,9x11,3", "B '0'; allowed: integers >= 1"),
    ("na:1,2,16,9x11,3,1,2", "CAUSAL '2'; allowed: 0 or 1 per dimension"),
    ("na:1,2,16,4x4x4x4,3", "4 token dimensions; allowed: 1 to 3"),
])
def test_a_malformed_row_says_what_is_allowed(spec, says, capsys):
    with pytest.raises(SystemExit):
        bench.parse_args(["--row", spec])
    assert says in capsys.readouterr().err


def test_rows_of_ones_own_shape_run_on_the_cpu_backend(tmp_path):
    report = report_of_a_cpu_run(tmp_path, "--only", "row-*", "--row", "na:1,2,16,9x11,3,1x2,0x1",
                                 "--row", "causal:1,2,40,16", "--backward")
    for name in ("row-na2d-9x11-k3x3-dil1x2-causal0x1-d16-b1h2", "row-bwd-dense-causal-s40-d16-b1h2"):
        assert name in report
    assert "WRONG" not in report
