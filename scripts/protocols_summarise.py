"""Training table of results/protocols/: python scripts/protocols_summarise.py -> results/protocols/training.md."""

from pathlib import Path

from leakattack.figures import accuracy_figure
from leakattack.results import atomic_write_text, read_jsonl

HERE = Path("results/protocols")
ROOT = HERE / "train"
runs = {f.parent.name: read_jsonl(f) for f in sorted(ROOT.glob("*/train.jsonl"))}


def at_floats(rows, budget):
    """The last round whose cumulative uplink is within the budget."""
    ok = [r for r in rows if r["floats_cum"] <= budget * 1.0001]
    return ok[-1] if ok else None


lines = ["| run | rounds | floats/client/round | floats/client total | final test acc | wall (s) | wall of 50 rounds (s) |",
         "|---|---|---|---|---|---|---|"]
for name, rows in runs.items():
    r50 = rows[min(49, len(rows) - 1)]
    lines.append(f"| {name} | {rows[-1]['round']} | {rows[-1]['floats_sent']} | {rows[-1]['floats_cum']} | "
                 f"{rows[-1]['test_acc']:.4f} | {rows[-1]['wall_s']:.0f} | {r50['wall_s']:.1f} |")
lines += ["", "Test accuracy at equal uplink floats per client (fedavg round r vs the last round of each other run within r·d floats):", ""]
others = [n for n in runs if n != "fedavg"]
lines += ["| fedavg rounds | floats/client | fedavg acc | " + " | ".join(others) + " |",
          "|---|---|---|" + "---|" * len(others)]
fa = runs.get("fedavg", [])
for r in (10, 25, 50, 75, 100):
    if r > len(fa):
        continue
    budget = fa[r - 1]["floats_cum"]
    cells = []
    for n in others:
        o = at_floats(runs[n], budget)
        cells.append("—" if o is None or o["floats_cum"] < 0.9 * budget else f"{o['test_acc']:.4f} (round {o['round']})")
    lines.append(f"| {r} | {budget} | {fa[r - 1]['test_acc']:.4f} | " + " | ".join(cells) + " |")
atomic_write_text(HERE / "training.md", "\n".join(lines) + "\n")
accuracy_figure(ROOT)
print("\n".join(lines))
