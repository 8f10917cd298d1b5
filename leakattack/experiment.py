"""One attack, end to end: case (data, victim, observation) -> attack -> metrics -> run folder.

:func:`prepare` builds everything and validates what needs the model or data
(raising a one-sentence error) before anything is written; :func:`execute` runs
the attack and scores it; :func:`write_run` writes the run folder (atomically, by
:func:`leakattack.results.write_run_folder`).
:func:`run_attack` chains the three for the CLI and sweeps.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import inspect
import math
import platform
import sys
import time
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import torch

import defenses
from targets.victim import batchnorm_layers, batchnorm_without_running_statistics

from . import __version__, metrics
from .attacks import RECIPE_FIELDS, Attack, AttackResult, closed_forms_for, parse_prior
from .attacks.base import own_reconstruct, stop_on_interrupt, threads_seen
from .attacks.gauss_newton import steps_note
from .attacks.recipes import NOISY_EVIDENCE, ROUNDING_EVIDENCE, noisy_without_prior
from .attacks.seed_search import sketch_not_held
from .attacks.surrogate import relu_modules
from .cases import Case, build_case
from .config import RUN_PARAMS, ConfigError, Derived, RunConfig
from .config.params import duration_seconds
from .data import batch_positions, reads_root
from .data.base import RANGE_SLACK
from .errors import SettingWarning, UserError, listed, ratio_text, shown_names
from .figures import convergence_figure, reconstruction_figure
from .figures.run import verdict_line
from .observation import ONE_IMAGE_IN_TRAIN_MODE, without_running_statistics
from .plugins import provenance
from .rebuilt import HALTED
from .results import default_run_dir, writable_out, write_csv, write_json, write_run_folder, write_tensors
from .results.io import wrong_kind_text
from .results.reference import cpu_model, machine
from .results.runs import RUNS_ROOT
from .seeds import torch_defaults
from .sketch import is_identity, sketch_class
from .utility import privacy_metrics


@dataclass
class Prepared:
    cfg: RunConfig
    device: torch.device
    case: Case
    attack: Attack
    #: the files the run read that a name alone does not pin down (:func:`input_files`): their
    #: absolute path and SHA-256 as read, in config.json's "files"
    files: dict = field(default_factory=dict)
    #: where the peak resident memory counts from (:func:`reset_peak_memory`): ``"run"`` or ``"process"``
    rss_from: str = "process"

    # the case's parts, by the names callers use
    @property
    def x(self) -> torch.Tensor | None:
        return self.case.x

    @property
    def labels(self) -> torch.Tensor | None:
        return self.case.labels

    @property
    def victim(self):
        return self.case.victim

    @property
    def obs(self):
        return self.case.obs

    @property
    def dataset(self):
        return self.case.dataset


@dataclass
class Outcome:
    prepared: Prepared
    result: AttackResult
    metrics: metrics.RunMetrics
    trace: list[dict]
    threads: int | None = None  #: the most threads the attack ran torch on (config.json's environment)


def unknowns(case: Case) -> int:
    """m*B: the numbers the attacker has to find (values of one example times the batch size)."""
    return case.victim.unknowns_per_example * int(case.obs.batch_size)


def warn_if_not_unique(case: Case) -> None:
    """One warning line when the message has fewer numbers than there are unknowns."""
    mB = unknowns(case)
    if case.obs.rank_bound < mB:
        warnings.warn(f"the message has {case.obs.numbers_said()} for m*B = {mB} unknowns "
                      f"({case.victim.unknowns_per_example} per image x {case.obs.batch_size}): the reconstruction is "
                      "not unique, and a matched loss does not mean the images were found", SettingWarning,
                      stacklevel=2)


def resolve_device(name: str) -> torch.device:
    """``auto`` -> CUDA when present, else CPU."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def _tf32_switches() -> list[tuple[object, str, object]]:
    """(object, attribute, value meaning IEEE float32) of each switch that lets CUDA round float32 to TF32: torch's
    per-backend ``fp32_precision`` where it has one (2.9 on), else the older ``allow_tf32`` flags (the two APIs are
    not mixed: torch refuses to read a mix)."""
    conv = getattr(torch.backends.cudnn, "conv", None)
    matmul = torch.backends.cuda.matmul
    if conv is not None and hasattr(conv, "fp32_precision") and hasattr(matmul, "fp32_precision"):
        return [(conv, "fp32_precision", "ieee"), (matmul, "fp32_precision", "ieee")]
    return [(torch.backends.cudnn, "allow_tf32", False), (matmul, "allow_tf32", False)]


def ieee_float32(device: torch.device) -> list[tuple[object, str, object]]:
    """On a GPU, run float32 convolutions and matrix products in IEEE float32 and return the settings before (for
    :func:`restore_float32`); elsewhere change nothing and return [].  torch lets cuDNN run float32 convolutions in
    TF32 by default (10 mantissa bits, about 1e-3 relative), so a `--dtype float32` run on a GPU would compute the
    victim's gradient and the attack's derivatives at another precision than on a CPU."""
    if device.type != "cuda":
        return []
    before = float32_settings()
    for obj, name, value in _tf32_switches():
        setattr(obj, name, value)
    return before


def float32_settings() -> list[tuple[object, str, object]]:
    """The TF32 switches as they are now, for :func:`restore_float32` ([] where torch cannot read them: a mix of its
    two APIs set by the caller)."""
    try:
        return [(obj, name, getattr(obj, name)) for obj, name, _ in _tf32_switches()]
    except RuntimeError:
        return []


def restore_float32(before: list[tuple[object, str, object]]) -> None:
    for obj, name, value in before:
        setattr(obj, name, value)


def time_limit_seconds(cfg: RunConfig, derived: Derived | None = None) -> float | None:
    """The attack's time limit in seconds (None: none): a closed form takes the one given, where it reads one; an
    optimising attack its recipe's where no budget is given (``derived``: :meth:`RunConfig.derived`, where the
    caller has it)."""
    if cfg.attack_class.closed_form:
        return duration_seconds(cfg.time_limit)
    return duration_seconds((derived or cfg.derived()).time_limit)


def attack_of(cfg: RunConfig) -> Attack:
    """The configured attack, with its own ``options``: a closed-form one takes besides them at most where its
    labels come from (the analytic attack; R-GAP and APRIL use granted labels when there are); gradient matching
    takes the optimiser, objective, priors, labels, restarts."""
    cls, own = cfg.attack_class, cfg.attack_options()
    run: dict[str, object]
    if cls.closed_form:
        run = {"labels": "given" if cfg.labels_given else "recovered"} if cls.reads_labels else {}
        if "time_limit" in cls.settings:
            run["time_limit"] = time_limit_seconds(cfg)
    else:
        s = cfg.derived()
        run = dict(
            optimizer=s.optimizer, iterations=s.iterations, lr=s.lr, objective=s.objective,
            priors={"tv": s.tv, **cfg.other_priors()}, box=s.box, tol=cfg.tol,
            labels="given" if cfg.labels_given else cfg.label_mode,
            dummy_init=cfg.dummy_init, restarts=cfg.restarts, init_seed=s.init_seed, schedule=s.schedule,
            signed=s.signed, stall_window=cfg.stall_window, time_limit=time_limit_seconds(cfg, s),
            threads=cfg.threads, surrogate=s.surrogate, prune_restarts=cfg.prune_restarts, refine=cfg.refine,
        )
    clash = sorted(set(own) & set(run))
    if clash:
        raise UserError(f"attack '{cfg.attack}' declares an option '{clash[0]}' that the run already passes it "
                        f"(from its own settings); the attack's class must give that option another name")
    try:
        inspect.signature(cls).bind(**own, **run)
    except TypeError as err:  # a class that cannot take what the run passes: one sentence, not the constructor's
        if cls.closed_form:
            raise UserError(f"attack '{cfg.attack}' cannot be built from the run's settings ({err})") from None
        raise UserError(f"attack '{cfg.attack}' is not closed-form, so the run passes it gradient matching's settings "
                        f"({', '.join(run)}) as keyword arguments, and its class does not take them ({err}): accept "
                        "them (**settings) or set closed_form = True on the class") from None
    except ValueError:  # no signature to read (a builtin's): the constructor decides
        pass
    return cls(**own, **run)


