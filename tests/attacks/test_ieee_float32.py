"""On a GPU a run computes float32 in IEEE float32: torch lets cuDNN round float32 convolutions to TF32 by default.
The switches are set for the run and the caller's given back; on a CPU nothing changes."""

import torch

from leakattack import experiment
from leakattack.config import RunConfig


def _now():
    return [getattr(obj, name) for obj, name, _ in experiment._tf32_switches()]


def test_a_gpu_device_sets_ieee_float32_and_the_settings_before_come_back():
    before = experiment.float32_settings()
    try:
        assert experiment.ieee_float32(torch.device("cpu")) == [] and _now() == [v for _, _, v in before]
        saved = experiment.ieee_float32(torch.device("cuda"))  # sets the switches; no GPU is touched
        assert _now() == [v for _, _, v in experiment._tf32_switches()]
        assert [v for _, _, v in saved] == [v for _, _, v in before]
    finally:
        experiment.restore_float32(before)
    assert _now() == [v for _, _, v in before]


def test_a_run_gives_the_caller_s_settings_back(tmp_path, monkeypatch):
    """prepare() sets them on a GPU; run_attack restores them as it restores the thread count."""
    before = experiment.float32_settings()
    called = []
    monkeypatch.setattr(experiment, "ieee_float32", lambda device: called.append(device) or [
        setattr(obj, name, value) for obj, name, value in experiment._tf32_switches()])
    try:
        experiment.run_attack(RunConfig(iterations=2, threads=1), out=tmp_path / "run", with_lpips=False)
        assert called == [torch.device("cpu")]
        assert _now() == [v for _, _, v in before]
    finally:
        experiment.restore_float32(before)
