"""Additive noise: Gaussian (the Gaussian mechanism, Song et al. 2023 Lemma H.7; Algorithm 2 step 13) and Laplace."""

from __future__ import annotations

import math

from .base import BEFORE, DefenseError, Transform, noise_like, norm_bound

_nonneg = (float, "a non-negative number", lambda s: s >= 0)


class Gaussian(Transform):
    """v + N(0, sigma^2 I); ``sigma=`` absolute, or ``z=`` with sigma = z * C of the last clip before it."""

    name = "gaussian"
    schema = {"sigma": _nonneg, "z": _nonneg}

    def changes_nothing(self) -> bool:
        return all(self.params.get(k) == 0 for k in ("sigma", "z") if k in self.params)
    default_placement = BEFORE  # Algorithm 2: noise on the local gradient, then the sketch
    clip_C: float | None = None  #: C of the last clip before this step (set by check)
    clip_placement: str | None = None

    def __init__(self, params: dict, placement: str):
        super().__init__(params, placement)
        if len(self.params) != 1:  # refused where the step is made, alone (get_defense) or in a pipeline
            raise DefenseError(f"defense 'gaussian' takes exactly one of sigma= or z=, got '{self.spec()}'")

    def check(self, context):
        clips = [t for t in context if norm_bound(t) is not None]
        self.clip_C = norm_bound(clips[-1]) if clips else None
        self.clip_placement = clips[-1].placement if clips else None
        if "z" in self.params and self.clip_C is None:
            raise DefenseError(f"defense 'gaussian' with z={self.params['z']} needs a clip (clip:C=... or "
                               "per_example:C=...) before it")
        if not math.isfinite(self.sigma):
            raise DefenseError(f"defense 'gaussian': z={self.params['z']:g} times the clip's C={self.clip_C:g} is "
                               "sigma = inf, beyond the largest float: give a smaller z or C")

    @property
    def sigma(self) -> float:
        if "sigma" in self.params:
            return self.params["sigma"]
        if self.clip_C is None:  # a step made alone (get_defense), not yet checked against the steps before it
            raise DefenseError(f"defense 'gaussian' with z={self.params['z']} has no clip to scale it: build it after "
                               "a clip, as in defenses.build('clip:C=1,gaussian:z=1')")
        return self.params["z"] * self.clip_C

    def __call__(self, v, gen):
        return v + self.sigma * noise_like(v, gen, "gaussian", self.spec()) if self.sigma > 0 else v


class Laplace(Transform):
    """v + Laplace(0, b) entrywise."""

    name = "laplace"
    schema = {"b": _nonneg}

    def changes_nothing(self) -> bool:
        return self.params["b"] == 0

    def __call__(self, v, gen):
        b = self.params["b"]
        return v + b * noise_like(v, gen, "laplace", self.spec()) if b > 0 else v
