"""Finding libattnkit: $ATTNKIT_LIBRARY, then the copy inside the package; a clear error naming
both when neither works; the library answers the ABI version this binding was written for.
Loading is checked in fresh interpreters so the cached library of this process does not interfere."""

import os
import subprocess
import sys

import attnkit
from attnkit import _capi


def _python(code: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)


def test_loaded_library_has_this_bindings_abi_version():
    info = attnkit.library_info()
    assert info["abi_version"] == _capi.ATTNKIT_ABI_VERSION
    assert os.path.exists(info["path"])


def test_a_bad_attnkit_library_is_an_error_naming_the_path_not_a_fallback(tmp_path):
    env = dict(os.environ, ATTNKIT_LIBRARY=str(tmp_path / "nowhere" / "libattnkit.so"))
    code = ("import attnkit\n"
            "try:\n"
            "    attnkit.library_info()\n"
            "except attnkit.LibraryNotFoundError as e:\n"
            "    print(e)\n"
            "else:\n"
            "    print('LOADED', attnkit.library_info()['path'])\n")
    result = _python(code, env)
    assert result.returncode == 0, result.stderr
    assert "LOADED" not in result.stdout
    assert "ATTNKIT_LIBRARY=" in result.stdout and "nowhere/libattnkit.so (absent)" in result.stdout


def test_missing_library_error_names_environment_variable_and_package_copy(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "ATTNKIT_LIBRARY"}
    code = ("import attnkit, sys\n"
            "from attnkit import _capi\n"
            "_capi.packaged_library_path = lambda: sys.argv[0] + '-absent'\n"  # hide an installed copy
            "_capi.checkout_build_paths = lambda: []\n"  # and a source checkout's builds
            "try:\n"
            "    attnkit.library_info()\n"
            "except attnkit.LibraryNotFoundError as e:\n"
            "    assert isinstance(e, ImportError) and isinstance(e, RuntimeError)\n"
            "    print(e)\n")
    result = _python(code, env)
    assert result.returncode == 0, result.stderr
    assert "$ATTNKIT_LIBRARY (not set)" in result.stdout
    assert "-absent (absent)" in result.stdout
    assert "ATTNKIT_LIBRARY" in result.stdout and "pip install" in result.stdout


def test_import_does_not_need_the_library(tmp_path):
    env = dict(os.environ, ATTNKIT_LIBRARY=str(tmp_path / "absent.so"))
    result = _python("import attnkit; print(attnkit.na2d.__name__)", env)
    assert result.returncode == 0, result.stderr
    assert "na2d" in result.stdout


def test_cuda_tensors_on_a_cpu_only_build_raise_runtime_error_saying_how_to_fix():
    import pytest
    import torch

    if attnkit.library_info()["cuda_compiled"] or not torch.cuda.is_available():
        pytest.skip("needs a CUDA device and a CPU-only libattnkit")
    q = torch.randn(1, 8, 2, 8, device="cuda")
    with pytest.raises(RuntimeError, match="ATTNKIT_WITH_CUDA"):
        attnkit.attention(q, q, q)
