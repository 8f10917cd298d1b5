"""Figures of a theory check, drawn from its stored result (check.json) only.

``noncritical_hist.png``: ‖∇L_R‖²/L_R at the sampled points and along the GD
trajectories against Lemma 7.7's and Theorem 7.4's bounds; ``convergence.png``:
L_R(x_t) of the GD runs against the predicted linear rate.  Values stored as
null (non-finite floats) are skipped.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..results import read_json
from .common import plt, save

#: the figure files a check folder gets, in the order they are written
CHECK_FIGURES = ("noncritical_hist.png", "convergence.png")


def _finite(values) -> list[float]:
    return [v for v in values if v is not None and np.isfinite(v)]


def _result(source) -> dict:
    """A check's result dict, or the path of its check.json."""
    return source if isinstance(source, dict) else read_json(source)


def noncritical_hist(source, path) -> None:
    """Histogram of ‖∇L_R(x)‖²/L_R(x) with the non-critical bounds, written to ``path``."""
    res = _result(source)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    vals = np.array([v for v in _finite(res["ratios"] + res["trajectory_ratios"]) if v > 0])
    bins = np.logspace(np.log10(vals.min()) - 0.1, np.log10(max(vals.max(), res["noncritical_bounds"][1])) + 0.1, 40)
    ax.hist(np.array([v for v in _finite(res["ratios"]) if v > 0]), bins=bins, alpha=0.7, label="sampled x")
    ax.hist(np.array(_finite(res["trajectory_ratios"])), bins=bins, alpha=0.5, label="GD trajectory")
    lo, hi = res["noncritical_bounds"]
    if lo > 0:
        ax.axvline(lo, color="k", ls="--", label="4θ₁²γ₁² (Lemma 7.7)")
    ax.axvline(hi, color="k", ls="-", label="4θ₂²γ₂² (Lemma 7.7)")
    if res.get("noncritical_fraction_thm74_literal") is not None:  # Theorem 7.4 is about L (R = I) only
        ax.axvline(res["theta2_sq"], color="r", ls=":", label="θ₂² (Thm 7.4 literal)")
    ax.set_xscale("log")
    ax.set_xlabel("‖∇L_R(x)‖² / L_R(x)")
    ax.set_ylabel("count")
    ax.set_title(f"non-critical point: {res['model']}, sketch {res['sketch']} (n={res['samples']})", fontsize=9)
    ax.legend(fontsize=7)
    save(fig, path)


def check_convergence(source, path) -> None:
    """L_R(x_t) of the GD runs (L.1 step, tuned step, unsketched) and the predicted (1 − γ)^t, written to ``path``."""
    res = _result(source)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for key, lab in (("losses_theorem_l1", f"GD, L.1 step η={res['eta_theorem_l1']:.2g}"),
                     ("losses_tuned", f"GD, tuned η={res['eta_tuned']:.2g}"),
                     ("losses_unsketched_tuned", "GD unsketched, tuned: L(x_t)")):
        if res.get(key):
            ax.semilogy([np.nan if v is None else v for v in res[key]], label=lab)
    L0 = res["losses_theorem_l1"][0]
    t = np.arange(len(res["losses_theorem_l1"]))
    ax.semilogy(t, L0 * res["predicted_rate"] ** t, "k--", label=f"predicted (1−γ)^t, 1−γ={res['predicted_rate']:.6f}")
    ax.set_xlabel("step t")
    ax.set_ylabel("L_R(x_t) (unsketched: L(x_t))" if res.get("losses_unsketched_tuned") else "L_R(x_t)")
    ax.set_title(f"convergence: {res['model']}, sketch {res['sketch']}", fontsize=9)
    ax.legend(fontsize=7)
    save(fig, path)


def check_figures(source, out) -> list[Path]:
    """Both figures of a check into folder ``out``, from its result dict or check.json path; returns their paths."""
    res = _result(source)
    out = Path(out)
    paths = [out / name for name in CHECK_FIGURES]
    noncritical_hist(res, paths[0])
    check_convergence(res, paths[1])
    return paths


__all__ = ["CHECK_FIGURES", "noncritical_hist", "check_convergence", "check_figures"]
