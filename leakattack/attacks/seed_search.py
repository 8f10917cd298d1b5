"""Seed recovery: find the sketch seed of a message y when it lies in a small space.

``--sketch-seed-search BITS`` grants the attacker every bit of the client's
sketch seed but the low BITS; each of the 2^BITS candidates R_k is scored by a
statistic of y alone,

    s(R, y) = ||M a+||^2 / (C ||a+||^2 ||y||^2 / b),

M = [U | beta] the head's block of R^T y and a+ = [mean head input of random
probe images, 1]: about 1 for a wrong seed, hundreds for the right one (lenet,
b/d = 0.5).  Only the head's coordinates of R^T y are computed, by the family's
``Sketch.adjoint_columns`` (srht, countsketch and sparse from their draws alone,
checked against the built operator on the first candidates).  The statistic's
derivation, the alternatives that separate less, and the measurements:
docs/attacks/seed-search.md.
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass
from functools import partial

import numpy as np
import torch

import targets

from ..errors import SettingWarning, SlowWarning, UserError, duration_text
from ..progress import progress_bar
from ..sketch import Sketch, is_identity, sketch_class
from .labels import probe

#: the most bits ``--sketch-seed-search`` accepts: 2^32 candidates are months at a millisecond each
MAX_BITS = 32
#: a search estimated to take longer than this (s) is warned about; one longer than HOPELESS_S is hopeless
SLOW_SEARCH_S, HOPELESS_S = 600.0, 3600.0
#: random probe images whose mean head input is the direction a+
PROBES = 64
#: candidates scored together (the SRHT's chunk is smaller for long gradients: see ``chunk_size``)
CHUNK = 256


@dataclass(frozen=True)
class HeadBlock:
    """Where the classifier head's weight (C x H) and bias (C, or none) sit in the flat gradient."""

    weight: slice
    bias: slice | None
    shape: tuple[int, int]

    @property
    def cols(self) -> np.ndarray:
        """The flat indices of the head block: the weight row by row, then the bias."""
        parts = [np.arange(self.weight.start, self.weight.stop)]
        if self.bias is not None:
            parts.append(np.arange(self.bias.start, self.bias.stop))
        return np.concatenate(parts)

    def matrix(self, u: torch.Tensor) -> torch.Tensor:
        """M = [U | beta] (..., C, H + 1) from u's head coordinates (..., len(cols)) in the order of ``cols``."""
        C, H = self.shape
        U = u[..., : C * H].reshape(*u.shape[:-1], C, H)
        if self.bias is None:
            return U
        return torch.cat([U, u[..., C * H:].unsqueeze(-1)], dim=-1)


def head_block(victim) -> HeadBlock:
    """The head of ``victim`` (its last linear layer) as a :class:`HeadBlock`; one UserError sentence for a victim
    without a classification head (a regression, a frozen head), whose gradient has no block to score."""
    head = victim.head
    if head is None:
        why = "its classifier head is frozen" if victim.task == "classification" else f"it is a {victim.task} model"
        raise UserError(f"--sketch-seed-search scores the classifier head's block of R^T y, and model "
                        f"'{victim.name}' has none to score ({why})")
    names = {id(p): n for n, p in victim.model.named_parameters()}
    slices = targets.param_slices(victim)
    bias = slices[names[id(head.bias)]] if head.bias is not None and head.bias.requires_grad else None
    weight = head.weight
    return HeadBlock(slices[names[id(weight)]], bias, (int(weight.shape[0]), int(weight.shape[1])))


# -- reading R^T y at the head's coordinates, for a chunk of candidate seeds -----------------

def head_reader(kind: str, d: int, b: int, params: dict, y: torch.Tensor, cols: np.ndarray, fast: bool = True):
    """seeds -> (K, len(cols)) float64: (R_s^T y)[cols] for each seed s, R_s = get_sketch(kind, d, b, s, **params).

    ``fast``: the family's own :meth:`~leakattack.sketch.Sketch.adjoint_columns`, which computes those coordinates
    from the family's random draws (srht, countsketch, sparse) without building R; otherwise each R is built.
    """
    cls = sketch_class(kind)
    # the base class's generic reader (R built per seed), bound to the family's class
    method = cls.adjoint_columns if fast else partial(Sketch.adjoint_columns.__func__, cls)  # type: ignore[attr-defined]
    return lambda seed_list: method(seed_list, y, cols, d=d, b=b, **params)


def has_fast_reader(kind: str) -> bool:
    """Whether sketch ``kind`` computes head coordinates of R^T y from its draws alone."""
    return sketch_class(kind).draws_columns


def fast_reader_agrees(kind: str, d: int, b: int, params: dict, y: torch.Tensor, cols: np.ndarray,
                       seed_list) -> bool:
    """Whether the fast reader of ``kind`` gives the family's own R^T y on ``seed_list`` (to 1e-9, relative)."""
    fast = head_reader(kind, d, b, params, y, cols)(seed_list)
    ref = head_reader(kind, d, b, params, y, cols, fast=False)(seed_list)
    return bool((fast - ref).abs().max() <= 1e-9 * ref.abs().max().clamp_min(1e-300))