#: what the defense adds, and how :func:`leakattack.observation.noise_share` estimated it, by the message's
#: ``noise_share_of``
SHARE_WORDS = {
    "noise": ("noise is", "draws of it on a zero gradient against the message"),
    "rounding": ("stochastic rounding's error is",
                 "the bound of that error, read from the message's largest value, against the message"),
    "noise and rounding": ("noise and stochastic rounding's error are",
                           "draws of the noise on a zero gradient and the bound of the rounding's error, against the "
                           "message"),
}


def noisy_message_note(share: float, sources: str = "noise") -> str:
    """The warning for a message whose noise (``sources``, the message's ``noise_share_of``: its noise, its
    stochastic rounding's error or both) is ``share`` of the rest (at least
    :data:`leakattack.attacks.recipes.NOISY_SHARE`, or ``ROUNDING_SHARE`` where it counts a rounding, whose comments
    have the measurements; inf where the message's norm cannot tell), attacked without an image prior
    (:func:`leakattack.attacks.recipes.noisy_without_prior`)."""
    what, how = SHARE_WORDS.get(sources, SHARE_WORDS["noise"])
    # a rounding's error is estimated by its bound, never below it: on LeNet's messages of photo 0 the estimate was
    # 1.12-1.23 times the truth's noise_distortion at 4-12 bits and 1.4-1.7 times at 2 bits
    near = "up to" if "rounding" in sources else "about"
    shown = f"{share:.1%}" if share < 0.1 else f"{share:.0%}"  # 1.4 %, not the 1 % of ROUNDING_SHARE itself
    said = ("so large that the message's norm cannot tell the rest of it from the noise's own spread"
            if math.isinf(share) else f"{near} {shown} of the rest of this message")
    evidence = ROUNDING_EVIDENCE if "rounding" in sources else NOISY_EVIDENCE
    return (f"the defense's {what} {said} ({how}), and an attack without an image prior can fit it: {evidence}; "
            "run --recipe ig (or --prior tv) beside it before reading the result as the defense's")


#: Adam moves a coordinate by at most lr * (1 - beta1) / sqrt(1 - beta2) a step where 1 - beta1 > sqrt(1 - beta2)
#: (Kingma and Ba 2015, section 2.1): 3.16 lr at the betas (0.9, 0.999); on signed gradients, whose squares are 1, by
#: at most lr
ADAM_STEP_BOUND = 0.1 / 0.001 ** 0.5


def adam_cannot_move(cfg: RunConfig, case, derived) -> str | None:
    """Why the run's Adam steps cannot change the image, or None: their whole budget moves no pixel by half an 8-bit
    grey level of the images' range, or each step is below half the spacing of the precision's numbers at half that
    range (rounded away).  Only Adam's steps have such a bound (gd's and L-BFGS's scale with the gradient), and only
    where they move the image itself (not a prior's re-parametrisation)."""
    if derived.optimizer != "adam" or cfg.attack_class.closed_form or cfg._reparametrising():
        return None
    span = 1.0
    if case.x is not None and case.x.numel() and bool(torch.isfinite(case.x).all()):
        span = float(case.x.max() - case.x.min()) or 1.0
    step = derived.lr * (1.0 if derived.signed else ADAM_STEP_BOUND)
    total = step * derived.iterations
    if total < span / 510:
        return (f"--lr {derived.lr:g} cannot move the image: Adam moves a pixel by at most {step:.3g} a step, so "
                f"{derived.iterations} steps move none by more than {total:.3g}, under half an 8-bit grey level of the "
                f"images' range ({span / 510:.3g}): the attack will end where it starts")
    eps = torch.finfo(getattr(torch, derived.dtype)).eps
    if step < eps * span / 4:
        return (f"--lr {derived.lr:g} cannot move the image: each Adam step of at most {step:.3g} is below half the "
                f"spacing of {derived.dtype} numbers at half the images' range ({eps * span / 4:.3g}), and rounds "
                "away: the attack will end where it starts")
    return None


def _initial_statistics(model: torch.nn.Module) -> bool:
    """Whether every BatchNorm layer of ``model`` that keeps running statistics holds their initial values (mean 0,
    variance 1): no weights loaded any gathered over data (False for a model without such layers)."""
    kept = [(m.running_mean, m.running_var) for m in batchnorm_layers(model)
            if isinstance(m.running_mean, torch.Tensor) and isinstance(m.running_var, torch.Tensor)]
    return bool(kept) and all(not bool(mean.any()) and bool((var == 1).all()) for mean, var in kept)


def _warn_attack_settings(cfg: RunConfig, case, attack, derived) -> dict:
    """Warn of the attack's settings that change nothing or cannot work here (the ReLU surrogate, the priors and
    their weights, TV given twice, a noisy message without a prior, a step size that cannot move the image);
    returns each prior's weight as used."""
    if (stuck := adam_cannot_move(cfg, case, derived)) is not None:
        warnings.warn(stuck, SettingWarning, stacklevel=3)
    if derived.surrogate and not relu_modules(case.victim.model):
        warnings.warn(f"--relu-surrogate changes nothing here: model '{cfg.model}' has no nn.ReLU modules",
                      SettingWarning, stacklevel=3)
    elif derived.surrogate and derived.schedule != "step":
        warnings.warn(f"--relu-surrogate without the step schedule keeps tau at {derived.surrogate:g} for the whole "
                      "attack: it minimises the surrogate's objective, not the exact one (a small tau, or "
                      "--schedule step, brings them together)", SettingWarning, stacklevel=3)
    # (an attack that does not read --prior, a closed form, is warned of that alone)
    bn_prior = cfg.other_priors().get("bn", 0) > 0 and cfg.bn_stats == "running" and \
        "--prior" not in cfg.unused_options()
    if bn_prior and _initial_statistics(case.victim.model):
        warnings.warn("--prior bn pulls the BatchNorm statistics of the images towards the model's running "
                      "statistics, and these are still their initial values (mean 0, variance 1), gathered over no "
                      "data: --weights of a trained model (or a protocol's checkpoint) carries statistics of its data",
                      SettingWarning, stacklevel=3)
    elif bn_prior and cfg.batch_size == 1 and cfg.bn != "train":
        warnings.warn("--prior bn pulls one image's BatchNorm statistics towards running statistics gathered over "
                      "batches, which one image does not share: on ResNet-20 in eval mode it lowered the mean PSNR at "
                      "every weight measured, and breaching's GradInversion lost with its own prior there too "
                      "(docs/trained-victims.md)", SettingWarning, stacklevel=3)
    if not attack.closed_form and noisy_without_prior(case.obs.extra, {"priors": cfg.priors}, {"tv": derived.tv}):
        warnings.warn(noisy_message_note(case.obs.extra["noise_share"], case.obs.extra.get("noise_share_of", "noise")),
                      SettingWarning, stacklevel=3)
    named = [parse_prior(text) for text in cfg.priors]
    used = dict(named)  # the last weight of each name, the one used; TV's as the run derives it (a bare tv keeps one)
    if "tv" in used and not cfg.attack_class.closed_form:
        used["tv"] = derived.tv
    repeated = [n for n, count in Counter(n for n, _ in named).items() if count > 1]
    for name in repeated:
        warnings.warn(f"--prior {name} is given more than once: {name}:{used[name]:g} is used", SettingWarning,
                      stacklevel=3)
    for name in (n for n, w in used.items() if w == 0):
        without = replace(cfg, priors=[t for t in cfg.priors if parse_prior(t)[0] != name])
        if (without.derived().tv if name == "tv" else without.other_priors().get(name, 0)) == 0:
            warnings.warn(f"--prior {name}:0 changes nothing: a weight of 0 turns the prior off, and it is off "
                          "without it", SettingWarning, stacklevel=3)
    explicit_tv = [w for n, w in named if n == "tv" and any(t.startswith("tv:") for t in cfg.priors)]
    if cfg.set_by_user("tv") and explicit_tv and not cfg.attack_class.closed_form:
        warnings.warn(f"--tv {cfg.tv:g} changes nothing: --prior tv:{explicit_tv[-1]:g} sets TV's weight",
                      SettingWarning, stacklevel=3)
    elif "tv" in cfg.priors and "tv" not in repeated and not cfg.attack_class.closed_form:
        kept = replace(cfg, priors=[t for t in cfg.priors if t != "tv"]).derived().tv
        if kept > 0:  # a bare --prior tv keeps a TV weight already on
            warnings.warn(f"--prior tv changes nothing: TV is already on at weight {kept:g} (the recipe's or --tv's); "
                          "--prior tv:W sets another", SettingWarning, stacklevel=3)
    return used


