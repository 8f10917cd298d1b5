"""Cases: who is attacked and what the client sent, built from a run configuration.

A case holds the victim, the true data (for scoring only) and the attacker's
:class:`~leakattack.observation.Observation`.  Three kinds, in the breaching
sense of a *case* apart from the *attack*:

* ``gradient`` — one client sends its (defended, sketched) gradient on a batch of
  the data set: ``observe(victim, x, labels, Channel(sketch, defense))``.
* ``protocol`` — client c's message in round t of a federated protocol, produced
  by ``Protocol.observe`` at w^t (from a ``leakattack train`` checkpoint, or
  re-simulated from the seeds).
* ``message`` — a captured message file (:mod:`leakattack.results.message`): the
  user's model at the given weights, the message and what the file says about
  how it was made; the truth only when a truth file is given.
"""

from __future__ import annotations

import math
import shlex
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

import defenses
import targets
from targets.protocols import SPEC_DEFAULTS, MessageMap, forward_seconds, get_protocol, local_sgd

from .attacks import sign_rule_snr
from .attacks.seed_search import candidate_base, search_seed
from .channel import Channel
from .config import PROTOCOL_PARAMS, RUN_PARAMS, ConfigError, RunConfig, validate_protocol, warn_unread
from .config.params import duration_seconds
from .config.run import RUN_DEFAULTS
from .data import ImageSet, get_batch, get_dataset
from .errors import SettingWarning, UserError, duration_text, size_text
from .observation import (
    LinearMap,
    Observation,
    ThreatModel,
    attacker_forward,
    from_protocol,
    noise_share_entries,
    observe,
    unknown_seed,
    zero_message,
)
from .registry import Registry
from .results.message import Message, first_label_outside, read_message, read_truth
from .sketch import (
    DESCRIPTION_KEYS,
    get_sketch,
    is_identity,
    list_sketches,
    regeneration_note,
    regeneration_refusal,
    sketch_dim,
    sketch_from_description,
)
from .sketch.gaussian import available_bytes
from .training import (
    MODEL_DEFAULTS,
    build_victim,
    check_round,
    check_unchanged,
    load_split,
    refuse_empty_clients,
    refuse_long_rounds,
    stored_protocol,
    trained_model_spec,
    warn_client_batch,
    weights_at,
)

#: a protocol attack whose unrolled client model is estimated to take longer than this (seconds) is warned about
SLOW_UNROLL_SECONDS = 180.0


@dataclass
class Case:
    """A victim, its true data and what the attacker observes."""

    dataset: ImageSet
    victim: targets.Victim
    x: torch.Tensor | None  #: the client's true batch (for scoring only; None: a message without a truth file)
    labels: torch.Tensor | None  #: its true labels, in the form the loss takes (None: unknown)
    obs: Observation
    encoder: dict  #: what the client applied to its gradient (sketch or protocol encoder), for config.json
    label: str  #: "model / encoder" for titles
    folder_tag: str  #: the encoder's name in default run-folder names
    settings: dict = field(default_factory=dict)  #: run parameters the case fixes (a message file's sketch, batch)
    #: the data-set settings the case read (a message file that states its input shape and classes reads neither)
    reads_data: tuple = ("dataset", "image_size")


def threat_of(cfg: RunConfig) -> ThreatModel:
    return ThreatModel(knows_labels=cfg.labels_given, knows_sketch=cfg.sketch_known,
                       knows_clip=cfg.attacker_knows_clip, knows_prune=cfg.attacker_knows_prune,
                       knows_bn_stats=cfg.bn_stats == "client")


def attacker_seed(cfg: RunConfig, desc: dict, victim: targets.Victim, y: torch.Tensor,
                  progress: bool = False) -> tuple[int, dict]:
    """The seed of the attacker's R for the client's sketch ``desc``, and what found it.

    The client's seed when the threat model grants it; else, with ``--sketch-seed-search BITS``, the best of the
    2^BITS candidates that share every other bit with the client's seed (scored on y alone; the client's seed
    only fills in its rank); else another seed.  The dict is ``{"seed_search": record}`` after a search.
    """
    if cfg.sketch_known:
        return desc["seed"], {}
    if not cfg.sketch_seed_search:
        return unknown_seed(desc["seed"]), {}
    bits = cfg.sketch_seed_search
    if cfg.attack_class.modifies_model:  # the client's seed ranked last of 256 under imprint's 16-bin block
        warnings.warn(f"attack '{cfg.attack}' adds a block to the model whose gradient outweighs the classifier "
                      "head's in the message, and --sketch-seed-search scores the head's block of R^T y: the "
                      "search is not expected to single out the client's seed (docs/attacks/seed-search.md)",
                      SettingWarning, stacklevel=3)
    params = {k: v for k, v in desc.items() if k not in DESCRIPTION_KEYS}
    found = search_seed(victim, y, desc["kind"], desc["b"], params, seed_base=candidate_base(desc["seed"], bits),
                        bits=bits, true_seed=desc["seed"], progress=progress)
    return found.found_seed, {"seed_search": found.record()}


