"""The ``train`` command: run a federated protocol and record what it costs and learns.

``leakattack train --protocol P ... --out DIR`` writes into DIR/<name>/ (name:
``--name``, default the protocol):

* ``protocol.json`` — everything that rebuilds the run (model, data, protocol spec),
* ``train.jsonl``   — one object per round: round, train_loss, test_loss, test_acc,
  floats_sent (uplink floats per sampled client this round), floats_cum (their sum
  so far), clients, wall_s (and epsilon for sketched-dp),
* ``checkpoints/round_TTTT.pt`` — w^t, the flat weights clients start round t from
  (t = 1..T+1; T+1 is the final model), float32, atomically written,

and redraws DIR/accuracy_vs_floats.png over every run folder in DIR.
"""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import torch

import targets
from leakattack.sketch import sketch_dim
from targets.protocols import SPEC_DEFAULTS, evaluate, get_protocol, list_protocols

from . import data
from .config import ConfigError
from .results import atomic_write_bytes, atomic_write_text, write_json

#: model settings that train (the DLG sigmoid LeNet does not leave the 10 % plateau under SGD)
MODEL_DEFAULTS = {"model": "lenet", "init": "default", "act": "tanh", "dataset": "digits",
                  "data_root": None, "test_fraction": 0.2}


def build_model(model_spec: dict, dataset: data.ImageSet, dtype=torch.float32, device="cpu"):
    """The protocol's template model from its stored spec (seeded by the protocol seed)."""
    kw = {"act": model_spec["act"]} if model_spec["model"] in ("lenet", "mlp") else {}
    m = targets.get_model(model_spec["model"], num_classes=dataset.num_classes, in_shape=dataset.in_shape,
                          seed=model_spec["seed"], init=model_spec["init"], **kw)
    return m.to(device=device, dtype=dtype)


def load_split(model_spec: dict, download: bool = False):
    """(train, test) parts of the data set, split with the protocol seed; DataError -> ConfigError."""
    try:
        ds = data.load_dataset(model_spec["dataset"], root=model_spec["data_root"], download=download)
        return data.train_test_split(ds, model_spec["test_fraction"], seed=model_spec["seed"])
    except data.DataError as err:
        raise ConfigError(str(err)) from None


def validate_spec(name: str, spec: dict, d: int | None = None) -> None:
    """Every protocol value a user can set, checked once; raises ConfigError with one sentence."""
    if name not in list_protocols():
        raise ConfigError(f"unknown protocol '{name}'; choose one of: {', '.join(list_protocols())}")
    if spec["clients"] < 1:
        raise ConfigError(f"number of clients N must be at least 1, got {spec['clients']}")
    if spec["local_steps"] < 1:
        raise ConfigError(f"local steps K must be at least 1, got {spec['local_steps']}")
    if spec["batch_size"] < 1:
        raise ConfigError(f"client batch size must be at least 1, got {spec['batch_size']}")
    if not spec["local_lr"] > 0 or not spec["global_lr"] > 0:
        raise ConfigError("learning rates must be positive")
    if spec["client_fraction"] is not None and not 0 < spec["client_fraction"] <= 1:
        raise ConfigError(f"client fraction must lie in (0, 1], got {spec['client_fraction']}")
    if spec["sketch_rows"] < 1 or spec["sketch_buckets"] < 1:
        raise ConfigError("count-sketch rows t and buckets m must be at least 1")
    if not 0 < spec["sketch_ratio"] <= 1:
        raise ConfigError(f"sketch ratio must lie in (0, 1], got {spec['sketch_ratio']}")
    if name.startswith("sketched"):
        from .sketch import list_sketches

        if spec["sketch"] not in list_sketches():
            raise ConfigError(f"unknown sketch '{spec['sketch']}'; choose one of: {', '.join(list_sketches())}")
        if d is not None and spec["sketch"] != "none" and sketch_dim(spec["sketch_ratio"], d) < 1:
            raise ConfigError(f"sketch ratio {spec['sketch_ratio']} gives b < 1 for d = {d}")
    if name == "sketched-dp":
        if not 0 < spec["dp_epsilon"] or not 0 < spec["dp_delta"] < 1 or not spec["dp_clip"] > 0:
            raise ConfigError("sketched-dp needs epsilon > 0, delta in (0, 1) and clip > 0")
        try:
            import defenses.accounting  # noqa: F401  (issue 3's Lemma H.7 / Theorem 6.2 / accountant)
        except ImportError:
            raise ConfigError("sketched-dp needs defenses.accounting (gaussian_sigma, paper_composition, "
                              "accountant_epsilon), which is not installed in this checkout") from None


