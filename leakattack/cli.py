"""Command line: argument parsing and error reporting only; the work is in the API.

Every user error ends with one line on stderr and exit code 2, and no output
folder is created for it.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys

from .config import DEFAULT_LR, DEVICES, DTYPES, DUMMY_INITS, LABEL_MODES, OBJECTIVES, OPTIMIZERS, ConfigError, RunConfig

EXIT_USAGE = 2


class UsageError(Exception):
    """Raised instead of argparse's multi-line usage dump."""


class Parser(argparse.ArgumentParser):
    def error(self, message):  # one sentence, exit code 2 (handled in main)
        raise UsageError(message)


def _kv(text: str) -> tuple[str, object]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"sketch parameter '{text}' must look like NAME=VALUE")
    key, val = text.split("=", 1)
    try:
        return key, json.loads(val)
    except json.JSONDecodeError:
        return key, val


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of one attack (shared by ``run`` and the protocol attack)."""
    import targets
    from .data import list_datasets
    from .sketch import list_sketches

    d = RunConfig()
    g = p.add_argument_group("victim")
    g.add_argument("--model", default=d.model, help=f"victim model, one of {', '.join(targets.list_models())} (default: %(default)s)")
    g.add_argument("--weight-init", default=None, help="weight initialisation: uniform (U(-0.5,0.5), DLG), default, xavier, normal (default: the model's own; lenet: uniform)")
    g.add_argument("--model-seed", type=int, default=None, help="seed of the model weights (default: --seed)")
    g = p.add_argument_group("sketch (what the client sends)")
    g.add_argument("--sketch", default=d.sketch, help=f"sketch kind, one of {', '.join(list_sketches())} (default: %(default)s)")
    g.add_argument("--sketch-dim", type=int, default=None, help="sketch dimension b (overrides --sketch-ratio)")
    g.add_argument("--sketch-ratio", type=float, default=d.sketch_ratio, help="b/d, in (0, 1] (default: %(default)s)")
    g.add_argument("--sketch-param", type=_kv, action="append", default=[], metavar="NAME=VALUE", help="extra sketch parameter, e.g. s=4 for sparse (repeatable)")
    g.add_argument("--sketch-seed", type=int, default=None, help="seed of R, shared by client and attacker (default: --seed + 1)")
    g.add_argument("--defense", default=d.defense, help="defense spec applied by the client, e.g. 'clip:C=1,gaussian:sigma=1e-3@after_sketch' (default: none)")
    g.add_argument("--delta", type=float, default=d.delta, help="delta at which epsilon is reported for Gaussian noise (default: %(default)s)")
    g.add_argument("--noise-seed", type=int, default=None, help="seed of the client's noise (default: --seed + 3)")
    g.add_argument("--utility", action="store_true", help="also train the target under the defense on digits and record utility_acc")
    g.add_argument("--utility-steps", type=int, default=d.utility_steps, help="training steps of --utility (default: %(default)s)")
    g.add_argument("--attacker-knows-clip", action="store_true", help="the attacker models the defense's deterministic clips (never its noise)")
    g = p.add_argument_group("attacker")
    g.add_argument("--optimizer", default=d.optimizer, help=f"one of {', '.join(OPTIMIZERS)} (default: %(default)s)")
    g.add_argument("--iterations", type=int, default=d.iterations, help="optimiser steps (default: %(default)s)")
    g.add_argument("--lr", type=float, default=None, help="step size (default: " + ", ".join(f"{k} {v}" for k, v in DEFAULT_LR.items()) + ")")
    g.add_argument("--objective", default=d.objective, help=f"one of {', '.join(OBJECTIVES)}: squared distance L_R or cosine distance (default: %(default)s)")
    g.add_argument("--tv", type=float, default=d.tv, help="weight of the total-variation prior (default: %(default)s, off)")
    g.add_argument("--box", action="store_true", help="project the dummy data onto [0, 1] after every step (default: off)")
    g.add_argument("--tol", type=float, default=d.tol, help="stop when L_R/||y||^2 <= tol (default: %(default)s)")
    g.add_argument("--labels", dest="label_mode", default=d.label_mode, help=f"one of {', '.join(LABEL_MODES)}: recover by iDLG's sign rule through the sketch, take the true labels, or optimise soft labels (DLG) (default: %(default)s; linreg always uses given)")
    g.add_argument("--dummy-init", default=d.dummy_init, help=f"one of {', '.join(DUMMY_INITS)} (default: %(default)s)")
    g.add_argument("--restarts", type=int, default=d.restarts, help="independent dummy starts; the lowest final L_R wins (default: %(default)s)")
    g.add_argument("--seed", type=int, default=d.seed, help="master seed (default: %(default)s)")
    g = p.add_argument_group("data")
    g.add_argument("--dataset", default=None, help=f"one of {', '.join(list_datasets())} (default: photos, embedded 3x32x32 crops of scikit-image's sample photographs)")
    g.add_argument("--data-root", default=None, help="folder holding torchvision data sets (mnist, cifar10, cifar100)")
    g.add_argument("--download", action="store_true", help="allow torchvision to download the data set into --data-root")
    g.add_argument("--image-index", type=int, default=d.image_index, help="index of the first attacked image (default: %(default)s)")
    g.add_argument("--batch-size", type=int, default=d.batch_size, help="images attacked together (default: %(default)s)")
    g = p.add_argument_group("output")
    g.add_argument("--device", default=d.device, help=f"one of {', '.join(DEVICES)} (default: %(default)s: CUDA when present)")
    g.add_argument("--threads", type=int, default=d.threads, help="CPU threads for torch (default: %(default)s; the attack's small tensor ops gain nothing from more and slow down when cores are shared)")
    g.add_argument("--dtype", default=d.dtype, help=f"one of {', '.join(DTYPES)}: precision of model, data and attack (default: %(default)s)")
    g.add_argument("--trace-every", type=int, default=d.trace_every, help="record PSNR in trace.csv every N steps (default: %(default)s)")
    g.add_argument("--out", default=None, help="run folder (default: results/runs/<timestamp>-<model>-<sketch>/)")
    g.add_argument("--no-lpips", action="store_true", help="skip LPIPS (recorded as null with that reason)")
    g.add_argument("--quiet", action="store_true", help="no progress bar")
    from . import protocol_attack  # issue 5: attack a federated protocol's message

    protocol_attack.add_arguments(p.add_argument_group("protocol"))


def config_from_args(a: argparse.Namespace) -> RunConfig:
    return RunConfig(
        model=a.model, sketch=a.sketch, sketch_dim=a.sketch_dim, sketch_ratio=a.sketch_ratio,
        sketch_params=dict(a.sketch_param), optimizer=a.optimizer, iterations=a.iterations, lr=a.lr,
        objective=a.objective, tv=a.tv, box=a.box, tol=a.tol, label_mode=a.label_mode,
        dummy_init=a.dummy_init, restarts=a.restarts, seed=a.seed, model_seed=a.model_seed, sketch_seed=a.sketch_seed,
        weight_init=a.weight_init, dataset=a.dataset, data_root=a.data_root, download=a.download,
        image_index=a.image_index, batch_size=a.batch_size, device=a.device, threads=a.threads, dtype=a.dtype,
        trace_every=a.trace_every, defense=a.defense,
        delta=a.delta, noise_seed=a.noise_seed, utility=a.utility, utility_steps=a.utility_steps,
        attacker_knows_clip=a.attacker_knows_clip,
        **_protocol_fields(a),
    )


def _protocol_fields(a) -> dict:
    """The protocol group's RunConfig fields (absent when a caller's parser has no such group)."""
    from . import protocol_attack

    return protocol_attack.config_fields(a) if hasattr(a, "protocol_round") else {}


def cmd_run(a) -> int:
    from .experiment import run_attack

    cfg = config_from_args(a)
    m, folder = run_attack(cfg, out=a.out, progress=not a.quiet, with_lpips=not a.no_lpips)
    print(summary_line(m, folder))
    if m["message"] and m["stop_reason"] == "diverged":
        print(f"note: {m['message']}", file=sys.stderr)
    return 0


def summary_line(m: dict, folder) -> str:
    """The one line a run ends with."""
    lp = f"{m['lpips']:.3f}" if m["lpips"] is not None else "n/a (backbone weights not cached)"
    if m["label_acc"] is None:
        lab = "label given"
    else:
        n = len(m["labels_true"])
        lab = f"labels {round(m['label_acc'] * n)}/{n} ({m['label_mode']})"
    return (f"PSNR {m['psnr']:.2f} dB | SSIM {m['ssim']:.4f} | LPIPS {lp} | L_R {m['final_loss']:.3e} | "
            f"{lab} | {m['iterations']} it ({m['stop_reason']}) | {m['wall_s']:.1f} s | d={m['d']} b={m['b']} | {folder}")


def cmd_list(a) -> int:
    import targets
    from .data import list_datasets
    from .sketch import list_sketches

    print("models:   " + ", ".join(targets.list_models()))
    print("sketches: " + ", ".join(list_sketches()))
    print("datasets: " + ", ".join(list_datasets()))
    print("optimizers: " + ", ".join(OPTIMIZERS))
    try:
        import defenses

        print("defenses: " + ", ".join(defenses.list_defenses()))
    except (ImportError, AttributeError):
        pass
    return 0


def build_parser() -> Parser:
    parser = Parser(prog="leakattack", description="Gradient-inversion attacks on true and sketched federated-learning gradients.")
    sub = parser.add_subparsers(dest="command", parser_class=Parser)
    p = sub.add_parser("run", help="attack one (sketched) gradient and write a run folder",
                       description="Reconstruct private images from the (sketched) gradient a client sends; writes config.json, metrics.json, trace.csv, reconstruction.png, convergence.png.")
    add_run_arguments(p)
    p.set_defaults(func=cmd_run)
    p = sub.add_parser("list", help="list models, sketches, data sets")
    p.set_defaults(func=cmd_list)
    for name in _EXTENSION_MODULES:
        importlib.import_module(f"leakattack.{name}").register_cli(sub)
    return parser


#: modules whose ``register_cli(subparsers)`` adds further commands (sweep, figures, check, train)
_EXTENSION_MODULES: tuple = ("theory", "train", "sweep", "reproduce")


def main(argv=None) -> int:
    try:
        parser = build_parser()
        a = parser.parse_args(argv)
        if not getattr(a, "command", None):
            parser.print_help()
            return EXIT_USAGE
        return a.func(a)
    except (UsageError, ConfigError) as err:
        print(f"leakattack: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("leakattack: interrupted; finished results are kept, the unfinished one was not written", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
