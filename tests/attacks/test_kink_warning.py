"""L-BFGS that stops early for want of descent on a victim with units whose derivative jumps says so in one warning
and names the ig recipe, whose signed Adam steps through such kinks; a smooth victim, or a start that ran its
budget, gets none."""

from __future__ import annotations

import warnings
from types import SimpleNamespace

import pytest
from torch import nn

from leakattack import experiment
from leakattack.attacks.gradient_matching import _warn_kink
from leakattack.config import RunConfig
from leakattack.errors import SettingWarning

STUCK = "stopped at step 28: L-BFGS's line search found no lower point along its direction twice at one step size"


def _run(stop: str, steps: int, message: str = STUCK):
    return SimpleNamespace(stop=stop, steps=steps, message=message)


def test_an_early_lbfgs_stop_on_a_relu_victim_names_the_ig_recipe():
    model = nn.Sequential(nn.Flatten(), nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    with pytest.warns(SettingWarning) as caught:
        _warn_kink([_run("stalled", 40), _run("stalled", 28)], 2000, model)
    assert len(caught) == 1
    assert str(caught[0].message) == (
        "L-BFGS stopped at step 28 of 2000 with no descent left, on a victim whose ReLU units' derivative jumps; "
        "--recipe ig (signed Adam, which steps through such kinks) is worth a run beside this one")


@pytest.mark.parametrize("model, runs", [
    (nn.Sequential(nn.Linear(4, 3), nn.Sigmoid(), nn.Linear(3, 2)), [_run("stalled", 28)]),  # smooth units
    (nn.Sequential(nn.Linear(4, 3), nn.ReLU()), [_run("stalled", 600, "stopped at step 600: the lowest L_R fell "
                                                                      "by less than 2% over the last 500 steps")]),
    (nn.Sequential(nn.Linear(4, 3), nn.ReLU()), [_run("tolerance", 28, "converged at step 28")]),
    (nn.Sequential(nn.Linear(4, 3), nn.ReLU()), [_run("stalled", 2000)]),  # the whole budget
], ids=["smooth", "stall-window", "converged", "whole-budget"])
def test_no_warning_where_the_victim_is_smooth_or_lbfgs_did_not_stop_early(model, runs):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _warn_kink(runs, 2000, model)


def test_a_batch_of_four_digits_behind_a_relu_through_srht_warns_where_lbfgs_stops_early():
    """The attack-family sweep's batches of four (docs/attack.md): L-BFGS stops well before its 2000 steps."""
    p = experiment.prepare(RunConfig(model="mlp", dataset="digits", model_params={"act": "relu", "hidden": 256},
                                     batch_size=4, sketch="srht", sketch_dim=9408, iterations=2000))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = p.attack.reconstruct(p.obs)
    said = [str(w.message) for w in caught if issubclass(w.category, SettingWarning)]
    early = result.stop_reason == "stalled" and "L-BFGS" in (result.message or "") and len(result.losses) < 2000
    assert [s for s in said if s.startswith("L-BFGS stopped at step")] == ([said[-1]] if early else [])
    assert not early or "--recipe ig" in said[-1]
