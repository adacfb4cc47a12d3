"""bench/report_plots.py: figures of attnkit against each peer from a bench_attention.py report,
linked from its markdown. CPU only; the tests that draw skip when matplotlib is missing."""

import re
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
H200_FORWARD = REPO / "docs" / "perf" / "2026-11-22-h200-forward.json"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

sys.path.insert(0, str(REPO / "bench"))
import report_plots  # noqa: E402



def matplotlib_importable() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


needs_matplotlib = pytest.mark.skipif(
    not matplotlib_importable(), reason="matplotlib is not importable (pip install matplotlib): no figures to check")


def synthetic_report() -> dict:
    """A dense row with a peer n/a and another peer absent, a row that failed before any timing,
    a row whose only peer was wrong, and a backward neighborhood row where attnkit failed."""
    return {
        "environment": {"device": "Test GPU", "date": "2026-11-25 10:00 UTC", "commit": "abc123"},
        "rows": [
            {"name": "dense-s1024-d64", "direction": "forward", "shape": "B1 H8 S1024 D64", "mask": "none",
             "candidates": {"sdpa_flash": {"ms": 4.0, "tflops": 250.0, "correct": True},
                            "flex": {"na": "not compiled here"},
                            "attnkit": {"ms": 5.0, "tflops": 200.0, "correct": True}},
             "best_peer": "sdpa_flash", "ratio": 0.8},
            {"name": "dense-s2048-d64", "direction": "forward", "shape": "B1 H8 S2048 D64", "mask": "none",
             "candidates": {}, "error": "row process exited with -6: illegal memory access"},
            {"name": "dense-s4096-d64", "direction": "forward", "shape": "B1 H8 S4096 D64", "mask": "none",
             "flops": 4e12,
             "candidates": {"sdpa_flash": {"ms": 30.0, "tflops": 133.0, "correct": False},
                            "attnkit": {"ms": 10.0, "correct": True}},
             "best_peer": None},
            {"name": "bwd-na2d-32x32-k7", "direction": "backward", "shape": "B1 H8 32x32 D128", "mask": "K7x7",
             "extents": [32, 32],
             "candidates": {"sdpa_flash": {"na": "takes no arbitrary mask"},
                            "flex": {"ms": 1.0, "tflops": 50.0, "correct": True},
                            "attnkit": {"error": "RuntimeError: out of memory"}},
             "best_peer": "flex"},
        ],
    }


def assert_images(paths):
    assert paths
    for path in paths:
        assert path.stat().st_size > 0
        if path.suffix == ".png":
            assert path.read_bytes()[:8] == PNG_SIGNATURE
        else:
            assert "<svg" in path.read_text()


def linked_files(markdown: Path) -> list:
    targets = re.findall(r"\]\(([^)]+)\)", markdown.read_text())
    return [markdown.parent / target for target in targets]


@needs_matplotlib
def test_h200_report_replots_one_figure_per_family_linked_from_its_markdown(tmp_path):
    report = tmp_path / H200_FORWARD.name
    shutil.copy(H200_FORWARD, report)
    shutil.copy(H200_FORWARD.with_suffix(".md"), report.with_suffix(".md"))

    assert report_plots.main([str(report), "--out", str(tmp_path / "plots")]) == 0

    stems = {"bench-dense-forward", "bench-causal-forward", "bench-na1d-forward", "bench-na2d-forward",
             "bench-na3d-forward", "bench-block-forward"}
    images = sorted((tmp_path / "plots").iterdir())
    assert {p.name for p in images} == {f"{s}.{ext}" for s in stems for ext in ("png", "svg")}
    assert_images(images)
    markdown = report.with_suffix(".md")
    assert "| dense-s16384-d128 |" in markdown.read_text()  # the tables stay
    links = linked_files(markdown)
    assert len(links) == 2 * len(stems)
    assert all(link.is_file() for link in links)


@needs_matplotlib
def test_failed_rows_and_missing_peers_are_noted_in_the_figure(tmp_path):
    markdown = tmp_path / "bench.md"
    markdown.write_text("# table\n")

    plots = report_plots.write(synthetic_report(), tmp_path / "plots", markdown)

    assert_images([path for p in plots for path in (p.png, p.svg)])
    assert [p.png.name for p in plots] == ["bench-dense-forward.png", "bench-na2d-backward.png"]
    dense_svg = plots[0].svg.read_text()
    assert "Test GPU · 2026-11-25 10:00 UTC · commit abc123" in dense_svg
    for note in ("not plotted: dense-s2048-d64: row process exited with -6",
                 "flex: n/a on dense-s1024-d64: not compiled here",
                 "flex: not run on dense-s4096-d64",
                 "sdpa_flash: wrong on dense-s4096-d64"):
        assert note in dense_svg
    assert "attnkit: error on bwd-na2d-32x32-k7: RuntimeError: out of memory" in plots[1].svg.read_text()
    assert markdown.read_text().startswith("# table\n")
    assert all(link.is_file() for link in linked_files(markdown))


def test_rows_without_a_timing_are_left_off_the_axis():
    dense = report_plots.figures_of(synthetic_report())[0]

    assert dense.labels == ["B1 H8 S1024 D64", "B1 H8 S4096 D64"]
    assert dense.tflops["attnkit"] == [200.0, pytest.approx(400.0)]  # TF/s from flops and ms
    assert dense.tflops["flex"] == [None, None]
    assert dense.ratios == [0.8, None]


def test_rows_are_grouped_by_mask_family_and_direction():
    rows = [{"name": "a", "mask": "K3x5x7 dil1x2x1", "extents": [8, 8, 8]},
            {"name": "b", "mask": "element 20%", "direction": "backward"},
            {"name": "bwd-causal-s8192-d128", "error": "skipped: --time-budget spent"},
            {"name": "c", "mask": "block128 30%"}]

    assert [(report_plots.family_of(r), report_plots.direction_of(r)) for r in rows] == [
        ("na3d", "forward"), ("element", "backward"), ("causal", "backward"), ("block", "forward")]


@pytest.mark.parametrize("text", ["", "{}", '{"environment": {}, "rows": []}'])
def test_a_report_without_rows_plots_nothing_and_exits_cleanly(tmp_path, text, capsys):
    report = tmp_path / "bench.json"
    report.write_text(text)

    assert report_plots.main([str(report)]) == 0

    assert "nothing to plot" in capsys.readouterr().out
    assert not (tmp_path / "plots").exists()
    assert not (tmp_path / "bench.md").exists()


@needs_matplotlib
def test_plotting_again_replaces_the_plots_section(tmp_path):
    markdown = tmp_path / "bench.md"
    markdown.write_text("# table\n")

    for _ in range(2):
        report_plots.write(synthetic_report(), tmp_path / "plots", markdown)

    assert markdown.read_text().count(report_plots.SECTION_BEGIN) == 1


def test_bench_attention_skips_plots_in_one_line_without_matplotlib(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sys, "path", list(sys.path))  # bench_attention puts python/ first
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    import bench_attention

    (tmp_path / "bench.md").write_text("# table\n")
    bench_attention.write_plots(synthetic_report(), tmp_path)

    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 and lines[0].startswith("plots skipped: matplotlib is not installed")
    assert (tmp_path / "bench.md").read_text() == "# table\n"
    assert not (tmp_path / "plots").exists()
