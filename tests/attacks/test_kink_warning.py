"""The run's returned start, stopped by L-BFGS for want of descent before its budget on a victim with units whose
derivative jumps, gets one warning proposing signed Adam; a smooth victim, a start that converged (Gauss-Newton
steps included), ran its budget or stalled by the stall window, and the other starts and label probes, get none."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import targets
from leakattack.attacks import gradient_matching as gm
from leakattack.attacks.base import AttackResult
from leakattack.channel import Channel
from leakattack.errors import SettingWarning
from leakattack.observation import ThreatModel, observe
from leakattack.sketch import get_sketch

STUCK = f"stopped at step 28: {gm.NO_DESCENT[1]} twice at one step size"
SAID = ("L-BFGS stopped at step 28 of 2000 with no descent left, on a victim whose ReLU units' derivative jumps; "
        "signed Adam steps through such kinks and is worth a second run (--recipe ig, or --optimizer adam --signed)")


class FunctionalRelu(nn.Module):
    """A ReLU called as a function: no module says so, one forward pass does."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(16, 8), nn.Linear(8, 3)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x.flatten(1))))


def _mlp(act: str):
    return targets.get_model("mlp", num_classes=3, in_shape=(1, 4, 4), hidden=8, act=act, seed=0)


def _result(stop: str = "stalled", steps: int = 28, message: str = STUCK) -> AttackResult:
    x = torch.zeros(1, 1, 4, 4)
    return AttackResult(x=x, labels=torch.zeros(1, dtype=torch.long), x0=x, losses=[1.0], iterations=steps,
                        stop_reason=stop, message=message)


@pytest.mark.parametrize("victim", [lambda: _mlp("relu"), lambda: targets.Victim.from_module(
    FunctionalRelu(), input_shape=(1, 4, 4), num_classes=3)], ids=["module", "function"])
def test_an_early_lbfgs_stop_on_a_relu_victim_proposes_signed_adam(victim):
    with pytest.warns(SettingWarning) as caught:
        gm._warn_kink(_result(), 2000, victim())
    assert [str(w.message).lower() for w in caught] == [SAID.lower()]  # the module's ReLU, or the call's relu


@pytest.mark.parametrize("act, result", [
    ("sigmoid", _result()),
    ("relu", _result(message="stopped at step 28: the lowest L_R fell by less than 2% over the last 500 steps")),
    ("relu", _result(stop="tolerance", message=f"{STUCK}; then 2 Gauss-Newton steps converged")),
    ("relu", _result(steps=2000)),
], ids=["smooth", "stall-window", "converged", "whole-budget"])
def test_no_warning_where_the_victim_is_smooth_or_lbfgs_did_not_stop_the_run_early(act, result):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        gm._warn_kink(result, 2000, _mlp(act))


def _observed(act: str):
    victim = _mlp(act).to(dtype=torch.float64)
    x = torch.rand(1, 1, 4, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    return observe(victim, x, torch.tensor([1]), Channel(get_sketch("none", victim.d, victim.d), defense=""),
                   ThreatModel(knows_labels=True))


def _kink_warnings(caught) -> list[str]:
    return [str(w.message) for w in caught if str(w.message).startswith("L-BFGS stopped at step")]


def test_reconstruct_warns_of_the_start_it_returns_with_the_runs_own_budget(monkeypatch):
    """L-BFGS told it has no descent from the start (the stop L-BFGS makes at a kink): the run stops at step 0 of its
    50, and says so once."""
    monkeypatch.setattr(gm, "_no_descent", lambda opt, row: gm.NO_DESCENT[0])
    attack = gm.GradientMatching(iterations=50, refine="none", labels="given")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = attack.reconstruct(_observed("relu"))
    assert result.stop_reason == "stalled" and result.iterations == 0
    assert [w.filename for w in caught if str(w.message).startswith("L-BFGS")] == [__file__]  # the caller's line
    assert _kink_warnings(caught) == ["L-BFGS stopped at step 0 of 50 with no descent left, on a victim whose ReLU "
                                      "units' derivative jumps; signed Adam steps through such kinks and is worth a "
                                      "second run (--recipe ig, or --optimizer adam --signed)"]


def test_a_start_stopped_early_beside_one_that_ran_its_budget_and_was_kept_gives_no_warning(monkeypatch):
    monkeypatch.setattr(gm, "_no_descent", lambda opt, row: gm.NO_DESCENT[0] if row == 0 else None)
    attack = gm.GradientMatching(iterations=30, refine="none", labels="given", restarts=2, tol=0.0, stall_window=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = attack.reconstruct(_observed("relu"))
    assert result.stop_reason == "iterations" and result.restart_stops == ["stalled", "iterations"]
    assert _kink_warnings(caught) == []
