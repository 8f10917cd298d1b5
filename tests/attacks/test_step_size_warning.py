"""A step size with which Adam's steps cannot move the image is a one-line warning before the attack; step sizes
that can move it, and optimisers whose steps scale with the gradient, are not warned about."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from leakattack import cli
from leakattack.config import RunConfig
from leakattack.experiment import adam_cannot_move


def _case(span: float = 1.0):
    return SimpleNamespace(x=torch.linspace(0, span, 16).reshape(1, 1, 4, 4))


def _why(**settings):
    cfg = RunConfig(**settings)
    return adam_cannot_move(cfg, _case(), cfg.derived())


def test_a_budget_that_moves_no_pixel_by_half_a_grey_level_is_named():
    why = _why(optimizer="adam", lr=1e-7, iterations=1000)  # 3.16e-7 a step, 3.16e-4 in all < 1/510
    assert why is not None and why.startswith("--lr 1e-07 cannot move the image") and "1000 steps" in why
    assert _why(optimizer="adam", lr=1e-5, iterations=1000) is None  # 0.0316 in all: it can move


def test_signed_steps_are_bounded_by_the_step_size_itself():
    assert _why(optimizer="adam", signed=True, lr=1e-6, iterations=1000) is not None  # 1e-3 < 1/510
    assert _why(optimizer="adam", signed=True, lr=3e-6, iterations=1000) is None  # 3e-3 > 1/510


def test_steps_below_the_precision_s_spacing_are_named_however_many():
    why = _why(optimizer="adam", lr=1e-9, iterations=10_000_000, dtype="float32")
    assert why is not None and "rounds away" in why and "float32" in why
    assert _why(optimizer="adam", lr=1e-9, iterations=10_000_000, dtype="float64") is None


@pytest.mark.parametrize("optimizer", ["gd", "lbfgs"])
def test_optimisers_whose_steps_scale_with_the_gradient_are_not_judged(optimizer):
    assert _why(optimizer=optimizer, lr=1e-300, iterations=10) is None


def test_the_command_line_warns_in_one_line_and_still_runs(tmp_path, capsys):
    assert cli.main(["run", "--optimizer", "adam", "--lr", "1e-9", "--iterations", "5", "--no-lpips", "--quiet",
                     "--threads", "1", "--out", str(tmp_path / "out")]) == 0
    err = [line for line in capsys.readouterr().err.splitlines() if "cannot move the image" in line]
    assert len(err) == 1 and err[0].startswith("leakattack: warning: --lr 1e-09 cannot move the image"), err
    assert (tmp_path / "out" / "metrics.json").exists()
