"""``leakattack train``: run a federated protocol; write train.jsonl, checkpoints and the accuracy figure."""

from __future__ import annotations

import math
import sys
import time
import warnings
from pathlib import Path

import torch

import targets
from targets.protocols import SPEC_DEFAULTS, list_protocols, protocol_class

from ..config import ConfigError, check_value, validate_protocol, warn_unread
from ..config.constraints import Choice, Cores, Number
from ..config.flags import SPEC_DEST, protocol_spec_from_args
from ..config.params import ROUNDS, SEED
from ..data import list_datasets, reads_root
from ..errors import SettingWarning
from ..results import read_jsonl, writable_out
from ..results.io import own_folder
from ..results.runs import RUNS_ROOT
from ..sketch import is_identity, list_sketches
from ..training import MODEL_DEFAULTS, TrainingInterrupted, load_split, train, warn_client_batch
from . import interrupted_exit


def _floats(row: dict) -> str:
    """The uplink so far per client, over all rounds: on average over the clients, and per sampled client where
    they differ."""
    mean, sampled = row["floats_mean_cum"], row["floats_cum"]
    if round(mean) == sampled:
        return f"floats/client {sampled} in all"
    return f"floats/client {mean:.0f} in all on average, {sampled} per client sampled every round"


def _resuming(folder: Path, done: int, rounds: int) -> None:
    """One line on stderr: the folder keeps rounds 1..done of this training (after any it trains again, which a
    warning named), which continues from there."""
    what = "nothing is left to train" if done >= rounds else \
        f"training continues from round {done + 1} of {rounds}"
    print(f"note: '{folder}' keeps rounds 1..{done} of this training (same protocol, settings and model): {what}",
          file=sys.stderr)


#: what a training writes into its --out folder: one folder per training (``--name``, default the protocol) and the
#: accuracy figure over them; an existing folder holding anything else is refused
TRAIN_FILES = {"accuracy_vs_floats.png": None,
               "*": {"protocol.json": None, "train.jsonl": None, "train.lock": None,
                     "checkpoints": {"round_*.pt": None}}}


def _warn_data(a) -> None:
    """A warning where --data-root or --download is given with an embedded data set, which reads no files."""
    if a.dataset.lower() not in list_datasets() or reads_root(a.dataset):
        return
    given = [flag for flag, on in (("--data-root", a.data_root is not None), ("--download", a.download)) if on]
    if given:
        warnings.warn(f"{' and '.join(given)} {'is' if len(given) == 1 else 'are'} not read: the embedded data set "
                      f"{a.dataset} reads no files", SettingWarning, stacklevel=1)


def _warn_dp_rounds(protocol: str, spec: dict, rounds: int) -> None:
    """A warning where a protocol whose noise is set for --dp-rounds T rounds (privsgd) trains more rounds than T:
    the (epsilon, delta) it was given covers the first T only."""
    if "dp_rounds" not in protocol_class(protocol).reads or rounds <= spec["dp_rounds"]:
        return
    T, eps = spec["dp_rounds"], spec["dp_epsilon"]
    warnings.warn(f"--rounds {rounds} exceeds --dp-rounds {T}, the rounds the noise of {protocol}'s (epsilon, delta) "
                  f"= ({eps:g}, {spec['dp_delta']:g}) is set for: after round {T} the guarantee no longer holds, and "
                  f"the paper's epsilon grows to {eps * math.sqrt(rounds / T):.3g} at round {rounds} (train.jsonl's "
                  f"epsilon_paper); give --dp-rounds {rounds} to cover them all", SettingWarning, stacklevel=1)


