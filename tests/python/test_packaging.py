"""Packaging: the license and its metadata, the version of each build variant (scripts/package_version.py),
the wheel script and the loader's advice when a CUDA build misses its runtime.

Building a wheel takes minutes, so it is not done here: scripts/build-wheels builds, repairs (auditwheel) and
tests one, and CI can run it as its own step (docs/python.md, "Wheels and variants")."""

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from attnkit import _capi

ROOT = Path(__file__).resolve().parent.parent.parent

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.9/3.10
    tomllib = pytest.importorskip("tomli")


def _pyproject() -> dict:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)


def _load_package_version():
    spec = importlib.util.spec_from_file_location("attnkit_package_version", ROOT / "scripts" / "package_version.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


package_version = _load_package_version()


def _nvcc(release: str):
    """A stand-in for running `nvcc --version` that reports CUDA `release`."""
    return lambda path: package_version.cuda_label(f"Cuda compilation tools, release {release}, V{release}.1")


def _version(environ: dict, run_nvcc=_nvcc("13.0"), sdist: bool = False) -> str:
    return package_version.build_version(environ, sdist=sdist, run_nvcc=run_nvcc)


def _cmake_version() -> str:
    return re.search(r"project\(attnkit VERSION ([0-9.]+)", (ROOT / "CMakeLists.txt").read_text()).group(1)


# License


def test_license_file_is_the_apache_2_0_text():
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    assert "END OF TERMS AND CONDITIONS" in text
    assert len(text.splitlines()) > 150  # the full text, not a notice pointing at it


def test_pyproject_declares_the_license_as_an_spdx_expression_with_its_file():
    project = _pyproject()["project"]
    assert project["license"] == "Apache-2.0"
    assert project["license-files"] == ["LICENSE"]
    # PEP 639: with a license expression, license classifiers are not allowed.
    assert not [c for c in project["classifiers"] if c.startswith("License ::")]


def test_pyproject_names_authors_keywords_and_classifiers():
    project = _pyproject()["project"]
    assert project["authors"] and all(a.get("name") or a.get("email") for a in project["authors"])
    assert "attention" in project["keywords"]
    assert "Typing :: Typed" in project["classifiers"]
    for url in project.get("urls", {}).values():
        assert url.startswith("https://") and "example" not in url


def test_build_system_asks_for_a_scikit_build_core_with_dynamic_metadata_and_pep_639():
    requires = _pyproject()["build-system"]["requires"]
    assert "scikit-build-core>=1.1" in requires


# Version of each build variant


def test_pyproject_takes_the_version_from_the_in_tree_provider():
    pyproject = _pyproject()
    assert "version" not in pyproject["project"] and "version" in pyproject["project"]["dynamic"]
    assert pyproject["tool"]["dynamic-metadata"] == [{"provider": {"path": "scripts", "module": "package_version"}}]


def test_the_wheel_carries_its_version_into_attnkit_version():
    (generated,) = _pyproject()["tool"]["scikit-build"]["generate"]
    assert generated["path"] == "attnkit/_version.py" and generated["location"] == "install"
    assert '__version__ = "${version}"' in generated["template"]


def test_public_version_is_the_cmake_project_version():
    assert package_version.public_version() == _cmake_version()


def test_a_plain_build_is_the_cpu_variant():
    assert _version({}) == f"{_cmake_version()}+cpu"
    assert _version({"ATTNKIT_WITH_CUDA": "OFF"}).endswith("+cpu")


def test_a_cuda_build_is_labelled_with_the_nvcc_release():
    env = {"ATTNKIT_WITH_CUDA": "ON", "CUDACXX": "/opt/cuda/bin/nvcc"}
    assert _version(env, run_nvcc=_nvcc("13.0")).endswith("+cu130")
    assert _version(env, run_nvcc=_nvcc("12.8")).endswith("+cu128")


def test_cmake_args_win_over_the_environment_variable():
    env = {"ATTNKIT_WITH_CUDA": "OFF", "CUDACXX": "/opt/cuda/bin/nvcc",
           "CMAKE_ARGS": "-DATTNKIT_KERNEL_SET=dev -DATTNKIT_WITH_CUDA:BOOL=ON"}
    assert _version(env).endswith("+cu130")
    env["CMAKE_ARGS"] += " -D ATTNKIT_WITH_CUDA=OFF"
    assert _version(env).endswith("+cpu")


def test_the_cuda_compiler_is_found_as_cmake_finds_it(tmp_path):
    nvcc = tmp_path / "nvcc"
    nvcc.write_text("#!/bin/sh\n")
    nvcc.chmod(0o755)
    assert package_version.cuda_compiler({"PATH": str(tmp_path)}) == str(nvcc)
    assert package_version.cuda_compiler({"PATH": str(tmp_path), "CUDACXX": "/x/nvcc"}) == "/x/nvcc"
    assert package_version.cuda_compiler({"CUDACXX": "/x/nvcc", "CMAKE_ARGS": "-DCMAKE_CUDA_COMPILER=/y/nvcc"}) == "/y/nvcc"
    assert package_version.cuda_compiler({"PATH": ""}) is None


def test_auto_without_a_cuda_compiler_is_the_cpu_variant():
    assert _version({"ATTNKIT_WITH_CUDA": "AUTO", "PATH": ""}).endswith("+cpu")
    assert _version({"ATTNKIT_WITH_CUDA": "AUTO", "CUDACXX": "/opt/cuda/bin/nvcc"}).endswith("+cu130")


def test_cuda_on_without_a_cuda_compiler_says_what_to_do():
    with pytest.raises(RuntimeError, match="no CUDA compiler was found.*nvcc"):
        _version({"ATTNKIT_WITH_CUDA": "ON", "PATH": ""})


def test_an_unknown_cuda_option_is_refused():
    with pytest.raises(ValueError, match="ATTNKIT_WITH_CUDA: 'maybe'; allowed: ON, OFF or AUTO"):
        _version({"ATTNKIT_WITH_CUDA": "maybe"})


def test_attnkit_local_version_overrides_the_label():
    version = _cmake_version()
    assert _version({"ATTNKIT_LOCAL_VERSION": "cu129", "ATTNKIT_WITH_CUDA": "OFF"}) == f"{version}+cu129"
    assert _version({"ATTNKIT_LOCAL_VERSION": "CU129.Hopper"}) == f"{version}+cu129.hopper"
    assert _version({"ATTNKIT_LOCAL_VERSION": ""}) == version
    assert _version({"ATTNKIT_LOCAL_VERSION": "none"}) == version
    with pytest.raises(ValueError, match="ATTNKIT_LOCAL_VERSION"):
        _version({"ATTNKIT_LOCAL_VERSION": "cu 13"})


def test_nvcc_output_without_a_release_is_an_error():
    with pytest.raises(RuntimeError, match="cannot read the CUDA release"):
        package_version.cuda_label("nvcc: NVIDIA (R) Cuda compiler driver")


def test_the_sdist_has_the_public_version_and_a_wheel_its_label(monkeypatch):
    monkeypatch.setenv("ATTNKIT_LOCAL_VERSION", "cpu")
    try:
        package_version.build_state("sdist")
        assert package_version.dynamic_metadata({}, {}) == {"version": _cmake_version()}
        package_version.build_state("wheel")
        assert package_version.dynamic_metadata({}, {}) == {"version": f"{_cmake_version()}+cpu"}
    finally:
        package_version.build_state("wheel")


def test_every_label_is_a_valid_pep_440_local_version():
    packaging_version = pytest.importorskip("packaging.version")
    for env in ({}, {"ATTNKIT_WITH_CUDA": "ON", "CUDACXX": "/n"}, {"ATTNKIT_LOCAL_VERSION": "cu129.x"}):
        parsed = packaging_version.Version(_version(env))
        assert parsed.public == _cmake_version() and parsed.local


def test_package_version_runs_as_a_script():
    env = {k: v for k, v in os.environ.items() if k not in ("CMAKE_ARGS",)}
    env.update(ATTNKIT_WITH_CUDA="OFF")
    env.pop("ATTNKIT_LOCAL_VERSION", None)
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "package_version.py")], env=env,
                            capture_output=True, text=True, check=True)
    assert result.stdout.strip() == f"{_cmake_version()}+cpu"


# The wheel script and the loader


def test_build_wheels_is_an_executable_bash_script():
    script = ROOT / "scripts" / "build-wheels"
    assert os.access(script, os.X_OK)
    subprocess.run(["bash", "-n", str(script)], check=True)
    text = script.read_text()
    assert "auditwheel repair" in text and "auditwheel show" in text
    assert "--exclude" in text  # CUDA libraries are not vendored next to PyTorch's


def test_a_missing_cuda_runtime_gets_advice():
    tried = ["/site/attnkit/lib/libattnkit.so (libcudart.so.13: cannot open shared object file: No such file)"]
    hint = _capi.cuda_runtime_hint(tried)
    assert "libcudart.so.<major>" in hint and "torch" in hint and "+cpu" in hint
    assert _capi.cuda_runtime_hint(["/x/libattnkit.so (absent)"]) == ""