def checkpoint_path(folder: Path, t: int) -> Path:
    return Path(folder) / "checkpoints" / f"round_{t:04d}.pt"


def save_checkpoint(folder: Path, t: int, w: torch.Tensor) -> None:
    """w^t as a float32 tensor, written atomically."""
    buf = io.BytesIO()
    torch.save(w.detach().to("cpu", torch.float32).clone(), buf)
    atomic_write_bytes(checkpoint_path(folder, t), buf.getvalue())


def load_checkpoint(folder: Path, t: int) -> torch.Tensor:
    return torch.load(checkpoint_path(folder, t), map_location="cpu", weights_only=True)


def train(name: str, spec: dict, model_spec: dict, rounds: int, out: Path, run_name: str | None = None,
          progress: bool = True, download: bool = False, checkpoints: bool = True) -> Path:
    """Run ``rounds`` rounds of protocol ``name`` and write the run folder; returns it."""
    trainset, testset = load_split(model_spec, download)
    model = build_model(model_spec, trainset)
    d = targets.num_params(model)
    validate_spec(name, spec, d)
    proto = get_protocol(name, model, trainset, **spec)
    if any(s.numel() == 0 for s in proto.shards):
        raise ConfigError(f"{spec['clients']} clients leave some client without data ({len(trainset)} training images)")
    folder = Path(out) / (run_name or name)
    folder.mkdir(parents=True, exist_ok=True)
    write_json(folder / "protocol.json", {"protocol": name, "spec": spec, "model": model_spec, "rounds": rounds,
                                          "describe": proto.describe(), "torch": torch.__version__})
    w = proto.initial_weights()
    rows, cum, t0 = [], 0, time.perf_counter()
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=rounds, desc=name, unit="round", leave=False, dynamic_ncols=True)
    for t in range(1, rounds + 1):
        if checkpoints:
            save_checkpoint(folder, t, w)
        w, stats = proto.run_round(w, t)
        cum += stats["floats_sent"]
        test_loss, test_acc = evaluate(model, w, testset.images, testset.labels)
        row = {"round": t, "train_loss": stats["train_loss"], "test_loss": test_loss, "test_acc": test_acc,
               "floats_sent": stats["floats_sent"], "floats_cum": cum, "clients": stats["clients"],
               "wall_s": time.perf_counter() - t0}
        if name == "sketched-dp":
            row.update(proto.privacy(t))
        rows.append(row)
        atomic_write_text(folder / "train.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
        if bar is not None:
            bar.update(1)
            bar.set_postfix_str(f"acc={test_acc:.3f}")
    if bar is not None:
        bar.close()
    if checkpoints:
        save_checkpoint(folder, rounds + 1, w)
    accuracy_figure(Path(out))
    return folder


def read_jsonl(path) -> list[dict]:
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def accuracy_figure(root: Path) -> Path:
    """Test accuracy against cumulative uplink floats per client, one line per run folder under ``root``."""
    from . import figures

    plt = figures.plt
    fig, ax = plt.subplots(figsize=(5.6, 3.6))
    for f in sorted(Path(root).glob("*/train.jsonl")):
        rows = read_jsonl(f)
        if rows:
            ax.plot([r["floats_cum"] for r in rows], [r["test_acc"] for r in rows], lw=1.3, label=f.parent.name)
    ax.set_xscale("log")
    ax.set_xlabel("floats sent per client (cumulative uplink)")
    ax.set_ylabel("test accuracy")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    path = Path(root) / "accuracy_vs_floats.png"
    figures.save(fig, path)
    return path


def add_protocol_arguments(g, train: bool) -> None:
    """Protocol flags shared by ``train`` and ``run --protocol``."""
    s = SPEC_DEFAULTS
    g.add_argument("--clients", type=int, default=s["clients"], help="number of clients N (default: %(default)s)")
    g.add_argument("--local-steps", type=int, default=s["local_steps"], help="local SGD steps K per round (default: %(default)s)")
    g.add_argument("--local-lr", type=float, default=s["local_lr"], help="local learning rate eta (default: %(default)s)")
    g.add_argument("--global-lr", type=float, default=s["global_lr"], help="server learning rate eta_global / gamma (default: %(default)s)")
    g.add_argument("--client-batch", type=int, default=s["batch_size"], help="images a client uses per round (default: %(default)s)")
    g.add_argument("--noniid", action="store_true", help="non-iid split: each client holds one or two classes")
    g.add_argument("--client-fraction", type=float, default=None, help="fraction of clients sampled per round (default: 0.5 for fedsketch-*, else 1)")
    g.add_argument("--sketch-rows", type=int, default=s["sketch_rows"], help="FedSKETCH count-sketch rows t (default: %(default)s)")
    g.add_argument("--sketch-buckets", type=int, default=s["sketch_buckets"], help="FedSKETCH buckets m per row (default: %(default)s)")
    g.add_argument("--dp-epsilon", type=float, default=s["dp_epsilon"], help="sketched-dp: per-step epsilon^ (default: %(default)s)")
    g.add_argument("--dp-delta", type=float, default=s["dp_delta"], help="sketched-dp: per-step delta^ (default: %(default)s)")
    g.add_argument("--dp-clip", type=float, default=s["dp_clip"], help="sketched-dp: per-example clip norm = Lipschitz bound l_c (default: %(default)s)")
    g.add_argument("--act", default=MODEL_DEFAULTS["act"], help="activation of lenet/mlp in the protocol (default: %(default)s; sigmoid does not train)")


def spec_from_args(a, sketch: str, sketch_ratio: float, sketch_params: dict, seed: int) -> dict:
    return {"clients": a.clients, "local_steps": a.local_steps, "local_lr": a.local_lr, "global_lr": a.global_lr,
            "batch_size": a.client_batch, "noniid": a.noniid, "client_fraction": a.client_fraction, "seed": seed,
            "sketch": sketch, "sketch_ratio": sketch_ratio, "sketch_params": dict(sketch_params),
            "sketch_rows": a.sketch_rows, "sketch_buckets": a.sketch_buckets,
            "dp_epsilon": a.dp_epsilon, "dp_delta": a.dp_delta, "dp_clip": a.dp_clip}


def cmd_train(a) -> int:
    if a.rounds < 1:
        raise ConfigError(f"rounds T must be at least 1, got {a.rounds}")
    spec = spec_from_args(a, a.sketch, a.sketch_ratio, {}, a.seed)
    validate_spec(a.protocol, spec)
    if a.threads < 1:
        raise ConfigError(f"threads must be at least 1, got {a.threads}")
    torch.set_num_threads(a.threads)  # small tensors: more threads only spin on a shared machine
    model_spec = {**MODEL_DEFAULTS, "model": a.model, "init": a.weight_init, "act": a.act, "dataset": a.dataset,
                  "data_root": a.data_root, "seed": a.seed}
    if a.weight_init not in targets.INITS:
        raise ConfigError(f"unknown weight init '{a.weight_init}'; choose one of: {', '.join(targets.INITS)}")
    if a.model not in targets.list_models() or a.model == "linreg":
        raise ConfigError(f"model '{a.model}' cannot be trained here; choose one of: "
                          f"{', '.join(m for m in targets.list_models() if m != 'linreg')}")
    out = Path(a.out) if a.out else Path("results/runs") / time.strftime("train-%Y%m%d-%H%M%S")
    folder = train(a.protocol, spec, model_spec, a.rounds, out, a.name, progress=not a.quiet,
                   download=a.download, checkpoints=not a.no_checkpoints)
    last = read_jsonl(folder / "train.jsonl")[-1]
    print(f"{a.protocol}: round {last['round']} | test acc {last['test_acc']:.4f} | train loss {last['train_loss']:.4f} | "
          f"floats/client {last['floats_cum']} | {last['wall_s']:.1f} s | {folder}")
    return 0


def register_cli(sub) -> None:
    """Add the ``train`` subcommand."""
    p = sub.add_parser("train", help="run a federated protocol; write train.jsonl, checkpoints and the accuracy figure",
                       description="Train with a federated protocol (fedavg, sketched, sketched-dp, fedsketch-privix, "
                                   "fedsketch-heaprix) and record per-round loss, test accuracy and floats sent.")
    p.add_argument("--protocol", required=True, help=f"one of {', '.join(list_protocols())}")
    p.add_argument("--model", default=MODEL_DEFAULTS["model"], help="victim model (default: %(default)s)")
    p.add_argument("--weight-init", default=MODEL_DEFAULTS["init"], help="weight init (default: %(default)s)")
    p.add_argument("--sketch", default=SPEC_DEFAULTS["sketch"], help="sketch kind of sketched/sketched-dp (default: %(default)s)")
    p.add_argument("--sketch-ratio", type=float, default=SPEC_DEFAULTS["sketch_ratio"], help="b/d (default: %(default)s)")
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
    add_protocol_arguments(p.add_argument_group("protocol"), train=True)
    p.set_defaults(func=cmd_train)
