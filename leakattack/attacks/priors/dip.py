"""Deep image prior (Ulyanov, Vedaldi, Lempitsky, "Deep Image Prior", CVPR 2018) for gradient matching.

The dummy images are not searched pixel by pixel: x = G_theta(z), with G an untrained
convolutional decoder, z a fixed seeded noise input and theta the generator's weights,
which is what the attack optimises.  A convolutional generator reaches smooth,
natural-looking images long before it can fit noise, so below the transition (fewer
numbers in the message than unknown pixels) it picks, among the many images that
match the message, one that looks like a photograph.  Nothing is trained beforehand
and no weights are loaded: G is drawn from a seed.

G (:func:`generate`) is a decoder without BatchNorm: from z ~ U(0, 0.1) of shape
(B, width, h0, w0), the image side halved until it falls below 8 (4x4 for 32 px, 7x7 for
224 px), each level is a 3x3 convolution (reflection padding), GroupNorm (8 channels a
group at the default width), LeakyReLU(0.2) and a bilinear 2x upsampling; at full size one more 3x3
convolution and LeakyReLU, then a 1x1 convolution to the image channels and a sigmoid,
so x lies in [0, 1] (the attack's box is skipped).  All B images of a batch come from
one G with their own noise maps; each restart draws its own G, over the same z.

The weight of ``dip:W`` is the generator's width multiplier: G has round(W * 32)
channels per layer (default W = 1: 32 channels, 37k weights for a 3x32x32 image).
A narrower G is a stronger prior and a wider one fits more; W must lie in [1/64, 16]
(1 to 512 channels; W = 0 turns the prior off, as for every prior).

A prior with this hook (``parametrise``) is a re-parametrisation, not a penalty: it
adds nothing to the objective; other priors (``tv``) act on G's output.  Restarts are
still evaluated in one batched pass of the victim: each row's G runs on its own, and
the batch of images goes through the observation's ``forward.restarts``.

Optimiser: the default recipe's L-BFGS (float64) on theta is the best measured choice,
so ``dip`` changes no optimiser setting.  On lenet, srht, b/m = 0.5, photo 0: SSIM 0.91
after 3000 L-BFGS steps and 0.95 after 6000; Adam reaches 0.64 in 2000 steps with step
3e-3, stalls at 0.74 with 1e-3 (float32) and fails with 1e-2 (0.07).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ...errors import UserError
from ...seeds import torch_generator

#: channels per layer at width multiplier 1
BASE_WIDTH = 32
#: the widths a weight may give: below one channel there is no generator; beyond 512 one step costs seconds
MAX_WIDTH = 512
#: the side of the noise input is the image side halved until it would fall below this
MIN_SIDE = 4
#: LeakyReLU slope (Ulyanov et al.'s generators use 0.2)
SLOPE = 0.2
#: z ~ U(0, NOISE_SCALE) (Ulyanov et al.'s noise input: uniform, scaled by 1/10)
NOISE_SCALE = 0.1
#: channels per GroupNorm group
GROUP_SIZE = 8


def width_of(weight: float) -> int:
    """Channels per layer of the generator for the width multiplier ``weight`` (W x 32, rounded half up)."""
    return max(1, math.floor(weight * BASE_WIDTH + 0.5))


def weight_error(weight: float) -> str | None:
    """None when ``weight`` is a usable width multiplier (or 0: off), else what is wrong with it."""
    if weight == 0 or 0.5 / BASE_WIDTH <= weight <= MAX_WIDTH / BASE_WIDTH:
        return None
    return (f"the weight of prior 'dip' is the generator's width multiplier (W x {BASE_WIDTH} channels) and must "
            f"lie in [1/{2 * BASE_WIDTH}, {MAX_WIDTH // BASE_WIDTH}], got {weight:g}")


def level_sizes(height: int, width: int) -> list[tuple[int, int]]:
    """Spatial sizes of the generator's levels, from the noise input's to the image's."""
    sizes = [(height, width)]
    while min(sizes[-1]) >= 2 * MIN_SIDE:
        h, w = sizes[-1]
        sizes.append((math.ceil(h / 2), math.ceil(w / 2)))
    return sizes[::-1]


def layer_shapes(channels: int, width: int, levels: int) -> list[tuple[str, tuple[int, ...]]]:
    """(name, shape) of every generator weight, in the order of the flat vector theta."""
    shapes = []
    for i in range(levels):
        shapes += [(f"conv{i}.weight", (width, width, 3, 3)), (f"conv{i}.bias", (width,)),
                   (f"norm{i}.weight", (width,)), (f"norm{i}.bias", (width,))]
    shapes += [("last.weight", (width, width, 3, 3)), ("last.bias", (width,)),
               ("out.weight", (channels, width, 1, 1)), ("out.bias", (channels,))]
    return shapes