def cmd_train(a) -> int:
    check_value("rounds T", ROUNDS, a.rounds)
    check_value("protocol", Choice(list_protocols), a.protocol)
    check_value("seed", SEED, a.seed)
    if a.sketch not in list_sketches():  # refused whether or not the protocol reads it
        raise ConfigError(f"unknown sketch '{a.sketch}'; choose one of: {', '.join(list_sketches())}")
    spec = {**protocol_spec_from_args(a), "seed": a.seed, "sketch": a.sketch, "sketch_ratio": a.sketch_ratio,
            "sketch_params": {}}
    spec = {k: spec[k] for k in SPEC_DEFAULTS}
    validate_protocol(a.protocol, spec)
    given: frozenset[str] = getattr(a, "given_flags", frozenset())  # the flags the command line gave, at any value
    warn_unread(a.protocol, [k for k, v in spec.items()
                             if k in given or SPEC_DEST + k in given or v != SPEC_DEFAULTS[k]], spec)
    if "sketch" in protocol_class(a.protocol).reads and is_identity(a.sketch) and (
            "sketch_ratio" in given or spec["sketch_ratio"] != SPEC_DEFAULTS["sketch_ratio"]):
        warnings.warn(f"--sketch {a.sketch} sends the whole update (b = d): --sketch-ratio {spec['sketch_ratio']:g} "
                      "changes nothing", SettingWarning, stacklevel=1)
    check_value("checkpoint interval", Number(1, integer=True), a.checkpoint_every)
    if a.no_checkpoints and ("checkpoint_every" in given or a.checkpoint_every != 1):
        warnings.warn("--checkpoint-every has no effect with --no-checkpoints: no checkpoint is written",
                      SettingWarning, stacklevel=1)
    check_value("threads", Cores(), a.threads)
    torch.set_num_threads(a.threads)  # small tensors: more threads only spin on a shared machine
    trainable = [m for m in targets.list_models() if targets.task_of(m) == "classification"]
    if a.model not in trainable:
        own = " (train your own class in your own loop and pass its state_dict to run --weights)" \
            if targets.models.is_user_spec(a.model) else ""
        raise ConfigError(f"model '{a.model}' cannot be trained here{own}; choose one of: {', '.join(trainable)}")
    check_value("weight init", Choice(targets.INITS), a.weight_init)
    check_value("activation", Choice(targets.models.ACTIVATIONS), a.act)
    act = a.act
    if "act" not in targets.model_params(a.model):
        if "act" in given:
            warnings.warn(f"--act changes nothing for model '{a.model}', which has no activation parameter",
                          SettingWarning, stacklevel=1)
        act = MODEL_DEFAULTS["act"]  # recorded as the default, so that continuing the training does not read it
    # an embedded data set reads no --data-root: recorded as none, so that continuing the training does not read it
    model_spec = {**MODEL_DEFAULTS, "model": a.model, "init": a.weight_init, "act": act, "dataset": a.dataset,
                  "data_root": a.data_root if reads_root(a.dataset) else None, "seed": a.seed}
    if a.name is not None and (a.name in ("", ".", "..") or Path(a.name).name != a.name or "\\" in a.name):
        raise ConfigError(f"--name must be a folder name, not a path, got {a.name!r}")
    if a.name == "accuracy_vs_floats.png":  # the figure drawn over the trainings in --out (TRAIN_FILES)
        raise ConfigError(f"--name {a.name} is the file a training draws its figure into in --out: give another name")
    _warn_data(a)
    _warn_dp_rounds(a.protocol, spec, a.rounds)
    if a.out is not None and (Path(a.out) / "protocol.json").is_file():  # a training's own run folder, one below
        out = Path(a.out)                                                 # the --out that wrote it
        raise ConfigError(f"--out '{a.out}' is the run folder of a training (it holds protocol.json): give the folder "
                          f"above it, --out {out.parent} --name {out.name}, to continue that training")
    out = writable_out(a.out if a.out is not None else RUNS_ROOT / time.strftime("train-%Y%m%d-%H%M%S"))
    own_folder(out, a.out if a.out is not None else out, TRAIN_FILES, "a training")
    warn_client_batch(spec, load_split(model_spec, a.download)[0])
    try:
        folder = train(a.protocol, spec, model_spec, a.rounds, out, a.name, progress=not a.quiet,
                       download=a.download, checkpoints=not a.no_checkpoints,
                       checkpoint_every=a.checkpoint_every, on_resume=lambda f, n: _resuming(f, n, a.rounds))
    except TrainingInterrupted as stop:
        held = f"keeps rounds 1..{stop.done} (its protocol.json records them)" if stop.done else \
            "holds no finished round (the same command starts it again)"
        print(f"leakattack: interrupted; training stopped {f'after round {stop.done}' if stop.done else 'in round 1'} "
              f"of {stop.planned}, and '{stop.folder}' {held}", file=sys.stderr)
        return interrupted_exit()
    last = read_jsonl(folder / "train.jsonl")[-1]
    print(f"{a.protocol}: round {last['round']} | test acc {last['test_acc']:.4f} | "
          f"train loss {last['train_loss']:.4g} | {_floats(last)} | {last['wall_s']:.1f} s | "
          f"{folder}")
    return 0
