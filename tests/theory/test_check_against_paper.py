"""`leakattack check` says what the paper says and no more: Theorem 7.4's literal bound only where it applies
(R = I), Theorem 7.5's per-step claim beside the fitted rate, Definition 4.1 for every (h, g) as consistency on the
pairs measured, every check.json field documented, and a Ctrl-C never splits check.json from its figures."""

from __future__ import annotations

import copy
import re
import signal
from pathlib import Path

import pytest

from leakattack import theory
from leakattack.cli import main

DOC = Path(__file__).resolve().parents[2] / "docs" / "theory.md"


@pytest.fixture(scope="module")
def sketched():
    """A small sketched check (every field present, the unsketched comparison included)."""
    return theory.check("linreg", "gaussian", ratio=0.5, samples=3, seed=0, iterations=10, progress=False)


@pytest.fixture(scope="module")
def plain_check():
    return theory.check("linreg", "none", samples=3, seed=0, iterations=10, progress=False)


def test_theorem_74_literal_fraction_is_only_for_the_unsketched_loss(sketched):
    # Theorem 7.4 / Lemma J.5 bound ‖∇L‖²/L for L (R = I); for L_R the paper prints Lemma 7.7 only
    assert sketched["noncritical_fraction_thm74_literal"] is None
    line = next(ln for ln in theory.summary_table(sketched).splitlines() if ln.startswith("non-critical fraction"))
    assert "about R = I only" in line and "(Thm 7.4 literal)" not in line
    plain = theory.check("linreg", "none", samples=3, seed=0, iterations=10, progress=False)
    assert isinstance(plain["noncritical_fraction_thm74_literal"], float)


def test_the_histogram_draws_theorem_74s_line_only_where_it_applies(sketched, plain_check, tmp_path, monkeypatch):
    from leakattack.figures import theory as figures

    labels = {}

    def keep(fig, path, *args, **kwargs):
        labels[Path(path).stem] = [line.get_label() for ax in fig.axes for line in ax.get_lines()]

    monkeypatch.setattr(figures, "save", keep)
    figures.noncritical_hist(sketched, tmp_path / "sketched.png")
    figures.noncritical_hist(plain_check, tmp_path / "plain.png")
    assert "θ₂² (Thm 7.4 literal)" not in labels["sketched"] and "θ₂² (Thm 7.4 literal)" in labels["plain"]


def test_l1_line_gives_the_share_of_steps_that_kept_theorem_75s_per_step_bound(sketched):
    losses, q = sketched["losses_theorem_l1"], sketched["predicted_rate"]
    steps = [(a, b) for a, b in zip(losses, losses[1:]) if a > 1e-12 * losses[0]]
    want = sum(b <= q * a * (1 + 1e-6) for a, b in steps) / len(steps)
    assert sketched["predicted_rate_steps_within"] == pytest.approx(want)
    line = next(ln for ln in theory.summary_table(sketched).splitlines() if ln.startswith("GD rate, L.1 step"))
    assert f"{want:.0%} of its steps within 1 − γ" in line


def _documented() -> set[str]:
    text = DOC.read_text(encoding="utf-8")
    section = text.split("\n## check.json\n", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"`([a-z0-9_.]+)`", section))


def test_every_check_json_field_is_documented(sketched):
    res = dict(sketched, command="leakattack check")
    assert res["fields_doc"].startswith("docs/theory.md") and "points" in res["sampling"]
    names = set(res)
    for key, value in res.items():
        if isinstance(value, dict) and key != "sketch_params":  # sketch_params: the family's own names
            names |= {f"{key}.{sub}" for sub in value}
    missing = sorted(names - _documented())
    assert not missing, f"check.json fields missing from docs/theory.md's check.json section: {missing}"


def test_embedding_table_claims_consistency_on_its_pairs_and_renders():
    text = theory.embedding_markdown(trials=2, seed=0)
    assert "Definition 4.1 holds" not in text and "not a proof for all of them" in text
    rows = [ln for ln in text.splitlines() if ln.startswith("|")]
    cells = [len(re.findall(r"(?<!\\)\|", ln)) for ln in rows]  # unescaped pipes: the table's columns
    assert len(set(cells)) == 1, rows[:2]


def test_table2_semi_strong_convexity_failure_names_the_d_it_was_measured_at():
    from leakattack.theory.table2 import D_SC, _explain, functions

    fn = functions()[0]
    r = {"holds": False, "sups_by_scale": [1.0, 10.0, 100.0, 1e9], "vacuous": False,
         "counterexample": {"x": [0.0, 0.0, 1.0], "y": [0.0, 1.0, 0.0], "L(x)": 1.0, "L(y)": 1.0, "ratio": 1e9,
                            "p": 0.5}}
    assert f"at d = {D_SC}" in _explain(fn, "semi-sc.", r, True)
    assert "at d =" not in _explain(fn, "semi-s.", r, True)


def test_ctrl_c_while_writing_leaves_check_json_with_its_figures(sketched, tmp_path, monkeypatch, capsys):
    """An interrupt that comes while check.json and the figures are written waits for all three (exit 130)."""
    import leakattack.cli.check as cmd

    drawn = cmd.check_figures

    def interrupted_then_drawn(stored, out):
        signal.raise_signal(signal.SIGINT)  # Ctrl-C right after check.json
        return drawn(stored, out)

    monkeypatch.setattr(cmd, "check", lambda *a, **k: copy.deepcopy(sketched))
    monkeypatch.setattr(cmd, "check_figures", interrupted_then_drawn)
    out = tmp_path / "check"
    assert main(["check", "--model", "linreg", "--sketch", "gaussian", "--quiet", "--out", str(out)]) == 130
    assert sorted(p.name for p in out.iterdir()) == ["check.json", "convergence.png", "noncritical_hist.png"]
    assert "interrupted" in capsys.readouterr().err


def test_no_step_of_theorem_l1_from_the_samples_is_one_sentence(monkeypatch, tmp_path, capsys):
    """A sampled critical point with L_R > 0 gives theta1^2 = 0, where L.1 has no step: said, not a traceback."""
    from leakattack.theory import measure

    monkeypatch.setattr(measure, "gd_rate_theorem_l1", lambda *a, **k: None)
    out = tmp_path / "chk"
    assert main(["check", "--model", "linreg", "--samples", "3", "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no step of Theorem L.1 follows from the sampled points" in err[0], err
    assert not out.exists()


def test_a_semismooth_trajectory_fraction_below_one_says_the_trajectory_leaves_the_samples(sketched):
    def line(res):
        return next(ln for ln in theory.summary_table(res).splitlines() if ln.startswith("semi-smooth fraction"))

    below = {**sketched, "semismooth_fraction_trajectory": 0.985}
    assert "trajectory 0.985 (the trajectory leaves the sampled points, from which β and θ₂ are taken)" in line(below)
    assert "leaves the sampled points" not in line({**sketched, "semismooth_fraction_trajectory": 1.0})


def test_embedding_table_divides_by_no_zero_standard_error():
    """With few samples a sketch can give the same hᵀRᵀRg every time (uniform sampling never drawing e₁): its
    standard error is 0, and the deviation column printed a 300-digit number (|mean − hᵀg| / 1e-300) that read as a
    biased sketch; such cases are now counted, not divided by zero."""
    text = theory.embedding_markdown(trials=3, seed=0)
    row = next(ln for ln in text.splitlines() if ln.startswith("| uniform |"))
    deviation = row.split("|")[4].strip()
    assert re.fullmatch(r"\d+\.\d\d \(\d cases? without a standard error: the 3 samples were equal\)", deviation)
    assert float(deviation.split()[0]) < 10
