"""Tests of leakattack.theory: the measured constants obey the paper's statements where they should."""

import json

import numpy as np
import pytest
import torch

from leakattack import theory
from leakattack.cli import main
from leakattack.config import ConfigError
from leakattack.figures.theory import check_figures
from leakattack.results import read_json
from leakattack.sketch import get_sketch, sketch_dim
from leakattack.theory.table2 import PROPS, functions, verdict


def test_l1_rate_is_vacuous_with_theorem_74_constants():
    # a = 2(β + θ₂) with β ≥ θ₂ ≥ θ₁ makes θ₁² > aθ₂ impossible (Theorem 7.5's condition)
    a, b = theory.semismooth_constants(beta=2.0, theta2=1.5)
    assert theory.gd_rate_theorem_l1(a, b, 1.0, 1.5 ** 2) is None
    eta, gamma = theory.gd_rate_theorem_l1(0.0, 1.0, 1.0, 4.0)
    assert eta == pytest.approx(1.0 / 8.0) and gamma == pytest.approx(1.0 / 16.0)


def test_linear_rate_recovers_geometric_decay():
    assert theory.linear_rate(10.0 * 0.9 ** np.arange(50)) == pytest.approx(0.9, rel=1e-9)


def test_lanczos_extremes_match_eigvalsh():
    g = torch.Generator().manual_seed(0)
    A = torch.randn(40, 30, generator=g, dtype=torch.float64)
    K = A.T @ A
    lo, hi = theory.lanczos_extremes(lambda v: K @ v, 30, 30, g)
    ev = torch.linalg.eigvalsh(K)
    assert lo == pytest.approx(float(ev[0]), rel=1e-6) and hi == pytest.approx(float(ev[-1]), rel=1e-8)


def test_jacobian_products_match_exact_kernel_on_linreg():
    prob = theory.build_problem("linreg", "gaussian", 0.5, seed=0)
    x = prob.x_true + 0.3
    exact = theory.kernel_eigs(prob, x, torch.Generator().manual_seed(0))
    assert exact["method"] == "exact"
    lz = theory.kernel_eigs(prob, x, torch.Generator().manual_seed(0), lanczos_k=64, exact_limit=0)  # matrix-free
    assert lz["method"].startswith("Lanczos")
    for k in ("k_min", "k_max", "kr_min", "kr_max"):
        assert lz[k] == pytest.approx(exact[k], rel=1e-6)


def test_srht_singular_values_are_flat():
    c = theory.sketch_constants(get_sketch("srht", 64, 16, 1), torch.Generator().manual_seed(0))
    assert c["gamma1"] == pytest.approx(c["gamma2"], rel=1e-5) and c["tau"] == c["gamma2"]


def test_linreg_in_paper_regime_is_noncritical_and_converges_linearly():
    # d = 16 ≤ m = 64: every sampled point obeys 4θ₁² ≤ ‖∇L‖²/L ≤ 4θ₂² (Lemma 7.7, R = I; float64, rtol 1e-6)
    r = theory.check("linreg", "none", samples=60, seed=0, iterations=200, progress=False)
    assert r["d"] <= r["m"]
    assert r["noncritical_fraction"] == 1.0
    assert r["noncritical_fraction_trajectory"] == 1.0
    assert r["semismooth_fraction"] == 1.0
    # Theorem L.1 with the measured constants: observed per-step factor no worse than predicted 1 − γ
    assert 0 < r["predicted_rate"] < 1
    assert r["observed_rate"] <= r["predicted_rate"] + 1e-9
    assert r["losses_theorem_l1"][-1] < 1e-10 * r["losses_theorem_l1"][0]


def test_sketched_linreg_obeys_lemma_77():
    r = theory.check("linreg", "gaussian", ratio=0.5, samples=40, seed=1, iterations=150, progress=False)
    assert r["b"] <= r["m"] and r["gamma1"] > 0
    assert r["noncritical_fraction_sketched_kernel"] == 1.0
    assert r["noncritical_fraction"] == 1.0
    assert r["observed_rate_tuned"] < 1 and r["observed_rate_unsketched_tuned"] < 1


