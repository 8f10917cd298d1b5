"""Sweep figures, drawn from a sweep folder's stored files only (never re-running an attack).

:func:`sweep_figures` draws every figure the stored results support: the
reconstruction grid, metrics against defense strength, the privacy-utility
frontier and the sketch-size phase transition, from ``results.jsonl`` and
``points/*.pt``, as PNG and PDF under ``figures/``.  Repetitions of a setting
are averaged with the sweep store's grouping (:mod:`leakattack.results.store`).
"""

from __future__ import annotations

import json
from pathlib import Path

from ..results import aggregate, default_strength, group_settings, load_records, load_tensors, mean_std, read_json
from .common import plt, save_both, to_hwc


def _strength_key(records: list[dict], meta: dict) -> str | None:
    key = meta.get("strength")
    if key:
        return key
    return default_strength(list(records[0]["grid"]) if records else [])


def _axis(v):
    """A grid value as a number for an x axis (None if it is not one)."""
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _set_strength_scale(ax, xs) -> None:
    pos = [x for x in xs if x > 0]
    if pos and max(pos) / min(pos) >= 100:
        ax.set_xscale("symlog", linthresh=min(pos)) if min(xs) <= 0 else ax.set_xscale("log")


def reconstruction_grid(folder, records: list[dict], strength: str) -> list:
    """Rows: truth, then each defense strength (ascending); columns: the attacked images (first sketch kind and seed)."""
    first = records[0]["params"]
    recs = [r for r in records if r["params"]["sketch"] == first["sketch"] and r["params"]["seed"] == first["seed"]
            and r["params"]["model"] == first["model"]]
    levels = sorted({json.dumps(r["grid"].get(strength)) for r in recs}, key=lambda s: (_axis(json.loads(s)) is None, _axis(json.loads(s)) or 0, s))
    images = sorted({r["params"]["image_index"] for r in recs})
    cell = {}
    for r in recs:
        pt = Path(folder) / "points" / f"{r['key']}.pt"
        if pt.exists():
            cell[(json.dumps(r["grid"].get(strength)), r["params"]["image_index"])] = (load_tensors(pt), r["metrics"])
    if not cell:
        return []
    fig, axes = plt.subplots(len(levels) + 1, len(images), figsize=(1.4 * len(images) + 1.4, 1.55 * (len(levels) + 1)),
                             squeeze=False)
    for j, img in enumerate(images):
        truth = next((c[0]["truth"][0] for (lv, im), c in cell.items() if im == img), None)
        rows = [(truth, f"image {img}")] + [
            ((cell[(lv, img)][0]["recon"][0], f"{cell[(lv, img)][1]['psnr']:.1f} dB, SSIM {cell[(lv, img)][1]['ssim']:.2f}")
             if (lv, img) in cell else (None, "")) for lv in levels]
        for i, (a, label) in enumerate(rows):
            ax = axes[i][j]
            ax.set_xticks([])
            ax.set_yticks([])
            if a is not None:
                h = to_hwc(a)
                ax.imshow(h, cmap="gray" if h.ndim == 2 else None, vmin=0, vmax=1, interpolation="nearest")
            ax.set_title(label, fontsize=6, pad=2)
            if j == 0:
                ax.set_ylabel("truth" if i == 0 else f"{strength}\n{json.loads(levels[i - 1])}", fontsize=7)
    fig.subplots_adjust(hspace=0.35, wspace=0.1)
    fig.suptitle(f"{first['model']} / {first['sketch']}: reconstructions by {strength}", fontsize=8)
    return save_both(fig, Path(folder) / "figures", "reconstruction_grid")


def metrics_vs_strength(folder, records: list[dict], strength: str) -> list:
    """PSNR, SSIM (and utility accuracy, epsilon when present) against defense strength, one line per sketch kind, std bars."""
    x_of = lambda r: _axis(r["grid"].get(strength))  # noqa: E731
    names = [n for n in ("psnr", "ssim", "utility_acc", "epsilon") if any(r["metrics"].get(n) is not None for r in records)]
    fig, axes = plt.subplots(1, len(names), figsize=(3.6 * len(names), 3.0), squeeze=False)
    for ax, name in zip(axes[0], names):
        lines = aggregate(records, x_of, name)
        xs = []
        for line, pts in lines.items():
            x = [p[0] for p in pts]
            xs += x
            ax.errorbar(x, [p[1] for p in pts], yerr=[p[2] for p in pts], marker="o", ms=3, capsize=3, label=str(line))
        _set_strength_scale(ax, xs or [1])
        if name == "ssim":
            ax.axhline(0.3, color="grey", lw=0.8, ls="--")
        if name == "epsilon":
            ax.set_yscale("log")
        ax.set_xlabel(strength)
        ax.set_ylabel({"psnr": "PSNR (dB)", "ssim": "SSIM", "utility_acc": "test accuracy", "epsilon": "ε (RDP)"}[name])
        ax.grid(True, alpha=0.3)
    axes[0][0].legend(fontsize=7, title="sketch", title_fontsize=7)
    fig.tight_layout()
    return save_both(fig, Path(folder) / "figures", "metrics_vs_strength")


