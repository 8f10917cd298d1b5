"""Victims: models at weights w, their loss F, and the gradient oracle grad_w F(w, x).

``get_model(name, num_classes, in_shape, seed, init, bn_mode, **params) -> Victim`` and
``list_models()`` (torchvision style); any ``nn.Module`` becomes a victim with
``Victim.from_module``.  Federated protocols live in ``targets.protocols``.

This package imports nothing of ``leakattack`` but its leaf modules (registry,
errors, seeds, sketch) and the ``defenses`` transforms.
"""

from __future__ import annotations

from .models import (
                     INITS,
                     RESERVED_MODEL_PARAMS,
                     check_class,
                     default_init,
                     get_model,
                     has_batchnorm_of,
                     list_models,
                     model_params,
                     output_problem,
                     own_recipe,
                     parameter_count,
                     recipe_of,
                     register_model,
                     task_of,
                     units_of,
                     victim_recipe,
                     victim_units,
)
from .oracle import (
                     flat_gradient,
                     flat_params,
                     kept_buffers,
                     loss_at,
                     num_params,
                     param_names,
                     param_slices,
                     per_example_gradients,
                     probe,
                     unflatten,
)
from .victim import BN_MODES, TASKS, Victim, cross_entropy, resolve_bn_mode, squared_error
from .weights import load_weights

__all__ = ["RESERVED_MODEL_PARAMS",
    "Victim", "TASKS", "BN_MODES", "resolve_bn_mode", "cross_entropy", "squared_error",
    "INITS", "get_model", "list_models", "register_model", "model_params", "default_init", "task_of", "recipe_of",
    "check_class", "own_recipe", "units_of", "has_batchnorm_of", "victim_recipe", "victim_units", "parameter_count",
    "output_problem",
    "flat_gradient", "flat_params", "loss_at", "num_params", "param_names", "param_slices",
    "per_example_gradients", "unflatten", "load_weights", "probe", "kept_buffers",
]
