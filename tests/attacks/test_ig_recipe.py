"""The ig recipe rebuilds an image through a deep BatchNorm network (a cheap case of what it is for).

An untrained CIFAR ResNet-8 at 16 px with BatchNorm in eval mode (running statistics, the setting of
breaching's honest-but-curious server), photo 0, the recipe's own step, TV weight and schedule with a
400-step budget: 12 s of CPU (user + system, with start-up), 70-100 s of wall time under a load of 7 on
the 2 cores (so marked slow).  Measured (examples/ig_recipe.toml): 13.7 dB against 9.0 dB
at the start and 11.1 dB for the data set's mean image (SSIM 0.30); TV 0.1 or more ends at
11.1 dB, a flat image.  The margins below leave about 1.5 dB of that.
"""

import pytest

from leakattack.attacks import get_recipe
from leakattack.config import RunConfig
from leakattack.experiment import run_attack


@pytest.mark.slow
def test_ig_recipe_rebuilds_a_photo_through_a_small_batchnorm_resnet(tmp_path):
    cfg = RunConfig(model="resnet_cifar", model_params={"depth": 8}, image_size=16, bn="eval", sketch="none",
                    iterations=400, threads=1)
    m, _ = run_attack(cfg, out=tmp_path / "ig", with_lpips=False)
    ig = get_recipe("ig")
    assert (m.label_acc, m.iterations) == (1.0, 400)
    assert m.psnr >= m.baseline_start_psnr + 3.0, m
    assert m.psnr >= m.baseline_mean_psnr + 1.0, m
    assert m.ssim >= 0.15, m
    # the run followed the recipe's settings, not others
    config = (tmp_path / "ig" / "config.json").read_text()
    assert f'"lr": {ig.lr}' in config and f'"tv": {ig.tv}' in config
