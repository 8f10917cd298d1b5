"""The registry names and constants the parameter declarations show, copied so that declaring them imports no torch.

The flags of every command and their ``--help`` come from :mod:`.params`, which takes the
names of the torch-importing stations (models, sketches, attacks, protocols...) from here:
building the command line then costs milliseconds, not torch's import.  Validation still
asks the registries themselves (a :class:`Listed` called looks its registry up), so names
registered at run time are accepted.  ``tests/config/test_names.py`` compares every copy
with its original (``SOURCES``, and each :class:`Listed`'s ``source``) and fails when one
is out of date: adding a registry entry or changing a default below means editing it here too.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any, Callable


def live(source: str) -> Any:
    """The object ``module:attribute`` names (the module is imported now, if it was not yet)."""
    module, _, attr = source.partition(":")
    return getattr(importlib.import_module(module), attr)


def checked_by(source: str) -> Callable[[str], Any]:
    """A check that calls the function ``module:function`` names, looked up on the first call."""
    return lambda value: live(source)(value)


class Listed:
    """A registry's names: ``shown`` is the copy that flags and ``--help`` print; calling it asks the registry.

    ``source`` is the registry's list function as ``module:function``; ``first`` are
    names that precede the registry's (``auto`` before the recipes).
    """

    def __init__(self, source: str, shown: tuple[str, ...], *, first: tuple[str, ...] = ()):
        self.source, self.first = source, first
        self.shown = first + shown

    def __call__(self) -> list[str]:
        return [*self.first, *live(self.source)()]

    def current(self) -> list[str]:
        """The registry's names where its module is loaded (with what was registered at run time), else the copy.

        Registering a name imports the registry's module, so a loaded module is the only place a name can be
        missing from the copy; an unloaded one is not imported here (``leakattack list`` imports no torch).
        """
        module = self.source.partition(":")[0]
        return self() if module in sys.modules else list(self.shown)

    def __repr__(self) -> str:
        return f"Listed({self.source!r})"


# -- registries -------------------------------------------------------------------------------
MODELS = Listed("targets:list_models", ("lenet", "linreg", "logreg", "mlp", "resnet101", "resnet18", "resnet20",
                                        "resnet32", "resnet50", "resnet_cifar", "vit_b_16", "vit_small"))
SKETCHES = Listed("leakattack.sketch:list_sketches", ("ams", "countsketch", "gaussian", "none", "sparse", "srht",
                                                      "uniform"))
DATASETS = Listed("leakattack.data:list_datasets", ("photos", "digits", "mnist", "cifar10", "cifar100", "imagefolder"))
ATTACKS = Listed("leakattack.attacks:list_attacks", ("analytic", "april", "gradient-matching", "imprint", "rgap"))
RECIPES = Listed("leakattack.attacks:list_recipes", ("dlg", "ig"))
RECIPES_OR_AUTO = Listed(RECIPES.source, RECIPES.shown, first=("auto",))
PRIORS = Listed("leakattack.attacks:list_priors", ("bn", "dip", "tv"))
OPTIMIZERS = Listed("leakattack.attacks:list_optimizers", ("lbfgs", "adam", "gd"))
PROTOCOLS = Listed("targets.protocols:list_protocols", ("compsgd", "fedavg", "fedsketch-heaprix", "fedsketch-privix",
                                                        "privsgd", "sacfl", "safl", "sketched", "sketched-dp"))
SWEEP_BACKENDS = Listed("leakattack.sweep:list_backends", ("local", "slurm"))
DEFENSES = Listed("defenses:list_defenses", ("clip", "gaussian", "laplace", "per_example", "prune", "quantize"))

# -- constants (a dict copied as a tuple holds its keys) --------------------------------------
BN_MODES = ("train", "eval")
INITS = ("uniform", "default", "xavier", "normal")
ACTIVATIONS = ("sigmoid", "tanh", "relu", "softplus", "gelu")
DEFAULT_ATTACK = "gradient-matching"
DEFAULT_LR = {"lbfgs": 1.0, "adam": 0.1, "gd": 0.01}
OBJECTIVES = ("l2", "cosine")
SCHEDULES = ("none", "step")
REFINES = ("auto", "gauss-newton", "none")
LABEL_MODES = ("idlg", "given", "dlg")
DUMMY_INITS = ("uniform", "gaussian")
BATCH_DRAWS = ("consecutive", "class", "random")
STALL_WINDOW = 500
STALL_GAIN = 0.02
IG_TIME_LIMIT = 480.0
SPEC_DEFAULTS: dict[str, object] = {
    "clients": 10, "local_steps": 1, "local_epochs": 0, "local_lr": 0.1, "global_lr": 1.0, "batch_size": 32,
    "noniid": False, "client_fraction": None, "seed": 0, "sketch": "srht", "sketch_ratio": 0.1, "sketch_params": {},
    "sketch_rows": 20, "sketch_buckets": 40, "dp_epsilon": 0.5, "dp_delta": 1e-05, "dp_clip": 1.0,
    "server_opt": "adam", "server_lr": None, "server_beta1": 0.9, "server_beta2": 0.99, "server_eps": 0.001,
    "second_moment": "sketch", "clip_threshold": 0.1, "projection_blocks": "layer", "l1_scale": 1.25,
    "dp_rounds": 100,
}
PROJECTION_BLOCKS = ("layer", "global")
SECOND_MOMENTS = ("sketch", "desketched")
SERVER_OPTS = ("adam", "amsgrad", "sgd", "sgdm")
MODEL_DEFAULTS = {"model": "lenet", "init": "default", "act": "tanh", "dataset": "digits", "data_root": None,
                  "test_fraction": 0.2}
CHECK_TARGETS = ("linreg", "logreg", "mlp", "lenet")
#: `leakattack check`'s defaults of the target and sketch (its tables read none of them)
CHECK_DEFAULTS = {"model": "linreg", "sketch": "none", "sketch_ratio": 0.5}
DEFAULT_SAMPLES = {"linreg": 200, "logreg": 100, "mlp": 48, "lenet": 24}
#: the smallest image side every run can score: SSIM's Gaussian window is this wide
SSIM_WIN = 11
#: the largest image side --image-size takes
MAX_IMAGE_SIZE = 1024
#: the flags of the attacks' own options, by attack (``leakattack run --help`` names them; they are added to the
#: parser once the attacks are imported)
ATTACK_OPTION_FLAGS = {"analytic": ("--sweeps",), "imprint": ("--bins", "--query")}

#: each copied constant -> the original it copies
SOURCES = {
    "BN_MODES": "targets:BN_MODES", "INITS": "targets:INITS", "ACTIVATIONS": "targets.models:ACTIVATIONS",
    "DEFAULT_ATTACK": "leakattack.attacks:DEFAULT_ATTACK", "DEFAULT_LR": "leakattack.attacks:DEFAULT_LR",
    "OBJECTIVES": "leakattack.attacks:OBJECTIVES", "SCHEDULES": "leakattack.attacks:SCHEDULES",
    "REFINES": "leakattack.attacks:REFINES",
    "LABEL_MODES": "leakattack.attacks:LABEL_MODES", "DUMMY_INITS": "leakattack.attacks:DUMMY_INITS",
    "STALL_WINDOW": "leakattack.attacks:STALL_WINDOW", "STALL_GAIN": "leakattack.attacks:STALL_GAIN",
    "IG_TIME_LIMIT": "leakattack.attacks.recipes:IG_TIME_LIMIT",
    "SPEC_DEFAULTS": "targets.protocols:SPEC_DEFAULTS", "PROJECTION_BLOCKS": "targets.protocols:PROJECTION_BLOCKS",
    "SECOND_MOMENTS": "targets.protocols:SECOND_MOMENTS", "SERVER_OPTS": "targets.protocols:SERVER_OPTS",
    "MODEL_DEFAULTS": "leakattack.training:MODEL_DEFAULTS", "CHECK_TARGETS": "leakattack.theory:CHECK_TARGETS",
    "DEFAULT_SAMPLES": "leakattack.theory:DEFAULT_SAMPLES", "BATCH_DRAWS": "leakattack.data:BATCH_DRAWS",
    "SSIM_WIN": "leakattack.metrics:SSIM_WIN", "MAX_IMAGE_SIZE": "leakattack.data:MAX_IMAGE_SIZE",
    "ATTACK_OPTION_FLAGS": "leakattack.attacks:ATTACK_OPTION_FLAGS",
}

__all__ = ["Listed", "live", "checked_by", "SOURCES", "MODELS", "SKETCHES", "DATASETS", "ATTACKS", "RECIPES",
           "RECIPES_OR_AUTO", "PRIORS", "OPTIMIZERS", "PROTOCOLS", "SWEEP_BACKENDS", "DEFENSES", *SOURCES]
