"""The default attacks a user gets from `leakattack run`: the quality they reach on any machine, and the committed
reference numbers as ranges.

Each attack is a thousand or more L-BFGS steps and Gauss-Newton steps (about 20-60 s on 2 cores, so these are
marked slow; they still run in the default suite).  Another CPU, SIMD width or thread count changes the last bits
of a reduction and the trajectory with them, so a run is compared with results/reference/ by the quality it
reaches, within the tolerances of :mod:`leakattack.results.reference`, never bit for bit.  Bit-identical results
are promised only for the same seed on the same machine with the same threads, which the last test checks on a
short run.
"""

import json
from dataclasses import replace
from pathlib import Path

import pytest

from leakattack.config import RunConfig
from leakattack.experiment import run_attack
from leakattack.metrics import RunMetrics
from leakattack.results.reference import EXACT_PSNR, compare

REFERENCE = Path(__file__).resolve().parents[1] / "results" / "reference"


def _committed(name: str) -> RunMetrics:
    return RunMetrics.from_dict(json.loads((REFERENCE / name / "metrics.json").read_text()))


def _agrees_with_reference(m: RunMetrics, name: str) -> None:
    result = compare(name, _committed(name), m)
    assert result.agrees, "\n".join(result.lines)


@pytest.mark.slow
def test_default_srht_attack_reconstructs_the_default_image(tmp_path):
    m, folder = run_attack(RunConfig(model="lenet", sketch="srht"), out=tmp_path / "srht", with_lpips=False)
    assert m.b == round(0.5 * m.d)
    assert m.psnr >= 45.0 and m.ssim >= 0.99, m
    assert m.label_acc == 1.0
    # L-BFGS alone stalls near 52 dB; Gauss-Newton steps (from its 1000-step iterate, or after the whole budget
    # where those do not converge) take it to the image itself, where J has full rank
    assert m.gauss_newton is not None and m.gauss_newton["kept"] and m.stop_reason == "tolerance", m
    assert m.psnr >= 100.0, m
    assert m.unique is True and m.jacobian_rank == m.unknowns == 3072
    _agrees_with_reference(m, "lenet-srht")


@pytest.mark.slow
def test_unsketched_dlg_attack_reaches_45_db(tmp_path):
    m, folder = run_attack(RunConfig(model="lenet", sketch="none"), out=tmp_path / "none", with_lpips=False)
    assert m.psnr >= 45.0 and m.ssim >= 0.99, m
    assert m.label_acc == 1.0
    _agrees_with_reference(m, "lenet-none")


def test_same_seed_same_machine_same_threads_gives_identical_results(tmp_path):
    cfg = RunConfig(model="lenet", sketch="srht", iterations=150, threads=1)
    (m1, f1), (m2, f2) = (run_attack(cfg, out=tmp_path / name, with_lpips=False) for name in ("a", "b"))
    unmeasured = dict(wall_s=0.0, attack_s=0.0, peak_memory=None)  # all but the timings and the memory peak
    assert replace(m1, **unmeasured) == replace(m2, **unmeasured)
    assert (f1 / "reconstruction.pt").read_bytes() == (f2 / "reconstruction.pt").read_bytes()
    assert m1.final_loss < 1e-2 * m1.initial_loss  # 150 steps move far from the start (L_R 136 -> 0.06)


def test_a_regenerated_reference_is_compared_by_quality_and_called_identical_only_when_it_is():
    committed = _committed("lenet-srht")
    same = compare("lenet-srht", committed, replace(committed))
    assert same.agrees and same.identical and same.lines[-1].endswith("the same to the last bit")
    other = replace(committed, psnr=committed.psnr - 0.6, ssim=committed.ssim - 1e-5,
                    final_loss=committed.final_loss * 1.7, iterations=committed.iterations - 284)
    near = compare("lenet-srht", committed, other)
    assert near.agrees and not near.identical and "agrees within the tolerances" in near.lines[-1]
    assert any(line.startswith("psnr:") and "-0.6 dB" in line and "within" in line for line in near.lines)
    # the committed run ends at the image to round-off (Gauss-Newton): any two PSNRs of at least EXACT_PSNR agree
    assert committed.psnr >= EXACT_PSNR
    assert compare("lenet-srht", committed, replace(committed, psnr=EXACT_PSNR)).agrees
    far = compare("lenet-srht", committed, replace(committed, psnr=EXACT_PSNR - 0.1))
    assert not far.agrees and "DISAGREES" in far.lines[-1]
    stalled = replace(committed, psnr=52.6)  # where L-BFGS alone stalls
    assert not compare("lenet-srht", stalled, replace(stalled, psnr=45.0)).agrees
    assert compare("lenet-srht", stalled, replace(stalled, psnr=47.0)).agrees
    wrong_label = compare("lenet-srht", committed, replace(committed, label_acc=0.0))
    assert not wrong_label.agrees
