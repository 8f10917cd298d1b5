"""The sketch-size transition per attack: the smallest b/m from which a sweep's mean SSIM stays >= 0.9.

Reads a sweep folder's results.jsonl (e.g. results/sweeps/attack_families, made by
``leakattack sweep examples/attack_families.toml``) and prints one markdown row per series
(model and its parameters, batch size, data set, attack with the recipe its grid names, priors): the smallest
measured b/m from which every larger measured b/m has mean SSIM >= the threshold (over the images of each point),
the mean SSIM and PSNR there, the mean SSIM at the smallest b/m measured, and the median attack wall time of the
series.  For a batch, m counts the unknowns of every image, so b/m is b/(m B).

    python scripts/transition_table.py results/sweeps/attack_families [--ssim 0.9]
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from pathlib import Path

from leakattack.script import fraction, parser, script_main


def series_of(record: dict) -> tuple:
    g, p = record["grid"], record["params"]
    priors = g.get("priors", p.get("priors")) or []
    model = p.get("model") + "".join(f" {k}={v}" for k, v in sorted((p.get("model_params") or {}).items()))
    batch = p.get("batch_size") or 1
    attack = p.get("attack") + (f" ({g['recipe']} recipe)" if g.get("recipe") else "")  # where the grid names one
    return (model if batch == 1 else f"{model}, B = {batch}", p.get("dataset"), attack, ", ".join(priors) or "none")


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("folder", type=Path)
    ap.add_argument("--ssim", type=fraction, default=0.9, help="SSIM threshold, in (0, 1] (default 0.9)")
    args = ap.parse_args()
    points: dict = defaultdict(lambda: defaultdict(list))
    walls: dict = defaultdict(list)
    for line in (args.folder / "results.jsonl").read_text().splitlines():
        r = json.loads(line)
        m = r["metrics"]
        if m.get("ssim") is None or not m.get("m"):
            continue
        s = series_of(r)
        points[s][m["b"] / m["m"]].append((m["ssim"], m["psnr"]))
        if m.get("wall_s") is not None:
            walls[s].append(m["wall_s"])
    print(f"| model / data | attack | priors | smallest b/m with mean SSIM ≥ {args.ssim} | SSIM / PSNR there "
          "| SSIM at the smallest b/m | images per point | median wall s |")
    print("|---|---|---|---|---|---|---|---|")
    for s in sorted(points, key=lambda k: tuple(map(str, k))):
        ratios = sorted(points[s])
        mean = {r: (statistics.fmean(a for a, _ in points[s][r]), statistics.fmean(b for _, b in points[s][r]))
                for r in ratios}
        passing = None
        for r in reversed(ratios):
            if mean[r][0] < args.ssim:
                break
            passing = r
        there = "—" if passing is None else f"{mean[passing][0]:.3f} / {mean[passing][1]:.1f} dB"
        n = min(len(v) for v in points[s].values())
        wall = f"{statistics.median(walls[s]):.1f}" if walls[s] else "—"
        found = "none ≤ " + f"{ratios[-1]:.2g}" if passing is None else f"{passing:.3g}"
        print(f"| {s[0]} / {s[1]} | {s[2]} | {s[3]} | {found} "
              f"| {there} | {mean[ratios[0]][0]:.3f} (b/m = {ratios[0]:.3g}) | {n} | {wall} |")


if __name__ == "__main__":
    script_main(main)
