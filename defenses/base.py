"""The transform interface every defense family shares.

A transform maps a flat vector v (the client's gradient g, length d, or its
sketch y = R g, length b) to what is sent instead.  Randomness comes only from
the ``torch.Generator`` passed in (seeded, on the CPU), never from global state.
"""

from __future__ import annotations

from typing import Callable

import torch

from leakattack.errors import UserError

BEFORE = "before_sketch"
"""A step's place before the sketch: it acts on the gradient (``@before_sketch``)."""
AFTER = "after_sketch"
"""A step's place after the sketch: it acts on the sketched message (``@after_sketch``)."""
PLACEMENTS = (BEFORE, AFTER)

#: parameter name -> (type, human description of the valid range, predicate)
Schema = dict[str, tuple[type, str, Callable[..., bool]]]


class DefenseError(UserError):
    """A bad defense spec; its message is one sentence naming the key and the value."""


class Transform:
    """One step of a defense pipeline; subclasses set ``name``/``schema`` and implement ``__call__``."""

    name = "base"
    #: parameter name -> (type, human description of the valid range, predicate)
    schema: Schema = {}
    default_placement = BEFORE
    placements: tuple[str, ...] = PLACEMENTS
    #: deterministic and differentiable, bounding the norm: an attacker granted the clips models this step
    bounds_norm = False
    #: deterministic, zeroing the entries it selects and keeping the rest as they are: an attacker granted the
    #: pruning models this step
    prunes = False
    #: rounds stochastically and without bias (an error of mean 0, like noise) onto a grid ``params["bits"]`` wide
    rounds = False
    #: takes the (B, d) per-example gradients and returns one vector
    per_example = False

    def __init__(self, params: dict, placement: str):
        self.params = dict(params)
        self.placement = placement

    def __call__(self, v: torch.Tensor, gen: torch.Generator | None) -> torch.Tensor:
        raise NotImplementedError

    def changes_nothing(self) -> bool:
        """Whether this step returns every vector unchanged at its parameters (noise of scale 0, pruning nothing)."""
        return False

    def changes_nothing_at(self, n: int) -> bool:
        """Whether this step returns every vector of ``n`` entries unchanged (by default :meth:`changes_nothing`;
        pruning a fraction that rounds to no entry of n changes nothing too)."""
        return self.changes_nothing()

    def only_rescales(self, batch_size: int) -> bool:
        """Whether this step sends, for a batch of ``batch_size`` examples, the vector it gets times a positive
        factor (a clip of the whole update; each example's clip for one example), which a closed form that fits the
        gradient's scale reads through."""
        return False

    def check(self, context: list["Transform"]) -> None:
        """Checks that need the steps before this one (e.g. z needs a clip); raise DefenseError."""

    def spec(self) -> str:
        """Canonical spec text of this step (always with its placement)."""
        body = ":".join(f"{k}={_fmt(v)}" for k, v in self.params.items())
        return f"{self.name}{':' + body if body else ''}@{self.placement}"


def norm_bound(step: Transform) -> float | None:
    """The l2 norm a norm-bounding step (``bounds_norm``) bounds its output to: its ``C`` (a clip's), or None for a
    step that names no such number (the accounting then tracks no bound across it)."""
    if not step.bounds_norm:
        return None
    bound = getattr(step, "C", None)
    return bound if isinstance(bound, (int, float)) and not isinstance(bound, bool) else None


def _fmt(v) -> str:
    return repr(v) if isinstance(v, float) else str(v)


def seeded(gen: torch.Generator | None, step: str) -> torch.Generator:
    """``gen``, or one UserError sentence where a step that draws (``step``, its spec) was given none: its draws
    would come from torch's global state, neither seeded by the run nor reproducible."""
    if not isinstance(gen, torch.Generator):
        given = "no torch.Generator" if gen is None else f"{type(gen).__name__} {gen!r:.40}, not a torch.Generator"
        raise UserError(f"defense step '{step}' draws random numbers and was given {given}: pass one, "
                        "as in channel.send(g, torch.Generator().manual_seed(0))")
    return gen


def noise_like(v: torch.Tensor, gen: torch.Generator | None, kind: str, step: str) -> torch.Tensor:
    """A standard normal or standard Laplace sample shaped like v, drawn on the CPU in float64 from ``gen`` (one
    UserError sentence naming ``step``, the drawing step's spec, without one: :func:`seeded`)."""
    gen = seeded(gen, step)
    if kind == "gaussian":
        z = torch.randn(v.shape, generator=gen, dtype=torch.float64)
    else:  # Laplace(0, 1) as the difference of two Exp(1) samples
        u = torch.rand((2,) + tuple(v.shape), generator=gen, dtype=torch.float64)
        z = -torch.log1p(-u[0]) + torch.log1p(-u[1])
    return z.to(device=v.device, dtype=v.dtype)