def _warn_case_settings(cfg: RunConfig, case, used: dict) -> RunConfig:
    """Warn of the data, BatchNorm, label and utility settings that the case built does not read; returns the
    configuration with what the attack uses (a regression's labels are given)."""
    if cfg.data_root is not None and not cfg.message and not reads_root(case.dataset.name):
        warnings.warn(f"--data-root is not read: the embedded data set {case.dataset.name} reads no files",
                      SettingWarning, stacklevel=3)
    if cfg.set_by_user("bn") and not case.victim.has_batchnorm:
        warnings.warn(f"--bn {cfg.bn} changes nothing: model '{cfg.model}' has no BatchNorm", SettingWarning,
                      stacklevel=3)
    # observe warns of it where it computes the message; a protocol's client trains in train mode on the batch it is
    # given
    if case.victim.has_batchnorm and case.victim.bn_mode == "train" and case.obs.batch_size == 1 and cfg.message:
        warnings.warn(ONE_IMAGE_IN_TRAIN_MODE, SettingWarning, stacklevel=3)
    if (cfg.message or cfg.protocol) and case.victim.bn_mode == "eval" and (
            batchwise := batchnorm_without_running_statistics(case.victim.model)):  # observe warns of its own
        warnings.warn(without_running_statistics(batchwise, case.obs.batch_size), SettingWarning, stacklevel=3)
    if cfg.set_by_user("label_mode") and cfg.label_mode != "given" and case.victim.task == "regression":
        warnings.warn(f"--labels {cfg.label_mode} changes nothing: model '{cfg.model}' is a regression, whose "
                      "targets the attack takes as given (no rule reads them from the message)", SettingWarning,
                      stacklevel=3)
    if case.victim.task == "regression" and cfg.label_mode != "given":
        cfg = replace(cfg, label_mode="given")  # what the attack used, as config.json records it
    if cfg.set_by_user("bn_stats") and "bn" not in used:
        warnings.warn(f"--bn-stats {cfg.bn_stats} changes nothing without --prior bn, the prior that reads them",
                      SettingWarning, stacklevel=3)
    # the flags that choose the attacked images from a data set: a message file's images are its own
    # and the data-set settings where the file (with the truth file) states the input shape and classes
    picks = (("dataset", "--dataset"), ("image_index", "--image-index"), ("batch_draw", "--batch-draw"),
             ("image_size", "--image-size"))
    unread = [f"{flag} {getattr(cfg, key)}" for key, flag in picks
              if (cfg.dataset if key == "dataset" else cfg.set_by_user(key)) and key not in case.reads_data]
    if cfg.message and unread:
        warnings.warn(f"{listed(unread)} {'is' if len(unread) == 1 else 'are'} not read with --message: the message "
                      "file says what the images are, and --truth gives them", SettingWarning, stacklevel=3)
    unread = [f"{flag} {getattr(cfg, key)}" for key, flag in (("image_index", "--image-index"),
                                                              ("batch_draw", "--batch-draw"),
                                                              ("image_size", "--image-size")) if cfg.set_by_user(key)]
    if cfg.protocol and unread:
        warnings.warn(f"{listed(unread)} {'is' if len(unread) == 1 else 'are'} not read with --protocol: the attacked "
                      "message holds the images the client's round draws from its own shard, at the size its "
                      "training read them", SettingWarning, stacklevel=3)
    unread = [f"{flag} {getattr(cfg, key):g}" for key, flag in (("utility_steps", "--utility-steps"),
                                                                ("utility_lr", "--utility-lr")) if cfg.set_by_user(key)]
    if unread and not cfg.utility:
        warnings.warn(f"{listed(unread)} change{'s' if len(unread) == 1 else ''} nothing without --utility, the "
                      "training it sets", SettingWarning, stacklevel=3)
    return cfg


def _pair_sends_one(before, after):
    """The one of two steps that follow each other on the same side of the sketch that sends what the pair sends, or
    None: of two prunes the larger share (the second zeroes the zeros first), of two whole-update clips the smaller
    norm (a vector clipped to one norm is within the larger)."""
    if before.placement != after.placement or type(before) is not type(after):
        return None
    if before.prunes:
        return max((before, after), key=lambda step: step.params["p"])
    if before.bounds_norm and not before.per_example and "C" in before.params and "C" in after.params:
        return min((before, after), key=lambda step: step.params["C"])
    return None


def _warn_defense_settings(cfg: RunConfig, case) -> None:
    """Warn of defense steps that send every vector as it is, of --attacker-knows-clip without a clip, and of
    --delta where a message file's defense adds no Gaussian noise its epsilon would be at."""
    if cfg.message and cfg.set_by_user("delta") and defenses.build(cfg.defense or "").noise_bound(1.0) is None:
        warnings.warn(f"--delta {cfg.delta:g} changes nothing: it is the delta of the epsilon of Gaussian noise, and "
                      f"the defense of message file '{cfg.message}' adds none", SettingWarning, stacklevel=3)
    pipeline = defenses.build("" if cfg.message else cfg.defense or "")  # a message file's defense is its own
    for step in pipeline.steps:
        n = case.victim.d if step.placement == defenses.BEFORE else case.obs.b  # the length of its vectors
        if step.changes_nothing():
            warnings.warn(f"defense step '{step.spec()}' changes nothing: at these parameters it sends every vector "
                          "as it is", SettingWarning, stacklevel=3)
        elif step.changes_nothing_at(n):
            warnings.warn(f"defense step '{step.spec()}' changes nothing: at these parameters it sends every vector "
                          f"of {n:,} entries as it is", SettingWarning, stacklevel=3)
    for before, after in zip(pipeline.steps, pipeline.steps[1:]):
        alone = _pair_sends_one(before, after)
        if alone is not None:
            warnings.warn(f"defense steps '{before.spec()}' and '{after.spec()}' follow each other, and together send "
                          f"what '{alone.spec()}' alone sends", SettingWarning, stacklevel=3)
    sent = defenses.build(cfg.defense or "")  # the client's: a message file's is the file's (the case's settings)
    whose = f"the defense of message file '{cfg.message}'" if cfg.message else "the defense"
    if cfg.attacker_knows_clip and not sent.clips():
        warnings.warn(f"--attacker-knows-clip changes nothing: {whose} has no clip", SettingWarning, stacklevel=3)
    if cfg.attacker_knows_prune and not sent.prunes():
        warnings.warn(f"--attacker-knows-prune changes nothing: {whose} has no prune", SettingWarning, stacklevel=3)


