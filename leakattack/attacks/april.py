"""APRIL, the closed-form attack on a learnable position embedding (Lu, Huang, Jiang, Zhang, Xiao, "APRIL: Finding
the Achilles' Heel on Privacy for Vision Transformers", CVPR 2022).

For a model whose first operation is z_t = W p_t + c + E_pos[o + t] (patches p_t embedded by a convolution whose
kernel equals its stride, plus a learnable position embedding), the gradient of one example gives
G = dF/dE_pos[o:o + n] = dF/dz and dF/dW = G^T P, so the patches P solve a linear system (through G's SVD, rank
threshold ``RANK_RTOL``) and are folded back into the image; dF/dc = G^T 1 checks it.  The two embeddings are found
by a gradient check, not by name (vit_small's ``pos_embed``, torchvision vit_b_16's ``encoder.pos_embedding``).
Through a sketch only when b >= d (g is solved from y first); b < d, batches, a model without such an embedding and
a zero head are refused by :meth:`April.supports`.  The derivation, why b < d is refused, and measurements:
docs/attacks/april.md.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

import targets
from targets.oracle import probe

from ..observation import Observation
from .analytic import OneExampleAttack
from .base import AttackResult, Monitor, closed_form_result
from .labels import recover_labels, scale_unknown

#: singular values of G below this fraction of the largest count as zero
RANK_RTOL = 1e-10


@dataclass
class _Embedding:
    """Where the patch embedding and the position embedding sit in g, and the patch grid."""

    conv: nn.Conv2d
    weight: slice  #: dF/dW in g (D x C x k x k)
    bias: slice | None  #: dF/dc in g, when the embedding has a trainable bias
    pos: slice  #: dF/dE_pos in g (T x D)
    offset: int  #: E_pos rows before the first patch's (a class token's)
    tokens: int  #: T, the rows of E_pos
    grid: tuple  #: (rows, columns) of patches
    pos_name: str  #: the position embedding's parameter name (for messages)


def _is_patchify(conv: nn.Module) -> bool:
    """A convolution that embeds non-overlapping patches: kernel = stride, no padding, dilation or groups."""
    return (isinstance(conv, nn.Conv2d) and conv.kernel_size == conv.stride and conv.padding in ((0, 0), "valid")
            and conv.dilation == (1, 1) and conv.groups == 1 and conv.padding_mode == "zeros")


def _find_embedding(victim) -> tuple[_Embedding | None, str | None]:
    """The patch and position embeddings, or None and what the model lacks (docs/attacks/april.md, Finding the pieces).

    One forward and backward pass of a random input at the victim's weights, under a random linear functional of
    the output (any scalar of the output gives the identity dF/dE_pos[o + t] = dF/de_t), through
    :func:`targets.probe`, which restores the buffers afterwards.
    """
    model = victim.model
    if len(victim.input_shape) != 3:
        return None, f"inputs of shape {tuple(victim.input_shape)}, not images"
    params = {id(p): n for n, p in model.named_parameters() if p.requires_grad}
    convs = [m for m in model.modules() if _is_patchify(m)]
    if not convs:
        return None, "no patch embedding (a convolution whose kernel equals its stride)"
    gen = torch.Generator(device="cpu").manual_seed(0)
    x = torch.rand((1, *victim.input_shape), generator=gen, dtype=torch.float64).to(victim.device, victim.dtype)
    seen = {}  # the patch embeddings' outputs on x

    def record(mod, inp, out):
        if isinstance(inp[0], torch.Tensor) and inp[0].shape == x.shape and torch.equal(inp[0], x) \
                and out.requires_grad and id(mod) not in seen:
            seen[id(mod)] = out

    out = probe(victim, x, convs, record, graph=True)
    conv = next((m for m in convs if id(m) in seen and m.weight.requires_grad), None)
    if conv is None:
        return None, "no trainable patch embedding applied to the image itself"
    emb = seen[id(conv)]
    dim, n_rows, n_cols = emb.shape[1:]
    n = n_rows * n_cols
    candidates = [(name, p) for name, p in model.named_parameters()
                  if p.requires_grad and p is not conv.weight and p is not conv.bias and p.dim() >= 2
                  and p.shape[-1] == dim and p.numel() // dim >= n]
    weights = torch.randn(out.shape, generator=gen, dtype=torch.float64).to(out.device, out.dtype)
    grads = torch.autograd.grad((out * weights).sum(), [emb] + [p for _, p in candidates], allow_unused=True)
    G = grads[0].reshape(dim, n).T  # the tokens in row-major order, as flatten(2).transpose(1, 2) gives them
    if not bool(G.ne(0).any()):
        return None, ("a zero gradient at its patch embedding at these weights (a head of zeros, as torchvision "
                      "initialises vit_b_16's, passes no gradient back; set --weight-init or --weights)")
    tol = torch.finfo(victim.dtype).eps ** 0.5 * float(G.norm())
    found = None
    for (name, p), grad in zip(candidates, grads[1:]):
        rows = None if grad is None else grad.reshape(-1, dim)
        for o in range(0 if rows is None else rows.shape[0] - n + 1):
            if float((rows[o:o + n] - G).norm()) <= tol:
                found = (name, o, rows.shape[0])
                break
        if found:
            break
    if found is None:
        return None, ("no learnable position embedding added to the patch embedding's output (a fixed or "
                      "sinusoidal one is not in the gradient)")
    slices = targets.param_slices(victim)
    name, offset, tokens = found
    bias = slices[params[id(conv.bias)]] if conv.bias is not None and conv.bias.requires_grad else None
    return _Embedding(conv, slices[params[id(conv.weight)]], bias, slices[name], offset, tokens,
                      (int(n_rows), int(n_cols)), name), None


def solve_patches(G: torch.Tensor, dW: torch.Tensor) -> tuple[torch.Tensor, int]:
    """P (n x m) with G^T P = dW (G: n x D, dW: D x m) by least squares through G's SVD, singular values below
    ``RANK_RTOL`` times the largest dropped (the minimum-norm solution), and G's numerical rank."""
    U, S, Vh = torch.linalg.svd(G, full_matrices=False)  # G = U S Vh, G^T = Vh^T S U^T
    rank = int((S > RANK_RTOL * S[0]).sum()) if S.numel() and S[0] > 0 else 0
    P = U[:, :rank] @ ((Vh[:rank] @ dW) / S[:rank, None])
    return P, rank


