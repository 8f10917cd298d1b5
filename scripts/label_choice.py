"""Label readings of a victim through a sketch, and the attack's choice where the rules differ.

For each sketch and b/d, and each image (or batch of ``--batch-size`` from it): the true labels, what each rule
``--labels idlg`` compares reads from the sketched message (``labels.readings_to_compare``: ``pooled``, and where
their premise holds the row-sum rules ``sign``, ``llg`` and ``llg-star``), and, where they differ, the labels it
keeps after a short run of the attack with each distinct reading (``GradientMatching.choose_labels``) with those
runs' losses; then how many labels each rule and the choice got right (as multisets).  The victim is trained
here (``--train-steps`` full-batch Adam steps on the first ``--train-images`` of the data set, as
tests/attacks/test_label_choice.py does; ``--train-steps 0`` keeps its random weights) or loaded from ``--weights``
(a ``leakattack train`` checkpoint, or the state_dict of scripts/train_photo_victim.py).
docs/attacks/labels.md quotes its output.

    python scripts/label_choice.py [--model lenet] [--dataset digits] [--train-steps 120] [--train-images 128]
        [--weights W] [--sketches srht] [--ratios 0.02] [--images 12] [--batch-size 1] [--stride 1]
        [--probe-steps 150] [--batch-draw consecutive|class|random] [--no-choice] [--model-param KEY=VALUE]
        [--start I]

``--stride S`` starts the N messages at images I, I + S, I + 2S, ... (``--start I``, 0 by default;
``--stride B`` for batches that share no image; ``--batch-draw`` takes each batch's other images as
``leakattack run --batch-draw`` does);
``--probe-steps`` sets the short runs' length (the attack's ``LABEL_PROBE_STEPS``; still at most a quarter of
its budget and of its time limit); ``--no-choice`` prints the readings without the short runs.
"""

from __future__ import annotations

import tempfile
import time
import warnings
from pathlib import Path

import torch

import targets
from leakattack.attacks import gradient_matching
from leakattack.attacks.labels import head_and_probes, one_example_classes, readings_to_compare
from leakattack.config import RunConfig
from leakattack.data import BATCH_DRAWS, get_dataset, list_datasets
from leakattack.experiment import prepare
from leakattack.metrics import label_overlap
from leakattack.script import count, fraction, index, one_of, parser, script_main, some_of
from leakattack.sketch import list_sketches


def fractions(text: str) -> list[float]:
    """An argparse type: comma-separated numbers in (0, 1] (b/d values)."""
    return [fraction(v) for v in text.split(",")]


def train(model: str, dataset: str, steps: int, images: int, out: Path, params: dict | None = None) -> float:
    """Full-batch Adam (step 1e-2) on the first ``images`` examples; the state_dict goes to ``out``; the last loss."""
    victim = prepare(RunConfig(model=model, dataset=dataset, threads=1, model_params=params or {})).obs.victim
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
    ap = parser(__doc__)
    ap.add_argument("--model", type=one_of(targets.list_models, "model", files=True), default="lenet")
    ap.add_argument("--dataset", type=one_of(list_datasets, "dataset"), default="digits")
    ap.add_argument("--weights", help="a trained state_dict or checkpoint (default: train one here)")
    ap.add_argument("--train-steps", type=index, default=120, help="0 keeps the random weights")
    ap.add_argument("--train-images", type=count, default=128)
    ap.add_argument("--sketches", type=some_of(list_sketches, "sketch"), default="srht",
                    help="comma-separated sketch kinds")
    ap.add_argument("--ratios", type=fractions, default="0.02", help="comma-separated b/d, each in (0, 1]")
    ap.add_argument("--images", type=count, default=12, help="messages: from images 0, S, ..., (N-1) S on")
    ap.add_argument("--batch-size", type=count, default=1, help="images per message (from each image on)")
    ap.add_argument("--stride", type=count, default=1, help="S: images between the first images of two messages")
    ap.add_argument("--start", type=index, default=0, help="the first image of the first message")
    ap.add_argument("--batch-draw", default="consecutive", choices=BATCH_DRAWS)
    ap.add_argument("--probe-steps", type=count, default=gradient_matching.LABEL_PROBE_STEPS,
                    help="steps of each short run that scores a reading")
    ap.add_argument("--no-choice", action="store_true", help="the readings only, without the short runs")
    ap.add_argument("--model-param", action="append", default=[], metavar="KEY=VALUE",
                    help="a model parameter, as `leakattack run --model-param` takes it (act=tanh)")
    a = ap.parse_args()
    if any("=" not in kv for kv in a.model_param):
        ap.error("--model-param takes KEY=VALUE")
    params = dict(kv.split("=", 1) for kv in a.model_param)
    gradient_matching.LABEL_PROBE_STEPS = a.probe_steps
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")  # the per-run uniqueness warning
    with tempfile.TemporaryDirectory() as tmp:
        weights = a.weights
        if weights is None and a.train_steps > 0:
            weights = str(Path(tmp) / "weights.pt")
            loss = train(a.model, a.dataset, a.train_steps, a.train_images, Path(weights), params)
            print(f"# {a.model} trained on {a.dataset}[:{a.train_images}], {a.train_steps} Adam steps: loss {loss:.4f}")
        for kind in a.sketches:
            for ratio in a.ratios:
                compare(a.model, a.dataset, weights, kind, ratio, a.images, a.batch_size, a.stride, a.batch_draw,
                        not a.no_choice, params, a.start)


