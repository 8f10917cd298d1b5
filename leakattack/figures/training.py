"""Figures of federated training runs, from their stored ``train.jsonl`` files."""

from __future__ import annotations

from pathlib import Path

from ..results import read_json, read_jsonl
from .common import plt, save


def mean_floats(rows: list[dict], clients: int | None) -> list[float]:
    """Per round of a stored ``train.jsonl``, the cumulative uplink floats of the average client: the round's
    floats per sampled client times the share of the ``clients`` sampled (``floats_mean_cum``, or from the rounds'
    ``clients`` lists where a run stored none; ``floats_cum`` where neither it nor N is known). A protocol that
    samples half of the clients sends half the floats per client that ``floats_cum`` (per sampled client) counts."""
    out, cum = [], 0.0
    for r in rows:
        if "floats_mean_cum" in r:
            cum = float(r["floats_mean_cum"])
        elif clients and "clients" in r:
            cum += r["floats_sent"] * len(r["clients"]) / clients
        else:
            cum = float(r["floats_cum"])
        out.append(cum)
    return out


def run_clients(folder) -> int | None:
    """The number of clients N of the stored protocol run in ``folder`` (its protocol.json; None without one)."""
    try:
        return int(read_json(Path(folder) / "protocol.json")["spec"]["clients"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def accuracy_figure(root) -> Path:
    """Test accuracy against the cumulative uplink floats of the average client, one line per run folder under
    ``root``."""
    fig, ax = plt.subplots(figsize=(8.0, 3.6), layout="constrained")
    for i, f in enumerate(sorted(Path(root).glob("*/train.jsonl"))):
        rows = read_jsonl(f)
        if rows:  # past the ten colours of the cycle, dashed: no two runs look alike
            ax.plot(mean_floats(rows, run_clients(f.parent)), [r["test_acc"] for r in rows], lw=1.3,
                    ls="-" if i < 10 else "--", label=f.parent.name)
    ax.set_xscale("log")
    ax.set_xlabel("floats sent per client, mean over the clients (cumulative uplink)")
    ax.set_ylabel("test accuracy")
    ax.grid(True, which="both", alpha=0.3)
    if ax.get_lines():  # beside the panel: a dozen runs would cover their own lines
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)
    path = Path(root) / "accuracy_vs_floats.png"
    save(fig, path)
    return path
