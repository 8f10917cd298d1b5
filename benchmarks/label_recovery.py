"""Label accuracy of every batch label rule, true and sketched gradients, LeNet and a ReLU+BatchNorm net.

For each data set, victim, batch size B and message (unsketched, SRHT at each
b/d), draw ``--trials`` batches whose labels repeat (ceil(B/2) classes, each at
least once, the rest drawn among them; distinct images), compute the client's
mean-loss gradient, sketch it with a fresh SRHT seed per trial, recover the
labels with every rule of ``leakattack.attacks.labels.LABEL_RULES`` and score
them with ``leakattack.metrics.label_accuracy`` of the sorted recovered labels
against the sorted true labels (the rules return multisets; one wrong count
shifts every later position, so this is the harsh score).  Beside it, the
multiset overlap sum_c min(n_hat_c, n_c) / B: the label accuracy after matching
when every dummy image converges to an image of its assigned label.  Prints
two markdown tables (sorted accuracy, overlap), one row per cell, one column
per rule (progress, the sorted accuracies, goes to stderr).

    python benchmarks/label_recovery.py [--trials 10] [--batch-sizes 2,4,8,16] [--ratios 1,0.5,0.1]
        [--datasets digits,photos] [--victims lenet,bn-eval,bn-train] [--distinct]
        [--sketch-dims 400000] [--image-size 224] [--weight-init xavier]

Victims: ``lenet`` (sigmoid, U(-0.5, 0.5), the attack's default), and ``bn-eval`` /
``bn-train``: a small conv net (conv-BN-ReLU twice, 2x2 average pool, linear head,
PyTorch's default init drawn from seed 0) with BatchNorm on running / batch
statistics; any other name is a leakattack model (e.g. ``resnet101``,
``vit_b_16``; seed 0, ``--weight-init``, BatchNorm on batch statistics).
``--sketch-dims`` gives SRHT sizes b instead of ratios (SAFL's b = 4e5 for
ResNet-101, 8e4 for ViT-Base); ``--image-size`` cuts the photos at that size.
All rules read one readout of the head and one probe pass
(``recover_labels_by_rule``).  ``--distinct`` draws batches without repeated
labels instead (B at most the data set's classes, 10 for digits and photos): the
default batch sizes leave out those above it, with a note on stderr; a given one
above it is refused.  Every batch is drawn before anything is measured, and a
batch size the images of a data set's classes cannot fill is refused.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import torch
from torch import nn

import targets
from leakattack import data
from leakattack.attacks.labels import LABEL_RULES, recover_labels_by_rule
from leakattack.errors import UserError
from leakattack.metrics import label_accuracy
from leakattack.script import count, counts, fractions, one_of, parser, positive, script_main, some_of, thread_count
from leakattack.seeds import torch_generator
from leakattack.sketch import get_sketch, sketch_dim

#: the batch sizes B without --batch-sizes (with --distinct, those up to a data set's number of classes)
BATCH_SIZES = (2, 4, 8, 16)
#: the victims built here; any other name is a leakattack model
OWN_VICTIMS = ("bn-eval", "bn-train")
#: the draws of one batch's labels tried before a batch size that rarely fits the classes' images is refused
DRAW_TRIES = 100_000


def sketch_sizes(text: str) -> list[int]:
    """An argparse type: comma-separated SRHT sizes b, whole numbers of at least 1 (``400000`` or ``4e5``)."""
    sizes = []
    for v in text.split(","):
        b = positive(v)
        if b != int(b):
            raise argparse.ArgumentTypeError(f"{v} is not a whole number")
        sizes.append(int(b))
    return sizes


class SmallBNNet(nn.Module):
    """conv3x3-BN-ReLU, conv3x3/2-BN-ReLU, 2x2 average pool, linear head: the shape of a ResNet's end."""

    def __init__(self, in_shape, num_classes: int = 10, width: int = 16):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(in_shape[0], width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(),
            nn.Conv2d(width, 2 * width, 3, stride=2, padding=1), nn.BatchNorm2d(2 * width), nn.ReLU(),
            nn.AdaptiveAvgPool2d(2), nn.Flatten())
        self.fc = nn.Linear(8 * width, num_classes)

    def forward(self, x):
        return self.fc(self.features(x))


