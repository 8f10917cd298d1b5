"""The gradient oracle: the flat vector g = grad_w F(w, x) (length d) a client sends.

``flat_gradient(..., create_graph=True)`` keeps the graph so the attacker can
differentiate the gradient with respect to the dummy data x.  ``params`` lets a
caller evaluate at other weights (functional call), which local-step simulation
and the theory checks need.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.func import functional_call


def num_params(model: nn.Module) -> int:
    """d, the number of trainable parameters."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def param_slices(model: nn.Module) -> dict[str, slice]:
    """Where each named parameter sits in the flat gradient vector."""
    out, start = {}, 0
    for name, p in model.named_parameters():
        if p.requires_grad:
            out[name] = slice(start, start + p.numel())
            start += p.numel()
    return out


def flat_params(model: nn.Module) -> torch.Tensor:
    """The weights w as one flat vector (a copy)."""
    return torch.cat([p.detach().reshape(-1) for p in model.parameters() if p.requires_grad])


def unflatten(model: nn.Module, flat: torch.Tensor) -> dict[str, torch.Tensor]:
    """Split a flat vector into a name -> tensor dict shaped like the parameters."""
    return {n: flat[s].view_as(dict(model.named_parameters())[n]) for n, s in param_slices(model).items()}


def loss_at(model: nn.Module, x: torch.Tensor, y: torch.Tensor, params: dict | None = None) -> torch.Tensor:
    """F(w, x) at the model's weights, or at ``params`` (name -> tensor) if given."""
    out = model(x) if params is None else functional_call(model, params, (x,))
    return model.loss(out, y)


def per_example_gradients(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    params: dict | None = None,
    create_graph: bool = False,
) -> torch.Tensor:
    """(B, d): one flat gradient grad_w F(w, x_i) per example (Abadi et al. 2016, Alg. 1).

    Without ``create_graph`` one vmapped pass (torch.func); with it, one autograd
    gradient per example, so the attacker can differentiate through the rows.
    """
    if create_graph:
        return torch.stack([flat_gradient(model, x[i:i + 1], y[i:i + 1], params=params, create_graph=True)
                            for i in range(x.shape[0])])
    from torch.func import grad, vmap

    prm = {n: t.detach() for n, t in (params or dict(model.named_parameters())).items()}
    names = [n for n, p in model.named_parameters() if p.requires_grad]

    def loss(p, xi, yi):
        return model.loss(functional_call(model, p, (xi.unsqueeze(0),)), yi.unsqueeze(0))

    grads = vmap(grad(loss), in_dims=(None, 0, 0))({n: prm[n] for n in names}, x, y)
    return torch.cat([grads[n].reshape(x.shape[0], -1) for n in names], dim=1)


def flat_gradient(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    params: dict | None = None,
    create_graph: bool = False,
) -> torch.Tensor:
    """grad_w F(w, x) flattened to length d, at the model's weights or ``params``."""
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    if params is None:
        wrt = [p for p in model.parameters() if p.requires_grad]
    else:
        # weights given as plain tensors become leaves we can differentiate by
        params = {n: (t if t.requires_grad else t.detach().requires_grad_(True)) for n, t in params.items()}
        wrt = [params[n] for n in names]
    loss = loss_at(model, x, y, params)
    grads = torch.autograd.grad(loss, wrt, create_graph=create_graph)
    return torch.cat([g.reshape(-1) for g in grads])
