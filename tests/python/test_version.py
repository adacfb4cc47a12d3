"""The package says its version, and it is the one the build and the packaging metadata say.

attnkit.__version__ is CMakeLists.txt's project version (also the library's), followed in an installed
wheel by the local label of its build variant: "0.1.0+cpu", "0.1.0+cu130" (docs/python.md, "Wheels and
variants"); run from a checkout it is the public version alone."""

import os
import re
from pathlib import Path

import pytest

import attnkit

ROOT = Path(__file__).resolve().parent.parent.parent


def _public(version: str) -> str:
    return version.split("+", 1)[0]


def _local(version: str) -> str:
    return version.split("+", 1)[1] if "+" in version else ""


def test_package_version_matches_cmake_and_pyproject():
    cmake = re.search(r"project\(attnkit VERSION ([0-9.]+)", (ROOT / "CMakeLists.txt").read_text()).group(1)
    pyproject = (ROOT / "pyproject.toml").read_text()
    # pyproject.toml takes the version from CMakeLists.txt (scripts/package_version.py), not a literal of its own.
    assert not re.search(r'^version = "', pyproject, re.M)
    assert re.search(r'^dynamic = \["version"\]', pyproject, re.M)
    assert _public(attnkit.__version__) == cmake


def test_package_version_matches_the_loaded_library():
    assert _public(attnkit.__version__) == attnkit.library_info()["version"]


def test_the_local_label_names_the_variant_of_the_loaded_library():
    label = _local(attnkit.__version__)
    if not label:
        pytest.skip(f"attnkit {attnkit.__version__} has no build label (run from a checkout, or built with "
                    f"ATTNKIT_LOCAL_VERSION='')")
    if os.environ.get("ATTNKIT_LIBRARY"):
        pytest.skip("ATTNKIT_LIBRARY chooses the library, whatever variant the package was built as")
    cuda = attnkit.library_info()["cuda_compiled"]
    if label == "cpu":
        assert not cuda, "a +cpu package loaded a library built with CUDA"
    elif re.fullmatch(r"cu[0-9]+", label):
        assert cuda, f"a +{label} package loaded a library built without CUDA"
    else:
        pytest.skip(f"custom build label {label!r} (ATTNKIT_LOCAL_VERSION) names no variant")


def test_package_version_is_a_valid_pep_440_version():
    packaging_version = pytest.importorskip("packaging.version")
    parsed = packaging_version.Version(attnkit.__version__)
    assert str(parsed) == attnkit.__version__


def test_package_ships_a_typing_marker():
    assert (Path(attnkit.__file__).parent / "py.typed").exists()