def unknown_seed_view(cfg: RunConfig, obs: Observation, sketch, progress: bool = False) -> Observation:
    """``obs`` as an attacker without the seed of ``sketch`` sees it: its model of the client uses the R of
    :func:`attacker_seed` (same family, d, b and parameters)."""
    seed, found = attacker_seed(cfg, sketch.describe(), obs.victim, obs.y, progress)
    mine = get_sketch(sketch.kind, sketch.d, sketch.b, seed=seed, memory_gb=cfg.sketch_memory,
                      **cfg.sketch_params).to(obs.y.device)
    return replace(obs, forward=attacker_forward(obs.victim, Channel(mine, cfg.defense), obs.threat),
                   linear_map=mine, client_map=obs.sent_map,
                   extra={**obs.extra, **found})


def drawn_by(cfg: RunConfig) -> str | None:
    """The settings given that draw the model's initial weights (--model-seed, --weight-init), in words, or None."""
    given = [f"--model-seed {cfg.model_seed}"] if cfg.model_seed is not None else []
    given += [f"--weight-init {cfg.weight_init}"] if cfg.weight_init is not None else []
    return " and ".join(given) or None


def trained_params(cfg: RunConfig, spec: dict | None) -> tuple[dict, dict]:
    """(the model parameters to build with, the run settings that fixes) for ``--weights`` of a `leakattack train`
    run whose model spec (its protocol.json's: :func:`~leakattack.training.trained_model_spec`) is ``spec``.

    train's --act defaults to tanh, a model's own act to its architecture's (resnet20: relu): a run that names no
    act builds the training's, records it (config.json's run.model_params) and says so in one line; one that names
    another keeps it and is warned that the clients did not train those units."""
    params = dict(cfg.model_params)
    act = spec.get("act") if spec and spec.get("model") == cfg.model else None
    if act not in targets.models.ACTIVATIONS or "act" not in targets.model_params(cfg.model):
        return params, {}
    if "act" in params:
        if params["act"] != act:
            warnings.warn(f"weights file '{cfg.weights}' was trained by `leakattack train` with act={act} (its "
                          f"protocol.json), and this run's {cfg.model} has {params['act']} units: the message is "
                          f"computed with other activations than the clients trained with; give --model-param "
                          f"act={act}", SettingWarning, stacklevel=4)
        return params, {}
    if act == targets.models.param_default(cfg.model, "act"):
        return params, {}
    params["act"] = act
    warnings.warn(f"weights file '{cfg.weights}' was trained by `leakattack train` with act={act} (its "
                  f"protocol.json): {cfg.model} is built with act={act} units to match (--model-param act=NAME "
                  "builds others)", SettingWarning, stacklevel=4)
    return params, {"model_params": params}


def _default_act(cfg: RunConfig, spec: dict | None) -> tuple[str, str] | None:
    """(model, the activation it is built with by default) for a model of the registry where neither the run nor a
    training's protocol.json (``spec``) names one (None where one does, or where the model has no ``act``); a
    protocol.json of another model (a file copied into another training's folder) names none of this one's."""
    if (spec is not None and spec.get("model") == cfg.model) or cfg.model not in targets.list_models() \
            or "act" not in targets.model_params(cfg.model) or "act" in cfg.model_params:
        return None
    return cfg.model, str(targets.models.param_default(cfg.model, "act"))


def _check_regression_outputs(cfg: RunConfig, victim: targets.Victim, ds) -> None:
    """One sentence where a regression answers with other than one number per example: a run's targets are the data
    set's labels, one number per image (a class of the user's that takes ``num_classes`` is built with the data set's
    classes)."""
    if victim.task != "regression":
        return
    with torch.no_grad(), targets.kept_buffers(victim.model):
        each = victim(torch.zeros(2, *victim.input_shape, dtype=victim.dtype, device=victim.device)).numel() // 2
    if each != 1:
        takes = " (its class takes num_classes, which a run sets to the data set's " \
            f"{ds.num_classes} classes: leave it out of __init__)" if each == ds.num_classes else ""
        raise ConfigError(f"model '{cfg.model}' is a regression that answers {each} numbers per example"
                          f"{takes}, and a run's targets are the data set's labels, one number per image: give it one "
                          "output per example")


