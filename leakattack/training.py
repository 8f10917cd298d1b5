"""Training with a federated protocol, and the stored runs the protocol attack reads.

``train(name, spec, model_spec, rounds, out)`` writes into ``out/<name>/``:

* ``protocol.json`` — everything that rebuilds the run (model, data, protocol spec),
* ``train.jsonl``   — one object per round: round, train_loss, test_loss, test_acc,
  floats_sent (uplink floats per sampled client this round), floats_cum (their sum
  so far: one client sampled in every round), floats_mean_cum (the average client's uplink so far: each round's
  floats_sent times the share of the clients sampled), clients, wall_s (and the protocol's privacy numbers, where
  it adds noise, and its ``round_record``: sacfl's clip_factor, clip_fired, mean_norm); each round appends its
  line as it ends,
* ``checkpoints/round_TTTT.pt`` — w^t, the flat weights clients start round t from
  (t = 1..T+1; T+1 is the final model), float32, atomically written; for a model
  with buffers (BatchNorm's running statistics) ``{"weights": w^t, "buffers":
  {name: tensor}}``, the buffers as the clients' forward passes before round t
  left them (one running average over every client's batches, in the order they
  ran: what a server that averages them holds, approximately), and for a protocol whose server keeps
  state between rounds (SAFL's optimiser moments) ``"server"``: that state before round t,

and redraws ``out/accuracy_vs_floats.png`` over every run folder in ``out``.

Training that stops early (Ctrl-C, SIGTERM, a diverged loss) keeps the rounds it finished: protocol.json then
records them as ``rounds`` (N, possibly 0), with ``rounds_planned`` (the T asked for) and ``stopped``
(``interrupted`` or ``diverged``); the checkpoint of w^(N+1) is written where checkpoints are, and the figure
is drawn from the rounds done.

Training into a folder that holds an earlier run continues it (:func:`resume_point`) when the earlier run trained
the same protocol, spec and model with the same torch, and its rounds 1..N can be carried on exactly: a round
depends only on w^t, the model's buffers and the seeds keyed by t, so training continues from the checkpoint of
w^(N+1) and its buffers, and rounds N+1..T come out as an uninterrupted training's would on the same machine with
the same thread count (protocol.json's ``machine``; on another, a one-line warning says the last bits may differ).
Any other earlier run (another setting, a diverged one, one without that checkpoint, a checkpoint without the server
state of a protocol that keeps one) is refused in one sentence before anything is written.

An attack on round t of a stored run reads w^t from its checkpoint (:func:`weights_at`); where that checkpoint was
not written (``--checkpoint-every`` k > 1) it re-simulates the rounds from the latest checkpoint before round t.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import torch

import targets
from targets.protocols import SPEC_DEFAULTS, Protocol, evaluate, get_protocol, protocol_class, unread_settings
from targets.protocols.base import empty_clients_text, split_clients
from targets.victim import running_statistics_layers, statistics_tracked

from .config import ConfigError, check_value, protocol_json, validate_protocol
from .config.params import MAX_ITERATIONS, ROUNDS
from .config.run import SERVER_OPT_UNUSED
from .data import DataError, ImageFolderSet, ImageSet, get_dataset, train_test_split
from .errors import SettingWarning, SlowWarning, UserError, duration_text
from .figures import accuracy_figure
from .progress import progress_bar
from .results import (
    append_text,
    atomic_write_bytes,
    atomic_write_text,
    read_json,
    read_jsonl,
    to_jsonable,
    write_json,
)
from .results.reference import machine, machine_text
from .sketch import is_identity, list_sketches
from .torchfile import load_torch_file

#: the lock file of a training's run folder, held while it trains (one training per folder)
TRAIN_LOCK = "train.lock"

#: model settings that train (the DLG sigmoid LeNet does not leave the 10 % plateau under SGD)
MODEL_DEFAULTS = {"model": "lenet", "init": "default", "act": "tanh", "dataset": "digits",
                  "data_root": None, "test_fraction": 0.2}


class TrainingDiverged(UserError):
    """The loss became non-finite: training stops, the rounds before are kept."""


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM) stopped training: the ``done`` rounds finished of the ``planned`` ones are kept in
    ``folder``."""

    def __init__(self, folder: Path, done: int, planned: int):
        super().__init__(f"training stopped after round {done} of {planned}")
        self.folder, self.done, self.planned = Path(folder), done, planned


def build_victim(model_spec: dict, dataset: ImageSet, dtype=torch.float32, device="cpu") -> targets.Victim:
    """The protocol's template victim from its stored spec (seeded by the protocol seed)."""
    params = {"act": model_spec["act"]} if "act" in targets.model_params(model_spec["model"]) else {}
    victim = targets.get_model(model_spec["model"], num_classes=dataset.num_classes, in_shape=dataset.in_shape,
                               seed=model_spec["seed"], init=model_spec["init"], **params)
    return victim.to(device=device, dtype=dtype)


def load_split(model_spec: dict, download: bool = False):
    """(train, test) parts of the data set, split with the protocol seed; DataError -> ConfigError."""
    try:
        ds = get_dataset(model_spec["dataset"], root=model_spec["data_root"], download=download)
        parts = train_test_split(ds, model_spec["test_fraction"], seed=model_spec["seed"])
        # a protocol reads an image folder at its default size, which neither train nor run --protocol takes
        return tuple(p.size_fixed() if isinstance(p, ImageFolderSet) else p for p in parts)
    except DataError as err:
        raise ConfigError(str(err)) from None


