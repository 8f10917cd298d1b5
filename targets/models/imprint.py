"""The imprint block a malicious server puts in front of a model (Fowl, Geiping, Czaja, Goldblum, Goldstein, "Robbing
the Fed: Directly Obtaining Private Data in Federated Learning with Modified Models", ICLR 2022).

K units share one linear query of the input, t(x) = <v, x> (a fixed random direction, or the mean of the input's
values: :data:`QUERIES`), each with its own threshold c_0 < c_1 < ... < c_{K-1}: h_k = slope * ReLU(t(x) - c_k).
The block adds gain / slope times the mean of the h_k to every input value and hands the result to the model, so the
model computes nearly what it computed before (the block moves each input value by less than ``gain`` times the
query's range) while the gradient of unit k's weight row is the sum of delta_i x_i over the examples whose query
exceeds c_k, and its bias gradient the sum of delta_i (delta_i = dF/dh_k, the same for every unit an example
activates, since each enters the output as 1/K of the sum). Rows k and k + 1 differ by the examples whose query lies
between c_k and c_{k+1}; where that is one example, the difference of the weight rows divided by that of the biases
is the example itself (:class:`leakattack.attacks.imprint.Imprint`). The thresholds are quantiles of a normal
distribution fitted to the query over data the server holds, so that each bin holds about the same share of the
images.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import torch
from torch import nn

#: how far the block moves the model's input: at most this times the query's range above the lowest threshold
GAIN = 1e-3
#: the units' slope, h_k = SLOPE * ReLU(t(x) - c_k); the block adds (GAIN / SLOPE) * mean_k h_k to the input, so a
#: smaller slope leaves the model's function as it is and makes the block's gradient larger against the rest of g
#: (what clipping of the whole update and noise of a fixed scale are measured against)
SLOPE = 1e-9
#: the linear query the bins cut: ``random`` (a fixed Gaussian direction of unit length, seed 0) or ``brightness``
#: (the mean of the input's values, which ties images of equal brightness, such as the digits' 17 grey levels)
QUERIES = ("random", "brightness")


def make_query(input_shape: tuple, kind: str = "random") -> torch.Tensor:
    """The query vector v (float64, C*H*W numbers): t(x) = <v, x>."""
    m = math.prod(input_shape)
    if kind == "brightness":
        return torch.full((m,), 1.0 / m, dtype=torch.float64)
    if kind != "random":
        raise ValueError(f"unknown imprint query '{kind}'; choose one of: {', '.join(QUERIES)}")
    v = torch.randn(m, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    return v / v.norm()


class ImprintBlock(nn.Module):
    """K thresholded copies of one linear query of the input, added back onto the input (module docstring)."""

    thresholds: torch.Tensor  #: c_0 < ... < c_{K-1} (a buffer: the server's, sent with the model)
    query: torch.Tensor  #: v, the query's direction (a buffer)

    def __init__(self, input_shape: tuple, query: torch.Tensor, thresholds: torch.Tensor, gain: float = GAIN,
                 slope: float = SLOPE):
        super().__init__()
        self.input_shape = tuple(int(s) for s in input_shape)
        m = math.prod(self.input_shape)
        bins = int(thresholds.numel())
        self.linear = nn.Linear(m, bins)
        self.out_weight = gain / slope
        with torch.no_grad():
            self.linear.weight.copy_(slope * query.reshape(1, m).expand(bins, m))
            self.linear.bias.copy_(-slope * thresholds.reshape(bins))
        self.register_buffer("query", query.reshape(m).clone())
        self.register_buffer("thresholds", thresholds.reshape(bins).clone())

    @property
    def bins(self) -> int:
        return int(self.linear.out_features)

    def bins_of(self, x: torch.Tensor) -> torch.Tensor:
        """The bin of each input (N, ...): k where c_k < t(x) <= c_{k+1} (the units 0..k are active), -1 below c_0."""
        t = x.flatten(1).to(torch.float64) @ self.query.to(device=x.device, dtype=torch.float64)
        return torch.bucketize(t, self.thresholds.to(t)) - 1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.linear(x.flatten(1)))
        return x + self.out_weight * h.mean(1).reshape(-1, *([1] * (x.dim() - 1)))


class Imprinted(nn.Module):
    """``model`` behind an :class:`ImprintBlock`: ``model(block(x))``."""

    def __init__(self, block: ImprintBlock, model: nn.Module):
        super().__init__()
        self.imprint = block
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(self.imprint(x))


def imprint_thresholds(public: torch.Tensor, query: torch.Tensor, bins: int) -> torch.Tensor:
    """K increasing thresholds: the lowest query value of any input in [0, 1] (so that no image falls below every
    bin), then the 1/K ... (K-1)/K quantiles of the normal distribution fitted to the query over the server's images
    ``public`` (N, ...), so that bin k (between thresholds k and k + 1, the last one open above) holds about 1/K of
    such images."""
    q = query.to(torch.float64)
    t = public.reshape(public.shape[0], -1).to(torch.float64) @ q
    sigma = float(t.std()) if t.numel() > 1 else 0.0
    sigma = sigma if sigma > 0 else float(q.abs().sum()) / 10
    normal = NormalDist(float(t.mean()), sigma)
    inner = [normal.inv_cdf(k / bins) for k in range(1, bins)]
    first = min([float(q.clamp(max=0).sum())] + inner) - sigma
    return torch.tensor([first] + inner, dtype=torch.float64)


def imprint_block(model: nn.Module) -> ImprintBlock | None:
    """The imprint block in front of ``model`` (a victim's module), or None."""
    return next((m for m in model.modules() if isinstance(m, ImprintBlock)), None)


def add_imprint(victim, bins: int, public: torch.Tensor, query: str = "random") -> None:
    """Put an imprint block of ``bins`` units on the ``query`` (:data:`QUERIES`), its thresholds fitted to
    ``public``, in front of ``victim``'s model (in place; the block takes the model's device and dtype)."""
    v = make_query(victim.input_shape, query)
    block = ImprintBlock(victim.input_shape, v, imprint_thresholds(public, v, bins))
    block.to(device=victim.device, dtype=victim.dtype)
    victim.model = Imprinted(block, victim.model)
    victim.meta = {**victim.meta, "imprint_bins": int(bins), "imprint_query": query}
    victim.set_mode()


__all__ = ["ImprintBlock", "Imprinted", "imprint_thresholds", "imprint_block", "add_imprint", "make_query", "GAIN",
           "SLOPE", "QUERIES"]
