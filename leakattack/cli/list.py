"""``leakattack list``: the names every registry accepts.

Without ``--model`` each registry whose module is loaded is asked itself, so a name registered
at run time (``register_model``, ``register_attack``, ``register_sketch``, ``register_defense``,
``register_prior``) is listed by ``cli.main(["list"])`` in the same process; a registry not
loaded yet answers from its copy in :mod:`leakattack.config.names` (its built-in names, which
``tests/config/test_names.py`` keeps equal to the registry's), so ``leakattack list`` from the
shell answers without importing torch.  ``--model M``, ``--attack A``, ``--recipe R``, ``--defense D`` and
``--protocol P`` ask their registries themselves (:mod:`leakattack.cli.describe`).
"""

from __future__ import annotations

from ..config import names

#: (heading, registry names) in the order printed
SECTIONS = (("models", names.MODELS), ("sketches", names.SKETCHES), ("datasets", names.DATASETS),
            ("attacks", names.ATTACKS), ("recipes", names.RECIPES), ("priors", names.PRIORS),
            ("optimizers", names.OPTIMIZERS), ("defenses", names.DEFENSES), ("protocols", names.PROTOCOLS),
            ("sweep backends", names.SWEEP_BACKENDS))


def cmd_list(a) -> int:
    asked = (a.model, a.attack, a.recipe, a.defense, a.protocol)
    if any(name is not None for name in asked):  # a registry asked itself: torch is imported
        from . import describe

        # every name read before any is printed: an unknown one is refused alone, not after the others' answers
        answers = ["\n".join(lines(name)) for name, lines in (
            (a.recipe, describe.recipe_lines), (a.defense, describe.defense_lines),
            (a.protocol, describe.protocol_lines), (a.model, describe.model_lines), (a.attack, describe.attack_lines))
            if name is not None]  # '' too: refused as an unknown name, as run refuses it
        print("\n".join(answers))
        return 0
    for heading, listed in SECTIONS:
        print(f"{heading + ':':<16}{', '.join(listed.current())}")
    return 0