def protocol_epsilon(cfg: RunConfig, case) -> dict:
    """A DP protocol's guarantee over rounds 1..its round (``Protocol.privacy``, config.json's
    ``derived.sketch.privacy``) under the keys a defended run records its own in: ``epsilon`` (the accountant's, at
    the sensitivity that bounds the message: privsgd's rescaled one at 2L, ``epsilon_rdp_normalised``; null where its
    δ reaches 1), ``delta``, ``epsilon_paper`` and ``delta_paper``, and a ``privacy_note`` where ε needs one, so that
    a sweep's summary.csv and figures read it as they read a defense's.  Empty without a protocol's noise."""
    noise = (case.encoder or {}).get("privacy") if cfg.protocol else None
    if not isinstance(noise, dict) or noise.get("sigma") is None:
        return {}
    rescaled = "epsilon_rdp_normalised" in noise  # privsgd: s_t depends on the data, so only 2L bounds its message
    out = {"epsilon": noise.get("epsilon_rdp_normalised" if rescaled else "epsilon_rdp"),
           "delta": noise.get("delta_paper"), "epsilon_paper": noise.get("epsilon_paper"),
           "delta_paper": noise.get("delta_paper")}
    if out["epsilon"] is None:
        out["privacy_note"] = (f"the accountant's δ of the {cfg.protocol} protocol's noise reaches 1 over rounds "
                               f"1..{cfg.protocol_round}: nothing is bounded")
    elif rescaled and isinstance(noise.get("epsilon_rdp"), (int, float)):
        out["privacy_note"] = (f"at the rescaling's sensitivity 2L (s_t depends on the data); the per-record "
                               f"sensitivity the paper takes gives ε {noise['epsilon_rdp']:.3g}, which the "
                               "rescaled message does not guarantee")
    return out


def _warn_sketch_settings(cfg: RunConfig) -> None:
    """Warn of sketch settings that change nothing: a memory budget of a sketch that holds no matrix, a dimension
    and a ratio both given, a ratio or seed of the unsketched channel."""
    if cfg.sketch_memory is not None and not getattr(sketch_class(cfg.sketch), "takes_memory_budget", False):
        warnings.warn(f"--sketch-memory changes nothing: sketch '{cfg.sketch}' holds no b x d matrix (only gaussian "
                      "and ams do)", SettingWarning, stacklevel=3)
    elif cfg.sketch_memory is not None and cfg.sketch_params.get("force_blocks") is True:
        warnings.warn(f"--sketch-memory {cfg.sketch_memory:g} changes nothing with --sketch-param force_blocks=true: "
                      "R is regenerated block by block and never held as one matrix", SettingWarning, stacklevel=3)
    # a message file's b is the file's (a --sketch-ratio or --sketch-dim that gives another is refused)
    if cfg.sketch_dim is not None and cfg.set_by_user("sketch_ratio") and not is_identity(cfg.sketch) \
            and not cfg.message:
        warnings.warn(f"--sketch-dim {cfg.sketch_dim} and --sketch-ratio {cfg.sketch_ratio:g} are both given: the "
                      "dimension is used", SettingWarning, stacklevel=3)
    if is_identity(cfg.sketch) and (cfg.sketch_dim is not None or cfg.set_by_user("sketch_ratio")):
        warnings.warn(f"--sketch {cfg.sketch} sends the whole gradient (b = d): --sketch-ratio and --sketch-dim change "
                      "nothing", SettingWarning, stacklevel=3)
    seedless = [f for f, given in (("--sketch-seed", cfg.sketch_seed is not None),
                                   ("--sketch-unknown", not cfg.sketch_known)) if given]
    if is_identity(cfg.sketch) and seedless and not cfg.protocol and not cfg.message:
        warnings.warn(f"--sketch {cfg.sketch} draws nothing at random: {' and '.join(seedless)} change"
                      f"{'s' if len(seedless) == 1 else ''} nothing", SettingWarning, stacklevel=3)


def prepare(cfg: RunConfig, progress: bool = False) -> Prepared:
    """Validate, load data, build the victim and the channel (or protocol), and produce the observation
    (``progress``: bars for a seed search).  It sets torch's thread count to the run's (``cfg.threads``, else the
    victim's choice) for :func:`execute`; :func:`run_attack` gives the caller's back afterwards."""
    cfg.validate()
    torch.set_num_threads(cfg.threads or 1)  # auto (None): one thread until the victim is built
    device = resolve_device(cfg.device)
    rss_from = reset_peak_memory(device)  # a sweep's points share a process: each records its own peak
    ieee_float32(device)  # run_attack gives the caller's settings back, as it does the thread count
    case = build_case(cfg, device, getattr(torch, cfg.derived().dtype), progress=progress)
    torch.set_num_threads(cfg.threads or case.victim.threads)  # auto: every core for deep victims, else one
    cfg = replace(cfg, **case.settings)  # a message file fixes its sketch, batch size and labels
    attack = attack_of(cfg)
    attack.check(case.obs)
    derived = cfg.derived()
    used = _warn_attack_settings(cfg, case, attack, derived)
    cfg = _warn_case_settings(cfg, case, used)
    _warn_defense_settings(cfg, case)
    _warn_sketch_settings(cfg)
    if case.x is not None and case.x.ndim == 4 and min(case.x.shape[-2:]) < metrics.SSIM_WIN:
        raise ConfigError(f"the attacked images are {case.x.shape[-2]}x{case.x.shape[-1]} pixels, and a run scores "
                          f"images of at least {metrics.SSIM_WIN}x{metrics.SSIM_WIN} (SSIM's window)")
    if cfg.prune_restarts and cfg.restarts < 2 and not attack.closed_form:
        warnings.warn("--prune-restarts changes nothing with one start: give --restarts 2 or more",
                      SettingWarning, stacklevel=2)
    return Prepared(cfg, device, case, attack, input_files(cfg, case), rss_from)


def _file_record(path: Path) -> dict:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return {"path": str(path.resolve()), "sha256": digest.hexdigest(), "bytes": path.stat().st_size}


def attacked_files(cfg: RunConfig, case: Case) -> dict:
    """``{"image_indices": [...]}``, the data set's indices of the attacked batch in the truth's order (a class or
    random draw picks them from ``--image-index``), and where the data set is read from files one image each (an
    image folder: its class is the folder it is in) ``"image_files"``, their absolute paths (an index names another
    file once files are added to the folder), and ``"data_root"``, the folder's absolute path (their contents are
    fingerprinted by :func:`input_files`, when they are read); ``{}`` for a protocol's or a file's message."""
    if case.x is None or cfg.protocol or cfg.message:
        return {}
    positions = batch_positions(case.dataset, cfg.image_index, cfg.batch_size, cfg.batch_draw).tolist()
    out: dict = {"image_indices": positions}
    files = getattr(case.dataset, "files", None)
    if files:
        out["image_files"] = [str(Path(files[i]).resolve()) for i in positions]
        if cfg.data_root is not None:
            out["data_root"] = str(Path(cfg.data_root).resolve())  # run.data_root is as given, relative or not
    return out


def input_files(cfg: RunConfig, case: Case) -> dict:
    """Absolute path, SHA-256 and size of the files a run read that its settings name but do not pin down: the
    model's .py file (``--model file.py:Name``), ``--weights``, ``--message`` and ``--truth``, the checkpoint
    of a ``--protocol-dir`` that w^t came from (``case``'s), and an image folder's attacked files (``images``, in
    the truth's order): a run folder names what it read, so an edited, moved or replaced file is noticed."""
    files: dict[str, dict | list[dict]] = {}
    model = str(cfg.model or "")
    where = model.rpartition(":")[0] if ":" in model else ""
    if where.endswith(".py") and Path(where).is_file():
        files["model"] = _file_record(Path(where))
    for key in ("weights", "message", "truth"):
        given = getattr(cfg, key)
        if given and Path(given).is_file():
            files[key] = _file_record(Path(given))
    read = case.obs.extra.get("checkpoint_file")
    if read and Path(read).is_file():
        files["checkpoint"] = _file_record(Path(read))
    images = attacked_files(cfg, case).get("image_files")
    if images:  # an image folder's attacked files, just read: one replaced under its name is noticed
        try:
            files["images"] = [_file_record(Path(f)) for f in images]
        except OSError as err:
            raise ConfigError(f"the attacked image '{err.filename}' could not be read again to fingerprint it "
                              f"({err.strerror or type(err).__name__}): it was moved or changed while the run read "
                              "it") from None
    return files


