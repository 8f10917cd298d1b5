"""Figures of federated training runs, from their stored ``train.jsonl`` files."""

from __future__ import annotations

import math
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


#: the markers of the runs in turn (hollow): runs whose rounds coincide (sacfl whose clip never fires and sketched,
#: a few rounds of any two protocols of one sketch) draw one line, and their markers tell them apart
MARKERS = ("o", "s", "^", "v", "D", "<", ">", "p", "h", "*")
#: about how many markers a run's line carries (every round's for a short run)
MARKS_PER_LINE = 12


def run_setup(folder) -> str | None:
    """``model on dataset, N clients`` of the stored protocol run in ``folder`` (its protocol.json; None without
    one)."""
    try:
        stored = read_json(Path(folder) / "protocol.json")
        model, spec = stored["model"], stored["spec"]
        return f"{model['model']} on {model['dataset']}, {int(spec['clients'])} clients"
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _label_log_ticks(ax) -> None:
    """Labels on the log x axis that do not run into each other: the powers of ten alone where two or more are in
    view, else also 2 and 5 times them (matplotlib's own labels of a range under two decades, 2, 3, 4 and 6 times a
    power of ten, ran together: ``3×10⁴4×10⁴``)."""
    low, high = ax.get_xlim()
    if not (low > 0 and high > low):
        return
    powers = math.floor(math.log10(high)) - math.ceil(math.log10(low)) + 1
    if powers >= 2:
        ax.xaxis.set_minor_formatter(plt.NullFormatter())
        return

    def minor(x, pos=None):
        power = math.floor(math.log10(x) + 1e-9)
        mantissa = round(x / 10 ** power)
        return f"${mantissa}\\times10^{{{power}}}$" if mantissa in (2, 5) else ""

    ax.xaxis.set_minor_formatter(plt.FuncFormatter(minor))


def accuracy_figure(root) -> Path:
    """Test accuracy against the cumulative uplink floats of the average client, one line per run folder under
    ``root``, each with its own hollow marker; the title names the victim, data set and clients the runs share (a
    run of others names its own in the legend)."""
    fig, ax = plt.subplots(figsize=(8.0, 3.6), layout="constrained")
    runs = [(f, rows) for f in sorted(Path(root).glob("*/train.jsonl")) if (rows := read_jsonl(f))]
    setups = {f.parent: run_setup(f.parent) for f, _ in runs}
    shared = set(setups.values()).pop() if len(set(setups.values())) == 1 else None
    for i, (f, rows) in enumerate(runs):
        every = max(1, len(rows) // MARKS_PER_LINE)
        own = setups[f.parent]
        label = f.parent.name if shared or not own else f"{f.parent.name} ({own})"
        # past the ten colours of the cycle, dashed: no two runs look alike; markers at rounds offset run by run
        ax.plot(mean_floats(rows, run_clients(f.parent)), [r["test_acc"] for r in rows], lw=1.3,
                ls="-" if i < 10 else "--", marker=MARKERS[i % len(MARKERS)], ms=4, mfc="none",
                markevery=(i % every, every), label=label)
    ax.set_xscale("log")
    _label_log_ticks(ax)
    ax.set_xlabel("floats sent per client, mean over the clients (cumulative uplink)")
    ax.set_ylabel("test accuracy")
    ax.set_title(f"test accuracy against uplink floats: {shared}" if shared else "test accuracy against uplink floats",
                 fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    if ax.get_lines():  # beside the panel: a dozen runs would cover their own lines
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)
    path = Path(root) / "accuracy_vs_floats.png"
    save(fig, path)
    return path
