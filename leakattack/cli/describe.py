"""``leakattack list --model M | --attack A | --recipe R | --defense D | --protocol P``: what one registered name
takes or sets, asked of its registry (which imports torch; the plain ``leakattack list`` does not come here)."""

from __future__ import annotations

import targets
from defenses.registry import defense_class
from targets.models.user import required_params, user_class
from targets.protocols import protocol_class
from targets.protocols.base import COMMON_SETTINGS, SPEC_DEFAULTS

from .. import attacks
from ..config.params import PROTOCOL_PARAMS, RUN_PARAMS, help_text


def model_lines(name: str) -> list[str]:
    """The model's task, the recipe it takes (and why, where its units decide) and its --model-param names."""
    params = targets.model_params(name)
    targets.check_class(name)  # a class attribute a run refuses (its loss, its head) is refused here too
    recipe = attacks.model_recipe(name, targets.recipe_of(name))  # a class's unknown recipe: refused as run does
    if targets.own_recipe(name) is None:  # its units decide (for 3x32x32 images here)
        units = targets.units_of(name)
        needs = required_params(user_class(name)) if units is None and targets.models.is_user_spec(name) else []
        if needs:  # built without them it fails: its units, and so its recipe, are seen once a run gives them
            recipe = ("by its units, seen once it is built with its parameters (a run giving --model-param "
                      f"{' '.join(f'{p}=...' for p in needs)} takes ig for units whose derivative jumps, dlg for "
                      "smooth ones)")
        elif units is None:
            recipe += " (its class cannot be built on the meta device)"
        else:
            recipe += f" (by its units: {', '.join(units) or 'none whose derivative jumps'})"
    shown = ", ".join(params) if params else "none"
    if targets.models.takes_any_param(name):  # builder(in_shape, num_classes, **params): it decides
        shown = ", ".join([*params, "any other its builder takes (**params)"])
    return [f"{name}: task {targets.task_of(name)}; recipe {recipe}; parameters (--model-param NAME=VALUE): {shown}"]


def attack_lines(name: str) -> list[str]:
    """What the attack is, the run flags it reads that not every attack reads, and its own options with their
    flags."""
    cls = attacks.attack_class(name)
    can = [what for what, yes in (("closed form", cls.closed_form), ("reads labels", cls.reads_labels)) if yes]
    owned = [p.option for p in RUN_PARAMS if p.name in cls.settings and p.option]
    return [f"{name}: {', '.join(can) or 'optimises the input'}; "
            f"{'run flags it reads that not every attack does: ' + ', '.join(owned) + '; ' if owned else ''}"
            f"own options: {'none' if not cls.options else ''}",
            *(f"  {p.option:<24}{help_text(p)}" for p in cls.options)]


def recipe_lines(name: str) -> list[str]:
    """What the recipe is, and every setting it fills where the run gives none; ``auto`` (run's default) names the
    recipe each built-in model takes."""
    if name == "auto":
        chosen: dict[str, list[str]] = {}
        for model in targets.list_models():
            try:
                chosen.setdefault(targets.recipe_of(model), []).append(model)
            except Exception:  # noqa: BLE001 -- a model whose recipe needs its built units: listed by --model M
                continue
        return ["auto (run's default): each model's own recipe, else one chosen by its units "
                "(leakattack list --model M names it)"] + [f"  {r}: {', '.join(ms)}" for r, ms in chosen.items()]
    r = attacks.get_recipe(name)
    step = f" (step {r.lr:g})" if r.lr is not None else ""
    budget = f"{r.iterations:,} steps" + (f" or {r.time_limit / 60:g} minutes, whichever comes first"
                                          if r.time_limit is not None else "")
    cases = [f"{w:g} from {n} examples" for n, w in r.batch_statistics_tv]
    if cases:
        cases[-1] += " that BatchNorm normalises by their own statistics"
    if r.trained_tv is not None:
        cases.append(f"{r.trained_tv:g} for one example at loaded --weights")
    tv = f"TV {r.tv:g}" + (f" ({', '.join(cases[:-1])}{', and ' if len(cases) > 1 else ''}{cases[-1]})"
                           if cases else "")
    settings = [f"optimizer {r.optimizer}{step}", budget, f"objective {r.objective}", f"schedule {r.schedule}",
                "signed steps" if r.signed else "plain steps", tv, "box [0, 1]" if r.box else "no box",
                f"dtype {r.dtype}"] + ([f"ReLU surrogate {r.surrogate:g}"] if r.surrogate else [])
    return [f"{name}: {attacks.recipe_help(name)}", f"  fills: {'; '.join(settings)}"]


def defense_lines(name: str) -> list[str]:
    """What the defense step does (its class's first docstring line), its parameters and its placements."""
    cls = defense_class(name)
    params = [f"  {key + '=':<24}{typ.__name__}, {text}" for key, (typ, text, _) in cls.schema.items()]
    return [f"{name}: {_summary(cls)}", *(params or ["  no parameters"]),
            f"  placements: {', '.join(cls.placements)} (default {cls.default_placement})"]


def _summary(cls) -> str:
    """The first paragraph of a class's docstring, on one line."""
    doc = (cls.__doc__ or "").replace("``", "").strip().split("\n\n")[0]
    return " ".join(doc.split()) or "no description"


def protocol_lines(name: str) -> list[str]:
    """What the protocol is (its class's docstring's first paragraph), and the flags of the settings it reads beyond
    those every protocol reads, with their defaults (a protocol warns of a flag it does not read)."""
    cls = protocol_class(name)
    params = {p.name: p for p in (*RUN_PARAMS, *PROTOCOL_PARAMS)}

    def flag(key: str) -> str:
        option = params[key].option if key in params else None
        return option or "--" + key.replace("_", "-")

    # train draws every sketch with its own parameters' defaults: --sketch-param is run's alone
    run_default = {p.name: p.default for p in RUN_PARAMS}
    flags = [f"  {flag(k):<24}default "
             + (cls.unset_means[k] if SPEC_DEFAULTS[k] is None and k in cls.unset_means else repr(SPEC_DEFAULTS[k]))
             + (" (leakattack run only: train takes the sketch's defaults)" if k == "sketch_params" else
                f" (run --protocol without --protocol-dir: run's own default, {run_default[k]!r})"
                if k in run_default and run_default[k] != SPEC_DEFAULTS[k] else "")
             for k in cls.reads if k in SPEC_DEFAULTS]
    fixed = [k for k in COMMON_SETTINGS if k in params and _fixed(cls, k)]
    common = ", ".join(flag(k) for k in COMMON_SETTINGS if k in params and k not in fixed)
    held = "".join(f"; {flag(k)} at its default {SPEC_DEFAULTS[k]!r} only" for k in fixed)
    return [f"{name}: {_summary(cls)}",
            f"  reads every protocol's {common}{held}" + (", and (defaults of leakattack train):" if flags
                                                         else "; no other setting"), *flags]


def _fixed(cls, key: str) -> bool:
    """Whether protocol class ``cls`` refuses every protocol's setting ``key`` away from its default (safl's
    --global-lr, compsgd's --local-steps): tried at one other value, as its own check refuses it."""
    v = SPEC_DEFAULTS[key]
    other = (not v if isinstance(v, bool) else v + 1 if isinstance(v, int) else v * 0.5 if isinstance(v, float)
             else 1 if v is None else v)
    try:
        return bool(cls.spec_error({**SPEC_DEFAULTS, key: other}))
    except Exception:  # a check that cannot read the value at all: not a setting it holds fixed
        return False


__all__ = ["model_lines", "attack_lines", "recipe_lines", "defense_lines", "protocol_lines"]
