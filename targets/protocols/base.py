"""The protocol skeleton (FedAvg rounds) and the message a client sends in round t.

Weights travel as one flat vector w (length d); the victim's model is only a
template evaluated with ``functional_call``.  Rounds are numbered t = 1..T and
w^t is the model the clients start round t from (w^1 = the initial weights).

Client c's data in round t, in one of two schedules:

* ``local_epochs`` = 0 (default): a batch of B images drawn from its shard with
  seed (seed, t, c); all K = ``local_steps`` local steps use that batch.
* ``local_epochs`` = E >= 1: E passes over the whole shard of n_c images (one
  local epoch per pass, as SAFL's experiments run).  Epoch e visits the shard in a
  permutation drawn with seed (seed, t, c, e) and cuts it into ceil(n_c/B)
  mini-batches, the last one smaller when B does not divide n_c (kept, not
  dropped: every image counts once per epoch); one SGD step per mini-batch, so
  K = E ceil(n_c/B) is derived and ``local_steps`` stays at 1.  The round's data
  is the shard in the first epoch's order; :func:`epoch_schedule` gives the
  positions in it of each step's mini-batch.

Client sampling is a fraction q of the N clients drawn without replacement with
seed (seed, t).  dw_c = u^K - w^t.

:meth:`Protocol.observe` produces what an attacker sees of client c in round t,
and its model of how that message was made:

    u^0 = w^t,  u^k = u^{k-1} - eta grad_w F(u^{k-1}, x_k),  message = E_t(u^K - w^t)

with x_k the step's data (the batch, or mini-batch k of the epoch schedule) and
E_t the protocol's encoder (K = 1: a scaled sketched gradient; K > 1: the
unrolled FedAvg attack of Geiping et al., "Inverting Gradients", NeurIPS 2020).

A protocol may carry a defense (``defense=``, a :mod:`defenses` spec or
pipeline; none by default) on what its clients send: the before-sketch steps
act on the gradient of every local step (with ``per_example`` on the rows of
per-example gradients, summed, the remaining before-sketch steps on the sum,
divided by the batch size), the after-sketch steps on the message in units of
the gradient (the message divided by ``message_scale(K)``, the steps, times
it again).  Their noise comes from ``noise_rng``, or else from a stream per
(seed, t, c, k).  The attacker's model leaves the defense out.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable

import torch
from torch.func import functional_call

import defenses
from leakattack.errors import UserError
from leakattack.seeds import CLIENT_BATCH, CLIENT_EPOCH, CLIENT_SAMPLING, CLIENT_SPLIT, DEFENSE_NOISE, torch_stream
from leakattack.sketch import get_sketch, is_identity, list_sketches, readout_variance

from ..oracle import flat_gradient, flat_params, loss_at, per_example_gradients, unflatten
from ..victim import Victim, batchnorm_layers, statistics_tracked

#: every protocol parameter with its default (protocol.json holds exactly these)
SPEC_DEFAULTS: dict[str, object] = {
    "clients": 10, "local_steps": 1, "local_epochs": 0, "local_lr": 0.1, "global_lr": 1.0, "batch_size": 32,
    "noniid": False, "client_fraction": None, "seed": 0,
    "sketch": "srht", "sketch_ratio": 0.1, "sketch_params": {},
    "sketch_rows": 20, "sketch_buckets": 40,
    "dp_epsilon": 0.5, "dp_delta": 1e-5, "dp_clip": 1.0,
    "server_opt": "adam", "server_lr": None, "server_beta1": 0.9, "server_beta2": 0.99, "server_eps": 1e-3,
    "second_moment": "sketch", "clip_threshold": 0.1,
    "projection_blocks": "layer", "l1_scale": 1.25, "dp_rounds": 100,
}

#: seed offset of the attacker's R_t when the sketch seed is not granted
UNKNOWN_SEED_OFFSET = 104_729


#: the spec's settings every protocol reads; each of the others is read only by the protocols naming it in ``reads``
COMMON_SETTINGS = ("clients", "local_steps", "local_epochs", "local_lr", "global_lr", "batch_size", "noniid",
                   "client_fraction", "seed")


def unread_settings(cls, given, spec: dict | None = None) -> list[str]:
    """The settings among ``given`` (names of the spec a user set) that protocol class ``cls`` does not read; an
    unsketched ``sketch`` in ``spec`` (the values) is not among them where the protocol sends the whole update."""
    kind = (spec or {}).get("sketch")
    whole = cls.sends_whole_update and kind in list_sketches() and is_identity(kind)
    return [k for k in given if k in SPEC_DEFAULTS and k not in COMMON_SETTINGS and k not in cls.reads
            and not (whole and k == "sketch")]


def round_seed(seed: int, t: int) -> int:
    """Seed of round t's sketch R_t, derived from the shared seed (Algorithm 1: 'the same seed')."""
    return (int(seed) * 1_000_003 + 7919 * int(t) + 17) % (2 ** 31 - 1)


