"""BatchNorm statistics prior (Yin et al., "See through Gradients", CVPR 2021; DeepInversion's R_feature).

R_BN(x) = sum over BatchNorm layers l of ||mu_l(x) - mu_l||_2 + ||sigma^2_l(x) - sigma^2_l||_2 (the norms, not
their squares, as DeepInversion's R_feature and GradInversion's R_BN), where
mu_l(x), sigma^2_l(x) are the per-channel batch mean and (biased) variance of the dummy data's
activations at layer l's input, and mu_l, sigma^2_l are the statistics the threat model grants: the
client's own batch statistics when it grants them (``--bn-stats client``: Yin et al.'s setting, where the
client's BatchNorm statistics travel with its update), otherwise the layers' running statistics, which
are part of the model the attacker holds.  Each evaluation costs one extra forward pass of the victim on
x, with hooks on the BatchNorm layers recording their inputs.
"""

from __future__ import annotations

import torch

from targets.victim import batch_moments, batchnorm_input_moments, batchnorm_layers

from ...errors import UserError


def bn_statistics_distance(moments, granted) -> torch.Tensor:
    """sum_l ||mu_l - m_l||_2 + ||v_l - s_l||_2 over paired (mean, var) lists (Yin et al. 2021, Eq. 6); a layer
    that one side holds as None (not called by the forward pass) adds nothing."""
    total: torch.Tensor | int = 0
    for ours, theirs in zip(moments, granted, strict=True):
        if ours is None or theirs is None:
            continue
        (mu, var), (m, s) = ours, theirs
        total = total + torch.linalg.vector_norm(mu - m) + torch.linalg.vector_norm(var - s)
    return torch.as_tensor(total)  # the sum itself (a tensor) for one layer or more


class BatchNormPrior:
    """weight * R_BN(x) against the client's batch statistics (when granted) or the layers' running statistics."""

    def __init__(self, weight: float, obs=None):
        if obs is None:
            raise UserError("the bn prior needs the observation (the victim's BatchNorm layers)")
        self.weight = float(weight)
        self.victim = obs.victim
        self.layers = batchnorm_layers(self.victim.model)
        if not self.layers:
            raise UserError(f"the bn prior needs BatchNorm layers, and model '{self.victim.name}' has none")
        self.client = obs.bn_stats
        if self.client is None and any(m.running_mean is None or m.running_var is None for m in self.layers):
            raise UserError(f"the bn prior needs running statistics, and a BatchNorm layer of model "
                            f"'{self.victim.name}' keeps none")

    def granted(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """The statistics the prior pulls towards: the client's batch statistics, or each layer's running ones."""
        if self.client is not None:
            return self.client
        out = []
        for m in self.layers:
            assert m.running_mean is not None and m.running_var is not None  # refused by __init__ otherwise
            out.append((m.running_mean.detach(), m.running_var.detach()))
        return out

    def moments(self, x: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor] | None]:
        """(mean, variance) of the inputs of every BatchNorm layer during one forward pass of x (None for a layer
        the pass does not call)."""
        return batchnorm_input_moments(self.victim.model, x)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight * bn_statistics_distance(self.moments(x), self.granted())


__all__ = ["BatchNormPrior", "batch_moments", "bn_statistics_distance"]
