"""An attack of one's own that leaves AttackResult's ``iterations`` and ``best_step`` out is read from its losses:
its run reported "nothing was attacked: the objective never went below its start value" beside a loss that fell from
20 to 1 (both fields defaulted to 0, so its final loss was its start's)."""

import json
import math

import torch

from leakattack import cli
from leakattack.attacks import Attack, AttackResult, register_attack


def test_left_out_steps_are_read_from_the_losses():
    x = torch.zeros(1, 1, 2, 2)
    r = AttackResult(x=x, labels=None, x0=x, losses=[20.0, 3.0, 1.0, 1.0, 2.0])
    assert (r.iterations, r.best_step, r.final_loss) == (4, 2, 1.0)
    r = AttackResult(x=x, labels=None, x0=x, losses=[math.nan, 5.0, math.inf, 4.0])
    assert (r.iterations, r.best_step) == (3, 3)
    r = AttackResult(x=x, labels=None, x0=x, losses=[math.nan])
    assert (r.iterations, r.best_step) == (0, 0)
    # given, they are kept as they are
    r = AttackResult(x=x, labels=None, x0=x, losses=[2.0, 1.0, 0.5], iterations=7, best_step=1)
    assert (r.iterations, r.best_step) == (7, 1)


class Descent(Attack):
    """Steps from a grey start toward nothing in particular, its loss falling 20, 19, ..., 1."""

    name = "descent"

    def __init__(self, **settings):
        pass

    def reconstruct(self, obs, *, monitor=None, monitor_every=10, progress=False):
        x0 = torch.full((obs.batch_size, *obs.victim.input_shape), 0.5, dtype=obs.y.dtype)
        x = (x0 + 0.1).clone()
        return AttackResult(x=x, labels=obs.labels, x0=x0, losses=[float(v) for v in range(20, 0, -1)],
                            message="descent")


def test_a_run_of_such_an_attack_reports_its_steps_its_lowest_loss_and_that_it_returned_no_labels(
        tmp_path, capsys, fresh_registries):
    """Descent returns the labels it was granted, none here (AttackResult allows None): the summary read 'label
    given' beside a label mode that granted none."""
    register_attack("descent", Descent)
    out = tmp_path / "run"
    assert cli.main(["run", "--attack", "descent", "--dataset", "digits", "--quiet", "--no-lpips",
                     "--out", str(out)]) == 0
    said = capsys.readouterr().out
    assert "nothing was attacked" not in said and "19 it" in said
    assert "| no labels returned |" in said and "label given" not in said
    m = json.loads((out / "metrics.json").read_text())
    assert m["iterations"] == 19 and m["final_loss"] == 1.0 and m.get("attacked") is not False
    assert m["labels_attack"] is None and m["label_mode"] != "given"


class LateNaN:
    """A prior of one's own that is finite for its first three calls and NaN after."""

    def __init__(self, weight, *, obs=None):
        self.w, self.calls = weight, 0

    def __call__(self, x):
        self.calls += 1
        return self.w * x.mean() * (float("nan") if self.calls > 3 else 1.0)


def test_a_prior_that_turns_nan_is_named_as_the_cause_not_the_step_size(tmp_path, capsys, fresh_registries):
    """Adam read 'diverged ... (L_R = nan) ... a smaller --lr may get closer' and L-BFGS 'stalled' without a word of
    NaN, where the matching term stayed finite and the prior's value turned NaN."""
    from leakattack.attacks.priors import register_prior
    from leakattack.cli.run import CAUSED_FAILURE_NOTE, FAILURE_NOTE

    register_prior("latenan", LateNaN, weight=1e-3)
    for optimizer in ("adam", "lbfgs"):
        out = tmp_path / optimizer
        assert cli.main(["run", "--prior", "latenan", "--iterations", "8", "--optimizer", optimizer, "--quiet",
                         "--no-lpips", "--out", str(out)]) == 0
        err = capsys.readouterr().err
        assert "the search stopped where the latenan prior's value turned NaN or infinite, which no step size or " \
            "budget mends" in err
        assert "a smaller --lr" not in err and FAILURE_NOTE not in err and CAUSED_FAILURE_NOTE in err
        assert json.loads((out / "metrics.json").read_text())["prior_not_finite"] == "latenan"
        # the stop's own note names it too, after a stall as after a divergence (a rebuilt run has no other note)
        assert "the latenan prior's value was NaN or infinite where the search stopped" in err


class OnceNaN(LateNaN):
    """NaN at its fifth call only: an L-BFGS line search's trial that the search backs away from."""

    def __call__(self, x):
        self.calls += 1
        return self.w * x.mean() * (float("nan") if self.calls == 5 else 1.0)


def test_a_prior_that_was_nan_at_one_point_the_search_went_on_from_is_not_named(tmp_path, capsys, fresh_registries):
    from leakattack.attacks.priors import register_prior

    register_prior("oncenan", OnceNaN, weight=1e-3)
    out = tmp_path / "run"
    assert cli.main(["run", "--prior", "oncenan", "--iterations", "30", "--quiet", "--no-lpips", "--out",
                     str(out)]) == 0
    err = capsys.readouterr().err
    m = json.loads((out / "metrics.json").read_text())
    assert m["iterations"] == 30 and "prior_not_finite" not in m and "oncenan prior's value" not in err