def privacy_utility_frontier(folder, records: list[dict], strength: str | None) -> list:
    """Mean PSNR of the attack against test accuracy of the defended training, epsilon annotated, one line per sketch kind."""
    fig, ax = plt.subplots(figsize=(4.6, 3.4))
    kept = [r for r in records if r["metrics"].get("utility_acc") is not None]
    if not kept:
        plt.close(fig)
        return []
    by_line: dict = {}
    for recs in group_settings(kept).values():
        parts: dict = {}
        for r in recs:
            parts.setdefault(r["params"]["sketch"], []).append(r)
        for sk, part in parts.items():
            acc, _ = mean_std([float(r["metrics"]["utility_acc"]) for r in part])
            ps, ps_std = mean_std([float("nan") if r["metrics"]["psnr"] is None else float(r["metrics"]["psnr"])
                                   for r in part])
            eps = part[0]["metrics"].get("epsilon")
            by_line.setdefault(sk, []).append((acc, ps, ps_std, eps, part[0]["grid"].get(strength) if strength else None))
    for sk, pts in by_line.items():
        pts.sort(key=lambda p: p[:3])
        ax.errorbar([p[0] for p in pts], [p[1] for p in pts], yerr=[p[2] for p in pts], marker="o", ms=3, capsize=3, label=sk)
        for acc, ps, _, eps, lv in pts:
            ax.annotate("ε=∞" if eps is None else f"ε={eps:.3g}", (acc, ps), fontsize=6, xytext=(3, 3), textcoords="offset points")
    ax.set_title("labels: ε of the attacked message (Opacus RDP)", fontsize=8)
    ax.set_xlabel("test accuracy under the defense (utility)")
    ax.set_ylabel("attack PSNR (dB)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, title="sketch", title_fontsize=7)
    return save_both(fig, Path(folder) / "figures", "privacy_utility")


def phase_transition(folder, records: list[dict]) -> list:
    """Mean PSNR against b/m (m = C*H*W*batch unknowns), one line per sketch kind, std bars."""
    x_of = lambda r: (r["metrics"]["b"] / r["metrics"]["m"]) if r["metrics"].get("m") else None  # noqa: E731
    fig, axes = plt.subplots(1, 2, figsize=(8.0, 3.2))
    for ax, name, label in ((axes[0], "psnr", "PSNR (dB)"), (axes[1], "ssim", "SSIM")):
        for line, pts in aggregate(records, x_of, name).items():
            ax.errorbar([p[0] for p in pts], [p[1] for p in pts], yerr=[p[2] for p in pts], marker="o", ms=3, capsize=3, label=str(line))
        ax.axvline(1.0, color="grey", lw=0.8, ls=":")
        ax.set_xscale("log")
        ax.set_xlabel("b / m  (sketch size / unknowns)")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=7, title="sketch", title_fontsize=7)
    fig.tight_layout()
    return save_both(fig, Path(folder) / "figures", "phase_transition")


def sweep_figures(folder, records: list[dict] | None = None) -> list:
    """Every sweep figure that the stored results support, as PNG and PDF under folder/figures/; returns the paths."""
    folder = Path(folder)
    if records is None:
        records = load_records(folder)
    if not records:
        return []
    meta = read_json(folder / "sweep.json") if (folder / "sweep.json").exists() else {}
    grid_keys = set(records[0]["grid"])
    strength = _strength_key(records, meta)
    paths = []
    if strength and strength not in ("sketch_dim", "sketch_ratio"):
        paths += reconstruction_grid(folder, records, strength)
        paths += metrics_vs_strength(folder, records, strength)
    if any(r["metrics"].get("utility_acc") is not None for r in records):
        paths += privacy_utility_frontier(folder, records, strength)
    if grid_keys & {"sketch_dim", "sketch_ratio"}:
        paths += phase_transition(folder, records)
        if strength in ("sketch_dim", "sketch_ratio"):
            paths += reconstruction_grid(folder, records, strength)
    return paths
