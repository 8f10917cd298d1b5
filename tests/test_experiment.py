"""One attack end to end through the API: restarts, reproducibility from config.json."""

import json

from leakattack.config import RunConfig
from leakattack.experiment import run_attack


def _cfg(**kw):
    base = dict(model="lenet", sketch="countsketch", dataset="digits", iterations=15, trace_every=5)
    base.update(kw)
    return RunConfig(**base)


def test_restarts_keep_the_start_with_the_lowest_loss(tmp_path):
    m, _ = run_attack(_cfg(restarts=3), out=tmp_path / "r", with_lpips=False)
    assert len(m["restart_losses"]) == 3
    assert m["final_loss"] == min(m["restart_losses"])
    assert len(set(m["restart_losses"])) == 3  # the starts differ


def test_config_json_reproduces_the_metrics(tmp_path):
    m1, folder = run_attack(_cfg(), out=tmp_path / "a", with_lpips=False)
    cfg = RunConfig.from_dict(json.loads((folder / "config.json").read_text())["run"])
    m2, _ = run_attack(cfg, out=tmp_path / "b", with_lpips=False)
    for key in ("psnr", "ssim", "mse", "final_loss", "iterations", "labels_attack"):
        assert m1[key] == m2[key], key


def test_trace_has_every_step_and_psnr_every_k(tmp_path):
    _, folder = run_attack(_cfg(), out=tmp_path / "t", with_lpips=False)
    rows = (folder / "trace.csv").read_text().strip().splitlines()
    assert rows[0] == "step,loss,psnr"
    assert len(rows) == 1 + 16  # steps 0..15
    with_psnr = [r.split(",")[0] for r in rows[1:] if r.split(",")[2]]
    assert with_psnr == ["0", "5", "10", "15"]