def gradient_case(cfg: RunConfig, device: torch.device, dtype: torch.dtype, progress: bool = False) -> Case:
    """One client's gradient on a batch of the data set, through the defense and the sketch."""
    seeds = cfg.derived()
    ds = get_dataset(cfg.dataset or "photos", root=cfg.data_root, download=cfg.download, image_size=cfg.image_size)
    x, labels = get_batch(ds, cfg.image_index, cfg.batch_size, cfg.batch_draw)
    spec = trained_model_spec(cfg.weights) if cfg.weights else None  # a training's checkpoint: its model spec
    if spec is not None and not Path(cfg.weights).exists():  # before the notes a checkpoint's training gives
        held = sorted(p.name for p in Path(cfg.weights).parent.glob("round_*.pt"))
        where = f"its folder holds {held[0]} to {held[-1]}" if held else "its folder holds no checkpoint"
        raise ConfigError(f"weights file '{cfg.weights}' does not exist ({where})")
    params, settings = trained_params(cfg, spec)
    victim = targets.get_model(cfg.model, num_classes=ds.num_classes, in_shape=ds.in_shape, seed=seeds.model_seed,
                               init=cfg.weight_init, bn_mode=targets.resolve_bn_mode(cfg.bn, cfg.batch_size),
                               **params)
    _check_regression_outputs(cfg, victim, ds)
    if cfg.weights:
        try:
            targets.load_weights(victim, cfg.weights, drawn_by=drawn_by(cfg), unnamed_act=_default_act(cfg, spec))
        except UserError as err:  # a training's checkpoint names the model and data it was trained on
            if spec and (spec.get("model"), spec.get("dataset")) == (cfg.model, cfg.dataset or "photos") \
                    and cfg.image_size is not None:  # `leakattack train` reads its set at the set's default size
                raise ConfigError(f"{err}; its protocol.json: a training of {cfg.model} on {spec.get('dataset')} at "
                                  "the set's default image size, which `leakattack train` reads: leave out "
                                  f"--image-size {cfg.image_size}") from None
            if not spec or (spec.get("model"), spec.get("dataset")) == (cfg.model, cfg.dataset or "photos"):
                raise
            root = f" --data-root {shlex.quote(str(spec['data_root']))}" if spec.get("data_root") else ""
            raise ConfigError(f"{err} (its protocol.json: a training of {spec.get('model')} on "
                              f"{spec.get('dataset')}; give --model {spec.get('model')} --dataset "
                              f"{spec.get('dataset')}{root})") from None
    if cfg.attack_class.modifies_model:  # the server sends its own model, built from images it holds
        cfg.attack_class(**cfg.attack_options()).modify(victim, ds)
    victim.to(device=device, dtype=dtype)
    cfg.validate_for(victim.d)
    sketch = get_sketch(cfg.sketch, victim.d, cfg.sketch_b(victim.d), seed=seeds.sketch_seed,
                        memory_gb=cfg.sketch_memory, **cfg.sketch_params).to(device)
    refusal = regeneration_refusal(sketch, dtype, time_limit=duration_seconds(seeds.time_limit))
    if refusal:
        raise ConfigError(refusal)
    note = regeneration_note(sketch, seeds.iterations * cfg.restarts, dtype,
                             time_limit=duration_seconds(seeds.time_limit), optimizer=seeds.optimizer,
                             closed_form=bool(getattr(cfg.attack_class, "closed_form", False)))
    if note:
        warnings.warn(note, SettingWarning, stacklevel=2)
    sketch.cost_told = True  # the run's own words, with its iterations, stand for observe's
    x, labels = x.to(device=device, dtype=dtype), victim.target(labels.to(device))
    threat = threat_of(cfg)
    unknown = not cfg.sketch_known and not sketch.identity  # the attacker's R: drawn below, with --sketch-memory and
    # the seed search, where observe would draw it from another seed alone
    obs = observe(victim, x, labels, Channel(sketch, cfg.defense), replace(threat, knows_sketch=True) if unknown
                  else threat, noise_seed=seeds.noise_seed)
    if unknown:
        obs = replace(unknown_seed_view(cfg, obs, sketch, progress), threat=threat)
    return Case(ds, victim, x, labels, obs, sketch.describe(), f"{cfg.model} / {cfg.sketch}", cfg.sketch,
                settings=settings)


