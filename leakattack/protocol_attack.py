"""Attacking one protocol message: the update client c sends in round t.

``prepare(cfg)`` (called by ``experiment.prepare`` when ``cfg.protocol`` is set)
returns a :class:`~leakattack.experiment.Prepared` whose ``obs.y`` is the message
and whose ``simulate(x, labels)`` is the attacker's model of the client:

    u^0 = w^t,  u^k = u^{k-1} - eta grad_w F(u^{k-1}, x),  message = E_t(u^K - w^t)

(K = 1: a scaled sketched gradient; K > 1: the unrolled FedAvg attack of Geiping et
al., "Inverting Gradients", NeurIPS 2020), with E_t the protocol's encoder: identity
(fedavg), R_t (sketched, sketched-dp), the count-sketch table (fedsketch-*; with
``match_space="unsketched"`` both sides are PRIVIX-decoded before matching).

Threat model: the attacker knows w^t, the round's sketch seed, eta and K (and, for
sketched-dp, the clip norm, but not the noise).  ``sketch_known=False`` gives the
attacker R_t drawn from another seed.  w^t comes from a ``train`` run folder
(``protocol_dir``: checkpoint round_TTTT.pt, spec from protocol.json) or, without
one, by re-simulating rounds 1..t-1 from the seeds (w^1 needs no simulation).

Scale: ``obs.y`` is the message divided by its norm (``info["message_norm"]``) and
``simulate`` divides by the same number, so L_R is reported in units of ||y||^2 (the
relative L_R).  L-BFGS needs this: its curvature test s^T y > 1e-10 is absolute.

Labels: ``execute`` reads iDLG's sign rule through ``p.sketch``.  The message is
E_t(-eta g)/||y|| for K = 1, so ``p.sketch`` is the message map g -> -eta E_t g / ||y||
(exact for K = 1, a first-order approximation for K > 1 and for PRIVIX's median).
The sign rule needs the true row's (p_y - 1) sum(h) to stand out of the sketch noise
O(||m_c|| ||g|| / sqrt(b)); on a trained model (p_y ~ 1) it does not at b/d = 0.1
(round 500: signal 1.2e-2, noise 2e-2), and ``info["label_snr"]`` (labels.sign_rule_snr) says so.
"""

from __future__ import annotations

from pathlib import Path

import torch

import targets
from targets.fedsketch import CountSketchTable, privix
from targets.protocols import SPEC_DEFAULTS, SketchedDP, get_protocol, local_sgd, per_example_clipped_mean

from .config import ConfigError, RunConfig
from .labels import sign_rule_snr
from .observation import Observation
from .results import read_json
from .sketch import make_sketch

#: seed offset of the attacker's R_t when the sketch is unknown
UNKNOWN_SEED_OFFSET = 104_729


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


def attacker_gradient(proto, u, x, labels):
    """The attacker's local-step gradient: the client's rule without its noise, differentiable in x."""
    if isinstance(proto, SketchedDP):
        return per_example_clipped_mean(proto.model, u, x, labels, proto.dp_clip, create_graph=True)
    return targets.flat_gradient(proto.model, x, labels, params=targets.unflatten(proto.model, u), create_graph=True)


def stored_run(cfg: RunConfig) -> tuple[dict, dict, int]:
    """(spec, model spec, rounds) of the protocol under attack, from --protocol-dir or from cfg."""
    from .train import MODEL_DEFAULTS

    if cfg.protocol_dir:
        pj = Path(cfg.protocol_dir) / "protocol.json"
        if not pj.is_file():
            raise ConfigError(f"protocol folder '{cfg.protocol_dir}' has no protocol.json (write one with `leakattack train`)")
        stored = read_json(pj)
        if stored["protocol"] != cfg.protocol:
            raise ConfigError(f"protocol folder '{cfg.protocol_dir}' holds protocol '{stored['protocol']}', not '{cfg.protocol}'")
        return {**SPEC_DEFAULTS, **stored["spec"]}, stored["model"], int(stored["rounds"])
    spec = {**SPEC_DEFAULTS, **cfg.protocol_spec, "seed": cfg.seed, "sketch": cfg.sketch,
            "sketch_ratio": cfg.sketch_ratio, "sketch_params": dict(cfg.sketch_params)}
    model_spec = {**MODEL_DEFAULTS, "model": cfg.model, "init": cfg.weight_init or MODEL_DEFAULTS["init"],
                  "act": cfg.protocol_act, "dataset": cfg.dataset or "digits", "data_root": cfg.data_root,
                  "seed": cfg.seed}
    return spec, model_spec, None