# -- the statistic --------------------------------------------------------------------------

def probe_direction(victim, block: HeadBlock, like: torch.Tensor, probes: int = PROBES) -> torch.Tensor:
    """a+ = [mean head input of ``probes`` random images, 1]: the direction the head's rows share (float64)."""
    H = block.shape[1]
    feats = probe(victim, probes, like).feats
    mean = feats.reshape(-1, H).mean(0) if feats.numel() % H == 0 else torch.ones(H)
    parts = [mean.detach().to(torch.float64).cpu()]
    if block.bias is not None:
        parts.append(torch.ones(1, dtype=torch.float64))
    a = torch.cat(parts)
    return a if float(a.norm()) > 0 else torch.ones_like(a)


def match_statistic(M: torch.Tensor, direction: torch.Tensor, noise: float) -> torch.Tensor:
    """||M a||^2 / (C ||a||^2 noise) for M (..., C, H+1): chi^2_C / C (mean 1) when M is noise of variance ``noise``."""
    C = M.shape[-2]
    return (M @ direction).pow(2).sum(-1) / (C * float(direction @ direction) * noise)


# -- cost -----------------------------------------------------------------------------------

def search_seconds(per_candidate_s: float, bits: int) -> float:
    """Estimated wall time of a search over 2^bits candidates at ``per_candidate_s`` seconds each."""
    return per_candidate_s * 2.0 ** bits


def hopeless_bits(per_candidate_s: float, limit_s: float = HOPELESS_S) -> int:
    """The fewest bits whose search takes longer than ``limit_s`` at ``per_candidate_s`` seconds per candidate."""
    return max(0, math.ceil(math.log2(limit_s / max(per_candidate_s, 1e-12)) + 1e-12))


def search_note(per_candidate_s: float, bits: int, limit_s: float = SLOW_SEARCH_S, once_s: float = 0.0) -> str | None:
    """One sentence when searching 2^bits seeds is estimated to take longer than ``limit_s`` (None otherwise):
    ``per_candidate_s`` for each candidate, after ``once_s`` of work done once (the probes, the reader's check)."""
    total = once_s + search_seconds(per_candidate_s, bits)
    if total <= limit_s:
        return None
    return (f"searching 2^{bits} sketch seeds takes about {duration_text(total)} at {per_candidate_s * 1e3:.2g} ms per "
            f"candidate: hopeless from {hopeless_bits(per_candidate_s)} bits on this machine (over "
            f"{duration_text(HOPELESS_S)}); use fewer --sketch-seed-search bits")


# -- the search -----------------------------------------------------------------------------

def candidate_base(seed: int, bits: int) -> int:
    """seed_base: ``seed`` with its low ``bits`` bits cleared (the candidates are seed_base + k, k < 2^bits)."""
    return (int(seed) >> bits) << bits


@dataclass
class SeedSearch:
    """What a search found; ``record()`` is the metrics.json entry."""

    bits: int
    seed_base: int
    candidates: int
    found_seed: int
    best: float  #: the statistic of the winner (1: noise)
    runner_up: float  #: the statistic of the best other candidate
    null_mean: float  #: mean and standard deviation of the statistic over every candidate but the winner
    null_std: float
    per_candidate_ms: float
    wall_s: float
    reader: str  #: "head" (only the head's coordinates, from R's random numbers) or "adjoint" (the whole R^T y)
    true_seed: int | None = None  #: for scoring only: never used to choose
    true_rank: int | None = None  #: candidates scoring above the true seed (0: it won)
    true_statistic: float | None = None

    def record(self) -> dict:
        out = {"bits": self.bits, "candidates": self.candidates, "seed_base": self.seed_base,
               "found_seed": self.found_seed, "statistic_best": self.best, "statistic_runner_up": self.runner_up,
               "separation": self.best / self.runner_up if self.runner_up > 0 else None,
               "null_mean": self.null_mean, "null_std": self.null_std,
               "per_candidate_ms": self.per_candidate_ms, "wall_s": self.wall_s, "reader": self.reader}
        if self.true_seed is not None:
            out.update(found=self.found_seed == self.true_seed, true_seed_rank=self.true_rank,
                       statistic_true=self.true_statistic)
        return out