def test_theorem_74_literal_noncritical_upper_bound_fails():
    # the factor 2 of ∇‖·‖²: ‖∇L‖²/L exceeds θ₂² of Theorem 7.4 at the sampled points
    r = theory.check("linreg", "none", samples=20, seed=0, iterations=20, progress=False)
    assert r["noncritical_fraction_thm74_literal"] < 1.0


def test_embedding_unbiased_and_a_within_table1_for_gaussian():
    r = theory.measure_embedding("gaussian", d=32, b=8, trials=500, seed=0)
    for row in r["rows"]:
        assert abs(row["mean"] - row["hg"]) < 5 * row["mean_se"] + 1e-12
    assert r["a_max"] <= theory.TABLE1_A["gaussian"] * 1.3  # sampling error of 500 trials


def test_table2_square_norm_has_all_four_properties():
    fn = functions()[0]
    assert all(verdict(fn, p, 100, 0)["holds"] for p in PROPS)


def test_table2_relu_is_not_noncritical_with_counterexample():
    relu = [f for f in functions() if f.name.startswith("ReLU")][0]
    v = verdict(relu, "non-critical", 100, 0)
    assert not v["holds"] and "counterexample" in v


def test_check_cli_writes_json_and_figures(tmp_path, capsys):
    rc = main(["check", "--model", "linreg", "--sketch", "none", "--samples", "8", "--out", str(tmp_path), "--quiet"])
    assert rc == 0
    data = json.loads((tmp_path / "check.json").read_text())
    for k in ("beta", "theta1_sq", "theta2_sq", "tau", "gamma1", "gamma2", "noncritical_fraction",
              "semismooth_fraction", "observed_rate", "predicted_rate", "samples"):
        assert k in data
    assert (tmp_path / "noncritical_hist.png").stat().st_size > 0
    assert (tmp_path / "convergence.png").stat().st_size > 0
    assert "not proofs" in capsys.readouterr().out


def test_a_prediction_its_own_run_breaks_says_so_and_names_the_premise_it_broke(tmp_path, capsys):
    """One sample gives constants the L.1 run leaves: the line says BROKEN with the premise it broke (all its points'
    ratios outside the one sampled ratio), not a bare "predicted <=" that the observed rate exceeds; a held
    prediction says holds.  The run's pairs count above the round-off floor only: the pairs at L near 1e-33 had
    read b = 6.3, round-off over steps of 1e-16, where those above need 1.57 < 1.98."""
    assert main(["check", "--model", "linreg", "--samples", "1", "--out", str(tmp_path / "one"), "--quiet"]) == 0
    data = json.loads((tmp_path / "one" / "check.json").read_text())
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.startswith("GD rate, L.1 step"))
    # one sample makes no pair: its beta_pairs read 0, as if measured
    assert data["beta_pairs"] is None and data["beta"] == data["beta_power"] and "(pairs —, " in out
    assert data["observed_rate"] > data["predicted_rate"] and data["predicted_rate_holds"] is False
    assert data["l1_trajectory_b"] < 1.1 * data["b_used_for_eta"]  # measured 1.57 against 1.98
    assert data["l1_trajectory_ratios_inside"] < 0.5  # measured 0: the premise the run broke
    assert "BROKEN: the constants measured on the samples do not hold along this run" in line
    assert "outside the sampled range" in line
    assert main(["check", "--model", "linreg", "--samples", "8", "--out", str(tmp_path / "eight"), "--quiet"]) == 0
    data = json.loads((tmp_path / "eight" / "check.json").read_text())
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("GD rate, L.1 step"))
    assert line.endswith("; holds") == data["predicted_rate_holds"] and ("BROKEN" in line) != line.endswith("holds")


