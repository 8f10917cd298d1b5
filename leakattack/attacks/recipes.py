"""Attack recipes: the settings gradient matching uses unless the user names others.

A recipe fills every attacker setting the user leaves unset (``None``): the
optimiser, its budget, the objective, the step-size schedule, signed steps, the
TV weight, the box and the working precision.  Each victim takes the recipe it is
registered with or its class names, else one by its units (``targets.recipe_of``:
``ig`` where a unit's derivative jumps, ReLU or max pooling, ``dlg`` where all are
smooth); ``--recipe`` picks one for any victim.

``dlg``  L-BFGS with a strong-Wolfe line search on the squared distance L_R, in
         float64 (Zhu et al., "Deep Leakage from Gradients", 2019; Song et al.
         2023, Sec. 7): the strongest measured choice for smooth victims on a CPU
         (LeNet, MLP, logistic/linear regression, and the 32 px ViT ``vit_small``, whose GELU,
         softmax attention and LayerNorm are smooth: docs/victims.md measures both recipes on it),
         and the one-hidden-layer MLP with ReLU too (digits 0-2: 36.8 dB, and two to round-off, where
         ``ig`` stops at 35-39 dB: docs/victims.md#your-own-model-the-recipe-by-its-units).
``ig``   Inverting Gradients (Geiping et al., 2020; breaching 0.1.2's ``invertinggradients``):
         cosine objective over the whole message, Adam on the sign of the gradient with step
         0.025 (breaching's 0.1 acts on images normalised by the CIFAR std of about 0.25, so
         0.1 * 0.25 on images in [0, 1]) decayed by 10x at 3/8, 5/8 and 7/8 of the budget, total
         variation, the box [0, 1], float32: the recipe for deep ReLU/BatchNorm networks (the ResNets,
         where L-BFGS in float64 costs seconds per step and stalls), torchvision's ViT-Base, and
         small convolutional networks with ReLU or max pooling, where L-BFGS stalls within about
         550 steps (docs/victims.md#your-own-model-the-recipe-by-its-units).
         The TV weight is the one measured best on a small BatchNorm ResNet (examples/ig_recipe.toml,
         docs/ig_recipe.md); breaching's 0.2 on normalised images is 0.2 / 0.25 = 0.8 here, which flattens the image of
         a victim fed [0, 1] pixels.  For a batch that BatchNorm normalises by its own statistics
         (``--bn auto``) the weight is 0.2 from four examples and 0.8 from eight: on batches of 4 and 8 photos of
         a trained ResNet-20 0.2 gained 1.3-1.9 dB over 0.02, where a batch of two lost 0.2 dB and 0.22 SSIM, and
         at 8 0.8 beat 0.2 in every pair measured (docs/trained-victims.md#the-tv-weight-of-a-batch).
         For one image at weights the user loaded (``--weights``: a trained victim) the weight is 0.2: on
         14 of the 15 photos of five trained ResNets measured it scored 0.3-5.0 dB above 0.02 (2.6 dB below on
         the fifteenth; 1.5 dB above on average) and rebuilt 7 where 0.02 rebuilt 5
         (docs/trained-victims.md#the-tv-weight-of-a-trained-victim).
         The budget is breaching's 24,000 steps or 8 minutes,
         whichever comes first, with the schedule's decays fitted to the steps that fit in the time
         (on a 2-core CPU 12,700-13,400 steps of a ResNet-20 on one thread beside another run, and
         2,000-2,900 of a ResNet-18 on both cores); a plateau stops a run only after the last decay.
         One image in BatchNorm's train mode (``--bn train``) is normalised by its own statistics
         and is not rebuilt; ``--bn auto`` is eval mode for one image (running statistics,
         breaching's setting).  docs/ig_recipe.md has the derivation and the measurements.

A GPU runs each recipe in its own precision: in float32 the ``dlg`` recipe's L-BFGS stalls far from the
image (docs/attack.md#why-float64-by-default).
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from dataclasses import dataclass

import defenses

from ..errors import UserError, listed
from ..rebuilt import message_unreadable
from ..registry import Registry
from .base import channel_words
from .priors import parse_prior


@dataclass(frozen=True)
class Recipe:
    """Attacker settings; ``iterations`` is the budget when the user gives none."""

    optimizer: str
    iterations: int
    objective: str
    schedule: str
    signed: bool
    tv: float
    box: bool
    dtype: str
    lr: float | None = None  #: the step size for ``optimizer`` (None: the optimiser's default)
    #: seconds: with neither ``--iterations`` nor ``--time-limit`` given, the attack also stops at this time limit
    #: (the step schedule fitted to the steps that fit in it); None: the iteration budget alone
    time_limit: float | None = None
    #: width of the ReLU surrogate at the start (0: exact ReLU derivatives; leakattack.attacks.surrogate)
    surrogate: float = 0.0
    #: the TV weights of batches that the victim's BatchNorm normalises by their own statistics (train mode: a batch
    #: under ``--bn auto``): (smallest batch size, weight) pairs in ascending order, a batch taking the weight of the
    #: last pair its size reaches; empty: ``tv`` there too
    batch_statistics_tv: tuple[tuple[int, float], ...] = ()
    #: the TV weight of one example at weights the user loaded (``--weights``: a trained victim); None: ``tv`` there
    #: too
    trained_tv: float | None = None

    def tv_for(self, batch_size: int, batch_statistics: bool, trained: bool = False) -> float:
        """Its TV weight for a batch of ``batch_size`` examples, which the victim's BatchNorm normalises by their own
        statistics (``batch_statistics``) or not, at weights the user loaded (``trained``) or not."""
        if trained and batch_size == 1 and self.trained_tv is not None:
            return self.trained_tv
        tv = self.tv
        for smallest, weight in self.batch_statistics_tv if batch_statistics else ():
            if batch_size >= smallest:
                tv = weight
        return tv

    def step_size(self, optimizer: str) -> float:
        """Its step when its own optimiser runs, else ``optimizer``'s default."""
        from .optimizers import DEFAULT_LR

        return self.lr if self.lr is not None and self.optimizer == optimizer else DEFAULT_LR[optimizer]