def chunk_size(kind: str, d: int) -> int:
    """Candidates read together: a family that holds a row per candidate (the SRHT: n long) holds a chunk of them,
    at most 2^21 numbers."""
    n = sketch_class(kind).column_work_length(d)
    return CHUNK if n is None else max(1, min(CHUNK, (1 << 21) // n))


#: a winning statistic below this many times the runner-up's is warned of as not standing out
STANDS_OUT = 2.0


def search_seed(victim, y: torch.Tensor, kind: str, b: int, params: dict, *, seed_base: int, bits: int,
                true_seed: int | None = None, progress: bool = False, warn_after_s: float = SLOW_SEARCH_S,
                probes: int = PROBES) -> SeedSearch:
    """Score every candidate seed_base + k, k < 2^bits (bits >= 1), by :func:`match_statistic`; the highest wins.

    ``true_seed`` (the client's, for scoring) only fills ``true_rank``.  After the
    first chunk the remaining time is estimated, and a :class:`SettingWarning` says
    so when the whole search would take longer than ``warn_after_s``.
    """
    t0 = time.perf_counter()
    d, total = victim.d, 1 << bits
    block = head_block(victim)
    cols = block.cols
    yv = y.detach().to(device="cpu", dtype=torch.float64).reshape(-1)
    noise = float(yv.pow(2).sum()) / b
    direction = probe_direction(victim, block, victim.reference_parameter(), probes)
    first = [seed_base, seed_base + 1][: total]
    fast = has_fast_reader(kind) and fast_reader_agrees(kind, d, b, params, yv, cols, first)
    read = head_reader(kind, d, b, params, yv, cols, fast=fast)

    def score(seed_list) -> torch.Tensor:
        return match_statistic(block.matrix(read(seed_list)), direction, noise)

    true_stat = float(score([true_seed])[0]) if true_seed is not None else None
    best: tuple[float, int | None] = (-math.inf, None)
    second = -math.inf
    above, s1, s2 = 0, 0.0, 0.0
    step = chunk_size(kind, d)
    warned = False
    t_loop = time.perf_counter()
    with progress_bar(total, "seed search", "seed", requested=progress) as bar:
        for c0 in range(0, total, step):
            seed_list = range(seed_base + c0, seed_base + min(total, c0 + step))
            stats = score(seed_list)
            s1 += float(stats.sum())
            s2 += float(stats.pow(2).sum())
            if true_stat is not None:
                above += int((stats > true_stat * (1 + 1e-9)).sum())
            top = torch.topk(stats, min(2, stats.numel()))
            for v, i in zip(top.values.tolist(), top.indices.tolist()):
                if v > best[0]:
                    best, second = (v, seed_list[i]), best[0]
                elif v > second:
                    second = v
            bar.update(len(seed_list))
            if not warned and c0 + step < total:
                warned = True
                per = (time.perf_counter() - t_loop) / min(total, c0 + step)  # the setup above is paid once
                note = search_note(per, bits, warn_after_s, once_s=t_loop - t0)
                if note:
                    warnings.warn(note, SlowWarning, stacklevel=2)
    wall = time.perf_counter() - t0
    assert best[1] is not None  # every search scores at least one candidate
    if math.isfinite(second) and best[0] < STANDS_OUT * second:
        warnings.warn(f"seed search: the winning seed's statistic, {best[0]:.3g}, does not stand out from the "
                      f"runner-up's, {second:.3g} (a wrong seed scores about 1; on lenet the largest wrong ones "
                      "scored 2.9-4.9 and the client's 7.6 or more from b/d = 0.01, docs/attacks/seed-search.md): "
                      "the search may have found no seed, and the attack then runs through a sketch that is not the "
                      "client's", SettingWarning, stacklevel=2)
    rest = max(1, total - 1)
    mean = (s1 - best[0]) / rest
    var = max(0.0, (s2 - best[0] ** 2) / rest - mean ** 2)
    return SeedSearch(bits=bits, seed_base=seed_base, candidates=total, found_seed=int(best[1]), best=best[0],
                      runner_up=second, null_mean=mean, null_std=math.sqrt(var), per_candidate_ms=wall / total * 1e3,
                      wall_s=wall, reader="head" if fast else "adjoint", true_seed=true_seed,
                      true_rank=above if true_seed is not None else None, true_statistic=true_stat)


def found_text(s: dict) -> str:
    """What a seed search's record (metrics.json's ``seed_search``) says it found, in words: ``seed 1 of 256
    candidates, the client's seed, statistic 533 against 2.87 for the runner-up (about 1 for a wrong seed)``."""
    truth = "" if "found" not in s else \
        ", the client's seed" if s["found"] else f", not the client's seed (which ranked {s['true_seed_rank'] + 1})"
    return (f"seed {s['found_seed']} of {s['candidates']} candidates{truth}, statistic {s['statistic_best']:.3g} "
            f"against {s['statistic_runner_up']:.3g} for the runner-up (about 1 for a wrong seed)")


def sketch_not_held(run) -> bool:
    """Whether a run's attacker used another sketch than the client's (a run's config.json ``run`` section):
    ``--sketch-unknown`` without a seed search, on a sketch that is not the identity (a plugin's sketch that is not
    registered here counts as one that is not)."""
    if run.get("sketch_known") is not False or run.get("sketch_seed_search"):
        return False
    try:
        return not is_identity(str(run.get("sketch")))
    except UserError:
        return True


__all__ = ["sketch_not_held", "found_text",
           "HeadBlock", "SeedSearch", "head_block", "head_reader", "fast_reader_agrees",
           "probe_direction", "match_statistic", "search_seconds", "hopeless_bits", "search_note", "candidate_base",
           "search_seed", "MAX_BITS", "has_fast_reader"]
