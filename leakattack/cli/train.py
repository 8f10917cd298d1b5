"""``leakattack train``: run a federated protocol; write train.jsonl, checkpoints and the accuracy figure."""

from __future__ import annotations

import time
from pathlib import Path

import torch

import targets
from targets.protocols import SPEC_DEFAULTS, list_protocols

from ..config import ConfigError, validate_protocol
from ..config.arguments import add_protocol_arguments, protocol_spec_from_args
from ..config.constraints import Choice, Number
from ..config.params import SEED
from ..results import read_jsonl
from ..training import MODEL_DEFAULTS, train


def _check(label: str, constraint, value) -> None:
    if not constraint.ok(value):
        raise ConfigError(constraint.error(label, value))


def cmd_train(a) -> int:
    _check("rounds T", Number(1, integer=True), a.rounds)
    _check("protocol", Choice(list_protocols), a.protocol)
    _check("seed", SEED, a.seed)
    spec = {**protocol_spec_from_args(a), "seed": a.seed, "sketch": a.sketch, "sketch_ratio": a.sketch_ratio,
            "sketch_params": {}}
    spec = {k: spec[k] for k in SPEC_DEFAULTS}
    validate_protocol(a.protocol, spec)
    _check("threads", Number(1, integer=True), a.threads)
    torch.set_num_threads(a.threads)  # small tensors: more threads only spin on a shared machine
    trainable = [m for m in targets.list_models() if targets.task_of(m) == "classification"]
    if a.model not in trainable:
        raise ConfigError(f"model '{a.model}' cannot be trained here; choose one of: {', '.join(trainable)}")
    _check("weight init", Choice(targets.INITS), a.weight_init)
    _check("activation", Choice(targets.models.ACTIVATIONS), a.act)
    model_spec = {**MODEL_DEFAULTS, "model": a.model, "init": a.weight_init, "act": a.act, "dataset": a.dataset,
                  "data_root": a.data_root, "seed": a.seed}
    if a.name is not None and (a.name in ("", ".", "..") or Path(a.name).name != a.name or "\\" in a.name):
        raise ConfigError(f"--name must be a folder name, not a path, got {a.name!r}")
    out = Path(a.out) if a.out else Path("results/runs") / time.strftime("train-%Y%m%d-%H%M%S")
    folder = train(a.protocol, spec, model_spec, a.rounds, out, a.name, progress=not a.quiet,
                   download=a.download, checkpoints=not a.no_checkpoints)
    last = read_jsonl(folder / "train.jsonl")[-1]
    print(f"{a.protocol}: round {last['round']} | test acc {last['test_acc']:.4f} | train loss {last['train_loss']:.4f} | "
          f"floats/client {last['floats_cum']} | {last['wall_s']:.1f} s | {folder}")
    return 0


def register(sub) -> None:
    p = sub.add_parser("train", help="run a federated protocol; write train.jsonl, checkpoints and the accuracy figure",
                       description=f"Train with a federated protocol ({', '.join(list_protocols())}) and record "
                                   "per-round loss, test accuracy and floats sent.")
    p.add_argument("--protocol", required=True, help=f"one of {', '.join(list_protocols())}")
    p.add_argument("--model", default=MODEL_DEFAULTS["model"], help="victim model (default: %(default)s)")
    p.add_argument("--weight-init", default=MODEL_DEFAULTS["init"], help="weight init (default: %(default)s)")
    p.add_argument("--sketch", default=SPEC_DEFAULTS["sketch"], help="sketch kind of sketched/sketched-dp/safl/sacfl, projection Phi_t of compsgd/privsgd (default: %(default)s)")
    p.add_argument("--sketch-ratio", type=float, default=SPEC_DEFAULTS["sketch_ratio"], help="b/d; compsgd/privsgd: m/d (per layer or global) (default: %(default)s)")
    p.add_argument("--rounds", type=int, default=50, help="rounds T (default: %(default)s)")
    p.add_argument("--dataset", default=MODEL_DEFAULTS["dataset"], help="digits (embedded), mnist or cifar10 from --data-root (default: %(default)s)")
    p.add_argument("--data-root", default=None, help="folder holding torchvision data sets")
    p.add_argument("--download", action="store_true", help="allow torchvision to download into --data-root")
    p.add_argument("--seed", type=int, default=0, help="seed of model, split, sampling, sketches and noise (default: %(default)s)")
    p.add_argument("--out", default=None, help="folder shared by runs to compare (default: results/runs/train-<timestamp>/)")
    p.add_argument("--name", default=None, help="run sub-folder (default: the protocol name)")
    p.add_argument("--no-checkpoints", action="store_true", help="do not write w^t per round")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default: %(default)s; the tensors are small)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    g = p.add_argument_group("protocol")
    add_protocol_arguments(g)
    g.add_argument("--act", default=MODEL_DEFAULTS["act"], help="activation of lenet/mlp in the protocol (default: %(default)s; sigmoid does not train)")
    p.set_defaults(func=cmd_train)
