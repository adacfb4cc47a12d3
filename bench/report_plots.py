#!/usr/bin/env python3
"""Plots of a bench_attention.py report: attnkit against each peer, beside the tables.

One figure per problem family and direction (dense, causal, neighborhood 1-D/2-D/3-D, block,
element; forward, backward, as the report has them). The upper panel shows the TF/s of attnkit and
of every peer as grouped bars per problem; the lower one shows attnkit's speedup over the best
correct peer (the table's ratio), with a line at 1.0. The title gives device, date and commit from
the report's environment. A result that did not come (n/a, an error, a wrong output, a candidate
that never ran) gets no bar but a mark in its slot and a note under the figure saying why, and a row
with no timing at all is left out with a note. Each figure is written as PNG and as SVG (text kept
as text); the markdown section links them relative to the report's .md file.

matplotlib is imported only when a figure is drawn (Agg canvas, no pyplot), so bench_attention.py
runs without it; PlotsUnavailable then says why there are no plots.

  python3 bench/report_plots.py bench-out/bench.json           # -> bench-out/plots/, linked from bench-out/bench.md
  python3 bench/report_plots.py old.json --out DIR --no-markdown
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

FAMILIES = {
    "dense": "dense",
    "causal": "dense causal",
    "na1d": "neighborhood 1-D",
    "na2d": "neighborhood 2-D",
    "na3d": "neighborhood 3-D",
    "block": "block-sparse",
    "element": "element mask",
    "other": "other",
}
DIRECTIONS = ("forward", "backward")
ATTNKIT = "attnkit"
# One colour per candidate, the same in every figure; peers take them in the report's order.
ATTNKIT_COLOR = "#1f5fbf"
PEER_COLORS = ("#f28e2b", "#59a14f", "#b07aa1", "#9c755f", "#76b7b2", "#edc948", "#bab0ac", "#ff9da7")
SECTION_BEGIN = "<!-- report_plots: begin -->"
SECTION_END = "<!-- report_plots: end -->"
NOTE_WIDTH = 150  # characters of one note line under a figure


class PlotsUnavailable(Exception):
    """Figures cannot be drawn here (matplotlib is missing); the message says why."""


@dataclass
class FigureData:
    """What one figure shows: per problem, each candidate's TF/s (None: no bar, `marks` says why)
    and attnkit's speedup over the best correct peer."""

    family: str
    direction: str
    labels: list = field(default_factory=list)
    tflops: dict = field(default_factory=dict)  # candidate -> [TF/s or None per problem]
    marks: dict = field(default_factory=dict)  # candidate -> [None or "n/a" / "error" / ... per problem]
    ratios: list = field(default_factory=list)
    best_peers: list = field(default_factory=list)
    notes: list = field(default_factory=list)

    @property
    def title(self) -> str:
        return f"{FAMILIES[self.family]}, {self.direction}"

    @property
    def stem(self) -> str:
        return f"bench-{self.family}-{self.direction}"


@dataclass
class Plot:
    """One written figure."""

    title: str
    png: Path
    svg: Path
    notes: list


# ---------------------------------------------------------------------------------------------
# From report rows to figure data (no matplotlib)


def family_of(row: dict) -> str:
    """The row's problem family, from its mask text (bench_attention's MaskSpec.describe) or, for a
    row that failed before it recorded one, from its name."""
    mask = row.get("mask")
    if mask is not None:
        if mask == "none":
            return "dense"
        if mask == "causal":
            return "causal"
        for prefix in ("block", "element"):
            if mask.startswith(prefix):
                return prefix
        if mask.startswith("K"):  # neighborhood: K<w1>x<w2>... [dil..] [str..] [causal..]
            dims = len(row.get("extents") or ()) or mask.split()[0].count("x") + 1
            return f"na{dims}d" if dims in (1, 2, 3) else "other"
        return "other"
    name = row.get("name", "")
    for key in ("na1d", "na2d", "na3d", "block", "element", "causal", "dense"):
        if key in name:
            return key
    return "other"


def direction_of(row: dict) -> str:
    direction = row.get("direction")
    if direction in DIRECTIONS:
        return direction
    return "backward" if "bwd" in row.get("name", "").split("-") else "forward"