def empty_clients_text(clients: int, images: int) -> str:
    """The refusal of a split that leaves a client without data."""
    return f"{clients} clients leave some client without data ({images} training images)"


def split_clients(labels: torch.Tensor, num_clients: int, noniid: bool, seed: int) -> list[torch.Tensor]:
    """Indices of each client's shard: iid (a random equal split) or non-iid (one or two classes each, the split of
    FedSKETCH Sec. 6, whose heterogeneous runs use FedSKETCHGATE, which is not implemented here).  More clients
    than images leave some client without data (UserError, before any split is drawn)."""
    gen = torch_stream(seed, CLIENT_SPLIT)
    n = labels.numel()
    if num_clients > n:
        raise UserError(empty_clients_text(num_clients, n))
    if not noniid:
        return [p.sort().values for p in torch.randperm(n, generator=gen).tensor_split(num_clients)]
    classes = labels.unique()
    order = classes[torch.randperm(classes.numel(), generator=gen)]
    C = classes.numel()
    # client c holds classes order[c % C] and order[(c + 1) % C] (one class when C == 1);
    # each class is split evenly among the clients holding it
    held = [{int(order[c % C]), int(order[(c + 1) % C])} for c in range(num_clients)]
    parts: list[list[torch.Tensor]] = [[] for _ in range(num_clients)]
    for k in classes.tolist():
        owners = [c for c in range(num_clients) if k in held[c]]
        idx = torch.nonzero(labels == k).flatten()
        idx = idx[torch.randperm(idx.numel(), generator=gen)]
        for c, piece in zip(owners, idx.tensor_split(len(owners)) if owners else []):
            parts[c].append(piece)
    return [torch.cat(p).sort().values if p else torch.zeros(0, dtype=torch.long) for p in parts]


def epoch_schedule(batch_size: int, perms: list[torch.Tensor]) -> list[torch.Tensor]:
    """Positions of each local step's mini-batch in the round data (the shard in the order ``perms[0]``).

    Epoch e visits the shard in the order ``perms[e]`` (a permutation of 0..n_c-1) and cuts it into
    ceil(n_c/B) consecutive mini-batches of B, the last one smaller; so every position occurs once per
    epoch, and epoch 0's mini-batches are consecutive runs of positions.
    """
    if not perms:
        return []
    where = torch.argsort(perms[0])  # shard index -> its position in the round data
    return [chunk for p in perms for chunk in where[p].split(int(batch_size))]