def execute(p: Prepared, progress: bool = False, with_lpips: bool = True, interruptible: bool = False) -> Outcome:
    """Run the attack, score its best iterate against the truth (:class:`leakattack.metrics.RunMetrics`).

    ``interruptible``: the first Ctrl-C during the attack stops it at its best iterate (stop reason
    ``interrupted``), which is then scored as any other (:func:`leakattack.attacks.base.stop_on_interrupt`)."""
    cfg, case = p.cfg, p.case
    t0 = time.perf_counter()

    def monitor(step, x):
        x = x.clamp(0, 1)
        if x.shape[0] > 1:
            x = x[metrics.match(x, case.x)]
        return {"psnr": float(metrics.psnr(x, case.x).mean())}

    # the data set's mean image, a baseline, read before the attack: an unreadable image among those it averages
    # is then one sentence before the attack's minutes, not after them
    mean = None if case.x is None else metrics.mean_image(case.dataset, case.x)
    threads_seen(reset=True)
    with stop_on_interrupt() if interruptible else contextlib.nullcontext():
        result = p.attack.reconstruct(case.obs, monitor=monitor if case.x is not None else None,
                                      monitor_every=cfg.trace_every, progress=progress)
    if not bool(torch.isfinite(result.x).all()):
        warnings.warn(f"attack '{cfg.attack}' returned a reconstruction with {int((~torch.isfinite(result.x)).sum())} "
                      "value(s) that are NaN or infinite: its scores are n/a and it counts as not rebuilt",
                      SettingWarning, stacklevel=2)
    if own_reconstruct(p.attack):  # an attack of one's own: what the run does with what it returned, said
        _warn_own_attack_result(cfg, p.attack, result)
    classifier = case.victim.task == "classification" and case.labels is not None
    scores = unscored(case.obs.batch_size) if case.x is None else metrics.score(
        metrics.in_range(result.x), case.x,
        labels_hat=result.labels if classifier else None, labels=case.labels if classifier else None,
        with_lpips=with_lpips, device=p.device,
    )
    judged = judgement(p, result, scores, with_lpips, mean)
    sent_off = truth_residual(p)
    found = uniqueness(p, result, {"verdict": judged["verdict"], "ssim": scores["ssim"],
                                   "verdict_each": judged.get("verdict_each"), "ssim_each": scores.get("ssim_each"),
                                   "truth_residual": sent_off})
    message = found.pop("message", result.message)  # the attack's message, or what uniqueness says of the match
    wall_s = time.perf_counter() - t0  # the attack, its scores and the baselines'
    seed_search = case.obs.extra.get("seed_search")  # the attacker's R came from a seed search
    # epsilon/delta of the message, test accuracy under the defense
    # "none" is no defense, as "" is: no privacy report (a sweep takes the two for one point)
    privacy = privacy_metrics(cfg, case.obs) if defenses.build(cfg.defense or "").spec or cfg.utility else {}
    privacy.pop("seed_search", None)  # the observation's entries are among them: the search has its field
    privacy.update(protocol_epsilon(cfg, case))
    if case.obs.extra.get("message_zero"):  # with or without a defense: every value of the message is 0
        privacy["message_zero"] = True
    if result.prior_not_finite is not None:  # a prior turned NaN or infinite: the cause of a search that stopped
        privacy["prior_not_finite"] = result.prior_not_finite
    # the closed-form attacks that accept the message of a run that rebuilt nothing (its note names them)
    readers = closed_forms_for(case.obs) if judged["verdict"] == metrics.NOT_REBUILT and not p.attack.closed_form \
        else []
    started = 1 if p.attack.closed_form else cfg.restarts
    m = metrics.RunMetrics(
        mse=scores["mse"], psnr=scores["psnr"], ssim=scores["ssim"], lpips=scores["lpips"],
        lpips_note=scores["lpips_note"], label_acc=scores["label_acc"],
        # where nothing was attacked the images matched are the start's, and labels on them score nothing
        label_acc_matched=scores.get("label_acc_matched") if judged["attacked"] else None,
        final_loss=result.final_loss, initial_loss=result.losses[0], iterations=result.iterations,
        best_step=result.best_step, stop_reason=result.stop_reason, message=message,
        # the starts that ran: a closed form solves once, whatever --restarts said (the run warns so)
        restarts=started, restart_losses=list(result.restart_losses),
        restart_stops=list(result.restart_stops) if started > 1 else None,
        restart_path=result.restart_path, wall_s=wall_s, attack_s=result.wall_s,
        d=case.obs.d, b=case.obs.b, label_mode=cfg.label_source,
        labels_true=None if case.labels is None else case.labels.tolist(), truth=case.x is not None,
        labels_attack=None if result.labels is None else result.labels.tolist(),
        psnr_each=scores["psnr_each"], ssim_each=scores["ssim_each"], match=scores["match"],
        unknowns=unknowns(case), unique_by_count=case.obs.rank_bound >= unknowns(case),
        **judged, **found, seed_search=seed_search, label_choice=result.label_choice,
        gauss_newton=result.gauss_newton, row_space_solve=result.row_space_solve,
        closed_forms=readers or None, labels_unused=None if cfg.attack_class.uses_labels else True,
        objective_at=objective_at(p, result), truth_residual=sent_off,
        peak_memory=peak_memory(p.device, p.rss_from),
        extra=privacy,
    )
    by_step = {e["step"]: e for e in result.extra}
    trace = [{"step": t, "loss": loss, "psnr": by_step.get(t, {}).get("psnr")}
             for t, loss in enumerate(result.losses)]
    return Outcome(p, result, m, trace, max(threads_seen() or 0, torch.get_num_threads()))


#: the share of an attack of one's own's pixels outside [0, 1] (by more than the data's RANGE_SLACK) from which the
#: run says that it scores their clamp: images in another scale ([-1, 1]: about half; 0..255: nearly all), not a
#: search's overshoot at a few pixels
OUTSIDE_SHARE = 0.25


def _warn_own_attack_result(cfg: RunConfig, attack: Attack, result: AttackResult) -> None:
    """One-line warnings for an attack of one's own whose result the run reads otherwise than it says: more steps
    than the iterations the run passed it where no built-in refinement added them (its stop reason is its own), or
    images in another scale than [0, 1] (a quarter of their values outside it), which the run clamps before scoring
    and drawing."""
    budget = None if attack.closed_form or result.gauss_newton is not None else cfg.derived().iterations
    if budget is not None and result.iterations > budget:
        warnings.warn(f"attack '{cfg.attack}' took {result.iterations} steps, past the {budget} iterations the run "
                      f"passed it: the run records its steps and its stop reason '{result.stop_reason}' as it "
                      "returned them", SettingWarning, stacklevel=3)
    x = result.x.detach()
    finite = x[torch.isfinite(x)]
    outside = int(((finite < -RANGE_SLACK) | (finite > 1 + RANGE_SLACK)).sum())
    if finite.numel() and outside >= OUTSIDE_SHARE * finite.numel():
        warnings.warn(f"attack '{cfg.attack}' returned images with {outside} of {x.numel()} values outside [0, 1] "
                      f"(from {float(finite.min()):.3g} to {float(finite.max()):.3g}): the run clamps them to [0, 1] "
                      "before scoring and drawing, so images in another scale score as their clamp", SettingWarning,
                      stacklevel=3)


