"""Every plot, drawn from stored results only (figures never re-run attacks).

Run figures: :func:`reconstruction_figure` (truth | start | reconstruction) and
:func:`convergence_figure` (log L_R against step).  Sweep figures
(:func:`sweep_figures`): the reconstruction grid, metrics against defense
strength, the privacy-utility frontier and the sketch-size phase transition,
drawn from results.jsonl and points/*.pt.  Files are written atomically.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from .results import atomic_write_bytes  # noqa: E402


def save(fig, path) -> None:
    """Write a figure (format from the suffix: .png or .pdf) atomically and close it."""
    buf = io.BytesIO()
    fmt = str(path).rsplit(".", 1)[-1]
    fig.savefig(buf, format=fmt, dpi=150, bbox_inches="tight")
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())


def to_hwc(img) -> np.ndarray:
    """(C, H, W) tensor/array in [0, 1] -> (H, W, C) or (H, W) numpy for imshow."""
    a = np.asarray(img.detach().cpu() if hasattr(img, "detach") else img, dtype=np.float32)
    a = np.clip(a, 0, 1).transpose(1, 2, 0)
    return a[..., 0] if a.shape[-1] == 1 else a


def reconstruction_figure(path, truth, start, recon, psnr_each, ssim_each, title: str = "") -> None:
    """Rows: images of the batch; columns: truth | start | reconstruction (PSNR/SSIM in the label)."""
    n = truth.shape[0]
    fig, axes = plt.subplots(n, 3, figsize=(6.0, 2.1 * n + 0.4), squeeze=False)
    for i in range(n):
        cells = [(truth[i], "truth"), (start[i], "start"),
                 (recon[i], f"reconstruction\nPSNR {psnr_each[i]:.1f} dB, SSIM {ssim_each[i]:.3f}")]
        for ax, (img, label) in zip(axes[i], cells):
            a = to_hwc(img)
            ax.imshow(a, cmap="gray" if a.ndim == 2 else None, vmin=0, vmax=1, interpolation="nearest")
            ax.set_title(label, fontsize=8)
            ax.axis("off")
    if title:
        fig.suptitle(title, fontsize=9)
    save(fig, path)


def convergence_figure(path, losses, title: str = "") -> None:
    """log10 L_R(x_t) against step t."""
    y = np.asarray(losses, dtype=float)
    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.semilogy(np.arange(len(y)), np.where(y > 0, y, np.nan), lw=1.2)
    ax.set_xlabel("step t")
    ax.set_ylabel(r"$L_R(x_t)$")
    ax.grid(True, which="both", alpha=0.3)
    if title:
        ax.set_title(title, fontsize=9)
    save(fig, path)


# -- sweep figures (issue 3) ------------------------------------------------
#: repetition keys: averaged over, never an axis
_REPEAT = ("seed", "image_index", "model_seed", "sketch_seed", "noise_seed")


def _strength_key(records: list[dict], meta: dict) -> str | None:
    key = meta.get("strength")
    if key:
        return key
    keys = list(records[0]["grid"]) if records else []
    return next((k for k in keys if k not in _REPEAT + ("sketch", "model")), None)


def _axis(v):
    """A grid value as a number for an x axis (None if it is not one)."""
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def aggregate(records: list[dict], x_of, metric: str, line_key: str = "sketch") -> dict:
    """{line: [(x, mean, std, n, records)]}: ``metric`` over repetitions, one line per value of params[line_key]."""
    groups: dict = {}
    for r in records:
        x, v = x_of(r), r["metrics"].get(metric)
        if x is None or v is None:
            continue
        setting = tuple((k, str(val)) for k, val in r["grid"].items() if k not in _REPEAT)
        groups.setdefault((r["params"].get(line_key), x, setting), []).append(r)
    lines: dict = {}
    for (line, x, _), recs in groups.items():
        vals = np.array([float(r["metrics"][metric]) for r in recs])
        std = float(vals.std(ddof=1)) if len(vals) > 1 else 0.0
        lines.setdefault(line, []).append((x, float(vals.mean()), std, len(vals), recs))
    return {k: sorted(v, key=lambda t: t[0]) for k, v in lines.items()}


def _set_strength_scale(ax, xs) -> None:
    pos = [x for x in xs if x > 0]
    if pos and max(pos) / min(pos) >= 100:
        ax.set_xscale("symlog", linthresh=min(pos)) if min(xs) <= 0 else ax.set_xscale("log")


def _save_both(fig, folder, stem) -> list:
    paths = []
    for ext in ("png", "pdf"):
        path = folder / f"{stem}.{ext}"
        buf = io.BytesIO()
        fig.savefig(buf, format=ext, dpi=150, bbox_inches="tight")
        atomic_write_bytes(path, buf.getvalue())
        paths.append(path)
    plt.close(fig)
    return paths


def reconstruction_grid(folder, records: list[dict], strength: str) -> list:
    """Rows: truth, then each defense strength (ascending); columns: the attacked images (first sketch kind and seed)."""
    import torch

    first = records[0]["params"]
    recs = [r for r in records if r["params"]["sketch"] == first["sketch"] and r["params"]["seed"] == first["seed"]
            and r["params"]["model"] == first["model"]]
    levels = sorted({json.dumps(r["grid"].get(strength)) for r in recs}, key=lambda s: (_axis(json.loads(s)) is None, _axis(json.loads(s)) or 0, s))
    images = sorted({r["params"]["image_index"] for r in recs})
    cell = {}
    for r in recs:
        pt = Path(folder) / "points" / f"{r['key']}.pt"
        if pt.exists():
            cell[(json.dumps(r["grid"].get(strength)), r["params"]["image_index"])] = (torch.load(pt), r["metrics"])
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
    return _save_both(fig, Path(folder) / "figures", "reconstruction_grid")


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
    return _save_both(fig, Path(folder) / "figures", "metrics_vs_strength")


def privacy_utility_frontier(folder, records: list[dict], strength: str | None) -> list:
    """Mean PSNR of the attack against test accuracy of the defended training, epsilon annotated, one line per sketch kind."""
    x_of = lambda r: r["metrics"].get("utility_acc")  # noqa: E731
    fig, ax = plt.subplots(figsize=(4.6, 3.4))
    groups: dict = {}
    for r in records:
        if r["metrics"].get("utility_acc") is None:
            continue
        setting = tuple((k, str(v)) for k, v in r["grid"].items() if k not in _REPEAT)
        groups.setdefault((r["params"]["sketch"], setting), []).append(r)
    if not groups:
        plt.close(fig)
        return []
    by_line: dict = {}
    for (sk, _), recs in groups.items():
        acc = float(np.mean([x_of(r) for r in recs]))
        ps = np.array([r["metrics"]["psnr"] for r in recs], dtype=float)
        eps = recs[0]["metrics"].get("epsilon")
        by_line.setdefault(sk, []).append((acc, ps.mean(), ps.std(ddof=1) if len(ps) > 1 else 0.0, eps,
                                           recs[0]["grid"].get(strength) if strength else None))
    for sk, pts in by_line.items():
        pts.sort()
        ax.errorbar([p[0] for p in pts], [p[1] for p in pts], yerr=[p[2] for p in pts], marker="o", ms=3, capsize=3, label=sk)
        for acc, ps, _, eps, lv in pts:
            ax.annotate("ε=∞" if eps is None else f"ε={eps:.3g}", (acc, ps), fontsize=6, xytext=(3, 3), textcoords="offset points")
    ax.set_title("labels: ε of the attacked message (Opacus RDP)", fontsize=8)
    ax.set_xlabel("test accuracy under the defense (utility)")
    ax.set_ylabel("attack PSNR (dB)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, title="sketch", title_fontsize=7)
    return _save_both(fig, Path(folder) / "figures", "privacy_utility")


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
    return _save_both(fig, Path(folder) / "figures", "phase_transition")


def sweep_figures(folder, records: list[dict] | None = None) -> list:
    """Every sweep figure that the stored results support, as PNG and PDF under folder/figures/; returns the paths."""
    folder = Path(folder)
    if records is None:
        from .sweep import load_records

        records = load_records(folder)
    if not records:
        return []
    meta = json.loads((folder / "sweep.json").read_text()) if (folder / "sweep.json").exists() else {}
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
