"""attnkit.tuner on the CPU: settings round-trip, NATTEN-compatible use_autotuner /
disable_autotuner, both spellings of load-only (the environment's too), bad settings, and what
forward_config reports. Runs when the loaded library
exports the tuner's C API (skips with that reason otherwise)."""

import os
import subprocess
import sys

import pytest

import attnkit
from attnkit import tuner
from conftest import randn

if not tuner.available():
    pytest.skip("the loaded libattnkit does not export attnkit_tuner_configure yet", allow_module_level=True)


@pytest.fixture(autouse=True)
def _restore_settings():
    before = tuner.settings()
    yield
    tuner.configure(**before)


def test_configure_changes_only_the_given_settings():
    before = tuner.settings()
    after = tuner.configure(top_k=7, thorough_mode_forward=True, cache_dir="")
    assert after["top_k"] == 7 and after["thorough_mode_forward"] is True and after["cache_dir"] == ""
    for name in ("mode", "deterministic", "steps_forward", "warmup_steps_backward"):
        assert after[name] == before[name]


def test_use_autotuner_turns_tuning_on_with_natten_names():
    result = attnkit.use_autotuner(forward_pass=True, steps_forward=3, warmup_steps_forward=1)
    assert result["mode"] == "on" and result["forward_pass"] is True and result["backward_pass"] is False
    assert result["steps_forward"] == 3 and result["warmup_steps_forward"] == 1


def test_disable_autotuner_stops_tuning():
    attnkit.use_autotuner(forward_pass=True)
    assert attnkit.disable_autotuner()["mode"] == "off"


def test_unknown_mode_raises_value_error_naming_the_spellings():
    with pytest.raises(ValueError, match="'load-only' \\(also spelled 'load_only'\\)"):
        tuner.configure(mode="sometimes")


@pytest.mark.parametrize("spelling", ["load-only", "load_only"])
def test_load_only_is_accepted_in_either_spelling_and_reported_as_load_hyphen_only(spelling):
    tuner.configure(mode="on")
    assert tuner.configure(mode=spelling)["mode"] == "load-only"
    assert tuner.settings()["mode"] == "load-only"


def test_use_autotuner_without_passes_is_load_only():
    assert attnkit.use_autotuner()["mode"] == "load-only"


def test_settings_round_trip_through_configure_keeps_load_only():
    tuner.configure(mode="load_only")
    assert tuner.configure(**tuner.settings())["mode"] == "load-only"


@pytest.mark.parametrize("spelling", ["load-only", "load_only"])
def test_the_environment_takes_either_spelling_without_a_warning(spelling):
    env = dict(os.environ, ATTNKIT_TUNE=spelling, ATTNKIT_LOG_LEVEL="warning")
    env.pop("ATTNKIT_LOG_FILE", None)
    result = subprocess.run([sys.executable, "-c", "from attnkit import tuner; print(tuner.settings()['mode'])"],
                            capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "load-only"
    assert "ATTNKIT_TUNE" not in result.stderr


def test_the_environment_reports_an_unknown_mode_with_the_allowed_spellings():
    env = dict(os.environ, ATTNKIT_TUNE="sometimes", ATTNKIT_LOG_LEVEL="warning")
    env.pop("ATTNKIT_LOG_FILE", None)
    result = subprocess.run([sys.executable, "-c", "from attnkit import tuner; print(tuner.settings()['mode'])"],
                            capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "load-only"
    assert "ATTNKIT_TUNE='sometimes'; allowed: off, on, load-only (also spelled load_only)" in result.stderr


def test_non_bool_toggle_raises_type_error():
    with pytest.raises(TypeError, match="forward_pass"):
        tuner.configure(forward_pass=1)


def test_forward_config_with_tuning_off_is_the_default():
    tuner.configure(mode="off")
    q, k, v = randn(1, 64, 2, 32), randn(1, 64, 2, 32), randn(1, 64, 2, 32)
    name, source = tuner.forward_config(q, k, v, is_causal=True)
    assert name and source == "default"


def _run_isolated(code: str) -> str:
    """Tuning runs kernels it has not run before: do it in a child interpreter so a crash is a
    failed test with its signal, not a dead test session."""
    prelude = ("import torch, attnkit\nfrom attnkit import tuner\ntorch.manual_seed(0)\n"
               "tuner.configure(mode='on', forward_pass=True, cache_dir='', steps_forward=2, warmup_steps_forward=1)\n")
    result = subprocess.run([sys.executable, "-c", prelude + code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"exit status {result.returncode} while tuning:\n{result.stderr[-3000:]}"
    return result.stdout


def test_forward_config_with_tuning_on_tunes_then_hits_the_memory_cache():
    output = _run_isolated(
        "q, k, v = (torch.randn(1, 9, 11, 2, 16) for _ in range(3))\n"
        "print(repr([tuner.forward_config(q, k, v, kernel_size=3) for _ in range(2)]))\n")
    first, second = eval(output)  # noqa: S307 - printed by the child above
    assert first[1] in ("tuned", "default")
    assert second[0] == first[0] and second[1] in ("cache", "tuned", "default")


def test_ops_still_compute_correctly_with_tuning_on():
    output = _run_isolated(
        "q, k, v = (torch.randn(1, 33, 2, 16) for _ in range(3))\n"
        "tuned = attnkit.attention(q, k, v, is_causal=True)\n"
        "tuner.configure(mode='off')\n"
        "print(torch.allclose(tuned, attnkit.attention(q, k, v, is_causal=True), rtol=1e-5, atol=1e-6))\n")
    assert output.strip() == "True"
