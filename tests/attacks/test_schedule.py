"""Inverting Gradients' step-size schedule and signed steps in gradient matching."""

import pytest
import torch

import targets
from leakattack.attacks import GradientMatching, init_dummy
from leakattack.attacks.gradient_matching import STEP_MILESTONES
from leakattack.channel import Channel
from leakattack.observation import observe
from leakattack.sketch import make_sketch


def _obs():
    victim = targets.get_model("lenet", in_shape=(1, 8, 8), seed=0)
    victim = victim.to(dtype=torch.float64)
    x = torch.rand((1, 1, 8, 8), generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    labels = torch.tensor([3])
    return observe(victim, x, labels, Channel(make_sketch("srht", victim.d, victim.d // 2, seed=1))), x, labels


def _steps(schedule, iterations=16, lr=0.01):
    """Per-step moves max|x_{t+1} - x_t| of signed gd (each coordinate moves by exactly the step size)."""
    obs, x, labels = _obs()
    xs = []
    gm = GradientMatching(optimizer="gd", iterations=iterations, lr=lr, labels="given", tol=0, schedule=schedule,
                          signed=True)
    gm.run(obs, init_dummy(x.shape, "gaussian", 2, dtype=torch.float64), labels,
           monitor=lambda step, xt: xs.append(xt.clone()) or {}, monitor_every=1)
    return [float((b - a).abs().max()) for a, b in zip(xs, xs[1:])]


def test_signed_steps_move_every_coordinate_by_the_step_size():
    moves = _steps("none")
    assert moves == pytest.approx([0.01] * 16, rel=1e-9)


def test_step_schedule_divides_the_step_by_ten_at_three_eighths_five_eighths_and_seven_eighths():
    moves = _steps("step")
    cut = [round(f * 16) for f in STEP_MILESTONES]  # 6, 10, 14
    want = [0.01 * 0.1 ** sum(t >= c for c in cut) for t in range(16)]
    assert moves == pytest.approx(want, rel=1e-9)


def test_signed_steps_are_refused_for_lbfgs_and_unknown_schedules_are_refused():
    with pytest.raises(ValueError, match="first-order"):
        GradientMatching(optimizer="lbfgs", signed=True)
    with pytest.raises(ValueError, match="schedule"):
        GradientMatching(schedule="cosine")