#: ig's step on images in [0, 1]: breaching's 0.1 on images divided by the CIFAR-10 std (0.247, 0.243, 0.262)
IG_LR = 0.025
#: ig's TV weight (mean |dx| + mean |dy| on [0, 1] images), measured: examples/ig_recipe.toml
IG_TV = 0.02
#: ig's TV weights for batches that BatchNorm normalises by their own statistics (--bn auto): 0.2 from four
#: examples, 0.8 from eight, measured on batches of the trained ResNet-20:
#: docs/trained-victims.md#the-tv-weight-of-a-batch
IG_BATCH_STATISTICS_TV = ((4, 0.2), (8, 0.8))
#: ig's TV weight for one image at weights the user loaded (a trained victim): ten times IG_TV, measured on five
#: trained ResNets: docs/trained-victims.md#the-tv-weight-of-a-trained-victim
TRAINED_TV = 0.2
#: ig's budget: breaching's 24,000 steps (``max_iterations``), or as many as fit in IG_TIME_LIMIT seconds, whichever
#: is fewer (docs/ig_recipe.md#the-budget)
IG_ITERATIONS = 24000
IG_TIME_LIMIT = 480.0

_RECIPES = Registry("attack recipe")
_RECIPES.register("dlg", Recipe(optimizer="lbfgs", iterations=6000, objective="l2", schedule="none", signed=False,
                                tv=0.0, box=False, dtype="float64"),
                  help="L-BFGS on L_R in float64 (small smooth victims)")
_RECIPES.register("ig", Recipe(optimizer="adam", iterations=IG_ITERATIONS, objective="cosine", schedule="step",
                               signed=True, tv=IG_TV, box=True, dtype="float32", lr=IG_LR,
                               time_limit=IG_TIME_LIMIT, batch_statistics_tv=IG_BATCH_STATISTICS_TV,
                               trained_tv=TRAINED_TV),
                  help="Inverting Gradients: cosine, signed Adam with step decay, TV, box, float32 (deep networks); "
                       f"{IG_ITERATIONS:,} steps or {IG_TIME_LIMIT / 60:g} minutes")

