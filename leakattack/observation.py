"""What the attacker sees: y = R(g~), g~ the client's (possibly defended) gradient.

The client: g = grad_w F(w, x) (with a ``per_example`` defense: the sum of the
clipped per-example gradients), then the defense's before-sketch steps, divided
by the batch size when clipped per example (the DP-SGD way: noise on the sum,
then the average), then y = R g~, then the after-sketch steps.

Threat model: the attacker is granted the weights w, the sketch (through its
seed) and, if the label mode says so, the labels; never the client's data nor
any noise sample.  The noise comes from a ``torch.Generator`` seeded with the
recorded ``noise_seed`` on the CPU, so a run is reproducible, but the attacker's
model of the client stays ``R(grad_w F(w, x))``: it does not model the defense.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

import targets
from targets import per_example_gradients


@dataclass
class Observation:
    """The message y and what the attacker knows about how it was made."""

    y: torch.Tensor  #: the observed (sketched, defended) message, length b
    g_norm: float  #: ||g|| of the client's true gradient (for reporting only)
    d: int
    b: int
    defense: str = ""  #: canonical spec of the defense the client applied ("" for none)
    noise_seed: int | None = None  #: seed of the client's noise generator (never given to the attacker)
    extra: dict = field(default_factory=dict)  #: ||g~|| and the distortion ||R g~ - R g|| / ||R g||, for reporting


def client_message(model, x, labels, sketch, pipeline=None, gen: torch.Generator | None = None):
    """(g, y): the client's true gradient and the message y = after(R(before(g))) it sends."""
    g = targets.flat_gradient(model, x, labels).detach()
    if not pipeline:
        return g, sketch.apply(g).detach()
    if pipeline.per_example_C is not None:
        v = pipeline.apply_before(per_example_gradients(model, x, labels), gen) / x.shape[0]
    else:
        v = pipeline.apply_before(g, gen)
    return g, pipeline.apply_after(sketch.apply(v).detach(), gen).detach()


def observe(model, x: torch.Tensor, labels: torch.Tensor, sketch, defense=None,
            noise_seed: int | None = None) -> Observation:
    """The client computes g = grad_w F(w, x) and sends y = R g (defended by ``defense``, a spec or Pipeline)."""
    if not defense:
        g, y = client_message(model, x, labels, sketch)
        return Observation(y=y, g_norm=float(g.norm()), d=sketch.d, b=sketch.b)
    import defenses

    pipeline = defenses.build(defense)
    gen = torch.Generator().manual_seed(int(noise_seed or 0))
    g, y = client_message(model, x, labels, sketch, pipeline, gen)
    clean = sketch.apply(g).detach()
    distortion = float((y - clean).norm() / clean.norm().clamp_min(1e-300))
    return Observation(y=y, g_norm=float(g.norm()), d=sketch.d, b=sketch.b, defense=pipeline.spec,
                       noise_seed=int(noise_seed or 0), extra={"message_distortion": distortion})


def attacker_simulator(model, sketch, defense=None):
    """The attacker's model of the client: R(grad_w F(w, x)), with the defense's deterministic clips if granted.

    Only ``clip`` and ``per_example`` steps are modelled (they are deterministic
    and differentiable); noise, pruning and quantisation are not: the attacker
    never sees a noise sample.  Without clips this is ``attack.gradient_simulator``.
    """
    from . import attack

    pipeline = None
    if defense:
        import defenses
        from defenses.clipping import Clip

        pipeline = defenses.build(defense)
        clips = [t for t in pipeline.steps if isinstance(t, Clip)]
    if not pipeline or not clips:
        return attack.gradient_simulator(model, sketch)
    from defenses.clipping import clip_by_norm

    def simulate(x, labels):
        per_ex = pipeline.per_example_C
        if per_ex is not None:
            v = clip_by_norm(per_example_gradients(model, x, labels, create_graph=True), per_ex).mean(0)
        else:
            v = targets.flat_gradient(model, x, labels, create_graph=True)
        for t in pipeline.before:
            if isinstance(t, Clip) and t.name == "clip":
                v = clip_by_norm(v, t.C)
        y = sketch.apply(v)
        for t in pipeline.after:
            if isinstance(t, Clip):
                y = clip_by_norm(y, t.C)
        return y

    return simulate