def protocol_case(cfg: RunConfig, device: torch.device, dtype: torch.dtype, progress: bool = False) -> Case:
    """Client c's round-t message of protocol ``cfg.protocol`` and the attacker's unrolled model of it."""
    if str(cfg.defense or "").strip() not in ("", "none"):
        raise ConfigError(f"--defense {cfg.defense!r} does not apply to a protocol's message, which is what the "
                          "protocol's clients send (the DP protocols add their own noise): leave --defense out")
    if cfg.protocol_dir:
        spec, model_spec, rounds = stored_protocol(cfg.protocol_dir, cfg.protocol)
        stored_settings_kept(cfg, spec, model_spec)
    else:
        spec = {**SPEC_DEFAULTS, **cfg.protocol_spec, "seed": cfg.seed, "sketch": cfg.sketch,
                "sketch_ratio": cfg.sketch_ratio, "sketch_params": dict(cfg.sketch_params)}
        model_spec = {**MODEL_DEFAULTS, "model": cfg.model, "init": cfg.weight_init or MODEL_DEFAULTS["init"],
                      "act": cfg.protocol_act, "dataset": cfg.dataset or "digits", "data_root": cfg.data_root,
                      "seed": cfg.seed}
        rounds = None
        warn_unread(cfg.protocol, [k for k in ("sketch", "sketch_ratio", "sketch_params") if cfg.set_by_user(k)]
                    + [k for k, v in cfg.protocol_spec.items() if spec_set_by_user(cfg, k)], spec)
    if cfg.set_by_user("protocol_act") and "act" not in targets.model_params(model_spec["model"]):
        warnings.warn(f"--act changes nothing for model '{model_spec['model']}', which has no activation parameter",
                      SettingWarning, stacklevel=2)
    validate_protocol(cfg.protocol, spec)
    t, c = cfg.protocol_round, cfg.protocol_client
    if rounds is not None:
        check_round(cfg.protocol_dir, t, rounds)
    if not 0 <= c < spec["clients"]:
        raise ConfigError(f"client {c} does not exist: the protocol has clients 0..{spec['clients'] - 1}")
    trainset, _ = load_split(model_spec, cfg.download)
    victim = build_victim(model_spec, trainset, dtype, device)
    validate_protocol(cfg.protocol, spec, victim.d)
    proto = get_protocol(cfg.protocol, victim, trainset, **spec)
    sampled = proto.sampled(t)
    if not sampled:
        raise ConfigError(f"no client is sampled in round {t}")
    if c not in sampled:
        raise ConfigError(f"client {c} is not sampled in round {t} (sampled: {sampled}): give --client {sampled[0]}")
    refuse_empty_clients(proto.shards, len(trainset))  # as `leakattack train` refuses that split
    refuse_long_rounds(proto)
    if spec["local_epochs"] and cfg.batch_size not in (1, proto.shards[c].numel()):
        raise ConfigError(f"--batch-size {cfg.batch_size} does not apply with --local-epochs: the message covers "
                          f"client {c}'s {proto.shards[c].numel()} images in mini-batches of --client-batch "
                          f"{spec['batch_size']}; leave --batch-size out")
    if rounds is None:  # a stored protocol's batch was warned of when it trained; a refusal above comes first
        warn_client_batch(spec, trainset)
    if rounds is not None:
        check_unchanged(cfg.protocol_dir, proto.describe())
    # w^t from the run's checkpoint (or the latest one before it), else re-simulated from the seeds
    w, w_source, read = weights_at(proto, t, cfg.protocol_dir if rounds is not None else None, progress)
    with torch.no_grad():  # w^t holds the trainable weights only: a frozen layer keeps the victim's own
        for name, value in targets.unflatten(victim, w).items():
            victim.model.get_parameter(name).copy_(value)
    msg = proto.observe(w, t, c, batch_size=cfg.batch_size, sketch_known=cfg.sketch_known,
                        decoded=cfg.match_space == "unsketched")
    msg.info.update(protocol_spec=spec, model_spec=model_spec, w_source=w_source)
    if read is not None:  # the file w^t came from, which config.json fingerprints
        msg.info["checkpoint_file"] = str(read)
    noise = proto.privacy(t)  # a DP protocol's noise, and its epsilon over rounds 1..t: the messages up to this one
    if noise:
        msg.info["privacy"] = noise
    if (note := proto.paper_bound_note(t)) is not None:  # the paper's epsilon past its conditions, as train says
        warnings.warn(note, SettingWarning, stacklevel=2)
    msg.info["label_snr"] = sign_rule_snr(victim, msg.linear_map, msg.y)
    obs = from_protocol(msg, victim, threat_of(cfg))
    n, K = msg.x.shape[0], msg.info["local_steps"]
    own = min(spec["batch_size"], proto.shards[c].numel())  # the batch client c's round trains on
    msg.info["client_batch"] = own
    if not spec["local_epochs"] and n < cfg.batch_size:  # the client holds fewer: its whole shard
        warnings.warn(f"--batch-size {cfg.batch_size} is more than the {n} images client {c} holds: the attacked "
                      f"message is computed on those {n}"
                      + (f", while the protocol's clients train on batches of {spec['batch_size']}" if
                         n != own else ""), SettingWarning, stacklevel=2)
    elif not spec["local_epochs"] and n != own:
        cut = "" if own == spec["batch_size"] else \
            f" (--client-batch {spec['batch_size']} cut to the {own} images client {c} holds)"
        warnings.warn(f"the attacked message is computed on {n} image(s) while the protocol's client {c} trains on "
                      f"batches of {own}{cut}; --batch-size {own} attacks the protocol's own message", SettingWarning,
                      stacklevel=2)
    # a stored run's sketch is what ran: config.json records it (a sketch of b = d keeps the run's ratio)
    settings = {} if rounds is None else {
        "sketch": spec["sketch"], "sketch_params": dict(spec["sketch_params"]),
        "sketch_ratio": cfg.sketch_ratio if is_identity(spec["sketch"]) else spec["sketch_ratio"]}
    groups = len(msg.info.get("minibatch_sizes", [n]))  # mini-batches per local epoch
    if cfg.label_mode == "idlg" and victim.task == "classification" and not cfg.attack_class.closed_form:
        if groups > 1:  # a recovered multiset cannot be placed in the mini-batches: soft labels instead
            settings["label_mode"] = "dlg"
            warnings.warn(f"labels: label recovery gives the round's {n} labels as one multiset, not which of them "
                          f"share each of the {groups} mini-batches the message depends on, so the attack optimises "
                          "soft labels (--labels dlg); --labels given grants the true ones", SettingWarning,
                          stacklevel=2)
        elif K > 1:
            what = "the label is" if n == 1 else f"the {n} labels are"
            warnings.warn(f"labels: {what} recovered from the {K}-step update read as -eta K times one mean "
                          f"gradient at w^t (first order in eta, exact for one step); metrics.json's label_acc says "
                          "how well, and --labels given or --labels dlg replace them", SettingWarning, stacklevel=2)
    budget = cfg.derived()
    iterations = budget.iterations
    closed = cfg.attack_class.closed_form  # it solves once: it unrolls nothing per step
    seconds = 0.0 if closed else forward_seconds(msg, victim.target(msg.labels)) * iterations * cfg.restarts
    limit = duration_seconds(budget.time_limit)  # the attack stops there, whatever its budget of steps
    if seconds > SLOW_UNROLL_SECONDS and (limit is None or limit > SLOW_UNROLL_SECONDS):
        cut = "" if limit is None or limit >= seconds else \
            f"; its time limit of {duration_text(limit)} stops it after about {int(iterations * limit / seconds)}"
        warnings.warn(f"the attacker unrolls {K} local step(s) over {n} image(s) per evaluation: about "
                      f"{duration_text(seconds)} for {iterations} iterations x {cfg.restarts} restart(s) "
                      f"(at least one evaluation each){cut}; fewer --iterations, a larger --client-batch or more "
                      "--clients shorten it", SettingWarning, stacklevel=2)
    encoder = msg.linear_map.describe()
    return Case(trainset, victim, msg.x, victim.target(msg.labels), obs, encoder,
                f"{cfg.model} / {cfg.protocol} ({_encoder_name(encoder['encoder'])}, round {t}, client {c})",
                cfg.protocol, settings)