#: the settings a recipe fills (the run parameters of the same names)
RECIPE_FIELDS = ("optimizer", "iterations", "objective", "schedule", "signed", "tv", "box", "dtype", "surrogate")


def recipe_options(name: str, batch_size: int = 1, victim=None, trained: bool = False) -> dict:
    """The keyword arguments of ``GradientMatching`` that run recipe ``name`` as ``--recipe name`` does on a batch of
    ``batch_size`` examples sent by ``victim`` (a ``targets.Victim``: whether its BatchNorm normalises by the batch's
    statistics picks the TV weight, :meth:`Recipe.tv_for`; None: not), at weights loaded from a file as ``--weights``
    loads them (``trained``: a trained victim, whose one image takes :attr:`Recipe.trained_tv`) or not.  Its precision
    is the victim's:
    ``victim.to(dtype=getattr(torch, get_recipe(name).dtype))``; a victim's own recipe is
    ``targets.victim_recipe(victim)``."""
    r = get_recipe(name)
    if isinstance(batch_size, bool) or not isinstance(batch_size, numbers.Integral) or batch_size < 1:
        raise UserError(f"batch_size must be an integer of at least 1 (the examples in the message), got "
                        f"{type(batch_size).__name__} {batch_size!r}")
    if victim is not None and not hasattr(victim, "batch_statistics"):
        raise UserError(f"victim must be the targets.Victim the message comes from, or None, got "
                        f"{type(victim).__name__} {victim!r:.60}")
    if not isinstance(trained, bool):
        raise UserError(f"trained must be True or False (whether the victim's weights were loaded, as --weights "
                        f"loads them), got {type(trained).__name__} {trained!r:.60}")
    tv = r.tv_for(int(batch_size), victim is not None and victim.batch_statistics, trained)
    return {"optimizer": r.optimizer, "iterations": r.iterations, "objective": r.objective,
            "lr": r.step_size(r.optimizer), "schedule": r.schedule, "signed": r.signed,
            "priors": {"tv": tv}, "box": r.box, "time_limit": r.time_limit, "surrogate": r.surrogate}


def model_recipe(model: str, name: str) -> str:
    """``name``, the recipe model ``model`` takes (a class's ``leakattack_recipe`` among them), where it is a
    registered recipe; else the one sentence that refuses the model."""
    if name not in list_recipes():
        raise UserError(f"model '{model}' names the attack recipe {name!r}; choose one of: "
                        f"{', '.join(list_recipes())}")
    return name


def list_recipes() -> list[str]:
    """Names accepted by :func:`get_recipe`."""
    return _RECIPES.names()


def get_recipe(name: str) -> Recipe:
    """The recipe registered as ``name``."""
    return _RECIPES.get(name)


def recipe_help(name: str) -> str:
    """One line saying what the recipe does."""
    return _RECIPES.meta(name).get("help", "")


#: the note under a ``dlg`` run on a batch whose search stopped short: on batches of photos ``ig`` searched further
OTHER_RECIPE_NOTE = ("on a batch, --recipe ig (signed Adam on the cosine distance, with TV) is a different search, "
                     "which rebuilt more of LeNet's batches of 4 and 8 photos than dlg did "
                     "(docs/victims.md#which-recipe-on-a-batch)")

#: the heavier TV weight to try on one image at loaded weights, where the recipe's :data:`TRAINED_TV` stopped short
HEAVY_TV = 0.8

#: the note under an ig run of one image at loaded weights whose search stopped short at the recipe's TV weight
TRAINED_TV_NOTE = (f"at trained weights --tv {HEAVY_TV} rebuilt a photo that the recipe's {TRAINED_TV} did not on "
                   "four of the five trained ResNets measured, at a lower mean PSNR on three of them "
                   "(docs/trained-victims.md#the-tv-weight-of-a-trained-victim)")

#: the note under a run of one image through BatchNorm in train mode whose search stopped short: no setting of the
#: recipe's grid rebuilt such an image (docs/ig_recipe.md), so no TV weight or budget is named
TRAIN_MODE_NOTE = ("one image through BatchNorm in train mode is normalised by its own statistics, and no setting of "
                   "the ig recipe's grid rebuilt a photo through ResNet-18 so (docs/ig_recipe.md): no step count or TV "
                   "weight is named here; --bn auto (eval for one image) normalises by the running statistics the "
                   "server holds, as the field's single-image case does")


