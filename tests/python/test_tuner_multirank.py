"""attnkit.tuner.sync over torch.distributed: two CPU processes joined by a gloo group agree on the
config the tuner picks with tuning on (rank 0 tunes and broadcasts; or ranks split configs and
all-gather timings)."""

import os
import tempfile

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import attnkit
from attnkit import tuner

if not tuner.available():
    pytest.skip("the loaded libattnkit does not export attnkit_tuner_configure yet", allow_module_level=True)
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

WORLD = 2


def _rank_main(rank: int, init_file: str, agreement: str, results: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD)
    try:
        torch.manual_seed(1234)  # the same problem on every rank
        tuner.configure(mode="on", forward_pass=True, cache_dir="", steps_forward=2, warmup_steps_forward=1,
                        thorough_mode_forward=True)
        tuner.sync(agreement=agreement)
        q, k, v = (torch.randn(1, 12, 10, 2, 16) for _ in range(3))
        picks = [tuner.forward_config(q, k, v, kernel_size=(5, 3)),
                 tuner.forward_config(q, k, v, is_causal=True)]
        out = attnkit.na2d(q, k, v, kernel_size=(5, 3))  # ops keep working with a synced tuner
        assert torch.isfinite(out).all()
        with open(os.path.join(results, f"rank{rank}.txt"), "w") as handle:
            handle.write(repr(picks))
        tuner.unsync()
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("agreement", ["root_tunes", "split_configs"])
def test_two_ranks_get_the_same_config(agreement):
    with tempfile.TemporaryDirectory() as folder:
        init_file = os.path.join(folder, "rendezvous")
        mp.spawn(_rank_main, args=(init_file, agreement, folder), nprocs=WORLD, join=True)
        picks = [open(os.path.join(folder, f"rank{r}.txt")).read() for r in range(WORLD)]
    parsed = [eval(text) for text in picks]  # noqa: S307 - written by this test
    names = [[name for name, _ in ranks_picks] for ranks_picks in parsed]
    assert names[0] == names[1] and all(names[0])
    assert all(source in ("tuned", "cache", "default") for picks_of_rank in parsed for _, source in picks_of_rank)


def test_sync_without_process_group_raises_runtime_error():
    with pytest.raises(RuntimeError, match="init_process_group"):
        tuner.sync()
