"""The Python examples in README.md's "## Python" section and docs/python.md run as written
(blocks of one file share a namespace, in order). Blocks that turn tuning on or need a process
group are covered by the tuner suites instead. Skips visibly outside a source checkout."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SKIP_WORDS = ("tuner", "autotuner", "distributed")


def _python_blocks(path: Path, section: str = ""):
    if not path.exists():
        pytest.skip(f"{path} not found (not a source checkout)")
    text = path.read_text()
    if section:
        start = text.index(section)
        end = text.find("\n## ", start + len(section))
        text = text[start:end if end >= 0 else None]
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    return [b for b in blocks if not any(word in b for word in SKIP_WORDS)]


@pytest.mark.parametrize("path, section", [("README.md", "## Python"), ("docs/python.md", "")])
def test_examples_run(path, section):
    blocks = _python_blocks(ROOT / path, section)
    assert len(blocks) >= 5
    namespace = {}
    for block in blocks:
        exec(compile(block, f"{path} example", "exec"), namespace)  # noqa: S102 - our own docs