def compare(model: str, dataset: str, weights: str | None, kind: str, ratio: float, images: int, B: int,
            stride: int = 1, draw: str = "consecutive", choose: bool = True, params: dict | None = None,
            start: int = 0) -> None:
    """The lines of one sketch and b/d: one per message (from images 0, stride, ...), then the counts of right
    labels.  Where ``magnitude`` is read (one example, features of both signs) a line also gives the head's signal
    against the sketch noise and the true class's place in magnitude's order (0: first)."""
    right: dict[str, int] = {}
    ran, places = 0, []
    for i in range(start, start + images * stride, stride):
        p = prepare(RunConfig(model=model, dataset=dataset, sketch=kind, sketch_ratio=ratio, image_index=i,
                              batch_size=B, batch_draw=draw, threads=1, model_params=params or {},
                              **({"weights": weights} if weights else {})))
        truth = p.labels
        shared = head_and_probes(p.obs.victim, p.obs.linear_map, p.obs.y, p.obs.batch_size)
        readings = readings_to_compare(p.obs.victim, p.obs.linear_map, p.obs.y, p.obs.batch_size, shared=shared)
        if i == start:
            print(f"# {kind} b/d = {ratio}, probes of {gradient_matching.LABEL_PROBE_STEPS} steps; message: true | "
                  f"{' | '.join(readings)} | chosen (probe losses, seconds)")
        t0 = time.perf_counter()
        labels, choice = p.attack.choose_labels(p.obs) if choose else (readings["pooled"], None)
        for rule, got in [*readings.items(), *([("chosen", labels)] if choose else [])]:
            right[rule] = right.get(rule, 0) + round(label_overlap(got, truth) * B)  # right labels, as multisets
        line = " | ".join([f"{i}: {sorted(truth.tolist())}", *(str(v.tolist()) for v in readings.values()),
                           str(labels.tolist()) if choose else "-"])
        if choice is not None:
            ran += 1
            losses = ", ".join(f"{v:.3g}" for v in choice["probe_losses"])
            line += f" ({losses}; {time.perf_counter() - t0:.1f} s)"
        if "magnitude" in readings:
            order, signal, prior = one_example_classes(p.obs.victim, p.obs.linear_map, p.obs.y, shared=shared)
            places.append(order.index(int(truth[0])))
            line += f" | signal {signal:.2f}, truth's place {places[-1]}, probes' class {prior}"
            if choice is not None and choice.get("undecided"):
                line += ", no run stood out"
        print(line)
    print("# right: " + ", ".join(f"{rule} {k}/{images * B}" for rule, k in right.items())
          + (f"; short runs on {ran}" if choose else ""))
    if places:
        print("# truth's place in magnitude's order: " + ", ".join(
            f"first {k}: {sum(p < k for p in places)}/{len(places)}" for k in (1, 3, 5, 10)))


if __name__ == "__main__":
    script_main(main)
