"""Two small convolutional networks of a user's own with units whose derivative jumps (ReLU, max pooling).

`leakattack run --model examples/relu_models.py:ReluCNN` builds one; with no recipe of
its own (`leakattack_recipe`), the attack takes the `ig` recipe for them by their
units (docs/victims.md, "Your own model").  `scripts/recipe_by_units.py` attacks both
with each recipe.
"""

import math

from torch import nn


class ReluCNN(nn.Sequential):
    """Two 3x3 convolutions (16 channels, stride 2) with ReLU, then one linear layer."""

    def __init__(self, in_shape=(3, 32, 32), num_classes=10):
        c, h, w = in_shape
        # each padded stride-2 convolution halves a side rounding up: 30 -> 15 -> 8
        super().__init__(nn.Conv2d(c, 16, 3, stride=2, padding=1), nn.ReLU(),
                         nn.Conv2d(16, 16, 3, stride=2, padding=1), nn.ReLU(),
                         nn.Flatten(), nn.Linear(16 * math.ceil(h / 4) * math.ceil(w / 4), num_classes))


class PooledCNN(nn.Sequential):
    """A 3x3 convolution (8 channels) with GroupNorm and SiLU, a depthwise 3x3 convolution, 2x2 max pooling, then
    one linear layer: smooth activations, and the max pooling's jumps."""

    def __init__(self, in_shape=(3, 32, 32), num_classes=10):
        c, h, w = in_shape
        super().__init__(nn.Conv2d(c, 8, 3, padding=1), nn.GroupNorm(2, 8), nn.SiLU(),
                         nn.Conv2d(8, 8, 3, padding=1, groups=8), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(8 * (h // 2) * (w // 2), num_classes))
