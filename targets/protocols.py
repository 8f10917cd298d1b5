"""Federated protocols whose client messages are observed: a registry in the style of ``get_model``.

``get_protocol(name, model, train_set, **spec)`` / ``list_protocols()``.  Weights
travel as one flat vector w (length d); the model is only a template evaluated
with ``functional_call``.  Rounds are numbered t = 1..T and w^t is the model the
clients start round t from (w^1 = the initial weights).

* ``fedavg``            local SGD, K steps, plain averaging: w^{t+1} = w^t + eta_g mean_c dw_c.
* ``sketched``          Song et al. 2023, Algorithm 1: a fresh R_t per round from the shared
                        seed (``round_seed``), clients send R_t dw_c, the server averages and
                        scales by eta_g, clients de-sketch with R_t^T.
* ``sketched-dp``       Algorithm 2: as ``sketched`` with Gaussian noise N(0, sigma^2 I) added to
                        the gradient at every local step; sigma from (eps^, delta^) by Lemma H.7
                        with sensitivity l_c (Lemma H.8), l_c enforced by per-example clipping.
* ``fedsketch-privix``  FedSKETCH (paper 001, Algorithm 5): count-sketch table t x m of dw_c,
                        the server averages the tables, the update is PRIVIX (median un-sketch).
* ``fedsketch-heaprix`` the same with HEAPRIX: a second round in which the sampled clients
                        send their exact values on HEAVYMIX's Top_m (m floats), then
                        Phi = v_Top + PRIVIX(S - S(v_Top)).

Client c's data in round t (Algorithm 1 uses the full local gradient): a batch of
B images drawn from its shard with seed (seed, t, c); all K local steps use that
batch.  Client sampling (FedSKETCH: half the devices per round) is a fraction q
of the N clients drawn without replacement with seed (seed, t).  dw_c = u^K - w^t,
so FedSKETCH's S(x^0 - x^tau) is sent here with the opposite sign and added.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch.func import functional_call

from .fedsketch import CountSketchTable, heavymix_support, privix
from .oracle import flat_gradient, flat_params, loss_at, num_params, per_example_gradients, unflatten
from leakattack.registry import Registry
from leakattack.sketch import make_sketch, sketch_dim

_PROTOCOLS = Registry("protocol")

#: every protocol parameter with its default (protocol.json holds exactly these)
SPEC_DEFAULTS = {
    "clients": 10, "local_steps": 1, "local_lr": 0.1, "global_lr": 1.0, "batch_size": 32,
    "noniid": False, "client_fraction": None, "seed": 0,
    "sketch": "srht", "sketch_ratio": 0.1, "sketch_params": {},
    "sketch_rows": 20, "sketch_buckets": 40,
    "dp_epsilon": 0.5, "dp_delta": 1e-5, "dp_clip": 1.0,
}


def register_protocol(name: str):
    """Class decorator adding a protocol to the registry under ``name``."""

    def deco(cls):
        cls.name = name
        return _PROTOCOLS.register(name, cls)

    return deco


def list_protocols() -> list[str]:
    """Names accepted by :func:`get_protocol`."""
    return _PROTOCOLS.names()


def get_protocol(name: str, model, train_set, **spec) -> "Protocol":
    """Build protocol ``name`` over ``model`` (template) and the training ImageSet ``train_set``."""
    cls = _PROTOCOLS.get(name)
    unknown = set(spec) - set(SPEC_DEFAULTS)
    if unknown:
        raise ValueError(f"unknown protocol parameter(s): {', '.join(sorted(unknown))}")
    return cls(model, train_set, **{**SPEC_DEFAULTS, **spec})


# ---------------------------------------------------------------------------
# pure pieces
# ---------------------------------------------------------------------------

def round_seed(seed: int, t: int) -> int:
    """Seed of round t's sketch R_t, derived from the shared seed (Algorithm 1: 'the same seed')."""
    return (int(seed) * 1_000_003 + 7919 * int(t) + 17) % (2 ** 31 - 1)


def _gen(*keys) -> torch.Generator:
    """A CPU generator seeded by a tuple of integers."""
    h = 0
    for k in keys:
        h = (h * 1_000_003 + int(k) + 1) % (2 ** 61 - 1)
    return torch.Generator().manual_seed(h)


def split_clients(labels: torch.Tensor, num_clients: int, noniid: bool, seed: int) -> list[torch.Tensor]:
    """Indices of each client's shard: iid (a random equal split) or non-iid (one or two classes each, FedSKETCH Sec. 6)."""
    gen = _gen(seed, 101)
    n = labels.numel()
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


def local_sgd(grad_fn: Callable[[torch.Tensor, int], torch.Tensor], w: torch.Tensor, lr: float, steps: int) -> torch.Tensor:
    """u^K with u^0 = w, u^k = u^{k-1} - lr * grad_fn(u^{k-1}, k) (Algorithm 1, lines 12-14)."""
    u = w
    for k in range(steps):
        u = u - lr * grad_fn(u, k)
    return u