def prepare(cfg: RunConfig):
    """Rebuild w^t, produce client c's round-t message and the attacker's simulator of it."""
    from .experiment import Prepared, resolve_device
    from .train import build_model, load_checkpoint, load_split, validate_spec

    cfg.validate()
    device, dtype = resolve_device(cfg.device), getattr(torch, cfg.dtype)
    spec, model_spec, rounds = stored_run(cfg)
    validate_spec(cfg.protocol, spec)
    t, c = cfg.protocol_round, cfg.protocol_client
    if rounds is not None and t > rounds:
        raise ConfigError(f"round {t} does not exist: '{cfg.protocol_dir}' holds rounds 1..{rounds}")
    if not 0 <= c < spec["clients"]:
        raise ConfigError(f"client {c} does not exist: the protocol has clients 0..{spec['clients'] - 1}")
    trainset, _ = load_split(model_spec, cfg.download)
    model = build_model(model_spec, trainset, dtype, device)
    d = targets.num_params(model)
    validate_spec(cfg.protocol, spec, d)
    proto = get_protocol(cfg.protocol, model, trainset, **spec)
    if c not in proto.sampled(t):
        raise ConfigError(f"client {c} is not sampled in round {t} (sampled: {proto.sampled(t)})")
    if proto.shards[c].numel() == 0:
        raise ConfigError(f"client {c} holds no data")

    if rounds is not None:
        w = load_checkpoint(Path(cfg.protocol_dir), t).to(device=device, dtype=dtype)
    else:  # deterministic re-simulation of rounds 1..t-1 from the seeds
        w = proto.initial_weights()
        for s in range(1, t):
            w, _ = proto.run_round(w, s)
    torch.nn.utils.vector_to_parameters(w, model.parameters())

    x, labels = proto.client_batch(t, c, cfg.batch_size)
    delta = proto.client_update(w, x, labels, t, c).detach()
    op_true = proto.operator(t)
    op_att = proto.operator(t, seed_offset=0 if cfg.sketch_known else UNKNOWN_SEED_OFFSET)
    y = proto.encode(delta, t, op_true).detach() if op_true is not None else delta
    unsketch = cfg.match_space == "unsketched" and isinstance(op_true, CountSketchTable)
    if unsketch:
        y = privix(op_true, y).detach()

    K, lr = proto.local_steps, proto.local_lr
    # Both sides are expressed in units of ||y||, so L_R (final_loss) reads as L_R/||y||^2.
    # (attack.run also optimises a normalised L_R: torch's L-BFGS keeps a curvature pair only
    # if s^T y > 1e-10, absolute, which stalled it on a trained model's tiny message.)
    unit = float(y.norm()) or 1.0
    y = y / unit

    def simulate(xd, lab):
        dw = local_sgd(lambda u, k: attacker_gradient(proto, u, xd, lab), w, lr, K) - w
        msg = dw if op_att is None else op_att.apply(dw)
        return (privix(op_att, msg) if unsketch else msg) / unit

    inner = make_sketch("none", d, d) if (op_att is None or unsketch) else op_att
    info = {"kind": f"protocol:{cfg.protocol}", "round": t, "client": c, "local_steps": K, "local_lr": lr,
            "sketch_known": cfg.sketch_known, "match_space": "unsketched" if unsketch else "message",
            "message_floats": int(y.numel()), "protocol_spec": spec, "model_spec": model_spec,
            "w_source": "checkpoint" if rounds is not None else "re-simulated", "message_norm": unit}
    label_map = MessageMap(inner, -lr / unit, info)
    info["label_snr"] = sign_rule_snr(model, label_map, y)
    obs = Observation(y=y, g_norm=float(delta.norm()), d=d, b=int(y.numel()))
    return Prepared(cfg, device, trainset, x, labels, model, label_map, obs, simulate)


def add_arguments(g) -> None:
    """The ``protocol`` argument group of ``leakattack run``."""
    from targets.protocols import list_protocols

    from .train import add_protocol_arguments

    g.add_argument("--protocol", default="", help=f"attack a protocol message instead of one gradient: one of {', '.join(list_protocols())}")
    g.add_argument("--round", dest="protocol_round", type=int, default=1, help="round t of the attacked message (default: %(default)s)")
    g.add_argument("--client", dest="protocol_client", type=int, default=0, help="client c whose message is attacked (default: %(default)s)")
    g.add_argument("--protocol-dir", default=None, help="a `leakattack train` run folder: w^t from its checkpoints (default: re-simulate from the seeds)")
    g.add_argument("--match-space", default="sketch", help="fedsketch-*: match the count-sketch table (sketch) or its PRIVIX un-sketch (unsketched) (default: %(default)s)")
    g.add_argument("--sketch-unknown", action="store_true", help="the attacker does not know R_t: it uses another seed")
    add_protocol_arguments(g, train=False)


def config_fields(a) -> dict:
    """RunConfig fields from the parsed ``protocol`` group."""
    from .train import spec_from_args

    spec = spec_from_args(a, a.sketch, a.sketch_ratio, {}, a.seed)
    for k in ("seed", "sketch", "sketch_ratio", "sketch_params"):
        spec.pop(k)
    return {"protocol": a.protocol, "protocol_round": a.protocol_round, "protocol_client": a.protocol_client,
            "protocol_dir": a.protocol_dir, "protocol_spec": spec, "protocol_act": a.act,
            "match_space": a.match_space, "sketch_known": not a.sketch_unknown}
