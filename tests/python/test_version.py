"""The package says its version, and it is the one the build and the packaging metadata say."""

import re
from pathlib import Path

import attnkit

ROOT = Path(__file__).resolve().parent.parent.parent


def test_package_version_matches_cmake_and_pyproject():
    cmake = re.search(r"project\(attnkit VERSION ([0-9.]+)", (ROOT / "CMakeLists.txt").read_text()).group(1)
    pyproject = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M).group(1)
    assert attnkit.__version__ == cmake == pyproject


def test_package_version_matches_the_loaded_library():
    assert attnkit.__version__ == attnkit.library_info()["version"]


def test_package_ships_a_typing_marker():
    assert (Path(attnkit.__file__).parent / "py.typed").exists()
