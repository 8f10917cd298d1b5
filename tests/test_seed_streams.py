"""torch's CPU generator reads only the low 32 bits of a seed: a seed of 2^32 or more is mixed into 32 bits from
the whole of it, so that two seeds a run records as different draw different weights, starts and noise; seeds
below 2^32 draw as they always did."""

import pytest
import torch

import targets
from leakattack import cli
from leakattack.attacks.gradient_matching import init_dummy
from leakattack.seeds import TORCH_SEEDS, torch_generator, torch_seed


def _draw(gen):
    return torch.randn(8, generator=gen)


@pytest.mark.parametrize("seed", [0, 5, 2 ** 31, TORCH_SEEDS - 1])
def test_a_seed_below_2_32_draws_as_torch_s_own(seed):
    assert torch_seed(seed) == seed
    assert torch.equal(_draw(torch_generator(seed)), _draw(torch.Generator().manual_seed(seed)))


@pytest.mark.parametrize("seed", [0, 5, 2 ** 62])
def test_seeds_2_32_apart_draw_apart(seed):
    assert not torch.equal(_draw(torch_generator(seed)), _draw(torch_generator(seed + TORCH_SEEDS)))
    assert torch_seed(seed + TORCH_SEEDS) < TORCH_SEEDS
    assert torch.equal(_draw(torch_generator(seed + TORCH_SEEDS)), _draw(torch_generator(seed + TORCH_SEEDS)))


def test_weights_and_starts_of_seeds_2_32_apart_differ():
    a, b = (targets.get_model("lenet", num_classes=10, in_shape=(3, 32, 32), seed=s) for s in (3, 3 + TORCH_SEEDS))
    assert not torch.equal(next(a.model.parameters()), next(b.model.parameters()))
    assert not torch.equal(init_dummy((1, 3, 4, 4), "gaussian", 7, dtype=torch.float64),
                           init_dummy((1, 3, 4, 4), "gaussian", 7 + TORCH_SEEDS, dtype=torch.float64))


def test_runs_of_seeds_2_32_apart_differ(tmp_path):
    for s in (0, TORCH_SEEDS):
        assert cli.main(["run", "--sketch", "none", "--iterations", "1", "--no-lpips", "--quiet", "--threads", "1",
                         "--seed", str(s), "--out", str(tmp_path / str(s))]) == 0
    assert (tmp_path / "0" / "reconstruction.pt").read_bytes() != (tmp_path / str(TORCH_SEEDS) /
                                                                   "reconstruction.pt").read_bytes()
