"""Whether `leakattack train` repeats itself bit for bit: the same command twice at one thread count, and once at
another, compared by the largest difference between their final checkpoints (weights and BatchNorm buffers).

    python scripts/train_determinism.py [--model resnet18] [--rounds 10] [--threads 2] [--other-threads 1]

Each training runs `leakattack train --protocol fedavg --dataset photos --clients 4` into a temporary folder, one
after the other.  docs/protocols.md#seeds quotes its output.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

import targets
from leakattack.config.constraints import Cores
from leakattack.config.params import ROUNDS
from leakattack.script import count, one_of, parser, script_main


def _trainable() -> list[str]:
    """The models `leakattack train` trains (the classifiers)."""
    return [m for m in targets.list_models() if targets.task_of(m) == "classification"]


def _checked(constraint, label: str):
    """An argparse type: an integer that ``constraint`` (of leakattack's, as `leakattack train` checks it) holds."""
    def parse(text: str) -> int:
        value = count(text)
        if not constraint.ok(value):
            raise argparse.ArgumentTypeError(constraint.error(label, value))
        return value
    return parse


def _leaves(obj, prefix=""):
    if torch.is_tensor(obj):
        yield prefix, obj
    elif isinstance(obj, dict):
        for key, value in obj.items():
            yield from _leaves(value, f"{prefix}/{key}")


def _train(model: str, rounds: int, threads: int, out: Path) -> dict[str, torch.Tensor]:
    subprocess.run([sys.executable, "-m", "leakattack", "train", "--protocol", "fedavg", "--model", model,
                    "--dataset", "photos", "--rounds", str(rounds), "--clients", "4", "--checkpoint-every",
                    str(rounds), "--threads", str(threads), "--quiet", "--out", str(out)], check=True)
    final = out / "fedavg" / "checkpoints" / f"round_{rounds + 1:04d}.pt"
    return dict(_leaves(torch.load(final, map_location="cpu")))


def _largest_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k].double() - b[k].double()).abs().max()) for k in a)


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--model", type=one_of(_trainable, "trainable model"), default="resnet18")
    ap.add_argument("--rounds", type=_checked(ROUNDS, "rounds"), default=10)
    ap.add_argument("--threads", type=_checked(Cores(), "thread count"), default=2)
    ap.add_argument("--other-threads", type=_checked(Cores(), "thread count"), default=1)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        first = _train(a.model, a.rounds, a.threads, Path(tmp) / "a")
        again = _train(a.model, a.rounds, a.threads, Path(tmp) / "b")
        other = _train(a.model, a.rounds, a.other_threads, Path(tmp) / "c")
    print(f"{a.model}, fedavg on photos, {a.rounds} rounds: the same command twice at --threads {a.threads}: "
          f"largest difference {_largest_difference(first, again):.3g}; at --threads {a.other_threads} against "
          f"--threads {a.threads}: {_largest_difference(first, other):.3g}")


if __name__ == "__main__":
    script_main(main)
