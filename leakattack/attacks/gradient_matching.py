"""Gradient matching: search dummy data x so that the observed message y is reproduced.

The objective is L_R(x) = ||R(grad_w F(w, x)) - y||^2 (Song, Wang, Yu, Zhang,
ICML 2023, Sec. 7), or its cosine variant 1 - <R g(x), y> / (||R g(x)|| ||y||)
(Geiping et al., "Inverting Gradients", 2020), plus optional image priors
(:mod:`leakattack.attacks.priors`: total variation; BatchNorm statistics, which
cost one extra forward pass of the victim per evaluation).  A re-parametrising
prior (the deep image prior, ``dip``) changes what is optimised: each restart's
row is then the weights theta of a generator, x = G_theta(z), and the penalties
act on G's images.  The attacker's model of the client is the observation's
``forward(x, labels)``.

Labels: ``given`` (granted by the threat model), ``idlg`` (recovered from the
message through the sketch by the ``pooled`` count rule of :mod:`leakattack.attacks.labels`
and, where the head's inputs are non-negative, the row-sum rules (iDLG's / Yin et al.'s ``sign``,
``llg``, ``llg-star``); where they read different labels, a short run of the attack with each
keeps the one whose gradient matches the message best: :meth:`GradientMatching.choose_labels`) or ``dlg``
(soft labels optimised jointly with x, Zhu et al. 2019).  Restarts run from
independent dummy starts; the attacker keeps the lowest final L_R (it cannot see
the truth), as in DLG and breaching.
"""

from __future__ import annotations

import contextlib
import copy
import ctypes
import ctypes.util
import math
import sys
import time
import warnings
from collections.abc import Mapping
from typing import Iterator

import torch
import torch.nn.functional as F

import targets
from targets.victim import cpu_cores, head_readable, whole

from ..constraints import MAX_RESTARTS
from ..errors import SettingWarning, UserError, a_type, duration_text, size_text
from ..observation import Observation
from ..progress import progress_bar, show_progress
from ..rebuilt import HALTED, STILL_RTOL
from ..seeds import torch_generator
from ..sketch.gaussian import available_bytes
from . import gauss_newton
from .base import Attack, AttackResult, Monitor, add_note, stop_requested, torch_threads
from .gauss_newton import (
    CANNOT_FORM,
    STEPS,
    columns_per_pass,
    levenberg_marquardt,
    steps_note,
    too_large,
    why_not_formed,
)
from .labels import (
    GIVEN_LABELS,
    finite_part,
    head_and_probes,
    hidden_head,
    one_example_classes,
    other_labels,
    readings_to_compare,
    scale_unknown,
)
from .optimizers import get_optimizer, sees_normalised_loss
from .priors import get_prior, list_priors, parse_prior, penalty_label
from .surrogate import SURROGATE_DECAY, relu_modules, relu_surrogate

OBJECTIVES = ("l2", "cosine")
LABEL_MODES = ("idlg", "given", "dlg")
DUMMY_INITS = ("uniform", "gaussian")
SCHEDULES = ("none", "step")
#: what follows the first-order phase: Gauss-Newton steps where they pay (auto), always, or nothing
REFINES = ("auto", "gauss-newton", "none")
#: ``auto`` follows a phase that used its steps only when they were at least this many: a shorter budget asks for
#: a quick answer (a probe, a sweep point), and one Gauss-Newton step on LeNet costs as much as ~1,100 L-BFGS steps
#: (``benchmarks/attack_speed.py --only jacobian --only lbfgs``).
#: A larger budget tries the steps after this many first-order steps already, and runs the rest of the budget only
#: when they do not converge: on the DLG LeNet they converge from the 1000-step iterate as from the 5,686-step one
#: (four steps each; from step 100 in five to seven, from the random start in nine), so the longer first phase
#: only costs time (docs/attack.md, "Gauss-Newton after L-BFGS")
GAUSS_NEWTON_AFTER = 1000

#: ``step`` schedule: the step size is multiplied by 0.1 at these fractions of the
#: iteration budget (Geiping et al.'s MultiStepLR milestones, 3/8, 5/8, 7/8)
STEP_MILESTONES = (3 / 8, 5 / 8, 7 / 8)

#: the l2 objective is optimised as LOSS_UNIT * L_R / ||y||^2 by L-BFGS (the choice of the unit: docs/attack.md)
LOSS_UNIT = 1e3

#: the stopping rule on progress: a start stops when its lowest L_R has fallen by less than the
#: factor 1 - STALL_GAIN over the last STALL_WINDOW steps (window 0 turns the rule off; how the window
#: was chosen: docs/attack.md).  Under the step schedule the window starts at its last decay: a plateau at a
#: larger step is what the schedule's decays are there to leave.
STALL_WINDOW = 500
STALL_GAIN = 0.02

#: an optimisation whose steps left would take longer than this, at the pace of its first steps, is warned of once
#: (with what shortens it), where no time limit stops it sooner: a large victim of one's own at its recipe's budget
LONG_ATTACK_SECONDS = 3600.0
#: the steps timed for that pace, after the first (which also sets up the kernels)
PACE_STEPS = 3

#: steps of the short run that scores each differing label reading (at most a quarter of the attack's budget)
LABEL_PROBE_STEPS = 150
#: and at least these (or the whole budget, where it is smaller): on logreg, digits of one class, unsketched, 5-step
#: runs kept the sign rule's distinct reading over three rules that read the repeats right (1 of 2, 3 of 4 labels),
#: 10-step runs the truth (2 of 2, 4 of 4)
LABEL_PROBE_MIN = 10
#: where one example's head gradient stands out of the sketch noise by less than this factor (its largest singular
#: value against the noise's, ``labels.one_example_classes``) and its features take both signs (no row-sum rule
#: applies), the short runs score the first classes in ``magnitude``'s order beside the readings, up to
#: LABEL_CANDIDATES in all.  Measured (docs/attacks/labels.md#features-of-both-signs): 0.90-1.71 on a FedAvg-trained
#: tanh ResNet-20 through srht b/d = 0.01 (the true class first in that order for 33 of 50 photos, within the first
#: 5 for 45), 3.3-4.1 on vit_small at its initial weights through the same b/d, where both readings are right
HEAD_SIGNAL_DOUBT = 2.0
#: the readings and classes those short runs score at most (all classes of a 10-class head)
LABEL_CANDIDATES = 10
#: there a run decides only where its loss is at least this many times below every other run's; otherwise ``pooled``'s
#: reading is kept, or ``magnitude``'s where pooled's is the class of the model's random probes (its reading where the
#: message's part drowns).  On a tanh LeNet trained to loss 4e-4 several classes' runs ended within 1.2 times of each
#: other's loss through srht b/d = 0.2, and the lowest was right for 3 of 12 digits; on the same LeNet untrained
#: through b/d = 0.5, within 1.06-1.21, where pooled read 6 of 6.  On the trained tanh ResNet-20 through b/d = 0.01
#: a wrong run stood out of the next by 1.46 and right ones by 1.9 and more: the factor was set between them on those
#: photos (0-9) and checked on others (docs/attacks/labels.md#features-of-both-signs)
LABEL_DECISIVE = 1.7
#: label readings whose short runs end within this share of the best one's loss are tied: the reading the most rules
#: gave is kept among them
LABEL_TIE = 1e-9
#: reading the labels (the probe pass, and any short runs) comes out of a time limit; a run notes it when it took at
#: least this share of the limit (64 probes through vit_b_16 at 224 px take about a minute on one CPU thread)
LABEL_SHARE_NOTED = 0.1
#: a time limit is checked between steps and cuts none short (an L-BFGS step's line search of a deep victim can take
#: many evaluations); a run notes an attack that ran past the limit by this share of it, and by OVERRUN_NOTED_S
OVERRUN_NOTED = 0.25
OVERRUN_NOTED_S = 2.0

#: restarts go through the batched model of the client unless its second evaluation took more than this many times as
#: long as the same points one by one (a margin for a busy machine).  The first is checked for agreement only: it holds
#: the batch's one-off costs (a GPU loads the kernels of the batch's shapes then); by the second, both ways have run
SLOWER = 1.25


#: with a time limit, the step schedule is fitted to the steps the limit allows, from the time of this many steps,
#: and fitted again over windows twice as long each time (10, 20, ... steps, each timed on its own) while decays
#: remain ahead: the first steps' time also holds one-off work (a GPU's kernel loading: on an H200 a ResNet-18's
#: first five steps took at least 2.7 times a later step's, docs/ig_recipe.md#the-budget), and the load may change
SCHEDULE_PROBE = 5


def match_loss(pred: torch.Tensor, y: torch.Tensor, objective: str) -> torch.Tensor:
    """L_R = ||pred - y||^2 (``l2``) or 1 - cos(pred, y) (``cosine``)."""
    if objective == "l2":
        return (pred - y).pow(2).sum()
    return cosine_distance(pred.flatten(), y.flatten())