#: a message whose noise (``noise_share`` of its metrics.json, :func:`leakattack.observation.noise_share`) is at least
#: this share of the rest is one where an attack without an image prior can fit the noise: the run warns
#: (:func:`leakattack.experiment.noisy_message_note`) and, not rebuilt, names :data:`NOISY_RECIPE_NOTE`.  Where L_R
#: alone (the dlg recipe) falls behind the ig recipe's cosine, TV and box depends on the image and the sketch: on digits
#: through srht b/d = 0.5 and unsketched it was ahead at shares of 1.5-5 %, 2.8-5.4 dB behind at 13 % and 4.4-11.3 dB
#: behind at 15-38 % (``results/sweeps/defense_sweep``); on photo 0 (lenet, srht b/d = 0.5, a clip of 1 the attacker
#: knows, noise after the sketch) 7.4 dB behind at 2.7 % and 11.7 dB behind at 8.9 % (docs/defenses.md)
NOISY_SHARE = 0.02

#: what the measurements behind :data:`NOISY_SHARE` say, in the warning before such an attack and in the note after it
NOISY_EVIDENCE = ("L_R alone gave 11.7 and 6.5 dB on photo 0 with noise 2.7 and 8.9 % of the message where "
                  "--recipe ig (cosine, TV, box) rebuilt 19.1 and 18.2 dB, and 4.9-14.8 dB on digits with 15-38 % "
                  "where it rebuilt 16.0-19.8 dB (L_R alone was ahead on digits up to 5 %; "
                  "docs/defenses.md#noise-and-the-attacks-prior)")

#: the next setting of a run not rebuilt whose message is noisy (:data:`NOISY_SHARE`) and whose attack has no image
#: prior
NOISY_RECIPE_NOTE = ("the message is noisy and this attack has no image prior, so it can fit the noise: "
                     + NOISY_EVIDENCE)


#: the :data:`NOISY_SHARE` of a message whose estimate counts a stochastic rounding's error (``noise_share_of`` names
#: rounding: :func:`leakattack.observation.rounding_error_bound`, which overstates the truth by 1.1-1.25 times from 4
#: bits on).  LeNet, srht b/d = 0.5, ``--defense quantize:bits=K``, photos 0-2 (docs/defenses.md): L_R alone (the dlg
#: recipe) was behind the ig recipe at its default budget by 10.4-14.2 dB at 4 bits (estimate 24-27 %), 7.9-14.0 dB at
#: 6 bits (5.6-6.4 %) and 3.7-9.8 dB at 7 bits (2.8-3.2 %); at 8 bits (1.4-1.6 %) 5.1 dB behind on photo 1 and within
#: 0.6 dB on photos 0 and 2; at 10 bits (0.3 %) it rebuilt 28.7-29.6 dB
ROUNDING_SHARE = 0.01

#: what the measurements behind :data:`ROUNDING_SHARE` say, in the warning before such an attack and the note after it
ROUNDING_EVIDENCE = ("on photos 0-2 through srht b/d = 0.5 L_R alone gave 8.6-10.0 dB at 6 bits (a rounding error of "
                     "4.6-5.3 % of the message) where --recipe ig (cosine, TV, box) rebuilt 17.9-23.3 dB, and 18.5 "
                     "against 23.5 dB on photo 1 at 8 bits (1.3 %), while at 10 bits (0.3 %) L_R alone rebuilt "
                     "28.7-29.6 dB (docs/defenses.md#stochastic-rounding-and-the-attacks-prior)")

#: the next setting of a run not rebuilt whose message holds a stochastic rounding's error of at least
#: :data:`ROUNDING_SHARE` and whose attack has no image prior
ROUNDING_RECIPE_NOTE = ("the message is rounded stochastically and this attack has no image prior, so it can fit "
                        "the rounding's error: " + ROUNDING_EVIDENCE)


def rounded(metrics: Mapping) -> bool:
    """Whether a run's ``noise_share`` counts a stochastic rounding's error (its ``noise_share_of`` names rounding)."""
    return "rounding" in str(metrics.get("noise_share_of") or "")