def minibatch(x: torch.Tensor, y: torch.Tensor, positions: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The data of one local step: all of (x, y), or the rows at ``positions``."""
    if positions is None:
        return x, y
    positions = positions.to(x.device)
    return x[positions], y[positions]


def local_sgd(grad_fn: Callable[[torch.Tensor, int], torch.Tensor], w: torch.Tensor, lr: float,
              steps: int) -> torch.Tensor:
    """u^K with u^0 = w, u^k = u^{k-1} - lr * grad_fn(u^{k-1}, k) (Algorithm 1, lines 12-14)."""
    u = w
    for k in range(steps):
        u = u - lr * grad_fn(u, k)
    return u


def evaluate(victim: Victim, w: torch.Tensor, images: torch.Tensor, labels: torch.Tensor,
             chunk: int = 512) -> tuple[float, float]:
    """(mean loss, accuracy) of the victim at flat weights w on a labelled set; BatchNorm layers that keep running
    statistics normalise by them, as a deployed model does (by each chunk's own statistics the numbers would depend
    on ``chunk``)."""
    params = unflatten(victim, w)
    total, correct = 0.0, 0
    layers = [m for m in batchnorm_layers(victim.model) if m.running_mean is not None and m.training]
    for m in layers:
        m.eval()
    try:
        with torch.no_grad():
            for i in range(0, images.shape[0], chunk):
                x, y = images[i:i + chunk], labels[i:i + chunk]
                out = functional_call(victim.model, params, (x,))
                total += float(victim.loss(out, y)) * x.shape[0]
                correct += int((out.argmax(-1) == y).sum())
    finally:
        for m in layers:
            m.train()
    n = images.shape[0]
    return total / n, correct / n


class MessageMap:
    """The linear map g -> scale * E g from a gradient to a message (label recovery reads it)."""

    def __init__(self, inner, scale: float, info: dict):
        self.inner, self.scale, self.info = inner, float(scale), info
        self.d, self.b = inner.d, inner.b

    def apply(self, v):
        return self.scale * self.inner.apply(v)

    def adjoint(self, u):
        return self.scale * self.inner.adjoint(u)

    def describe(self) -> dict:
        return {**self.info, "scale": self.scale, "encoder": self.inner.describe()}

    def readout_variance(self) -> float:
        """The inner map's (the scale cancels in a readout of <M m, y> / ||M m||^2)."""
        return readout_variance(self.inner)


@dataclass
class ClientMessage:
    """What client c sent in round t, the data it came from, and the attacker's model of it.

    ``y`` and ``forward`` are expressed in units of the message norm
    (``info["message_norm"]``), so a matching loss reads as L_R/||y||^2.
    """

    y: torch.Tensor  #: the message divided by its norm
    x: torch.Tensor  #: the client's batch (ground truth, never given to the attacker)
    labels: torch.Tensor  #: its labels
    forward: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  #: data, labels -> message (differentiable)
    linear_map: MessageMap  #: g -> message, exact for K = 1 (label recovery reads it)
    update_norm: float  #: ||dw|| of the client's true update
    info: dict = field(default_factory=dict)


def forward_seconds(message: ClientMessage, labels: torch.Tensor | None = None) -> float:
    """Measured seconds of one evaluation of the attacker's model and its gradient in x, at the true data's
    shape: what one step of an attack on the message costs at least."""
    x = message.x.detach().clone().requires_grad_(True)
    t0 = time.perf_counter()
    message.forward(x, message.labels if labels is None else labels).pow(2).sum().backward()
    assert x.grad is not None
    float(x.grad.norm())  # waits for an asynchronous device
    return time.perf_counter() - t0


class Protocol:
    """FedAvg skeleton: subclasses change what a client sends (``operator``/``encode``) and how the server applies it
    (``server``).

    The attacker's side mirrors the client's: ``attacker_update`` (dw, or the gradient for protocols
    that send gradients), ``attacker_encode`` (``encode`` without noise), ``message_operator`` and
    ``message_scale`` (the linear part label recovery reads); ``spec_error`` refuses settings the
    protocol cannot run.
    """

    name = "base"
    default_fraction = 1.0
    #: the server can decode a message back to gradient space (``decode``); the attacker may match there
    decodable = False
    #: clients compress with a sketch of leakattack.sketch (``sketch``, ``sketch_ratio`` in the spec)
    uses_sketch = False
    #: clients send their whole update, compressed by nothing (FedAvg), which is what an unsketched ``sketch``
    #: (none) says: that setting is then not named among the unread ones (:func:`unread_settings`)
    sends_whole_update = False
    #: the server carries state between rounds besides w (:meth:`server_state`; SAFL's optimiser moments)
    keeps_server_state = False
    #: clients send one (projected) gradient at w^t, not the update of K local steps (CompSGD, PrivSGD)
    sends_gradient = False
    #: the settings of the spec this protocol reads beyond the ones every protocol does (clients, local steps and
    #: epochs, learning rates, batch size, data split, client fraction, seed): a value given for another changes
    #: nothing (:func:`unread_settings`)
    reads: tuple[str, ...] = ()
    #: what a setting it reads means where it is left unset (None in the spec), as ``leakattack list --protocol``
    #: states its default: sacfl's kappa is 1, safl's the paper's tuned rate for its optimiser
    unset_means: dict[str, str] = {}
    #: a DP protocol's own epsilon (``privacy()``'s ``epsilon_paper``): its formula and where the paper takes it
    #: from, in the words the report puts beside the number; None for a protocol that records none
    paper_epsilon: str | None = None
    #: whether that epsilon is a DP bound only below 1 (Song et al.'s Lemma H.7 and Theorem 6.2:
    #: :func:`defenses.accounting.analysis.paper_epsilon_holds`), which the report then marks
    paper_epsilon_below_one = False
    #: why that epsilon bounds no message the protocol sends, where it bounds none at any value (the report marks it
    #: and says why); None where it does
    paper_epsilon_unguaranteed: str | None = None

    # the spec's parameters (SPEC_DEFAULTS), set as attributes by __init__
    clients: int
    local_steps: int
    local_epochs: int
    local_lr: float
    global_lr: float
    batch_size: int
    noniid: bool
    client_fraction: float  # None in the spec: the protocol's default_fraction
    seed: int
    sketch: str
    sketch_ratio: float
    sketch_params: dict
    sketch_rows: int
    sketch_buckets: int
    dp_epsilon: float
    dp_delta: float
    dp_clip: float
    server_opt: str
    server_lr: float | None
    server_beta1: float
    server_beta2: float
    server_eps: float
    second_moment: str
    clip_threshold: float
    projection_blocks: str
    l1_scale: float
    dp_rounds: int

    def __init__(self, victim: Victim, train_set, *, defense=None, noise_rng: torch.Generator | None = None,
                 **spec):
        self.spec = dict(spec)
        self.defense = defenses.build(defense)  #: the defense on what clients send (empty: none)
        self.noise_rng = noise_rng  #: the generator of the defense's noise (None: a stream per seed, t, c, k)
        for k, v in spec.items():
            setattr(self, k, v)
        self.victim = victim
        self.d = victim.d
        self.dtype, self.device = victim.dtype, victim.device
        self.images = train_set.images.to(device=self.device, dtype=self.dtype)
        self.labels = train_set.labels.to(self.device)
        self.shards = split_clients(train_set.labels, self.clients, self.noniid, self.seed)
        if self.client_fraction is None:
            self.client_fraction = self.default_fraction

    # -- who and what --------------------------------------------------------
    def initial_weights(self) -> torch.Tensor:
        """w^1: the template model's weights."""
        return flat_params(self.victim)

    def sampled(self, t: int) -> list[int]:
        """Clients active in round t (a fraction q, at least one, drawn without replacement)."""
        if self.client_fraction >= 1:
            return list(range(self.clients))
        k = max(1, int(round(self.client_fraction * self.clients)))
        return sorted(torch.randperm(self.clients, generator=torch_stream(self.seed, t, CLIENT_SAMPLING))[:k].tolist())

    def client_batch(self, t: int, c: int, size: int | None = None):
        """Client c's data in round t: ``size`` (default B) images of its shard, drawn with seed (seed, t, c);
        with ``local_epochs``, its whole shard in the first epoch's order (``size`` does not apply)."""
        shard = self.shards[c]
        if self.local_epochs:
            pick = shard[self.epoch_orders(t, c)[0]].to(self.device)
            return self.images[pick], self.labels[pick]
        size = min(size or self.batch_size, shard.numel())
        pick = shard[torch.randperm(shard.numel(), generator=torch_stream(self.seed, t, c, CLIENT_BATCH))[:size]]
        return self.images[pick.to(self.device)], self.labels[pick.to(self.device)]

    def epoch_orders(self, t: int, c: int) -> list[torch.Tensor]:
        """The order of client c's shard in each local epoch of round t: permutations seeded by (seed, t, c, e)."""
        n = self.shards[c].numel()
        return [torch.randperm(n, generator=torch_stream(self.seed, t, c, e, CLIENT_EPOCH))
                for e in range(self.local_epochs)]

    def schedule(self, t: int, c: int) -> list:
        """The data of each of client c's local steps in round t, as positions in its round data
        (:meth:`client_batch`); None: the step uses all of it."""
        if not self.local_epochs:
            return [None] * self.local_steps
        return epoch_schedule(self.batch_size, self.epoch_orders(t, c))

    def smallest_batch(self) -> int:
        """The fewest examples a local step of any client averages: B, cut to a shard smaller than B
        (:meth:`client_batch`), or with ``local_epochs`` an epoch's last mini-batch, n_c mod B where that is not 0
        (:func:`epoch_schedule`).  A DP protocol's noise on that mean stands for the least noise per example."""
        B = int(self.batch_size)
        return min(min(B, n % B or B) if self.local_epochs else min(B, n)
                   for n in (int(s.numel()) for s in self.shards))

    def step_count(self, c: int) -> int:
        """K of client c: ``local_steps``, or E ceil(n_c/B) with ``local_epochs``."""
        if not self.local_epochs:
            return self.local_steps
        return self.local_epochs * math.ceil(self.shards[c].numel() / self.batch_size)

    # -- client --------------------------------------------------------------
    def gradient(self, u, x, y, t, c, k, create_graph=False):
        """The local-step gradient (Algorithm 1: the plain local gradient)."""
        return flat_gradient(self.victim, x, y, params=unflatten(self.victim, u), create_graph=create_graph)

    def defended_gradient(self, u, x, y, t, c, k, create_graph=False):
        """The local-step gradient as the client uses it: ``gradient`` with the defense's before-sketch steps on it
        (per-example rows with a ``per_example`` step); ``gradient`` itself without such steps."""
        steps = self.defense.before
        if not steps:
            return self.gradient(u, x, y, t, c, k, create_graph)
        rng = self.defense_noise(t, c, k)
        if self.defense.per_example:
            g = per_example_gradients(self.victim, x, y, params=unflatten(self.victim, u), create_graph=create_graph)
        else:
            g = self.gradient(u, x, y, t, c, k, create_graph)
        for step in steps:
            g = step(g, rng)
        return g / x.shape[0] if self.defense.per_example else g

    def defense_noise(self, t: int, c: int, *keys: int) -> torch.Generator:
        """The generator of the defense's noise for client c in round t (``noise_rng`` when given)."""
        return self.noise_rng if self.noise_rng is not None else torch_stream(self.seed, t, c, *keys, DEFENSE_NOISE)

    def attacker_gradient(self, u, x, y):
        """The attacker's model of a local-step gradient: the client's rule without its noise, differentiable in x."""
        return flat_gradient(self.victim, x, y, params=unflatten(self.victim, u), create_graph=True)

    def client_update(self, w, x, y, t, c, create_graph=False) -> torch.Tensor:
        """dw_c = u^K - w^t after the K local steps of round t's schedule on the round data (x, y)."""
        steps = self.schedule(t, c)
        return local_sgd(lambda u, k: self.defended_gradient(u, *minibatch(x, y, steps[k]), t, c, k, create_graph),
                         w, self.local_lr, len(steps)) - w

    def operator(self, t: int, seed_offset: int = 0):
        """The linear map a client applies to dw in round t (None: sends dw itself)."""
        return None

    def encode(self, delta, t, op=None, c=None):
        """What client c sends for its update dw (``c`` seeds client noise where a protocol adds it)."""
        op = self.operator(t) if op is None else op
        return delta if op is None else op.apply(delta)

    def send(self, delta, t, c, op=None):
        """What client c puts on the wire for dw: ``encode``, then the defense's after-sketch steps in units of the
        gradient (on the message divided by ``message_scale(K)``)."""
        message = self.encode(delta, t, op, c=c)
        if not self.defense.after:
            return message
        scale = self.message_scale(self.step_count(c))
        rng = self.defense_noise(t, c)
        y = message / scale
        for step in self.defense.after:
            y = step(y, rng)
        return y * scale

    def attacker_update(self, w, x, y, steps: list | None = None):
        """The attacker's model of dw: the K local steps unrolled on its dummy data, differentiable in x.

        ``steps`` is the client's schedule (:meth:`schedule`; default: K steps on all of x): step k uses
        the dummy rows at the positions the client's step k used.
        """
        steps = [None] * self.local_steps if steps is None else steps
        return local_sgd(lambda u, k: self.attacker_gradient(u, *minibatch(x, y, steps[k])), w, self.local_lr,
                         len(steps)) - w

    def attacker_encode(self, delta, op):
        """The attacker's model of ``encode`` (without the client's noise)."""
        return delta if op is None else op.apply(delta)

    def message_operator(self, op, decoded: bool):
        """The linear part E of the message, g -> scale * E g, that label recovery reads."""
        return get_sketch("none", self.d, self.d) if (op is None or decoded) else op

    def message_scale(self, steps: int = 1) -> float:
        """The scale of g in the message's linear part: dw = -eta g for K = 1, dw ~ -eta K g for K steps.

        For K > 1 this is first order in eta: g is then the mean gradient at w^t over the round's
        images, and the steps' gradients at u^1 .. u^{K-1} differ from it by O(eta K).
        """
        return -self.local_lr * steps

    @classmethod
    def spec_error(cls, spec: dict) -> str | None:
        """One sentence when ``spec`` asks for something this protocol cannot do (None when it can).

        Subclasses that add checks call this one first.
        """
        if spec.get("local_epochs", 0) and spec["local_steps"] != 1:
            return (f"give --local-epochs or --local-steps, not both: with --local-epochs {spec['local_epochs']} "
                    f"the local steps are E ceil(n_c/B), one per mini-batch (got --local-steps {spec['local_steps']})")
        return None

    def decode(self, op, message):
        """The server's estimate of dw from one message (protocols with ``decodable``)."""
        raise NotImplementedError

    def floats_per_client(self) -> int:
        """Floats one sampled client uploads per round."""
        return self.d

    # -- server --------------------------------------------------------------
    def server(self, w, t, deltas: dict, messages: dict) -> torch.Tensor:
        """w^{t+1} from the round's messages (deltas are used only where the protocol has a second round)."""
        return w + self.global_lr * torch.stack(list(messages.values())).mean(0)

    def run_round(self, w: torch.Tensor, t: int, data: dict | None = None) -> tuple[torch.Tensor, dict]:
        """One round: sampled clients update and send, the server aggregates; returns w^{t+1} and stats.

        ``data`` maps a client to its round data (images, labels) in place of :meth:`client_batch`.
        """
        deltas, messages, losses = {}, {}, []
        for c in self.sampled(t):
            x, y = self.client_batch(t, c) if data is None else data[c]
            # the loss reported, not a step: no batch counted in the running statistics (a training tracks them)
            with torch.no_grad(), statistics_tracked(self.victim.model, False):
                losses.append(float(loss_at(self.victim, x, y, unflatten(self.victim, w))))
            deltas[c] = self.client_update(w, x, y, t, c).detach()
            messages[c] = self.send(deltas[c], t, c)
        w_next = self.server(w, t, deltas, messages).detach()
        return w_next, {"train_loss": sum(losses) / len(losses), "clients": sorted(deltas),
                        "floats_sent": self.floats_per_client(), "record": self.round_record()}

    def round_record(self) -> dict:
        """Numbers of the round the server just ran that train.jsonl records beside the loss (none here)."""
        return {}

    def server_state(self) -> dict | None:
        """What the server carries from the round it just ran to the next besides w (None: nothing; else a dict of
        ints and tensors that a checkpoint stores beside w, taken before the round it feeds)."""
        return None

    def load_server_state(self, state: dict | None, t: int) -> None:
        """Continue at round t from ``state``, a :meth:`server_state` taken before round t (None: round 1's fresh
        state).  ValueError, in one sentence, when it cannot be the state before round t."""
        if state is not None:
            raise ValueError(f"protocol '{self.name}' keeps no server state between rounds")

    def replay(self, t: int, on_round: Callable[[int], None] | None = None, *, start: int = 1,
               w: torch.Tensor | None = None, state: dict | None = None) -> torch.Tensor:
        """w^t by re-running rounds start..t-1 from the seeds (deterministic), from w^start (``w``; default w^1, the
        initial weights) and the server state before round ``start`` (``state``, :meth:`server_state`; None for
        round 1); ``on_round(s)`` after each round s."""
        w = self.initial_weights() if w is None else w
        self.load_server_state(state, start)
        for s in range(start, t):
            w, _ = self.run_round(w, s)
            if on_round is not None:
                on_round(s)
        return w

    def privacy(self, rounds: int) -> dict:
        """(epsilon, delta) after ``rounds`` rounds; empty for protocols without noise."""
        return {}

    def paper_bound_note(self, rounds: int) -> str | None:
        """One sentence where the paper's epsilon that :meth:`privacy` reports over rounds 1..``rounds`` lies outside
        the paper's conditions (it is no DP bound there), else None (always, for a protocol without one)."""
        return None

    # -- the attacker's view -------------------------------------------------
    def observe(self, w: torch.Tensor, t: int, c: int, *, batch_size: int | None = None,
                sketch_known: bool = True, decoded: bool = False) -> ClientMessage:
        """Client c's round-t message at weights w^t and the attacker's model of it.

        The attacker knows w^t, eta, K and (with ``sketch_known``) the round's
        sketch seed; without it, it draws R_t from another seed.  ``decoded``
        matches the server's decoding of the message (protocols with ``decodable``).
        Clients, rounds and batch size are checked by the caller.

        With ``local_epochs`` the message depends on the client's whole shard: x is
        its n_c images in the first epoch's order (``batch_size`` does not apply), the
        attacker's dummy has that shape, and ``forward`` unrolls the client's schedule
        on it, step k on the dummy rows at the positions of step k's mini-batch.  The
        attacker is thus assumed to know n_c, B and the mini-batch partition (which
        positions share a mini-batch in each epoch), not which image went where: the
        dummy rows are interchangeable within that partition, and scoring matches
        them to the images one-to-one.  With one epoch the partition is fixed by n_c
        and B alone (consecutive runs); with E > 1 the attacker is also given how the
        later epochs regroup the images, which a server does not see (an upper bound).
        """
        x, labels = self.client_batch(t, c, batch_size)
        steps = self.schedule(t, c)
        delta = self.client_update(w, x, labels, t, c).detach()
        op_true = self.operator(t)
        op_att = self.operator(t, seed_offset=0 if sketch_known else UNKNOWN_SEED_OFFSET)
        y = self.send(delta, t, c, op_true).detach()
        decoded = decoded and self.decodable
        if decoded:
            y = self.decode(op_true, y).detach()
        K, lr = len(steps), self.local_lr
        unit = float(y.norm()) or 1.0
        y = y / unit

        def forward(xd, lab):
            msg = self.attacker_encode(self.attacker_update(w, xd, lab, steps), op_att)
            return (self.decode(op_att, msg) if decoded else msg) / unit

        inner = self.message_operator(op_att, decoded)
        space = "unsketched" if decoded else "sketch" if self.decodable else "message"  # --match-space's words
        info = {"kind": f"protocol:{self.name}", "round": t, "client": c, "local_steps": K, "local_lr": lr,
                "sketch_known": sketch_known, "match_space": space,
                "message_floats": int(y.numel()), "message_norm": unit}
        if self.local_epochs:
            per_epoch = len(steps) // self.local_epochs
            info.update(local_epochs=self.local_epochs, client_batch=self.batch_size, round_images=int(x.shape[0]),
                        minibatch_sizes=[int(s.numel()) for s in steps[:per_epoch]])
        return ClientMessage(y=y, x=x, labels=labels, forward=forward,
                             linear_map=MessageMap(inner, self.message_scale(K) / unit, info),
                             update_norm=float(delta.norm()), info=info)

    def describe(self) -> dict:
        out = {"protocol": self.name, **self.spec, "client_fraction": self.client_fraction, "d": self.d,
               "floats_per_client": self.floats_per_client()}
        if self.local_epochs:  # the derived K, smallest and largest over the clients
            counts = [self.step_count(c) for c in range(self.clients)]
            out["epoch_steps"] = [min(counts), max(counts)]
        return out
