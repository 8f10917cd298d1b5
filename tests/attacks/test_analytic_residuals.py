"""The analytic attack's losses are relative residuals ||M g - y|| / ||y||, as R-GAP's and the row-space solve's
are, and as the run's summary line and docs/runs.md name them."""

import pytest
import torch

import targets
from leakattack.attacks.analytic import Analytic
from leakattack.channel import Channel
from leakattack.data import get_dataset
from leakattack.observation import ThreatModel, observe
from leakattack.sketch import make_sketch

pytestmark = pytest.mark.usefixtures("one_thread")


def _obs(scale: float, b: int | None = None):
    data = get_dataset("digits")
    x, labels = data.images[2:3].double(), data.labels[2:3]
    victim = targets.get_model("mlp", in_shape=tuple(x.shape[1:]), seed=0).to(dtype=torch.float64)
    sk = make_sketch("srht", victim.d, b or round(2.0 * victim.unknowns_per_example), seed=1)
    obs = observe(victim, x, labels, Channel(sk), ThreatModel(knows_labels=True))
    obs.y = obs.y * scale
    return obs


def test_the_low_rank_fit_reports_relative_residuals_that_do_not_depend_on_the_message_scale():
    one = Analytic(labels="given", sweeps=2).reconstruct(_obs(1.0))
    big = Analytic(labels="given", sweeps=2).reconstruct(_obs(1e3))
    # the spectral start's residual is the same share of the message at any scale (a squared residual: 1e6 times)
    assert big.losses[0] == pytest.approx(one.losses[0], rel=1e-6)
    assert 0 < one.losses[0] < 10


def test_the_fit_s_final_loss_is_the_relative_residual_its_note_names():
    result = Analytic(labels="given").reconstruct(_obs(1.0))
    assert result.stop_reason == "tolerance" and "relative residual" in result.message
    said = float(result.message.split("relative residual ")[1].split(")")[0])
    assert said > 0 and result.final_loss == pytest.approx(said, rel=0.06, abs=0)


@pytest.mark.parametrize("index", [0, 2])
def test_one_example_s_label_is_read_from_the_fitted_head_block(index):
    """Behind tanh the head's inputs nearly cancel, and the sign rule's row sums read through a small sketch are
    noise (13 of 30 digits right through srht b = 2000); the fitted head block's bias column is delta = p - onehot,
    whose one negative entry is the label."""
    data = get_dataset("digits")
    x, labels = data.images[index:index + 1].double(), data.labels[index:index + 1]
    victim = targets.get_model("mlp", in_shape=tuple(x.shape[1:]), seed=0, act="tanh").to(dtype=torch.float64)
    obs = observe(victim, x, labels, Channel(make_sketch("srht", victim.d, 2000, seed=1)), ThreatModel())
    result = Analytic().reconstruct(obs)
    assert result.stop_reason == "tolerance"
    assert result.labels.tolist() == labels.tolist()