def _stored(spec) -> defenses.Pipeline:
    """The pipeline of a stored defense spec (config.json's ``run.defense``), of no step for an empty one or one this
    version cannot read (a config.json written by hand or by another version: read, not trusted)."""
    if not spec:
        return defenses.Pipeline([])
    try:
        return defenses.build(spec)
    except (UserError, TypeError, ValueError):
        return defenses.Pipeline([])


def _rounds_unread(metrics: Mapping, run: Mapping) -> bool:
    """Whether a run's defense (``run``'s ``defense`` spec) rounds stochastically where the attacker cannot read the
    rounding's grid from the message (before the sketch, or followed by another step: its ``noise_share``, if any,
    does not count the rounding), on a message of finite values."""
    if rounded(metrics) or "message_nonfinite" in metrics:
        return False
    return any(step.rounds for step in _stored(run.get("defense")).steps)


def noisy_kind(metrics: Mapping, run: Mapping, derived: Mapping) -> str | None:
    """``"noise"`` or ``"rounding"`` where a run's message is noisy, None where it is not or its attack had an image
    prior (``derived`` tv above 0, a prior of ``run`` with a positive weight).  Noisy: its ``noise_share`` at least
    :data:`NOISY_SHARE`, or :data:`ROUNDING_SHARE` where it counts a stochastic rounding's error (:func:`rounded`;
    inf, or null as metrics.json records it, where the message's norm lies within the noise's own spread); else a
    rounding the attacker cannot read from the message (:func:`_rounds_unread`), whose truth, ``noise_distortion``,
    stands in after the run against :data:`ROUNDING_SHARE`.  ``metrics``, ``run`` and ``derived`` are a run's
    metrics and config.json's sections, or the same keys as a run prepares them; a config.json written by hand is
    read, not trusted."""
    if derived.get("tv") != 0:
        return None
    kind = None
    if "noise_share" in metrics:
        share, least = metrics["noise_share"], ROUNDING_SHARE if rounded(metrics) else NOISY_SHARE
        if share is None or (isinstance(share, (int, float)) and share >= least):
            kind = "rounding" if rounded(metrics) else "noise"
    if kind is None and _rounds_unread(metrics, run):
        truth = metrics.get("noise_distortion")
        if isinstance(truth, (int, float)) and truth >= ROUNDING_SHARE:
            kind = "rounding"
    if kind is None:
        return None
    try:
        return None if any(parse_prior(str(text))[1] > 0 for text in run.get("priors") or ()) else kind
    except UserError:
        return None


def noisy_without_prior(metrics: Mapping, run: Mapping, derived: Mapping) -> bool:
    """Whether :func:`noisy_kind` finds the run's message noisy and its attack without an image prior."""
    return noisy_kind(metrics, run, derived) is not None


#: the next setting of a run not rebuilt whose defense prunes, with an attacker that did not model the pruning
#: (:func:`prune_not_modelled`)
PRUNE_NOT_MODELLED_NOTE = ("the defense prunes the message and the attacker did not model the pruning: "
                           "--attacker-knows-prune zeroes the same share of its own simulated message, so that the "
                           "truth matches the message exactly; with --recipe ig it rebuilt photo 0 through srht "
                           "b/d = 0.5 at 17.1 and 13.8 dB under prune:p=0.75 and 0.9, where ig without it gave 14.0 "
                           "and 8.0 dB and the default attack 5.7 and 5.2 dB (photos 1 and 2 were rebuilt by none; "
                           "docs/defenses.md#pruning-and-the-attackers-model)")


def defense_prunes(spec, metrics: Mapping | None = None) -> bool:
    """Whether a stored defense spec (config.json's ``run.defense``) holds a pruning step that changes something.
    ``metrics`` (its metrics.json) gives the lengths of the vectors pruned, ``d`` before the sketch and ``b`` after
    it, at which a small share prunes no entry; without them a share above 0 counts."""
    return any(step.prunes for step in _changing(spec, metrics))