def refuse_empty_clients(shards: list[torch.Tensor], images: int) -> None:
    """ConfigError where the split leaves a client without data (``leakattack train`` and ``run --protocol`` refuse
    it alike: such a client would send a zero update and a NaN loss)."""
    if any(s.numel() == 0 for s in shards):
        raise ConfigError(empty_clients_text(len(shards), images))


def refuse_long_rounds(proto: Protocol) -> None:
    """ConfigError where ``--local-epochs`` gives a client more local steps per round, E ceil(n_c/B), than
    ``--local-steps`` may ask for (``leakattack train`` and ``run --protocol`` refuse it alike: every round would
    run them, and the attacker's model unrolls them at every evaluation)."""
    if not proto.local_epochs:
        return
    c = max(range(len(proto.shards)), key=proto.step_count)
    steps = proto.step_count(c)
    if steps > MAX_ITERATIONS:
        raise ConfigError(f"--local-epochs {proto.local_epochs} gives client {c} {steps:,} local steps per round "
                          f"(E ceil(n_c/B) for its {proto.shards[c].numel()} images in batches of --client-batch "
                          f"{proto.batch_size}), more than the {MAX_ITERATIONS:,} that --local-steps allows")


def warn_client_batch(spec: dict, trainset: ImageSet) -> None:
    """A warning where the protocol's client batch exceeds the images of a client, whose every step then takes them
    all (``leakattack train`` and ``run --protocol`` say it alike); a client without data is refused first."""
    shards = split_clients(trainset.labels, spec["clients"], spec["noniid"], spec["seed"])
    refuse_empty_clients(shards, len(trainset))
    held = int(trainset.labels[torch.cat(shards)].unique().numel())
    classes = int(trainset.labels.unique().numel())
    if held < classes:  # --noniid gives client c two classes: fewer clients than classes leave some to no one
        warnings.warn(f"--noniid with {spec['clients']} client(s) leaves {classes - held} of the {classes} classes in "
                      f"no client's data (each client holds one or two): the model never trains on them; "
                      f"{classes - 1} or more clients cover every class", SettingWarning, stacklevel=2)
    fewest = min(s.numel() for s in shards)
    if spec["batch_size"] > fewest:
        warnings.warn(f"--client-batch {spec['batch_size']} exceeds the {fewest} image{'s' if fewest != 1 else ''} "
                      "the smallest client holds: "
                      "a client's batch is cut to all its images", SettingWarning, stacklevel=2)


def checkpoint_path(folder: Path, t: int) -> Path:
    return Path(folder) / "checkpoints" / f"round_{t:04d}.pt"


def trained_model_spec(weights: str | Path) -> dict | None:
    """The model spec (protocol.json's ``model``: model, act, init, data set, seed) of the `leakattack train` run
    whose checkpoint ``weights`` is (``<run>/checkpoints/round_TTTT.pt`` beside ``<run>/protocol.json``), else
    None (another file, or a protocol.json that cannot be read)."""
    path = Path(weights)
    if path.parent.name != "checkpoints" or not (path.name.startswith("round_") and path.suffix == ".pt"):
        return None
    try:
        spec = read_json(path.parent.parent / "protocol.json").get("model")
    except (OSError, ValueError, AttributeError):
        return None
    return spec if isinstance(spec, dict) else None


def model_buffers(victim: targets.Victim) -> dict[str, torch.Tensor]:
    """The model's buffers (BatchNorm's running statistics and step counts) by name, copied to the CPU."""
    return {n: b.detach().to("cpu").clone() for n, b in victim.model.named_buffers()}


def _float32(x: torch.Tensor) -> torch.Tensor:
    return x.detach().to("cpu", torch.float32).clone()


def save_checkpoint(folder: Path, t: int, w: torch.Tensor, buffers: dict[str, torch.Tensor] | None = None,
                    server: dict | None = None) -> None:
    """w^t as a float32 tensor, or with ``buffers`` or the protocol's ``server`` state before round t
    (:meth:`Protocol.server_state`, its tensors as float32) ``{"weights": w^t, "buffers": ..., "server": ...}``,
    written atomically in one file."""
    state: dict = {"weights": _float32(w)}
    if buffers:
        state["buffers"] = buffers
    if server is not None:
        state["server"] = {k: _float32(v) if isinstance(v, torch.Tensor) else v for k, v in server.items()}
    buf = io.BytesIO()
    torch.save(state if len(state) > 1 else state["weights"], buf)
    atomic_write_bytes(checkpoint_path(folder, t), buf.getvalue())


def load_checkpoint(folder: Path, t: int, d: int) -> tuple[torch.Tensor, dict[str, torch.Tensor] | None]:
    """(w^t of length d, the model's buffers or None) from a run folder (:func:`read_checkpoint`)."""
    w, buffers, _ = read_checkpoint(folder, t, d)
    return w, buffers


