"""Label readings of a victim through a sketch, and the attack's choice where the rules differ.

For each sketch and b/d, and each image: the true label, what the ``pooled`` and ``sign`` rules read from the
sketched message, and, where they differ, the label ``--labels idlg`` keeps after a short run of the attack with
each (``GradientMatching.choose_labels``) with the two runs' losses; then how many images each rule and the choice
got right.  The victim is trained here (``--train-steps`` full-batch Adam steps on the first ``--train-images`` of the
data set, as tests/attacks/test_label_choice.py does; ``--train-steps 0`` keeps its random weights) or loaded
from ``--weights`` (a ``leakattack train`` checkpoint).  docs/attacks/labels.md quotes its output.

    python scripts/label_choice.py [--model lenet] [--dataset digits] [--train-steps 120] [--train-images 128]
        [--weights W] [--sketches srht] [--ratios 0.02] [--images 12]
"""

from __future__ import annotations

import argparse
import tempfile
import time
import warnings
from pathlib import Path

import torch

from leakattack.attacks.labels import recover_labels_by_rule
from leakattack.config import RunConfig
from leakattack.data import get_dataset
from leakattack.experiment import prepare


def train(model: str, dataset: str, steps: int, images: int, out: Path) -> float:
    """Full-batch Adam (step 1e-2) on the first ``images`` examples; the state_dict goes to ``out``; the last loss."""
    victim = prepare(RunConfig(model=model, dataset=dataset, threads=1)).obs.victim
    data = get_dataset(dataset)
    X, Y = data.images[:images].to(victim.dtype), data.labels[:images]
    opt = torch.optim.Adam(victim.model.parameters(), 1e-2)
    loss = torch.zeros(())
    for _ in range(steps):
        opt.zero_grad()
        loss = victim.loss(victim.model(X), Y)
        loss.backward()
        opt.step()
    torch.save(victim.model.state_dict(), out)
    return loss.item()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="lenet")
    ap.add_argument("--dataset", default="digits")
    ap.add_argument("--weights", help="a trained state_dict or checkpoint (default: train one here)")
    ap.add_argument("--train-steps", type=int, default=120)
    ap.add_argument("--train-images", type=int, default=128)
    ap.add_argument("--sketches", default="srht", help="comma-separated sketch kinds")
    ap.add_argument("--ratios", default="0.02", help="comma-separated b/d")
    ap.add_argument("--images", type=int, default=12, help="attack images 0 .. N-1")
    a = ap.parse_args()
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")  # the per-run uniqueness warning
    with tempfile.TemporaryDirectory() as tmp:
        weights = a.weights
        if weights is None and a.train_steps > 0:
            weights = str(Path(tmp) / "weights.pt")
            loss = train(a.model, a.dataset, a.train_steps, a.train_images, Path(weights))
            print(f"# {a.model} trained on {a.dataset}[:{a.train_images}], {a.train_steps} Adam steps: loss {loss:.4f}")
        for kind in a.sketches.split(","):
            for ratio in (float(r) for r in a.ratios.split(",")):
                compare(a.model, a.dataset, weights, kind, ratio, a.images)


def compare(model: str, dataset: str, weights: str | None, kind: str, ratio: float, images: int) -> None:
    """The lines of one sketch and b/d: one per image, then the counts of right labels."""
    right = {"pooled": 0, "sign": 0, "chosen": 0}
    differ = 0
    print(f"# {kind} b/d = {ratio}; image: true | pooled | sign | chosen (probe losses, seconds)")
    for i in range(images):
        p = prepare(RunConfig(model=model, dataset=dataset, sketch=kind, sketch_ratio=ratio, image_index=i,
                              threads=1, **({"weights": weights} if weights else {})))
        truth = p.labels.tolist()
        readings = recover_labels_by_rule(p.obs.victim, p.obs.linear_map, p.obs.y, p.obs.batch_size,
                                          rules=("pooled", "sign"))
        t0 = time.perf_counter()
        labels, choice = p.attack.choose_labels(p.obs)
        for rule, got in [*readings.items(), ("chosen", labels)]:
            right[rule] += int(got.tolist() == truth)
        line = f"{i}: {truth} | {readings['pooled'].tolist()} | {readings['sign'].tolist()} | {labels.tolist()}"
        if choice is not None:
            differ += 1
            losses = ", ".join(f"{v:.3g}" for v in choice["probe_losses"])
            line += f" ({losses}; {time.perf_counter() - t0:.1f} s)"
        print(line)
    print(f"# right: pooled {right['pooled']}/{images}, sign {right['sign']}/{images}, chosen {right['chosen']}/"
          f"{images}; the rules differed on {differ}")


if __name__ == "__main__":
    main()
