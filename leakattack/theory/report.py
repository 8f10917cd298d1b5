"""What a check leaves behind: the plain-text summary, check.json and the Markdown tables
(figures: leakattack.figures.theory)."""

from __future__ import annotations

from pathlib import Path

from ..results import atomic_write_text, write_json

#: the file a check's result dict is stored in, inside its output folder
CHECK_JSON = "check.json"


def summary_table(res: dict) -> str:
    """A plain-text table of the main numbers of a check."""
    f = lambda v: "—" if v is None else (f"{v:.4g}" if isinstance(v, float) else str(v))  # noqa: E731
    rows = [
        ("target", f"{res['model']} ({res['dataset']} {res['in_shape']}, batch {res['batch_size']}), "
                   f"d={res['d']}, m={res['m']}, {res['regime']}"),
        ("sketch", f"{res['sketch']} b={res['b']}"
                   + ("" if res["sketch_ratio"] is None else f" (ratio {res['sketch_ratio']})")
                   + "".join(f", {k}={v}" for k, v in (res.get("sketch_params") or {}).items())),
        ("samples", f"{res['samples']} points, {res['pairs']} pairs, {res['trajectory_points']} trajectory points, "
                    f"kernel at {res['kernel_points']} points ({res['kernel_method']})"),
        ("beta", f"{f(res['beta'])} (pairs {f(res['beta_pairs'])}, max ‖J‖ {f(res['beta_power'])})"),
        ("theta1^2, theta2^2", f"{f(res['theta1_sq'])}, {f(res['theta2_sq'])}"),
        ("tau, gamma1, gamma2", f"{f(res['tau'])}, {f(res['gamma1'])}, {f(res['gamma2'])} ({res['sketch_method']})"),
        ("‖∇L‖²/L range", f"[{f(res['noncritical_ratio_min'])}, {f(res['noncritical_ratio_max'])}] vs Lemma 7.7 "
                          f"[{f(res['noncritical_bounds'][0])}, {f(res['noncritical_bounds'][1])}]"),
        ("non-critical fraction", f"{f(res['noncritical_fraction'])} (Lemma 7.7), "
                                  + ("— (Thm 7.4 literal: about R = I only)"
                                     if res.get("noncritical_fraction_thm74_literal") is None
                                     else f"{f(res['noncritical_fraction_thm74_literal'])} (Thm 7.4 literal)")
                                  + f", trajectory {f(res['noncritical_fraction_trajectory'])}{_singular(res)}"),
        ("semi-smooth fraction", f"{f(res['semismooth_fraction'])} (b=τ²β²), "
                                 f"{f(res['semismooth_fraction_literal'])} (b=τ²β literal), "
                                 f"trajectory {f(res['semismooth_fraction_trajectory'])}"
                                 + (" (the trajectory leaves the sampled points, from which β and θ₂ are taken)"
                                    if (res['semismooth_fraction_trajectory'] or 1) < 1 else "")),
        ("tightest semi-smooth", f"b*={f(res['semismooth_tightest']['b_with_a0'])} (a=0, sampled pairs and "
                                 "trajectories), "
                                 f"a*={f(res['semismooth_tightest']['a_with_b0'])} (b=0); "
                                 f"paper a={f(res['semismooth_constants']['a'])}, "
                                 f"b={f(res['semismooth_constants']['b'])}"),
        ("paper's rate (Thm 7.5)",
         "vacuous: θ₁² ≤ aθ₂" if res["paper_predicted_rate"] is None else f(res["paper_predicted_rate"])),
        ("GD rate, L.1 step", f"observed {res['observed_rate']:.8f} vs predicted ≤ {res['predicted_rate']:.8f} "
                              f"(η={res['eta_theorem_l1']:.3g} from b={f(res['b_used_for_eta'])} of the sampled "
                              f"pairs{_steps(res)}){_l1_verdict(res)}"),
        ("GD rate, tuned step", f"observed {res['observed_rate_tuned']:.6f} (η={res['eta_tuned']:.3g})"
         + ("" if res["observed_rate_unsketched_tuned"] is None
            else f"; unsketched {res['observed_rate_unsketched_tuned']:.6f}")),
    ]
    w = max(len(k) for k, _ in rows)
    lines = [f"{k.ljust(w)}  {v}" for k, v in rows]
    lines.append(f"These are measurements over {res['samples']} sampled points and the GD trajectories, not proofs "
                 f"({res['wall_s']:.0f} s).")
    return "\n".join(lines)


def _singular(res: dict) -> str:
    """Where γ₁ is 0 (R has fewer independent rows than b: an SRHT's padded columns, a CountSketch bucket left empty),
    that Lemma 7.7's hypothesis fails there: its lower bound is 0, and the fraction tells only its upper bound."""
    g1, g2 = res.get("gamma1"), res.get("gamma2")
    if g1 is None or g2 is None or g1 > 0:  # 0: measured rank deficient (sketch_constants)
        return ""
    return ("; γ₁ = 0: R is rank deficient, so Lemma 7.7 (which needs γ₁ > 0) does not apply and its lower bound "
            "of 0 holds trivially; the fraction checks its upper bound only")


def _steps(res: dict) -> str:
    """How many steps of the L.1 run kept Theorem 7.5's per-step bound L(x_{t+1}) ≤ (1 − γ)L(x_t): the observed
    rate is a fit over the run, and a fit within the prediction can hide steps that are not."""
    within = res.get("predicted_rate_steps_within")
    return "" if within is None else f"; {within:.0%} of its steps within 1 − γ"


def _l1_verdict(res: dict) -> str:
    """Whether the L.1 prediction held on its own run, and, where it did not, which of its premises that run broke."""
    held = res.get("predicted_rate_holds")
    if held is None:
        return ""
    if held:
        return "; holds"
    broken = []
    b_run, inside = res.get("l1_trajectory_b"), res.get("l1_trajectory_ratios_inside")
    if b_run is not None and b_run > res["b_used_for_eta"]:
        broken.append(f"its pairs need b={b_run:.4g}")
    if inside is not None and inside < 1:
        broken.append(f"{1 - inside:.0%} of its points have ‖∇L‖²/L outside the sampled range")
    why = f": the constants measured on the samples do not hold along this run ({'; '.join(broken)})" if broken else ""
    return f"; BROKEN{why}"


def write_check(res: dict, out: Path) -> Path:
    """Store a check's result dict as ``out/check.json`` (atomically); returns its path."""
    path = Path(out) / CHECK_JSON
    write_json(path, res)
    return path


def write_markdown(out: Path, name: str, text: str) -> Path:
    """Store a Markdown table (table2.md, embedding.md) as ``out/name`` (atomically); returns its path."""
    path = Path(out) / name
    atomic_write_text(path, text)
    return path


__all__ = ["CHECK_JSON", "summary_table", "write_check", "write_markdown"]
