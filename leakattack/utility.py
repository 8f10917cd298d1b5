"""Privacy-utility: train the target under the same defense and report test accuracy and epsilon.

The training runs ``utility_steps`` (300) rounds of the ``sketched`` protocol
(Song et al. 2023, Algorithm 1) with one client, one local step of size
``utility_lr`` (0.5) and eta_g = 1: in round t the client computes the gradient
of a batch of ``utility_batch`` (64) images drawn uniformly without replacement
from the digits training split (``data.train_test_split``, test fraction 0.2,
seed = run seed), applies the defense's steps before the sketch (per-example
clipping if the spec says so), sketches with R_t drawn from the shared seed
sketch_seed (:func:`targets.protocols.round_seed`), applies the steps after
the sketch (giving y), and the server steps to w - eta R_t^T y.  Batches and noise come
from one generator seeded noise_seed + 1.  The model is built for digits
(1x28x28, 10 classes) whatever data set the attack used, float32 on the CPU;
accuracy is measured on the test split.  The training's epsilon composes
``utility_steps`` Gaussian mechanisms: sub-sampled with sample rate
batch / N_train where the defense bounds one example (a ``per_example`` clip;
Opacus assumes Poisson sampling, uniform batches are the usual approximation),
with rate 1 where it bounds the client's whole update (the neighbours add or
remove that update, which every round releases); next to it, the paper's
Theorem 6.2 (T*K = steps, no amplification).
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass
from typing import Any

import torch

import targets
from defenses import build as build_defense
from defenses.accounting import message_privacy
from targets.protocols import Protocol, evaluate, get_protocol

from .config import RunConfig
from .data import ImageSet, get_dataset, train_test_split
from .errors import SettingWarning, duration_text
from .observation import Observation
from .rebuilt import adds_noise
from .seeds import torch_generator
from .sketch.gaussian import SLOW_SKETCH_SECONDS


@dataclass(frozen=True)
class UtilitySettings:
    """What the training under the defense reads of a run: the model, its seeds, the sketch, the defense and the
    budget."""

    model: str
    weight_init: str | None
    split_seed: int  #: the digits train/test split (the run seed)
    model_seed: int
    sketch_seed: int  #: the protocol's shared seed: R_t from (sketch_seed, t)
    noise_seed: int  #: batches and noise from one generator seeded noise_seed + 1
    sketch: str
    sketch_ratio: float
    sketch_dim: int | None  #: b itself (else b from sketch_ratio)
    sketch_params: dict[str, Any]
    defense: str
    delta: float
    steps: int
    batch: int
    lr: float

    @classmethod
    def of(cls, cfg: RunConfig) -> UtilitySettings:
        """The settings of run ``cfg`` (its ``utility_*`` fields, seeds as :meth:`RunConfig.derived` gives them)."""
        seeds = cfg.derived()
        return cls(model=cfg.model, weight_init=cfg.weight_init, split_seed=cfg.seed, model_seed=seeds.model_seed,
                   sketch_seed=seeds.sketch_seed, noise_seed=seeds.noise_seed, sketch=cfg.sketch,
                   sketch_ratio=cfg.sketch_ratio, sketch_dim=cfg.sketch_dim, sketch_params=dict(cfg.sketch_params),
                   defense=cfg.defense, delta=cfg.delta, steps=cfg.utility_steps, batch=cfg.utility_batch,
                   lr=cfg.utility_lr)


def privacy_metrics(cfg: RunConfig, obs: Observation) -> dict:
    """Metrics keys of a defended run: the message's epsilon/delta (one release) and, with ``cfg.utility``,
    utility_*."""
    pipeline = build_defense(cfg.defense)
    m = {"defense": pipeline.spec, "noise_seed": obs.noise_seed, "g_norm": obs.g_norm, **obs.extra}
    # The noise protects the message the client sent, so the R in Delta = ||R||_op * C is the client's own sketch:
    # obs.sent_map, not the attacker's linear_map, which is a guess of it under --sketch-unknown.
    client = obs.sent_map
    norm = None
    if pipeline.needs_sketch_norm and hasattr(client, "operator_norm"):
        norm = client.operator_norm()
    m.update(message_privacy(pipeline, cfg.delta, steps=1, sample_rate=1.0, sketch_norm=norm,
                             batch_size=int(obs.batch_size), d=obs.d, b=obs.b))
    if cfg.utility:
        m.update(train_under_defense(UtilitySettings.of(cfg)))
    return m


def slow_norms_note(kind: str, steps: int, first_s: float, limit_s: float = SLOW_SKETCH_SECONDS) -> str | None:
    """One sentence when ``steps`` operator norms, each taking ``first_s`` seconds as the first did, are estimated to
    take longer than ``limit_s`` (None otherwise): the estimate, and the cheaper choices."""
    total = first_s * steps
    if total <= limit_s:
        return None
    return (f"--utility draws a fresh R_t for each of its {steps} steps, and the noise after the sketch needs "
            f"||R_t||, which sketch '{kind}' computes by Lanczos: {first_s:.2g} s for the first, about "
            f"{duration_text(total)} in all; use --sketch srht or countsketch (closed-form norms), noise before the "
            "sketch, or fewer --utility-steps")


def _warn_if_slow_norms(s: UtilitySettings, first_s: float) -> None:
    note = slow_norms_note(s.sketch, s.steps, first_s, SLOW_SKETCH_SECONDS)
    if note:
        warnings.warn(note, SettingWarning, stacklevel=4)


def sketched_protocol(s: UtilitySettings, victim: targets.Victim, train: ImageSet,
                      noise_rng: torch.Generator) -> Protocol:
    """The ``sketched`` protocol the training runs: one client, one local step of size ``s.lr`` a round, eta_g = 1,
    R_t from the shared seed ``s.sketch_seed``, the defense ``s.defense`` on the client with its noise from
    ``noise_rng``."""
    ratio = s.sketch_ratio if s.sketch_dim is None else s.sketch_dim / victim.d
    return get_protocol("sketched", victim, train, defense=s.defense, noise_rng=noise_rng, clients=1, local_steps=1,
                        local_lr=s.lr, global_lr=1.0, batch_size=s.batch, seed=s.sketch_seed, sketch=s.sketch,
                        sketch_ratio=ratio, sketch_params=dict(s.sketch_params))


def sketched_training(s: UtilitySettings, victim: targets.Victim, train: ImageSet,
                      gen: torch.Generator) -> tuple[torch.Tensor, float | None]:
    """The flat weights after ``s.steps`` rounds of :func:`sketched_protocol` from the victim's, each on a batch of
    ``s.batch`` images of ``train`` drawn from ``gen`` (which also draws the noise), and the largest ||R_t|| of the
    rounds where the defense's sensitivity has R in it (None otherwise)."""
    proto = sketched_protocol(s, victim, train, gen)
    n = len(train)
    norm = None  # the composed guarantee holds with the largest ||R_t|| of the rounds
    w = proto.initial_weights()
    for t in range(1, s.steps + 1):
        idx = torch.randperm(n, generator=gen)[:s.batch]
        if proto.defense.needs_sketch_norm:
            t_norm = time.perf_counter()
            norm = max(norm or 0.0, proto.operator(t).operator_norm())
            if t == 1:
                _warn_if_slow_norms(s, time.perf_counter() - t_norm)
        w, _ = proto.run_round(w, t, {0: (proto.images[idx], proto.labels[idx])})
    return w, norm


