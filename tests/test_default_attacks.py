"""The default attacks a user gets from `leakattack run`: quality, and the committed reference numbers.

Each attack takes about 20-60 s on 2 cores, so these are marked slow (they still
run in the default suite).  The committed references (results/reference/) were
made by the same commands on a CPU in float64; the runs must reproduce them.
"""

import json
from pathlib import Path

import pytest

from leakattack.config import RunConfig
from leakattack.experiment import run_attack

REFERENCE = Path(__file__).resolve().parents[1] / "results" / "reference"


def _matches_reference(m: dict, name: str) -> None:
    ref = json.loads((REFERENCE / name / "metrics.json").read_text())
    assert m["psnr"] == pytest.approx(ref["psnr"], rel=1e-6, abs=1e-6)
    assert m["final_loss"] == pytest.approx(ref["final_loss"], rel=1e-6)
    assert m["iterations"] == ref["iterations"]


@pytest.mark.slow
def test_default_srht_attack_reconstructs_the_default_image(tmp_path):
    m, folder = run_attack(RunConfig(model="lenet", sketch="srht"), out=tmp_path / "srht", with_lpips=False)
    assert m["b"] == round(0.5 * m["d"])
    assert m["psnr"] >= 35.0 and m["ssim"] >= 0.95, m
    assert m["label_acc"] == 1.0
    _matches_reference(m, "lenet-srht")


@pytest.mark.slow
def test_unsketched_dlg_attack_reaches_40_db(tmp_path):
    m, folder = run_attack(RunConfig(model="lenet", sketch="none"), out=tmp_path / "none", with_lpips=False)
    assert m["psnr"] >= 40.0, m
    _matches_reference(m, "lenet-none")
