"""Attacks behind one contract: ``get_attack(name, **options).reconstruct(obs) -> AttackResult``.

* ``gradient-matching`` — DLG / Inverting Gradients / the sketched L_R of Song et
  al.: optimise dummy data (and labels) until the simulated message matches.
* ``analytic`` — closed-form inversion of a fully connected first layer.
* ``rgap`` — R-GAP: the recursive gradient attack on a chain of convolutions and
  linear layers with invertible activations or ReLUs, from the whole gradient of one example.
* ``april`` — APRIL: a ViT's patches in closed form from the gradients of its
  learnable position embedding and its patch embedding, for one example.
* ``imprint`` — a malicious server's imprint block (Robbing the Fed): every image
  of a batch that falls alone into one of its brightness bins, in closed form.

Label recovery (``labels``), optimisers (``get_optimizer``) and image priors
(``get_prior``) are registries of their own.  Adding an attack: its own module
with an :class:`Attack` subclass (its capabilities and ``options`` declared on the
class), plus one registration line here, or :func:`register_attack` from outside.
"""

from __future__ import annotations

import inspect
import warnings

from ..constraints import Param
from ..errors import SettingWarning, UserError
from ..registry import Registry, is_built_in
from .analytic import Analytic
from .april import April
from .base import Attack, AttackError, AttackResult, Monitor
from .gradient_matching import (
    DUMMY_INITS,
    LABEL_MODES,
    OBJECTIVES,
    REFINES,
    SCHEDULES,
    STALL_GAIN,
    STALL_WINDOW,
    GradientMatching,
    init_dummy,
    match_loss,
)
from .imprint import Imprint
from .labels import recover_labels, sign_rule_snr
from .optimizers import DEFAULT_LR, get_optimizer, list_optimizers, sees_normalised_loss
from .priors import get_prior, list_priors, parse_prior, penalty_label, prior_error
from .recipes import RECIPE_FIELDS, Recipe, get_recipe, list_recipes, model_recipe, recipe_help, recipe_options
from .rgap import Rgap

_ATTACKS = Registry("attack")
_ATTACKS.register("gradient-matching", GradientMatching)
_ATTACKS.register("analytic", Analytic)
_ATTACKS.register("rgap", Rgap)
_ATTACKS.register("april", April)
_ATTACKS.register("imprint", Imprint)

#: the names of the run parameters (a copy of those of ``leakattack.config.params.RUN_PARAMS``, declared in a later
#: station; tests/attacks/test_attack_options.py compares the two): no attack's option may take one
RUN_PARAMETER_NAMES = frozenset({
    "attack", "attack_params", "attacker_knows_clip", "attacker_knows_prune", "batch_draw", "batch_size", "bn",
    "bn_stats", "box", "data_root", "dataset", "defense", "delta", "device", "download", "dtype", "dummy_init",
    "image_index", "image_size", "iterations", "label_mode", "lr", "match_space", "message", "model", "model_params",
    "model_seed", "noise_seed", "objective", "optimizer", "priors", "protocol", "protocol_act", "protocol_client",
    "protocol_dir", "protocol_round", "protocol_spec", "prune_restarts", "recipe", "refine", "restarts",
    "schedule", "seed", "signed", "sketch", "sketch_dim", "sketch_known", "sketch_memory", "sketch_params",
    "sketch_ratio", "sketch_seed", "sketch_seed_search", "stall_window", "surrogate", "threads", "time_limit",
    "tol", "trace_every", "truth", "tv", "utility", "utility_batch", "utility_lr", "utility_steps", "weight_init",
    "weights"})

#: the attack ``leakattack run`` uses unless another is named
DEFAULT_ATTACK = "gradient-matching"


def list_attacks() -> list[str]:
    """Names accepted by :func:`get_attack`."""
    return _ATTACKS.names()