def _encoder_name(encoder: dict) -> str:
    """'srht b=1343', 'countsketch-table 20x40', 'none' (identity): what the client applied to its update."""
    if "rows" in encoder and "buckets" in encoder:
        return f"{encoder['kind']} {encoder['rows']}x{encoder['buckets']}"
    unsketched = encoder["kind"] in list_sketches() and is_identity(encoder["kind"])
    return encoder["kind"] if unsketched else f"{encoder['kind']} b={encoder['b']}"


_FLAGS = {p.name: p.option for p in RUN_PARAMS}
_SPEC_FLAGS = {p.name: p.option for p in PROTOCOL_PARAMS}


def message_settings(cfg: RunConfig, msg: Message) -> dict:
    """The run parameters a message file fixes; a flag the user set to something else is refused in one sentence."""
    desc = msg.sketch or {"kind": "none", "d": 0, "b": 0, "seed": 0}
    params = {k: v for k, v in desc.items() if k not in ("kind", "d", "b", "seed")}
    settings = {"sketch": desc["kind"], "sketch_params": params, "batch_size": msg.batch_size,
                "defense": msg.defense or ""}
    if msg.sketch is not None:
        settings.update(sketch_seed=desc["seed"])
        if not is_identity(desc["kind"]):  # b, and a ratio that gives it (the user's, the default, else b/d); the
            settings["sketch_dim"] = desc["b"]  # identity sends b = d whatever they say, and they stay unset
            settings["sketch_ratio"] = next((r for r in (cfg.sketch_ratio, RUN_DEFAULTS["sketch_ratio"])
                                             if sketch_dim(r, desc["d"]) == desc["b"]), desc["b"] / desc["d"])
    if msg.labels is not None:
        settings["label_mode"] = "given"  # labels in the file are known to the attacker
    for key, value in settings.items():
        differs = (cfg.set_by_user(key) and defenses.build(cfg.defense).spec != defenses.build(value).spec
                   if key == "defense" else cfg_value_differs(cfg, key, value))  # a defense as the run reads it
        if differs:
            shown = "none" if key == "defense" and not value else repr(value)
            raise ConfigError(f"{_FLAGS[key]} {getattr(cfg, key)!r} contradicts message file '{msg.path}', whose "
                              f"{key.replace('_', ' ')} is {shown}: leave {_FLAGS[key]} out")
    return settings


#: run settings a stored protocol run fixes -> its model spec's key for them
_MODEL_SETTINGS = {"model": "model", "dataset": "dataset", "protocol_act": "act", "weight_init": "init"}


def stored_settings_kept(cfg: RunConfig, spec: dict, model_spec: dict) -> None:
    """Refuse, in one sentence, a flag the user set to other than what the stored protocol run in
    ``cfg.protocol_dir`` trained with (its protocol.json fixes the model, data, sketch and protocol settings)."""
    stored = {"sketch": spec["sketch"], "sketch_ratio": spec["sketch_ratio"], "sketch_params": spec["sketch_params"],
              **{k: model_spec.get(v) for k, v in _MODEL_SETTINGS.items()}}
    clash = [(_FLAGS[k], getattr(cfg, k), v) for k, v in stored.items() if cfg_value_differs(cfg, k, v)]
    clash += [(_SPEC_FLAGS[k], v, spec.get(k)) for k, v in cfg.protocol_spec.items()
              if k in _SPEC_FLAGS and spec_set_by_user(cfg, k) and v != spec.get(k)]
    if clash:
        flag, mine, theirs = clash[0]
        raise ConfigError(f"{flag} {mine!r} contradicts '{cfg.protocol_dir}', whose protocol run used {theirs!r}: "
                          f"leave {flag} out (protocol.json fixes it)")


def cfg_value_differs(cfg: RunConfig, key: str, value) -> bool:
    """Whether the user set ``key`` (:meth:`RunConfig.set_by_user`) to something other than ``value``."""
    return cfg.set_by_user(key) and getattr(cfg, key) != value


def spec_set_by_user(cfg: RunConfig, key: str) -> bool:
    """Whether the user set protocol setting ``key``: given explicitly, or away from its default."""
    return f"protocol_spec.{key}" in cfg.given or cfg.protocol_spec.get(key) != SPEC_DEFAULTS.get(key)


#: copies of the batch an attack holds at least: the dummy images, their gradient, two optimiser moments (Adam's;
#: L-BFGS keeps more), besides the model's activations
BATCH_COPIES = 4