def cosine_distance(pred: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """1 - cos(pred, y) over the last dimension, as ||pred/|pred| - y/|y|||^2 / 2.

    The two are equal; the second has no cancellation when the directions nearly
    agree, where ``1 - F.cosine_similarity`` in float32 rounds to 0 or below (its
    resolution is about 6e-8) and a gradient dominated by weights that barely
    depend on the input (an untrained ViT's) would read as matched at any image.
    """
    return distance_to_unit(pred, unit(y))


def unit(v: torch.Tensor) -> torch.Tensor:
    """``v / |v|`` over the last dimension."""
    return v / v.norm(dim=-1, keepdim=True).clamp_min(1e-30)


def distance_to_unit(pred: torch.Tensor, y_unit: torch.Tensor) -> torch.Tensor:
    """:func:`cosine_distance` against a message already scaled to unit length (the attack scales it once)."""
    return 0.5 * (unit(pred) - y_unit).pow(2).sum(-1)


def init_dummy(shape, kind: str, seed: int, device="cpu", dtype=torch.float32) -> torch.Tensor:
    """Seeded dummy data: U[0, 1] (``uniform``) or N(0.5, 0.25^2) (``gaussian``), drawn on the CPU."""
    gen = torch_generator(seed)
    x = torch.rand(shape, generator=gen) if kind == "uniform" else 0.5 + 0.25 * torch.randn(shape, generator=gen)
    return x.to(device=device, dtype=dtype)


def _count(value: object) -> bool:
    """Whether ``value`` is an integer (Python's or numpy's, not a bool) of at least 1."""
    return (whole(value) or 0) >= 1


def _real(value: object) -> float:
    """``value`` as a float, NaN where it is no number (a bool or a string is none)."""
    if isinstance(value, (bool, str)):
        return math.nan
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return math.nan


class GradientMatching(Attack):
    """DLG / Inverting-Gradients style optimisation of dummy data against the message.

    All restarts are optimised together: one matrix of R rows (the flattened dummy
    data, and the soft-label logits for ``dlg``), evaluated in one batched pass when
    the observation's model of the client offers one (``forward.restarts``) and
    restart by restart otherwise.  Each restart keeps its own optimiser state, line
    search, losses, best iterate and stopping step, so the result is the one
    sequential restarts from the same starts give (up to round-off in the batched
    evaluation).
    """

    name = "gradient-matching"
    reads_labels = True
    #: the run settings only gradient matching reads (its optimiser, objective, priors, starts and stopping rule)
    settings = ("recipe", "optimizer", "iterations", "lr", "objective", "schedule", "signed", "tv", "priors",
                "bn_stats", "box", "tol", "stall_window", "dummy_init", "restarts", "prune_restarts", "surrogate",
                "refine", "time_limit")

    def __init__(self, *, optimizer: str = "lbfgs", iterations: int = 300, lr: float | None = None,
                 objective: str = "l2", priors: dict | None = None, box: bool = False, tol: float = 1e-10,
                 labels: str = "idlg", dummy_init: str = "gaussian", restarts: int = 1, init_seed: int = 0,
                 schedule: str = "none", signed: bool = False, stall_window: int = STALL_WINDOW,
                 stall_gain: float = STALL_GAIN, time_limit: float | None = None, threads: int | None = None,
                 surrogate: float = 0.0, prune_restarts: bool = False, refine: str = "auto"):
        if schedule not in SCHEDULES:
            raise UserError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
        if not _count(iterations):  # a step budget far beyond a time limit is a Python caller's "until the limit"
            raise UserError(f"iterations must be an integer of at least 1, got {iterations!r}")
        if not _count(restarts) or restarts > MAX_RESTARTS:  # the starts are one batch: the command line's bound
            raise UserError(f"restarts must be an integer from 1 to {MAX_RESTARTS:,} (as on the command line), got "
                            f"{restarts!r}")
        if lr is not None and not (_real(lr) > 0 and math.isfinite(_real(lr))):
            raise UserError(f"learning rate must be a positive number, got {lr!r}")
        if not (_real(tol) >= 0 and math.isfinite(_real(tol))):
            raise UserError(f"tol must be a finite non-negative number, got {tol!r}")
        for setting, choice, names in (("objective", objective, OBJECTIVES), ("labels", labels, LABEL_MODES),
                                       ("dummy_init", dummy_init, DUMMY_INITS)):
            if choice not in names:
                raise UserError(f"unknown {setting} {choice!r}; choose one of: {', '.join(names)}")
        get_optimizer(optimizer, lr)  # an unknown name is refused here, not at the first reconstruct
        if isinstance(priors, (list, tuple)):  # NAME[:WEIGHT] specs, as --prior and sweep files give them
            specs, named = list(priors), [parse_prior(spec) for spec in priors]
            priors = dict(named)  # a name given twice: its last weight, as --prior takes it, and said as it says it
            for name in dict.fromkeys(n for n, _ in named):
                given = [str(spec) for spec, (n, _) in zip(specs, named) if n == name]
                if len(given) > 1:
                    warnings.warn(f"priors give {name} {len(given)} times ({', '.join(given)}): {name}:"
                                  f"{priors[name]:g} is used", SettingWarning, stacklevel=2)
        elif priors is not None and not isinstance(priors, dict):
            raise UserError(f"priors must be a dict name -> weight such as {{'tv': 1e-4}} or a list of NAME[:WEIGHT] "
                            f"specs such as ['tv:1e-4'], got {type(priors).__name__} {priors!r}")
        unknown = [name for name in (priors or {}) if not isinstance(name, str) or name not in list_priors()]
        if unknown:
            raise UserError(f"unknown prior {unknown[0]!r}; choose one of: {', '.join(list_priors())}")
        bad = {name: w for name, w in (priors or {}).items() if not (_real(w) >= 0 and math.isfinite(_real(w)))}
        if bad:
            name, w = next(iter(bad.items()))
            raise UserError(f"the weight of prior {name!r} must be a number of at least 0 (0 turns it off), and "
                            f"finite, got {w!r}")
        for what, flag in (("box", box), ("signed", signed), ("prune_restarts", prune_restarts)):
            if not isinstance(flag, bool):
                raise UserError(f"{what} must be True or False, got {type(flag).__name__} {flag!r}")
        if signed and sees_normalised_loss(optimizer):
            raise UserError(f"signed gradients need a first-order optimiser, not {optimizer}")
        # restart r starts from init_seed + 1000 r (a deep image prior's generator from one more), and a torch
        # generator takes seeds up to 2^64 - 1
        top_seed = 2 ** 64 - 2 - 1000 * (int(restarts) - 1)
        seed = whole(init_seed)
        if seed is None or not 0 <= seed <= top_seed:
            raise UserError(f"init_seed must be an integer from 0 to {top_seed} (restart r starts from seed "
                            f"init_seed + 1000 r, at most 2^64 - 2), got {type(init_seed).__name__} {init_seed!r}")
        window = whole(stall_window)
        if window is None or window < 0:
            raise UserError(f"stall_window must be an integer of at least 0 (0: never stop for a stall), got "
                            f"{type(stall_window).__name__} {stall_window!r}")
        if not 0 <= _real(stall_gain) < 1:
            raise UserError(f"stall_gain must be a number in [0, 1) (the fraction L_R must fall by over the stall "
                            f"window), got {type(stall_gain).__name__} {stall_gain!r}")
        if time_limit is not None and not (_real(time_limit) > 0 and math.isfinite(_real(time_limit))):
            raise UserError(f"time_limit must be a finite positive number of seconds or None (no limit), got "
                            f"{type(time_limit).__name__} {time_limit!r}")
        if threads is not None and not _count(threads):
            raise UserError(f"threads must be an integer of at least 1 or None (the victim's choice), got "
                            f"{type(threads).__name__} {threads!r}")
        if not (_real(surrogate) >= 0 and math.isfinite(_real(surrogate))):
            raise UserError(f"surrogate must be a finite non-negative width, got {type(surrogate).__name__} "
                            f"{surrogate!r}")
        self.optimizer, self.iterations, self.lr = optimizer, int(iterations), lr
        self.schedule, self.signed = schedule, signed
        self.objective, self.box, self.tol = objective, box, float(tol)
        #: prior name -> weight; the priors themselves are built for each observation (``bn`` reads its victim)
        self.priors = {name: float(w) for name, w in (priors or {}).items() if w > 0}
        self.label_mode, self.dummy_init = labels, dummy_init
        self.restarts, self.init_seed = int(restarts), seed
        self.stall_window, self.stall_gain = window, float(stall_gain)
        #: wall-clock seconds the optimisation may take (None: no limit)
        self.time_limit = None if time_limit is None else float(time_limit)
        #: the limit a stop at the deadline names: the user's, where parts of the run (the labels' reading, a first
        #: phase) took their time out of the optimisation's ``time_limit``
        self.stated_limit = self.time_limit
        self.bar_label = "attack"  #: what the progress bar of an optimisation calls it (label probes name theirs)
        #: whether ``time_limit`` counts from the start's fit rather than from the call: a label probe's share times
        #: its steps alone, so what comes before them (the first pass through the model) does not count against it;
        #: a label probe's few steps are not foreseen either (:func:`_warn_long`: the attack's own are, after them)
        self.clock_from_start = False
        #: torch threads the optimisation runs on (None: the victim's choice, ``Victim.threads``)
        self.threads = None if threads is None else int(threads)
        #: width tau of the ReLU surrogate at the start (0: exact derivatives; :mod:`.surrogate`), multiplied by
        #: SURROGATE_DECAY at every decay of the step schedule
        self.surrogate = float(surrogate)
        #: successive halving of the restarts (:func:`prune_points`): the worse half of the starts still running
        #: stops at 1/2^n, ..., 1/4, 1/2 of the budget
        self.prune_restarts = prune_restarts
        if refine not in REFINES:
            raise UserError(f"refine must be one of {REFINES}, got {refine!r}")
        #: Gauss-Newton steps on the best start after the first-order phase (:mod:`.gauss_newton`): ``auto`` where
        #: they can converge and are affordable (:meth:`refinement`), ``gauss-newton`` wherever L_R is the objective
        self.refine = refine

    def supports(self, obs: Observation) -> str | None:
        if self.label_mode == "given" and obs.labels is None:
            return "labels were asked for as given but the threat model does not grant them"
        if self.label_mode == "dlg" and obs.victim.task == "regression":  # softmax scores are no real targets
            return ("labels 'dlg' optimises soft class labels (a softmax over the outputs) with the images, and the "
                    f"victim is a regression, whose real targets they cannot be: {GIVEN_LABELS}")
        head = obs.victim.head
        if self.label_mode == "idlg" and (head is None or head_readable(obs.victim.model, head)):  # changed since
            return ("the victim has no trainable classifier head (a last nn.Linear whose weight gradient the message "
                    f"holds) to read labels from; {other_labels(obs.victim)}")
        if self.label_mode == "idlg" and obs.victim.task == "classification":
            hidden = hidden_head(obs.victim, obs.linear_map, obs.y)
            if hidden:
                return hidden
        unfit = self._beyond_dtype(obs.victim.dtype)
        if unfit:
            return unfit
        try:
            self.build_priors(obs)
        except UserError as err:
            return str(err)
        if self.refine == "gauss-newton":
            reason = self._unrefinable(obs)
            if reason:
                return f"Gauss-Newton steps need L_R itself as the objective: {reason}"
        return None

    def _beyond_dtype(self, dtype: torch.dtype) -> str | None:
        """Why the step size or a prior's weight cannot be a number of the attack's ``dtype`` (the victim's): beyond
        its largest finite value it is inf there, and the first step makes the image inf or NaN (None: they fit)."""
        if not dtype.is_floating_point:
            return None
        big = torch.finfo(dtype).max
        named = ([("the learning rate", self.lr, "--lr")] if self.lr is not None else []) + [
            (f"the weight of prior '{name}'", w, "--tv (or --prior tv:W)" if name == "tv" else f"--prior {name}:W")
            for name, w in self.priors.items()]
        for what, value, flag in named:
            if isinstance(value, (int, float)) and value > big:
                kind = str(dtype).removeprefix("torch.")
                return (f"{what}, {value:g}, is beyond the largest {kind} number ({big:.3g}), and the attack runs in "
                        f"{kind}: give a smaller {flag}" + (", or --dtype float64" if dtype != torch.float64 else ""))
        return None

    def _unrefinable(self, obs: Observation) -> str | None:
        """Why this attack's objective on ``obs`` is not L_R alone, which Gauss-Newton steps minimise (None: it is).
        A ReLU surrogate counts only where the victim has ``nn.ReLU`` modules for it to act on."""
        if self.objective != "l2":
            return f"the objective is {self.objective}"
        remaps = [name for name in self.priors if penalty_label(name) is None]
        if remaps:
            return f"prior {remaps[0]} re-parametrises the images (the attack moves a generator's weights, not them)"
        if self.priors:
            return f"a prior ({', '.join(self.priors)}) is added to it"
        if self.surrogate and relu_modules(obs.victim.model):
            return "the ReLU surrogate changes its derivative"
        if self.box:
            return "the box [0, 1] constrains it"
        if self.label_mode == "dlg":
            return "the labels are optimised with the images"
        return None

    def refinement(self, obs: Observation, stop: str = "stalled") -> str | None:
        """Why no Gauss-Newton steps follow a first-order phase that stopped for ``stop`` (None: they follow).

        ``auto`` takes them on a float64 attack of L_R alone (no prior, box or surrogate, fixed labels) whose
        message has at least as many numbers as unknowns (b >= m*B: a full-rank J can exist) and within the
        sizes of :func:`.gauss_newton.too_large`, after a phase that ended on its own (stalled, or met the
        tolerance: the steps take it on to round-off) or used a budget of at least :data:`GAUSS_NEWTON_AFTER` steps
        (not after a shorter budget or a time limit).
        """
        if self.refine == "none":
            return "--refine none"
        if stop_requested():
            return "Ctrl-C stopped the attack"
        reason = self._unrefinable(obs)
        if reason or self.refine == "gauss-newton":
            return reason
        n = math.prod(obs.input_shape)
        if obs.victim.dtype != torch.float64:
            return f"the attack runs in {str(obs.victim.dtype).removeprefix('torch.')}"
        if obs.b < n:
            return f"b = {obs.b} < m*B = {n}"
        if stop not in ("stalled", "tolerance", "iterations"):
            return f"the first phase stopped for {stop}"
        if stop == "iterations" and self.iterations < GAUSS_NEWTON_AFTER:
            return f"the first phase's budget of {self.iterations} steps is a probe's (below {GAUSS_NEWTON_AFTER})"
        return too_large(obs.b, n, obs.d)

    @property
    def added_terms(self) -> tuple[str, ...]:
        """How messages name the terms the objective adds to the matching term (``TV``, ``the bn prior``); a
        re-parametrising prior adds none."""
        return tuple(label for label in map(penalty_label, self.priors) if label)

    def build_priors(self, obs: Observation) -> list:
        """The configured priors, built for ``obs``: callables x -> weighted penalty."""
        return [get_prior(name, w, obs=obs) for name, w in self.priors.items()]

    def objective_terms(self, obs: Observation, x: torch.Tensor, labels: torch.Tensor) -> dict[str, float] | None:
        """The attack's objective at the input ``x`` (B, ...) with fixed ``labels``, term by term: the matching term
        (``match``: L_R itself for the l2 objective, the cosine distance for cosine), each prior's weighted penalty by
        its name in the same units, and their sum (``total``).  The attack minimises a constant multiple of that sum
        (L-BFGS sees L_R scaled by LOSS_UNIT / ||y||^2), which orders inputs the same way; reading it in L_R's
        units lets a note's numbers be compared with the L_R a run prints.  Exact where the attack's steps saw the
        ReLU surrogate.  None with a re-parametrising prior (``dip``), whose objective is one of a generator's weights
        rather than of an input."""
        problem = _Problem(self, obs, x.detach().unsqueeze(0), labels)
        if problem.remap is not None:
            return None
        xs = problem.images(problem.z0)
        fit = problem._fit(problem._messages(xs, problem._labels(problem.z0, 1), batched=False), batched=False)
        terms = {"match": float(fit[0].detach())}
        for name, prior in zip(problem.penalty_names, problem.penalties, strict=True):
            value = prior(xs[0])
            _check_penalty(name, value)
            terms[name] = float(value.detach()) / problem.weight
        return {**terms, "total": sum(terms.values())}

    def labels_for(self, obs: Observation) -> torch.Tensor | None:
        """The labels the attack uses: given, recovered from the message, or None (optimised, DLG); where the label
        rules disagree this runs :meth:`choose_labels`' short probes."""
        return self.choose_labels(obs)[0]

    def choose_labels(self, obs: Observation, progress: bool = False) -> tuple[torch.Tensor | None, dict | None]:
        """The labels the attack uses, and (``idlg`` only, when the rules :func:`~.labels.readings_to_compare` reads
        give different labels) the record of how they were chosen.

        Each differing reading gets a short run of this attack (:data:`LABEL_PROBE_STEPS` steps, at most a quarter
        of the budget, one start from the attack's own first start, a quarter of any time limit shared among
        them, each share timing its run's steps from the start's fit); the reading whose run matched the message
        best after the steps every run took is kept (where one took none within its share of a time limit, the
        reading the most rules gave).  A wrong label changes the gradient of
        every layer (the output error p - onehot), so the matching loss tells readings apart where the head's
        share of a sketched message does not.  Where one example's head gradient is within the sketch noise
        (:data:`HEAD_SIGNAL_DOUBT`; features of both signs), the first classes in ``magnitude``'s order join the
        readings, up to :data:`LABEL_CANDIDATES` (``candidates`` and ``head_signal`` in the record), whether or not
        the readings agree; a run then decides only where it stands out (:data:`LABEL_DECISIVE`), and otherwise
        (``undecided``) ``pooled``'s reading is kept, or ``magnitude``'s where pooled's is the probes' class.
        ``progress``: a bar for each run.
        """
        if self.label_mode == "given":
            return obs.labels, None
        if self.label_mode != "idlg":
            return None, None
        y = finite_part(obs.y)  # a message with NaN or infinite values, which the run warns of: its finite values
        shared = head_and_probes(obs.victim, obs.linear_map, y, obs.batch_size)  # one readout, one probe pass
        readings = readings_to_compare(obs.victim, obs.linear_map, y, obs.batch_size,
                                       scale_unknown=scale_unknown(obs), shared=shared)
        distinct: list[torch.Tensor] = []
        for labels in readings.values():
            if not any(torch.equal(labels, seen) for seen in distinct):
                distinct.append(labels)
        order: list[int] = []
        signal, prior = math.inf, -1
        if obs.batch_size == 1 and "magnitude" in readings:  # features of both signs: is the head's reading clear?
            order, signal, prior = one_example_classes(obs.victim, obs.linear_map, y, shared=shared)
        doubt = signal < HEAD_SIGNAL_DOUBT
        if doubt:  # within the sketch noise: the first classes in magnitude's order are scored too
            for c in order:
                labels = torch.tensor([c], dtype=distinct[0].dtype, device=distinct[0].device)
                if len(distinct) < LABEL_CANDIDATES and not any(torch.equal(labels, seen) for seen in distinct):
                    distinct.append(labels)
        if len(distinct) == 1:
            return distinct[0], None
        probe = copy.copy(self)
        probe.label_mode, probe.restarts, probe.clock_from_start = "given", 1, True
        probe.iterations = min(LABEL_PROBE_STEPS, max(self.iterations // 4, min(LABEL_PROBE_MIN, self.iterations), 1))
        if self.time_limit is not None:
            probe.time_limit = probe.stated_limit = self.time_limit / (4 * len(distinct))
        x0 = init_dummy(obs.input_shape, self.dummy_init, self.init_seed, obs.y.device, obs.victim.dtype)
        losses, steps, traces, met = [], [], [], []
        for i, labels in enumerate(distinct):
            if stop_requested():  # Ctrl-C: the readings not yet tried lose
                losses.append(math.inf)
                steps.append(0)
                traces.append([math.inf])
                met.append(False)
                continue
            probe.bar_label = f"label reading {i + 1}/{len(distinct)}"
            ran = probe.run(obs, x0, labels, progress=progress)
            losses.append(ran.final_loss)
            steps.append(ran.iterations)
            traces.append(list(ran.losses))
            met.append(ran.stop_reason == "tolerance")
        # the runs are compared after the steps all of them took (a time limit's shares end at different steps);
        # where one took none, the start's losses tell nothing and the reading most rules gave is kept
        common = min(steps)
        at = [min((v if math.isfinite(v) else math.inf for v in t[:common + 1]), default=math.inf) for t in traces]
        tied: list[int] = []
        undecided = False
        if stop_requested():  # Ctrl-C: the runs' own ends, the readings not tried last
            finite = [loss if math.isfinite(loss) else math.inf for loss in losses]
            chosen = distinct[finite.index(min(finite))]
        else:
            votes = [sum(torch.equal(labels, r) for r in readings.values()) for labels in distinct]
            if any(met):  # a run that met the attack's tolerance found an input with its reading that sends the
                # message; the message does not tell such readings apart, however fast each run got there
                tied = [i for i, m in enumerate(met) if m]
            elif common > 0:  # runs that end within round-off of the best (a message of one number, which every
                # reading can match) do not tell their readings apart
                best = min(at)
                tied = [i for i, v in enumerate(at) if v <= best + LABEL_TIE * abs(best)]
            # of the readings the runs cannot tell apart (all where no run took a step), the one the most rules gave
            pick = tied if tied else range(len(distinct))
            chosen = distinct[max(pick, key=lambda i: (votes[i], -i))]
            ranked = sorted(at)
            if doubt and common > 0 and not ranked[0] * LABEL_DECISIVE <= ranked[1]:
                # one example within the sketch noise and no run stood out: pooled's reading, unless it is the class
                # of the probes, which it reads where the message's part drowns; magnitude's then
                undecided = True
                chosen = readings["magnitude" if readings["pooled"].tolist() == [prior] else "pooled"]
        # probe_steps: each run's budget; probe_steps_run: the steps each took (fewer where its share of a time
        # limit ran out, or where it met the tolerance); probe_compared: the losses at the steps all of them took
        return chosen, {"readings": {rule: labels.tolist() for rule, labels in readings.items()},
                        "probe_steps": probe.iterations, "probe_steps_run": steps, "probe_losses": losses,
                        "probe_compared": at, "compared_at": common, "chosen": chosen.tolist(),
                        "probe_time_limit": self.time_limit is not None,
                        "interrupted": stop_requested(), **({"tied": len(tied)} if len(tied) > 1 else {}),
                        **({"matched": sum(met)} if any(met) and not stop_requested() else {}),
                        **({"candidates": [labels.tolist() for labels in distinct], "head_signal": signal,
                            "undecided": undecided, "decisive": LABEL_DECISIVE, "probes_class": prior}
                           if doubt else {})}

    def reconstruct(self, obs: Observation, *, monitor: Monitor | None = None, monitor_every: int = 10,
                    progress: bool = False) -> AttackResult:
        self.check(obs)
        t0 = time.perf_counter()
        labels, choice = self.choose_labels(obs, progress)
        probes_s = time.perf_counter() - t0  # reading the labels: the probe pass, and short runs where readings differ
        main = self
        if self.time_limit is not None and probes_s > 0:  # reading the labels spent part of the time limit
            main = copy.copy(self)
            main.time_limit = max(self.time_limit - probes_s, 1e-3)
        best = self._search(obs, main, labels, choice, probes_s, t0, monitor, monitor_every, progress)
        _warn_kink(best, self.iterations, obs.victim)
        if self.time_limit is not None and probes_s >= LABEL_SHARE_NOTED * self.time_limit:
            runs = "" if not choice else f", and a short run of each {'class' if 'candidates' in choice else 'reading'}"
            share = (f" of the {self.time_limit:g} s time limit" if probes_s < self.time_limit else
                     f", more than the whole {self.time_limit:g} s time limit")
            took = f"{probes_s:.1f}" if probes_s >= 0.1 else f"{probes_s:.2g}"  # a tiny limit: digits that exceed it
            best.message = add_note(best.message, f"reading the labels took {took} s{share} (the model on "
                                                  f"random probes{runs})")
        limit = self.time_limit
        if limit is not None and best.stop_reason == "time-limit" and probes_s < limit and \
                best.wall_s - limit > max(OVERRUN_NOTED_S, OVERRUN_NOTED * limit):
            best.message = add_note(best.message, f"the attack took {best.wall_s:.1f} s for a {limit:g} s "
                                                  f"time limit, which is checked between steps and cuts none short: "
                                                  f"{best.iterations} step(s) took {best.wall_s - probes_s:.1f} s "
                                                  "after the labels were read")
        return best

    def _search(self, obs: Observation, main: GradientMatching, labels, choice: dict | None, probes_s: float,
                t0: float, monitor: Monitor | None, monitor_every: int, progress: bool) -> AttackResult:
        """The starts, and Gauss-Newton steps where :meth:`refinement` takes them, after the labels were read (their
        time ``probes_s``, spent since ``t0``)."""
        x0 = torch.stack([init_dummy(obs.input_shape, self.dummy_init, self.init_seed + 1000 * r, obs.y.device,
                                     obs.victim.dtype) for r in range(self.restarts)])
        deadline = math.inf if self.time_limit is None else t0 + self.time_limit
        tried, spent, best = None, 0.0, None
        if self._tries_early(obs):
            # Gauss-Newton from the GAUSS_NEWTON_AFTER-step iterate (the first steps of the whole budget's run)
            first = copy.copy(main)
            first.iterations = GAUSS_NEWTON_AFTER
            started = time.perf_counter()
            best = self._best(first.optimise(obs, x0, labels, monitor=monitor, monitor_every=monitor_every,
                                             progress=progress), choice, probes_s)
            # a phase that ended on its own did what the whole budget's run would have: the steps follow below
            if best.stop_reason == "iterations":
                if self._refine(obs, best, deadline, monitor, progress):
                    return best
                cut = (best.gauss_newton or {}).get("stop") in HALTED
                if cut or stop_requested() or time.perf_counter() >= deadline:
                    # the shorter phase's iterate; its budget was not the run's, so the run stopped for this
                    best.stop_reason = "interrupted" if stop_requested() else "time-limit"
                    return best
                tried, spent, best = best.gauss_newton, time.perf_counter() - started, None
                if main.time_limit is not None:
                    left = main.time_limit - spent
                    main = copy.copy(main)
                    main.time_limit = max(left, 1e-3)
        if best is None:
            best = self._best(main.optimise(obs, x0, labels, monitor=monitor, monitor_every=monitor_every,
                                            progress=progress), choice, probes_s)
        why = self.refinement(obs, best.stop_reason)
        paid = why is not None and self._paid_by_time(obs, why, deadline)
        if why is None or paid:
            refined = self._refine(obs, best, deadline, monitor, progress, ahead=2 if paid else 1)
            ended = str((best.gauss_newton or {}).get("stop"))
            begun = not paid or (best.gauss_newton or {}).get("jacobians")  # steps the time limit paid for
            if not refined and ended in HALTED and best.stop_reason == "iterations" and begun:
                best.stop_reason = ended  # the steps' budget was spent, and what would have followed was cut short
        elif best.stop_reason != "tolerance" and (note := self._size_note(obs, why)):
            best.message = add_note(best.message, note)
        if tried is not None:
            best.wall_s += spent  # the shorter first phase and its steps, whose iterate was not kept
            reached = f" (L_R {tried['loss_before']:.2e} to {tried['loss_after']:.2e})" if "loss_after" in tried else ""
            best.message = add_note(best.message, f"Gauss-Newton steps after step {GAUSS_NEWTON_AFTER} had not "
                                                  f"converged{reached}, so the attack ran again from its start, "
                                                  f"given its whole budget of {main.iterations} steps")
            best.gauss_newton = {**best.gauss_newton, "first_attempt": tried} if best.gauss_newton else tried
        return best

    @staticmethod
    def _size_note(obs: Observation, why: str) -> str:
        """What asking for the Gauss-Newton steps would cost where ``why`` they were left out is their size alone
        (:func:`.gauss_newton.too_large`): J's memory, or above :data:`.gauss_newton.MAX_HELD` numbers the passes
        that form a sketch of J without holding it; else nothing."""
        n = math.prod(obs.input_shape)
        if why != too_large(obs.b, n, obs.d):
            return ""
        size = size_text(8 * obs.b * n)  # J in float64
        cost = f"J of {obs.b} x {n} numbers, {size} in float64" if obs.b * n <= gauss_newton.MAX_HELD else \
            f"{n} backward passes for a sketch of J, as J of {obs.b} x {n} numbers would hold {size}"
        timed = ", as does a --time-limit that leaves room for them" if GradientMatching._time_can_pay(obs, why) \
            else ""
        return (f"no Gauss-Newton steps: {why}; --refine gauss-newton takes them anyway ({cost}){timed}, which can "
                "reach the input itself where the message pins it down")

    def _paid_by_time(self, obs: Observation, why: str, deadline: float) -> bool:
        """Whether ``auto`` takes the Gauss-Newton steps that :meth:`refinement` leaves out for their size alone
        (``why``, :func:`.gauss_newton.too_large`'s reason other than the unknowns' count) because a time limit is
        there to pay for them: the steps then begin only where, at the pace of their first J's columns, the time
        left holds that J and one more (``ahead=2``); else they stop once that pace is read and say how long one J
        would take."""
        return (self.refine == "auto" and math.isfinite(deadline) and time.perf_counter() < deadline
                and self._time_can_pay(obs, why))

    @staticmethod
    def _time_can_pay(obs: Observation, why: str) -> bool:
        """Whether ``why`` the steps were left out is J's numbers or work (:func:`.gauss_newton.too_large`), which a
        time limit can pay for, and not the count of unknowns, which it cannot."""
        n = math.prod(obs.input_shape)
        return n <= gauss_newton.MAX_UNKNOWNS and why == too_large(obs.b, n, obs.d)

    def _tries_early(self, obs: Observation) -> bool:
        """Whether ``auto`` tries the Gauss-Newton steps after :data:`GAUSS_NEWTON_AFTER` steps of a larger budget:
        where it would take them after the whole budget, and the first steps of the budget are those of a run of
        that many steps (no step schedule, no pruned restarts: their steps depend on the budget)."""
        return (self.refine == "auto" and self.iterations > GAUSS_NEWTON_AFTER and self.schedule == "none"
                and not (self.prune_restarts and self.restarts > 1) and self.refinement(obs, "iterations") is None)

    @staticmethod
    def _best(runs: list[AttackResult], choice: dict | None, probes_s: float) -> AttackResult:
        """The start with the lowest final L_R, holding every start's final L_R and stop reason (and the label
        choice), with the time the labels took to read added."""
        best = runs[0]
        for run in runs[1:]:
            if run.final_loss < best.final_loss:
                best = run
        best.restart_losses = [run.final_loss for run in runs]
        best.restart_stops = [run.stop_reason for run in runs]
        if best.restart_path and best.restart_path.startswith("one by one: "):
            best.message = add_note(best.message, f"the starts ran {best.restart_path}")
        if choice is not None:
            best.label_choice = choice
        best.wall_s += probes_s
        return best

    def _refine(self, obs: Observation, best: AttackResult, deadline: float, monitor: Monitor | None,
                progress: bool = False, ahead: int = 1) -> bool:
        """Gauss-Newton steps from ``best``'s iterate (:func:`.gauss_newton.levenberg_marquardt`), written into it
        when they converge (reach the tolerance): each accepted step is one more step of its losses and the stop
        reason becomes ``tolerance``.  They start from the iterate projected onto the images' box [0, 1] (clamped;
        ``clamped`` counts the values moved, ``loss_clamped`` is L_R there): the projection onto a convex set that
        holds the input is never farther from it, and where L-BFGS left values outside the box that can put the
        start in the input's basin (docs/attack.md, "From the clamped iterate").  Steps that do not converge
        leave the first phase's own iterate, losses and stop reason as they were (a lower L_R reached by slow
        steps is no sign of being nearer the input); its message and ``gauss_newton`` record what they reached
        (``progress``: a bar of their steps; ``ahead``: the J the time left must hold when the first is begun,
        :func:`.gauss_newton.levenberg_marquardt`).  Returns whether they were kept."""
        bar = progress_bar(STEPS, "Gauss-Newton", "Jacobian", requested=progress, leave=False)

        shown = [""]  # L_R after the last round

        def step(loss: float) -> None:
            bar.update(1)
            shown[0] = f"L_R={loss:.3e}"
            bar.set_postfix_str(shown[0])

        def columns(k: int, n: int) -> None:  # J (or a sketch of it) is formed a batch of columns at a time
            bar.set_postfix_str(f"{shown[0]}, J: {k}/{n} columns" if shown[0] else f"J: {k}/{n} columns")

        start, clamped = best.x.clamp(0, 1), int(((best.x < 0) | (best.x > 1)).sum())
        try:
            with torch_threads(self.threads or obs.victim.threads):
                # its normal equations are large dense products: every core, unless the threads were given
                out = levenberg_marquardt(obs.forward, obs.y, start, best.labels, tol=self.tol,
                                          scale=float(obs.y.pow(2).sum()) or 1.0, deadline=deadline,
                                          threads=self.threads or cpu_cores(), on_step=step, on_columns=columns,
                                          chunk=columns_per_pass(obs.b, obs.d, obs.y.element_size()),
                                          ahead=ahead)
        except CANNOT_FORM as err:
            # a model of the client that J cannot go through, or J's passes and normal equations that did not fit
            # in memory: the first phase's iterate stands either way
            best.gauss_newton = {"after_step": best.iterations, "kept": False,
                                 "error": str(err).strip()[:200] or type(err).__name__}
            best.message = add_note(best.message, f"no Gauss-Newton steps: {why_not_formed(err)}")
            return False
        finally:
            bar.close()
        before, first = best.final_loss, best.best_step
        reached = out.losses[-1] if out.losses else before
        kept = out.stop == "tolerance"
        best.wall_s += out.seconds
        best.gauss_newton = {"after_step": best.iterations, "from_step": first, "clamped": clamped,
                             **({"loss_clamped": out.start_loss} if clamped else {}), "jacobians": out.steps,
                             "accepted": len(out.losses), "chord": out.chord, "watched": out.watched,
                             "kept": kept, "loss_before": before,
                             "loss_after": reached, "round_losses": out.rounds, "stop": out.stop,
                             "jacobian_rank": out.rank, "singular_values": out.singular,
                             **({"paid_by_time": True} if ahead > 1 else {}),
                             **({"foreseen_s": out.foreseen} if out.foreseen is not None else {})}
        moved = f", {clamped} value{'s' if clamped != 1 else ''} clamped to [0, 1]" if clamped else ""
        where = f"the best iterate (step {first}{moved})"
        began = f"{before:.2e}" + (f" ({out.start_loss:.2e} clamped)" if clamped else "")
        did = f"{steps_note(best.gauss_newton, steps=True)} from {where} took L_R from {began} to {reached:.2e}"
        if kept:
            best.x = out.x
            best.losses = best.losses[: best.iterations + 1] + out.losses
            best.iterations = best.best_step = len(best.losses) - 1
            best.stop_reason = "tolerance"
            # the kept start ends where the steps took it: its entry among the starts' final losses (the lowest
            # of which is the run's) and its stop reason follow
            for i, loss in enumerate(best.restart_losses):
                if loss == before:
                    best.restart_losses[i] = best.final_loss
                    if i < len(best.restart_stops):
                        best.restart_stops[i] = best.stop_reason
                    break
            best.message = f"converged: {did} (L_R/||y||^2 <= tol)"
            if monitor is not None and out.losses:
                best.extra.append({"step": best.iterations, **monitor(best.iterations, best.x)})
            return True
        why = {"stalled": "they stopped converging",
               "time-limit": "the time limit was reached, or too little of it was left for a step",
               "interrupted": "Ctrl-C stopped them",
               "iterations": "their step limit was reached", "diverged": "the residual was not finite"}
        jacobians = f"{out.steps} Jacobian{'s' if out.steps != 1 else ''}"
        said = (f"{did} without converging" if out.losses else
                f"Gauss-Newton steps from {where}, at L_R {began}, formed {jacobians} and took no step"
                if out.steps else f"Gauss-Newton steps from {where} stopped before their first step")
        reason = why[out.stop]
        if out.stop == "stalled" and out.steps and not out.losses:  # every damping of J rose
            reason = "no damping of the Jacobian lowered L_R"
        if out.foreseen is not None:  # a J stopped at its columns' pace rather than at the deadline
            room = " and one more J" if ahead > 1 and not out.steps else ""
            reason = (f"at the pace of its first columns one J takes about {out.foreseen:.0f} s, and the time limit "
                      f"did not leave room for it{room}")
        best.message = add_note(best.message, f"{said} ({reason}): the first phase's iterate is kept",
                                link="then ")
        return False

    def run(self, obs: Observation, x0: torch.Tensor, labels: torch.Tensor | None, *,
            monitor: Monitor | None = None, monitor_every: int = 10, progress: bool = False) -> AttackResult:
        """One optimisation from ``x0``; ``labels=None`` optimises soft labels jointly (DLG).

        With a re-parametrising prior (``dip``) only the shape of ``x0`` is used: the
        start is the prior's seeded generator.
        """
        return self.optimise(obs, x0.unsqueeze(0), labels, monitor=monitor, monitor_every=monitor_every,
                             progress=progress)[0]

    def optimise(self, obs: Observation, x0: torch.Tensor, labels: torch.Tensor | None, *,
                 monitor: Monitor | None = None, monitor_every: int = 10,
                 progress: bool = False) -> list[AttackResult]:
        """Optimise R starts ``x0`` (R, B, ...) together; one result per start.

        A start stops after ``iterations`` steps; when L_R / ||y||^2 <= ``tol``
        (``l2``) or L_R <= ``tol`` (``cosine``); when its lowest L_R has improved by
        less than the factor ``1 - stall_gain`` over the last ``stall_window`` steps
        (under the step schedule, steps after its last decay), or L-BFGS finds no descent
        direction (``stalled``); or at the first non-finite loss (``diverged``); or once
        ``time_limit`` seconds have passed since the call (``time-limit``, checked after every
        step); or, with ``prune_restarts``, at a cut of successive halving (``pruned``,
        :func:`prune_points`).  Each result holds the start's best iterate.

        It runs on ``threads`` torch threads, by default the victim's choice for R*B images an
        evaluation (every core for deep victims and for batches of starts and examples, one
        thread for one image of a small one: ``Victim.threads_for``), and gives torch its
        thread count back afterwards.  A float32 attack on one image of a small victim
        runs its convolutions without oneDNN (:func:`own_convolutions`).
        """
        with torch_threads(self.threads or obs.victim.threads_for(x0.shape[0] * x0.shape[1])), \
                onednn(not own_convolutions(obs, x0)):
            return self._optimise(obs, x0, labels, monitor, monitor_every, progress)

    def _optimise(self, obs: Observation, x0: torch.Tensor, labels: torch.Tensor | None, monitor: Monitor | None,
                  monitor_every: int, progress: bool) -> list[AttackResult]:
        if monitor is not None and not callable(monitor):
            raise UserError(f"monitor must be a function (step, x) -> dict of names to numbers, or None, got "
                            f"{type(monitor).__name__} {monitor!r:.60}")
        if monitor is not None and not _count(monitor_every):
            raise UserError(f"monitor_every must be an integer of at least 1 (the steps between two calls of the "
                            f"monitor), got {type(monitor_every).__name__} {monitor_every!r}")
        t0 = time.perf_counter()
        deadline = math.inf if self.time_limit is None else t0 + self.time_limit
        keep_freed_memory()
        problem = _Problem(self, obs, x0, labels)
        R, iterations = problem.R, self.iterations
        opt = get_optimizer(self.optimizer, self.lr)
        _warn_history_memory(opt, problem.z0)
        milestones = [round(f * iterations) for f in STEP_MILESTONES] if self.schedule == "step" else []
        box = self.box and problem.clamp
        base_lr = opt.lr

        runs = [_Run(problem, r) for r in range(R)]
        rows = list(range(R))
        prune_at = prune_points(R) if self.prune_restarts else []
        horizon = iterations  # the steps the budget allows: the iterations, or those a time limit leaves
        # a step schedule under a time limit fits its decays to the steps the time allows, timed from (step, time)
        # over a window of steps: SCHEDULE_PROBE from the start, then windows twice as long while decays remain
        # ahead, and again SCHEDULE_PROBE after each prune (fewer starts take shorter steps)
        fits_time = bool(milestones) and self.time_limit is not None
        since = (0, t0, SCHEDULE_PROBE) if fits_time else None
        Z = problem.z0
        values, G, fits = problem.evaluate(rows, Z)
        if self.clock_from_start and self.time_limit is not None:
            deadline = time.perf_counter() + self.time_limit
        # the steps leave the start as it is drawn, as Inverting Gradients' do; with the box on the best iterate is
        # the start's projection onto it, at its own fit, so that no run returns an image outside [0, 1]
        kept = _boxed_start(problem, rows, Z) if box else None
        bar = _progress(iterations, progress, self.bar_label)
        step = 0
        while True:
            finite = torch.isfinite(Z[:, :problem.nx]).all(1).tolist()
            late = time.perf_counter() >= deadline
            interrupted = stop_requested()
            keep = []
            for i, r in enumerate(rows):
                run = runs[r]
                if step == 0 and kept is not None:
                    run.record(0, kept[0][i], kept[1][i], finite[i])
                else:
                    run.record(step, Z[i], fits[i], finite[i])
                if run.stop is None:
                    run.check(step, iterations, self.tol, problem.scale, self.stall_window, self.stall_gain,
                              _no_descent(opt, r), (self.stated_limit or self.time_limit) if late else None,
                              since=milestones[-1] if milestones else 0, interrupted=interrupted)
                if monitor is not None and run.stop != "diverged" and \
                        (step % monitor_every == 0 or run.stop is not None):
                    row = monitor(step, problem.x_of(Z[i]))
                    if not isinstance(row, Mapping):
                        raise UserError(f"a monitor must return a mapping of names to numbers such as "
                                        f"{{'psnr': 21.5}}, got {type(row).__name__} {row!r:.60} at step {step}")
                    run.extra.append({"step": step, **row})
                if run.stop is None:
                    keep.append(i)
            while prune_at and len(keep) > 1 and max(step / horizon, (time.perf_counter() - t0) / (
                    self.time_limit or math.inf)) >= prune_at[0]:
                keep = _prune(runs, rows, keep, step, prune_at.pop(0))
                since = (step, time.perf_counter(), SCHEDULE_PROBE) if fits_time else None
            if len(keep) < len(rows):
                rows = [rows[i] for i in keep]
                if not rows:
                    break
                index = torch.tensor(keep)
                Z, G = Z[index], G[index]
                values, fits = [values[i] for i in keep], [fits[i] for i in keep]
            if since is not None and step == since[0] + since[2]:
                # the decays still to come fall at their fractions of the steps the time left allows
                now = time.perf_counter()
                per_step = (now - since[1]) / since[2]
                horizon = min(iterations, step + max(1, int((deadline - now) / per_step)))
                milestones = [m if m <= step else max(step + 1, round(f * horizon))
                              for m, f in zip(milestones, STEP_MILESTONES, strict=True)]
                since = (step, now, 2 * since[2]) if milestones[-1] > step else None
                if bar is not None:
                    bar.total = horizon
            if milestones:
                decays = sum(step >= m for m in milestones)
                opt.lr = base_lr * 0.1 ** decays
                problem.tau = problem.surrogate * SURROGATE_DECAY ** decays
            if opt.evaluates:
                Z, values, G, fits = opt.step(rows, Z, values, G, fits, problem.evaluate)
            else:
                Z = opt.step(rows, Z, G.sign() if self.signed else G)
            if box:
                Z[:, :problem.nx].clamp_(0, 1)
            if not opt.evaluates or box:
                values, G, fits = problem.evaluate(rows, Z)
            step += 1
            if step == 1:
                paced = time.perf_counter()
            elif step == 1 + PACE_STEPS and not self.clock_from_start:  # a label probe's few steps: not foreseen
                _warn_long(time.perf_counter(), paced, horizon - step, deadline, bar)
            if bar is not None:
                bar.update(1)
                bar.set_postfix_str(f"L_R={min(fits):.3e}")
        if bar is not None:
            bar.close()
        wall = time.perf_counter() - t0
        return [run.result(wall) for run in runs]


def _warn_long(now: float, paced: float, left: int, deadline: float, bar) -> None:
    """One warning where the ``left`` steps, at the pace of the :data:`PACE_STEPS` steps timed since ``paced``,
    would take longer than :data:`LONG_ATTACK_SECONDS` and the ``deadline`` (``time.perf_counter()`` seconds) does
    not come within that; the progress ``bar`` (or None) is drawn again under it."""
    per = (now - paced) / PACE_STEPS
    if per * left <= LONG_ATTACK_SECONDS or deadline - now <= LONG_ATTACK_SECONDS:
        return
    if bar is not None:
        bar.clear()
    warnings.warn(f"at about {duration_text(per)} a step, the attack's {left} steps left take about "
                  f"{duration_text(per * left)}: --time-limit (such as --time-limit 30m) stops it at the deadline "
                  "with its best image, as Ctrl-C does, and fewer --iterations shorten it", SettingWarning,
                  stacklevel=3)
    if bar is not None:
        bar.refresh()


@contextlib.contextmanager
def onednn(enabled: bool) -> Iterator[None]:
    """Within the block torch's oneDNN (mkldnn) kernels are on or off; torch's setting is given back afterwards.
    (``torch.backends.mkldnn.flags`` would also reset oneDNN's TF32 setting, which warns on every call on a CPU.)"""
    before = torch._C._get_mkldnn_enabled()
    torch._C._set_mkldnn_enabled(bool(enabled))
    try:
        yield
    finally:
        torch._C._set_mkldnn_enabled(before)


def own_convolutions(obs: Observation, x0: torch.Tensor) -> bool:
    """Whether the attack from the starts ``x0`` (R, B, ...) runs its convolutions with PyTorch's own CPU kernels
    rather than oneDNN's (mkldnn): for one image (R = B = 1) in float32 on the CPU, of a victim that is not
    ``deep``, where oneDNN's fixed cost per call outweighs the image's arithmetic.  Measured on a
    2-core AMD EPYC (``benchmarks/attack_speed.py --only onednn``, three runs): such attacks take x0.61-1.01 of
    their time with oneDNN; 8 batched starts of LeNet take x1.09-1.14 and ResNet-20 x1.33-1.42 without it, so
    those keep it.  float64 has no oneDNN convolutions."""
    victim = obs.victim
    return (x0.shape[0] * x0.shape[1] == 1 and victim.dtype == torch.float32 and victim.device.type == "cpu"
            and not victim.deep)


def prune_points(R: int) -> list[float]:
    """The fractions of the budget at which successive halving prunes R starts: 1/2^n, ..., 1/4, 1/2 with
    n = ceil(log2 R), each keeping the better half (rounded up) of the starts still running, so one start is left
    for the last half.  R = 8 runs 8 starts for the first eighth, 4 to a quarter, 2 to a half and 1 to the end:
    2.5 starts' worth of steps."""
    n = math.ceil(math.log2(R)) if R > 1 else 0
    return [0.5 ** k for k in range(n, 0, -1)]


def _prune(runs: list, rows: list, keep: list, step: int, fraction: float) -> list:
    """The positions in ``keep`` (of rows still running) that survive a halving at ``step``: the better half by
    lowest L_R so far (rounded up), a start that has not gone below its own start value behind every one that has
    (its lowest is its start's, which says nothing of how its search goes: with Adam, a start whose first steps
    rose kept its low start value and outranked starts that had halved theirs); the others stop with stop reason
    ``pruned``."""
    order = sorted(keep, key=lambda i: (runs[rows[i]].best_step == 0, runs[rows[i]].best_loss))
    survivors = order[:(len(order) + 1) // 2]
    for i in order[len(survivors):]:
        run = runs[rows[i]]
        run.stop = "pruned"
        run.message = (f"pruned at step {step} ({fraction:g} of the budget): its lowest "
                       f"{run.problem.fit_name}, {run.best_loss:.3e}, "
                       f"was in the higher half of the {len(order)} starts still running")
    return sorted(survivors)


def _warn_history_memory(opt, z: torch.Tensor) -> None:
    """Warn where L-BFGS's history of the starts' rows ``z`` (R, n) would not fit in the memory available: a run
    killed for memory part way says nothing, this says why first (Adam keeps two copies of the rows)."""
    history = getattr(opt, "history", None)
    if not isinstance(history, int):
        return
    need = 2 * history * z.numel() * z.element_size()  # (s, y) pairs of every start's row
    have = available_bytes(z.device)
    if need > have:
        dt = str(z.dtype).replace("torch.", "")
        warnings.warn(f"L-BFGS keeps its last {history} steps for each of {z.shape[0]} start(s) of {z.shape[1]:,} "
                      f"unknowns, {size_text(need)} in {dt}, more than the {size_text(have)} of memory available: "
                      f"the run may be stopped for memory (--optimizer adam keeps two copies, "
                      f"{size_text(2 * z.numel() * z.element_size())}; fewer --restarts, a smaller --batch-size or "
                      f"--image-size need less)", SettingWarning, stacklevel=3)


class _Problem:
    """The attack's objective over rows z = (flattened dummy data, soft-label logits for dlg), one per start.

    With a re-parametrising prior the data part of a row is the prior's parameters
    (a generator's weights for ``dip``) and the dummy data are its images.
    """

    def __init__(self, attack: GradientMatching, obs: Observation, x0: torch.Tensor, labels: torch.Tensor | None):
        self.attack, self.obs = attack, obs
        self.R, self.shape = x0.shape[0], tuple(x0.shape[1:])
        self.labels = labels
        priors = attack.build_priors(obs)
        self.penalties = [p for p in priors if not hasattr(p, "parametrise")]
        #: the penalties' prior names; until the first evaluation has checked what each returns, ``unchecked``
        self.penalty_names = [n for n, p in zip(attack.priors, priors, strict=True) if not hasattr(p, "parametrise")]
        self.unchecked = bool(self.penalties)
        #: a prior whose value was NaN or infinite at the latest evaluation at finite images (None where every
        #: prior's was finite): a search that stopped there stopped on it
        self.prior_not_finite: str | None = None
        remaps = [p for p in priors if hasattr(p, "parametrise")]
        if len(remaps) > 1:
            raise UserError("at most one re-parametrising prior can run at a time")
        self.remap = remaps[0].parametrise(self.shape, self.R, attack.init_seed, x0.device, x0.dtype) \
            if remaps else None
        #: whether the box [0, 1] applies to the rows' data part (not to a generator's weights)
        self.clamp = self.remap is None or self.remap.clamp
        z = x0.detach().reshape(self.R, -1) if self.remap is None else self.remap.z0.detach()
        self.nx = z.shape[1]  #: length of a row's data part (dummy data or the prior's parameters)
        if labels is None:  # DLG: soft labels, the same seeded start for every restart
            logits = torch.randn(self.shape[0], obs.victim.num_classes, generator=torch_generator(0)).to(x0)
            z = torch.cat([z, logits.reshape(1, -1).expand(self.R, -1)], 1)
        self.z0 = z.contiguous()
        self.y = obs.y.detach().flatten()
        #: the cosine objective's message at unit length, scaled once rather than at every evaluation
        self.y_unit = unit(self.y) if attack.objective == "cosine" else None
        #: how messages name the matching term the starts are ranked and stopped by
        self.fit_name = "cosine distance" if self.y_unit is not None else "L_R"
        scale = float(self.y.pow(2).sum()) if attack.objective == "l2" else 1.0
        self.scale = scale if scale > 0 else 1.0
        # L-BFGS sees L_R / ||y||^2 times a constant: torch's L-BFGS rule keeps a curvature pair
        # only when s^T y > 1e-10 (absolute), so the raw scale of the message must not decide
        # whether it learns curvature.  gd keeps the paper's step on L_R itself.
        normalised = attack.objective == "l2" and sees_normalised_loss(attack.optimizer)
        self.weight = LOSS_UNIT / self.scale if normalised else 1.0
        self.batched = getattr(obs.forward, "restarts", None)
        #: the threads and oneDNN setting one start alone runs on (optimise's rule for R = 1), for the points one by
        #: one: there they round as that start's run alone does
        self.alone = (attack.threads or obs.victim.threads_for(x0.shape[1]), not own_convolutions(obs, x0[:1]))
        self.checks = 0  #: batched evaluations compared with the points one by one so far (two are)
        #: how several starts are evaluated: ``batched``, or ``one by one`` and why (None for one start)
        self.path = None if self.R == 1 else "batched" if self.batched is not None else "one by one"
        #: the ReLU surrogate's width at the start, and now (0: exact); only where the victim has nn.ReLU modules
        self.surrogate = attack.surrogate if relu_modules(obs.victim.model) else 0.0
        self.tau = self.surrogate

    def rise_hint(self) -> str:
        """What may have made the matching term end above its start: the terms the objective adds to it (whose
        pull the steps follow as much as the match's), else a step size too large."""
        terms = self.attack.added_terms
        if not terms:
            return "step size too large?"
        return f"the objective also holds {' and '.join(terms)}, which may outweigh it, or the step size is too large"

    def images(self, Z: torch.Tensor) -> torch.Tensor:
        """The dummy data (k, *shape) of the rows Z (k, n), differentiable in Z."""
        if self.remap is None:
            return Z[:, : self.nx].view(Z.shape[0], *self.shape)
        return self.remap.x_of(Z[:, : self.nx])

    def x_of(self, z: torch.Tensor) -> torch.Tensor:
        return self.images(z.unsqueeze(0))[0]

    def logits_of(self, z: torch.Tensor) -> torch.Tensor | None:
        return None if self.labels is not None else z[self.nx:].view(self.shape[0], -1)

    def evaluate(self, rows: list, Z: torch.Tensor) -> tuple[list, torch.Tensor, list]:
        """(objective, gradient, L_R) at the k points Z (k, n) of the starts ``rows``.

        Several points go through the observation's batched model of the client when
        it has one; its first two answers are checked against point-by-point evaluation
        (the batched derivatives come from per-layer products or torch.func), and a
        disagreement (:func:`_agree`) sends every later evaluation point by point, as
        does a second batched evaluation that took more than :data:`SLOWER` times as long
        as the points one by one (the weight-space work, R rows of d numbers, does not
        shrink by batching, and torch.func's path can cost more than R single passes).
        The first is not timed: it holds the batch's one-off costs.  The checked evaluations return the point-by-point
        values, so starts that go on one by one take exactly the steps each would take alone.
        """
        if Z.shape[0] == 1 or self.batched is None:
            return self._one_by_one(Z)
        started = time.perf_counter()
        out = self._evaluate(Z, batched=True)
        if self.checks < 2:
            self.checks += 1
            middle = time.perf_counter()
            reference = self._one_by_one(Z)
            ratio = (middle - started) / max(time.perf_counter() - middle, 1e-9)
            why = ("disagreed with them" if not _agree(out[1], reference[1]) else
                   f"took {ratio:.2f} times as long as they did" if self.checks == 2 and ratio > SLOWER else None)
            if why:
                self.batched, self.path = None, f"one by one: the batched pass {why}"
            return reference  # the steps go on from the values a start alone would have had
        return out

    def _one_by_one(self, Z: torch.Tensor) -> tuple[list, torch.Tensor, list]:
        """The rows Z one at a time, on the threads and oneDNN setting of one start alone (:attr:`alone`)."""
        threads, dnn = self.alone
        if self.R == 1 or (threads == torch.get_num_threads() and dnn == torch._C._get_mkldnn_enabled()):
            return self._evaluate(Z, batched=False)
        with torch_threads(threads), onednn(dnn):
            return self._evaluate(Z, batched=False)

    def _evaluate(self, Z: torch.Tensor, batched: bool) -> tuple[list, torch.Tensor, list]:
        """(objective, gradient, L_R) of the rows Z; with the ReLU surrogate on, the objective and its gradient are
        the surrogate's and L_R comes from a second, exact pass without second derivatives (a step then costs about
        1.4 times as much: docs/ig_recipe.md#relus-jumps-and-the-surrogate)."""
        if not batched and Z.shape[0] > 1:  # one graph per point: smaller than one graph for all
            parts = [self._evaluate(z.unsqueeze(0), batched=False) for z in Z]
            return ([p[0][0] for p in parts], torch.cat([p[1] for p in parts]), [p[2][0] for p in parts])
        if not self.tau > 0:
            return self._objective(Z, batched)
        with relu_surrogate(self.obs.victim.model, self.tau):
            values, grad, _ = self._objective(Z, batched)
        return values, grad, self._fits(Z, batched)

    def _fits(self, Z: torch.Tensor, batched: bool) -> list:
        """The exact L_R at the rows Z (its derivative in Z not formed)."""
        k = Z.shape[0]
        pred = self._messages(self.images(Z.detach()), self._labels(Z.detach(), k), batched)
        return self._fit(pred.detach(), batched).tolist()

    def _messages(self, xs: torch.Tensor, labels: torch.Tensor, batched: bool) -> torch.Tensor:
        """(k, b): the attacker model's messages of the k inputs xs, in one batched pass or (k = 1) the plain one."""
        if batched:
            assert self.batched is not None  # evaluate() batches only when the forward has a restarts twin
            return self.batched(xs, labels).flatten(1)
        return self.obs.forward(xs[0], labels[0]).flatten().unsqueeze(0)

    def _labels(self, Z: torch.Tensor, k: int) -> torch.Tensor:
        if self.labels is None:
            return F.softmax(Z[:, self.nx:].view(k, self.shape[0], -1), dim=-1)
        return self.labels.expand(k, *self.labels.shape)

    def _fit(self, pred: torch.Tensor, batched: bool) -> torch.Tensor:
        if self.y_unit is not None:
            return distance_to_unit(pred, self.y_unit)
        if batched:
            return match_rows(pred, self.y, "l2")
        return match_loss(pred[0], self.y, "l2").unsqueeze(0)

    def _objective(self, Z: torch.Tensor, batched: bool) -> tuple[list, torch.Tensor, list]:
        k = Z.shape[0]
        Z = Z.detach().requires_grad_(True)
        xs = self.images(Z)
        fit = self._fit(self._messages(xs, self._labels(Z, k), batched), batched)
        total = self.weight * fit
        terms = []
        for name, prior in zip(self.penalty_names, self.penalties, strict=True):
            values = [prior(x) for x in xs]
            if self.unchecked:  # once: what a registered prior returns is the same kind of thing at every step
                _check_penalty(name, values[0])
            terms.append(torch.stack(values))
            total = total + terms[-1]
        self.unchecked = False
        losses = total.detach().tolist()
        # at images that are finite, the first prior whose value is not (a NaN image makes every term NaN, whichever
        # turned first: the flag keeps what the last finite images said); a finite total has only finite terms, so
        # the priors are looked into only where a total is not
        if self.penalties and bool(torch.isfinite(xs.detach()).all()):
            self.prior_not_finite = None if all(map(math.isfinite, losses)) else next(
                (name for name, t in zip(self.penalty_names, terms) if not bool(torch.isfinite(t.detach()).all())),
                None)
        grad, = torch.autograd.grad(total.sum(), Z)
        return losses, grad, fit.detach().tolist()


def _check_penalty(name: str, value) -> None:
    """Refuse, in one sentence, a penalty prior's value that is not a scalar tensor (a shape and type comparison)."""
    if not isinstance(value, torch.Tensor):
        raise UserError(f"the prior named '{name}' returned {a_type(value)}, not a scalar tensor (its "
                        f"weighted penalty of the batch x)")
    if value.ndim != 0:
        raise UserError(f"the prior named '{name}' returned a tensor of shape {tuple(value.shape)}, not a scalar "
                        f"tensor (its weighted penalty of the batch x)")
    if not value.is_floating_point():
        raise UserError(f"the prior named '{name}' returned a tensor of {str(value.dtype).replace('torch.', '')}, not "
                        "a floating-point scalar (a penalty has a gradient in x)")
    if not bool(torch.isfinite(value)):  # once, at the start: one sync
        raise UserError(f"the prior named '{name}' returned {float(value.detach())} at the attack's start: a "
                        "penalty is a finite number")


#: glibc's mallopt parameters (malloc.h): the most blocks served by mmap, and the free heap top kept unreturned
_M_MMAP_MAX, _M_TRIM_THRESHOLD = -4, -1
_kept = False


def keep_freed_memory() -> None:
    """Ask glibc (once per process) to keep freed memory for reuse instead of returning it to the system.

    Every evaluation of a deep victim allocates and frees blocks of d numbers (the
    flat gradient, the sketch's buffers, R x d rows with restarts: 45 MB to 360 MB
    for resnet18).  glibc serves blocks above 32 MB by mmap and unmaps them when
    freed, so every step page-faults them in again, as system time
    (benchmarks/deep_step.py prints a step's).  Served from the heap and kept there,
    they are reused; the process then holds its peak memory until it exits.  A no-op
    off glibc.
    """
    global _kept
    if _kept or not sys.platform.startswith("linux"):
        return
    _kept = True
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt(_M_MMAP_MAX, 0)
        libc.mallopt(_M_TRIM_THRESHOLD, 2 ** 31 - 1)
    except (OSError, AttributeError):  # another C library (musl has no mallopt)
        pass


#: how far (relative to its norm) one start's gradient may move between the batched pass and its own when a ReLU
#: unit's input lies within round-off of zero and the two passes gate it differently: up to 4.9e-3 measured in
#: float32 at 16 Gaussian starts each of ResNet-18 and ResNet-20 (2 and 1 of them beyond 1e-4; the others within
#: 6e-6), with a tenfold margin (scripts/restart_agreement.py)
KINK = 5e-2


def row_errors(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """|a_i - b_i| / |b_i| for every row i of two gradients (k, n) of the same points (inf where b_i = 0 != a_i)."""
    err, norm = (a - b).norm(dim=1), b.norm(dim=1)
    return torch.where(err == 0, torch.zeros_like(err), err / norm)


def _agree(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two gradients (k, n) of the same points agree: every row within :data:`KINK` of its reference and at
    least half of the rows to round-off (:func:`row_errors`).  A unit gated differently by round-off moves the rows
    it touches; a wrong batched derivative misses on every row."""
    tol = 1e-9 if a.dtype == torch.float64 else 1e-4
    err = row_errors(a, b)
    return bool((err <= KINK).all()) and 2 * int((err <= tol).sum()) >= len(err)


#: the reasons :func:`_no_descent` gives, as the stop message carries them
NO_DESCENT = ("L-BFGS found no descent direction", "L-BFGS's line search found no lower point along its direction")


def _no_descent(opt, row: int) -> str | None:
    """Why the optimiser ``opt`` cannot move start ``row`` any more (an L-BFGS's ``stalled`` and ``stuck``), or
    None."""
    if row in getattr(opt, "stalled", ()):
        return NO_DESCENT[0]
    if row in getattr(opt, "stuck", ()):
        return (f"{NO_DESCENT[1]} twice at one step size (it keeps no new curvature pair, so every later step "
                "repeats it)")
    return None


def _warn_kink(result: AttackResult, budget: int, victim) -> None:
    """One warning where the run returned a start that L-BFGS stopped before its ``budget`` for want of descent
    (:data:`NO_DESCENT`; Gauss-Newton steps that converged after it leave ``tolerance``), on a victim with units
    whose derivative jumps (ReLU, max pooling): there L-BFGS's curvature pairs mislead it, and signed Adam (the
    ``ig`` recipe's optimiser) steps through such kinks.  On batches of four digits behind a ReLU Adam did better
    through SRHT (SSIM 0.92 against 0.77 at b/(m B) = 3) and worse unsketched (30.2 against 54.5 dB):
    docs/attack.md#the-phase-transition-per-attack-family, so the warning proposes a second run, not a switch."""
    if result.stop_reason != "stalled" or result.iterations >= budget or \
            not any(reason in (result.message or "") for reason in NO_DESCENT):
        return
    units = targets.victim_units(victim)  # as --recipe auto finds them
    if units:
        warnings.warn(f"L-BFGS stopped at step {result.iterations} of {budget} with no descent left, on a victim "
                      f"whose {', '.join(sorted(units))} units' derivative jumps; signed Adam steps through such "
                      "kinks and is worth a second run (--recipe ig, or --optimizer adam --signed)", SettingWarning,
                      stacklevel=4)  # the caller of reconstruct, past base's observation check


def _boxed_start(problem: "_Problem", rows: list, Z: torch.Tensor) -> tuple[torch.Tensor, list] | None:
    """(the starts clamped to the box [0, 1], their fits) where a start lies outside it; None where none does."""
    data = Z[:, :problem.nx]
    if not bool(((data < 0) | (data > 1)).any()):
        return None
    boxed = Z.clone()
    boxed[:, :problem.nx].clamp_(0, 1)
    return boxed, problem.evaluate(rows, boxed)[2]


class _Run:
    """One start's record: losses, best iterate, trace and why it stopped."""

    def __init__(self, problem: _Problem, r: int):
        self.problem = problem
        self.x0 = problem.x_of(problem.z0[r]).clone()
        self.losses: list[float] = []
        self.lowest: list[float] = []  #: the lowest L_R up to each step
        self.extra: list[dict] = []
        self.best_z, self.best_loss, self.best_step = problem.z0[r].clone(), math.inf, 0
        self.stop: str | None = None
        self.message, self.steps = "", 0

    def record(self, step: int, z: torch.Tensor, loss: float, finite: bool) -> None:
        self.losses.append(loss)
        self.steps = step
        if not math.isfinite(loss) or not finite:
            self.stop = "diverged"
            self.message = (f"the attack diverged at step {step} ({self.problem.fit_name} = {loss}); "
                            f"returning the best iterate, from step {self.best_step}")
            self.lowest.append(self.lowest[-1] if self.lowest else math.inf)
            return
        if loss < self.best_loss:
            self.best_z, self.best_loss, self.best_step = z.detach().clone(), loss, step
        self.lowest.append(self.best_loss)

    def check(self, step: int, iterations: int, tol: float, scale: float, window: int, gain: float,
              no_descent: str | None, time_limit: float | None = None, since: int = 0,
              interrupted: bool = False) -> None:
        """Whether the start stops at ``step``; ``no_descent``: why the optimiser cannot move it (None: it can);
        ``time_limit``: the budget in seconds, given once it has run out;
        ``since``: the step from which the stall window may start (the step schedule's last decay);
        ``interrupted``: Ctrl-C asked the attack to stop (:func:`.base.stop_on_interrupt`)."""
        loss = self.losses[-1]
        if loss / scale <= tol:
            self.stop = "tolerance"
            fit = "the cosine distance" if self.problem.y_unit is not None else "L_R/||y||^2"
            self.message = f"converged at step {step}: {fit} = {loss / scale:.2e} <= tol"
        elif no_descent:
            self.stop = "stalled"
            self.message = f"stopped at step {step}: {no_descent}"
        elif window and step >= window + since and self.lowest[step] > (1 - gain) * self.lowest[step - window]:
            self.stop = "stalled"
            self.message = (f"stopped at step {step}: the lowest {self.problem.fit_name} fell by less than {gain:.0%} "
                            f"over the last {window} steps")
        elif step == iterations:
            self.stop = "iterations"
            if self.losses[-1] > self.losses[0] * (1 + STILL_RTOL):
                # saturation: no non-finite value, but the objective ended above where it started (by more than the
                # wander of a search whose steps barely move it, rebuilt.STILL_RTOL)
                self.message = (f"the matching term rose from {self.losses[0]:.3e} to {self.losses[-1]:.3e} "
                                f"({self.problem.rise_hint()}); returning the best iterate, from step {self.best_step}")
        elif time_limit is not None:
            self.stop = "time-limit"
            self.message = (f"stopped at step {step}: the time limit of {time_limit:g} s was reached; "
                            f"returning the best iterate, from step {self.best_step}")
        elif interrupted:
            self.stop = "interrupted"
            self.message = (f"interrupted at step {step} (Ctrl-C); returning the best iterate, from step "
                            f"{self.best_step}")

    def result(self, wall_s: float) -> AttackResult:
        p = self.problem
        logits = p.logits_of(self.best_z)
        message = self.message
        # a search that stopped (diverged, or no step went on) where a prior's value was not finite stopped on it; one
        # that went on past such a point (a line search's trial it backed away from) did not
        stopped_on = p.prior_not_finite if self.stop in ("diverged", "stalled") else None
        if stopped_on is not None:  # at finite images, a prior's value was not finite
            message = "; ".join(t for t in (message, f"the {stopped_on} prior's value was NaN or infinite where the "
                                            "search stopped, and the steps could not go on from there") if t)
        return AttackResult(
            x=p.x_of(self.best_z).clone(), labels=p.labels if logits is None else logits.argmax(-1), x0=self.x0,
            losses=self.losses, extra=self.extra, iterations=self.steps, best_step=self.best_step,
            stop_reason=self.stop or "iterations", message=message, wall_s=wall_s, restart_path=p.path,
            prior_not_finite=stopped_on,
        )


def match_rows(pred: torch.Tensor, y: torch.Tensor, objective: str) -> torch.Tensor:
    """:func:`match_loss` of every row of ``pred`` (k, b) against y: a vector of k losses."""
    if objective == "l2":
        return (pred - y).pow(2).sum(-1)
    return cosine_distance(pred.flatten(1), y.flatten())


def _progress(total: int, enabled: bool, label: str = "attack"):
    """The attack's bar, or None when none is drawn (not asked for, or stderr is not a terminal)."""
    return progress_bar(total, label, "it", leave=False) if show_progress(enabled) else None


__all__ = ["GradientMatching", "match_loss", "init_dummy", "OBJECTIVES", "LABEL_MODES", "DUMMY_INITS", "LOSS_UNIT",
           "SCHEDULES", "STEP_MILESTONES", "STALL_WINDOW", "STALL_GAIN", "match_rows", "REFINES"]
