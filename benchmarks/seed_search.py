"""Seed recovery (``--sketch-seed-search``): separation of the statistic, success of the search, cost per candidate.

Three measurements, each printed as a markdown table (progress to stderr):

* ``separation``: for each victim, sketch family and b/d, the statistic of
  ``leakattack.attacks.seed_search`` on the client's own seed against its
  distribution over ``--wrong`` other seeds (drawn far from the client's):
  the true value, the wrong seeds' mean, standard deviation and maximum, the
  z-score (true - mean) / std, and the true seed's rank among them (1: above all).
* ``success``: ``--pairs`` (client seed, image) pairs, the seed a random 62-bit
  number, each searched over 2^``--bits`` candidates with ``search_seed`` as
  ``leakattack run --sketch-unknown --sketch-seed-search BITS`` does; how often
  the client's seed wins, and the winner's statistic against the runner-up's.
* ``cost``: milliseconds per candidate (chunks of candidates, best of three
  rounds), the extrapolated time of a search per number of bits, and the
  number of bits from which a search takes more than ten minutes and more than
  an hour on this machine.

    python benchmarks/seed_search.py separation [--wrong 1000] [--images 2] [--ratios 0.05,0.2,0.5]
        [--models lenet,mlp] [--kinds srht,countsketch,sparse,uniform,gaussian]
    python benchmarks/seed_search.py success [--bits 12] [--pairs 10] [--ratio 0.5] [--kinds srht,countsketch]
    python benchmarks/seed_search.py cost [--kinds srht,countsketch,sparse,uniform,gaussian]

Victims: ``lenet`` and ``mlp`` (sigmoid, their default initialisations, model
seed = image index) on the embedded photos at 32 px, batch of one, float64; the
dense ``gaussian`` family on the same networks at 8 px (lenet d = 8626, mlp with
16 hidden units d = 3258), where rebuilding R per candidate takes tenths of a
second instead of seconds, with ``--wrong`` capped at 200.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings

import numpy as np
import torch

import targets
from leakattack import data
from leakattack.attacks import seed_search as ss
from leakattack.errors import duration_text
from leakattack.script import count, fraction, one_of, parser, script_main, seed, some_of
from leakattack.sketch import get_sketch, list_sketches, sketch_dim

RATIOS = (0.05, 0.2, 0.5)
#: the dense family is measured on small victims only, and on fewer wrong seeds
SMALL = {"gaussian", "ams"}
SMALL_WRONG = 200
#: the embedded photos (``data.get_dataset("photos")``)
PHOTOS = 50


def bits(text: str) -> int:
    """An argparse type: a number of bits from 1 to ``seed_search.MAX_BITS``, the most ``--sketch-seed-search``
    accepts."""
    value = count(text)
    if value > ss.MAX_BITS:
        raise argparse.ArgumentTypeError(f"{value} is above {ss.MAX_BITS}, the most bits --sketch-seed-search "
                                         "searches")
    return value


def fractions(text: str) -> list[float]:
    """An argparse type: comma-separated numbers in (0, 1] (b/d values)."""
    return [fraction(v) for v in text.split(",")]


def photo_count(text: str) -> int:
    """An argparse type: a number of embedded photos, from 1 to the 50 the data set holds."""
    value = count(text)
    if value > PHOTOS:
        raise argparse.ArgumentTypeError(f"{value} is above {PHOTOS}, the photos of the embedded data set")
    return value


def victim_of(model: str, image: int, small: bool):
    """(victim, gradient) for photo ``image`` at 32 px (8 px for ``small``), model seed = image, float64."""
    with warnings.catch_warnings():  # a seed search scores no reconstruction: 8 px, below SSIM's window, is fine
        warnings.filterwarnings("ignore", "images of 8x8 pixels cannot be scored")
        ds = data.get_dataset("photos", image_size=8 if small else 32)
    x, labels = data.get_batch(ds, image, 1)
    extra = {"hidden": 16} if small and model == "mlp" else {}
    victim = targets.get_model(model, num_classes=ds.num_classes, in_shape=ds.in_shape, seed=image, **extra)
    victim.to(dtype=torch.float64)
    g = targets.flat_gradient(victim, x.double(), victim.target(labels)).detach()
    return victim, g


def scorer(victim, y, kind, b):
    """seeds -> statistic, with the reader a search would use."""
    block = ss.head_block(victim)
    direction = ss.probe_direction(victim, block, next(victim.model.parameters()))
    read = ss.head_reader(kind, victim.d, b, {}, y, block.cols)
    noise = float(y.pow(2).sum()) / b
    return lambda seeds: ss.match_statistic(block.matrix(read(list(seeds))), direction, noise)


def separation(a) -> None:
    print("| victim | d | sketch | b/d | true | wrong mean ± std | wrong max | z | rank of true |")
    print("|---|---|---|---|---|---|---|---|---|")
    for model in a.models:
        for kind in a.kinds:
            small = kind in SMALL
            wrong = min(a.wrong, SMALL_WRONG) if small else a.wrong
            for ratio in a.ratios:
                for image in range(a.images):
                    victim, g = victim_of(model, image, small)
                    b = sketch_dim(ratio, victim.d)
                    true_seed = 7_000_003 + 977 * image
                    y = get_sketch(kind, victim.d, b, seed=true_seed).apply(g).detach()
                    score = scorer(victim, y, kind, b)
                    t = float(score([true_seed])[0])
                    base = 10 ** 9 + 10 ** 6 * image
                    w = torch.cat([score(range(base + c, base + min(wrong, c + ss.CHUNK)))
                                   for c in range(0, wrong, ss.CHUNK)])
                    rank = 1 + int((w >= t).sum())
                    name = f"{model}{' (8 px)' if small else ''}"
                    print(f"| {name} | {victim.d} | {kind} | {ratio} | {t:.3g} | {w.mean():.3f} ± {w.std():.3f} | "
                          f"{w.max():.3g} | {(t - w.mean()) / w.std():.0f} | {rank} of {wrong + 1} |", flush=True)


def success(a) -> None:
    rng = np.random.default_rng(a.seed)
    print("| victim | sketch | b/d | bits | found | statistic of the winner (min) | best wrong (max) | "
          "ms per candidate |")
    print("|---|---|---|---|---|---|---|---|")
    for kind in a.kinds:
        found, best, wrong, per = 0, [], [], []
        for pair in range(a.pairs):
            image = pair % PHOTOS
            victim, g = victim_of(a.model, image, False)
            b = sketch_dim(a.ratio, victim.d)
            true_seed = int(rng.integers(0, 2 ** 62))
            y = get_sketch(kind, victim.d, b, seed=true_seed).apply(g).detach()
            r = ss.search_seed(victim, y, kind, b, {}, seed_base=ss.candidate_base(true_seed, a.bits), bits=a.bits,
                               true_seed=true_seed, progress=True)
            found += r.found_seed == true_seed
            best.append(r.best)
            wrong.append(r.runner_up if r.found_seed == true_seed else r.best)
            per.append(r.per_candidate_ms)
            print(f"  {kind} pair {pair}: image {image}, seed {true_seed}, found {r.found_seed == true_seed}, "
                  f"best {r.best:.3g}, runner-up {r.runner_up:.3g}, {r.wall_s:.1f} s", file=sys.stderr, flush=True)
        print(f"| {a.model} | {kind} | {a.ratio} | {a.bits} | {found}/{a.pairs} | {min(best):.3g} | {max(wrong):.3g} | "
              f"{np.median(per):.2f} |", flush=True)


def cost(a) -> None:
    print("| victim | d | sketch | b/d | reader | ms per candidate | 2^16 | 2^20 | 2^24 | > 10 min from | > 1 h from |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for model in a.models:
        for kind in a.kinds:
            small = kind in SMALL
            victim, g = victim_of(model, 0, small)
            b = sketch_dim(a.ratio, victim.d)
            y = get_sketch(kind, victim.d, b, seed=1).apply(g).detach()
            score = scorer(victim, y, kind, b)
            k = min(ss.chunk_size(kind, victim.d), 8 if small else 64)
            score(range(k))  # warm up
            per = min(_timed(score, range(1000 * r, 1000 * r + k)) / k for r in range(3))
            reader = "head" if ss.has_fast_reader(kind) else "adjoint"
            span = [duration_text(ss.search_seconds(per, bits)) for bits in (16, 20, 24)]
            print(f"| {model}{' (8 px)' if small else ''} | {victim.d} | {kind} | {a.ratio} | {reader} | "
                  f"{per * 1e3:.3g} | {' | '.join(span)} | {ss.hopeless_bits(per, ss.SLOW_SEARCH_S)} | "
                  f"{ss.hopeless_bits(per)} |", flush=True)


def _timed(fn, arg) -> float:
    t0 = time.perf_counter()
    fn(arg)
    return time.perf_counter() - t0


def main() -> None:
    p = parser(__doc__)
    p.add_argument("what", choices=("separation", "success", "cost"))
    p.add_argument("--models", type=some_of(targets.list_models, "model"), default="lenet,mlp")
    p.add_argument("--model", type=one_of(targets.list_models, "model"), default="lenet", help="success: the victim")
    p.add_argument("--kinds", type=some_of(list_sketches, "sketch"), default=None)
    p.add_argument("--wrong", type=count, default=1000)
    p.add_argument("--images", type=photo_count, default=2, help=f"separation: photos 0 to N-1, N at most {PHOTOS}")
    p.add_argument("--bits", type=bits, default=12, help=f"success: bits searched, at most {ss.MAX_BITS}")
    p.add_argument("--pairs", type=count, default=10)
    p.add_argument("--ratio", type=fraction, default=0.5, help="success, cost: b/d, in (0, 1] (the run default)")
    p.add_argument("--ratios", type=fractions, default=",".join(map(str, RATIOS)),
                   help="separation: the b/d values, each in (0, 1]")
    p.add_argument("--seed", type=seed, default=0, help="success: seed of the client seeds, at least 0")
    a = p.parse_args()
    a.kinds = a.kinds or (["srht", "countsketch"] if a.what == "success"
                          else ["srht", "countsketch", "sparse", "uniform", "gaussian"])
    torch.set_num_threads(1)
    {"separation": separation, "success": success, "cost": cost}[a.what](a)


if __name__ == "__main__":
    script_main(main)
