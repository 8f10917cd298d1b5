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


def cmd_list(a) -> int:
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
