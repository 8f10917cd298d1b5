"""Every command's flags, declared without importing torch: ``leakattack --help`` and ``<cmd> --help`` start at once.

The run and protocol flags come from the declared parameters (:mod:`leakattack.config.flags`),
the names they show from :mod:`leakattack.config.names`.  Each subcommand names the module
of this package that carries it out and that module's function (``command`` below); the
command line imports that module, and with it torch, only once the arguments have parsed.
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
from typing import Callable

from .. import __version__
from ..config import names
from ..config.flags import add_arguments, add_attack_arguments, add_protocol_arguments, parse_pair, threads_value
from ..constraints import read_float, read_int


class UsageError(Exception):
    """Raised instead of argparse's multi-line usage dump."""


class Parser(argparse.ArgumentParser):
    #: flags added on first need by ``late_flags(parser)`` (it may import torch): when an argument is none of the
    #: flags so far, or before ``--help`` once the module ``late_module`` is imported anyway
    late_flags: Callable[[argparse.ArgumentParser], None] | None = None
    late_module = ""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # a value that begins with a minus and a digit is a value, not a flag (no flag begins so): argparse's own rule
        # takes only plain numbers (-2, -0.5), and "--time-limit -1m" or "--tv -1e-3" said "expected one argument"
        # rather than why the value is refused
        self._negative_number_matcher = re.compile(r"^-\.?\d")

    def error(self, message):  # one sentence, exit code 2 (handled in main)
        raise UsageError(message)

    def _add_late_flags(self) -> None:
        add, self.late_flags = self.late_flags, None
        if add is not None:
            add(self)

    def parse_known_args(self, args=None, namespace=None):
        if self.late_flags is not None and self._names_other_flag(sys.argv[1:] if args is None else args):
            # before argparse reads it as an abbreviation of a flag so far (--time of --time-limit), or refuses it
            # as an ambiguous one (--mode of --model, --model-param, ...)
            self._add_late_flags()
        a, rest = super().parse_known_args(args, namespace)
        if rest and self.late_flags is not None:
            self._add_late_flags()
            return super().parse_known_args(args, namespace)
        return a, rest

    def _names_other_flag(self, args) -> bool:
        """Whether ``args`` give a long flag that is none of this parser's flags so far, written out in full (a late
        flag, or an abbreviation)."""
        return any(isinstance(arg, str) and arg.startswith("--") and len(arg) > 2
                   and arg.split("=", 1)[0] not in self._option_string_actions for arg in args)

    def format_help(self) -> str:
        if self.late_module in sys.modules:
            self._add_late_flags()
        return super().format_help()


def _thread_count(text: str) -> int:
    """``train --threads``: a count of threads (no auto: a training's small tensors run fastest on one)."""
    try:
        return read_int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid value {text!r}: give a count of threads (training takes no auto: "
                                         "its small tensors run fastest on one)") from None


def given_dests(parser: argparse.ArgumentParser, argv: list[str] | None) -> frozenset[str]:
    """The dests of the arguments ``argv`` gives itself, a flag given at its default value included (``argv`` is
    parsed again with every default, the subcommands' included, suppressed; it parsed once already)."""
    saved: list[tuple[argparse.ArgumentParser, dict, list]] = []

    def suppress(p: argparse.ArgumentParser) -> None:
        if any(p is q for q, _, _ in saved):
            return
        saved.append((p, dict(p._defaults), [(a, a.default) for a in p._actions]))
        p._defaults.clear()
        for action in p._actions:
            action.default = argparse.SUPPRESS
            if isinstance(action, argparse._SubParsersAction):
                for sub in action.choices.values():
                    suppress(sub)

    suppress(parser)
    try:
        return frozenset(vars(parser.parse_args(argv)))
    finally:
        for p, defaults, actions in saved:
            p._defaults.update(defaults)
            for action, default in actions:
                action.default = default


def _attack_flags(parser: argparse.ArgumentParser) -> None:
    """The flags of the options the registered attacks declare (``Attack.options``); imports the attack registry."""
    attacks = importlib.import_module("leakattack.attacks")
    add_attack_arguments(parser, [(n, attacks.attack_class(n)) for n in attacks.list_attacks()])