def candidate_names(rows: list) -> list:
    """attnkit first, then every peer in the order the report first names it."""
    names = [ATTNKIT]
    for row in rows:
        names += [n for n in row.get("candidates", {}) if n not in names]
    return names


def _tflops(row: dict, entry: dict):
    if "tflops" in entry:
        return entry["tflops"]
    if entry.get("ms") and row.get("flops"):
        return row["flops"] / (entry["ms"] * 1e-3) / 1e12
    return None


def _outcome(row: dict, entry) -> tuple:
    """(TF/s, None, None) for a result to plot, else (None, mark, reason)."""
    if entry is None:
        return None, "not run", row.get("error") or "not in this report"
    if "ms" in entry:
        if entry.get("correct") is False or entry.get("nan"):
            return None, "wrong", "wrong output (see the table)"
        value = _tflops(row, entry)
        return (value, None, None) if value is not None else (None, "error", "no FLOP count")
    if "na" in entry:
        return None, "n/a", entry["na"]
    if "error" in entry:
        return None, "error", entry["error"]
    return None, "not run", row.get("error") or "no result recorded"


def _short(text: str, width: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[:width - 1] + "…"


def _label(row: dict, family: str, with_dtype: bool) -> str:
    label = row.get("shape") or row.get("name", "?")
    if with_dtype and row.get("dtype"):
        label += f" {row['dtype']}"
    if family not in ("dense", "causal") and row.get("mask"):
        label += "\n" + row["mask"]
    return label


def figure_data(family: str, direction: str, rows: list, names: list) -> FigureData:
    data = FigureData(family, direction, tflops={n: [] for n in names}, marks={n: [] for n in names})
    missing = {}  # (candidate, mark, reason) -> row names
    labels = []
    with_dtype = len({row.get("dtype") for row in rows}) > 1
    for row in rows:
        outcomes = {n: _outcome(row, row.get("candidates", {}).get(n)) for n in names}
        if all(value is None for value, _, _ in outcomes.values()):
            reason = row.get("error") or "no candidate has a timing"
            data.notes.append(_short(f"not plotted: {row.get('name', '?')}: {reason}", NOTE_WIDTH))
            continue
        labels.append((_label(row, family, with_dtype), row.get("name", "?")))
        if row.get("error"):
            data.notes.append(_short(f"{row.get('name', '?')}: partial row: {row['error']}", NOTE_WIDTH))
        for name, (value, mark, reason) in outcomes.items():
            data.tflops[name].append(value)
            data.marks[name].append(mark)
            if mark:
                missing.setdefault((name, mark, _short(reason, 90)), []).append(row.get("name", "?"))
        ratio = row.get("ratio")  # the table's: best correct peer ms / attnkit ms
        shown = isinstance(ratio, (int, float)) and ratio > 0 and outcomes[ATTNKIT][0] is not None
        data.ratios.append(ratio if shown else None)
        data.best_peers.append(row.get("best_peer"))
    # Two rows with the same shape and mask (deterministic or no-split variants) keep their names.
    counts = {}
    for label, _ in labels:
        counts[label] = counts.get(label, 0) + 1
    data.labels = [label if counts[label] == 1 else f"{label}\n{name}" for label, name in labels]
    for (name, mark, reason), where in missing.items():
        listed = ", ".join(where[:3]) + (f" and {len(where) - 3} more" if len(where) > 3 else "")
        data.notes.append(_short(f"{name}: {mark} on {listed}: {reason}", NOTE_WIDTH))
    return data


def figures_of(report: dict) -> list:
    """FigureData per (family, direction) present in the report, in FAMILIES x DIRECTIONS order."""
    rows = [r for r in (report or {}).get("rows") or [] if isinstance(r, dict)]
    names = candidate_names(rows)
    groups = {}
    for row in rows:
        groups.setdefault((family_of(row), direction_of(row)), []).append(row)
    return [figure_data(family, direction, groups[(family, direction)], names)
            for family in FAMILIES for direction in DIRECTIONS if (family, direction) in groups]


def header_of(report: dict) -> str:
    env = (report or {}).get("environment") or {}
    return f"{env.get('device', '?')} · {env.get('date', '?')} · commit {env.get('commit', '?')}"


# ---------------------------------------------------------------------------------------------
# Drawing


def _matplotlib():
    try:
        import matplotlib
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as error:
        raise PlotsUnavailable(f"matplotlib is not installed ({error}; pip install matplotlib)") from None
    return matplotlib, Figure, FigureCanvasAgg


def _colors(names: list) -> dict:
    peers = [n for n in names if n != ATTNKIT]
    colors = {peer: PEER_COLORS[i % len(PEER_COLORS)] for i, peer in enumerate(peers)}
    colors[ATTNKIT] = ATTNKIT_COLOR
    return colors


def draw(data: FigureData, header: str, colors: dict, png: Path, svg: Path) -> None:
    matplotlib, Figure, FigureCanvasAgg = _matplotlib()
    names = list(data.tflops)
    count = len(data.labels)
    # Text stays text in the SVG; the hash salt and the missing date make reruns byte-identical.
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "attnkit", "font.size": 9}):
        figure = Figure(figsize=(max(7.0, 1.5 + count * (0.3 * len(names) + 0.7)), 6.6), layout="constrained")
        FigureCanvasAgg(figure)
        figure.suptitle(f"attnkit vs peers: {data.title}\n{header}", fontsize=11)
        bars, speedup = figure.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": (3, 1.3)})
        if count:
            _draw_bars(bars, data, names, colors)
            _draw_speedup(speedup, data)
        else:
            bars.text(0.5, 0.5, "no timings in this family (see the notes below)", ha="center",
                      va="center", transform=bars.transAxes)
            bars.set_yticks([])
            speedup.set_yticks([])
            speedup.set_xticks([])
        bars.set_ylabel("TF/s (useful FLOPs)")
        speedup.set_ylabel("attnkit ÷ best peer")
        if data.notes:
            figure.text(0.01, 0.0, "\n".join(["notes:", *data.notes]), ha="left", va="top", fontsize=7.5,
                        color="0.25")
        figure.savefig(png, dpi=110, bbox_inches="tight")
        figure.savefig(svg, bbox_inches="tight", metadata={"Date": None})


