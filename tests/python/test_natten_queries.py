"""NATTEN's feature queries and switches on attnkit and attnkit.natten017 (programs that import attnkit in
NATTEN's place call them before choosing kernels)."""

import pytest
import torch

import attnkit
from attnkit import natten017


@pytest.mark.parametrize("module", [attnkit, natten017])
def test_the_queries_answer_for_attnkit(module):
    cuda = torch.cuda.is_available() and attnkit.library_info()["cuda_compiled"] and \
        torch.cuda.get_device_capability()[0] >= 8
    assert module.has_cuda() is cuda
    assert module.has_fused_na() is cuda and module.has_fna() is cuda
    assert module.has_half() is (cuda or not torch.cuda.is_available())
    assert module.has_bfloat() is module.has_half()
    assert not module.has_gemm() and not module.has_tf32_gemm() and not module.has_fp64_gemm()


@pytest.mark.parametrize("module", [attnkit, natten017])
def test_the_switches_are_recorded_and_change_no_result(module):
    q = torch.randn(1, 9, 2, 8)
    before = attnkit.na1d(q, q, q, 3)
    module.use_fused_na(True, kv_parallel=True)
    assert module.is_fused_na_enabled() and module.is_kv_parallelism_in_fused_na_enabled()
    module.use_kv_parallelism_in_fused_na(False)
    assert not module.is_kv_parallelism_in_fused_na_enabled()
    module.use_kv_parallelism_in_fused_na()
    module.disable_gemm_na()
    assert not module.is_gemm_na_enabled()
    module.enable_gemm_na()
    module.use_tiled_na(False)
    assert not module.is_tiled_na_enabled()
    module.use_tiled_na()
    module.set_memory_usage_preference("strict")
    assert module.get_memory_usage_preference() == "strict"
    module.set_memory_usage_preference()
    with pytest.raises(ValueError, match="'default', 'strict', 'unrestricted'"):
        module.set_memory_usage_preference("small")
    torch.testing.assert_close(attnkit.na1d(q, q, q, 3), before, rtol=0, atol=0)


def test_deterministic_mode_follows_torch():
    assert not attnkit.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        assert attnkit.are_deterministic_algorithms_enabled()
    finally:
        torch.use_deterministic_algorithms(False)


def test_kv_parallelism_and_memory_preference_reach_the_backward_plans():
    from attnkit import _attention_ops, _natten_queries

    q = torch.randn(1, 9, 2, 8, requires_grad=True)
    attnkit.na1d(q, q, q, 3).sum().backward()
    assert _natten_queries.backward_split_settings() == (0, -1)  # attnkit's default: automatic, 64 MiB bound
    try:
        attnkit.use_kv_parallelism_in_fused_na(False)
        assert _natten_queries.backward_split_settings() == (1, -1)  # never split
        assert len(_attention_ops._backward_plans) == 0, "plans made with the old settings are dropped"
        attnkit.use_kv_parallelism_in_fused_na(True)
        attnkit.set_memory_usage_preference("strict")
        assert _natten_queries.backward_split_settings() == (0, 0)  # no split workspace
        attnkit.set_memory_usage_preference("unrestricted")
        assert _natten_queries.backward_split_settings()[1] > 1 << 40
        q.grad = None
        attnkit.na1d(q, q, q, 3).sum().backward()  # a new plan with these settings
        assert q.grad is not None
    finally:
        attnkit.use_kv_parallelism_in_fused_na(True)
        attnkit.set_memory_usage_preference("default")