def _changing(spec, metrics: Mapping | None, batch_size: int | None = None) -> list:
    """The steps of a stored defense spec that change the message (:meth:`defenses.Pipeline.changing` at the lengths
    ``metrics``, its metrics.json, records: ``d`` before the sketch and ``b`` after it), with ``batch_size`` by more
    than a positive factor."""
    d, b = ((metrics or {}).get(k) for k in ("d", "b"))
    return _stored(spec).changing(d if isinstance(d, int) else None, b if isinstance(b, int) else None, batch_size)


def prune_not_modelled(run: Mapping, metrics: Mapping | None = None) -> bool:
    """Whether a run's defense (``run``: config.json's section of the settings given) prunes
    (:func:`defense_prunes`, with ``metrics``) and its attacker did not model it (``attacker_knows_prune`` not
    true)."""
    return run.get("attacker_knows_prune") is not True and defense_prunes(run.get("defense"), metrics)


def changing_steps(run: Mapping, metrics: Mapping | None = None) -> list:
    """The steps of a run's defense (``run``: config.json's section of the settings given) that change the message
    by more than a positive factor (:func:`_changing`, with its ``metrics``; a clip of the whole update, or of each
    example's gradient in a batch of one, only rescales it: :meth:`defenses.base.Transform.only_rescales`)."""
    return _changing(run.get("defense"), metrics, _batch_of(run))


def _batch_of(run: Mapping) -> int:
    """A run's batch size (config.json's ``run.batch_size``; 1 where a file written by hand or by older code holds
    none that is a whole number: read, not trusted)."""
    batch = run.get("batch_size")
    return batch if isinstance(batch, int) else 1


def changing_spec(run: Mapping, metrics: Mapping | None = None) -> str:
    """The spec of a run's defense steps that change the message (:func:`changing_steps`), "" for none."""
    return ",".join(step.spec() for step in changing_steps(run, metrics))


def inexact_words(run: Mapping, derived: Mapping, metrics: Mapping | None = None) -> str:
    """What keeps a run's message from being the exact gradient of one step at the weights, up to a positive factor,
    in words: its defense's steps that change it (:func:`changing_spec`), a protocol's own noise and several local
    steps (``derived``'s ``sketch``, the message map config.json describes); "" for none.  ``run``, ``derived``:
    config.json's sections."""
    described = derived.get("sketch") or {}
    parts = channel_words(changing_spec(run, metrics), (described.get("privacy") or {}).get("sigma"),
                          described.get("local_steps"))
    return listed(parts) if parts else ""


#: the words of :func:`closed_form_defense_note` after the settings it names: what they did where it was measured
#: (photo 0 through unsketched LeNet, one run each; docs/defenses.md)
CLOSED_FORM_DEFENSE_EVIDENCE = ("on photo 0 through unsketched LeNet, --attack rgap gave 5.5, 5.8 and 9.5 dB under "
                                "prune:p=0.5, quantize:bits=8 and gaussian:sigma=1e-3, where gradient matching with "
                                "--recipe ig rebuilt it at 18.5 (told the pruning), 19.8 and 19.2 dB; "
                                "docs/defenses.md#closed-form-attacks-under-a-defense")


def closed_form_defense_note(run: Mapping, metrics: Mapping | None = None) -> str | None:
    """The next setting of a closed-form run not rebuilt whose defense changes the message by more than a factor
    (:func:`changing_steps`): gradient matching with the ``ig`` recipe, told the steps an attacker can model (clips,
    pruning); None where no step changes it so."""
    every = _changing(run.get("defense"), metrics)  # a clip that only rescales still misleads gradient matching
    steps = changing_steps(run, metrics)
    if not steps:
        return None
    told = ((" --attacker-knows-clip" if any(step.bounds_norm for step in every) else "")
            + (" --attacker-knows-prune" if any(step.prunes for step in every) else ""))
    return (f"a closed form reads the message as the exact gradient up to a factor, which the defense "
            f"{','.join(step.spec() for step in steps)} changes by more; gradient matching fits the message instead: "
            f"--attack gradient-matching --recipe ig{told} ({CLOSED_FORM_DEFENSE_EVIDENCE})")


