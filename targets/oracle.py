"""The gradient oracle: the flat vector g = grad_w F(w, x) (length d) a client sends.

Every function takes a :class:`~targets.victim.Victim`.  ``create_graph=True``
keeps the graph so the attacker can differentiate the gradient with respect to
the dummy data x.  ``params`` (name -> tensor) evaluates at other weights
(functional call), which local-step simulation and the theory checks need.

Forward passes run with ``scaled_dot_product_attention`` on its math kernel:
the fused kernels (flash, memory-efficient) have no double backward, and the
client's and the attacker's passes should compute the same function.
"""

from __future__ import annotations

import torch
from torch.func import functional_call, grad, vmap
from torch.nn.attention import SDPBackend, sdpa_kernel

from leakattack.errors import UserError

from .victim import Victim


def num_params(victim: Victim) -> int:
    """d, the number of trainable parameters."""
    return victim.d


def param_names(victim: Victim) -> list[str]:
    """Names of the trainable parameters, in flat order."""
    return [n for n, p in victim.model.named_parameters() if p.requires_grad]


def param_slices(victim: Victim) -> dict[str, slice]:
    """Where each named parameter sits in the flat gradient vector."""
    out, start = {}, 0
    for name, p in victim.model.named_parameters():
        if p.requires_grad:
            out[name] = slice(start, start + p.numel())
            start += p.numel()
    return out


def flat_params(victim: Victim) -> torch.Tensor:
    """The weights w as one flat vector (a copy)."""
    return torch.cat([p.detach().reshape(-1) for p in victim.model.parameters() if p.requires_grad])


def unflatten(victim: Victim, flat: torch.Tensor) -> dict[str, torch.Tensor]:
    """Split a flat vector into a name -> tensor dict shaped like the parameters."""
    shapes = dict(victim.model.named_parameters())
    return {n: flat[s].view_as(shapes[n]) for n, s in param_slices(victim).items()}


def probe(victim: Victim, x: torch.Tensor, modules, record) -> torch.Tensor:
    """The output of one forward pass of x without gradients, ``record(module, inputs, output)`` called as each of
    ``modules`` runs; the hooks are removed and every buffer restored afterwards (a BatchNorm may update its
    running statistics), so probing leaves the model as it was."""
    hooks = [m.register_forward_hook(record) for m in modules]
    saved = [(b, b.detach().clone()) for b in victim.model.buffers()]
    try:
        with torch.no_grad():
            return output_at(victim, x)
    finally:
        for h in hooks:
            h.remove()
        with torch.no_grad():
            for b, v in saved:
                b.copy_(v)


def output_at(victim: Victim, x: torch.Tensor, params: dict | None = None) -> torch.Tensor:
    """The model's output on x at its weights, or at ``params`` (name -> tensor) if given."""
    try:
        with sdpa_kernel(SDPBackend.MATH):
            return victim.model(x) if params is None else functional_call(victim.model, params, (x,))
    except ValueError as err:
        if "more than 1 value per channel" not in str(err):
            raise
        raise UserError(f"BatchNorm in train mode needs more than one value per channel, and model '{victim.name}' "
                        f"has a 1x1 feature map for a batch of {x.shape[0]}: use a larger batch or images, "
                        "or --bn eval") from None


def loss_at(victim: Victim, x: torch.Tensor, y: torch.Tensor, params: dict | None = None) -> torch.Tensor:
    """F(w, x) at the model's weights, or at ``params`` (name -> tensor) if given."""
    return victim.loss(output_at(victim, x, params), y)


def check_per_example(victim: Victim) -> None:
    """Refuse a victim whose per-example gradients are not defined (an example's gradient depends on its batch)."""
    if victim.batch_statistics:
        raise UserError(f"this setting needs per-example gradients, which BatchNorm in train mode "
                        f"(model '{victim.name}') does not have: use --bn eval or a model with GroupNorm")


def flat_gradient(victim: Victim, x: torch.Tensor, y: torch.Tensor, params: dict | None = None,
                  create_graph: bool = False) -> torch.Tensor:
    """grad_w F(w, x) flattened to length d, at the model's weights or ``params``."""
    names = param_names(victim)
    if params is None:
        wrt = [p for p in victim.model.parameters() if p.requires_grad]
    else:
        # weights given as plain tensors become leaves we can differentiate by
        params = {n: (t if t.requires_grad else t.detach().requires_grad_(True)) for n, t in params.items()}
        wrt = [params[n] for n in names]
    loss = loss_at(victim, x, y, params)
    grads = torch.autograd.grad(loss, wrt, create_graph=create_graph)
    return torch.cat([g.reshape(-1) for g in grads])


def per_example_gradients(victim: Victim, x: torch.Tensor, y: torch.Tensor, params: dict | None = None,
                          create_graph: bool = False) -> torch.Tensor:
    """(B, d): one flat gradient grad_w F(w, x_i) per example (Abadi et al. 2016, Alg. 1).

    Without ``create_graph`` one vmapped pass (torch.func); with it, one autograd
    gradient per example, so the attacker can differentiate through the rows.
    With BatchNorm in train mode an example's gradient depends on the whole batch,
    so per-example gradients are not defined: a one-sentence UserError (as
    Opacus refuses BatchNorm).
    """
    check_per_example(victim)
    if create_graph:
        return torch.stack([flat_gradient(victim, x[i:i + 1], y[i:i + 1], params=params, create_graph=True)
                            for i in range(x.shape[0])])
    names = param_names(victim)
    prm = {n: t.detach() for n, t in (params or dict(victim.model.named_parameters())).items()}

    def loss(p, xi, yi):
        return victim.loss(output_at(victim, xi.unsqueeze(0), p), yi.unsqueeze(0))

    grads = vmap(grad(loss), in_dims=(None, 0, 0))({n: prm[n] for n in names}, x, y)
    return torch.cat([grads[n].reshape(x.shape[0], -1) for n in names], dim=1)


__all__ = ["num_params", "param_names", "param_slices", "flat_params", "unflatten", "output_at", "probe", "loss_at",
           "check_per_example", "flat_gradient", "per_example_gradients"]
