"""The version a build of the attnkit Python package gets (docs/python.md, "Wheels and variants").

CMakeLists.txt's project version, plus a PEP 440 local label naming the build variant, as PyTorch
labels its wheels:

    0.1.0+cpu     CPU backend only (ATTNKIT_WITH_CUDA=OFF, what a plain `pip install .` builds)
    0.1.0+cu130   with the CUDA backends, compiled by nvcc 13.0 (cu<major><minor>)
    0.1.0         the source distribution, which is no build variant

The variant is read the way CMake will read it: ATTNKIT_WITH_CUDA (OFF, ON or AUTO; pyproject.toml
passes it to CMake), overridden by a -DATTNKIT_WITH_CUDA=... in CMAKE_ARGS; for ON and AUTO the CUDA
compiler is the one CMake picks (-DCMAKE_CUDA_COMPILER in CMAKE_ARGS, else $CUDACXX, else nvcc on
PATH). ATTNKIT_LOCAL_VERSION overrides the label: e.g. "cu130"; "" or "none" drops it (a plain
version, which an index such as PyPI requires).

Used three ways, with the standard library only (it runs in pip's isolated build environment):
scikit-build-core's dynamic-metadata provider of `version` (pyproject.toml, [[tool.dynamic-metadata]]);
`python scripts/package_version.py` prints the version a build in this environment gets
(scripts/build-wheels); and tests/python/test_packaging.py tests the functions below.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Mapping, Optional

ROOT = Path(__file__).resolve().parent.parent

_PROJECT_VERSION = re.compile(r"project\(\s*attnkit\s+VERSION\s+([0-9]+(?:\.[0-9]+)*)")
_LOCAL_LABEL = re.compile(r"^[a-z0-9]+(?:\.[a-z0-9]+)*$")  # PEP 440 local segments, normalised (lower case)
_NVCC_RELEASE = re.compile(r"release ([0-9]+)\.([0-9]+)")
_ON = ("on", "1", "true", "yes", "y")
_OFF = ("off", "0", "false", "no", "n", "")

# The build state scikit-build-core reports through build_state() before dynamic_metadata().
_build_state = "wheel"


def public_version(root: Path = ROOT) -> str:
    """The project version of CMakeLists.txt: the library's version and the package's public one."""
    text = (root / "CMakeLists.txt").read_text(encoding="utf-8")
    match = _PROJECT_VERSION.search(text)
    if match is None:
        raise RuntimeError(f"{root / 'CMakeLists.txt'}: no 'project(attnkit VERSION x.y.z' found")
    return match.group(1)


def _cmake_args_define(environ: Mapping[str, str], name: str) -> Optional[str]:
    """The value of the last -D<name>[:TYPE]=value (or -D <name>=value) in CMAKE_ARGS, which CMake
    applies after pyproject.toml's defines; None when absent."""
    args = shlex.split(environ.get("CMAKE_ARGS", ""))
    pattern = re.compile(rf"^{re.escape(name)}(?::[A-Za-z]+)?=(.*)$")
    value = None
    for i, arg in enumerate(args):
        define = arg[2:] if arg.startswith("-D") else None
        if define == "" and i + 1 < len(args):
            define = args[i + 1]
        match = pattern.match(define) if define else None
        if match:
            value = match.group(1)
    return value


def cuda_option(environ: Mapping[str, str]) -> str:
    """ATTNKIT_WITH_CUDA as CMake will see it: "ON", "OFF" or "AUTO" (default OFF, as pyproject.toml)."""
    value = _cmake_args_define(environ, "ATTNKIT_WITH_CUDA")
    if value is None:
        value = environ.get("ATTNKIT_WITH_CUDA", "OFF")
    lowered = value.strip().lower()
    if lowered in _ON:
        return "ON"
    if lowered in _OFF:
        return "OFF"
    if lowered == "auto":
        return "AUTO"
    raise ValueError(f"ATTNKIT_WITH_CUDA: {value!r}; allowed: ON, OFF or AUTO")


def cuda_compiler(environ: Mapping[str, str]) -> Optional[str]:
    """The nvcc CMake will use: -DCMAKE_CUDA_COMPILER in CMAKE_ARGS, $CUDACXX, nvcc on PATH; or None."""
    given = _cmake_args_define(environ, "CMAKE_CUDA_COMPILER") or environ.get("CUDACXX")
    if given:
        return given if os.path.sep in given else shutil.which(given, path=environ.get("PATH"))
    return shutil.which("nvcc", path=environ.get("PATH"))


def cuda_label(nvcc_version_output: str) -> str:
    """'cu130' from `nvcc --version` output ('... release 13.0, V13.0.88')."""
    match = _NVCC_RELEASE.search(nvcc_version_output)
    if match is None:
        raise RuntimeError(f"cannot read the CUDA release from `nvcc --version`: {nvcc_version_output.strip()!r}")
    return f"cu{match.group(1)}{match.group(2)}"


def _nvcc_label(nvcc: str) -> str:
    try:
        output = subprocess.run([nvcc, "--version"], check=True, capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError) as error:
        raise RuntimeError(f"attnkit version: cannot run {nvcc} --version ({error}); set ATTNKIT_LOCAL_VERSION "
                           f"to the build's label (e.g. cu130) or fix the CUDA compiler") from error
    return cuda_label(output)


def local_label(environ: Mapping[str, str], run_nvcc=_nvcc_label) -> str:
    """The local version label of a build in this environment ("" for none)."""
    if "ATTNKIT_LOCAL_VERSION" in environ:
        label = environ["ATTNKIT_LOCAL_VERSION"].strip().lower()
        if label in ("", "none"):
            return ""
        if not _LOCAL_LABEL.match(label):
            raise ValueError(f"ATTNKIT_LOCAL_VERSION: {environ['ATTNKIT_LOCAL_VERSION']!r}; allowed: a PEP 440 "
                             f"local label (letters, digits, dots; e.g. cpu, cu130), or '' / 'none' for none")
        return label
    option = cuda_option(environ)
    if option == "OFF":
        return "cpu"
    nvcc = cuda_compiler(environ)
    if nvcc is None:
        if option == "AUTO":
            return "cpu"  # CMake's AUTO builds the CPU backend only when it finds no CUDA compiler
        raise RuntimeError("ATTNKIT_WITH_CUDA=ON but no CUDA compiler was found: put nvcc (CUDA >= 12.4) on PATH, "
                           "set CUDACXX or pass -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc in CMAKE_ARGS")
    return run_nvcc(nvcc)


def build_version(environ: Mapping[str, str] = os.environ, root: Path = ROOT, sdist: bool = False,
                  run_nvcc=_nvcc_label) -> str:
    """The version of a build: the public version, plus '+label' for a wheel."""
    version = public_version(root)
    label = "" if sdist else local_label(environ, run_nvcc)
    return f"{version}+{label}" if label else version


# scikit-build-core's dynamic-metadata provider interface ([[tool.dynamic-metadata]], version 0.3).


def build_state(state: str) -> None:
    global _build_state
    _build_state = state


def dynamic_metadata(settings: Mapping[str, Any], project: Mapping[str, Any]) -> dict:
    if settings:
        raise RuntimeError(f"scripts/package_version.py takes no settings; got {sorted(settings)}")
    return {"version": build_version(sdist=_build_state == "sdist")}


if __name__ == "__main__":
    try:
        print(build_version())
    except (RuntimeError, ValueError) as error:
        print(f"package_version: {error}", file=sys.stderr)
        sys.exit(1)
