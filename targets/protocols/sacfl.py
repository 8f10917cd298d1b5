"""SACFL: sketched adaptive clipped federated learning (Algorithm 1 calling Algorithm 3, AdaClip).

Round t: every client runs K local SGD steps from x_{t-1} and sends two things: the sketch
m̄_t^c = R_t (x_{t,0} - x_{t,K}) (b floats) and the unsketched scalar v̄_t^c = ||x_{t,K} - x_{t,0}||
(one float).  The server averages both and takes the clipped step

    x_t = x_{t-1} - kappa min{tau / v̄_t, 1} desk_t(m̄_t),    v̄_t = mean_c ||dw_c||,  desk_t = R_t^T,

with threshold tau (``clip_threshold``) and kappa (``server_lr``, default 1).  On the wire the message is
the vector [R_t dw, ||dw||] of b + 1 floats (dw = x_{t,K} - x_{t,0}, the opposite sign of the paper's).

What the norm gives the attacker: it is part of the message, so the attacker's model of the message
carries it too, [R_t dw(x̂), ||dw(x̂)||]; matching it adds the exact norm of the unsketched update as
one more equation to the b sketched ones (a known constraint that also fixes the update's scale,
which R_t preserves only up to its distortion).  Label recovery reads the sketched part.

How often the clip acts: every round's ``clip_factor`` min{tau/v̄_t, 1}, ``clip_fired`` (factor < 1) and
``mean_norm`` v̄_t go to train.jsonl (:meth:`SACFL.round_record`).  An observed message records in its
info the norm the client sent, ``norm_error_of_sketch`` = | ||R_t dw|| / ||dw|| - 1 | (how far the
sketched part alone misstates the update's scale: what the extra float corrects) and the round's
v̄_t, clip factor and whether the clip fired, as the server computed them from every sampled client's
norm on its own round data (:meth:`SACFL.round_clip`: the same as train.jsonl records, also where the
attacked message is computed on another batch than the protocol's).
"""

from __future__ import annotations

import torch

from leakattack.sketch.base import Sketch

from .base import Protocol
from .safl import SAFL
from .sketched import Sketched


class WithNorm(Sketch):
    """The linear part of a SACFL message: v -> [R v, 0] (the norm coordinate is not linear; label recovery skips
    it)."""

    def __init__(self, inner: Sketch):
        super().__init__(d=inner.d, b=inner.b + 1, seed=inner.seed)
        self.inner = inner
        self.kind = f"{inner.kind}+norm"

    def _apply(self, v):
        out = self.inner.apply(v)
        return torch.cat([out, out.new_zeros(*out.shape[:-1], 1)], -1)

    def _adjoint(self, u):
        return self.inner.adjoint(u[..., :-1])

    def to(self, device):
        self.inner.to(device)
        return super().to(device)

    def readout_variance(self) -> float:
        """The inner sketch's: the norm coordinate is not read."""
        return self.inner.readout_variance()

    def describe(self) -> dict:
        return {**self.inner.describe(), "kind": self.kind, "b": self.b, "norm_sent": True}


def clip_factor(tau: float, mean_norm: float) -> float:
    """min{tau / v̄_t, 1} of Algorithm 3 (1 when every update is zero)."""
    return 1.0 if mean_norm <= 0 else min(tau / mean_norm, 1.0)


def clip_record(tau: float, mean_norm: float) -> dict:
    """What train.jsonl records of one round's clip: its factor, whether it fired, and v̄_t."""
    factor = clip_factor(tau, mean_norm)
    return {"clip_factor": factor, "clip_fired": factor < 1.0, "mean_norm": mean_norm}


class SACFL(SAFL):
    """Sketched adaptive clipped FL: clients send [R_t dw, ||dw||]; the server clips the de-sketched mean by the mean
    norm."""

    #: kappa (``server_lr``) and tau: Algorithm 3 runs no adaptive optimiser, so SAFL's optimiser settings are not read
    reads: tuple[str, ...] = Sketched.reads + ("server_lr", "clip_threshold")
    unset_means = {"server_lr": "1.0"}
    keeps_server_state = False  # the clip reads only the round's messages: no optimiser moments
    _record: dict = {}  #: the last round's clip (replaced, never modified, by ``server``)

    @property
    def kappa(self) -> float:
        return 1.0 if self.server_lr is None else float(self.server_lr)

    def server_state(self) -> dict | None:
        return Protocol.server_state(self)

    def load_server_state(self, state: dict | None, t: int) -> None:
        Protocol.load_server_state(self, state, t)

    def floats_per_client(self):
        return self.b + 1

    def encode(self, delta, t, op=None, c=None):
        op = self.operator(t) if op is None else op
        return self.attacker_encode(delta, op)

    def attacker_encode(self, delta, op):
        return torch.cat([op.apply(delta), delta.norm().reshape(1)])

    def message_operator(self, op, decoded):
        return WithNorm(op)

    def server(self, w, t, deltas, messages):
        sent = torch.stack(list(messages.values()))  # (C, b + 1)
        sketches, norms = sent[:, :-1], sent[:, -1]
        self._record = clip_record(self.clip_threshold, float(norms.mean()))
        factor = self._record["clip_factor"]
        # -kappa min{tau/v̄, 1} desk(m̄_t) with m̄_t = -mean_c R_t dw_c
        return w + self.kappa * factor * self.operator(t).adjoint(sketches.mean(0))

    def round_record(self) -> dict:
        """The last round's clip: factor min{tau/v̄_t, 1}, whether it fired (factor < 1), and v̄_t."""
        return dict(self._record)

    def round_clip(self, w, t) -> dict:
        """Round t's clip at w^t as the server computes it (:meth:`server`): from the norms every sampled client
        sends on its own round data (:meth:`Protocol.client_batch`), whatever batch an attacked message is computed
        on; equal to train.jsonl's record of the round."""
        norms = []
        for j in self.sampled(t):
            x, y = self.client_batch(t, j)
            norms.append(self.send(self.client_update(w, x, y, t, j), t, j)[-1].detach())
        return clip_record(self.clip_threshold, float(torch.stack(norms).mean()))

    def observe(self, w, t, c, **kw):
        """The message as :meth:`Protocol.observe` makes it, with what its norm says (module docstring) in its info."""
        msg = super().observe(w, t, c, **kw)
        unit = msg.info["message_norm"]
        sent, sketched = float(msg.y[-1]) * unit, float(msg.y[:-1].norm()) * unit  # ||dw_c||, ||R_t dw_c||
        clip = self.round_clip(w, t)
        msg.info.update(norm_sent=sent, norm_error_of_sketch=abs(sketched / sent - 1) if sent > 0 else 0.0,
                        **{f"round_{k}": v for k, v in clip.items()})
        return msg

    def describe(self) -> dict:
        return {**super().describe(), "kappa": self.kappa}
