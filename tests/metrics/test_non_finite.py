"""A reconstruction with pixels that are not finite is scored as not a number, drawn and written like any other,
and a closed-form attack on a message that is not finite ends with its message, not a traceback."""

from __future__ import annotations

import json
import math

import pytest
import torch

from leakattack import cli, metrics
from leakattack.attacks import Attack, AttackResult, register_attack
from leakattack.config import RunConfig
from leakattack.experiment import run_attack


class Spoilt(Attack):
    """Returns a random batch whose first image holds one pixel of ``Spoilt.value``."""

    name = "spoilt"
    value = math.nan

    def __init__(self, **settings):  # gradient matching's settings, which the run passes an optimising attack
        self.settings = settings

    def reconstruct(self, obs, *, monitor=None, monitor_every=10, progress=False):
        g = torch.Generator().manual_seed(0)
        x0 = torch.rand(obs.input_shape, generator=g, dtype=torch.float64)  # the batch's shape
        x = x0.clone()
        x[0, 0, 0, 0] = self.value
        return AttackResult(x=x, labels=None, x0=x0, losses=[1.0, 0.5], iterations=1, best_step=1)


def test_in_range_keeps_what_is_not_finite_as_nan():
    x = torch.tensor([-0.5, 0.25, 2.0, math.inf, -math.inf, math.nan])
    got = metrics.in_range(x)
    assert got[:3].tolist() == [0.0, 0.25, 1.0] and bool(got[3:].isnan().all())


@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_a_non_finite_pixel_scores_its_image_as_not_a_number_and_the_run_is_written(fresh_registries, tmp_path,
                                                                                     value):
    register_attack("spoilt", type("SpoiltV", (Spoilt,), {"value": value, "name": "spoilt"}))
    cfg = RunConfig(attack="spoilt", dataset="digits", batch_size=2, image_index=9, threads=1, sketch="none")
    m, folder = run_attack(cfg, out=tmp_path / "run", with_lpips=False)
    k = m.match.index(0)  # the spoilt image's place in the truth's order
    assert m.psnr_each[k] is None and m.ssim_each[k] is None and m.psnr_each[1 - k] is not None
    assert m.psnr is None and m.verdict == "not rebuilt"
    assert (folder / "reconstruction.png").stat().st_size > 0
    assert json.loads((folder / "metrics.json").read_text())["psnr"] is None


def test_an_optimising_attack_whose_class_takes_no_settings_is_one_sentence(fresh_registries, tmp_path, capsys):
    class Bare(Attack):
        name = "bare"

        def reconstruct(self, obs, *, monitor=None, monitor_every=10, progress=False):
            raise AssertionError("not reached")

    register_attack("bare", Bare)
    assert cli.main(["run", "--attack", "bare", "--quiet", "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "attack 'bare' is not closed-form, so the run passes it gradient matching's" in err[0]
    assert "accept them (**settings) or set closed_form = True" in err[0] and not (tmp_path / "run").exists()


def test_imprint_on_a_message_drowned_in_infinite_noise_ends_with_its_message(tmp_path, capsys):
    out = tmp_path / "run"
    rc = cli.main(["run", "--model", "lenet", "--sketch", "none", "--attack", "imprint", "--dataset", "digits",
                   "--defense", "gaussian:sigma=1e308", "--threads", "1", "--no-lpips", "--quiet", "--out", str(out)])
    captured = capsys.readouterr()
    assert rc == 0 and "Traceback" not in captured.err
    assert captured.out.startswith("not rebuilt") and "(diverged)" in captured.out
    assert json.loads((out / "metrics.json").read_text())["stop_reason"] == "diverged"


@pytest.mark.parametrize("sigma, dtype, refused", [
    ("1e306", "float64", True),  # squares past float64's range: refused before the solve, not a failed SVD
    ("1e25", "float32", False),  # past float32's squares, within float64's, in which the closed forms solve
])
def test_a_closed_form_refuses_a_message_whose_squares_overflow_float64_only(tmp_path, capsys, sigma, dtype, refused):
    out = tmp_path / "run"
    rc = cli.main(["run", "--model", "logreg", "--dataset", "digits", "--attack", "analytic", "--dtype", dtype,
                   "--defense", f"gaussian:sigma={sigma}", "--threads", "1", "--no-lpips", "--quiet",
                   "--out", str(out)])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    if refused:
        assert rc == 2 and "whose squares overflow float64, in which the closed forms solve" in err
        assert not out.exists()
    else:
        assert rc == 0 and json.loads((out / "metrics.json").read_text())["verdict"] == "not rebuilt"
