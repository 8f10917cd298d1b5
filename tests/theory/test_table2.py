"""Verdict rules of leakattack.theory.table2: when a supremum is infinite, when a constant is vacuous."""

import math
from pathlib import Path

import pytest
import torch

from leakattack.seeds import torch_generator
from leakattack.theory.table2 import (
    LOWER_MIN,
    PROPS,
    PS,
    SUP_MAX,
    W,
    _pairs,
    _unbounded,
    _vacuous,
    functions,
    pair_ratios,
    table2_results,
    verdict,
)

TABLE = Path(__file__).resolve().parents[2] / "results" / "theory" / "table2.md"


def _fn(name):
    return next(f for f in functions() if f.name == name)


@pytest.fixture(scope="module")
def rows():
    # the run behind results/theory/table2.md; its cost is mostly the fixed local maximisation, not the samples
    return table2_results(samples=400, seed=0)


@pytest.mark.parametrize("sups", [
    [1.0, 5e8, 2.0, 2.0],  # a jump at an early scale, back to small later
    [4.19e298, 2.33e7, 2.33e7, 2.33e7],  # ln(wᵀx) semi-sc.: infinite at κ = 1 only
    [math.inf, 1.0, 1.0, 1.0],
    [1.0, math.nan, 1.0, 1.0],
    [1.0, 1.0, 1.0, 6.0],  # ≥ 5× over the last step
    [1.0, 2.0, 3.1, 4.7],  # ≥ 1.5× over each of the last two
])
def test_unbounded_rule_flags_any_scale_and_late_growth(sups):
    assert _unbounded(sups)


@pytest.mark.parametrize("sups", [[1.0, 1.0, 1.0, 1.0], [0.2, 0.3, 0.3, 0.31], [3e-9, 3e-9, 3e-9, 3e-9],
                                  [0.0, 0.0, 0.0, 0.0], [1e8, 1e8, 1e8, 1e8]])
def test_unbounded_rule_keeps_flat_sups_finite(sups):
    assert not _unbounded(sups)


def test_vacuous_constant_depends_on_its_role():
    # upper bounds (a, b, α, β, c, θ₂²): only a huge or non-finite value is vacuous; ≈ 0 is the strongest case
    assert not _vacuous(3e-9) and not _vacuous(0.0) and not _vacuous(SUP_MAX)
    assert _vacuous(2 * SUP_MAX) and _vacuous(math.inf) and _vacuous(-math.inf) and _vacuous(math.nan)
    # lower bound θ₁²: ≈ 0 makes θ₁²L ≤ ‖∇L‖² say nothing
    assert _vacuous(3e-9, lower=True) and _vacuous(0.0, lower=True) and _vacuous(math.inf, lower=True)
    assert not _vacuous(LOWER_MIN, lower=True) and not _vacuous(0.231, lower=True)


def test_ln_wx_semi_sc_ratio_is_infinite_where_L_y_vanishes():
    # wᵀy = 1 gives L(y) = 0: the c-term vanishes while d s² − E ≥ d s² > 0, so no c works
    fn = _fn("ln(wᵀx)")
    y = (1.0 * W)[None]
    x = (2.0 * W + 0.3 * torch.tensor([[1.0, 0.0, 0.0]], dtype=torch.float64))
    for p in PS:
        r = float(pair_ratios(fn, "semi-sc.", p, x, y)[0])
        assert r > SUP_MAX
        assert _unbounded([r, 1.0, 1.0, 1.0])


def test_ln_wx_is_not_semi_strongly_convex_as_the_paper_says():
    fns = functions()
    i, j = next(k for k, f in enumerate(fns) if f.name == "ln(wᵀx)"), PROPS.index("semi-sc.")
    v = verdict(fns[i], "semi-sc.", 400, 17 * i + j)  # the cell of table2_results(samples=400, seed=0)
    assert fns[i].paper[j] is False
    assert not v["holds"] and "counterexample" in v
    assert abs(v["counterexample"]["L(y)"]) < 1e-6  # the blow-up sits where L(y) ≈ 0


def test_no_check_mark_rests_on_a_vacuous_constant(rows):
    for row in rows:
        for prop in PROPS:
            v = row["res"][prop]
            if not v["holds"]:
                continue
            where = f"{row['fn'].name} ({row['fn'].assumption}) {prop}"
            if prop == "non-critical":
                assert (LOWER_MIN <= v["theta1_sq"] and math.isfinite(v["theta2_sq"])
                        and v["theta2_sq"] <= SUP_MAX), where
            else:
                assert math.isfinite(v["constant"]) and v["constant"] <= SUP_MAX, where
                assert all(s <= SUP_MAX for s in v["sups_by_scale"]), where


def test_tiny_upper_bound_constants_are_round_off_on_a_zero_supremum(rows):
    # where a ✓ rests on an upper-bound constant < LOWER_MIN, pairs away from round-off (‖x − y‖ ≥ 1e-2)
    # give a ratio ≤ 0 up to round-off: the property holds with constant 0, not vacuously
    tiny = [(row["fn"], prop) for row in rows for prop in PROPS[:3]
            if row["res"][prop]["holds"] and row["res"][prop]["constant"] < LOWER_MIN]
    assert ("ln(1 + eˣ)", "semi-sc.") in [(f.name, p) for f, p in tiny]
    for fn, prop in tiny:
        x, y = _pairs(fn, 500, 1.0, torch_generator(5))
        keep = (x - y).norm(dim=1) >= 1e-2
        for p in PS:
            assert float(pair_ratios(fn, prop, p, x[keep], y[keep]).max()) <= 1e-10, (fn.name, prop, p)



def test_committed_table_matches_the_verdicts(rows):
    # results/theory/table2.md is `leakattack check --table2 --samples 400 --seed 0` of this code
    lines = [ln for ln in TABLE.read_text().splitlines() if ln.startswith("| ") and " / " in ln]
    assert len(lines) == len(rows)
    for ln, row in zip(lines, rows):
        cells = [c.strip().strip("*") for c in ln.strip("|").split("|")][2:]
        assert [c.startswith("✓") for c in cells] == [row["res"][p]["holds"] for p in PROPS], ln


def test_a_pair_where_the_function_overflows_is_left_out_of_the_supremum():
    """cosh(wᵀx) at wᵀx = 1e3 is inf in float64: such a pair is NaN (left out), not a counterexample."""
    fn = next(f for f in functions() if f.name == "cosh(wᵀx)" and f.assumption == "—")
    x = (1e3 * W)[None]
    y = (0.5 * W)[None]
    for prop in ("semi-s.", "semi-Lg.", "semi-sc."):
        assert math.isnan(float(pair_ratios(fn, prop, 0.5, x, y)[0])), prop
        assert math.isfinite(float(pair_ratios(fn, prop, 0.5, y, 0.9 * y)[0])), prop


def test_the_check_report_says_where_gamma1_is_zero_that_lemma_7_7_does_not_apply():
    from leakattack.theory.report import _singular

    assert "γ₁ = 0: R is rank deficient, so Lemma 7.7" in _singular({"gamma1": 0.0, "gamma2": 2.449})
    assert _singular({"gamma1": 0.67, "gamma2": 1.56}) == ""