def fold_patches(P: torch.Tensor, kernel: tuple, size: tuple) -> torch.Tensor:
    """The image (1, C, H, W) whose non-overlapping k x k patches, in row-major order and flattened as a
    convolution's weight is (channel, row, column), are the rows of P; pixels no patch covers (the margin of an
    image whose side the patch does not divide) are 0."""
    return F.fold(P.T.unsqueeze(0), tuple(size), tuple(kernel), stride=tuple(kernel))


def _relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm().clamp_min(1e-300))


class April(OneExampleAttack):
    """APRIL's closed form: the patches from the position-embedding and patch-embedding gradients."""

    name = "april"
    title = "APRIL"
    refuses_nonfinite = True  # its SVD fails on them

    def supports(self, obs: Observation) -> str | None:
        victim = obs.victim
        if refusal := self.one_example(obs):
            return refusal
        _, problem = _find_embedding(victim)
        if problem:
            return (f"APRIL reads the patches from a learnable position embedding added to a patch embedding, and "
                    f"{victim.name} has {problem}; use gradient-matching")
        M = obs.linear_map
        if M.b < M.d:
            return (f"APRIL needs the position-embedding and patch-embedding gradients, and a message of b = {M.b} "
                    f"numbers for d = {M.d} does not determine them without a model of the rest of the gradient "
                    f"(the gradients that fit it form a {M.d - M.b}-dimensional set, over which the two blocks "
                    "vary); use gradient-matching, whose Gauss-Newton steps (--refine gauss-newton, or a --time-limit "
                    "that leaves room for them) can reach the input itself where the message pins it down, or a "
                    "sketch with b >= d")
        return None

    @staticmethod
    def _labels(obs: Observation, g: torch.Tensor) -> torch.Tensor | None:
        """The granted labels, else iDLG's rule on the head's bias gradient read from g (else through the sketch)."""
        victim = obs.victim
        if obs.labels is not None or victim.task != "classification" or victim.head is None:
            return obs.labels
        bias = victim.head.bias
        if bias is not None and bias.requires_grad:
            names = {id(p): n for n, p in victim.model.named_parameters()}
            db = g[targets.param_slices(victim)[names[id(bias)]]]
            return db.argmin().reshape(1).to(victim.device)
        return recover_labels(victim, obs.linear_map, obs.y, 1, scale_unknown=scale_unknown(obs))

    def reconstruct(self, obs: Observation, *, monitor: Monitor | None = None, monitor_every: int = 10,
                    progress: bool = False) -> AttackResult:
        self.check(obs)
        t0 = time.perf_counter()
        victim = obs.victim
        emb, _ = _find_embedding(victim)
        assert emb is not None  # check() refused a victim without one
        g = self.gradient(obs)
        conv, n = emb.conv, emb.grid[0] * emb.grid[1]
        dim = conv.out_channels
        G = g[emb.pos].reshape(emb.tokens, dim)[emb.offset:emb.offset + n]
        dW = g[emb.weight].reshape(dim, -1)
        P, rank = solve_patches(G, dW)
        losses = [_relative(G.T @ P, dW)]
        if emb.bias is not None:
            losses.append(_relative(G.sum(0), g[emb.bias]))
        x = fold_patches(P, conv.kernel_size, victim.input_shape[1:]).to(victim.dtype)
        labels = self._labels(obs, g)
        tol = torch.finfo(victim.dtype).eps ** 0.5
        notes = []
        if rank < n:
            notes.append(f"the position-embedding gradient has rank {rank} for {n} patches, so the patches are not "
                         "determined: the minimum-norm solution was taken")
        H, W = victim.input_shape[1:]
        margin = H * W - emb.grid[0] * conv.kernel_size[0] * emb.grid[1] * conv.kernel_size[1]
        if margin:
            notes.append(f"{margin} pixels of each channel lie in no patch ({H}x{W} image, "
                         f"{conv.kernel_size[0]}x{conv.kernel_size[1]} patches): the model never reads them, so no "
                         "message holds them, and they come back as 0")
        if max(losses) > tol:
            which = "patch-embedding weight" if losses[0] >= max(losses) else "patch-embedding bias"
            notes.append(f"the {which} gradient does not match the position-embedding gradient (relative residual "
                         f"{max(losses):.2g}): the g read from the message is not the exact gradient of one example "
                         f"at these weights ({self.inexact_words(obs)})")
        return closed_form_result(
            x, labels, losses, notes, step=0, monitor=monitor, wall_s=time.perf_counter() - t0,
            solved=(f"{n} patches from the {emb.pos_name} and patch-embedding gradients by least squares, "
                    "the system full rank and consistent"),
            non_finite="the patches came out non-finite")


__all__ = ["April", "RANK_RTOL", "solve_patches", "fold_patches"]