def _check_message_size(cfg: RunConfig, msg: Message, in_shape: tuple, num_classes: int, device: torch.device,
                        dtype: torch.dtype) -> None:
    """Refuse a message whose attack cannot fit in memory, before the model is built (ConfigError naming the field):
    the batch (BATCH_COPIES x batch_size x the numbers of one input), the model's weights counted without
    allocating them, and an update's unrolled local steps (one copy of the weights per step, kept for the gradient
    in x)."""
    size, have = torch.tensor([], dtype=dtype).element_size(), available_bytes(device)
    dt = str(dtype).replace("torch.", "")
    where = f"message file '{msg.path}'"
    batch = BATCH_COPIES * msg.batch_size * math.prod(in_shape) * size
    if batch > have:
        raise ConfigError(f"{where}: a batch of batch_size = {msg.batch_size} inputs of shape {tuple(in_shape)} needs "
                          f"at least {size_text(batch)} in {dt} ({BATCH_COPIES} copies: the dummy images, their "
                          f"gradient and two optimiser moments), and {size_text(have)} is available")
    d = targets.parameter_count(cfg.model, num_classes=num_classes, in_shape=in_shape, **cfg.model_params)
    if d is None:
        return  # the build says what is wrong, or the user's class cannot be counted without building it
    steps = msg.local_steps if msg.kind == "update" else 0
    weights = (steps + 2) * d * size  # w, the message's gradient, and w at every unrolled step
    if weights > have:
        if steps and steps * d * size > have / 2:
            raise ConfigError(f"{where}: unrolling local_steps = {msg.local_steps} SGD steps of model '{cfg.model}' "
                              f"(d = {d:,} weights) keeps a copy of the weights per step, at least "
                              f"{size_text(weights)} in {dt}, and {size_text(have)} is available")
        raise ConfigError(f"{where}: model '{cfg.model}' built for its input_shape {tuple(in_shape)} and num_classes "
                          f"{num_classes} has d = {d:,} weights, at least {size_text(weights)} in {dt} with its "
                          f"gradient, and {size_text(have)} is available")


def _check_message_labels(cfg: RunConfig, msg: Message, truth, num_classes: int) -> None:
    """A classifier's labels in the message file and in the truth file are class indices in [0, num_classes)
    (ConfigError naming the file, the model's class count and the first bad label)."""
    if targets.task_of(cfg.model) != "classification":
        return
    for where, labels in ((f"message file '{msg.path}'", msg.labels),
                          (f"truth file '{cfg.truth}'", None if truth is None else truth[1])):
        if labels is None:
            continue
        i = first_label_outside(labels, num_classes)
        if i is not None:
            raise ConfigError(f"{where}: 'labels' must be class indices in [0, {num_classes}) (model '{cfg.model}' "
                              f"has {num_classes} classes), got {int(labels[i])} at position {i}")
    if msg.labels is not None and truth is not None and truth[1] is not None \
            and sorted(msg.labels.reshape(-1).tolist()) != sorted(truth[1].reshape(-1).tolist()):
        warnings.warn(f"message file '{msg.path}' holds labels {_label_text(msg.labels)} and truth file "
                      f"'{cfg.truth}' {_label_text(truth[1])}: the attack is granted the message file's, and label "
                      "accuracy is scored against the truth file's", SettingWarning, stacklevel=4)


def _label_text(labels: torch.Tensor) -> str:
    """A batch's labels as a short list (the first 8 and how many more)."""
    values = labels.reshape(-1).tolist()
    more = f", ... ({len(values)} in all)" if len(values) > 8 else ""
    return "[" + ", ".join(str(int(v)) for v in values[:8]) + more + "]"


def message_reads_data(msg: Message, has_truth: bool) -> tuple:
    """The data-set settings a message run reads: ``dataset`` where the file leaves its input shape or classes open,
    ``image_size`` where the input shape then comes from the data set (neither the file nor a truth file gives it)."""
    shape_from_data = msg.input_shape is None and not has_truth
    if shape_from_data:
        return ("dataset", "image_size")
    return ("dataset",) if msg.num_classes is None else ()


def _message_victim(cfg: RunConfig, msg: Message, truth, seeds, device: torch.device,
                    dtype: torch.dtype) -> tuple[targets.Victim, ImageSet]:
    """The user's model at the given weights, built for the message's input shape and classes, each checked
    against the model before it is built (size, labels) and after (a probe batch, the weights file)."""
    if msg.input_shape is not None and msg.num_classes is not None:
        in_shape, num_classes = msg.input_shape, msg.num_classes
    else:  # what the file leaves open comes from the truth, else from --dataset
        ds = get_dataset(cfg.dataset or "photos", root=cfg.data_root, download=cfg.download,
                         image_size=cfg.image_size)
        in_shape = msg.input_shape or (tuple(truth[0].shape[1:]) if truth is not None else ds.in_shape)
        num_classes = msg.num_classes or ds.num_classes
    _check_message_labels(cfg, msg, truth, num_classes)
    _check_message_size(cfg, msg, in_shape, num_classes, device, dtype)
    built = (f"the model was built for message file '{msg.path}': input_shape {tuple(in_shape)}, num_classes "
             f"{num_classes}")
    try:
        victim = targets.get_model(cfg.model, num_classes=num_classes, in_shape=in_shape, seed=seeds.model_seed,
                                   init=cfg.weight_init, bn_mode=targets.resolve_bn_mode(cfg.bn, msg.batch_size),
                                   **cfg.model_params)
    except UserError as err:
        raise ConfigError(f"{err} ({built})") from None
    except Exception as err:  # noqa: BLE001 -- a registered model's constructor refusing the shape, in its words
        raise ConfigError(f"model '{cfg.model}' cannot be built for input_shape {tuple(in_shape)} and num_classes "
                          f"{num_classes} of message file '{msg.path}' ({type(err).__name__}: "
                          f"{str(err).strip().splitlines()[0] if str(err).strip() else ''})") from None
    if cfg.model in targets.list_models():  # the user's classes are probed when built
        _probe_message_model(cfg, msg, victim, built)
    named = msg.ids.get("weights")  # the weights file a recorder (the Flower one) wrote beside the message
    named = named if isinstance(named, str) and named else None
    if cfg.weights:
        try:
            targets.load_weights(victim, cfg.weights, drawn_by=drawn_by(cfg),
                                 unnamed_act=_default_act(cfg, trained_model_spec(cfg.weights)))
        except UserError as err:
            raise ConfigError(f"{err} ({built})") from None
        if named is not None and Path(cfg.weights).name != Path(named).name:
            warnings.warn(f"message file '{msg.path}' names its weights file '{named}', and --weights is "
                          f"'{cfg.weights}': the message is attacked at the weights given, which must be the weights "
                          "the client had", SettingWarning, stacklevel=3)
    else:
        which = f" (the message file names '{named}')" if named is not None else ""
        warnings.warn(f"no --weights{which}: the message is attacked at the weights model '{cfg.model}' draws from "
                      f"model seed {seeds.model_seed}, which must be the weights the client had", SettingWarning,
                      stacklevel=3)
    images = truth[0] if truth is not None else torch.zeros(0, *in_shape)
    labels = truth[1] if truth is not None and truth[1] is not None else torch.zeros(images.shape[0], dtype=torch.long)
    dataset = ImageSet(name="message", images=images, labels=labels, num_classes=num_classes, class_names=[],
                       source=f"message file {msg.path}")
    return victim, dataset


