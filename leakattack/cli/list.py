"""``leakattack list``: the names every registry accepts."""

from __future__ import annotations

import defenses
import targets
from targets.protocols import list_protocols

from ..attacks import list_attacks, list_optimizers, list_priors, list_recipes
from ..data import list_datasets
from ..sketch import list_sketches
from ..sweep import list_backends


def cmd_list(a) -> int:
    if a.model:
        params = targets.model_params(a.model)
        print(f"{a.model}: task {targets.task_of(a.model)}; recipe {targets.recipe_of(a.model)}; "
              "parameters (--model-param NAME=VALUE): "
              f"{', '.join(params) if params else 'none'}")
        return 0
    rows = [("models", targets.list_models()), ("sketches", list_sketches()), ("datasets", list_datasets()),
            ("attacks", list_attacks()), ("recipes", list_recipes()), ("priors", list_priors()),
            ("optimizers", list_optimizers()),
            ("defenses", defenses.list_defenses()), ("protocols", list_protocols()),
            ("sweep backends", list_backends())]
    for name, names in rows:
        print(f"{name + ':':<16}{', '.join(names)}")
    return 0