def command(p: argparse.ArgumentParser, target: str) -> None:
    """The subcommand ``p`` runs ``target``, a ``module:function`` of this package (the function takes the parsed
    arguments and returns the exit code)."""
    p.set_defaults(target=target)


def _run(sub) -> None:
    options = "; ".join(f"{', '.join(flags)} ({name})" for name, flags in names.ATTACK_OPTION_FLAGS.items())
    p = sub.add_parser("run", help="attack one (sketched) gradient and write a run folder",
                       description="Reconstruct private images from the (sketched) gradient a client sends; writes "
                                   "config.json, metrics.json, trace.csv, reconstruction.png, convergence.png, "
                                   "reconstruction.pt.",
                       epilog=f"Attacks' own options, flags of their own: {options} (`leakattack list --attack NAME` "
                              "describes each with its default).")
    groups = add_arguments(p)
    g = groups["output"]
    g.add_argument("--out", default=None,
                   help="run folder (default: results/runs/<timestamp>-<model>-<sketch>-<dataset>[-<defense>]/)")
    g.add_argument("--no-lpips", action="store_true", help="skip LPIPS (recorded as null with that reason)")
    g.add_argument("--quiet", action="store_true", help="no progress bar")
    p.late_flags, p.late_module = _attack_flags, "leakattack.attacks"
    command(p, "run:cmd_run")


def _list(sub) -> None:
    p = sub.add_parser("list", help="list models, sketches, data sets, attacks, recipes, priors, optimizers, "
                                    "defenses, protocols, sweep backends",
                       description="Without options, list the names each flag of a run takes (models, sketches, data "
                                   "sets, attacks, recipes, priors, optimizers, defenses, protocols, sweep backends); "
                                   "with one or more options, describe the names given.")
    p.add_argument("--model", default=None, help="name the parameters model M takes (for --model-param)")
    p.add_argument("--attack", default=None, help="name the options attack A takes, with their flags")
    p.add_argument("--recipe", default=None, help="name the settings recipe R fills (those a run does not give)")
    p.add_argument("--defense", default=None, help="name the parameters and placements defense D takes (for "
                                                   "--defense D:NAME=VALUE@PLACEMENT)")
    p.add_argument("--protocol", default=None, help="name the settings protocol P reads, with their flags and "
                                                    "defaults (for train and run --protocol)")
    command(p, "list:cmd_list")


def _check(sub) -> None:
    p = sub.add_parser("check", help="measure the paper's theory constants and inequalities on a target and sketch",
                       description="Measure β, θ₁², θ₂², τ, γ₁, γ₂, the non-critical and semi-smooth inequalities and "
                                   "GD's linear rate (Song et al., ICML 2023, §7); or --table2 / --embedding. "
                                   "Measurements with stated sample sizes, not proofs.")
    p.add_argument("--model", default=names.CHECK_DEFAULTS["model"],
                   help=f"one of {', '.join(names.CHECK_TARGETS)} (default: %(default)s)")
    p.add_argument("--sketch", default=names.CHECK_DEFAULTS["sketch"], help="sketch kind (default: %(default)s)")
    p.add_argument("--sketch-ratio", type=read_float, default=names.CHECK_DEFAULTS["sketch_ratio"],
                   help="b/d in (0, 1] (default: %(default)s)")
    p.add_argument("--sketch-param", action="append", default=[], type=parse_pair, metavar="NAME=VALUE",
                   dest="sketch_params", help="a parameter of the sketch family, e.g. s=8 for sparse (repeatable)")
    p.add_argument("--samples", type=read_int, default=None,
                   help="sampled points (default per model: "
                   + ", ".join(f"{k} {v}" for k, v in names.DEFAULT_SAMPLES.items())
                   + "; table2: 400 per scale; embedding: 2000 sketches)")
    p.add_argument("--seed", type=read_int, default=0,
                   help="seed of weights, sketch and samples (default: %(default)s)")
    p.add_argument("--table2", action="store_true",
                   help="test the functions of the paper's Table 2 and write table2.md")
    p.add_argument("--embedding", action="store_true",
                   help="measure the coordinate-wise embedding parameter a (Def. 4.1, Table 1) and write embedding.md")
    p.add_argument("--out", default=None, help="output folder (default: results/runs/check-<timestamp>/)")
    p.add_argument("--threads", type=threads_value, default=None,
                   help="torch threads, or auto (default: auto, every core; on a machine busy with other work one is "
                        "often faster)")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    command(p, "check:cmd_check")