def generate(params: dict, z: torch.Tensor, sizes: list[tuple[int, int]]) -> torch.Tensor:
    """x = G_theta(z): the decoder of this module's docstring, z (B, width, *sizes[0]) -> (B, C, *sizes[-1])."""
    h = z
    width = z.shape[1]
    for i, size in enumerate(sizes[1:]):
        h = _conv3(h, params[f"conv{i}.weight"], params[f"conv{i}.bias"])
        h = F.group_norm(h, groups_of(width), params[f"norm{i}.weight"], params[f"norm{i}.bias"])
        h = F.leaky_relu(h, SLOPE)
        h = F.interpolate(h, size=size, mode="bilinear", align_corners=False)
    h = F.leaky_relu(_conv3(h, params["last.weight"], params["last.bias"]), SLOPE)
    return torch.sigmoid(F.conv2d(h, params["out.weight"], params["out.bias"]))


def groups_of(width: int) -> int:
    """GroupNorm groups for ``width`` channels: about GROUP_SIZE channels a group, a divisor of ``width``."""
    return math.gcd(width, width // GROUP_SIZE) if width >= GROUP_SIZE else 1


def _conv3(h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """3x3 convolution keeping the size, on reflection padding (Ulyanov et al.'s; no dark frame at the border)."""
    mode = "reflect" if min(h.shape[-2:]) > 1 else "replicate"
    return F.conv2d(F.pad(h, (1, 1, 1, 1), mode=mode), weight, bias)


def init_params(shapes, gen: torch.Generator) -> dict:
    """He-uniform weights for the LeakyReLU convolutions, zero biases, GroupNorm at identity (drawn on the CPU)."""
    params = {}
    for name, shape in shapes:
        if name.startswith("norm"):
            params[name] = torch.ones(shape) if name.endswith("weight") else torch.zeros(shape)
        elif name.endswith("bias"):
            params[name] = torch.zeros(shape)
        else:
            fan_in = math.prod(shape[1:])
            gain = 1.0 if name.startswith("out") else math.sqrt(2 / (1 + SLOPE ** 2))
            bound = gain * math.sqrt(3 / fan_in)
            params[name] = (torch.rand(shape, generator=gen) * 2 - 1) * bound
    return params


class Generators:
    """R generators of one architecture as rows theta (R, n) over one fixed noise input z.

    ``z0`` holds each restart's seeded initial weights; ``x_of(rows)`` maps rows (k, n)
    to images (k, *shape) in [0, 1], differentiably in the rows.
    """

    #: the images are a sigmoid's output: no projection onto [0, 1] is needed
    clamp = False

    def __init__(self, shape, restarts: int, seed: int, width: int, device="cpu", dtype=torch.float32):
        self.shape = tuple(shape)
        batch, channels, height, side = self.shape
        self.sizes = level_sizes(height, side)
        self.layers = layer_shapes(channels, width, len(self.sizes) - 1)
        self.numels = [math.prod(s) for _, s in self.layers]
        self.n = sum(self.numels)
        noise = torch.rand((batch, width, *self.sizes[0]), generator=torch_generator(seed)) * NOISE_SCALE
        self.z = noise.to(device=device, dtype=dtype)
        rows = [self.flatten(init_params(self.layers, torch_generator(seed + 1 + 1000 * r))) for r in range(restarts)]
        self.z0 = torch.stack(rows).to(device=device, dtype=dtype)

    def flatten(self, params: dict) -> torch.Tensor:
        """The flat vector theta of a dict of weights."""
        return torch.cat([params[name].reshape(-1) for name, _ in self.layers])

    def unflatten(self, row: torch.Tensor) -> dict:
        """The weights held by one row theta (views into it)."""
        parts = torch.split(row, self.numels)
        return {name: part.view(shape) for (name, shape), part in zip(self.layers, parts)}

    def x_of(self, rows: torch.Tensor) -> torch.Tensor:
        """Images (k, *shape) of the generators in rows (k, n)."""
        return torch.stack([generate(self.unflatten(row), self.z, self.sizes) for row in rows])


class DeepImagePrior:
    """The dummy images are G_theta(z): the attack optimises theta (see the module docstring).

    ``obs``, when given, is checked to take images: inputs (B, C, H, W).
    """

    def __init__(self, weight: float, obs=None):
        problem = weight_error(float(weight))
        if problem:
            raise UserError(problem)
        if obs is not None and len(obs.input_shape) != 4:
            raise UserError(f"the dip prior generates images (channels, height, width), and model "
                            f"'{obs.victim.name}' takes inputs of shape {tuple(obs.victim.input_shape)}")
        self.weight = float(weight)
        self.width = width_of(self.weight)

    def parametrise(self, shape, restarts: int, seed: int, device="cpu", dtype=torch.float32) -> Generators:
        """R seeded generators for dummy data of ``shape`` (B, C, H, W)."""
        return Generators(shape, restarts, seed, self.width, device, dtype)


__all__ = ["DeepImagePrior", "Generators", "generate", "level_sizes", "layer_shapes", "init_params", "width_of",
           "weight_error", "groups_of", "BASE_WIDTH", "MAX_WIDTH"]
