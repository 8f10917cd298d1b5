"""torchvision's ImageNet architectures, built with ``weights=None`` (never a download).

* ``resnet50`` / ``resnet101`` — ``torchvision.models.resnet50/101``: 7x7 stride-2
  stem, max-pool, bottleneck blocks [3, 4, 6, 3] / [3, 4, 23, 3].
* ``vit_b_16`` — ``torchvision.models.vit_b_16``: 16x16 patches, 12 layers, 12
  heads, dim 768, MLP 3072, image size taken from the data (square, a multiple
  of 16).  Its attention runs on PyTorch's math kernel: the fused
  (flash / memory-efficient) kernels have no double backward, which
  gradient-matching attacks need; the parameters and state_dict keys are
  torchvision's.

Images with other than 3 channels get a stem (``conv1`` / ``conv_proj``) with
that many input channels, initialised the way torchvision initialises its own.
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING

from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from leakattack.errors import UserError

if TYPE_CHECKING:
    MathAttentionViT: type  # a class built on first use by the module's __getattr__

# torchvision is imported when one of these models is built: importing it takes seconds (it loads
# torch._dynamo), which every other run would pay at start-up.


def _resnet(arch: str, in_shape, num_classes: int) -> nn.Module:
    import torchvision

    model = getattr(torchvision.models, arch)(weights=None, num_classes=num_classes)
    if in_shape[0] != 3:
        model.conv1 = nn.Conv2d(in_shape[0], 64, 7, 2, 3, bias=False)
        nn.init.kaiming_normal_(model.conv1.weight, mode="fan_out", nonlinearity="relu")
    return model


def resnet50(in_shape=(3, 224, 224), num_classes=1000):
    """torchvision's ResNet-50 (25.6 M weights with 1000 classes)."""
    return _resnet("resnet50", in_shape, num_classes)


def resnet101(in_shape=(3, 224, 224), num_classes=1000):
    """torchvision's ResNet-101 (44.5 M weights with 1000 classes)."""
    return _resnet("resnet101", in_shape, num_classes)


@functools.cache
def _math_attention_vit() -> type:
    from torchvision.models import VisionTransformer

    class MathAttentionViT(VisionTransformer):
        """torchvision's VisionTransformer whose attention runs on the twice-differentiable math kernel."""

        def forward(self, x):
            with sdpa_kernel(SDPBackend.MATH):
                return super().forward(x)

    MathAttentionViT.__module__, MathAttentionViT.__qualname__ = __name__, "MathAttentionViT"
    return MathAttentionViT


def __getattr__(name):
    if name == "MathAttentionViT":  # created with torchvision on first use; found here by pickle
        return _math_attention_vit()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def vit_b_16(in_shape=(3, 224, 224), num_classes=1000):
    """torchvision's ViT-B/16 at the data's image size (86 M weights at 224 px with 1000 classes)."""
    c, h, w = in_shape
    if h != w or h % 16:
        raise UserError(f"vit_b_16 needs square images whose side is a multiple of 16, not {h}x{w}")
    model = _math_attention_vit()(image_size=h, patch_size=16, num_layers=12, num_heads=12, hidden_dim=768,
                             mlp_dim=3072, num_classes=num_classes)
    if c != 3:
        model.conv_proj = nn.Conv2d(c, 768, 16, 16)
        nn.init.trunc_normal_(model.conv_proj.weight, std=math.sqrt(1 / (c * 16 * 16)))
        nn.init.zeros_(model.conv_proj.bias)
    return model


__all__ = ["resnet50", "resnet101", "vit_b_16", "MathAttentionViT"]