def read_checkpoint(folder: Path, t: int, d: int) -> tuple[torch.Tensor, dict[str, torch.Tensor] | None, dict | None]:
    """(w^t of length d, the model's buffers or None, the server state before round t or None) from a run folder,
    loaded with ``weights_only`` (a checkpoint cannot run code); a checkpoint without the server state (a protocol
    that keeps none, or one written before checkpoints held it) gives None."""
    path = checkpoint_path(folder, t)
    if not path.is_file():
        _refuse_unreached(folder, t)
        raise ConfigError(f"checkpoint '{path}' does not exist (train with checkpoints, and a --checkpoint-every that "
                          f"writes it, to attack round {t})")
    state = load_torch_file(path, f"checkpoint '{path}'", error=ConfigError)
    w, buffers, server = (state.get("weights"), state.get("buffers"), state.get("server")) \
        if isinstance(state, dict) else (state, None, None)
    if not isinstance(w, torch.Tensor) or w.dim() != 1 or w.numel() != d:
        raise ConfigError(f"checkpoint '{path}' does not hold the {d} weights of this protocol's model")
    if buffers is not None and not (isinstance(buffers, dict)
                                    and all(isinstance(b, torch.Tensor) for b in buffers.values())):
        raise ConfigError(f"checkpoint '{path}' holds buffers that are not a dict of tensors")
    if server is not None and not (isinstance(server, dict) and all(
            isinstance(v, int) if k == "t" else isinstance(v, torch.Tensor) and v.shape == (d,)
            for k, v in server.items())):
        raise ConfigError(f"checkpoint '{path}' holds a server state that is not a round count and vectors of {d}")
    return w, buffers, server


def _refuse_unreached(folder: Path, t: int) -> None:
    """ConfigError where the run in ``folder`` has not finished round t: it stopped before (a training killed
    outright, whose protocol.json still plans more rounds), or it is training now.  The rounds a run can attack are
    those its training finished, 1..N, as for a training that stopped on its own (:func:`check_round`)."""
    done = rounds_logged(folder)
    if done is None or t <= done:
        return
    from .sweep.lock import FolderLock, SweepLocked  # here: leakattack.sweep imports the run's modules

    try:
        FolderLock(folder, TRAIN_LOCK, "training run").check()
    except SweepLocked:  # a live training holds the folder
        finished = f"has finished rounds 1..{done}" if done else "has finished no round yet"
        raise ConfigError(f"round {t} does not exist yet: a training is running in '{folder}' and {finished}"
                          + (f" (attack a round of 1..{done}, or wait for it)" if done else " (wait for it)")) from None
    when, which = (f"after round {done}", f" (attack a round of 1..{done})") if done else \
        ("before round 1 finished", "")
    held = f"rounds 1..{done}" if done else "no round"
    raise ConfigError(f"round {t} does not exist: training stopped {when} without recording its stop ('{folder}' "
                      f"holds {held} of the rounds its protocol.json plans, as a training killed outright leaves "
                      f"it), so round {t} was never finished{which}")


def load_server_state(proto: Protocol, server: dict | None, t: int, source: str | Path) -> None:
    """Continue ``proto`` at round t from a checkpoint's server state; ConfigError when it is not the state before
    round t of this protocol."""
    try:
        proto.load_server_state(server, t)
    except ValueError as err:
        raise ConfigError(f"checkpoint '{source}' does not continue protocol '{proto.name}' at round {t}: "
                          f"{err}") from None


def load_buffers(victim: targets.Victim, buffers: dict[str, torch.Tensor], source: str | Path) -> None:
    """Copy a checkpoint's buffers into the victim's model; ConfigError when they do not fit it."""
    own = dict(victim.model.named_buffers())
    if set(own) != set(buffers) or any(own[n].shape != b.shape for n, b in buffers.items()):
        raise ConfigError(f"checkpoint '{source}' holds buffers that do not fit this protocol's model")
    with torch.no_grad():
        for n, b in buffers.items():
            own[n].copy_(b)


#: a re-simulation of more rounds than this says first how many it runs, and after its first round how long they take
REPLAY_NOTE_ROUNDS = 20