def register_attack(name: str, cls: type[Attack]) -> type[Attack]:
    """Register ``cls`` as attack ``name``; its ``options`` become flags of ``leakattack run``.

    Refused in one sentence, before anything is kept: a name registered twice or one the command line cannot write
    (:func:`~leakattack.registry.name_error`); ``cls`` not an :class:`Attack` subclass (an instance, another class:
    ``TypeError``) or one without its own ``reconstruct`` or with one a run cannot call as ``reconstruct(obs,
    monitor=, monitor_every=, progress=)``; a class whose ``name`` attribute, set on it or on a class
    it inherits from other than ``Attack``, differs from ``name`` (its messages would name another attack: set
    ``name`` on the class); an option that is not a ``Param``, whose name is a run parameter's (its flag would be
    that parameter's), whose default its own constraint refuses, or which ``__init__`` does not take.
    """
    _ATTACKS.check_name(name)
    if not (isinstance(cls, type) and issubclass(cls, Attack)):
        what = ("an instance of one" if isinstance(cls, Attack) else f"class {cls.__name__}" if isinstance(cls, type)
                else f"{type(cls).__name__} {cls!r}")
        raise TypeError(f"attack '{name}' must be registered with an Attack subclass (the class itself), got {what}")
    if getattr(cls, "reconstruct", None) is Attack.reconstruct:
        raise ValueError(f"attack class {cls.__name__} does not implement reconstruct(obs, ...)")
    try:  # a run calls it so (its monitor draws the trace)
        inspect.signature(cls.reconstruct).bind(None, None, monitor=None, monitor_every=10, progress=False)
    except TypeError as err:
        raise ValueError(f"attack class {cls.__name__}: its reconstruct cannot be called as reconstruct(obs, "
                         f"monitor=..., monitor_every=..., progress=...), as a run calls it ({err}): define "
                         "reconstruct(self, obs, *, monitor=None, monitor_every=10, progress=False)") from None
    except ValueError:  # no signature to read: the call decides
        pass
    if cls.name != Attack.name and cls.name != name:
        raise ValueError(f"attack class {cls.__name__} is named {cls.name!r} (its name attribute), not {name!r}: "
                         f"register it as {cls.name!r} or set name = {name!r} on the class")
    options = cls.options
    if not isinstance(options, (tuple, list)) or not all(isinstance(p, Param) for p in options):
        raise TypeError(f"the options of attack class {cls.__name__} must be a tuple of "
                        f"leakattack.constraints.Param, got {options!r}")
    taken = [p.name for p in options if p.name in RUN_PARAMETER_NAMES]
    if taken:
        raise ValueError(f"attack class {cls.__name__} declares an option '{taken[0]}', the name of a run parameter: "
                         f"give the option another name")
    outside = [p for p in options if not p.constraint.ok(p.default)]
    if outside:
        raise ValueError(f"attack class {cls.__name__} declares option '{outside[0].name}' with the default "
                         f"{outside[0].default!r}, which its own constraint refuses")
    params = inspect.signature(cls.__init__).parameters
    if not any(q.kind == q.VAR_KEYWORD for q in params.values()):
        untaken = [p.name for p in options if p.name not in params]
        if untaken:
            raise ValueError(f"attack class {cls.__name__} declares option '{untaken[0]}', which its __init__ does "
                             "not take: add it as a keyword argument")
    return _ATTACKS.register(name, cls)


def attack_class(name: str) -> type[Attack]:
    """The class registered as ``name``: its capabilities (``closed_form``, ``reads_labels``, ``settings``)."""
    return _ATTACKS.get(name)


def get_attack(name: str, **options) -> Attack:
    """Attack ``name`` configured with ``options`` (keyword arguments of its class): an option it does not take, or
    a value outside the constraint of one of its declared ``options``, is one UserError sentence (the constructor
    checks its other settings)."""
    cls = attack_class(name)
    params = inspect.signature(cls.__init__).parameters
    accepted = [k for k, p in params.items() if k != "self" and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]
    open_ended = any(p.kind == p.VAR_KEYWORD for p in params.values())
    for key in options:
        if key not in accepted and not open_ended:
            takes = ", ".join(accepted) if accepted else "none"
            raise UserError(f"attack '{name}' takes no option '{key}' (its options: {takes})")
    declared = {p.name: p for p in cls.options}
    for key, value in options.items():
        p = declared.get(key)
        if p is not None and not p.constraint.ok(value):
            raise UserError(p.constraint.error(p.label, value))
    return cls(**options)


#: the registered attacks' own flags by attack (those with options), as ``leakattack run --help`` names them
ATTACK_OPTION_FLAGS = {name: tuple(p.option for p in attack_class(name).options) for name in list_attacks()
                       if attack_class(name).options}


def closed_forms_for(obs) -> list[str]:
    """The registered closed-form attacks, a malicious server's left out, that accept the message of ``obs`` as it
    is (their ``refusal`` finds nothing to refuse; whether they then solve it is their run's to say), in the order
    of :func:`list_attacks`.  A plugin's attack that cannot be built with its defaults or asked (it needs an option,
    or raises) is left out with a one-line warning: the run that asks has finished its own attack."""
    found = []
    for name in list_attacks():
        cls = attack_class(name)
        if not cls.closed_form or cls.modifies_model:
            continue
        try:
            if cls().refusal(obs) is None:
                found.append(name)
        except Exception as err:  # noqa: BLE001 - any failure of a plugin's constructor or supports()
            if is_built_in(cls.__module__):  # a built-in attack's failure here is a bug to see
                raise
            warnings.warn(f"attack '{name}' ({cls.__module__}) could not be asked whether it reads this message "
                          f"({type(err).__name__}: {err}), so it is left out of the closed forms named",
                          SettingWarning, stacklevel=2)
    return found


__all__ = [
    "ATTACK_OPTION_FLAGS", "RUN_PARAMETER_NAMES",
    "Attack", "AttackError", "AttackResult", "Monitor", "attack_class", "register_attack", "get_attack", "list_attacks",
    "closed_forms_for",
    "DEFAULT_ATTACK",
    "GradientMatching", "Rgap", "April", "Imprint", "init_dummy", "match_loss", "OBJECTIVES", "LABEL_MODES",
    "DUMMY_INITS", "SCHEDULES", "REFINES", "STALL_WINDOW", "STALL_GAIN",
    "recover_labels", "sign_rule_snr", "get_optimizer", "list_optimizers", "DEFAULT_LR", "sees_normalised_loss",
    "get_prior", "list_priors", "parse_prior", "penalty_label", "prior_error",
    "Recipe", "RECIPE_FIELDS", "get_recipe", "list_recipes", "model_recipe",
    "recipe_help", "recipe_options",
]