def judgement(p: Prepared, result: AttackResult, scores: dict, with_lpips: bool,
              mean: tuple[torch.Tensor, str] | None) -> dict:
    """Whether the attack attacked anything, the baselines' scores and the verdict (:func:`metrics.judge`).

    The baselines need no message: the attack's start (``result.x0``, the
    dummy data of the kept restart; a closed-form attack has no data-free
    start) and the data set's mean image (:func:`metrics.mean_image`), scored
    against the truth like the reconstruction (``mean``: it and its description, read before the attack; None
    without a truth).  Without a truth: no verdict.  Where the batch was drawn from a data set, the identifiability
    keys too (:func:`metrics.identification`: the rank of each truth among the set's images by distance to its
    reconstruction, and the share the reconstruction and each baseline single out; by the victim's features,
    :func:`metrics.feature_identification`).
    """
    case, closed_form = p.case, p.attack.closed_form
    objective = "cosine distance" if getattr(p.attack, "objective", "l2") == "cosine" else "L_R"
    reason = None if closed_form else metrics.nothing_attacked(result.losses, result.best_step, objective,
                                                               getattr(p.attack, "added_terms", ()))
    if reason is None and not closed_form and result.iterations == 0:  # a time limit or Ctrl-C before any step
        reason = f"it stopped ({result.stop_reason}) before its first step and returned its start"
    out = {"attacked": reason is None, "nothing_attacked": reason}
    if case.x is None:
        return {**out, **metrics.judge({}, {}), "baseline_mean_image": None, "verdict": None}

    def scored(images):
        return metrics.score(metrics.in_range(images), case.x, with_lpips=with_lpips, device=p.device)

    assert mean is not None, "a run with a truth reads the mean image before its attack"
    mean_x, what = mean
    start = None if closed_form else scored(result.x0.detach().to(case.x))
    # image identifiability against the data set the batch was drawn from (not a protocol's or a file's message)
    positions = attacked_files(p.cfg, case).get("image_indices")
    found: dict = {}
    if positions is not None:
        images = (metrics.matched(result.x, scores, case.x),
                  {"start": None if start is None else metrics.matched(result.x0, start, case.x), "mean": mean_x},
                  case.x, case.dataset, positions)
        found = {**metrics.identification(*images), **metrics.feature_identification(case.victim, *images)}
    return {**out, **metrics.judge(scores, {"start": start, "mean": scored(mean_x)}), "baseline_mean_image": what,
            **found}


def objective_at(p: Prepared, result: AttackResult) -> dict | None:
    """The attack's own objective at the truth and at the reconstruction, term by term
    (:meth:`GradientMatching.objective_terms`), from which :func:`metrics.failed_part` tells a run that rebuilt
    nothing whether its objective or its search failed.  Measured where the attack minimises an objective of the
    input with fixed labels and the truth is known, and kept where it is finite at both; else None."""
    case = p.case
    terms = getattr(p.attack, "objective_terms", None)
    if terms is None or case.x is None or case.labels is None or result.labels is None or p.cfg.label_source == "dlg":
        return None
    truth = terms(case.obs, case.x.to(result.x), case.labels.to(result.labels.device))
    if truth is None or not math.isfinite(truth["total"]):  # a message drowned in noise, a victim that overflows
        return None
    rec = terms(case.obs, result.x, result.labels)
    return {"truth": truth, "reconstruction": rec} if math.isfinite(rec["total"]) else None


#: the --tol default: a run that meets it matched the message to about round-off of L_R/||y||^2
TIGHT_TOL = next(q.default for q in RUN_PARAMS if q.name == "tol")


def loose_tolerance(cfg: RunConfig) -> bool:
    """Whether the run's --tol is looser than its default, so that meeting it does not say the message is matched."""
    return cfg.tol > TIGHT_TOL


def uniqueness(p: Prepared, result: AttackResult, m: dict) -> dict:
    """Whether the message determines the input where the run converged: ``unique``, ``jacobian_rank`` and a message.

    ``unique`` is False when the run matched the message to the tolerance with
    fewer numbers than unknowns, or at an image that is not the truth (not
    rebuilt, or SSIM < :data:`metrics.SAME_IMAGE_SSIM`; in a batch, any image
    not rebuilt on its own or below that SSIM, ``m``'s ``verdict_each`` and
    ``ssim_each``): another input matches as well.  Otherwise, for a converged run whose Jacobian of x -> the
    attacker's model of the message is small enough to measure
    (:func:`metrics.jacobian_rank`), or whose Gauss-Newton steps converged and formed it
    there, it is whether that rank is m*B (the match is isolated: locally
    unique); else None (not measured).
    """
    case, mB = p.case, unknowns(p.case)
    out: dict[str, object] = {"unique": None, "jacobian_rank": None,
                              "jacobian_note": "not measured: the run did not converge"}
    if result.stop_reason != "tolerance":
        if p.attack.closed_form:  # a solve, not an iteration: it ends at its last layer, converged or not
            ranked = (f"; the equations it solved the input from have rank {result.input_rank} of m*B = {mB}"
                      if result.input_rank is not None else "")
            out["jacobian_note"] = (f"not measured: the closed-form solve ended {result.stop_reason} (its message "
                                    f"says why), so it does not tell whether the message determines the input{ranked}")
        return out
    said = f"{result.message}, " if result.message else "the attack met its tolerance, "  # an attack may say nothing
    if case.obs.rank_bound < mB:  # the result's message says that another input matches as well (Attack.reconstruct)
        return {**out, "unique": False, "jacobian_note": f"not measured: rank <= {case.obs.rank_bound} < m*B = {mB} "
                                                         f"({case.obs.numbers_said()})"}
    # a batch's images one by one: one exact image can carry the means past another that is not its truth
    wrong = [i for i, (v, s) in enumerate(zip(m.get("verdict_each") or [], m.get("ssim_each") or []))
             if v != metrics.REBUILT or (s if s is not None else 0.0) < metrics.SAME_IMAGE_SSIM]
    if case.x is not None and (m["verdict"] != metrics.REBUILT or (m["ssim"] or 0.0) < metrics.SAME_IMAGE_SSIM
                               or wrong):
        which = f"SSIM {_number(m['ssim'])}" + (_wrong_images(wrong, m["verdict_each"]) if wrong else "")
        if loose_tolerance(p.cfg):  # a loose match: another image near the message, not one that gives it
            looser = f"--tol {p.cfg.tol:g} is looser than its default {TIGHT_TOL:g}"
            return {**out, "jacobian_note": f"not measured: {looser}",
                    "message": (f"{said}at an image that is not the truth ({which}): --tol "
                                f"{p.cfg.tol:g}, looser than its default {TIGHT_TOL:g}, lets an image near the message "
                                "stop the run, so this does not tell whether another image gives the message")}
        if metrics.truth_not_sent(m):  # a match of a message the truth does not send: J there says if it is unique
            out["message"] = f"{said}at an image that is not the truth ({which}); {metrics.truth_not_sent_text(m)}"
        else:
            off = _message_residual(case, result.x, result.labels) if p.attack.closed_form else None
            if off is not None and off ** 2 > max(p.cfg.tol, TIGHT_TOL):  # the closed form fitted its model, not y
                return {**out, "jacobian_note": "not measured: the reconstruction does not give the message",
                        "message": (f"{said}yet the image is not the truth ({which}), and the message its own "
                                    f"gradient sends lies {off:.3g} of the message's norm from it: the closed form's "
                                    "tolerance is of its model of the gradient, not of an image that gives the "
                                    "message, so this does not tell whether another image gives it")}
            out.update(unique=False, message=(
                f"{said}yet the image is not the truth ({which}): a different image "
                "matches the message to the tolerance, so the message does not determine the input here; this is a "
                "finding in itself"))
    if p.cfg.label_source == "dlg" or result.labels is None:  # the unknowns include the soft labels
        out["jacobian_note"] = "not measured: the labels were optimised with the images"
        return out
    gn = result.gauss_newton or {}
    rank: int | None
    if result.input_rank is not None:  # a closed form's equations for the input: its Jacobian's rank there
        rank = result.input_rank
        out["jacobian_note"] = f"rank {rank} of m*B = {mB}: the equations the closed form solved the input from"
    elif gn.get("kept") and gn.get("jacobian_rank") is not None:  # converged steps formed J at the reconstruction
        rank, (top, low) = gn["jacobian_rank"], gn["singular_values"]
        out["jacobian_note"] = (f"rank {rank} of m*B = {mB} at the reconstruction, from the Gauss-Newton steps' J "
                                f"(singular values {top:.2e} to {low:.2e})")
    else:
        rank, out["jacobian_note"] = metrics.jacobian_rank(case.obs.forward, result.x, result.labels, case.obs.d)
        if rank is None and gn.get("kept"):  # converged steps whose J at the reconstruction was cut short
            out["jacobian_note"] = ("not measured: the time limit or Ctrl-C came before the Gauss-Newton steps formed "
                                    "J at the reconstruction")
    out["jacobian_rank"] = rank
    if out["unique"] is None and rank is not None:
        out["unique"] = rank == mB
    return out


