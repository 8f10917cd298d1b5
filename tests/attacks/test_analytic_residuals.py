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


def _relu_batch(B: int, sketch: str, b: int | None = None):
    data = get_dataset("digits")
    x, labels = data.images[:B].double(), data.labels[:B]
    victim = targets.get_model("mlp", in_shape=tuple(x.shape[1:]), seed=0, act="relu").to(dtype=torch.float64)
    sk = make_sketch(sketch, victim.d, b or victim.d, seed=1)
    return observe(victim, x, labels, Channel(sk), ThreatModel(knows_labels=True))


@pytest.mark.parametrize("sketch", ["none", "srht"])
def test_a_batch_with_guessed_examples_stops_stalled_at_the_message_residual_of_the_batch_returned(sketch):
    """ReLU mlp, 4 digits: 3 were separated and 1 guessed; the run said `tolerance` with residual 0 (the block's
    reading) and the report then took the wrong image for a second input that sends the message, where the message's
    relative residual at the batch returned is 0.246."""
    obs = _relu_batch(4, sketch, None if sketch == "none" else 30000)
    result = Analytic(labels="given").reconstruct(obs)
    assert "the others are guesses" in result.message
    assert result.stop_reason == "stalled" and result.final_loss > 0.05
    sent = obs.forward(result.x, result.labels).detach().reshape(-1)
    y = obs.y.reshape(-1)
    assert result.final_loss == pytest.approx(float((sent - y).norm() / y.norm()), rel=1e-6)
    assert f"relative residual at the batch returned is {result.final_loss:.3g}" in result.message


def test_a_solved_sigmoid_batch_reports_the_row_space_solves_residual_not_the_blocks_zero():
    """The summary line printed residual 0 (the block's exact reading) where the solve's record said 3.3e-14."""
    data = get_dataset("digits")
    x, labels = data.images[:4].double(), data.labels[:4]
    victim = targets.get_model("mlp", in_shape=tuple(x.shape[1:]), seed=0).to(dtype=torch.float64)
    obs = observe(victim, x, labels, Channel(make_sketch("none", victim.d, victim.d)), ThreatModel(knows_labels=True))
    result = Analytic(labels="given").reconstruct(obs)
    assert result.row_space_solve["solved"] and result.stop_reason == "tolerance"
    assert result.final_loss == result.row_space_solve["residual"] and 0 < result.final_loss < 1e-8


def test_a_fit_that_says_it_is_not_unique_is_not_told_so_twice():
    """logreg through srht b = 500 (794 unknowns) read "... the fit is not unique, but with b = 500 numbers ...
    another input matches as well: the match is not unique"."""
    from leakattack.attacks.base import not_unique_message

    data = get_dataset("digits")
    x, labels = data.images[2:3].double(), data.labels[2:3]
    victim = targets.get_model("logreg", in_shape=tuple(x.shape[1:]), seed=0).to(dtype=torch.float64)
    obs = observe(victim, x, labels, Channel(make_sketch("srht", victim.d, 500, seed=1)),
                  ThreatModel(knows_labels=True))
    with pytest.warns(UserWarning, match="the fit is not unique"):
        result = Analytic(labels="given").reconstruct(obs)
    said = not_unique_message(result, obs)
    assert said.count("not unique") == 1 and ", but with b" not in said


def test_a_square_solve_that_stopped_short_comes_first_among_the_causes():
    from leakattack.attacks.analytic import _not_exact

    assert "first, reading g from the message stopped short, at a relative residual of 0.003; else the defense " \
        "gaussian:sigma=0.01@before_sketch" in _not_exact(0.1, 1, 3e-3, "the defense gaussian:sigma=0.01@before_sketch")
    assert "stopped short" not in _not_exact(0.1, 1)


def test_rgap_names_a_square_solve_that_stopped_short_first(monkeypatch):
    """R-GAP through a square Gaussian sketch warned that the solve reading g stopped short, 'not noise or a null
    space of the sketch', then noted 'a sketch with a null space' as the only cause of its inconsistent layers."""
    from leakattack.attacks.rgap import Rgap

    data = get_dataset("digits")
    x, labels = data.images[2:3].double(), data.labels[2:3]
    victim = targets.get_model("logreg", in_shape=tuple(x.shape[1:]), seed=0).to(dtype=torch.float64)
    obs = observe(victim, x, labels, Channel(make_sketch("srht", victim.d, victim.d, seed=1)),
                  ThreatModel(knows_labels=True))
    exact = Analytic._solve_square_checked

    def stopped_short(self, M, y):  # as CGLS leaves an ill-conditioned square sketch: g off, its residual kept
        g, _ = exact(self, M, y)
        return g + 1e-3 * g.norm() / g.numel() ** 0.5 * torch.randn(g.shape, generator=torch.Generator().manual_seed(0),
                                                                     dtype=g.dtype), 0.25

    monkeypatch.setattr(Analytic, "_solve_square_checked", stopped_short)
    result = Rgap().reconstruct(obs)
    assert ("not the exact gradient of one example at these weights (first, reading g from the message stopped "
            "short, at a relative residual of 0.25; else a sketch with a null space") in result.message