def test_tables_record_their_own_folder_and_refuse_one_sample(tmp_path, capsys):
    """The recorded command names the --out given; one sample has no standard error; a flag the tables do not
    read is said to change nothing."""
    assert main(["check", "--embedding", "--samples", "20", "--model", "lenet", "--out", str(tmp_path / "e"),
                 "--quiet"]) == 0
    assert f"--out {tmp_path / 'e'}`" in (tmp_path / "e" / "embedding.md").read_text()
    assert "--model changes nothing with --table2 or --embedding" in capsys.readouterr().err
    assert main(["check", "--embedding", "--samples", "1", "--out", str(tmp_path / "one")]) == 2
    assert "need at least 2 samples" in capsys.readouterr().err and not (tmp_path / "one").exists()


@pytest.mark.parametrize("args", [
    ["--model", "resnet"], ["--sketch", "nope"], ["--samples", "0"], ["--sketch-ratio", "0"], ["--sketch-ratio", "1.5"],
])
def test_check_cli_rejects_bad_input_with_exit_2(args, tmp_path, capsys):
    assert main(["check", *args, "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("leakattack: error:") and err.count("\n") == 1
    assert not (tmp_path / "x").exists()


def test_build_problem_takes_b_from_sketch_dim_and_refuses_b_below_one():
    prob = theory.build_problem("linreg", "gaussian", 0.5, seed=0)
    assert prob.b == sketch_dim(0.5, prob.d) == 8 and prob.victim.task == "regression"
    with pytest.raises(ConfigError, match="gives b < 1"):
        theory.build_problem("linreg", "gaussian", 0.01, seed=0)  # 0.16 rounds to b = 0 for d = 16


def test_check_figures_are_drawn_from_stored_json_with_nulls(tmp_path):
    r = theory.check("linreg", "none", samples=8, seed=0, iterations=20, progress=False)
    r["ratios"].append(float("nan"))  # stored as null
    path = theory.write_check(r, tmp_path)
    assert read_json(path)["ratios"][-1] is None
    for png in check_figures(path, tmp_path):
        assert png.stat().st_size > 0


def test_the_trajectory_pairs_stop_at_the_round_off_floor_as_its_ratios_do(tmp_path):
    """Through srht (20 samples) 10 of 800 trajectory pairs had failed semi-smoothness, all at L of 4e-32 to 2e-31
    and steps of 1e-16: round-off, read as the trajectory leaving the sampled points."""
    assert main(["check", "--model", "linreg", "--sketch", "srht", "--samples", "20", "--out", str(tmp_path),
                 "--quiet"]) == 0
    data = json.loads((tmp_path / "check.json").read_text())
    assert data["semismooth_fraction_trajectory"] == 1.0
    assert 0 < data["trajectory_pairs"] <= data["trajectory_points"]


def test_a_rank_deficient_sketch_has_gamma1_zero_in_every_number_the_check_writes():
    """Round-off of a 0 (9e-16) was kept as gamma1: the summary called it 0 while check.json gave a Lemma 7.7 lower
    bound of 2e-30 and a worst lower ratio of 1.7e30."""
    from types import SimpleNamespace

    from leakattack.theory.measure import sketch_constants

    R = torch.tensor([[1.0, 2.0, 0.0], [2.0, 4.0, 0.0]], dtype=torch.float64)  # rank 1 of b = 2 rows
    R[1] += 1e-17  # not exactly dependent in floating point
    fake = SimpleNamespace(kind="gaussian", b=2, d=3, to_dense=lambda: R)
    got = sketch_constants(fake, torch.Generator().manual_seed(0))
    assert got["gamma1"] == 0.0 and got["gamma2"] == pytest.approx(5.0)
    R = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1e-10, 0.0]], dtype=torch.float64)  # full rank, only ill-conditioned
    fake = SimpleNamespace(kind="gaussian", b=2, d=3, to_dense=lambda: R)
    assert sketch_constants(fake, torch.Generator().manual_seed(0))["gamma1"] == pytest.approx(1e-10)
