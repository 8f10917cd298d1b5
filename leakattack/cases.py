"""Cases: who is attacked and what the client sent, built from a run configuration.

A case holds the victim, the true data (for scoring only) and the attacker's
:class:`~leakattack.observation.Observation`.  Two kinds, in the breaching
sense of a *case* apart from the *attack*:

* ``gradient`` — one client sends its (defended, sketched) gradient on a batch of
  the data set: ``observe(victim, x, labels, Channel(sketch, defense))``.
* ``protocol`` — client c's message in round t of a federated protocol, produced
  by ``Protocol.observe`` at w^t (from a ``leakattack train`` checkpoint, or
  re-simulated from the seeds).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

import torch

import targets
from targets.protocols import SPEC_DEFAULTS, get_protocol

from .attacks import sign_rule_snr
from .channel import Channel
from .config import ConfigError, RunConfig, validate_protocol
from .data import ImageSet, get_batch, get_dataset
from .errors import SettingWarning
from .observation import Observation, ThreatModel, from_protocol, observe
from .registry import Registry
from .sketch import get_sketch
from .training import MODEL_DEFAULTS, build_victim, check_unchanged, load_checkpoint, load_split, stored_protocol


@dataclass
class Case:
    """A victim, its true data and what the attacker observes."""

    dataset: ImageSet
    victim: targets.Victim
    x: torch.Tensor  #: the client's true batch (for scoring only)
    labels: torch.Tensor  #: its true labels, in the form the loss takes
    obs: Observation
    encoder: dict  #: what the client applied to its gradient (sketch or protocol encoder), for config.json
    label: str  #: "model / encoder" for titles
    folder_tag: str  #: the encoder's name in default run-folder names


def threat_of(cfg: RunConfig) -> ThreatModel:
    return ThreatModel(knows_labels=cfg.labels_given, knows_sketch=cfg.sketch_known,
                       knows_clip=cfg.attacker_knows_clip)


def gradient_case(cfg: RunConfig, device: torch.device, dtype: torch.dtype) -> Case:
    """One client's gradient on a batch of the data set, through the defense and the sketch."""
    seeds = cfg.derived()
    ds = get_dataset(cfg.dataset or "photos", root=cfg.data_root, download=cfg.download, image_size=cfg.image_size)
    x, labels = get_batch(ds, cfg.image_index, cfg.batch_size)
    victim = targets.get_model(cfg.model, num_classes=ds.num_classes, in_shape=ds.in_shape, seed=seeds.model_seed,
                               init=cfg.weight_init, bn_mode=cfg.bn, **cfg.model_params)
    if cfg.weights:
        targets.load_weights(victim, cfg.weights)
    victim.to(device=device, dtype=dtype)
    cfg.validate_for(victim.d)
    sketch = get_sketch(cfg.sketch, victim.d, cfg.sketch_b(victim.d), seed=seeds.sketch_seed,
                        **cfg.sketch_params).to(device)
    x, labels = x.to(device=device, dtype=dtype), victim.target(labels.to(device))
    obs = observe(victim, x, labels, Channel(sketch, cfg.defense), threat_of(cfg), noise_seed=seeds.noise_seed)
    return Case(ds, victim, x, labels, obs, sketch.describe(), f"{cfg.model} / {cfg.sketch}", cfg.sketch)


def protocol_case(cfg: RunConfig, device: torch.device, dtype: torch.dtype) -> Case:
    """Client c's round-t message of protocol ``cfg.protocol`` and the attacker's unrolled model of it."""
    if cfg.protocol_dir:
        spec, model_spec, rounds = stored_protocol(cfg.protocol_dir, cfg.protocol)
        spec = {**SPEC_DEFAULTS, **spec}
    else:
        spec = {**SPEC_DEFAULTS, **cfg.protocol_spec, "seed": cfg.seed, "sketch": cfg.sketch,
                "sketch_ratio": cfg.sketch_ratio, "sketch_params": dict(cfg.sketch_params)}
        model_spec = {**MODEL_DEFAULTS, "model": cfg.model, "init": cfg.weight_init or MODEL_DEFAULTS["init"],
                      "act": cfg.protocol_act, "dataset": cfg.dataset or "digits", "data_root": cfg.data_root,
                      "seed": cfg.seed}
        rounds = None
    validate_protocol(cfg.protocol, spec)
    t, c = cfg.protocol_round, cfg.protocol_client
    if rounds is not None and t > rounds:
        raise ConfigError(f"round {t} does not exist: '{cfg.protocol_dir}' holds rounds 1..{rounds}")
    if not 0 <= c < spec["clients"]:
        raise ConfigError(f"client {c} does not exist: the protocol has clients 0..{spec['clients'] - 1}")
    trainset, _ = load_split(model_spec, cfg.download)
    victim = build_victim(model_spec, trainset, dtype, device)
    validate_protocol(cfg.protocol, spec, victim.d)
    proto = get_protocol(cfg.protocol, victim, trainset, **spec)
    if c not in proto.sampled(t):
        raise ConfigError(f"client {c} is not sampled in round {t} (sampled: {proto.sampled(t)})")
    if proto.shards[c].numel() == 0:
        raise ConfigError(f"client {c} holds no data")
    if rounds is not None:
        check_unchanged(cfg.protocol_dir, proto.describe())
        w = load_checkpoint(Path(cfg.protocol_dir), t, victim.d).to(device=device, dtype=dtype)
    else:  # deterministic re-simulation of rounds 1..t-1 from the seeds
        w = proto.replay(t)
    torch.nn.utils.vector_to_parameters(w, victim.model.parameters())
    msg = proto.observe(w, t, c, batch_size=cfg.batch_size, sketch_known=cfg.sketch_known,
                        decoded=cfg.match_space == "unsketched")
    msg.info.update(protocol_spec=spec, model_spec=model_spec,
                    w_source="checkpoint" if rounds is not None else "re-simulated")
    msg.info["label_snr"] = sign_rule_snr(victim, msg.linear_map, msg.y)
    obs = from_protocol(msg, victim, threat_of(cfg))
    if cfg.batch_size != spec["batch_size"]:
        warnings.warn(f"the attacked message is computed on {cfg.batch_size} image(s) while the protocol's clients "
                      f"train on batches of {spec['batch_size']}; --batch-size {spec['batch_size']} attacks the "
                      "protocol's own message", SettingWarning, stacklevel=2)
    encoder = msg.linear_map.describe()
    return Case(trainset, victim, msg.x, victim.target(msg.labels), obs, encoder,
                f"{cfg.model} / {cfg.protocol} ({_encoder_name(encoder['encoder'])}, round {t}, client {c})",
                cfg.protocol)


def _encoder_name(encoder: dict) -> str:
    """'srht b=1343', 'countsketch-table 20x40', 'none' (identity): what the client applied to its update."""
    if "rows" in encoder and "buckets" in encoder:
        return f"{encoder['kind']} {encoder['rows']}x{encoder['buckets']}"
    return encoder["kind"] if encoder["kind"] == "none" else f"{encoder['kind']} b={encoder['b']}"


_CASES = Registry("case")
_CASES.register("gradient", gradient_case)
_CASES.register("protocol", protocol_case)


def build_case(cfg: RunConfig, device: torch.device, dtype: torch.dtype) -> Case:
    """The case a configuration asks for: a protocol message when ``cfg.protocol`` is set, else one gradient."""
    return _CASES.get("protocol" if cfg.protocol else "gradient")(cfg, device, dtype)


__all__ = ["Case", "build_case", "gradient_case", "protocol_case", "threat_of"]
