"""FedSKETCH (Haddadpour et al.): its compressors and its two protocols.

* ``fedsketch-privix``  Algorithm 5 with PRIVIX: a count-sketch table t x m of dw_c,
                        the server averages the tables, the update is PRIVIX (median
                        un-sketch).  Half the clients are active per round.
* ``fedsketch-heaprix`` the same with HEAPRIX: a second round in which the sampled
                        clients send their exact values on HEAVYMIX's Top_m (m floats),
                        then Phi = v_Top + PRIVIX(S - S(v_Top)).

FedSKETCH's S(x^0 - x^tau) is sent here with the opposite sign and added.

Compressors:

* :class:`CountSketchTable` — Algorithm 1 of FedSKETCH: t independent count
  sketches (hash h_j: [d] -> [m], sign s_j: [d] -> {+-1}), flattened row by row
  to a vector of length t*m.  Linear, so it is also a sketch operator (``apply``,
  ``adjoint``) and works with label recovery through the sketch.
* :func:`privix` — Algorithm 2: x~_i = median_j s_j(i) S[j, h_j(i)].
* :func:`heavymix_support` — Algorithm 3, steps 3-6: the index set Top_m
  (heavy coordinates by the PRIVIX estimate, filled up at random).
"""

from __future__ import annotations

import torch

from leakattack.seeds import HEAVYMIX, torch_stream
from leakattack.sketch.base import Sketch
from leakattack.sketch.countsketch import CountSketch

from .base import Protocol, round_seed


class CountSketchTable(Sketch):
    """S(x) of FedSKETCH Algorithm 1: t rows of m buckets, row j a count sketch with its own hashes."""

    kind = "countsketch-table"

    def __init__(self, d: int, rows: int, buckets: int, seed: int = 0):
        super().__init__(d=d, b=rows * buckets, seed=seed)
        self.rows, self.buckets = int(rows), int(buckets)
        # row j uses the 2-wise/4-wise hash families of leakattack.sketch.countsketch, seed (seed, j)
        sketches = [CountSketch(d, buckets, seed=self.seed * 1009 + j) for j in range(self.rows)]
        self.index = torch.stack([s.rows for s in sketches])  # (t, d): h_j(i)
        self.sign = torch.stack([s.signs for s in sketches])  # (t, d): s_j(i)
        self.flat_index = self.index + self.buckets * torch.arange(self.rows).unsqueeze(1)

    def _apply(self, v):
        flat = v.reshape(-1, 1, self.d) * self.sign.to(v.dtype)  # (n, t, d)
        out = torch.zeros(flat.shape[0], self.b, dtype=v.dtype, device=v.device)
        out = out.index_add(1, self.flat_index.reshape(-1), flat.reshape(flat.shape[0], -1))
        return out.reshape(*v.shape[:-1], self.b)

    def _adjoint(self, u):
        vals = self.gather(u)  # (..., t, d)
        return vals.sum(-2)

    def gather(self, u: torch.Tensor) -> torch.Tensor:
        """s_j(i) S[j, h_j(i)] for every row j and coordinate i: shape (..., t, d)."""
        return u.index_select(-1, self.flat_index.reshape(-1)).reshape(*u.shape[:-1], self.rows, self.d) \
            * self.sign.to(u.dtype)

    def describe(self) -> dict:
        return {"kind": self.kind, "d": self.d, "b": self.b, "rows": self.rows, "buckets": self.buckets,
                "seed": self.seed}


def median(values: torch.Tensor, dim: int) -> torch.Tensor:
    """The median along ``dim`` (mean of the two middle values for an even count); differentiable a.e."""
    s = values.sort(dim=dim).values
    n = s.shape[dim]
    hi = s.narrow(dim, n // 2, 1)
    mid = hi if n % 2 else 0.5 * (hi + s.narrow(dim, n // 2 - 1, 1))
    return mid.squeeze(dim)


def privix(table: CountSketchTable, u: torch.Tensor) -> torch.Tensor:
    """PRIVIX (FedSKETCH Algorithm 2): x~_i = median over rows j of s_j(i) S[j, h_j(i)]."""
    return median(table.gather(u), dim=-2)


def heavymix_support(table: CountSketchTable, u: torch.Tensor, m: int, generator: torch.Generator) -> torch.Tensor:
    """Top_m of HEAVYMIX (FedSKETCH Algorithm 3): H = {i : x~_i^2 >= l2^2 / m}, filled at random to m indices."""
    est = privix(table, u)
    l2 = median(u.reshape(table.rows, table.buckets).pow(2).sum(-1), dim=0)  # (1 +- 0.5) ||x||^2
    score = est.pow(2)
    heavy = torch.nonzero(score >= l2 / m).flatten()
    if heavy.numel() >= m:  # more heavy hitters than slots: keep the largest
        return heavy[score[heavy].argsort(descending=True)[:m]].sort().values
    rest = torch.ones(table.d, dtype=torch.bool)
    rest[heavy.cpu()] = False
    light = torch.nonzero(rest).flatten()
    fill = light[torch.randperm(light.numel(), generator=generator)[: m - heavy.numel()]]
    return torch.cat([heavy.cpu(), fill]).sort().values.to(u.device)


class FedSketchPrivix(Protocol):
    """FedSKETCH Algorithm 5, PRIVIX variant: a t x m count-sketch table per round, median un-sketch."""

    default_fraction = 0.5  # "we randomly choose half of the local devices to be active"
    decodable = True
    reads = ("sketch_rows", "sketch_buckets")

    def operator(self, t, seed_offset=0):
        return CountSketchTable(self.d, self.sketch_rows, self.sketch_buckets,
                                seed=round_seed(self.seed, t) + seed_offset).to(self.device)

    def decode(self, op, message):
        return privix(op, message)

    def floats_per_client(self):
        return self.sketch_rows * self.sketch_buckets

    def server(self, w, t, deltas, messages):
        S = torch.stack(list(messages.values())).mean(0)  # eq. (3)
        return w + self.global_lr * privix(self.operator(t), S)


class FedSketchHeaprix(FedSketchPrivix):
    """FedSKETCH Algorithm 5, HEAPRIX variant: HEAVYMIX's Top_m exact (second round) plus PRIVIX of the rest.

    The attacked message (:meth:`observe`) is the count-sketch table alone, as for PRIVIX: the exact values on
    Top_m that the second round sends (and ``floats_per_client`` counts) are not part of it, so an attack on a
    HEAPRIX message gives what one on the same PRIVIX message does."""

    #: what :meth:`observe`'s message holds of what the client sends (recorded in the message's info)
    MESSAGE_PART = ("the count-sketch table only: the exact values on HEAVYMIX's Top_m that HEAPRIX's second round "
                    "sends are not attacked")

    def observe(self, w, t, c, **kw):
        msg = super().observe(w, t, c, **kw)
        msg.info["message_part"] = self.MESSAGE_PART
        return msg

    def floats_per_client(self):
        return self.sketch_rows * self.sketch_buckets + self.sketch_buckets

    def server(self, w, t, deltas, messages):
        table = self.operator(t)
        S = torch.stack(list(messages.values())).mean(0)
        top = heavymix_support(table, S, self.sketch_buckets, torch_stream(self.seed, t, HEAVYMIX))
        # second round: each sampled client sends its exact values on Top_m; the server averages them
        v = torch.zeros_like(w)
        v[top] = torch.stack([dw[top] for dw in deltas.values()]).mean(0)
        phi = v + privix(table, S - table.apply(v))  # HEAVYMIX[S] + PRIVIX[S - S~], eq. (4)
        return w + self.global_lr * phi