def per_example_clipped_mean(model, u: torch.Tensor, x: torch.Tensor, y: torch.Tensor, clip: float,
                             create_graph: bool = False) -> torch.Tensor:
    """(1/B) sum_i g_i min(1, C/||g_i||): a mean gradient of norm <= C = l_c (Lemma H.8's bound)."""
    from defenses.clipping import clip_by_norm

    rows = per_example_gradients(model, x, y, params=unflatten(model, u), create_graph=create_graph)
    return clip_by_norm(rows, clip).mean(0)


# ---------------------------------------------------------------------------
# protocols
# ---------------------------------------------------------------------------

class Protocol:
    """FedAvg skeleton: subclasses change what a client sends (``encode``) and how the server applies it (``server``)."""

    name = "base"

    def __init__(self, model, train_set, **spec):
        self.spec = dict(spec)
        for k, v in spec.items():
            setattr(self, k, v)
        self.model = model
        self.d = num_params(model)
        p = next(model.parameters())
        self.dtype, self.device = p.dtype, p.device
        self.images = train_set.images.to(device=self.device, dtype=self.dtype)
        self.labels = train_set.labels.to(self.device)
        self.shards = split_clients(train_set.labels, self.clients, self.noniid, self.seed)
        if self.client_fraction is None:
            self.client_fraction = self.default_fraction

    default_fraction = 1.0

    # -- who and what --------------------------------------------------------
    def initial_weights(self) -> torch.Tensor:
        """w^1: the template model's weights."""
        return flat_params(self.model)

    def sampled(self, t: int) -> list[int]:
        """Clients active in round t (a fraction q, at least one, drawn without replacement)."""
        if self.client_fraction >= 1:
            return list(range(self.clients))
        k = max(1, int(round(self.client_fraction * self.clients)))
        return sorted(torch.randperm(self.clients, generator=_gen(self.seed, t, 202))[:k].tolist())

    def client_batch(self, t: int, c: int, size: int | None = None):
        """Client c's data in round t: ``size`` (default B) images of its shard, drawn with seed (seed, t, c)."""
        shard = self.shards[c]
        size = min(size or self.batch_size, shard.numel())
        pick = shard[torch.randperm(shard.numel(), generator=_gen(self.seed, t, c, 303))[:size]].to(self.device)
        return self.images[pick], self.labels[pick]

    # -- client --------------------------------------------------------------
    def gradient(self, u, x, y, t, c, k, create_graph=False):
        """The local-step gradient (Algorithm 1: the plain local gradient)."""
        return flat_gradient(self.model, x, y, params=unflatten(self.model, u), create_graph=create_graph)

    def client_update(self, w, x, y, t, c, create_graph=False) -> torch.Tensor:
        """dw_c = u^K - w^t after K local steps on (x, y)."""
        return local_sgd(lambda u, k: self.gradient(u, x, y, t, c, k, create_graph), w, self.local_lr,
                         self.local_steps) - w

    def operator(self, t: int, seed_offset: int = 0):
        """The linear map a client applies to dw in round t (None: sends dw itself)."""
        return None

    def encode(self, delta, t, op=None):
        """What the client sends for its update dw."""
        op = self.operator(t) if op is None else op
        return delta if op is None else op.apply(delta)

    def floats_per_client(self) -> int:
        """Floats one sampled client uploads per round."""
        return self.d

    # -- server --------------------------------------------------------------
    def server(self, w, t, deltas: dict, messages: dict) -> torch.Tensor:
        """w^{t+1} from the round's messages (deltas are used only where the protocol has a second round)."""
        return w + self.global_lr * torch.stack(list(messages.values())).mean(0)

    def run_round(self, w: torch.Tensor, t: int) -> tuple[torch.Tensor, dict]:
        """One round: sampled clients update and send, the server aggregates; returns w^{t+1} and stats."""
        deltas, messages, losses = {}, {}, []
        for c in self.sampled(t):
            x, y = self.client_batch(t, c)
            with torch.no_grad():
                losses.append(float(loss_at(self.model, x, y, unflatten(self.model, w))))
            deltas[c] = self.client_update(w, x, y, t, c).detach()
            messages[c] = self.encode(deltas[c], t)
        w_next = self.server(w, t, deltas, messages).detach()
        return w_next, {"train_loss": sum(losses) / len(losses), "clients": sorted(deltas),
                        "floats_sent": self.floats_per_client()}

    def describe(self) -> dict:
        return {"protocol": self.name, **self.spec, "client_fraction": self.client_fraction, "d": self.d,
                "floats_per_client": self.floats_per_client()}


@register_protocol("fedavg")
class FedAvg(Protocol):
    """McMahan et al. 2017: K local SGD steps, the server averages dw."""