def next_settings(kind: str | None, run: Mapping, derived: Mapping, metrics: Mapping | None = None,
                  closed_form: bool = False) -> list[str]:
    """The measured settings to try next on a run that was not rebuilt: :data:`NOISY_RECIPE_NOTE` (or
    :data:`ROUNDING_RECIPE_NOTE`, :func:`rounded`) where its ``metrics`` (its metrics.json) show a noisy message
    attacked without an image prior (:func:`noisy_kind`), and :data:`PRUNE_NOT_MODELLED_NOTE` where its defense
    prunes, the attacker did not model it (:func:`prune_not_modelled`) and its attack is not ``closed_form`` (one
    that models no channel)
    and its labels did not fail (``kind``, :func:`leakattack.rebuilt.failed_kind` of its metrics.json); where its
    search stopped short (``kind`` ``search``) the following.  ``run`` and ``derived`` are its
    config.json's sections (the settings given, and those the run resolved).  :data:`OTHER_RECIPE_NOTE` for a
    ``dlg`` run of LeNet on a batch (measured on LeNet; ``ig`` does not rebuild vit_small, docs/victims.md);
    :data:`TRAINED_TV_NOTE` for an ``ig`` run of one image at weights the user loaded, with a TV weight below
    :data:`HEAVY_TV` that the user did not choose (no ``--tv``, no ``--prior tv:W``; a bare ``--prior tv`` keeps the
    recipe's weight); in their place :data:`TRAIN_MODE_NOTE` for one image through BatchNorm in train mode.  None
    for a message whose every value is NaN or infinite (:func:`message_unreadable`), from
    which no setting reads anything, and for a truth that does not send the message (``kind`` ``truth``), which no
    setting rebuilds."""
    if (metrics is not None and message_unreadable(metrics)) or kind == "truth":
        return []
    # a closed form fits no image to the noise: its note on a defense that changes the message says what to run
    noise = noisy_kind(metrics or {}, run, derived) if kind != "labels" and not closed_form else None
    noisy = [ROUNDING_RECIPE_NOTE if noise == "rounding" else NOISY_RECIPE_NOTE] if noise else []
    if kind != "labels" and not closed_form and prune_not_modelled(run, metrics):  # a closed form models no channel
        noisy.append(PRUNE_NOT_MODELLED_NOTE)
    if kind != "labels" and closed_form and (changed := closed_form_defense_note(run, metrics)):
        noisy.append(changed)
    if kind != "search":
        return noisy
    batch, recipe, tv = run.get("batch_size"), derived.get("recipe"), derived.get("tv") or 0.0
    batch = batch if isinstance(batch, int) else 1  # a config.json written by hand or by older code: read, not trusted
    if derived.get("bn_mode") == "train" and batch == 1:  # the objective, not the recipe's settings (ig_recipe.md)
        return noisy + [TRAIN_MODE_NOTE]
    out = []
    if recipe == "dlg" and batch > 1 and run.get("model") == "lenet":
        out.append(OTHER_RECIPE_NOTE)
    chosen = run.get("tv") is not None or any(str(p).startswith("tv:") for p in run.get("priors") or ())
    if (recipe == "ig" and run.get("weights") is not None and batch == 1 and not chosen
            and isinstance(tv, (int, float)) and tv < HEAVY_TV):
        out.append(TRAINED_TV_NOTE)
    return noisy + out


__all__ = ["Recipe", "RECIPE_FIELDS", "list_recipes", "model_recipe", "get_recipe", "recipe_help", "recipe_options",
           "next_settings",
           "OTHER_RECIPE_NOTE", "TRAINED_TV", "HEAVY_TV", "TRAINED_TV_NOTE", "TRAIN_MODE_NOTE", "NOISY_SHARE",
           "NOISY_EVIDENCE",
           "NOISY_RECIPE_NOTE", "ROUNDING_SHARE", "ROUNDING_EVIDENCE", "ROUNDING_RECIPE_NOTE", "rounded",
           "PRUNE_NOT_MODELLED_NOTE", "defense_prunes", "changing_steps", "changing_spec", "inexact_words",
           "closed_form_defense_note",
           "CLOSED_FORM_DEFENSE_EVIDENCE", "prune_not_modelled", "noisy_kind",
           "noisy_without_prior"]
