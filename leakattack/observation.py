"""What the attacker sees: the message y, and what the threat model grants.

The client computes g = grad_w F(w, x) (per-example rows when its channel clips
per example) and sends y = channel.send(g).  The attacker is granted the
weights w and, as the :class:`ThreatModel` says, the sketch seed, the labels and
the defense's deterministic clips; never the client's data nor a noise sample.
The client's noise comes from a CPU generator seeded with the recorded
``noise_seed``, so a run is reproducible.

An :class:`Observation` carries the message together with ``forward``, the
attacker's differentiable model of the client (data, labels -> message), and
``linear_map``, the linear part g -> message that label recovery reads.  A
protocol's message becomes an Observation through :func:`from_protocol`.
"""

from __future__ import annotations

import hashlib
import warnings
from dataclasses import dataclass, field, fields
from typing import Callable, Protocol

import torch
from torch import nn

import defenses
import targets
from targets import Victim
from targets.oracle import restart_gradients
from targets.protocols import UNKNOWN_SEED_OFFSET, ClientMessage
from targets.victim import (
    batch_in_shape,
    batchnorm_input_moments,
    batchnorm_layers,
    batchnorm_without_running_statistics,
    precision_problem,
    same_values,
)

from .channel import Channel, Transmission
from .constraints import MAX_SEED
from .data.base import outside_unit_range
from .errors import SettingWarning, UserError
from .seeds import check_seed, torch_defaults, torch_generator
from .sketch import regeneration_warning, sketch_from_description


class LinearMap(Protocol):
    """A linear map g -> message of d inputs and b outputs: a sketch, or a protocol's MessageMap."""

    @property
    def d(self) -> int: ...

    @property
    def b(self) -> int: ...

    def apply(self, v: torch.Tensor) -> torch.Tensor: ...

    def adjoint(self, u: torch.Tensor) -> torch.Tensor: ...


@dataclass(frozen=True)
class ThreatModel:
    """What the attacker knows besides the message and the weights w."""

    knows_labels: bool = False  #: the true labels (else they are recovered or optimised)
    knows_sketch: bool = True  #: the sketch seed (else R is drawn from another seed)
    knows_clip: bool = False  #: the defense's deterministic norm clips
    knows_prune: bool = False  #: the defense's pruning (its fraction p; the entries it zeroes follow from the input)
    knows_bn_stats: bool = False  #: the client's batch statistics at every BatchNorm input (the bn prior's target)

    def __post_init__(self):
        for f in fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, bool):  # a string such as "no" would read as true
                raise UserError(f"ThreatModel's {f.name} must be True or False, got {value!r}")