def _probe_message_model(cfg: RunConfig, msg: Message, victim: targets.Victim, built: str) -> None:
    """One forward pass of a batch of 2 zeros at the message's input shape (buffers restored): a registered model
    that cannot take the shape, or answers with the wrong outputs, is a ConfigError."""
    x = torch.zeros(2, *victim.input_shape, dtype=victim.dtype)
    try:
        out = targets.probe(victim, x, [], lambda *a: None)
    except Exception as err:  # noqa: BLE001 -- the model's own complaint, in one line
        text = str(err).strip().splitlines()
        raise ConfigError(f"model '{cfg.model}' fails on a batch of shape {tuple(x.shape)} ({type(err).__name__}"
                          f"{': ' + text[0] if text else ''}; {built})") from None
    problem = targets.output_problem(out, victim.task, victim.num_classes, 2)
    if problem:
        raise ConfigError(f"model '{cfg.model}' {problem} ({built})")


def _update_forward(victim: targets.Victim, view, lr: float, steps: int):
    """The attacker's model of an update message: x, labels -> view(w - u^K), u^k = u^{k-1} - lr grad F(u^{k-1}, x)."""
    w = targets.flat_params(victim)

    def forward(x, labels):
        u = local_sgd(lambda u, k: targets.flat_gradient(victim, x, labels, params=targets.unflatten(victim, u),
                                                         create_graph=True), w, lr, steps)
        return view(w - u)

    return forward


