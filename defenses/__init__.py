"""Defenses: composable transforms of what a client sends, and privacy accounting.

Registry in the torchvision style: ``get_defense(name, params, placement)``,
``list_defenses()`` and ``build(spec)`` for a whole pipeline.  The package
imports nothing of ``leakattack`` but its leaf modules (registry, errors).
Modules: :mod:`.registry` (the families and the step parser), :mod:`.pipeline`
(``Pipeline``, ``build``), :mod:`.sensitivity` (the noise and its sensitivity),
:mod:`.accounting` (epsilon).  Adding a defense: its own module with a
``Transform`` subclass, plus one name in the registration line of
:mod:`.registry`.

Spec grammar (string form)::

    spec      := "" | "none" | step ("," step)*
    step      := name [":" key "=" value (":" key "=" value)*] ["@" placement]
    placement := "before_sketch" | "after_sketch"

e.g. ``"clip:C=1,gaussian:z=1.1@after_sketch"``.  The dict form is
``{"name": "gaussian", "sigma": 1e-3, "placement": "after_sketch"}`` and the list
form a list of step strings or dicts.  Steps run in the order written, the
``before_sketch`` ones on the gradient g, then the sketch R, then the
``after_sketch`` ones on y = R g~.  Default placements: ``clip``, ``per_example``,
``gaussian``, ``laplace``, ``prune`` before the sketch (Algorithm 2 of Song et al.
2023 adds the noise to the local gradient); ``quantize`` after it (it compresses
the message on the wire).  ``per_example`` must come first and before the sketch.
"""

from __future__ import annotations

from .base import AFTER, BEFORE, DefenseError, Transform, seeded
from .pipeline import Pipeline, build
from .registry import get_defense, list_defenses, register_defense
from .sensitivity import LaplaceBound, NoiseBound

__all__ = ["build", "get_defense", "list_defenses", "register_defense", "Pipeline", "NoiseBound", "LaplaceBound",
           "Transform", "seeded",
           "DefenseError", "BEFORE", "AFTER"]