@dataclass
class Observation:
    """The message y and what the attacker knows about how it was made."""

    y: torch.Tensor  #: the observed message
    victim: Victim  #: the model at weights w (granted)
    forward: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  #: the attacker's model: x, labels -> message
    linear_map: LinearMap  #: g -> message, read by label recovery
    batch_size: int
    threat: ThreatModel = field(default_factory=ThreatModel)
    labels: torch.Tensor | None = None  #: the labels, when the threat model grants them
    g_norm: float = 0.0  #: ||g|| of the client's true gradient or update (for reporting only)
    defense: str = ""  #: canonical spec of the client's defense ("" for none)
    noise_seed: int | None = None  #: seed of the client's noise generator (never given to the attacker)
    extra: dict = field(default_factory=dict)  #: distortion of the message, protocol details
    #: per BatchNorm layer, the (mean, variance) of the client's batch at its input, when the threat model grants them
    bn_stats: list | None = None
    #: the victim's weights as the message was made (:func:`weights_state`; None: not recorded), which an attack
    #: checks before it reconstructs: the message is of those weights (another victim put in since is taken as is)
    weights: tuple | None = None
    #: the client's own g -> message where ``linear_map`` is the attacker's guess of it (a sketch seed the attacker
    #: does not know); None: ``linear_map`` is the client's.  The message's epsilon reads the client's R.
    client_map: LinearMap | None = None

    def weights_changed(self) -> str | None:
        """How the victim's weights differ from those the message was made at, in words (None: they do not, or
        they were not recorded)."""
        if self.weights is None or self.weights[0] != id(self.victim):  # None, or another victim put in on purpose
            return None
        state = weights_state(self.victim, digests=False)  # digested below only where a parameter was written to
        now, then = state[1], self.weights[1]
        if now == then:
            return self._buffers_changed(state[2], self.weights[2])
        if len(now) != len(then) or any(a[2] != b[2] for a, b in zip(now, then)):
            return "which weights are trainable changed"
        if any(a[3:] != b[3:] for a, b in zip(now, then)):
            return "they moved to another dtype or device"
        if len(self.weights) > 3 and weights_digests(self.victim) == self.weights[3]:
            # written since (a load_state_dict of the same weights, an optimiser step of size 0), to the same bits
            return self._buffers_changed(state[2], self.weights[2])
        return "they were changed in place (an optimiser step, load_state_dict)"

    @staticmethod
    def _buffers_changed(now: tuple, then: tuple) -> str | None:
        """The words for buffers whose values differ from those the message was made with (None: none do)."""
        before = dict(then)
        changed = [name for name, b in now if name not in before or not same_values(b, before[name])]
        changed += [name for name in before if name not in dict(now)]
        if not changed:
            return None
        return (f"its buffer{'s' if len(changed) > 1 else ''} {', '.join(repr(n) for n in changed[:3])}"
                f"{' and more' if len(changed) > 3 else ''} changed in place (BatchNorm's running statistics "
                "moved by a forward pass in train mode, load_state_dict)")

    @property
    def d(self) -> int:
        return self.linear_map.d

    @property
    def sent_map(self) -> LinearMap:
        """The client's own g -> message: :attr:`client_map` where the attacker's ``linear_map`` is a guess of it."""
        return self.client_map if self.client_map is not None else self.linear_map

    @property
    def b(self) -> int:
        return int(self.y.numel())

    @property
    def rank_bound(self) -> int:
        """The independent numbers the message can hold: b, or fewer where the client's sketch has zero rows (a
        count sketch's buckets no coordinate hashes to: ``Sketch.nonzero_rows``)."""
        rows = getattr(self.sent_map, "nonzero_rows", None)
        if rows is None or getattr(self.sent_map, "b", None) != self.b:
            return self.b
        return min(self.b, int(rows()))

    def numbers_said(self) -> str:
        """The message's b numbers in words, with the independent ones where the sketch's zero rows leave fewer."""
        kept = self.rank_bound
        return f"b = {self.b} numbers" + (f" ({kept} independent: its sketch R has {self.b - kept} zero rows)"
                                           if kept < self.b else "")

    @property
    def unknowns(self) -> int:
        """m*B: the numbers the attacker has to find (values of one example times the batch size)."""
        return self.victim.unknowns_per_example * int(self.batch_size)

    @property
    def input_shape(self) -> tuple:
        """Shape of the data the attacker reconstructs: (B, *victim.input_shape)."""
        return (self.batch_size, *self.victim.input_shape)


def weights_state(victim: Victim, digests: bool = True) -> tuple:
    """The victim's identity; per parameter: its storage, its in-place version counter (which every in-place
    change, an optimiser step or a copy_, advances), whether it is trainable, its dtype and device; a copy of
    each buffer's values (a BatchNorm's running statistics, which the gradient reads in eval mode: a probe that
    restores them advances their version counter, not their values); and a digest of each parameter's bits
    (:func:`weights_digests`; with ``digests``), which tells weights written since to the same values from weights
    changed."""
    return (id(victim), tuple((p.data_ptr(), p._version, p.requires_grad, p.dtype, p.device)
                              for p in victim.model.parameters()),
            tuple((name, b.detach().clone()) for name, b in victim.model.named_buffers()),
            *((weights_digests(victim),) if digests else ()))