def training_sample_rate(pipeline, batch: int, n: int) -> float:
    """The sample rate the training's accountant amplifies by: batch / n where the bound is on one example (a
    ``per_example`` clip, DP-SGD); 1 where it is on the client's whole update, which every round releases (the
    one client takes part in all of them), so that the training's epsilon is never below one message's."""
    return min(1.0, batch / n) if pipeline.per_example else 1.0


#: a training whose test accuracy ends below this many times chance is said not to have learned
NOT_LEARNED = 2.0


def _not_learned(s: UtilitySettings, acc: float, classes: int, start: float, end: float) -> str | None:
    """The one-line warning (also the run's ``utility_note``) for a training that ended near chance: its accuracy
    then measures the training's settings (a step so large that the first rounds saturate the units) more than
    the defense; None where it learned."""
    chance = 1 / classes
    if not acc < NOT_LEARNED * chance:
        return None
    if adds_noise(s.defense):  # the noise may be the cause: a step size does not tell it apart
        why = ("so utility_acc measures the defense's noise or the training's step size or length: a smaller "
               "--utility-lr or more --utility-steps tells the step apart, and the same run with the noise left out "
               "of --defense the noise")
    else:
        clips = bool(s.defense) and bool(build_defense(s.defense).clips())
        clip = "" if clips else " (a clip bounds the steps and may read higher)"
        why = (f"so utility_acc measures the training's step size or length more than the defense{clip}; a smaller "
               "--utility-lr or more --utility-steps tells them apart")
    said = (f"--utility's training did not learn: test accuracy {acc:.3f} after {s.steps} steps of size {s.lr:g} "
            f"(chance {chance:.2f}; test loss {start:.3g} at its start, {end:.3g} at its end), {why} "
            "(docs/defenses.md#utility)")
    warnings.warn(said, SettingWarning, stacklevel=2)
    return said


def train_under_defense(s: UtilitySettings) -> dict:
    """Train a fresh target on digits under ``s.defense`` (see the module docstring); returns utility_* keys."""
    t0 = time.perf_counter()
    if targets.task_of(s.model) != "classification":
        return {"utility_acc": None, "utility_note": f"{s.model} is a regression model: no accuracy"}
    ds = get_dataset("digits")
    train, test = train_test_split(ds, 0.2, seed=s.split_seed)
    victim = targets.get_model(s.model, num_classes=ds.num_classes, in_shape=ds.in_shape, seed=s.model_seed,
                               init=s.weight_init)
    start = evaluate(victim, targets.flat_params(victim), test.images, test.labels)[0]
    w, norm = sketched_training(s, victim, train, torch_generator(s.noise_seed + 1))
    loss, acc = evaluate(victim, w, test.images, test.labels)
    learned = _not_learned(s, acc, ds.num_classes, start, loss)
    pipeline = build_defense(s.defense)
    q = training_sample_rate(pipeline, s.batch, len(train))
    b = sketched_protocol(s, victim, train, torch_generator(0)).floats_per_client()  # the length of y = R_t g
    priv = message_privacy(pipeline, s.delta, steps=s.steps, sample_rate=q, sketch_norm=norm, batch_size=s.batch,
                           d=victim.d, b=b)
    note = priv["privacy_note"]
    if priv["epsilon"] is not None:
        note += (f"; batches sample each example at rate {q:.4g}" if q < 1 else
                 "; the client's update is released every round (sample rate 1: the batch's sampling amplifies only "
                 "an example-level bound, a per_example clip)")
    out = {} if learned is None else {"utility_note": learned}
    return out | {"utility_acc": acc, "utility_steps": s.steps, "utility_batch": s.batch,
            "utility_lr": s.lr, "utility_sample_rate": q, "utility_privacy_note": note,
            "utility_epsilon": priv["epsilon"], "utility_epsilon_paper": priv["epsilon_paper"],
            "utility_sensitivity": priv["sensitivity"], "utility_sketch_norm": priv["sketch_norm"],
            "utility_delta_paper": priv["delta_paper"], "utility_wall_s": time.perf_counter() - t0}
