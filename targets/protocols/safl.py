"""SAFL: sketched adaptive federated learning (Algorithm 1 calling Algorithm 2 / 4 of "Sketched adaptive
federated deep learning").

Round t: every client runs K local SGD steps from x_{t-1} and sends m̄_t^c = sk_t(x_{t,0} - x_{t,K}) =
R_t (x_{t,0} - x_{t,K}) (b floats), with R_t fresh each round from the shared seed (:func:`round_seed`).
The server averages m̄_t = mean_c m̄_t^c, de-sketches with desk_t = R_t^T and runs a server optimiser
ADA_OPT on desk_t(m̄_t):

* ``adam``     Algorithm 4: m_t = b1 m_{t-1} + (1-b1) desk(m̄_t), v_t = b2 v_{t-1} + (1-b2) V_t,
               bias correction m̂ = m_t/(1-b1^t), v̂ = v_t/(1-b2^t), x_t = x_{t-1} - kappa m̂/(sqrt(v̂)+eps);
* ``amsgrad``  Algorithm 2: the same moments, v̂_t = max(v̂_{t-1}, v_t), x_t = x_{t-1} - kappa m_t/(sqrt(v̂_t)+eps)
               (no bias correction);
* ``sgd``      x_t = x_{t-1} - kappa desk(m̄_t) (Song et al.'s Algorithm 1 with eta_global = kappa);
* ``sgdm``     m_t = b1 m_{t-1} + desk(m̄_t), x_t = x_{t-1} - kappa m_t (heavy ball, PyTorch's convention).

V_t, the second-moment input, is ``second_moment``:

* ``sketch``      the paper's rule: desk(v̄_t) with v̄_t = mean_c (m̄_t^c)^2 squared element-wise in sketch
                  space.  R_t^T of a non-negative vector has entries of both signs, so v_t can be negative;
                  the square root reads max(v̂, 0) (AMSGrad's running max from v̂_0 = 0 is never negative).
* ``desketched``  (desk(m̄_t))^2, the square of the server's de-sketched pseudo-gradient (FedAdam's rule
                  applied after de-sketching); never negative.

Clients apply the same ADA_OPT to the same averages, so every client starts round t+1 from the server's
x_t; here one flat vector w carries it.  kappa is ``server_lr`` (default: the paper's tuned rates,
0.01 for adam/amsgrad and 1.0 for sgd/sgdm, Appendix E).  leakattack's update dw = x_{t,K} - x_{t,0}
has the opposite sign of the paper's, so the wire carries R_t dw = -m̄_t^c; the server flips it back.

The server optimiser's state lives in the protocol object: rounds run in order (training and
:meth:`Protocol.replay` do), round 1 from m_0 = v_0 = v̂_0 = 0 and a later round from the state that
:meth:`SAFL.server_state` gave before it (training stores it in each checkpoint beside w^t, so that a
training continues, and a re-simulation starts, from a checkpoint exactly).
"""

from __future__ import annotations

import torch

from .sketched import Sketched

#: server optimisers of SAFL
SERVER_OPTS = ("adam", "amsgrad", "sgd", "sgdm")
#: second-moment inputs of adam/amsgrad
SECOND_MOMENTS = ("sketch", "desketched")
#: kappa when ``server_lr`` is not given: the rates the paper tuned (Appendix E: SGD/SGDm 1.0, Adam 0.01; it reports
#: none for AMSGrad, which takes Adam's), held constant (the paper's experiments decay it by a cosine schedule)
PAPER_SERVER_LR = {"adam": 0.01, "amsgrad": 0.01, "sgd": 1.0, "sgdm": 1.0}


#: the moments each server optimiser updates (the others stay 0, as new_server_state makes them)
STATE_MOMENTS = {"sgd": (), "sgdm": ("m",), "adam": ("m", "v"), "amsgrad": ("m", "v", "vhat")}


def new_server_state(x: torch.Tensor) -> dict:
    """m_0 = v_0 = v̂_0 = 0 at round 0 (Algorithm 1, initialisation)."""
    zero = torch.zeros_like(x)
    return {"t": 0, "m": zero, "v": zero.clone(), "vhat": zero.clone()}