def weights_at(proto: Protocol, t: int, folder: str | Path | None = None, progress: bool = False,
               ) -> tuple[torch.Tensor, str, Path | None]:
    """(w^t of ``proto``, where it came from, the checkpoint file read or None), in the protocol's dtype and on its
    device.

    With a run ``folder``: its checkpoint of w^t, the model's buffers loaded into the victim (``"checkpoint"``);
    where that checkpoint was not written, rounds s..t-1 re-simulated from the latest checkpoint of w^s before t,
    its buffers (tracked on through the rounds, as training does) and its server state
    (``"re-simulated from the checkpoint of w^s"``); ConfigError when the folder holds none.  Without one, rounds
    1..t-1 re-simulated from the seeds (``"re-simulated"``).  A re-simulation of more than
    :data:`REPLAY_NOTE_ROUNDS` rounds says so first and, after its first round, how long the rest take (one
    :class:`SettingWarning` line each)."""
    victim = proto.victim
    start, w, server, source, read = 1, None, None, "re-simulated", None
    if folder is not None:
        folder = Path(folder)
        _refuse_unreached(folder, t)
        latest, held = None, None  # held: the start's checkpoint where it was read to see its server state
        for s in range(t, 0, -1):
            if not checkpoint_path(folder, s).is_file():
                continue
            if s < t and _needs_state(s, proto):  # as _continues, keeping what it read
                held = read_checkpoint(folder, s, victim.d)
                if held[2] is None:
                    held = None
                    continue
            latest = s
            break
        if latest is None:
            load_checkpoint(folder, t, victim.d)  # refuses: says why the checkpoint of w^t is not there
            raise ConfigError(f"'{folder}' holds no checkpoint of w^{t} and none before it that round {t} can be "
                              f"re-simulated from")
        start, read = latest, checkpoint_path(folder, latest)
        w, buffers, server = held or read_checkpoint(folder, start, victim.d)
        if buffers is not None:  # the running statistics the server holds with w^start
            load_buffers(victim, buffers, read)
        w = w.to(device=proto.device, dtype=proto.dtype)
        if start == t:
            return w, "checkpoint", read
        load_server_state(proto, server, start, read)
        source = f"re-simulated from the checkpoint of w^{start}"
        if buffers is not None and running_statistics_layers(victim.model):
            # BatchNorm statistics a training that counted batches twice left, tracked on once from here
            with contextlib.suppress(OSError, ValueError, UnicodeDecodeError):
                first = read_json(Path(folder) / "protocol.json").get(BN_COUNTED_ONCE_FROM, start)
                if isinstance(first, int) and min(first, start) > 1:
                    warnings.warn(counting_note(Path(folder), min(first, start),
                                                f"rounds {start}..{t - 1} are re-simulated with each batch counted "
                                                "once"), SettingWarning, stacklevel=2)
    count = t - start
    loud = count > REPLAY_NOTE_ROUNDS
    if loud:
        origin = f"the checkpoint of w^{start} in '{folder}'" if folder is not None else \
            "the initial weights and the seeds"
        warnings.warn(f"w^{t} is re-simulated first: {count} rounds ({start}..{t - 1}) from {origin}",
                      SettingWarning, stacklevel=2)
    began = time.perf_counter()

    def done(s: int) -> None:
        bar.update(1)
        if loud and s == start:
            took = time.perf_counter() - began
            warnings.warn(f"re-simulating the {count} rounds before round {t} takes about "
                          f"{duration_text(took * count)} (measured on round {s})", SlowWarning, stacklevel=3)

    with progress_bar(count, f"{proto.name} rounds before {t}", "round", requested=progress, leave=False) as bar, \
            statistics_tracked(victim.model, True) if folder is not None else contextlib.nullcontext():
        w = proto.replay(t, on_round=done, start=start, w=w, state=server)
    return w, source, read


def _rounds_unrecorded(folder: Path) -> bool:
    """Whether ``folder`` holds a checkpoint of w^t for some t >= 2, which round t - 1 wrote after it finished (a
    training without train.jsonl has finished no round, unless its file was lost)."""
    return any(p.stem.removeprefix("round_").isdigit() and int(p.stem.removeprefix("round_")) >= 2
               for p in checkpoint_path(folder, 1).parent.glob("round_*.pt"))


