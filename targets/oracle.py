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
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, vmap
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.grad import conv2d_weight

from leakattack.errors import UserError

from .victim import Victim, kept_buffers


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


def probe(victim: Victim, x: torch.Tensor, modules, record, *, graph: bool = False) -> torch.Tensor:
    """The output of one forward pass of x (with its autograd graph when ``graph``, else without gradients),
    ``record(module, inputs, output)`` called as each of ``modules`` runs; the hooks are removed and every buffer
    restored afterwards (a BatchNorm may update its running statistics), so probing leaves the model as it was."""
    hooks = [m.register_forward_hook(record) for m in modules]
    try:
        with kept_buffers(victim.model), torch.set_grad_enabled(graph and torch.is_grad_enabled()):
            return output_at(victim, x)
    finally:
        for h in hooks:
            h.remove()


def output_at(victim: Victim, x: torch.Tensor, params: dict | None = None) -> torch.Tensor:
    """The model's output on x at its weights, or at ``params`` (name -> tensor) if given."""
    try:
        with sdpa_kernel(SDPBackend.MATH), victim.running():
            return victim.model(x) if params is None else functional_call(victim.model, params, (x,))
    except ValueError as err:
        if "more than 1 value per channel" not in str(err):
            raise
        raise UserError(f"BatchNorm in train mode needs more than one value per channel, and model '{victim.name}' "
                        f"gives a BatchNorm layer one per channel for a batch of {x.shape[0]} (a 1x1 feature map, or "
                        "one example through BatchNorm1d): use a larger batch or images, "
                        "or the running statistics (--bn eval; bn_mode='eval' in Python)") from None


def loss_at(victim: Victim, x: torch.Tensor, y: torch.Tensor, params: dict | None = None) -> torch.Tensor:
    """F(w, x) at the model's weights, or at ``params`` (name -> tensor) if given."""
    return victim.loss(output_at(victim, x, params), y)


def check_per_example(victim: Victim) -> None:
    """Refuse a victim whose per-example gradients are not defined (an example's gradient depends on its batch)."""
    if victim.batch_statistics:
        raise UserError(f"this setting needs per-example gradients, which BatchNorm in train mode "
                        f"(model '{victim.name}') does not have: use --bn eval or a model with GroupNorm")


class _Joined(torch.autograd.Function):
    """The tensors flattened and concatenated, as ``torch.cat``, with a backward pass that splits its gradient into
    views.  Differentiating that backward pass again (the products of the Jacobian of x -> R grad_w F(w, x),
    :func:`leakattack.attacks.gauss_newton.products`) then costs one concatenation of length d; through
    ``torch.cat``'s backward, which narrows each piece, it writes a zero vector of length d per parameter and adds
    them up (vit_small: 80 parameters, d = 1.8 M).  Equal to ``torch.cat``, bit for bit, in value and in the
    derivatives Gauss-Newton takes (the x-gradient of <v, g> and J e through its graph: tests/targets/test_models.py);
    usable under torch.func's transforms (``vmap``, ``grad``) as ``torch.cat`` is."""

    generate_vmap_rule = True

    @staticmethod
    def forward(*pieces: torch.Tensor) -> torch.Tensor:
        return torch.cat([t.reshape(-1) for t in pieces])

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        ctx.shapes = [t.shape for t in inputs]

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        sizes = [s.numel() for s in ctx.shapes]
        return tuple(part.view(shape) for part, shape in zip(g.split(sizes), ctx.shapes))


def joined(pieces) -> torch.Tensor:
    """The tensors flattened and concatenated into one vector, as ``torch.cat([t.reshape(-1) ...])``, whose
    backward pass is cheap to differentiate (:class:`_Joined`)."""
    return _Joined.apply(*pieces)


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
    # a weight the forward pass does not use gets a zero gradient, as the client's optimiser would send for it
    grads = torch.autograd.grad(loss, wrt, create_graph=create_graph, allow_unused=True, materialize_grads=True)
    return joined(grads)


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


#: layers whose weight gradients :func:`restart_gradients` forms per batch from their inputs and output gradients
_RESTART_LAYERS = (nn.Linear, nn.Conv2d, nn.BatchNorm1d, nn.BatchNorm2d)


