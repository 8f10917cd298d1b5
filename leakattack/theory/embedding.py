"""The coordinate-wise embedding of Definition 4.1 (Table 1), measured over independent sketches."""

from __future__ import annotations

import math

import torch

from ..seeds import torch_generator
from ..sketch import get_sketch, is_identity, list_sketches
from .analysis import embedding_a

#: Table 1's a (α = a·d/b)
TABLE1_A = {"gaussian": 3, "srht": 2, "ams": 2, "countsketch": 3, "sparse": 2}
#: the (h, g) pairs measured: g, h random Gaussian, h_orth = h projected off g, e1 the first unit vector
CASES = {"h = g": ("g", "g"), "h ⟂ g": ("h_orth", "g"), "random h, g": ("h_rand", "g"),
         "h = e₁, g = e₁": ("e1", "e1"), "h = e₁, g random": ("e1", "g")}


def measure_embedding(kind: str, d: int = 64, b: int = 16, trials: int = 2000, seed: int = 0) -> dict:
    """E[hᵀRᵀRg] and E[(hᵀRᵀRg)²] over `trials` independent sketches, for h = g, h ⟂ g, random pairs and one-hot h."""
    gen = torch_generator(seed)
    g = torch.randn(d, generator=gen, dtype=torch.float64)
    h_rand = torch.randn(d, generator=gen, dtype=torch.float64)
    h_orth = h_rand - (h_rand @ g) / (g @ g) * g
    g_spiky = torch.zeros(d, dtype=torch.float64)
    g_spiky[0] = 1.0
    vecs = {"g": g, "h_orth": h_orth, "h_rand": h_rand, "e1": g_spiky}
    cases = {name: (vecs[h], vecs[gg]) for name, (h, gg) in CASES.items()}
    H = torch.stack([c[0] for c in cases.values()])
    Gm = torch.stack([c[1] for c in cases.values()])
    vals = torch.zeros(trials, len(cases), dtype=torch.float64)
    for t in range(trials):
        R = get_sketch(kind, d, b, seed * 1_000_003 + t + 1)
        vals[t] = (R.apply(H.float()).double() * R.apply(Gm.float()).double()).sum(-1)
    rows: list[dict] = []
    for k, (name, (h, gg)) in enumerate(cases.items()):
        hg = float(h @ gg)
        mean = float(vals[:, k].mean())
        msq = float(vals[:, k].pow(2).mean())
        se = float(vals[:, k].std() / math.sqrt(trials))
        rows.append({"case": name, "hg": hg, "mean": mean, "mean_se": se, "second_moment": msq,
                     "a": embedding_a(msq, hg, float(h @ h), float(gg @ gg), b)})
    return {"kind": kind, "d": d, "b": b, "trials": trials, "rows": rows, "a_max": max(r["a"] for r in rows)}


def _worst_deviation(rows: list[dict], trials: int) -> str:
    """The largest |mean - h^T g| / s.e. over the cases whose standard error is positive (0 for a case whose every
    sample is h^T g itself, up to round-off: a sketch that keeps it exactly); the others without one (every sample
    the same other value, or a single sample) are counted, not divided by zero."""
    def exact(row: dict) -> bool:
        return abs(row["mean"] - row["hg"]) <= 1e-12 * max(1.0, abs(row["hg"]))

    judged = [0.0 if exact(row) else abs(row["mean"] - row["hg"]) / row["mean_se"] for row in rows
              if exact(row) or (math.isfinite(row["mean_se"]) and row["mean_se"] > 0)]
    text = f"{max(judged):.2f}" if judged else "n/a"
    unjudged = len(rows) - len(judged)
    if unjudged:
        why = "one sample has none" if trials < 2 else f"the {trials} samples were equal"
        text += f" ({unjudged} case{'s' if unjudged != 1 else ''} without a standard error: {why})"
    return text


def embedding_markdown(trials: int = 2000, seed: int = 0, d: int = 64, b: int = 16, out="results/theory") -> str:
    """Markdown report of the measured coordinate-wise embedding parameter for every sketch kind but the identity.

    ``out``: the output folder its recorded command names (where the table is written)."""
    lines = [
        "# Coordinate-wise embedding (Definition 4.1, Table 1)", "",
        f"Command: `leakattack check --embedding --samples {trials} --seed {seed} --out {out}`", "",
        f"Measurements, not proofs: {trials} independent sketches R (seeds derived from {seed}) of size b={b}, d={d} "
        "per kind; for each (h, g) we average hᵀRᵀRg and (hᵀRᵀRg)².  "
        "Measured a = b·(E[(hᵀRᵀRg)²] − (hᵀg)²)/(‖h‖²‖g‖²).  Definition 4.1 asks "
        "E[(hᵀRᵀRg)²] ≤ (hᵀg)² + (a/b)‖h‖²‖g‖² for every h, g: a measured a at or below Table 1's (up to sampling "
        f"error) is consistent with Table 1 on these {len(CASES)} (h, g) pairs, not a proof for all of them, and one "
        "above it (beyond sampling error) is a counterexample.", "",
        "| sketch | Table 1 a | measured a (max over cases) | worst \\|E[hᵀRᵀRg] − hᵀg\\| / s.e. | per case: a |",
        "|---|---|---|---|---|",
    ]
    for kind in list_sketches():
        if is_identity(kind):
            continue
        r = measure_embedding(kind, d, b, trials, seed)
        per = "; ".join(f"{row['case']}: {row['a']:.2f}" for row in r["rows"])
        lines.append(f"| {kind} | {TABLE1_A.get(kind, '— (not in Table 1)')} | {r['a_max']:.3f} | "
                     f"{_worst_deviation(r['rows'], trials)} | {per} |")
    lines += ["", "An unbiased sketch has |mean − hᵀg|/s.e. of order 1–3; a value far above that means E[RᵀR] ≠ I."]
    return "\n".join(lines) + "\n"


__all__ = ["TABLE1_A", "measure_embedding", "embedding_markdown"]