def _train(sub) -> None:
    protocols = ", ".join(names.PROTOCOLS.current())  # with a plugin's, where one registered some
    md, spec = names.MODEL_DEFAULTS, names.SPEC_DEFAULTS
    p = sub.add_parser("train", help="run a federated protocol; write train.jsonl, checkpoints and the accuracy figure",
                       description=f"Train with a federated protocol ({protocols}) and record "
                                   "per-round loss, test accuracy and floats sent.")
    p.add_argument("--protocol", required=True, help=f"one of {protocols}")
    p.add_argument("--model", default=md["model"], help="victim model, a registered classifier (your own "
                   "file.py:Name is attacked with run --weights, not trained here; default: %(default)s)")
    p.add_argument("--weight-init", default=md["init"], help="weight init (default: %(default)s)")
    p.add_argument("--sketch", default=spec["sketch"],
                   help="sketch kind of sketched/sketched-dp/safl/sacfl, projection Phi_t of compsgd/privsgd "
                   "(default: %(default)s)")
    p.add_argument("--sketch-ratio", type=read_float, default=spec["sketch_ratio"],
                   help="b/d; compsgd/privsgd: m/d (per layer or global) (default: %(default)s)")
    p.add_argument("--rounds", type=read_int, default=50, help="rounds T, at most 100,000 (default: %(default)s)")
    p.add_argument("--dataset", default=md["dataset"],
                   help="digits or photos (embedded), or mnist, cifar10, cifar100, imagefolder from --data-root "
                        "(default: %(default)s)")
    p.add_argument("--data-root", default=None, help="folder holding torchvision data sets")
    p.add_argument("--download", action="store_true", help="allow torchvision to download into --data-root")
    p.add_argument("--seed", type=read_int, default=0,
                   help="seed of model, split, sampling, sketches and noise (default: %(default)s)")
    p.add_argument("--out", default=None,
                   help="folder shared by runs to compare (default: results/runs/train-<timestamp>/)")
    p.add_argument("--name", default=None, help="run sub-folder (default: the protocol name)")
    p.add_argument("--no-checkpoints", action="store_true", help="do not write w^t per round")
    p.add_argument("--checkpoint-every", type=read_int, default=1, metavar="K",
                   help="write w^t for rounds 1, 1+K, 1+2K, ... and the final weights (default: 1, every round)")
    p.add_argument("--threads", type=_thread_count, default=1,
                   help="torch threads, a count (default: %(default)s; the tensors are small)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    g = p.add_argument_group("protocol")
    add_protocol_arguments(g)
    g.add_argument("--act", default=md["act"],
                   help="activation of the protocol's model, for one that takes an act parameter (leakattack list "
                        "--model M; default: %(default)s; sigmoid does not train)")
    command(p, "train:cmd_train")


def _sweep(sub) -> None:
    p = sub.add_parser("sweep", help="run a grid of attacks from a TOML file (resumable, parallel)",
                       description="Expand the [grid] of a sweep file over [base], run one attack per point, append "
                                   "results.jsonl, write summary.csv and figures. Re-running with the same --out "
                                   "resumes; one sweep at a time per output folder.")
    p.add_argument("config", help="sweep file (TOML with [sweep], [base], [grid])")
    p.add_argument("--out", default=None, help="output folder; give it again to resume (default: a new "
                   "results/runs/sweep-<name>-<timestamp>/, ignored by git)")
    p.add_argument("--jobs", type=read_int, default=None,
                   help="parallel worker processes, one thread each (default: [sweep] jobs, else 1); with --backend "
                   "slurm, the most jobs queued or running at once, retries included (default: [sweep] jobs, else the "
                   "cluster's MaxArraySize)")
    p.add_argument("--backend", choices=names.SWEEP_BACKENDS.shown, default="local",
                   help="where the points run: local worker processes, or job arrays on a SLURM cluster "
                   "(default: local)")
    s = p.add_argument_group("slurm backend", "resources of each job")
    s.add_argument("--partition", default=None, help="SLURM partition (default: the cluster's default partition)")
    s.add_argument("--time", type=read_int, default=None, metavar="MIN",
                   help="time limit of each job, in minutes (default: 60)")
    s.add_argument("--mem", type=read_float, default=None, metavar="GB",
                   help="memory of each job, in GB (default: the partition's default)")
    s.add_argument("--gpus", type=read_int, default=None, metavar="N", help="GPUs of each job (default: 0)")
    s.add_argument("--cpus-per-task", type=read_int, default=None, metavar="N", help="CPUs of each job (default: 1)")
    s.add_argument("--retries", type=read_int, default=None, metavar="N",
                   help="times a failed job is submitted again before the sweep stops (default: 2)")
    p.add_argument("--dry-run", action="store_true",
                   help="check every point as a run does and list them, one line each; nothing is run or written")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    command(p, "sweep:cmd_sweep")


def _figures(sub) -> None:
    p = sub.add_parser("figures", help="draw a sweep's figures from its stored results (never re-runs attacks)",
                       description="Redraw a sweep folder's summary.csv and figures/ (PNG and PDF) from the finished "
                                   "points its results.jsonl holds, without running an attack; a sweep draws them "
                                   "itself when it ends.")
    p.add_argument("dir", help="sweep output folder holding results.jsonl")
    command(p, "figures:cmd_figures")


def _collect(sub) -> None:
    p = sub.add_parser("collect", help="gather the metrics of run folders into one CSV table",
                       description="Find every run folder (holding metrics.json) at or below the given folders and "
                                   "write one row per run: its settings and scalar metrics. Sweep folders are "
                                   "named and left out: a sweep's points are in its summary.csv and results.jsonl.")
    p.add_argument("dirs", nargs="+", help="run folders, or folders holding them (searched recursively; hidden "
                                           "folders and links below them are skipped, a run reached twice counts once)")
    p.add_argument("--out", required=True, help="the .csv file to write, outside run and sweep folders; a file "
                                                "already there is replaced only when it is an earlier collect table")
    command(p, "collect:cmd_collect")


def _reproduce(sub) -> None:
    p = sub.add_parser("reproduce", help="regenerate the reference results committed under results/",
                       description="Re-run the commands behind every committed reference result "
                                   "(reference runs, sweeps, theory checks, protocol training and attacks).")
    p.add_argument("names", nargs="*", help="steps to run (default: all; see --list)")
    p.add_argument("--list", action="store_true", help="name the steps and stop")
    p.add_argument("--dry-run", action="store_true", help="print the commands without running them")
    command(p, "reproduce:cmd_reproduce")


def _report(sub) -> None:
    p = sub.add_parser("report", help="write one self-contained HTML audit report of run and sweep folders",
                       description="Build one HTML file (images inlined, no external reference) from run folders "
                                   "(metrics.json, config.json, reconstruction.png) and sweep folders (results.jsonl, "
                                   "summary.csv, figures/, points/): each item's setting, threat model, "
                                   "reconstructions beside the truth, PSNR/SSIM, baselines and verdict.")
    p.add_argument("paths", nargs="+", metavar="PATH", help="run folders (holding metrics.json) and sweep folders "
                   "(holding results.jsonl)")
    p.add_argument("--out", required=True, help="the HTML file to write (written whole or not at all)")
    p.add_argument("--title", default="Gradient-inversion audit report",
                   help="the report's title (default: %(default)s)")
    command(p, "report:cmd_report")


#: the subcommands, in the order ``leakattack --help`` lists them
SUBCOMMANDS = (_run, _list, _check, _train, _sweep, _figures, _collect, _report, _reproduce)


def build_parser() -> Parser:
    """The whole command line: every subcommand with its flags (torch is not imported)."""
    parser = Parser(prog="leakattack",
                    description="Gradient-inversion attacks on true and sketched federated-learning gradients.")
    parser.add_argument("--version", action="version", version=f"leakattack {__version__}")
    sub = parser.add_subparsers(dest="command", parser_class=Parser)
    for declare in SUBCOMMANDS:
        declare(sub)
    return parser


__all__ = ["Parser", "UsageError", "build_parser", "command", "given_dests"]
