"""Label recovery's noise model: the variance of <m, R^T R g> - <m, g> over the draw of R, per ||m||^2 ||g||^2, is
each family's readout_variance (1/b for the mixing sketches, 1/b - 1/n for those that sample rows without
replacement), measured by Monte-Carlo over seeds with a margin."""

import pytest
import torch

from leakattack.sketch import get_sketch, readout_variance

D, B, DRAWS = 64, 32, 1500


@pytest.mark.parametrize("kind", ["gaussian", "ams", "countsketch", "sparse", "srht", "uniform"])
def test_the_readout_variance_is_that_of_the_draws(kind):
    gen = torch.Generator().manual_seed(0)
    m, g = torch.randn(D, generator=gen, dtype=torch.float64), torch.randn(D, generator=gen, dtype=torch.float64)
    errors = torch.tensor([float(m @ s.adjoint(s.apply(g))) - float(m @ g)
                           for s in (get_sketch(kind, D, B, seed=seed) for seed in range(DRAWS))])
    measured = float(errors.pow(2).mean()) / float(m.norm() ** 2 * g.norm() ** 2)
    model = readout_variance(get_sketch(kind, D, B, seed=0))
    assert model == pytest.approx(measured, rel=0.2), (kind, model, measured)


def test_the_mixing_sketches_are_noisier_than_sampling_and_none_is_exact():
    mixing, sampling = (readout_variance(get_sketch(k, 1000, 500, seed=1)) for k in ("gaussian", "uniform"))
    assert mixing == pytest.approx(1 / 500) and sampling == pytest.approx(1 / 500 - 1 / 1000)
    assert readout_variance(get_sketch("none", 1000, 1000, seed=1)) == 0.0
    assert readout_variance(get_sketch("gaussian", 1000, 1000, seed=1)) == pytest.approx(1 / 1000)  # not 0 at b = d