@register_protocol("sketched")
class Sketched(Protocol):
    """Song et al. 2023, Algorithm 1: sk_t = R_t, desk_t = R_t^T, R_t fresh each round from the shared seed."""

    @property
    def b(self) -> int:
        return sketch_dim(self.sketch_ratio, self.d) if self.sketch != "none" else self.d

    def operator(self, t, seed_offset=0):
        return make_sketch(self.sketch, self.d, self.b, seed=round_seed(self.seed, t) + seed_offset,
                           **self.sketch_params).to(self.device)

    def floats_per_client(self):
        return self.b

    def server(self, w, t, deltas, messages):
        avg = self.global_lr * torch.stack(list(messages.values())).mean(0)  # Delta w~^t (line 19)
        return w + self.operator(t).adjoint(avg)  # line 9: w^{t+1} = w^t + desk_t(Delta w~^t)


@register_protocol("sketched-dp")
class SketchedDP(Sketched):
    """Song et al. 2023, Algorithm 2: Gaussian noise N(0, sigma^2 I) at every local step, sigma by Lemma H.7."""

    def __init__(self, model, train_set, **spec):
        super().__init__(model, train_set, **spec)
        from defenses.accounting import gaussian_sigma

        self.sigma = float(gaussian_sigma(self.dp_epsilon, self.dp_delta, self.dp_clip))

    def gradient(self, u, x, y, t, c, k, create_graph=False):
        g = per_example_clipped_mean(self.model, u, x, y, self.dp_clip)
        noise = torch.randn(self.d, generator=_gen(self.seed, t, c, k, 404), dtype=torch.float64)
        return g + self.sigma * noise.to(device=g.device, dtype=g.dtype)

    def privacy(self, rounds: int) -> dict:
        """(eps, delta) after ``rounds`` rounds: Theorem 6.2 and an RDP accountant (per client: parallel composition)."""
        from defenses.accounting import accountant_epsilon, paper_composition

        K = self.local_steps
        eps_paper, delta_paper = paper_composition(self.dp_epsilon, self.dp_delta, rounds, K)
        n_c = min(s.numel() for s in self.shards)
        q = min(1.0, self.batch_size / n_c)
        # noise on the mean with sensitivity C is noise multiplier sigma*B/C on the sum of clipped gradients
        multiplier = self.sigma * self.batch_size / self.dp_clip
        eps_rdp = accountant_epsilon(multiplier, q, rounds * K, delta_paper, accountant="rdp")
        return {"sigma": self.sigma, "epsilon_paper": eps_paper, "delta_paper": delta_paper, "epsilon_rdp": eps_rdp}


@register_protocol("fedsketch-privix")
class FedSketchPrivix(Protocol):
    """FedSKETCH Algorithm 5, PRIVIX variant: a t x m count-sketch table per round, median un-sketch."""

    default_fraction = 0.5  # "we randomly choose half of the local devices to be active"

    def operator(self, t, seed_offset=0):
        return CountSketchTable(self.d, self.sketch_rows, self.sketch_buckets,
                                seed=round_seed(self.seed, t) + seed_offset).to(self.device)

    def floats_per_client(self):
        return self.sketch_rows * self.sketch_buckets

    def server(self, w, t, deltas, messages):
        S = torch.stack(list(messages.values())).mean(0)  # eq. (3)
        return w + self.global_lr * privix(self.operator(t), S)


@register_protocol("fedsketch-heaprix")
class FedSketchHeaprix(FedSketchPrivix):
    """FedSKETCH Algorithm 5, HEAPRIX variant: HEAVYMIX's Top_m exact (second round) plus PRIVIX of the rest."""

    def floats_per_client(self):
        return self.sketch_rows * self.sketch_buckets + self.sketch_buckets

    def server(self, w, t, deltas, messages):
        table = self.operator(t)
        S = torch.stack(list(messages.values())).mean(0)
        top = heavymix_support(table, S, self.sketch_buckets, _gen(self.seed, t, 505))
        # second round: each sampled client sends its exact values on Top_m; the server averages them
        v = torch.zeros_like(w)
        v[top] = torch.stack([dw[top] for dw in deltas.values()]).mean(0)
        phi = v + privix(table, S - table.apply(v))  # HEAVYMIX[S] + PRIVIX[S - S~], eq. (4)
        return w + self.global_lr * phi


def evaluate(model, w: torch.Tensor, images: torch.Tensor, labels: torch.Tensor, chunk: int = 512) -> tuple[float, float]:
    """(mean loss, accuracy) of the model at flat weights w on a labelled set."""
    params = unflatten(model, w)
    total, correct = 0.0, 0
    with torch.no_grad():
        for i in range(0, images.shape[0], chunk):
            x, y = images[i:i + chunk], labels[i:i + chunk]
            out = functional_call(model, params, (x,))
            total += float(model.loss(out, y)) * x.shape[0]
            correct += int((out.argmax(-1) == y).sum())
    n = images.shape[0]
    return total / n, correct / n