def rounds_logged(folder: str | Path) -> int | None:
    """The last round train.jsonl in ``folder`` records (0: none), when training stopped before the rounds
    protocol.json plans; None when it did not, or the files do not say."""
    try:
        planned = read_json(Path(folder) / "protocol.json")
        planned = planned.get("rounds_planned", planned.get("rounds"))
        log = Path(folder) / "train.jsonl"
        if not log.is_file() and _rounds_unrecorded(Path(folder)):  # rounds finished, their record gone
            return None
        rows = read_jsonl(log) if log.is_file() else []  # none: no round finished
        done = int(rows[-1]["round"]) if rows else 0
    except (OSError, UserError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return done if isinstance(planned, int) and done < planned else None


def check_round(folder: str | Path, t: int, rounds: int) -> None:
    """Refuse round t of a stored run of ``rounds`` rounds that does not hold it (ConfigError), saying where
    training stopped when it stopped early."""
    if t <= rounds:
        return
    held = f"holds rounds 1..{rounds}" if rounds else "holds no round"
    stored = read_json(Path(folder) / "protocol.json")
    stopped, planned = stored.get("stopped"), stored.get("rounds_planned")
    if stopped:
        of = f" of {planned}" if isinstance(planned, int) else ""
        when = f"after round {rounds}{of}" if rounds else f"before round 1{of} finished"
        raise ConfigError(f"round {t} does not exist: training stopped {when} ({stopped}), so '{folder}' {held}")
    raise ConfigError(f"round {t} does not exist: '{folder}' {held}")


def stored_protocol(folder: str | Path, name: str) -> tuple[dict, dict, int]:
    """(spec, model spec, rounds) of the protocol run stored in ``folder``; ConfigError when it is not one of ``name``.

    ``rounds`` is the rounds training finished (0 when it stopped before the first).  A setting the stored spec
    does not name (one added after the run was trained) takes its default, which is how the run trained."""
    pj = protocol_json(folder)
    try:
        stored = read_json(pj)
        protocol, spec, model, rounds = stored["protocol"], stored["spec"], stored["model"], stored["rounds"]
        least = 0 if stored.get("stopped") else 1
        if not (isinstance(spec, dict) and isinstance(model, dict) and isinstance(rounds, int)
                and not isinstance(rounds, bool) and rounds >= least
                and set(MODEL_DEFAULTS) <= set(model) and "seed" in model):
            raise ValueError
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        raise ConfigError(f"'{pj}' is not a protocol.json written by `leakattack train`") from None
    if protocol != name:
        raise ConfigError(f"protocol folder '{folder}' holds protocol '{protocol}', not '{name}'")
    return {**SPEC_DEFAULTS, **spec}, model, rounds


def check_unchanged(folder: str | Path, described: dict) -> None:
    """Refuse a protocol.json edited after training: the rebuilt protocol must describe itself as the trained one
    did."""
    stored = read_json(Path(folder) / "protocol.json").get("describe")
    if stored is None:
        return
    changed = sorted(k for k in stored if k in described and stored[k] != described[k])
    if changed:
        k = changed[0]
        raise ConfigError(f"'{Path(folder) / 'protocol.json'}' was changed after training: it says {k} = "
                          f"{described[k]!r} where the run trained with {stored[k]!r}")


def train(name: str, spec: dict, model_spec: dict, rounds: int, out: Path, run_name: str | None = None,
          progress: bool = True, download: bool = False, checkpoints: bool = True, checkpoint_every: int = 1,
          on_resume: Callable[[Path, int], None] | None = None) -> Path:
    """Run ``rounds`` rounds of protocol ``name`` and write the run folder; returns it.

    With ``checkpoints``, w^t is written for t = 1 and every ``checkpoint_every``-th round after it
    (t = 1, 1 + k, 1 + 2k, ...), and the final weights w^(rounds+1) always.  Stopped early (Ctrl-C: raises
    :class:`TrainingInterrupted`; a diverged loss: :class:`TrainingDiverged`), the run folder records the rounds
    it finished (see the module's docstring).  A folder holding rounds 1..N of the same training is continued from
    round N+1 (``on_resume(folder, N)`` is called first); one holding another is refused (:func:`resume_point`).
    ``rounds`` lies in [1, :data:`~leakattack.config.params.MAX_ROUNDS`] (ConfigError otherwise)."""
    check_value("rounds T", ROUNDS, rounds)
    trainset, testset = load_split(model_spec, download)
    victim = build_victim(model_spec, trainset)
    validate_protocol(name, spec, victim.d)
    proto = get_protocol(name, victim, trainset, **spec)
    refuse_empty_clients(proto.shards, len(trainset))
    refuse_long_rounds(proto)
    if (note := proto.paper_bound_note(rounds)) is not None:  # the paper's epsilon past its conditions
        warnings.warn(note, SettingWarning, stacklevel=2)
    folder = Path(out) / (run_name or name)
    record = {"protocol": name, "spec": spec, "model": model_spec, "rounds": rounds, "describe": proto.describe(),
              "torch": torch.__version__, "machine": machine()}
    if running_statistics_layers(victim.model):
        # the first round whose BatchNorm running statistics counted each batch once (trainings before that counted
        # a client's first batch of a round twice, :func:`counting_note`); a resumed one keeps its own
        record[BN_COUNTED_ONCE_FROM] = 1
    from .sweep.lock import FolderLock  # here: leakattack.sweep imports the run's modules, which import this one
    made = [p for p in (folder, *folder.parents) if not p.exists()]
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:  # a name too long, a full disk: the folders above made so far go too
        _remove_empty([p for p in made if os.path.lexists(p)])
        raise
    # one training per folder: a second one would read the first's files as a stopped run and append to them
    lock = FolderLock(folder, TRAIN_LOCK, "training run")
    try:
        lock.acquire()
        return _train_locked(folder, record, proto, victim, testset, rounds, out, progress, checkpoints,
                             checkpoint_every, on_resume)
    finally:
        lock.release()
        _remove_empty(made)  # a training refused before it wrote anything leaves no folder


#: protocol.json's key of the first round whose BatchNorm running statistics counted each batch a client stepped on
#: once; a training folder without it (with BatchNorm) was trained by a version that counted a client's first batch
#: of every round twice (the round's loss, read in train mode, moved the statistics too)
BN_COUNTED_ONCE_FROM = "bn_counted_once_from"


def counting_note(folder: Path, first: int, now: str) -> str:
    """The warning for a training folder whose rounds before ``first`` counted a client's first batch of each round
    twice in the BatchNorm running statistics: ``now`` says what is done with it."""
    return (f"'{folder}' holds rounds 1..{first - 1} trained by a leakattack that counted each client's first batch of "
            "a round twice in the BatchNorm running statistics (the weights do not depend on them): "
            f"{now}, so the statistics mix the two counts; train in a new folder for statistics of one")


def _remove_empty(made: list[Path]) -> None:
    """Remove the folders ``made`` (deepest first) that are still empty; stop at the first that is not."""
    for p in made:
        try:
            p.rmdir()
        except OSError:
            break


def _train_locked(folder: Path, record: dict, proto: Protocol, victim: targets.Victim, testset: ImageSet,
                  rounds: int, out: Path, progress: bool, checkpoints: bool, checkpoint_every: int,
                  on_resume: Callable[[Path, int], None] | None) -> Path:
    """:func:`train` in its folder, whose lock this process holds."""
    name = record["protocol"]
    rows = resume_point(folder, record, proto)
    w: torch.Tensor | None
    server: dict | None = None
    if not rows:
        w = proto.initial_weights()
        for stale in checkpoint_path(folder, 1).parent.glob("round_*.pt"):  # a run of this setting before round 1
            stale.unlink()
    elif checkpoint_path(folder, len(rows) + 1).is_file():
        w, buffers, server = read_checkpoint(folder, len(rows) + 1, victim.d)
        if buffers is not None:  # the running statistics the clients' forward passes left before round N+1
            load_buffers(victim, buffers, checkpoint_path(folder, len(rows) + 1))
        if len(rows) < rounds:  # a round still to run starts from the server state the checkpoint holds
            load_server_state(proto, server, len(rows) + 1, checkpoint_path(folder, len(rows) + 1))
    else:  # every round asked for is there, without the weights after them (trained with --no-checkpoints)
        w = None
    if rows and on_resume is not None:
        on_resume(folder, len(rows))
    _write_log(folder, rows)
    kept = {}
    if rows:  # rounds of an earlier run of this training: what it recorded of them stays
        stored = read_json(folder / "protocol.json")
        if len(rows) == rounds:  # nothing left to train: how the training stopped stays recorded
            kept = {k: stored[k] for k in ("rounds_planned", "stopped") if k in stored}
        # the machines its earlier rounds ran on, where this one is another (warned by resume_point)
        before = [m for m in [*stored.get("machines_before", []), stored.get("machine")] if isinstance(m, dict)]
        if before and before[-1] == record["machine"]:  # the latest is this machine: recorded as "machine"
            before.pop()
        if before:
            kept["machines_before"] = before
    if BN_COUNTED_ONCE_FROM in record and rows:  # the rounds kept were counted by the rule their training had
        first = stored.get(BN_COUNTED_ONCE_FROM, len(rows) + 1)
        first = first if isinstance(first, int) and not isinstance(first, bool) and first >= 1 else len(rows) + 1
        kept[BN_COUNTED_ONCE_FROM] = first
        if first > 1 and len(rows) < rounds:
            warnings.warn(counting_note(folder, first, f"rounds {len(rows) + 1}..{rounds} are trained now with "
                                        "each batch counted once"), SettingWarning, stacklevel=3)
    write_json(folder / "protocol.json", {**record, **kept})
    # the finished rounds' rows, the weights after the last of them and the buffers and server state with them: one
    # assignment, so that an interrupt leaves them consistent
    finished: tuple[list[dict], torch.Tensor | None, dict, dict | None] = (rows, w, model_buffers(victim), server)
    last = rows[-1] if rows else {}
    cum, mean_cum = last.get("floats_cum", 0), last.get("floats_mean_cum", 0.0)
    t0 = time.perf_counter() - last.get("wall_s", 0.0)  # wall_s counts the earlier rounds' time too
    bar = progress_bar(rounds, name, "round", progress, leave=False, initial=len(rows))
    try:
        for t in range(len(rows) + 1, rounds + 1):
            assert w is not None  # resume_point found the checkpoint of w^(N+1) for a round still to run
            if checkpoints and (t - 1) % checkpoint_every == 0:
                save_checkpoint(folder, t, w, finished[2], finished[3])
            # the clients' batches move BatchNorm's running statistics (a victim in train mode turns that off, so
            # that attacks leave them as loaded)
            with statistics_tracked(victim.model, True):
                w, stats = proto.run_round(w, t)
            cum += stats["floats_sent"]
            mean_cum += stats["floats_sent"] * len(stats["clients"]) / proto.clients
            test_loss, test_acc = evaluate(victim, w, testset.images, testset.labels)
            if not (math.isfinite(stats["train_loss"]) and math.isfinite(test_loss)):
                where = f"rounds 1..{t - 1} are kept in '{folder}'" if t > 1 else "no round finished"
                raise TrainingDiverged(f"training diverged in round {t} (train loss {stats['train_loss']:.4g}, test "
                                       f"loss {test_loss:.4g}); {where} (lower the learning rates)")
            row = {"round": t, "train_loss": stats["train_loss"], "test_loss": test_loss, "test_acc": test_acc,
                   "floats_sent": stats["floats_sent"], "floats_cum": cum, "floats_mean_cum": mean_cum,
                   "clients": stats["clients"],
                   "wall_s": time.perf_counter() - t0}
            row.update(proto.privacy(t))
            row.update(stats.get("record", {}))  # the protocol's own numbers of the round (sacfl: its clip)
            finished = (finished[0] + [row], w, model_buffers(victim), proto.server_state())
            _append_log(folder, row)
            if bar is not None:
                bar.update(1)
                bar.set_postfix_str(f"acc={test_acc:.3f}")
    except (KeyboardInterrupt, TrainingDiverged) as err:
        if bar is not None:
            bar.close()
        stopped = "diverged" if isinstance(err, TrainingDiverged) else "interrupted"
        rows, w_done, buffers_done, server_done = finished
        done = len(rows)
        _write_log(folder, rows)
        # what the earlier rounds recorded (their machines, the first round counted once) stays, as at the start
        write_json(folder / "protocol.json", {**record, **{k: v for k, v in kept.items() if k not in (
            "rounds_planned", "stopped")}, "rounds": done, "rounds_planned": rounds, "stopped": stopped})
        if checkpoints and w_done is not None and not checkpoint_path(folder, done + 1).is_file():
            save_checkpoint(folder, done + 1, w_done, buffers_done, server_done)
        accuracy_figure(Path(out))
        if isinstance(err, TrainingDiverged):
            raise
        raise TrainingInterrupted(folder, done, rounds) from None
    if bar is not None:
        bar.close()
    if checkpoints and finished[1] is not None:
        save_checkpoint(folder, rounds + 1, finished[1], finished[2], finished[3])
    accuracy_figure(Path(out))
    return folder


def keeps_server_state(proto: Protocol) -> bool:
    """Whether the protocol's server carries state from one round to the next besides w (SAFL's optimiser moments),
    which its checkpoints hold beside w (:meth:`Protocol.server_state`)."""
    return bool(proto.keeps_server_state)


def _needs_state(t: int, proto: Protocol) -> bool:
    """Whether round t needs a checkpoint's server state besides the seeds (round 1 starts from a fresh one)."""
    return t > 1 and keeps_server_state(proto)


def _continues(folder: Path, t: int, proto: Protocol) -> bool:
    """Whether the checkpoint of w^t in ``folder`` holds all that round t needs besides the seeds: for a protocol that
    keeps server state, that state."""
    return not _needs_state(t, proto) or read_checkpoint(folder, t, proto.d)[2] is not None


def _idle_settings(protocol: str, spec: dict) -> set[str]:
    """The settings that change nothing for ``protocol`` (it does not read them, or ``spec``'s server optimiser
    leaves them unused, or its sketch sends the whole update), which a training may be continued with otherwise
    (all are warned of when given)."""
    whole = spec.get("sketch") in list_sketches() and is_identity(str(spec["sketch"]))
    return (set(unread_settings(protocol_class(protocol), SPEC_DEFAULTS))
            | set(SERVER_OPT_UNUSED.get(str(spec.get("server_opt")), ()))
            | ({"sketch_ratio"} if whole else set()))


def _setting_change(stored: dict, record: dict) -> tuple[str, object, object] | None:
    """(setting, stored value, this training's value) of the first setting a stored protocol.json trained with
    otherwise than ``record`` asks; None when they agree.  A spec setting the stored run does not name took its
    default, and one the protocol does not read changes nothing; the values are compared as protocol.json writes
    them."""
    mine = json.loads(json.dumps(to_jsonable(record)))
    theirs = {"protocol": stored.get("protocol"), "spec": {**to_jsonable(SPEC_DEFAULTS), **stored["spec"]},
              "model": stored["model"]}
    if theirs["protocol"] != mine["protocol"]:
        return "protocol", theirs["protocol"], mine["protocol"]
    unread = _idle_settings(mine["protocol"], mine["spec"]) if theirs["spec"].get("server_opt") == \
        mine["spec"].get("server_opt") else _idle_settings(mine["protocol"], {})
    for part in ("model", "spec"):
        for key in sorted(set(theirs[part]) | set(mine[part])):
            if theirs[part].get(key) != mine[part].get(key) and not (part == "spec" and key in unread):
                return key, theirs[part].get(key), mine[part].get(key)
    return None


def resume_point(folder: Path, record: dict, proto: Protocol) -> list[dict]:
    """The train.jsonl rows of the rounds 1..N an earlier training in ``folder`` finished that this one (``record``:
    what its protocol.json will hold) continues from: empty for a folder without one, or with one of the same
    setting that finished no round.  ConfigError, in one sentence naming the folder, what it holds and how to
    proceed, where the folder holds training that cannot be continued exactly."""
    folder = Path(folder)
    elsewhere = "give another --name or --out, or remove the folder to train from round 1"
    pj, log = folder / "protocol.json", folder / "train.jsonl"
    if not pj.is_file():
        if log.is_file() or any(checkpoint_path(folder, 1).parent.glob("round_*.pt")):
            raise ConfigError(f"'{folder}' holds training files ({'train.jsonl' if log.is_file() else 'checkpoints'}) "
                              f"without the protocol.json that says how they were trained: {elsewhere}")
        return []
    if not log.is_file() and _rounds_unrecorded(folder):
        raise ConfigError(f"'{folder}' holds checkpoints after round 1 without the train.jsonl that records the "
                          f"rounds they come from: {elsewhere}")
    try:
        stored = read_json(pj)
        rows = read_jsonl(log) if log.is_file() else []  # none: no round finished
        if not (isinstance(stored, dict) and isinstance(stored.get("spec"), dict)
                and isinstance(stored.get("model"), dict) and isinstance(stored.get("rounds"), int)):
            raise ValueError
        if [r.get("round") for r in rows] != list(range(1, len(rows) + 1)) or len(rows) > stored["rounds"]:
            raise ValueError
    except (OSError, UserError, ValueError, TypeError, AttributeError, UnicodeDecodeError):
        raise ConfigError(f"'{folder}' holds a protocol.json and train.jsonl that are not a run of `leakattack "
                          f"train`: {elsewhere}") from None
    done = len(rows)
    model = stored["model"]
    held = (f"a {stored.get('protocol')} training of {model.get('model')} on {model.get('dataset')} "
            f"({f'rounds 1..{done}' if done else 'no finished round'})")
    change = _setting_change(stored, record)
    if change is not None:
        key, theirs, mine = change
        trained = stored.get("describe")
        if isinstance(trained, dict) and key in trained and trained[key] != theirs:  # edited after it trained
            raise ConfigError(f"'{pj}' was changed after training: it says {key} = {theirs!r} where the run trained "
                              f"with {trained[key]!r}")
        raise ConfigError(f"'{folder}' holds {held} with other settings (its {key} is {theirs!r}, this training's "
                          f"{mine!r}): {elsewhere}")
    unread = _idle_settings(record["protocol"], record["spec"])  # what changes nothing
    # its settings edited after it trained: they are not what ran
    check_unchanged(folder, {k: v for k, v in record["describe"].items() if k not in unread})
    if not done:
        return []
    if done > record["rounds"]:
        raise ConfigError(f"'{folder}' holds {held}, more than --rounds {record['rounds']}: give --rounds {done} or "
                          f"more to continue it, or {elsewhere.removeprefix('give ')}")
    if done == record["rounds"] and (checkpoint_path(folder, done + 1).is_file()
                                     or not any(checkpoint_path(folder, 1).parent.glob("round_*.pt"))):
        return rows  # every round asked for is there, with the weights after them or trained without checkpoints
    # otherwise rounds remain, or the last were trained and their weights not written (a training stopped while it
    # wrote them): the rounds from the latest checkpoint are trained again, as below
    if stored.get("torch", record["torch"]) != record["torch"]:
        raise ConfigError(f"'{folder}' holds {held} made with torch {stored['torch']}, and this is torch "
                          f"{record['torch']}, whose rounds need not agree with them bit for bit: {elsewhere}")
    theirs, mine = stored.get("machine"), record["machine"]
    if isinstance(theirs, dict) and theirs != mine:  # the same torch (above): the CPU, its SIMD path or threads differ
        warnings.warn(f"'{folder}' holds rounds 1..{done} trained on {machine_text(theirs)}, and this is "
                      f"{machine_text(mine)}: the rounds after them need not agree bit for bit with a training that "
                      "ran on one of them throughout (docs/protocols.md#seeds)", SettingWarning, stacklevel=3)
    if stored.get("stopped") == "diverged":
        raise ConfigError(f"'{folder}' holds {held}, whose loss diverged in round {done + 1}, where the same settings "
                          f"diverge again: lower the learning rates and {elsewhere}")
    if not checkpoint_path(folder, done + 1).is_file():
        # a training killed outright (SIGKILL, a lost node) writes no checkpoint when it stops: with --checkpoint-every
        # k > 1 the latest is of an earlier round, from which the rounds after it are trained again, the same way
        latest = next((t for t in range(done, 0, -1) if checkpoint_path(folder, t).is_file()), None)
        if latest is None:
            raise ConfigError(f"'{folder}' holds {held} without the checkpoint of w^{done + 1} to continue from (a "
                              f"training with --no-checkpoints writes none): {elsewhere}")
        _refuse_without_server_state(folder, latest, proto, held, elsewhere)
        warnings.warn(f"'{folder}' holds rounds 1..{done} and no checkpoint after round {done} (the training was "
                      f"stopped without writing one): rounds {latest}..{done} are trained again from the checkpoint of "
                      f"w^{latest}" + (f" to write w^{done + 1}" if done == record["rounds"] else ""),
                      SettingWarning, stacklevel=3)
        return rows[:latest - 1]
    _refuse_without_server_state(folder, done + 1, proto, held, elsewhere)
    return rows


def _refuse_without_server_state(folder: Path, t: int, proto: Protocol, held: str, elsewhere: str) -> None:
    """ConfigError where the checkpoint of w^t that training would continue from lacks the server state the
    protocol keeps between rounds (a checkpoint written before checkpoints held it)."""
    if not _continues(folder, t, proto):
        raise ConfigError(f"'{folder}' holds {held}, and protocol '{proto.name}' keeps server state between rounds "
                          f"that its checkpoint of w^{t} does not hold, so training cannot continue from round {t} "
                          f"exactly: {elsewhere}")


def _write_log(folder: Path, rows: list[dict]) -> None:
    """train.jsonl holding ``rows`` (none: no file), written atomically (where a training starts or stops; each
    round in between appends its row: :func:`_append_log`)."""
    if rows:
        atomic_write_text(folder / "train.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    elif (folder / "train.jsonl").is_file():
        (folder / "train.jsonl").unlink()


def _append_log(folder: Path, row: dict) -> None:
    """One round's row added to train.jsonl, one line in one write (:func:`~leakattack.results.append_text`): a round
    costs the same whatever the rounds before it (a rewrite of the whole file grows with them).  A process killed
    during the write can leave a torn last line, which :func:`~leakattack.results.read_jsonl` leaves out."""
    fd = os.open(folder / "train.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        append_text(fd, json.dumps(row) + "\n")
    finally:
        os.close(fd)


__all__ = ["MODEL_DEFAULTS", "TrainingDiverged", "TrainingInterrupted", "check_round", "rounds_logged",
           "check_unchanged", "build_victim", "load_split", "checkpoint_path", "trained_model_spec",
           "model_buffers", "save_checkpoint", "load_checkpoint", "read_checkpoint", "load_buffers",
           "load_server_state", "weights_at", "REPLAY_NOTE_ROUNDS",
           "stored_protocol", "keeps_server_state", "resume_point", "train", "refuse_empty_clients",
           "refuse_long_rounds", "warn_client_batch"]
