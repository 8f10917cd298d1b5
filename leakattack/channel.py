"""The channel: everything between the client's gradient and the wire.

A :class:`Channel` holds the defense steps placed before the sketch, the sketch
R, and the steps placed after it.  One implementation (:class:`Transmission`)
runs them, for both sides:

* the client, ``channel.send(g, rng)``: every step, noise drawn from ``rng``;
* the attacker, ``channel.attacker_view(threat)``: the deterministic,
  differentiable part the threat model lets it model (the norm clips when
  ``threat.knows_clip``; never noise, pruning or quantisation).

With a ``per_example`` step the input is the (B, d) matrix of per-example
gradients: each row is clipped, the rows are summed, the remaining before-sketch
steps run on the sum (DP-SGD adds its noise there), and the result is divided by
B (Abadi et al. 2016, Alg. 1).  Without it the input is the mean gradient.
"""

from __future__ import annotations

import torch

import defenses

from .errors import UserError
from .sketch import Sketch


class Transmission:
    """A fixed list of defense steps around the sketch, as one function of the gradient."""

    def __init__(self, sketch: Sketch, pipeline: defenses.Pipeline):
        self.sketch = sketch
        self.pipeline = pipeline

    @property
    def per_example(self) -> bool:
        """Whether the input is the (B, d) matrix of per-example gradients."""
        return self.pipeline.per_example

    def __call__(self, g: torch.Tensor, rng: torch.Generator | None = None) -> torch.Tensor:
        if not isinstance(g, torch.Tensor) or not g.is_floating_point():  # before a defense step reads it
            got = f"a tensor of dtype {str(g.dtype).removeprefix('torch.')}" if isinstance(g, torch.Tensor) else \
                type(g).__name__
            raise UserError(f"the channel takes the gradient as a floating-point torch tensor, got {got} (convert it "
                            "with torch.as_tensor(g, dtype=torch.float64))")
        if self.per_example and g.ndim != 2:
            got = f"shape {tuple(g.shape)}"
            raise UserError(f"a channel with a per_example step ('{self.pipeline.spec}') takes the (B, d) matrix of "
                            f"per-example gradients, one row per example, got {got}")
        if not self.per_example and g.ndim != 1 and self.pipeline.steps:  # each step would read rows or the whole
            raise UserError(_not_one_vector(self.pipeline.spec, g))  # as it happens to (the sketch alone: rows)
        batch = g.shape[0] if self.per_example else None
        for step in self.pipeline.before:
            g = _stepped(step, g, rng)
        if batch is not None:
            g = g / batch
        y = self.sketch.apply(g)
        for step in self.pipeline.after:
            y = _stepped(step, y, rng)
        return y


def _not_one_vector(spec: str, g: torch.Tensor) -> str:
    """The sentence for a matrix given to a channel without a per_example step, which takes the batch's mean."""
    return (f"a channel without a per_example step ('{spec}') takes the gradient as one vector of d numbers (the "
            f"batch's mean), got shape {tuple(g.shape)}: flatten it, or put per_example:C=... first in the defense to "
            "send per-example rows")


def _stepped(step, v: torch.Tensor, rng: torch.Generator | None) -> torch.Tensor:
    """``step(v, rng)``, or one UserError sentence where it does not return a tensor of the shape the next stage
    takes: ``v``'s (a per-example step: one row of it), of its dtype and device.  No device sync."""
    out = step(v, rng)
    want = tuple(v.shape[1:]) if step.per_example else tuple(v.shape)
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != want:
        got = f"shape {tuple(out.shape)}" if isinstance(out, torch.Tensor) else type(out).__name__
        raise UserError(f"defense step '{step.spec()}' returned {got} for a vector of shape {tuple(v.shape)}; a "
                        f"defense keeps the vector's shape, {want}")
    if out.dtype != v.dtype or out.device != v.device:
        got, had = str(out.dtype).removeprefix("torch."), str(v.dtype).removeprefix("torch.")
        raise UserError(f"defense step '{step.spec()}' returned a {got} tensor on {out.device} for a {had} vector on "
                        f"{v.device}; a defense keeps the vector's dtype and device")
    return out


class Channel:
    """Defenses + sketch: ``send`` for the client, ``attacker_view`` for what the attacker may model."""

    def __init__(self, sketch: Sketch, defense=None):
        if not isinstance(sketch, Sketch):
            raise UserError(f"a Channel takes a sketch, such as get_sketch('srht', victim.d, b, seed=...) or "
                            f"get_sketch('none', victim.d, victim.d) for none, got {type(sketch).__name__} {sketch!r}")
        self.sketch = sketch
        self.pipeline = defenses.build(defense)
        self._client = Transmission(sketch, self.pipeline)

    @property
    def per_example(self) -> bool:
        """Whether the client needs per-example gradients (a ``per_example`` clip)."""
        return self._client.per_example

    @property
    def spec(self) -> str:
        """The canonical defense spec ("" without defense)."""
        return self.pipeline.spec

    def send(self, g: torch.Tensor, rng: torch.Generator | None = None) -> torch.Tensor:
        """The message the client puts on the wire for its gradient g (rows of g with a per-example step).  A step
        that draws (noise, stochastic rounding) draws from ``rng`` and refuses in one UserError sentence to run
        without one (:func:`defenses.seeded`).  Without a per-example step g is one vector, the mean gradient: a
        matrix would have each step read its rows, or the whole, as it happens to (refused in one sentence)."""
        if isinstance(g, torch.Tensor) and g.is_floating_point() and not self.per_example and g.ndim != 1:
            raise UserError(_not_one_vector(self.pipeline.spec, g))  # the client sends one message of one vector
        return self._client(g, rng)

    def attacker_view(self, threat) -> Transmission:
        """The attacker's differentiable model of the channel: the clips if ``threat.knows_clip``, the pruning if
        ``threat.knows_prune``, and R."""
        if not isinstance(getattr(threat, "knows_clip", None), bool):
            raise UserError(f"attacker_view takes a ThreatModel (leakattack.ThreatModel(knows_clip=...)), got "
                            f"{type(threat).__name__} {threat!r:.60}")
        prunes = getattr(threat, "knows_prune", False) is True
        return Transmission(self.sketch, self.pipeline.modelled(threat.knows_clip, prunes))

    def describe(self) -> dict:
        return {"sketch": self.sketch.describe(), "defense": self.pipeline.describe()}


__all__ = ["Channel", "Transmission"]
