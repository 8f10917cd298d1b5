"""``leakattack list``: the names every registry accepts.

Without ``--model`` each registry whose module is loaded is asked itself, so a name registered
at run time (``register_model``, ``register_attack``, ``register_sketch``, ``register_defense``,
``register_prior``) is listed by ``cli.main(["list"])`` in the same process; a registry not
loaded yet answers from its copy in :mod:`leakattack.config.names` (its built-in names, which
``tests/config/test_names.py`` keeps equal to the registry's), so ``leakattack list`` from the
shell answers without importing torch.  ``--model M`` asks the model registry itself,
``--attack A`` the attack registry (the options A declares).
"""

from __future__ import annotations

from ..config import names

#: (heading, registry names) in the order printed
SECTIONS = (("models", names.MODELS), ("sketches", names.SKETCHES), ("datasets", names.DATASETS),
            ("attacks", names.ATTACKS), ("recipes", names.RECIPES), ("priors", names.PRIORS),
            ("optimizers", names.OPTIMIZERS), ("defenses", names.DEFENSES), ("protocols", names.PROTOCOLS),
            ("sweep backends", names.SWEEP_BACKENDS))


def recipe_line(name: str) -> str:
    """One line: what recipe ``name`` is and every setting it fills."""
    from ..attacks.recipes import get_recipe, recipe_help

    r = get_recipe(name)
    step = f" (step {r.lr:g})" if r.lr is not None else ""
    budget = f"{r.iterations:,} steps" + (f" or {r.time_limit / 60:g} minutes, whichever comes first"
                                          if r.time_limit is not None else "")
    tv = f"TV {r.tv:g}"
    extra = [f"{w:g} from {n} examples" for n, w in r.batch_statistics_tv]
    if extra:
        tv += f" ({', '.join(extra)} that BatchNorm normalises by their own statistics"
    if r.trained_tv is not None:
        tv += (", and " if extra else " (") + f"{r.trained_tv:g} for one example at loaded --weights"
    tv += ")" if extra or r.trained_tv is not None else ""
    settings = [f"optimizer {r.optimizer}{step}", budget, f"objective {r.objective}", f"schedule {r.schedule}",
                "signed steps" if r.signed else "plain steps", tv, "box [0, 1]" if r.box else "no box",
                f"dtype {r.dtype}"] + ([f"ReLU surrogate {r.surrogate:g}"] if r.surrogate else [])
    return f"{name}: {recipe_help(name)}\n  fills: {'; '.join(settings)}"


def defense_lines(name: str) -> list[str]:
    """What defense ``name`` does (its class's first docstring line), its parameters and its placements."""
    from defenses.registry import defense_class

    cls = defense_class(name)
    doc = (cls.__doc__ or "").replace("``", "").strip().splitlines()
    params = [f"  {key + '=':<24}{typ.__name__}, {text}" for key, (typ, text, _) in cls.schema.items()]
    return [f"{name}: {doc[0] if doc else 'no description'}",
            *(params or ["  no parameters"]),
            f"  placements: {', '.join(cls.placements)} (default {cls.default_placement})"]


def cmd_list(a) -> int:
    if a.recipe or a.defense:
        if a.recipe:
            print(recipe_line(a.recipe))
        if a.defense:
            print("\n".join(defense_lines(a.defense)))
        if not (a.model or a.attack):
            return 0
    if a.model:
        import targets

        params = targets.model_params(a.model)
        recipe = targets.recipe_of(a.model)
        if targets.own_recipe(a.model) is None:  # its units decide (for 3x32x32 images here)
            units = targets.units_of(a.model)
            if units is None:
                recipe += " (its class cannot be built on the meta device)"
            else:
                recipe += f" (by its units: {', '.join(units) or 'none whose derivative jumps'})"
        shown = ", ".join(params) if params else "none"
        if targets.models.takes_any_param(a.model):  # builder(in_shape, num_classes, **params): it decides
            shown = ", ".join([*params, "any other its builder takes (**params)"])
        print(f"{a.model}: task {targets.task_of(a.model)}; recipe {recipe}; "
              f"parameters (--model-param NAME=VALUE): {shown}")
        if not a.attack:
            return 0
    if a.attack:  # both given: the model's line, then the attack's
        from .. import attacks
        from ..config.params import RUN_PARAMS, help_text

        cls = attacks.attack_class(a.attack)
        can = [what for what, yes in (("closed form", cls.closed_form), ("reads labels", cls.reads_labels)) if yes]
        owned = [p.option for p in RUN_PARAMS if p.name in cls.settings and p.option]
        print(f"{a.attack}: {', '.join(can) or 'optimises the input'}; "
              f"{'run flags only it reads: ' + ', '.join(owned) + '; ' if owned else ''}"
              f"own options: {'none' if not cls.options else ''}")
        for p in cls.options:
            print(f"  {p.option:<24}{help_text(p)}")
        return 0
    for heading, listed in SECTIONS:
        print(f"{heading + ':':<16}{', '.join(listed.current())}")
    return 0