def _draw_bars(axes, data: FigureData, names: list, colors: dict) -> None:
    width = 0.8 / len(names)
    for i, name in enumerate(names):
        offsets = [x - 0.4 + width * (i + 0.5) for x in range(len(data.labels))]
        values = data.tflops[name]
        axes.bar(offsets, [v or 0.0 for v in values], width, label=name, color=colors[name],
                 edgecolor="white", linewidth=0.5)
        for x, value, mark in zip(offsets, values, data.marks[name]):
            if mark:
                axes.text(x, 0, f" {mark}", rotation=90, ha="center", va="bottom", fontsize=6.5,
                          color="0.45")
            elif name == ATTNKIT:
                axes.text(x, value, f"{value:.0f}" if value >= 10 else f"{value:.2g}", ha="center",
                          va="bottom", fontsize=6.5, color=colors[name])
    axes.set_xticks(range(len(data.labels)))
    axes.grid(axis="y", alpha=0.3)
    axes.set_axisbelow(True)
    axes.margins(y=0.08)
    axes.legend(fontsize=8, ncols=min(len(names), 5), loc="lower center", bbox_to_anchor=(0.5, 1.0),
                frameon=False)


def _draw_speedup(axes, data: FigureData) -> None:
    positions = range(len(data.labels))
    values = [r or 0.0 for r in data.ratios]
    axes.bar(positions, values, 0.5,
             color=["#59a14f" if r and r >= 1.0 else "#e15759" for r in data.ratios])
    axes.axhline(1.0, color="0.2", linestyle="--", linewidth=1)
    for x, ratio, best in zip(positions, data.ratios, data.best_peers):
        text = f"{ratio:.2f}× vs {best}" if ratio else "no ratio"
        axes.text(x, ratio or 0.0, text, ha="center", va="bottom", fontsize=7)
    axes.set_ylim(0, max([1.0, *values]) * 1.3)
    axes.grid(axis="y", alpha=0.3)
    axes.set_axisbelow(True)
    axes.set_xticks(list(positions), data.labels, fontsize=7.5,
                    rotation=0 if len(data.labels) <= 6 else 30, ha="center" if len(data.labels) <= 6 else "right")


# ---------------------------------------------------------------------------------------------
# Writing: images, and their links in the report's markdown