def make_victim(name: str, ds, weight_init: str | None = None) -> targets.Victim:
    if name not in OWN_VICTIMS:
        return targets.get_model(name, num_classes=ds.num_classes, in_shape=ds.in_shape, seed=0, init=weight_init)
    module = SmallBNNet(ds.in_shape, ds.num_classes)
    targets.models.initialise(module, "default", torch_generator(0))
    return targets.Victim.from_module(module, input_shape=ds.in_shape, num_classes=ds.num_classes,
                                      bn_mode=name.split("-")[1], name=name)


def check_fits(ds, B: int, distinct: bool) -> None:
    """Refuse (UserError) a batch size B whose labels no draw of :func:`draw_batches` can give images of ``ds`` to:
    with ``distinct``, more than the classes that have an image; else more than the images of the ceil(B/2)
    fullest classes (or a class among them without one)."""
    room = np.sort(np.bincount(ds.labels.numpy(), minlength=ds.num_classes))[::-1]
    if distinct:
        filled = int((room > 0).sum())
        if B > filled:
            raise UserError(f"--distinct draws one image of each of B classes: batch size {B} exceeds the {filled} "
                            f"classes of {ds.name}")
        return
    k = min(ds.num_classes, (B + 1) // 2)
    classes = f"{k} of its classes" if k > 1 else "one of its classes"
    if room[k - 1] < 1:
        raise UserError(f"batch size {B} does not fit in {ds.name}: a batch's labels are {classes}, and only "
                        f"{int((room > 0).sum())} have an image")
    if room[:k].sum() < B:
        held = int(room[:k].sum())
        raise UserError(f"batch size {B} does not fit in {ds.name}: a batch's labels are {classes}, and the "
                        f"{f'{k} fullest hold' if k > 1 else 'fullest holds'} {held} image{'s' if held != 1 else ''}")


def draw_batches(ds, B: int, trials: int, distinct: bool, seed: int = 0) -> list[torch.Tensor]:
    """Image indices of ``trials`` batches: repeated labels (ceil(B/2) classes), or distinct ones.  A batch size
    that cannot fit (:func:`check_fits`), or whose labels fit the classes' images in none of DRAW_TRIES draws, is
    refused (UserError)."""
    check_fits(ds, B, distinct)
    rng = np.random.default_rng(seed)
    labels = ds.labels.numpy()
    C = ds.num_classes
    room = np.bincount(labels, minlength=C)
    out = []
    for _ in range(trials):
        for _ in range(DRAW_TRIES):
            if distinct:
                ys = rng.choice(C, size=B, replace=False)
            else:
                classes = rng.choice(C, size=min(C, (B + 1) // 2), replace=False)
                ys = np.concatenate([classes, rng.choice(classes, size=B - len(classes))])
            if (np.bincount(ys, minlength=C) <= room).all():
                break
        else:
            raise UserError(f"batch size {B}: none of {DRAW_TRIES:,} draws of its labels fitted the images of the "
                            f"classes of {ds.name}; give a smaller one")
        idx: list[int] = []
        for c in ys:
            idx.append(int(rng.choice([i for i in np.flatnonzero(labels == c) if i not in idx])))
        out.append(torch.tensor(idx))
    return out


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--trials", type=count, default=10)
    ap.add_argument("--batch-sizes", type=counts, default=None,
                    help=f"comma-separated batch sizes B (default: {','.join(map(str, BATCH_SIZES))}; with "
                         "--distinct the default leaves out those above a data set's number of classes, with a note "
                         "on stderr, and a given one above it is refused)")
    ap.add_argument("--ratios", type=fractions, default="1,0.5,0.1",
                    help="b/d of the SRHT, in (0, 1]; 1 means unsketched")
    ap.add_argument("--datasets", type=some_of(data.list_datasets, "dataset"), default="digits,photos")
    ap.add_argument("--victims", type=some_of(lambda: [*OWN_VICTIMS, *targets.list_models()], "victim", files=True),
                    default="lenet,bn-eval,bn-train")
    ap.add_argument("--rules", type=some_of(lambda: LABEL_RULES, "label rule"), default=",".join(LABEL_RULES))
    ap.add_argument("--distinct", action="store_true", help="batches without repeated labels")
    ap.add_argument("--sketch-dims", type=sketch_sizes, default=None,
                    help="SRHT sizes b (in place of --ratios when given)")
    ap.add_argument("--image-size", type=count, default=None, help="side of the photos (default: 32)")
    ap.add_argument("--weight-init", type=one_of(lambda: targets.INITS, "weight init"), default=None,
                    help="initialisation of a leakattack model (default: its own)")
    ap.add_argument("--threads", type=thread_count, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    rules = a.rules
    sets = {dname: data.get_dataset(dname, image_size=a.image_size if dname == "photos" else None)
            for dname in dict.fromkeys(a.datasets)}
    drawn: dict[tuple[str, int], list[torch.Tensor]] = {}  # (data set, B) -> the trials' batches, drawn up front
    for dname, ds in sets.items():
        for B in a.batch_sizes or BATCH_SIZES:
            if a.batch_sizes is None and a.distinct and B > ds.num_classes:
                print(f"# --distinct: batch size {B} left out on {dname}, which has {ds.num_classes} classes",
                      file=sys.stderr)
                continue
            drawn[dname, B] = draw_batches(ds, B, a.trials, a.distinct)
    rows = []
    for dname, ds in sets.items():
        for vname in a.victims:
            victim = make_victim(vname, ds, a.weight_init)
            if a.sketch_dims and max(a.sketch_dims) > victim.d:
                raise UserError(f"--sketch-dims {max(a.sketch_dims)} is more than the d = {victim.d} weights of "
                                f"{vname} on {dname}: b = d is the unsketched message, and a sketch has b <= d")
            sizes = ([(f"b = {b}", b) for b in a.sketch_dims] if a.sketch_dims else
                     [("none", victim.d) if r >= 1 else (str(r), sketch_dim(r, victim.d)) for r in a.ratios])
            for B in [B for d, B in drawn if d == dname]:
                batches = drawn[dname, B]
                acc = {(label, r): [] for label, _ in sizes for r in rules}
                over = {(label, r): [] for label, _ in sizes for r in rules}
                for t, idx in enumerate(batches):  # one gradient per batch, sketched at every size
                    x, y = ds.images[idx].to(victim.dtype), ds.labels[idx]
                    g = targets.flat_gradient(victim, x, y).detach()
                    for label, b in sizes:
                        sk = (get_sketch("none", victim.d, victim.d) if b >= victim.d
                              else get_sketch("srht", victim.d, b, seed=t + 1))
                        for r, rec in recover_labels_by_rule(victim, sk, sk.apply(g), B, rules).items():
                            acc[label, r].append(label_accuracy(rec, y.sort().values))
                            over[label, r].append(overlap(rec, y, ds.num_classes))
                for label, _ in sizes:
                    key = f"| {dname} | {vname} | {B} | {label} | "
                    rows.append((key, [np.mean(acc[label, r]) for r in rules],
                                 [np.mean(over[label, r]) for r in rules]))
                    print(key + " | ".join(f"{v:.2f}" for v in rows[-1][1]) + " |", file=sys.stderr, flush=True)
    for title, col in (("label_accuracy of sorted labels", 1), ("multiset overlap", 2)):
        print(f"\n{title} ({a.trials} batches per cell, {'distinct' if a.distinct else 'repeated'} labels)\n")
        print(f"| data | victim | B | sketch (b/d or b) | {' | '.join(rules)} |")
        print("|" + "---|" * (4 + len(rules)))
        for row in rows:
            print(row[0] + " | ".join(f"{v:.2f}" for v in row[col]) + " |")
        means = [np.mean([row[col][j] for row in rows]) for j in range(len(rules))]
        print("| mean | | | | " + " | ".join(f"{v:.2f}" for v in means) + " |")


def overlap(rec: torch.Tensor, true: torch.Tensor, C: int) -> float:
    """sum_c min(recovered count, true count) / B."""
    both = torch.minimum(torch.bincount(rec.cpu(), minlength=C), torch.bincount(true.cpu(), minlength=C))
    return float(both.sum()) / len(true)


if __name__ == "__main__":
    script_main(main)
