"""Privacy-utility: train the target under the same defense and report test accuracy and epsilon.

Budget (documented, small on purpose): ``utility_steps`` (300) steps of SGD,
step size ``utility_lr`` (0.5), batches of ``utility_batch`` (64) images drawn
uniformly without replacement from the digits training split
(``data.train_test_split``, test fraction 0.2, seed = run seed), float32 on the
CPU.  Every step is one client message of the attacked kind: the defended
gradient g~ (per-example clipping if the spec says so), sketched with a fresh
R_t (seed sketch_seed + 1 + t, as sk_t in Algorithm 1 of Song et al. 2023),
defended after the sketch, and desketched by the server as R_t^T y.  The model
is built for digits (1x28x28, 10 classes) whatever data set the attack used.
Accuracy is measured on the test split.  The training's epsilon composes
``utility_steps`` sub-sampled Gaussian mechanisms with sample rate
batch / N_train (Opacus assumes Poisson sampling; uniform batches are the usual
approximation) and, next to it, the paper's Theorem 6.2 (T*K = steps, no
amplification).
"""

from __future__ import annotations

import time
import warnings

import torch

import targets
from defenses import build as build_defense
from defenses.accounting import message_privacy

from .channel import Channel
from .data import get_dataset, train_test_split
from .errors import SettingWarning, duration_text
from .observation import Observation, gradient_of
from .seeds import torch_generator
from .sketch import get_sketch
from .sketch.gaussian import SLOW_SKETCH_SECONDS


def privacy_metrics(cfg, obs: Observation) -> dict:
    """Metrics keys of a defended run: the message's epsilon/delta (one release) and, with ``cfg.utility``,
    utility_*."""
    pipeline = build_defense(cfg.defense)
    m = {"defense": pipeline.spec, "noise_seed": obs.noise_seed, "g_norm": obs.g_norm, **obs.extra}
    # The noise protects the message the client sent, so the R in Delta = ||R||_op * C is the client's own sketch:
    # obs.linear_map is the channel's sketch (whatever sketch the attacker is granted), not an attacker's guess.
    norm = None
    if pipeline.needs_sketch_norm and hasattr(obs.linear_map, "operator_norm"):
        norm = obs.linear_map.operator_norm()
    m.update(message_privacy(pipeline, cfg.delta, steps=1, sample_rate=1.0, sketch_norm=norm))
    if cfg.utility:
        m.update(train_under_defense(cfg))
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


def _warn_if_slow_norms(cfg, first_s: float) -> None:
    note = slow_norms_note(cfg.sketch, cfg.utility_steps, first_s, SLOW_SKETCH_SECONDS)
    if note:
        warnings.warn(note, SettingWarning, stacklevel=3)


def train_under_defense(cfg) -> dict:
    """Train a fresh target on digits under ``cfg.defense`` (see the module docstring); returns utility_* keys."""
    t0 = time.perf_counter()
    if targets.task_of(cfg.model) != "classification":
        return {"utility_acc": None, "utility_note": f"{cfg.model} is a regression model: no accuracy"}
    seeds = cfg.derived()
    ds = get_dataset("digits")
    train, test = train_test_split(ds, 0.2, seed=cfg.seed)
    victim = targets.get_model(cfg.model, num_classes=ds.num_classes, in_shape=ds.in_shape,
                               seed=seeds.model_seed, init=cfg.weight_init)
    d = victim.d
    b = cfg.sketch_b(d)
    gen = torch_generator(seeds.noise_seed + 1)  # batches and noise of the training run
    n = len(train)
    params = [p for p in victim.model.parameters() if p.requires_grad]
    pipeline = build_defense(cfg.defense)
    needs_norm = pipeline.needs_sketch_norm
    norm = None  # the composed guarantee holds with the largest ||R_t|| of the steps (None: Delta has no R in it)
    for t in range(cfg.utility_steps):
        idx = torch.randperm(n, generator=gen)[:cfg.utility_batch]
        channel = Channel(get_sketch(cfg.sketch, d, b, seed=seeds.sketch_seed + 1 + t, **cfg.sketch_params),
                          pipeline)
        if needs_norm:
            t_norm = time.perf_counter()
            norm = max(norm or 0.0, channel.sketch.operator_norm())
            if t == 0:
                _warn_if_slow_norms(cfg, time.perf_counter() - t_norm)
        g = gradient_of(victim, train.images[idx], train.labels[idx], channel.per_example).detach()
        update = channel.sketch.adjoint(channel.send(g, gen))
        with torch.no_grad():
            offset = 0
            for p in params:
                p.sub_(cfg.utility_lr * update[offset:offset + p.numel()].view_as(p))
                offset += p.numel()
    with torch.no_grad():
        acc = float((victim.model(test.images).argmax(-1) == test.labels).float().mean())
    q = min(1.0, cfg.utility_batch / n)
    priv = message_privacy(pipeline, cfg.delta, steps=cfg.utility_steps, sample_rate=q, sketch_norm=norm)
    return {"utility_acc": acc, "utility_steps": cfg.utility_steps, "utility_batch": cfg.utility_batch,
            "utility_lr": cfg.utility_lr, "utility_sample_rate": q,
            "utility_epsilon": priv["epsilon"], "utility_epsilon_paper": priv["epsilon_paper"],
            "utility_sensitivity": priv["sensitivity"], "utility_sketch_norm": priv["sketch_norm"],
            "utility_delta_paper": priv["delta_paper"], "utility_wall_s": time.perf_counter() - t0}