def message_case(cfg: RunConfig, device: torch.device, dtype: torch.dtype, progress: bool = False) -> Case:
    """A captured message file: the user's model at the given weights, the message, and the truth if given."""
    seeds = cfg.derived()
    msg = read_message(cfg.message)
    settings = message_settings(cfg, msg)
    truth = read_truth(cfg.truth) if cfg.truth else None
    if truth is not None and truth[0].shape[0] != msg.batch_size:
        raise ConfigError(f"truth file '{cfg.truth}' holds {truth[0].shape[0]} images but the message was computed "
                          f"on a batch of {msg.batch_size}")
    victim, dataset = _message_victim(cfg, msg, truth, seeds, device, dtype)
    victim.to(device=device, dtype=dtype)
    if truth is not None and tuple(truth[0].shape[1:]) != tuple(victim.input_shape):
        raise ConfigError(f"truth file '{cfg.truth}' holds images of shape {tuple(truth[0].shape[1:])}, "
                          f"the message's model takes {tuple(victim.input_shape)}")
    found: dict = {}
    client_sketch = None  #: the client's sketch where the attacker's is a guess of its seed
    if msg.sketch is None:
        if cfg.sketch_seed_search:
            raise ConfigError(f"--sketch-seed-search needs a sketched message, and message file '{msg.path}' is not "
                              "sketched")
        if not cfg.sketch_known:
            warnings.warn(f"message file '{msg.path}' is not sketched: --sketch-unknown changes nothing",
                          SettingWarning, stacklevel=4)
        sketch = get_sketch("none", victim.d, victim.d)
    elif msg.sketch["d"] != victim.d:
        raise ConfigError(f"message file '{msg.path}' was sketched from d = {msg.sketch['d']} numbers, but model "
                          f"'{cfg.model}' has d = {victim.d} parameters")
    else:
        desc = dict(msg.sketch)
        if msg.y.numel() == desc["b"]:  # else refused below
            desc["seed"], found = attacker_seed(cfg, desc, victim, msg.y, progress)
        sketch = sketch_from_description(desc)
        if desc["seed"] != msg.sketch["seed"]:  # the attacker's guess: the message's epsilon reads the client's R
            client_sketch = sketch_from_description(dict(msg.sketch))
    if msg.y.numel() != sketch.b:
        raise ConfigError(f"message file '{msg.path}' has {msg.y.numel()} numbers, but model '{cfg.model}' has "
                          f"d = {victim.d} parameters and the message is not sketched")
    sketch.to(device)
    try:
        channel = Channel(sketch, msg.defense or "")
    except UserError as err:
        raise ConfigError(f"message file '{msg.path}': {err}") from None
    # labels: the file's are granted; --labels given grants the truth's
    known = msg.labels if msg.labels is not None else (truth[1] if truth is not None and cfg.labels_given else None)
    if cfg.bn_stats == "client":
        raise ConfigError(f"message file '{msg.path}' holds no BatchNorm statistics of the client, so --bn-stats "
                          "client cannot be granted; use --bn-stats running")
    if cfg.labels_given and known is None:
        why = "--labels given" if cfg.label_mode == "given" else f"model '{cfg.model}' (a regression)"
        raise ConfigError(f"{why} needs the labels, and neither message file '{msg.path}' nor a truth file holds any")
    threat = ThreatModel(knows_labels=known is not None, knows_sketch=cfg.sketch_known,
                         knows_clip=cfg.attacker_knows_clip, knows_prune=cfg.attacker_knows_prune)
    # the truth's labels score the run; the message file's are the client's claim, granted to the attack, and
    # scoring them against themselves would read 1 whatever they are
    score_labels = truth[1] if truth is not None and truth[1] is not None else None
    def target(t):
        return None if t is None else victim.target(t.to(device))
    view = channel.attacker_view(threat)
    linear_map: LinearMap
    client_map: LinearMap | None = None
    if msg.kind == "gradient":
        forward, linear_map, client_map = attacker_forward(victim, channel, threat), sketch, client_sketch
    else:
        if view.per_example:
            raise ConfigError(f"message file '{msg.path}' is an update, and its defense's per_example step "
                              "clips gradients, not updates")
        assert msg.lr is not None  # read_message refuses an update without its lr
        forward = _update_forward(victim, view, msg.lr, msg.local_steps)
        # w - u^K = lr K g to first order in lr (exact for one local step), as Protocol.message_scale reads it
        kind = {"kind": "message:update", "local_steps": msg.local_steps, "local_lr": msg.lr}
        linear_map = MessageMap(sketch, msg.lr * msg.local_steps, kind)
        if client_sketch is not None:
            client_map = MessageMap(client_sketch, msg.lr * msg.local_steps, kind)
    y = msg.y.to(device=device, dtype=dtype)
    extra = {"message_ids": dict(msg.ids), **found}
    zero_message(y, extra, f"message file '{msg.path}'")
    if channel.pipeline and bool(torch.isfinite(y).all()):  # as observe estimates it: from the defense and y alone
        shape = (msg.batch_size, victim.d) if channel.per_example else (victim.d,)
        extra.update(noise_share_entries(channel, y, torch.zeros(shape, device=device, dtype=dtype)))
    obs = Observation(y=y, victim=victim, forward=forward, linear_map=linear_map, batch_size=msg.batch_size,
                      client_map=client_map, threat=threat, labels=target(known), defense=channel.spec,
                      g_norm=float(y.norm()) if sketch.identity else float("nan"),  # unknown behind a sketch
                      extra=extra)
    x = None if truth is None else truth[0].to(device=device, dtype=dtype)
    tag = "" if sketch.identity else f" {sketch.kind} b={sketch.b}"
    return Case(dataset, victim, x, target(score_labels), obs, msg.describe(),
                f"{cfg.model} / message ({msg.kind}{tag})", sketch.kind, settings,
                message_reads_data(msg, truth is not None))


_CASES = Registry("case")
_CASES.register("gradient", gradient_case)
_CASES.register("protocol", protocol_case)
_CASES.register("message", message_case)


def check_case_options(cfg: RunConfig) -> None:
    """The refusals that need no data and no model: a seed search without an unknown seed, a protocol or a seeded
    sketch, and ``--truth`` without a message file (ConfigError, one sentence)."""
    if cfg.sketch_seed_search:
        if cfg.sketch_known:
            raise ConfigError("--sketch-seed-search searches for a sketch seed the attacker does not know: give "
                              "--sketch-unknown too")
        if cfg.protocol:
            raise ConfigError("--sketch-seed-search searches the seed of one sketched gradient or message file, not "
                              "the round seeds of a protocol")
        if not cfg.message and is_identity(cfg.sketch):
            raise ConfigError(f"--sketch-seed-search needs a sketch with a seed, and sketch '{cfg.sketch}' has none")
    if cfg.attack_class.modifies_model and (cfg.protocol or cfg.message):
        flag = "protocol" if cfg.protocol else "message"
        raise ConfigError(f"attack '{cfg.attack}' changes the model the server sends before the client computes its "
                          f"gradient, which a {'protocol' if cfg.protocol else 'message file'} fixes; run it without "
                          f"--{flag}")
    if cfg.truth and not cfg.message:
        raise ConfigError("--truth scores the attack of a message file: give --message too (a simulated client's "
                          "truth is its data set's batch)")


def build_case(cfg: RunConfig, device: torch.device, dtype: torch.dtype, progress: bool = False) -> Case:
    """The case a configuration asks for: a message file (``cfg.message``), a protocol message (``cfg.protocol``),
    else one gradient.  ``progress``: bars for long steps before the attack (a seed search)."""
    check_case_options(cfg)
    return _CASES.get("message" if cfg.message else "protocol" if cfg.protocol else "gradient")(cfg, device, dtype,
                                                                                                progress=progress)


__all__ = ["Case", "build_case", "check_case_options", "gradient_case", "protocol_case", "message_case",
           "message_settings", "threat_of", "attacker_seed", "unknown_seed_view"]
