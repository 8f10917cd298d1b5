"""The issue's quality bars, measured with the defaults a user gets from `leakattack run`.

Each attack takes about a minute on 2 cores, so these are marked slow (they still
run in the default suite).
"""

import pytest

from leakattack.config import RunConfig
from leakattack.experiment import run_attack


@pytest.mark.slow
def test_default_srht_attack_reconstructs_the_default_image(tmp_path):
    m, folder = run_attack(RunConfig(model="lenet", sketch="srht"), out=tmp_path / "srht", with_lpips=False)
    assert m["b"] == round(0.5 * m["d"])
    assert m["psnr"] >= 35.0 and m["ssim"] >= 0.95, m
    assert m["label_acc"] == 1.0


@pytest.mark.slow
def test_unsketched_dlg_attack_reaches_40_db(tmp_path):
    m, folder = run_attack(RunConfig(model="lenet", sketch="none"), out=tmp_path / "none", with_lpips=False)
    assert m["psnr"] >= 40.0, m
