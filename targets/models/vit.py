"""A small Vision Transformer for small images (Dosovitskiy et al., ICLR 2021).

``vit_small``: 4x4 patches embedded to dim 192, a class token and learned
position embeddings, 6 pre-norm encoder blocks with 3 heads and an MLP of 384
(GELU), a final LayerNorm and a linear head on the class token; no dropout.
Attention is written out (softmax(q k^T / sqrt(d_h)) v) rather than through
``scaled_dot_product_attention``, whose fused kernels have no double backward,
which every gradient-matching attack needs.  Images may be non-square; the
patch must divide height and width.  Weights as in timm: linear layers
truncated-normal (std 0.02) with zero bias, class token and position
embeddings truncated-normal (std 0.02), LayerNorm 1 and 0, PyTorch's default
patch convolution.
"""

from __future__ import annotations

import torch
from torch import nn

from leakattack.errors import UserError

from .layers import activation


def _positive(name: str, v) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise UserError(f"vit {name} {v!r} is not a positive integer")
    return v


class Attention(nn.Module):
    """Multi-head self-attention with one qkv projection and an output projection."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads, self.scale = heads, (dim // heads) ** -0.5
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        att = torch.softmax((q @ k.transpose(-2, -1)) * self.scale, dim=-1)
        return self.proj((att @ v).transpose(1, 2).reshape(b, n, d))


class Block(nn.Module):
    """x + attn(LN(x)), then x + MLP(LN(x))."""

    def __init__(self, dim: int, heads: int, mlp: int, act: str):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp), activation(act), nn.Linear(mlp, dim))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class ViT(nn.Module):
    """Patch embedding, class token, position embeddings, ``depth`` blocks, LayerNorm, linear head."""

    def __init__(self, in_shape=(3, 32, 32), num_classes=10, patch=4, dim=192, depth=6, heads=3, mlp=384,
                 act="gelu"):
        super().__init__()
        c, h, w = in_shape
        for name, v in (("patch", patch), ("dim", dim), ("depth", depth), ("heads", heads), ("mlp", mlp)):
            _positive(name, v)
        if h % patch or w % patch:
            raise UserError(f"vit patch {patch} does not divide the {h}x{w} images; choose a patch that does")
        if dim % heads:
            raise UserError(f"vit dim {dim} is not a multiple of heads {heads}")
        self.patch_embed = nn.Conv2d(c, dim, patch, patch)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, (h // patch) * (w // patch) + 1, dim))
        self.blocks = nn.Sequential(*[Block(dim, heads, mlp, act) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)
        nn.init.trunc_normal_(self.cls_token, std=0.02)
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.trunc_normal_(m.weight, std=0.02)
                nn.init.zeros_(m.bias)

    def forward(self, x):
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        return self.head(self.norm(self.blocks(x))[:, 0])


def vit_small(in_shape=(3, 32, 32), num_classes=10, patch=4, dim=192, depth=6, heads=3, mlp=384, act="gelu"):
    """ViT for 32 px images: patch 4 (64 patches), dim 192, depth 6, 3 heads, MLP 384."""
    return ViT(in_shape, num_classes, patch, dim, depth, heads, mlp, act)


__all__ = ["ViT", "vit_small"]
