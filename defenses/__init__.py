"""Defenses: composable transforms of what a client sends, and privacy accounting.

Registry in the torchvision style: ``get_defense(name, params, placement)``,
``list_defenses()`` and ``build(spec)`` for a whole pipeline.  The package
imports nothing of ``leakattack`` but its leaf modules (registry, errors).
Adding a defense: its own module with a ``Transform`` subclass, plus one name in
the registration line below.

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

from .base import AFTER, BEFORE, PLACEMENTS, DefenseError, Transform
from .clipping import Clip, PerExample
from .noise import Gaussian, Laplace
from .pruning import Prune
from .quantization import Quantize
from leakattack.registry import Registry

_REGISTRY = Registry("defense", DefenseError)


def register_defense(cls: type) -> type:
    """Add a transform class to the registry under ``cls.name``."""
    return _REGISTRY.register(cls.name, cls)


for _cls in (Clip, PerExample, Gaussian, Laplace, Prune, Quantize):  # one line per family
    register_defense(_cls)


def get_defense(name: str, params: dict, placement: str | None = None) -> Transform:
    """One transform ``name`` with its parameters (validated as in a spec)."""
    return _parse_step({"name": name, **params, **({"placement": placement} if placement else {})})


def list_defenses() -> list[str]:
    """Names accepted in a spec."""
    return _REGISTRY.names()


class Pipeline:
    """An ordered list of transforms split by placement; ``spec`` is its canonical text."""

    def __init__(self, steps: list[Transform]):
        self.steps = steps
        self.before = [t for t in steps if t.placement == BEFORE]
        self.after = [t for t in steps if t.placement == AFTER]

    @property
    def per_example(self) -> bool:
        """Whether the first step takes per-example gradients."""
        return any(t.per_example for t in self.steps)

    @property
    def spec(self) -> str:
        return ",".join(t.spec() for t in self.steps)

    def __bool__(self) -> bool:
        return bool(self.steps)

    def clips(self) -> "Pipeline":
        """The deterministic norm bounds alone (what an attacker granted the clips can model)."""
        return Pipeline([t for t in self.steps if t.bounds_norm])

    def gaussian_steps(self) -> list[Gaussian]:
        return [t for t in self.steps if isinstance(t, Gaussian) and t.sigma > 0]

    def describe(self) -> list[dict]:
        return [{"name": t.name, **t.params, "placement": t.placement} for t in self.steps]


def build(spec) -> Pipeline:
    """Parse a spec (string, dict, list, or Pipeline) into a validated :class:`Pipeline`; raise DefenseError."""
    if isinstance(spec, Pipeline):
        return spec
    if spec is None:
        items = []
    elif isinstance(spec, str):
        text = spec.strip()
        items = [] if text in ("", "none") else [s.strip() for s in text.split(",")]
    elif isinstance(spec, dict):
        items = [spec]
    elif isinstance(spec, (list, tuple)):
        items = list(spec)
    else:
        raise DefenseError(f"defense spec must be a string, dict or list, got {spec!r}")
    steps: list[Transform] = []
    for item in items:
        step = _parse_step(item)
        if isinstance(step, PerExample) and steps:
            raise DefenseError(f"defense 'per_example' must be the first step, got it after '{steps[-1].spec()}'")
        step.check(steps)
        steps.append(step)
    return Pipeline(steps)


def _parse_step(item) -> Transform:
    if isinstance(item, str):
        name, raw, placement = _split_step(item)
    elif isinstance(item, dict):
        raw = dict(item)
        name = raw.pop("name", None)
        placement = raw.pop("placement", None)
        if not isinstance(name, str):
            raise DefenseError(f"defense step {item!r} needs a 'name'")
    else:
        raise DefenseError(f"defense step must be a string or dict, got {item!r}")
    cls = _REGISTRY.get(name)
    placement = placement or cls.default_placement
    if placement not in cls.placements:
        raise DefenseError(f"defense '{name}' cannot be placed '@{placement}'; allowed: {', '.join(cls.placements)}")
    params = {}
    for key, value in raw.items():
        if key not in cls.schema:
            allowed = ", ".join(cls.schema) or "none"
            raise DefenseError(f"defense '{name}' has no parameter '{key}' (value {value!r}); allowed: {allowed}")
        typ, what, ok = cls.schema[key]
        try:
            v = typ(value) if typ is float else _as_int(value)
        except (TypeError, ValueError):
            raise DefenseError(f"defense '{name}': {key} must be {what}, got {value!r}") from None
        if not (v == v and ok(v)) or v in (float("inf"), float("-inf")):
            raise DefenseError(f"defense '{name}': {key} must be {what}, got {value!r}")
        params[key] = v
    missing = [k for k in cls.schema if k not in params]
    if name != "gaussian" and missing:
        raise DefenseError(f"defense '{name}' needs {' and '.join(k + '=' for k in missing)}")
    if name == "gaussian" and not params:
        raise DefenseError("defense 'gaussian' needs sigma= or z=")
    return cls(params, placement)


def _as_int(value) -> int:
    if isinstance(value, bool):
        raise ValueError
    f = float(value)
    if f != int(f):
        raise ValueError
    return int(f)


def _split_step(text: str):
    placement = None
    if "@" in text:
        text, placement = text.rsplit("@", 1)
        if placement not in PLACEMENTS:
            raise DefenseError(f"unknown defense placement '@{placement}'; choose one of: {', '.join(PLACEMENTS)}")
    name, *pairs = text.split(":")
    raw = {}
    for pair in pairs:
        if "=" not in pair or not pair.split("=", 1)[0]:
            raise DefenseError(f"malformed defense parameter '{pair}' in '{text}': write KEY=VALUE")
        k, v = pair.split("=", 1)
        raw[k.strip()] = v.strip()
    return name.strip(), raw, placement


__all__ = ["build", "get_defense", "list_defenses", "register_defense", "Pipeline", "Transform", "DefenseError",
           "BEFORE", "AFTER"]
