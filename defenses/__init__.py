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

import math
from dataclasses import dataclass

from .accounting.analysis import clip_sensitivity, linear_map_sensitivity
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


#: Marks the sketch's place among the steps when the pipeline is walked in the order the channel runs it.
_SKETCH = object()


@dataclass(frozen=True)
class NoiseBound:
    """The first Gaussian noise of a pipeline and the L2 sensitivity of the vector it is added to.

    Noise steps run later in the channel act on an already noisy vector: they are
    post-processing and not counted (a valid, conservative guarantee).
    """

    sigma: float  #: standard deviation of the noise (consecutive Gaussian steps combined)
    sensitivity: float | None  #: Delta_2 of what the noise is added to; None: nothing bounds it
    formula: str = ""  #: how Delta was obtained, e.g. "||R||_op * C = 1.563 * 1.0"
    where: str = ""  #: the bounding clip and the noise, relative to the sketch
    neighbours: str = ""  #: the neighbouring relation Delta is for
    crosses_sketch: bool = False  #: a clip before the sketch bounds noise after it: Delta has the factor ||R||_op
    reason: str = ""  #: why ``sensitivity`` is None
    later_noise: int = 0  #: Gaussian steps after the counted ones


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

    def describe(self) -> list[dict]:
        return [{"name": t.name, **t.params, "placement": t.placement} for t in self.steps]

    def noise_bound(self, sketch_norm: float | None = 1.0) -> NoiseBound | None:
        """The first Gaussian noise in channel order and the sensitivity of what it is added to (None without noise).

        The steps are walked as the channel runs them: before the sketch, R, after
        it.  Neighbours add or remove one example with a ``per_example`` step, one
        client's update otherwise.  A clip bounds Delta (``clip_sensitivity``), R
        multiplies it by ``sketch_norm`` = ||R||_op (None: not known).  Pruning
        keeps the bound on a client's update (zeroing entries never raises its
        norm); any other step between the clip and the noise leaves Delta
        untracked.  The channel divides a per-example sum by the batch size before
        the sketch; the bound ignores that division, which can only shrink Delta.
        """
        per_ex = self.per_example
        delta, sym, val, clip, crossed = None, "", "", None, False
        reason = "no clip before the noise: sensitivity unbounded"
        order = [*self.before, _SKETCH, *self.after]
        for i, step in enumerate(order):
            if step is _SKETCH:
                if delta is not None and sketch_norm is None:
                    delta, reason = None, "the sketch's operator norm is not known: sensitivity unbounded"
                elif delta is not None:
                    delta, crossed = linear_map_sensitivity(delta, sketch_norm), True
                    sym, val = f"||R||_op * {sym}", f"{sketch_norm:.4g} * {val}"
            elif isinstance(step, Gaussian):
                if step.sigma > 0:
                    return self._bound_at(order, i, delta, f"{sym} = {val}", clip, crossed, reason)
            elif step.bounds_norm:
                # per_example bounds one example's gradient; a later clip acts on the sum one example changes
                new = clip_sensitivity(step.C, delta, inside_sum=per_ex and not step.per_example)
                if delta is None or new < delta:
                    delta, clip, crossed = new, step, False
                    sym, val = ("C", f"{step.C}") if new == step.C else ("2 * C", f"2 * {step.C}")
            elif not (isinstance(step, Prune) and not per_ex) and delta is not None:
                delta, clip, crossed = None, None, False
                reason = f"'{step.spec()}' runs between the clip and the noise: sensitivity not tracked"
        return None

    def _bound_at(self, order, i, delta, formula, clip, crossed, reason) -> NoiseBound:
        """The NoiseBound of the Gaussian steps that run together from ``order[i]`` on."""
        j, sigmas = i, []
        while j < len(order) and isinstance(order[j], Gaussian):
            sigmas.append(order[j].sigma)
            j += 1
        later = sum(1 for t in order[j:] if isinstance(t, Gaussian) and t.sigma > 0)
        sigma = math.hypot(*sigmas)  # sqrt of the sum of squares without overflow for huge sigmas
        if delta is None:
            return NoiseBound(sigma, None, reason=reason, later_noise=later)
        name = "per-example clip" if clip.per_example else "clip"
        if clip.placement != order[i].placement:
            where = f"{name} before the sketch, noise after it"
        else:
            where = f"{name} and noise {'before' if clip.placement == BEFORE else 'after'} the sketch"
        if formula.split(" = ")[0] != "C":
            formula = f"{formula} = {delta:.4g}"
        neighbours = "add/remove one example" if self.per_example else "add/remove one client's update"
        return NoiseBound(sigma, delta, formula, where, neighbours, crossed, later_noise=later)

    def sensitivity(self, sketch_norm: float | None = 1.0) -> float | None:
        """L2 sensitivity of what the first Gaussian noise is added to, for ||R||_op = ``sketch_norm`` (None: unbounded or no noise)."""
        bound = self.noise_bound(sketch_norm)
        return None if bound is None else bound.sensitivity

    @property
    def needs_sketch_norm(self) -> bool:
        """Whether the sensitivity depends on ||R||_op: a clip before the sketch bounds noise added after it."""
        bound = self.noise_bound(1.0)
        return bound is not None and bound.crosses_sketch


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


__all__ = ["build", "get_defense", "list_defenses", "register_defense", "Pipeline", "NoiseBound", "Transform",
           "DefenseError", "BEFORE", "AFTER"]
