"""Pipeline: an ordered list of defense transforms, parsed from a spec by :func:`build`."""

from __future__ import annotations

from .base import AFTER, BEFORE, DefenseError, Transform
from .clipping import PerExample
from .registry import parse_step
from .sensitivity import LaplaceBound, NoiseBound, laplace_bound, noise_bound, sketch_norm_needed


class Pipeline:
    """An ordered list of transforms split by placement; ``spec`` is its canonical text."""

    def __init__(self, steps: list[Transform]):
        for i, step in enumerate(steps):  # steps made one by one (get_defense): z= reads the clip before it
            step.check(steps[:i])
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
        return self.modelled(clips=True, prunes=False)

    def prunes(self) -> "Pipeline":
        """The pruning steps alone (what an attacker granted the pruning can model)."""
        return self.modelled(clips=False, prunes=True)

    def changing(self, d: int | None = None, b: int | None = None, batch_size: int | None = None
                 ) -> list[Transform]:
        """The steps that change the vector they get: each but those that change nothing at its length (``d``
        before the sketch, ``b`` after it; where not given, at any length); with ``batch_size``, also each but
        those that only rescale it for a batch of that size (:meth:`Transform.only_rescales`)."""
        sizes = {BEFORE: d, AFTER: b}

        def changes(t: Transform) -> bool:
            n = sizes.get(t.placement)
            return not (t.changes_nothing_at(n) if n is not None else t.changes_nothing())

        return [t for t in self.steps if changes(t) and not (batch_size is not None and t.only_rescales(batch_size))]

    def modelled(self, clips: bool, prunes: bool) -> "Pipeline":
        """The steps an attacker granted the clips (``clips``) and the pruning (``prunes``) models, in their order;
        never noise or rounding, whose draws it does not hold."""
        return Pipeline([t for t in self.steps if (clips and t.bounds_norm) or (prunes and t.prunes)])

    def describe(self) -> list[dict]:
        return [{"name": t.name, **t.params, "placement": t.placement} for t in self.steps]

    def noise_bound(self, sketch_norm: float | None = 1.0, batch_size: int | None = None) -> NoiseBound | None:
        """The Gaussian noise counted (the largest sigma/Delta) and the sensitivity of what it is added to (None
        without noise): :func:`defenses.sensitivity.noise_bound`."""
        return noise_bound(self, sketch_norm, batch_size)

    def sensitivity(self, sketch_norm: float | None = 1.0, batch_size: int | None = None) -> float | None:
        """L2 sensitivity of what the counted Gaussian noise is added to, for ||R||_op = ``sketch_norm`` and a
        ``per_example`` mean over ``batch_size`` examples (None: unbounded or no noise)."""
        bound = self.noise_bound(sketch_norm, batch_size)
        return None if bound is None else bound.sensitivity

    def laplace_bound(self, sketch_norm: float | None = 1.0, batch_size: int | None = None,
                      lengths: tuple[int | None, int | None] | None = None) -> LaplaceBound | None:
        """The Laplace noise counted (the largest b/Delta_1) and the L1 sensitivity of what it is added to, for
        ``lengths`` = (d, b) (None without Laplace noise): :func:`defenses.sensitivity.laplace_bound`."""
        return laplace_bound(self, sketch_norm, batch_size, lengths)

    @property
    def needs_sketch_norm(self) -> bool:
        """Whether the sensitivity may depend on ||R||_op: a clip before the sketch bounds noise added after it."""
        return sketch_norm_needed(self)


def build(spec) -> Pipeline:
    """Parse a spec (string, dict, list, or Pipeline) into a validated :class:`Pipeline`; raise DefenseError."""
    if isinstance(spec, Pipeline):
        return spec
    items: list[str | dict]
    if spec is None:
        items = []
    elif isinstance(spec, str):
        text = spec.strip()
        items = [] if text in ("", "none") else [s.strip() for s in text.split(",")]
        if "none" in items:
            raise DefenseError(f"defense 'none' stands alone (no defense), got it among the steps of {text!r}: leave "
                               "it out")
        if "" in items:  # "clip:C=1,,gaussian:sigma=1" or a trailing comma
            raise DefenseError(f"defense {text!r} has an empty step (two commas in a row, or one at an end): give "
                               "the steps as name:key=value, separated by one comma")
    elif isinstance(spec, dict):
        items = [spec]
    elif isinstance(spec, (list, tuple)):
        items = list(spec)
    else:
        raise DefenseError(f"defense spec must be a string, dict or list, got {spec!r}")
    steps: list[Transform] = []
    for item in items:
        step = parse_step(item)
        if isinstance(step, PerExample) and steps:
            raise DefenseError(f"defense 'per_example' must be the first step, got it after '{steps[-1].spec()}'")
        if step.placement == BEFORE and steps and steps[-1].placement == AFTER:
            # the client applies every step before the sketch, then the sketch, then the rest: as written, the
            # earlier step would run after this one, and a z= or a privacy note would read the steps out of order
            raise DefenseError(f"defense step '{step.spec()}' runs before the sketch, and '{steps[-1].spec()}' written "
                               "before it runs after the sketch: write the steps in the order they run (those "
                               "@before_sketch first)")
        steps.append(step)
    for i, step in enumerate(steps):  # once the order holds: a z= then reads the clips before it as they run
        step.check(steps[:i])
    return Pipeline(steps)


__all__ = ["Pipeline", "build"]