def render(report: dict, out_dir: Path) -> list:
    """Draws every figure of the report into out_dir (PNG and SVG); [] for a report without rows."""
    figures = figures_of(report)
    if not figures:
        return []
    _matplotlib()  # fail before creating anything when matplotlib is missing
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    header = header_of(report)
    colors = _colors(list(figures[0].tflops))
    plots = []
    for data in figures:
        png, svg = out_dir / f"{data.stem}.png", out_dir / f"{data.stem}.svg"
        draw(data, header, colors, png, svg)
        plots.append(Plot(data.title, png, svg, data.notes))
    return plots


def markdown_section(plots: list, markdown_path: Path) -> str:
    """The plots section for the markdown file at markdown_path (links relative to its folder)."""
    def link(path: Path) -> str:
        return Path(os.path.relpath(Path(path).resolve(), Path(markdown_path).resolve().parent)).as_posix()

    lines = [SECTION_BEGIN, "## Plots", ""]
    if not plots:
        lines.append("No plots: the report has no rows.")
    else:
        lines.append("attnkit against each peer: TF/s per problem (no bar: n/a, error or wrong, see the "
                     "figure's notes) and attnkit ÷ best correct peer.")
    for plot in plots:
        lines += ["", f"### {plot.title}", "", f"![{plot.title}]({link(plot.png)}) ([SVG]({link(plot.svg)}))"]
    lines.append(SECTION_END)
    return "\n".join(lines) + "\n"


def link_in_markdown(markdown_path: Path, plots: list) -> None:
    """Puts the plots section at the end of the markdown file, replacing the one a previous run wrote."""
    markdown_path = Path(markdown_path)
    text = markdown_path.read_text() if markdown_path.exists() else ""
    text = re.sub(re.escape(SECTION_BEGIN) + r".*?" + re.escape(SECTION_END) + r"\n?", "", text, flags=re.S)
    if text and not text.endswith("\n\n"):
        text = text.rstrip("\n") + "\n\n"
    temporary = markdown_path.with_name(markdown_path.name + ".tmp")
    temporary.write_text(text + markdown_section(plots, markdown_path))
    temporary.replace(markdown_path)


def write(report: dict, out_dir: Path, markdown_path: Path | None) -> list:
    """render(), then the links into markdown_path (None: no markdown). A report without rows
    changes no markdown file that does not exist yet."""
    plots = render(report, out_dir)
    if markdown_path is not None and (plots or Path(markdown_path).exists()):
        link_in_markdown(markdown_path, plots)
    return plots


def load_report(path: Path) -> dict:
    """The report in a bench.json; an empty file reads as a report without rows."""
    text = Path(path).read_text()
    report = json.loads(text) if text.strip() else {}
    if not isinstance(report, dict):
        raise ValueError(f"{path}: expected a JSON object with 'environment' and 'rows', got {type(report).__name__}")
    return report


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("report", type=Path, help="a bench.json written by bench/bench_attention.py")
    parser.add_argument("--out", type=Path, help="folder for the images (default: plots/ beside the JSON)")
    parser.add_argument("--markdown", type=Path,
                        help="markdown file to link the images from (default: the .md beside the JSON with "
                             "its name, when it exists)")
    parser.add_argument("--no-markdown", action="store_true", help="write the images only")
    args = parser.parse_args(argv)
    try:
        report = load_report(args.report)
    except (OSError, ValueError) as error:
        print(f"report_plots: cannot read {args.report}: {error}", file=sys.stderr)
        return 2
    out = args.out or args.report.parent / "plots"
    markdown = None if args.no_markdown else args.markdown or args.report.with_suffix(".md")
    if markdown is not None and args.markdown is None and not markdown.exists():
        markdown = None
    try:
        plots = write(report, out, markdown)
    except PlotsUnavailable as reason:
        print(f"report_plots: no plots: {reason}", file=sys.stderr)
        return 2
    if not plots:
        print(f"report_plots: {args.report} has no rows: nothing to plot")
        return 0
    for plot in plots:
        print(f"{plot.title:28s} {plot.png} {plot.svg}" + (f"  ({len(plot.notes)} notes)" if plot.notes else ""))
    print(f"wrote {len(plots)} figures (PNG and SVG) into {out}" +
          (f", linked from {markdown}" if markdown else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