def _restart_layers(model: nn.Module) -> list[nn.Module] | None:
    """The modules that own the trainable weights, when every one is a layer :func:`restart_gradients` knows (a
    Linear, a Conv2d with zero padding given as numbers, a BatchNorm); else None."""
    layers: list[nn.Module] = []
    for m in model.modules():
        own = [p for p in m.parameters(recurse=False) if p.requires_grad]
        if not own:
            continue
        if not isinstance(m, _RESTART_LAYERS):
            return None
        if isinstance(m, nn.Conv2d) and (m.padding_mode != "zeros" or isinstance(m.padding, str) or m.groups != 1):
            return None
        layers.append(m)
    return layers


def _batch_statistics(m: nn.modules.batchnorm._BatchNorm) -> bool:
    """Whether a BatchNorm normalises by the statistics of its batch (torch's own rule)."""
    return m.training or (m.running_mean is None and m.running_var is None)


def _normalised(m: nn.modules.batchnorm._BatchNorm, a: torch.Tensor, R: int) -> torch.Tensor:
    """A BatchNorm's normalised input: by each of the R batches' own statistics, or by the running ones."""
    shape = (1, -1) + (1,) * (a.dim() - 2)
    if not _batch_statistics(m):
        assert m.running_mean is not None and m.running_var is not None  # a layer in eval keeps both
        return (a - m.running_mean.view(shape)) * torch.rsqrt(m.running_var.view(shape) + m.eps)
    a = a.view(R, a.shape[0] // R, *a.shape[1:])
    dims = (1,) + tuple(range(3, a.dim()))
    var, mean = torch.var_mean(a, dim=dims, keepdim=True, correction=0)
    return ((a - mean) * torch.rsqrt(var + m.eps)).flatten(0, 1)


#: a Conv2d layer of stride 1 whose output has at least this many positions per column of its weight (in channels x
#: kernel size) forms the R batches' weight gradients with one grouped convolution, the batches as its groups; one
#: with fewer (ResNet-18's last stages: 256-512 channels at 8 x 8 and 4 x 4) unfolds its input and takes one batched
#: matrix product, which is faster there (`python benchmarks/attack_speed.py --only convgrad` times both per layer
#: shape, precision and thread count).
GROUPED_MIN_POSITIONS_PER_COLUMN = 1 / 16
#: in float64 on the CPU torch convolves a grouped convolution group by group (one small convolution per start, which
#: a second thread does not share), and the grouped way also needs this many output positions: at 8 x 8 unfold was
#: faster (64 channels x1.07-1.14, LeNet's last layer, 12 channels with a 5 x 5 kernel, x1.08-1.37 on one and two
#: threads); from 16 x 16 on the grouped way was faster or within 5 % (x0.48-1.05)
GROUPED_MIN_POSITIONS_CPU_FLOAT64 = 256


def _grouped(m: nn.Conv2d, positions: int) -> bool:
    """Whether the layer's per-batch weight gradients come from one grouped convolution (else unfold and a product).

    On the CPU a strided layer (a ResNet stage's first convolution, LeNet's 5 x 5 layers of stride 2) unfolds: there
    the grouped way was slower in 27 of the 30 cells `benchmarks/attack_speed.py --only convgrad` measured (float32
    and float64, one and two threads, 4 and 8 starts: x1.05-1.54 of unfold's time; x0.80-0.97 in the other three, all
    at 16 channels on 32 x 32).  This rule and the float64 one were measured on the CPU; a GPU keeps the positions
    rule alone."""
    w = m.weight
    cpu = w.device.type == "cpu"
    if cpu and any(s != 1 for s in m.stride):
        return False
    if cpu and w.dtype == torch.float64 and positions < GROUPED_MIN_POSITIONS_CPU_FLOAT64:
        return False
    return positions >= GROUPED_MIN_POSITIONS_PER_COLUMN * w[0].numel()


def _layer_gradients(m: nn.Module, a: torch.Tensor, dz: torch.Tensor, extra, R: int) -> dict:
    """name -> (R, *shape): the gradient of each of the layer's weights for each of the R batches, from its input
    ``a`` and the gradient ``dz`` of the loss with respect to its output (rows of the R batches in turn)."""
    out = {}
    if isinstance(m, nn.Linear):
        a, dz = a.reshape(R, -1, a.shape[-1]), dz.reshape(R, -1, dz.shape[-1])
        out["weight"] = dz.transpose(1, 2) @ a
        out["bias"] = dz.sum(1)
    elif isinstance(m, nn.Conv2d):
        assert not isinstance(m.padding, str)  # _restart_layers refuses a padding given by name
        n, co, positions = dz.shape[0], dz.shape[1], dz.shape[2] * dz.shape[3]
        per_batch = dz.view(R, n // R, co, positions)  # each batch's rows, positions flattened
        if _grouped(m, positions):
            # the R batches side by side as R channel groups: one grouped weight-gradient convolution
            B = n // R
            a = a.view(R, B, *a.shape[1:]).transpose(0, 1).reshape(B, -1, *a.shape[2:])
            dzg = per_batch.transpose(0, 1).reshape(B, R * co, *dz.shape[2:])
            out["weight"] = conv2d_weight(a, (R * co, *m.weight.shape[1:]), dzg, stride=m.stride, padding=m.padding,
                                          dilation=m.dilation, groups=R).view(R, *m.weight.shape)
        else:  # few positions: unfold, and one batched product of each batch's columns
            cols = F.unfold(a, m.kernel_size, dilation=m.dilation, padding=m.padding, stride=m.stride)
            k = cols.shape[1]
            cols = cols.view(R, n // R, k, positions).transpose(1, 2).reshape(R, k, -1)
            out["weight"] = (per_batch.transpose(1, 2).reshape(R, co, -1) @ cols.transpose(1, 2)).view(
                R, *m.weight.shape)
        out["bias"] = per_batch.sum((1, 3))
    else:  # BatchNorm: the normalised input was kept as it ran
        dz = dz.reshape(R, dz.shape[0] // R, dz.shape[1], -1)
        out["weight"] = (dz * extra.reshape(dz.shape)).sum((1, 3))
        out["bias"] = dz.sum((1, 3))
    return out


def restart_gradients(victim: Victim, xs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor | None:
    """(R, d): grad_w F(w, xs[r]) with labels[r] for R independent batches xs (R, B, ...), differentiable in xs
    (and in soft labels); None when the model has weights in a layer this does not know.

    The R batches go through the model as one batch of R*B examples: BatchNorm layers
    that normalise by batch statistics do so per batch r (their output is replaced by a
    forward hook), and each layer's weight gradient of batch r is formed from its
    inputs and output gradients (one batched matrix product per Linear layer, the way
    per-example gradients are computed in Opacus; one grouped convolution per Conv2d of
    stride 1, the R batches as its groups, or unfold and one batched product: :func:`_grouped`),
    so one autograd pass, its graph kept, serves all R.
    A layer that mixes examples in another way would break this: callers check the
    first answer against one batch at a time.
    """
    layers = _restart_layers(victim.model)
    if layers is None:
        return None
    R, B = xs.shape[0], xs.shape[1]
    owned = {id(m) for m in layers}
    norms = [m for m in victim.model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm) and id(m) not in owned]
    calls = []  #: (layer, input, output, normalised input) of each call of a layer with trainable weights

    def record(module, inputs, output):
        a, extra = inputs[0], None
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            extra = _normalised(module, a, R)
            shape = (1, -1) + (1,) * (a.dim() - 2)
            if module.affine:
                output = extra * module.weight.view(shape) + module.bias.view(shape)
            elif _batch_statistics(module):
                output = extra
        if id(module) in owned:
            calls.append((module, a, output, extra))
        return output

    hooks = [m.register_forward_hook(record) for m in layers + norms]
    try:
        out = output_at(victim, xs.reshape(R * B, *xs.shape[2:]))
    finally:
        for h in hooks:
            h.remove()
    out = out.view(R, B, *out.shape[1:])
    loss = sum(victim.loss(out[r], labels[r]) for r in range(R))
    assert isinstance(loss, torch.Tensor)  # R >= 1 restarts
    dzs = torch.autograd.grad(loss, [c[2] for c in calls], create_graph=True)
    grads: dict = {}
    for (m, a, _, extra), dz in zip(calls, dzs):
        for name, g in _layer_gradients(m, a, dz, extra, R).items():
            key = (id(m), name)
            grads[key] = g if key not in grads else grads[key] + g  # a layer called twice: its uses add up
    owners: dict[int, list] = {}  # a weight shared by several layers (tied weights) takes each one's gradient
    for m in layers:
        for name, p in m.named_parameters(recurse=False):
            owners.setdefault(id(p), []).append((id(m), name))
    rows = []
    for p in victim.model.parameters():
        if p.requires_grad:
            parts = [grads[key].reshape(R, -1) for key in owners[id(p)] if key in grads]
            rows.append(sum(parts[1:], parts[0]) if parts else xs.new_zeros(R, p.numel()))
    return torch.cat(rows, 1)


__all__ = ["num_params", "param_names", "param_slices", "flat_params", "unflatten", "output_at", "probe", "loss_at",
           "check_per_example", "flat_gradient", "per_example_gradients", "restart_gradients", "kept_buffers"]