def weights_digests(victim: Victim) -> tuple[bytes, ...]:
    """Per parameter of the victim, a BLAKE2b digest of its values' bytes (its shape beside them): equal digests
    are the same weights bit for bit."""
    digests = []
    for p in victim.model.parameters():
        t = p.detach()
        t = (t if t.device.type == "cpu" else t.cpu()).contiguous().reshape(-1)
        h = hashlib.blake2b(repr(tuple(p.shape)).encode(), digest_size=32)
        h.update(t.view(torch.uint8).numpy().data if t.numel() else b"")
        digests.append(h.digest())
    return tuple(digests)


def gradient_of(victim: Victim, x: torch.Tensor, labels: torch.Tensor, per_example: bool,
                create_graph: bool = False) -> torch.Tensor:
    """The flat gradient (mean loss), or the (B, d) per-example rows."""
    if per_example:
        return targets.per_example_gradients(victim, x, labels, create_graph=create_graph)
    return targets.flat_gradient(victim, x, labels, create_graph=create_graph)


class _RestartGradients(torch.autograd.Function):
    """G[r] = grad_w F(w, xs[r]) for R restarts by torch.func.vmap, with a backward pass in torch.func alone.

    Autograd through ``vmap(grad(F))`` gets the second derivatives of normalisation
    layers wrong (torch 2.14: relative errors of 1e-5 to 1e-3 with LayerNorm and
    BatchNorm), while ``vmap(grad(grad))`` gets them right: the backward pass
    differentiates <G[r], v_r> with respect to xs[r] (and soft labels) that way.
    """

    @staticmethod
    def forward(ctx, gradient, xs, labels):
        ctx.gradient = gradient
        ctx.save_for_backward(xs, labels)
        return torch.func.vmap(gradient)(xs, labels)

    @staticmethod
    def backward(ctx, dG):
        xs, labels = ctx.saved_tensors
        gradient = ctx.gradient

        def projection(x, lab, v):
            return gradient(x, lab).dot(v)

        if ctx.needs_input_grad[2]:
            dx, dlabels = torch.func.vmap(torch.func.grad(projection, argnums=(0, 1)))(xs, labels, dG)
            return None, dx, dlabels
        return None, torch.func.vmap(torch.func.grad(projection))(xs, labels, dG), None


#: layers whose second derivatives need :class:`_RestartGradients`
_NORM_LAYERS = (nn.modules.batchnorm._NormBase, nn.LayerNorm, nn.GroupNorm, nn.LocalResponseNorm)