def truth_residual(p: Prepared) -> float | None:
    """||message the truth sends - y|| / ||y||, with the truth's labels, through the attacker's model of the client:
    measured for a message file's run with a truth file, where the file records no defense and the attacker holds the
    client's sketch, so that the truth that sent the message gives it to round-off
    (:data:`leakattack.rebuilt.TRUTH_MISFIT`);
    None elsewhere (a data set's batch sends its message by construction; noise, a clip or a sketch the attacker does
    not model would move it)."""
    case, cfg = p.case, p.cfg
    if cfg.message is None or case.x is None or case.labels is None or case.settings.get("defense") \
            or cfg.defense or sketch_not_held({**vars(cfg), **case.settings}):
        return None
    return _message_residual(case, case.x, case.labels)


def _message_residual(case, x: torch.Tensor, labels: torch.Tensor | None) -> float | None:
    """||message of the images ``x`` with ``labels`` - y|| / ||y||, through the attacker's model of the client (None
    without labels or where the message is zero)."""
    if labels is None:
        return None
    y = case.obs.y
    with torch.enable_grad():
        sent = case.obs.forward(x.to(y.dtype), labels).detach()
    norm = float(y.norm())
    return float((sent.reshape(-1) - y.reshape(-1)).norm()) / norm if norm > 0 else None


def _wrong_images(wrong: list[int], verdicts: list[str]) -> str:
    """Which images of a batch are not the truth, by cause: ``; images 3, 7 of 8 not rebuilt on their own; image 2
    of 8 rebuilt, but below SSIM 0.9`` (the first five of each, by index from 0).  Nothing for one image, whose SSIM
    the note names already."""
    n = len(verdicts)
    if n == 1:
        return ""
    out = ""
    for group, said in (([i for i in wrong if verdicts[i] != metrics.REBUILT], "not rebuilt on {} own"),
                        ([i for i in wrong if verdicts[i] == metrics.REBUILT],
                         f"rebuilt, but below SSIM {metrics.SAME_IMAGE_SSIM:g}")):
        if group:
            many = len(group) > 1
            shown = ", ".join(map(str, group[:5])) + (", ..." if len(group) > 5 else "")
            out += f"; image{'s' if many else ''} {shown} of {n} " + said.format("their" if many else "its")
    return out


def _number(v) -> str:
    return "n/a" if v is None else f"{v:.2f}"


def unscored(batch_size: int) -> dict:
    """The score keys of a run without the true images (a message without a truth file): no image metrics."""
    return {"mse": None, "psnr": None, "ssim": None, "lpips": None, "label_acc": None,
            "lpips_note": "no truth file: the reconstruction was not compared with anything",
            "psnr_each": [None] * batch_size, "ssim_each": [None] * batch_size, "match": list(range(batch_size))}


#: how many runs this process has prepared
_RUNS = 0


def reset_peak_memory(device: torch.device) -> str:
    """Start the peaks :func:`peak_memory` reads from now: torch's device-memory peak on a GPU, and, from a process's
    second run on, its resident high-water mark (Linux: ``/proc/self/clear_refs``, which ``getrusage`` reads too).
    A sweep runs its points one after another in one process (or in reused workers), and each point's peak is its
    own.  The first run leaves the mark as it is, so that ``/usr/bin/time`` reports a single run's whole peak; from
    the second on, a tool that reads it reports the peak since the last run began.  Returns where the resident peak
    now counts from: ``"run"``, or ``"process"`` where it was left (a first run, not Linux, the file not writable)."""
    global _RUNS
    _RUNS += 1
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    if _RUNS == 1:
        return "process"
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:  # not Linux, or the file is not writable here: the peak counts from the process's start
        return "process"
    return "run"


def peak_memory(device: torch.device, rss_from: str = "process") -> dict[str, float | str] | None:
    """The peak resident memory (``rss_gb``, from ``getrusage``) since the run began where :func:`reset_peak_memory`
    reset it (``rss_from``: ``"run"``; else ``"process"``, since the process started) and, on a GPU, the most device
    memory torch has held during the run (``device_gb``), in GB; None where the platform reports neither."""
    out: dict[str, float | str] = {}
    try:
        import resource
    except ImportError:  # Windows has no getrusage
        pass
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # bytes on macOS, kibibytes on Linux
        out["rss_gb"] = round(peak * (1 if sys.platform == "darwin" else 1024) / 1e9, 4)
        out["rss_from"] = rss_from
    if device.type == "cuda":
        out["device_gb"] = round(torch.cuda.max_memory_allocated(device) / 1e9, 4)
    return out or None


def _version(package: str) -> str:
    """An installed package's version, read from its metadata (importing torchvision or scipy takes seconds)."""
    return importlib.metadata.version(package)


def environment(device: torch.device, threads: int | None = None) -> dict:
    """Versions and machine, recorded in config.json; ``threads``: the count the attack ran torch on, where it
    chose its own (else torch's count now)."""
    threads = threads or torch.get_num_threads()
    return {
        "leakattack": __version__, "python": sys.version.split()[0], "torch": torch.__version__,
        "torchvision": _version("torchvision"), "numpy": np.__version__, "scipy": _version("scipy"),
        "platform": platform.platform(), "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_model(),
        "threads": threads,
        # what changes the last bits of a CPU run: CPU model, SIMD capability, threads
        "machine": {**machine(), "threads": threads},
    }


#: the files of a run folder (:func:`_write_files`): an existing --out folder that holds anything else is refused
RUN_FILES = frozenset({"config.json", "trace.csv", "convergence.png", "reconstruction.png", "reconstruction.pt",
                       "metrics.json"})


def check_out(folder: str | Path) -> Path:
    """The run folder a user named, refused in one sentence when it cannot be written (before any work): it is
    filled beside itself and renamed into place (:func:`leakattack.results.write_run_folder`), so an existing
    folder must be empty or an earlier run's, holding the files of :data:`RUN_FILES` and nothing else."""
    path = writable_out(folder, beside=True)
    if path.is_dir():
        wrong, other = _not_run_files(path)
        if wrong:
            raise UserError(wrong_kind_text(folder, wrong, "a run"))
        if other:
            raise UserError(f"--out '{folder}' holds {shown_names(other)}, which a run does not write, and a run "
                            "replaces its --out folder whole: name a new folder or an earlier run's")
    return path


def _not_run_files(path: Path) -> tuple[list[str], list[str]]:
    """(the entries of folder ``path`` named as a run's files but of the other kind, the entries a run does not
    write): a folder a run may replace has neither."""
    try:
        entries = sorted(path.iterdir(), key=lambda e: e.name)
        wrong = [e.name + "/" for e in entries if e.name in RUN_FILES and e.is_dir()]
        other = [e.name for e in entries if e.name not in RUN_FILES or not (e.is_file() or e.is_dir())]
    except OSError as err:  # unreadable: what it holds is unknown
        wrong, other = [], [f"entries it cannot list ({err.strerror or type(err).__name__})"]
    return wrong, other


def _foreign_now(path: Path) -> str | None:
    """What run folder ``path`` holds now that a run does not write, in words (files put there while the run ran),
    or None."""
    wrong, other = _not_run_files(path)
    return shown_names(wrong + other) if wrong or other else None


def check_default_out() -> None:
    """The place of the run folder a run without ``--out`` writes (``results/runs/<stamp>-...`` under the current
    folder), refused in one sentence before any work as ``--out`` is (:func:`leakattack.results.writable_out`): the
    current folder an earlier run's, one that cannot be written, a file named ``results``."""
    try:
        writable_out(RUNS_ROOT / "new", beside=True,
                     said=f"the run folder under '{RUNS_ROOT}', where a run without --out writes,")
    except UserError as err:
        raise UserError(f"{err} (--out names another)") from None


