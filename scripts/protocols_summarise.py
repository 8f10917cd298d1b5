"""Training table of results/protocols/: python scripts/protocols_summarise.py -> results/protocols/training.md and
its figure results/protocols/train/accuracy_vs_floats.png (the repository's, from any working folder; both
rewritten)."""

import argparse
import sys
from pathlib import Path

from leakattack.figures import accuracy_figure
from leakattack.figures.training import mean_floats, run_clients
from leakattack.results import atomic_write_text, read_jsonl

argparse.ArgumentParser(description=__doc__).parse_args()  # --help says what it writes, before it writes anything
HERE = Path(__file__).resolve().parents[1] / "results" / "protocols"  # the repository's, whatever the working folder
ROOT = HERE / "train"
runs = {f.parent.name: read_jsonl(f) for f in sorted(ROOT.glob("*/train.jsonl"))}
if not runs:
    print(f"protocols_summarise.py: error: no training runs under {ROOT} (sh scripts/protocols_train.sh makes them)",
          file=sys.stderr)
    sys.exit(2)
for name, rows in runs.items():  # the average client's cumulative uplink (a sampled-half protocol sends half)
    for r, mean in zip(rows, mean_floats(rows, run_clients(ROOT / name))):
        r["mean_cum"] = mean


def at_floats(rows, budget):
    """The last round whose cumulative uplink of the average client is within the budget."""
    ok = [r for r in rows if r["mean_cum"] <= budget * 1.0001]
    return ok[-1] if ok else None


lines = ["| run | rounds | floats per sampled client per round | clients sampled per round | floats/client total "
         "(mean over clients) | final test acc | wall (s) | wall of 50 rounds (s) |",
         "|---|---|---|---|---|---|---|---|"]
for name, rows in runs.items():
    r50 = rows[min(49, len(rows) - 1)]
    lines.append(f"| {name} | {rows[-1]['round']} | {rows[-1]['floats_sent']} | "
                 f"{len(rows[-1]['clients'])} of {run_clients(ROOT / name)} | {rows[-1]['mean_cum']:.0f} | "
                 f"{rows[-1]['test_acc']:.4f} | {rows[-1]['wall_s']:.0f} | {r50['wall_s']:.1f} |")
lines += ["", "Test accuracy at equal uplink floats per client, mean over the clients (fedavg round r vs the last "
          "round of each other run within r·d floats):", ""]
others = [n for n in runs if n != "fedavg"]
lines += ["| fedavg rounds | floats/client | fedavg acc | " + " | ".join(others) + " |",
          "|---|---|---|" + "---|" * len(others)]
fa = runs.get("fedavg", [])
for r in (10, 25, 50, 75, 100):
    if r > len(fa):
        continue
    budget = fa[r - 1]["mean_cum"]
    cells = []
    for n in others:
        o = at_floats(runs[n], budget)
        cells.append("—" if o is None or o["mean_cum"] < 0.9 * budget
                     else f"{o['test_acc']:.4f} (round {o['round']})")
    lines.append(f"| {r} | {budget:.0f} | {fa[r - 1]['test_acc']:.4f} | " + " | ".join(cells) + " |")

# runs that send the same b per round (safl/sacfl/sketched at one b/d): equal floats is equal rounds
same_b = {}
for name, rows in runs.items():
    same_b.setdefault(rows[0]["floats_sent"] - name.startswith("sacfl"), []).append(name)  # sacfl: b + 1 (the norm)
for b, names in sorted(same_b.items()):
    if len(names) < 2 or not any(n.startswith(("safl", "sacfl")) for n in names):
        continue
    lines += ["", f"Test accuracy at equal rounds, runs sending b = {b} floats per round (sacfl: b + 1):", "",
              "| round | floats/client | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
    for r in (50, 100, 250, 500, 1000):
        if any(r <= len(runs[n]) for n in names if n.startswith(("safl", "sacfl"))):
            cells = [f"{runs[n][r - 1]['test_acc']:.4f}" if r <= len(runs[n]) else "—" for n in names]
            lines.append(f"| {r} | {r * b} | " + " | ".join(cells) + " |")

# COMPSGD / PRIVSGD against SGD (fedavg with K = 1) at equal steps
steps = ["fedavg"] + [n for n in runs if n.startswith(("compsgd", "privsgd"))]
if len(steps) > 1 and "fedavg" in runs:
    lines += ["", "Test accuracy at equal steps (rounds; fedavg with K = 1 is distributed SGD):", "",
              "| round | " + " | ".join(steps) + " |", "|---|" + "---|" * len(steps)]
    for r in (10, 25, 50, 100):
        cells = [f"{runs[n][r - 1]['test_acc']:.4f}" if r <= len(runs[n]) else "—" for n in steps]
        lines.append(f"| {r} | " + " | ".join(cells) + " |")
    eps = [(n, runs[n][-1]) for n in steps if "epsilon_paper" in runs[n][-1]]
    if eps:
        lines += ["", "| run | sigma | epsilon (paper, Claim C.1) | epsilon (Opacus RDP) "
                  "| epsilon (RDP, sensitivity 2L) |",
                  "|---|---|---|---|---|"]
        lines += [f"| {n} | {r['sigma']:.3g} | {r['epsilon_paper']:.3g} | {r['epsilon_rdp']:.3g} | "
                  f"{r['epsilon_rdp_normalised']:.3g} |" for n, r in eps]
atomic_write_text(HERE / "training.md", "\n".join(lines) + "\n")
accuracy_figure(ROOT)
print("\n".join(lines))