class AttackerModel:
    """The attacker's model of the client: x, labels -> view(grad_w F(w, x)), differentiable in x.

    ``restarts(xs, labels)`` gives the messages of R independent inputs xs (R, B, ...)
    with labels (R, B[, C]) in one pass: each restart is its own batch, so BatchNorm
    batch statistics stay per restart, and row r equals ``self(xs[r], labels[r])`` up
    to round-off.  Victims whose weights all sit in Linear, Conv2d and BatchNorm layers
    run the R batches as one batch through the model and form each restart's weight
    gradients per layer (:func:`targets.oracle.restart_gradients`); others go through
    torch.func.vmap over the R gradients (whose first call imports torch._dynamo,
    seconds).
    """

    def __init__(self, victim: Victim, view):
        self.victim, self.view = victim, view
        self._norms = any(isinstance(m, _NORM_LAYERS) for m in victim.model.modules())

    def __call__(self, x: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return self.view(gradient_of(self.victim, x, labels, self.view.per_example, create_graph=True))

    def restarts(self, xs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        if self.view.per_example:  # per-example rows of each restart: one restart at a time
            return torch.stack([self(x, lab) for x, lab in zip(xs, labels)])
        victim, names = self.victim, targets.param_names(self.victim)
        g = restart_gradients(victim, xs, labels)
        if g is not None:
            return self._view(g)
        weights = {n: p.detach() for n, p in victim.model.named_parameters() if p.requires_grad}

        def gradient(x, lab):
            g = torch.func.grad(lambda w: targets.loss_at(victim, x, lab, w))(weights)
            return torch.cat([g[n].reshape(-1) for n in names])

        g = _RestartGradients.apply(gradient, xs, labels) if self._norms else torch.func.vmap(gradient)(xs, labels)
        return self._view(g)

    def _view(self, g: torch.Tensor) -> torch.Tensor:
        """The messages of the R gradient rows g (R, d)."""
        if self.view.pipeline:  # norm clips act on one gradient at a time
            return torch.stack([self.view(row) for row in g])
        return self.view(g)  # the sketch alone: batched over leading dimensions


def attacker_forward(victim: Victim, channel: Channel, threat: ThreatModel) -> AttackerModel:
    """The attacker's model of the client: x, labels -> view(grad_w F(w, x)), differentiable in x."""
    return AttackerModel(victim, channel.attacker_view(threat))


def granted_bn_stats(victim: Victim, x: torch.Tensor, threat: ThreatModel) -> list | None:
    """The client's batch statistics at every BatchNorm input (computed at w on its data), if ``threat`` grants them."""
    if not threat.knows_bn_stats or not batchnorm_layers(victim.model):
        return None
    with torch.no_grad():
        return [None if mv is None else (mv[0].detach(), mv[1].detach())
                for mv in batchnorm_input_moments(victim.model, x)]


def _mismatch(victim: Victim, x: torch.Tensor, labels: torch.Tensor, channel: Channel,
              threat: ThreatModel) -> str | None:
    """Why the client's data or channel do not fit ``victim``, in one sentence (None: they fit)."""
    if not isinstance(victim, Victim):
        return (f"the victim must be a targets.Victim (targets.get_model(...) or Victim.from_module(module, ...)), got "
                f"{type(victim).__name__}")
    if not isinstance(x, torch.Tensor) or not isinstance(labels, torch.Tensor):
        return (f"x and labels must be torch tensors (a batch of examples and its labels), got "
                f"{type(x).__name__} and {type(labels).__name__}")
    if not isinstance(channel, Channel):
        return (f"the channel must be a leakattack.Channel (Channel(sketch, defense=...)), got "
                f"{type(channel).__name__}")
    if not isinstance(threat, ThreatModel):
        return f"the threat model must be a leakattack.ThreatModel (ThreatModel(knows_labels=...)), got " \
               f"{type(threat).__name__}"
    shape = tuple(victim.input_shape)
    if x.ndim == len(shape) + 1 and x.shape[0] == 0:
        return "x holds no example (a batch of 0)"
    if tuple(x.shape) == shape:
        own = (f" (or the victim's input_shape holds a batch dimension of its own: build it with input_shape="
               f"{shape[1:]})" if batch_in_shape(shape) else "")
        return (f"x has the shape of one example, {shape}, without the batch dimension: give a batch of shape "
                f"(B, {', '.join(map(str, shape))}), e.g. x.unsqueeze(0) for one example{own}")
    if tuple(x.shape[1:]) != shape:
        return f"x holds examples of shape {tuple(x.shape[1:])}, and the victim takes {shape}"
    narrow = precision_problem(victim.model, victim.name)
    if narrow:
        return narrow
    if x.dtype != victim.dtype:
        return (f"x is {str(x.dtype)[6:]} and the victim {str(victim.dtype)[6:]}: give both one precision "
                "(victim.to(dtype=...) or x.to(...))")
    if x.device != victim.device or labels.device != victim.device:
        return (f"x is on {x.device}, the labels on {labels.device} and the victim on {victim.device}: put them on "
                "one device (victim.to(device) or x.to(device), labels.to(device))")
    if not bool(torch.isfinite(x).all()):
        return f"x holds {int((~torch.isfinite(x)).sum())} value(s) that are NaN or infinite; a client's data is finite"
    if channel.sketch.d != victim.d:
        return f"the sketch maps d = {channel.sketch.d} numbers, and the victim has d = {victim.d} weights"
    return _label_mismatch(victim, labels, x.shape[0])


def _label_mismatch(victim: Victim, labels: torch.Tensor, batch: int) -> str | None:
    """Why ``labels`` are not the labels of a batch of ``batch`` examples for ``victim``, in one sentence: a
    classifier's are class indices of shape (B,) and any integer dtype, in [0, num_classes); a regression's are
    finite real numbers, one row per example (the loss takes them in the output's shape)."""
    if labels.dtype == torch.bool or labels.is_complex():
        return f"labels must be class indices or real targets, not {str(labels.dtype)[6:]}"
    if labels.ndim < 1 or labels.shape[0] != batch:
        return (f"labels must give one label per example: x holds {batch} example(s), and labels has shape "
                f"{tuple(labels.shape)}")
    if victim.task == "regression":
        if labels.is_floating_point() and not bool(torch.isfinite(labels).all()):
            return "the regression targets hold values that are NaN or infinite"
        return None
    if labels.is_floating_point():
        shown = ", ".join(f"{v:g}" for v in labels.flatten()[:8].tolist()) + (", ..." if labels.numel() > 8 else "")
        return (f"labels must be integer class indices (a tensor of dtype torch.long), got {str(labels.dtype)[6:]} "
                f"values [{shown}]")
    if labels.ndim != 1:
        return f"labels must be one class index per example, a tensor of shape ({batch},), got shape " \
               f"{tuple(labels.shape)}"
    if not 0 <= int(labels.min()) <= int(labels.max()) < victim.num_classes:
        return f"labels must lie in [0, {victim.num_classes - 1}] for the victim's {victim.num_classes} classes, " \
               f"got {labels.tolist()}"
    return None


#: the generator of :func:`noise_share`'s draws: the defense's own, never the client's (``--noise-seed``)
NOISE_SHARE_SEED = 0x5EED
#: how many draws of the defense's noise :func:`noise_share` takes
NOISE_SHARE_DRAWS = 8


def _adds_noise(step) -> bool:
    """Whether a defense step adds noise (Gaussian or Laplace at a positive scale)."""
    return step.name in ("gaussian", "laplace") and not step.changes_nothing()


def _last_rounding(channel: Channel):
    """The stochastic rounding step whose output is the message itself (the last step after the sketch, or the last
    before an identity sketch with none after it), or None: only its grid can be read from the message, whose
    largest magnitude is the grid's end."""
    pipeline = channel.pipeline
    last = pipeline.after[-1] if pipeline.after else (
        pipeline.before[-1] if pipeline.before and channel.sketch.identity else None)
    return last if last is not None and last.rounds else None


def _noiseless(channel: Channel) -> Transmission | None:
    """The channel without its noise steps and its stochastic rounding (its clips and pruning kept): what the
    message is apart from the errors of mean 0 that a defense adds; None where no step adds noise or rounds."""
    steps = channel.pipeline.steps
    if not any(_adds_noise(step) or step.rounds for step in steps):
        return None
    kept = [step for step in steps if not (_adds_noise(step) or step.rounds)]
    return Transmission(channel.sketch, defenses.Pipeline(kept))


def share_sources(channel: Channel) -> str | None:
    """What :func:`noise_share` estimates on this channel: ``"noise"``, ``"rounding"`` (a stochastic rounding that
    ends it), ``"noise and rounding"``, or None (neither)."""
    named = [name for name, there in (("noise", any(_adds_noise(step) for step in channel.pipeline.steps)),
                                      ("rounding", _last_rounding(channel) is not None)) if there]
    return " and ".join(named) or None


def rounding_error_bound(bits: int, y: torch.Tensor) -> float:
    """The bound on the expected squared norm of the error that unbiased stochastic rounding onto 2^bits - 1
    intervals of [-s, s] adds to the vector that became ``y``, read from ``y`` alone: s = max|y| (the largest
    magnitude rounds onto the grid's end exactly), an interval of width h = 2s / (2^bits - 1), and an entry a share p
    of the way along its interval is rounded with variance h^2 p (1 - p) <= h^2 / 4.  It is tight where most entries
    lie well inside an interval (a gradient's many small entries, in the interval around 0, at few bits); entries
    spread evenly along their intervals give 2/3 of it."""
    h = 2 * float(y.detach().abs().max().double()) / (2 ** bits - 1)
    return y.numel() * h * h / 4


def zero_message(y: torch.Tensor, extra: dict, what: str) -> None:
    """Record (``message_zero``) and warn in one line where every value of the message ``y`` is 0: it then says
    only that the gradient it was made from is zero or was removed, and holds no image to rebuild."""
    if y.numel() and not bool(y.any()):
        extra["message_zero"] = True
        warnings.warn(f"every value of {what} is 0: it says only that the gradient it was made from is zero or was "
                      "removed (a capture that recorded nothing, a defense that keeps nothing), and holds no image "
                      "for an attack to rebuild", SettingWarning, stacklevel=3)


def noise_share(channel: Channel, y: torch.Tensor, gradient: torch.Tensor) -> float | None:
    """What an attacker who knows the defense (not its draws) estimates of the errors of mean 0 in message ``y``
    against the rest of it: sqrt(n / (||y||^2 - n)), where n is the mean squared norm of the channel's message for a
    zero gradient shaped like ``gradient`` (its additive noise alone, :data:`NOISE_SHARE_DRAWS` draws from
    :data:`NOISE_SHARE_SEED`, its stochastic rounding left out) plus, where the message is a stochastic rounding's
    output (:func:`_last_rounding`), :func:`rounding_error_bound`.  None where no step adds noise (Gaussian or Laplace
    at a positive scale) and no such rounding ends the channel; inf where ||y||^2 - n is below three standard deviations
    of the draws' squared norms (or not above 0), so that the message's norm cannot tell the rest from the noise's
    own spread (on digits with a per-example clip of 1, from a noise share of about 10 on: z = 0.1)."""
    sources = share_sources(channel)
    if sources is None:
        return None
    steps, rounding, noisy = channel.pipeline.steps, _last_rounding(channel), "noise" in sources
    n2 = spread = 0.0
    if noisy:
        draw = Transmission(channel.sketch, defenses.Pipeline([step for step in steps if not step.rounds]))
        rng, zero = torch_generator(NOISE_SHARE_SEED), torch.zeros_like(gradient)
        squares = torch.tensor([float(draw(zero, rng).detach().double().norm() ** 2)
                                for _ in range(NOISE_SHARE_DRAWS)], dtype=torch.float64)
        n2, spread = float(squares.mean()), float(squares.std())
    if rounding is not None:
        n2 += rounding_error_bound(rounding.params["bits"], y)
    if n2 == 0:  # a message of zeros that only a rounding made: rounding leaves 0 as it is
        return 0.0
    rest = float(y.detach().double().norm() ** 2) - n2
    return (n2 / rest) ** 0.5 if rest > 3 * spread and rest > 0 else float("inf")


def noise_share_entries(channel: Channel, y: torch.Tensor, gradient: torch.Tensor) -> dict:
    """``noise_share`` and ``noise_share_of`` of a finite message ``y`` sent through ``channel`` (:func:`noise_share`,
    from the defense and ``y`` alone; ``gradient`` gives the shape of what the channel takes), as an observation's
    extra records them; empty where no step adds noise or rounds."""
    share = noise_share(channel, y, gradient)
    return {} if share is None else {"noise_share": share, "noise_share_of": share_sources(channel)}


def unknown_seed(seed: int) -> int:
    """The seed of the attacker's R where the threat model withholds the client's (``knows_sketch=False``): another
    seed, kept in [0, 2^63 - 1]."""
    return (seed + UNKNOWN_SEED_OFFSET) % (MAX_SEED + 1)


#: the warning for one image through BatchNorm in train mode, by :func:`observe` and by a run on a message file
ONE_IMAGE_IN_TRAIN_MODE = (
    "BatchNorm in train mode (--bn train; bn_mode='train' in Python, the default of targets.get_model and "
    "Victim.from_module, whatever mode the module was in) on one image normalises it by its own statistics, which no "
    "training client does, and there neither leakattack's Inverting Gradients nor breaching's rebuilds it "
    "(docs/ig_recipe.md): expect 'not rebuilt'; --bn auto (eval for one image; bn_mode='eval') normalises by the "
    "running statistics the server holds, as the field's single-image case does")


def without_running_statistics(names: list[str], batch: int) -> str:
    """The warning for BatchNorm layers (``names``) that keep no running statistics, on a victim in eval mode: they
    normalise by the batch's own statistics whatever the mode says."""
    many = len(names) > 1
    shown = ", ".join(repr(n) for n in names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    what = ("one image by its own statistics, as train mode does, and there expect 'not rebuilt'" if batch == 1 else
            "the batch by its own statistics, as train mode does")
    return (f"BatchNorm layer{'s' if many else ''} {shown} of the victim keep{'' if many else 's'} no running "
            f"statistics (track_running_stats=False), so eval mode (--bn eval, or auto) does not apply to "
            f"{'them' if many else 'it'}: {'they normalise' if many else 'it normalises'} {what}")


def observe(victim: Victim, x: torch.Tensor, labels: torch.Tensor, channel: Channel,
            threat: ThreatModel = ThreatModel(), noise_seed: int = 0) -> Observation:
    """The client sends y = channel.send(grad_w F(w, x)); the attacker gets y and what ``threat`` grants.  Data or a
    channel that do not fit the victim are one UserError sentence, as is a ``noise_seed`` that is not an integer in
    [0, 2^63 - 1] (the range ``--noise-seed`` takes); images with values outside [0, 1] are observed with a
    SettingWarning (the attack's box, priors and metrics take [0, 1]).  Without the sketch seed
    (``threat.knows_sketch=False``) the attacker models the client with the same family's R drawn from another seed
    (:func:`unknown_seed`); the client's own R stays the observation's ``client_map``."""
    with torch_defaults():  # gradients on and float32 draws, whatever the caller's notebook set
        check_seed(noise_seed, "noise seed")
        why = _mismatch(victim, x, labels, channel, threat)
        if why:
            raise UserError(why)
        # images (C, H, W): the attack's box, its priors and the metrics take [0, 1]
        if len(victim.input_shape) == 3 and (outside := outside_unit_range(x)):
            warnings.warn(f"x holds values from {outside[0]:.4g} to {outside[1]:.4g}, and leakattack takes images in "
                          "[0, 1] (its box constraint, image priors, start and metrics assume them): pass the images "
                          "themselves and normalise inside the model (pixels 0-255: divide by 255)", SettingWarning,
                          stacklevel=2)
        victim.set_mode()  # the client's mode again: a module's own .train() since it was wrapped would turn dropout on
        if x.shape[0] == 1 and victim.bn_mode == "train" and victim.has_batchnorm:
            warnings.warn(ONE_IMAGE_IN_TRAIN_MODE, SettingWarning, stacklevel=2)
        elif victim.bn_mode == "eval" and (batchwise := batchnorm_without_running_statistics(victim.model)):
            warnings.warn(without_running_statistics(batchwise, x.shape[0]), SettingWarning, stacklevel=2)
        slow = regeneration_warning(channel.sketch, victim.dtype)
        if slow:
            warnings.warn(slow, SettingWarning, stacklevel=2)
        target = victim.target(labels)
        g = targets.flat_gradient(victim, x, target).detach()
        if not bool(torch.isfinite(g).all()):  # a broken model (negative running variance, inf weights' products)
            # BatchNorm in eval mode at its initial statistics (mean 0, variance 1) normalises nothing: a very deep
            # residual network's activations then double block after block (ResNet-1202 overflows)
            initial = [m for m in batchnorm_layers(victim.model) if not m.training and m.running_var is not None
                       and m.running_mean is not None and not bool(m.running_mean.any())
                       and bool(m.running_var.eq(1).all())]
            hint = ("; its BatchNorm layers run in eval mode at their initial statistics (mean 0, variance 1), which "
                    "normalise nothing: give --bn train or trained weights (--weights)" if initial else
                    " (check its weights, e.g. a BatchNorm running variance below zero)")
            raise UserError(f"the client's gradient holds {int((~torch.isfinite(g)).sum())} value(s) that are NaN or "
                            f"infinite at this input: the model itself does not compute{hint}, so there is no message "
                            "to attack")
        extra: dict = {}
        if channel.pipeline:
            rng = torch_generator(noise_seed)
            sent = gradient_of(victim, x, target, channel.per_example).detach()
            y = channel.send(sent, rng).detach()
            clean = channel.sketch.apply(g).detach()
            extra["message_distortion"] = float((y - clean).norm() / clean.norm().clamp_min(1e-300))
            noiseless = _noiseless(channel)
            if noiseless is not None:  # the noise against the rest of the message, which noise_share estimates
                rest = noiseless(sent, torch_generator(noise_seed)).detach()
                extra["noise_distortion"] = float((y - rest).norm() / rest.norm().clamp_min(1e-300))
        else:
            y = channel.send(g).detach()
        nonfinite = int((~torch.isfinite(y)).sum())
        if channel.pipeline and not nonfinite:  # a message with NaN or infinite values has no noise share
            extra.update(noise_share_entries(channel, y, sent))
        if nonfinite:  # the gradient is finite: the defense (its noise's scale) made them
            extra["message_nonfinite"] = nonfinite
            warnings.warn(f"the client's message holds {nonfinite} value(s) that are NaN or "
                          f"infinite after its defense '{channel.spec}': nothing can be read from them, and the "
                          "attack's labels and images are not evidence of anything", SettingWarning, stacklevel=2)
        else:
            zero_message(y, extra, f"the client's message (after its defense '{channel.spec}')" if channel.pipeline
                         else "the client's message")
        mine, client_map = channel, None
        if not threat.knows_sketch and not channel.sketch.identity:
            sketch = channel.sketch
            drawn = sketch_from_description({**sketch.describe(), "seed": unknown_seed(sketch.seed)}).to(y.device)
            mine, client_map = Channel(drawn, channel.spec), sketch
        return Observation(
            y=y, victim=victim, forward=attacker_forward(victim, mine, threat), linear_map=mine.sketch,
            batch_size=x.shape[0], threat=threat, labels=target if threat.knows_labels else None,
            g_norm=float(g.norm()), defense=channel.spec, noise_seed=int(noise_seed) if channel.pipeline else None,
            extra=extra, bn_stats=granted_bn_stats(victim, x, threat), weights=weights_state(victim),
            client_map=client_map,
        )


def from_protocol(message: ClientMessage, victim: Victim, threat: ThreatModel) -> Observation:
    """The Observation of one protocol message (``Protocol.observe``)."""
    return Observation(
        y=message.y, victim=victim, forward=message.forward, linear_map=message.linear_map,
        batch_size=message.x.shape[0], threat=threat,
        labels=victim.target(message.labels) if threat.knows_labels else None,
        g_norm=message.update_norm, extra=dict(message.info), bn_stats=granted_bn_stats(victim, message.x, threat),
    )


__all__ = ["LinearMap", "ThreatModel", "Observation", "observe", "unknown_seed",
           "noise_share", "noise_share_entries", "share_sources", "rounding_error_bound", "NOISE_SHARE_SEED",
           "NOISE_SHARE_DRAWS",
           "granted_bn_stats", "from_protocol", "attacker_forward", "gradient_of", "AttackerModel"]