def write_run(out: Outcome, folder: Path, fresh: bool = False) -> Path:
    """Write config.json, metrics.json, trace.csv, the two figures and reconstruction.pt into ``folder``, all or
    nothing (:func:`leakattack.results.write_run_folder`; ``fresh``: a new folder, never an earlier run's);
    returns the folder written."""
    return write_run_folder(folder, lambda tmp: _write_files(out, tmp), fresh=fresh, foreign=_foreign_now)


def _write_files(out: Outcome, folder: Path) -> None:
    p, r, m = out.prepared, out.result, out.metrics
    cfg, case, seeds = p.cfg, p.case, p.cfg.derived()
    attacked = attacked_files(cfg, case)
    closed = p.attack.closed_form  # no optimiser, no iterations of one, no start
    # a closed form runs no recipe: its settings are recorded as null, not as the search it did not make
    unused = {"recipe", "lr", *RECIPE_FIELDS} - {"dtype"} if closed else set()
    config = {
        "run": cfg.to_dict(),
        "derived": {"d": case.obs.d, "b": case.obs.b, "model_seed": seeds.model_seed,
                    "sketch_seed": seeds.sketch_seed, "init_seed": seeds.init_seed, "noise_seed": seeds.noise_seed,
                    # in seconds, as the attack ran it (null where it reads none: a closed form but analytic)
                    "time_limit": None if closed and "time_limit" not in p.attack.settings else
                    time_limit_seconds(cfg, seeds),
                    **{k: None if k in unused else getattr(seeds, k) for k in ("lr", "recipe") + RECIPE_FIELDS},
                    # the priors beside tv with the weight each used, and the BatchNorm mode --bn resolved to
                    "priors": cfg.other_priors(), "bn_mode": case.victim.bn_mode if case.victim.has_batchnorm else None,
                    # the BatchNorm layers that normalise by the batch's statistics in eval mode too: they keep none
                    **({"bn_batch_statistics": batchwise} if case.victim.bn_mode == "eval" and (
                        batchwise := batchnorm_without_running_statistics(case.victim.model)) else {}),
                    "dataset": case.dataset.name, **attacked, "in_shape": list(case.dataset.in_shape),
                    "num_classes": case.dataset.num_classes, "sketch": case.encoder,
                    # a dense R within --sketch-memory (default: a share of the RAM free now; on a GPU, its free
                    # memory too) is held as one matrix, else regenerated by blocks: the same R, other last bits
                    **({"sketch_held": ways == {"held"}} if (ways := getattr(case.obs.linear_map, "ways", None))
                       else {})},
        **({"files": p.files} if p.files else {}),
        # the user's code behind registered names (plugins): module, how it came in, file and SHA-256
        **({"plugins": code} if (code := provenance()) else {}),
        "environment": environment(p.device, out.threads),
    }
    write_json(folder / "config.json", config)
    write_csv(folder / "trace.csv", out.trace, ["step", "loss", "psnr"])
    gn = f" + {steps_note(r.gauss_newton)}" if r.gauss_newton and r.gauss_newton["kept"] else ""
    # a figure copied on its own still says under which defense (and at what epsilon) the message was sent; its
    # steps apart, so that the title breaks between them, not inside one
    eps, noise = m.epsilon, (case.encoder or {}).get("privacy") if cfg.protocol else None
    defended = (f", defense {m.defense.replace(',', ', ')}" + (
        f", ε {eps:.3g} at δ {m.delta:g}" if isinstance(eps, (int, float)) and math.isfinite(eps)
        and m.delta is not None else ", ε ∞") if m.defense else "")  # no noise, or no bound: as the summary line
    if noise and isinstance(noise.get("sigma"), (int, float)):  # a DP protocol's own noise, as the summary line says
        bound, delta = noise.get("epsilon_rdp"), noise.get("delta_paper")
        defended += f", protocol noise σ {noise['sigma']:.3g}" + (
            f", ε {bound:.3g} at δ {delta:g} over rounds 1..{cfg.protocol_round}"
            if isinstance(bound, (int, float)) and isinstance(delta, (int, float)) else "")
    title = (f"{case.label} (b/d = {ratio_text(case.obs.b, case.obs.d)}), "
             + (f"{cfg.attack}, in closed form" if closed else f"{seeds.optimizer}{gn}, {r.iterations} it"
                + (f" ({r.stop_reason})" if r.stop_reason in HALTED else "")) + defended)
    # the batch is shown in ground-truth order (reconstructions matched one-to-one)
    order = torch.as_tensor(m.match)
    if case.x is None:  # nothing to compare with: the reconstructed images alone, in a grid
        import torchvision  # slow to import: only for this picture

        shown = r.x.clamp(0, 1).float().cpu()  # pixels enlarged to about 128 px per image
        shown = torch.nn.functional.interpolate(shown, scale_factor=max(1, 128 // shown.shape[-1]), mode="nearest")
        torchvision.utils.save_image(shown, folder / "reconstruction.png", nrow=8, padding=2, pad_value=1.0)
    else:
        reconstruction_figure(folder / "reconstruction.png", case.x, None if closed else r.x0[order],
                              r.x.clamp(0, 1)[order], m.psnr_each, m.ssim_each, title,
                              verdict=verdict_line(m.to_dict()),
                              returned="returned: the start" if m.attacked is False else "reconstruction",
                              verdict_each=m.verdict_each, indices=attacked.get("image_indices"))
    write_tensors(folder / "reconstruction.pt", {
        "images": r.x.clamp(0, 1)[order].detach().float().cpu(),
        "labels": None if r.labels is None else r.labels[order].detach().cpu()})
    convergence_figure(folder / "convergence.png", r.losses, title,
                       objective="closed-form" if p.attack.closed_form else seeds.objective)
    write_json(folder / "metrics.json", m.to_dict())  # last: its presence marks a finished run


def run_attack(cfg: RunConfig, out: str | Path | None = None, progress: bool = False,
               with_lpips: bool = True, interruptible: bool = False,
               prepared: Callable[[Prepared], None] | None = None) -> tuple[metrics.RunMetrics, Path]:
    """Prepare, attack, score and write; returns (metrics, run folder).  ``interruptible``: see :func:`execute`.
    ``prepared`` is called with the prepared run once every check before the attack has passed (the command line
    prints its notes there, so that a refused run prints its refusal alone); without it, the settings given that the
    attack does not read are warned of there by their field names (:meth:`RunConfig.unused_note`).  The run takes
    its own torch thread count (:func:`prepare`) and gives the caller's back.  ``cfg`` is a RunConfig (anything else
    is one UserError sentence)."""
    if not isinstance(cfg, RunConfig):
        hint = ": make one with RunConfig(**settings)" if isinstance(cfg, dict) else ""
        raise UserError(f"run_attack takes a RunConfig, got {type(cfg).__name__} {cfg!r:.40}{hint}")
    if out is not None:
        check_out(out)
    else:
        check_default_out()
    threads = torch.get_num_threads()
    precision = float32_settings()
    try:
        with torch_defaults():  # float32 draws and gradients on, whatever the caller's notebook set
            p = prepare(cfg, progress=progress)
            if prepared is not None:
                prepared(p)
            elif (unused := cfg.unused_note(python=True)) is not None:
                warnings.warn(unused, SettingWarning, stacklevel=2)
            warn_if_not_unique(p.case)
            outcome = execute(p, progress=progress, with_lpips=with_lpips, interruptible=interruptible)
            folder = Path(out) if out is not None else \
                default_run_dir(p.cfg.model, p.case.folder_tag, p.case.dataset.name, p.cfg.defense, unique=False)
            folder = write_run(outcome, folder, fresh=out is None)  # two runs may end in the same second
    finally:
        torch.set_num_threads(threads)
        restore_float32(precision)
    return outcome.metrics, folder


__all__ = ["Prepared", "Outcome", "prepare", "execute", "write_run", "run_attack", "resolve_device", "attack_of",
           "environment", "check_out", "check_default_out"]