def ada_opt(kind: str, x: torch.Tensor, state: dict, g: torch.Tensor, v_in: torch.Tensor | None, *,
            lr: float, beta1: float, beta2: float, eps: float) -> tuple[torch.Tensor, dict]:
    """One ADA_OPT step on the de-sketched update g = desk(m̄_t) (Algorithms 2 and 4; sgd, sgdm): (x_t, state_t).

    ``v_in`` is the second-moment input V_t (adam, amsgrad only).  The state is not modified in place.
    """
    t = state["t"] + 1
    if kind == "sgd":
        return x - lr * g, {**state, "t": t}
    if kind == "sgdm":
        m = beta1 * state["m"] + g
        return x - lr * m, {**state, "t": t, "m": m}
    m = beta1 * state["m"] + (1 - beta1) * g
    assert v_in is not None, f"{kind} needs the second-moment input"
    v = beta2 * state["v"] + (1 - beta2) * v_in
    if kind == "adam":
        m_hat, v_hat = m / (1 - beta1 ** t), v / (1 - beta2 ** t)
        step = m_hat / (v_hat.clamp_min(0).sqrt() + eps)
        return x - lr * step, {"t": t, "m": m, "v": v, "vhat": state["vhat"]}
    if kind == "amsgrad":
        vhat = torch.maximum(state["vhat"], v)
        return x - lr * m / (vhat.sqrt() + eps), {"t": t, "m": m, "v": v, "vhat": vhat}
    raise ValueError(f"unknown server optimiser '{kind}'")


class SAFL(Sketched):
    """Sketched adaptive FL: clients send R_t dw (b floats); the server de-sketches and runs ADA_OPT."""

    keeps_server_state = True
    reads: tuple[str, ...] = Sketched.reads + ("server_opt", "server_lr", "server_beta1", "server_beta2",
                                               "server_eps", "second_moment")
    unset_means = {"server_lr": "the paper's tuned rate for --server-opt: " + ", ".join(
        f"{k} {v:g}" for k, v in PAPER_SERVER_LR.items())}

    def __init__(self, victim, train_set, **spec):
        super().__init__(victim, train_set, **spec)
        self._state: dict | None = None

    @property
    def kappa(self) -> float:
        """The server step kappa: ``server_lr``, else the paper's tuned rate for the optimiser."""
        return float(self.server_lr) if self.server_lr is not None else PAPER_SERVER_LR[self.server_opt]

    @classmethod
    def spec_error(cls, spec):
        problem = super().spec_error(spec)
        if problem:
            return problem
        if spec["global_lr"] != 1.0:
            return (f"{cls.name} takes its server step kappa from --server-lr; leave --global-lr at 1 "
                    f"(got {spec['global_lr']})")
        return None

    def state_at(self, w: torch.Tensor, t: int) -> dict:
        """The server state before round t's update (fresh at t = 1; rounds must run in order)."""
        if t == 1 or self._state is None:
            if t != 1:
                raise RuntimeError(f"{self.name}: round {t} needs the server state of round {t - 1}: run the rounds "
                                   "in order from round 1")
            self._state = new_server_state(w)
        if self._state["t"] != t - 1:
            raise RuntimeError(f"{self.name}: round {t} follows round {self._state['t']}: run the rounds in order")
        return self._state

    def server(self, w, t, deltas, messages):
        R = self.operator(t)
        sent = torch.stack(list(messages.values()))  # (C, b): R_t dw_c = -m̄_t^c
        m_bar = -sent.mean(0)  # m̄_t = mean_c sk(x_{t,0} - x_{t,K})
        g = R.adjoint(m_bar)  # desk_t(m̄_t)
        v_in = None
        if self.server_opt in ("adam", "amsgrad"):
            v_in = R.adjoint(sent.pow(2).mean(0)) if self.second_moment == "sketch" else g.pow(2)
        w_next, self._state = ada_opt(self.server_opt, w, self.state_at(w, t), g, v_in, lr=self.kappa,
                                      beta1=self.server_beta1, beta2=self.server_beta2, eps=self.server_eps)
        return w_next

    def server_state(self) -> dict | None:
        """{"t": the rounds run, and the moments the optimiser updates (STATE_MOMENTS)}: what round t + 1 starts
        from; None before round 1."""
        if self._state is None:
            return None
        return {"t": int(self._state["t"]), **{k: self._state[k] for k in STATE_MOMENTS[self.server_opt]}}

    def load_server_state(self, state: dict | None, t: int) -> None:
        if state is None:
            if t != 1:
                raise ValueError(f"round {t} needs the server state after round {t - 1}")
            self._state = None
            return
        done, moments = state.get("t"), {k: v for k, v in state.items() if k != "t"}
        if not isinstance(done, int) or isinstance(done, bool) or done != t - 1:
            raise ValueError(f"the server state is not the one after round {t - 1} (its round count is {done!r})")
        need = STATE_MOMENTS[self.server_opt]
        if set(moments) != set(need) or any(not isinstance(v, torch.Tensor) or v.shape != (self.d,)
                                            for v in moments.values()):
            raise ValueError(f"the server state does not hold the {self.server_opt} moments "
                             f"({', '.join(need) or 'none'}) of {self.d} weights")
        fresh = new_server_state(torch.zeros(self.d, dtype=self.dtype, device=self.device))
        self._state = {**fresh, "t": done,
                       **{k: v.to(dtype=self.dtype, device=self.device).clone() for k, v in moments.items()}}

    def describe(self) -> dict:
        return {**super().describe(), "kappa": self.kappa}
