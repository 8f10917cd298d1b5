"""Flower deployments: record what clients send as message files, and sketch updates (Song et al., Algorithm 1).

Server side:

* :class:`RecordingStrategy` wraps any Flower strategy (``FedAvg``, ...).  In
  every recorded round it writes the weights w^t the server sent
  (``round001-weights.pt``, a flat vector in ``model.parameters()`` order that
  ``leakattack run --weights`` loads), each chosen client's update as a message
  file (``round001-client<id>.pt``: kind ``update`` = w^t - w_after, with the
  round, the client id, the fit configuration's ``lr``, ``local_steps`` and
  ``batch_size``, and the round's sketch when the deployment sketches), and the
  weights the wrapped strategy aggregated for the next round.  Attack a file with
  ``leakattack run --model M --weights round001-weights.pt --message round001-client0.pt``.
* :class:`SketchedFedAvg` is FedAvg with Algorithm 1's server: round t's R_t is
  drawn from the shared seed (``targets.protocols.round_seed``, as the ``sketched``
  protocol does) and named in the fit configuration (key :data:`SKETCH_KEY`, the
  JSON of ``Sketch.describe()``); clients send R_t Δ_c with Δ_c = u^K - w^t; the
  server averages the sketches (weighted by the clients' example counts, as
  FedAvg does) and steps w^{t+1} = w^t + γ R_tᵀ(average).

Client side:

* :class:`SketchingClient` wraps any ``NumPyClient``: it trains as the wrapped
  client does and, when the fit configuration names a sketch, sends R_t Δ (one
  array of b numbers) instead of its weights.
* :func:`model_arrays` / :func:`load_arrays`: a model's parameters as the list of
  arrays Flower exchanges, in ``model.parameters()`` order (the order message
  files and weight vectors use).  Exchange parameters only, no buffers.

Flower's anonymous usage telemetry is switched off by :mod:`leakattack.integrations`
(``FLWR_TELEMETRY_ENABLED=0``, before flwr is imported) unless the environment
already sets it.  Needs ``pip install "leakattack[flower]"``.
"""

from __future__ import annotations

import json
import math
import numbers
import re
from logging import WARNING
from pathlib import Path
from typing import Iterable

import numpy as np
import torch
from flwr.client import NumPyClient
from flwr.common import FitIns, FitRes, log, ndarrays_to_parameters, parameters_to_ndarrays
from flwr.server.strategy import FedAvg, Strategy

from targets.protocols import round_seed

from ..constraints import MAX_SEED
from ..errors import UserError
from ..results import write_tensors
from ..results.io import atomic_write_text, writable_out
from ..results.message import (
    MAX_CLASSES,
    MAX_INPUT_NUMBERS,
    MAX_LOCAL_STEPS,
    check_defense,
    is_int,
    is_real,
    write_message,
)
from ..sketch import (
    Sketch,
    check_memory_gb,
    get_sketch,
    is_identity,
    list_sketches,
    sketch_class,
    sketch_dim,
    sketch_from_description,
)

#: fit-configuration key naming the round's sketch: the JSON of ``Sketch.describe()``
SKETCH_KEY = "leakattack_sketch"
#: fit-configuration keys the recorder reads the clients' training settings from
CONFIG_KEYS = ("lr", "local_steps", "batch_size")
#: fit-result metric under which a client may report its own id (else Flower's node id is used)
CLIENT_ID_KEY = "client_id"
#: the file :meth:`RecordingStrategy.save_records` writes into its folder
RECORDS_FILE = "records.json"


# -- arguments -----------------------------------------------------------------------------------

def _integer(v, low: int, high: int | None = None) -> bool:
    return is_int(v, low) and (high is None or int(v) <= high)


def _positive(v) -> bool:
    return is_real(v) and 0 < float(v) < math.inf


def _refuse(where: str, name: str, what: str, v) -> None:
    raise UserError(f"{where}: '{name}' must be {what}, got {v!r}")


def _ids(where: str, name: str, v) -> list:
    """The items of a collection argument (client ids, rounds); a bare string, number or other non-collection is
    refused (a string would be read character by character)."""
    if isinstance(v, (str, bytes, numbers.Number)) or not isinstance(v, Iterable):
        _refuse(where, name, f"a collection such as {['0', '3'] if name == 'clients' else [1, 2]}", v)
    return list(v)


# -- arrays <-> flat vectors ---------------------------------------------------------------------

def model_arrays(model: torch.nn.Module) -> list[np.ndarray]:
    """The model's parameters as numpy arrays, in ``model.parameters()`` order (what a client sends)."""
    return [p.detach().cpu().numpy().copy() for p in model.parameters()]


def load_arrays(model: torch.nn.Module, arrays: list[np.ndarray]) -> None:
    """Copy arrays (``model_arrays`` order) into the model's parameters; a count or shape that differs is a
    UserError."""
    params = list(model.parameters())
    if len(arrays) != len(params):
        raise UserError(f"got {len(arrays)} arrays for a model with {len(params)} parameter tensors")
    with torch.no_grad():
        for i, (p, a) in enumerate(zip(params, arrays)):
            if tuple(np.shape(a)) != tuple(p.shape):
                raise UserError(f"array {i} has shape {tuple(np.shape(a))}, the parameter needs {tuple(p.shape)}")
            p.copy_(torch.as_tensor(np.asarray(a)))


def flatten(arrays: Iterable[np.ndarray]) -> torch.Tensor:
    """One float64 vector of all arrays, each flattened row-major, in order."""
    return torch.cat([torch.as_tensor(np.asarray(a, dtype=np.float64)).reshape(-1) for a in arrays])


def unflatten(vector: torch.Tensor, like: list[np.ndarray]) -> list[np.ndarray]:
    """Split a flat vector into arrays shaped (and typed) like ``like``."""
    out, start = [], 0
    for a in like:
        n = int(np.size(a))
        out.append(vector[start:start + n].reshape(np.shape(a)).numpy().astype(np.asarray(a).dtype))
        start += n
    return out


def sketch_of_config(config: dict) -> Sketch | None:
    """The round's sketch R_t a fit configuration names (:data:`SKETCH_KEY`), or None."""
    if SKETCH_KEY not in config:
        return None
    try:
        return sketch_from_description(json.loads(config[SKETCH_KEY]))
    except (TypeError, ValueError) as err:
        raise UserError(f"fit configuration key '{SKETCH_KEY}' holds no sketch description ({err})") from None


def sketch_update(before: list[np.ndarray], after: list[np.ndarray], sketch: Sketch) -> np.ndarray:
    """Algorithm 1's client message R_t Δ with Δ = u^K - w^t (after - before), in the arrays' dtype."""
    delta = flatten(after) - flatten(before)
    if delta.numel() != sketch.d:
        raise UserError(f"the update has {delta.numel()} numbers, the round's sketch takes d = {sketch.d}")
    return sketch.apply(delta).numpy().astype(np.asarray(before[0]).dtype)


# -- client side ---------------------------------------------------------------------------------

class SketchingClient(NumPyClient):
    """Any ``NumPyClient`` whose fit sends R_t Δ (one array of b numbers) when the server names a sketch.

    Without :data:`SKETCH_KEY` in the fit configuration it sends what the wrapped
    client sends (its new weights), so it also serves a plain FedAvg server.
    """

    def __init__(self, client: NumPyClient):
        self.client = client

    def get_properties(self, config):
        return self.client.get_properties(config)

    def get_parameters(self, config):
        return self.client.get_parameters(config)

    def fit(self, parameters, config):
        before = [np.array(a, copy=True) for a in parameters]
        after, num_examples, metrics = self.client.fit(parameters, config)
        sketch = sketch_of_config(config)
        if sketch is None:
            return after, num_examples, metrics
        return [sketch_update(before, after, sketch)], num_examples, metrics

    def evaluate(self, parameters, config):
        return self.client.evaluate(parameters, config)


# -- server side ---------------------------------------------------------------------------------

class SketchedFedAvg(FedAvg):
    """FedAvg with Song et al.'s Algorithm 1: clients send R_t Δ_c, the server steps w + γ R_tᵀ(mean of sketches).

    ``sketch`` is a kind of :func:`leakattack.sketch.get_sketch`; b is ``b`` or
    ``ratio``·d; R_t comes from ``seed`` and the round (``round_seed``), fresh each
    round; ``global_lr`` is γ.  The other keywords are FedAvg's (clients, fit
    configuration, initial parameters, ...).
    """

    def __init__(self, *, sketch: str = "srht", ratio: float = 0.1, b: int | None = None, seed: int = 0,
                 sketch_params: dict | None = None, global_lr: float = 1.0, **fedavg_options):
        if sketch not in list_sketches():
            raise UserError(f"unknown sketch '{sketch}'; choose one of: {', '.join(list_sketches())}")
        if b is not None and not _integer(b, 1):  # b > d is refused at the first round, where d is known
            _refuse("SketchedFedAvg", "b", "a positive integer (or None: ratio times d)", b)
        if b is None and not (is_real(ratio) and 0 < ratio <= 1):
            raise UserError(f"sketch ratio must lie in (0, 1], got {ratio!r}")
        if not _positive(global_lr):
            raise UserError(f"global learning rate must be a finite positive number, got {global_lr!r}")
        if not _integer(seed, 0, MAX_SEED):
            _refuse("SketchedFedAvg", "seed", "an integer in [0, 2^63 - 1]", seed)
        if sketch_params is not None and not isinstance(sketch_params, dict):
            _refuse("SketchedFedAvg", "sketch_params", "a dict of the sketch's parameters (or None)", sketch_params)
        # the family's names and values here (b where given; a bound on b waits for the first round, where d is
        # known), not in the first round's configure_fit, where a refusal stops the server; memory_gb is
        # get_sketch's own, checked there
        sketch_class(sketch).check_params({k: v for k, v in (sketch_params or {}).items() if k != "memory_gb"}, b)
        check_memory_gb((sketch_params or {}).get("memory_gb"))
        super().__init__(**fedavg_options)
        self.sketch, self.ratio, self.b, self.seed = sketch, ratio, b, int(seed)
        self.sketch_params, self.global_lr = dict(sketch_params or {}), float(global_lr)
        self._rounds: dict[int, tuple[list[np.ndarray], Sketch]] = {}

    def __repr__(self) -> str:
        return f"SketchedFedAvg(sketch={self.sketch}, ratio={self.ratio}, b={self.b}, seed={self.seed})"

    def round_sketch(self, server_round: int, d: int) -> Sketch:
        """R_t for round t and d parameters (the same on every machine: it comes from the seed)."""
        b = d if is_identity(self.sketch) else (self.b or sketch_dim(self.ratio, d))
        return get_sketch(self.sketch, d, b, seed=round_seed(self.seed, server_round), **self.sketch_params)

    def configure_fit(self, server_round, parameters, client_manager):
        weights = parameters_to_ndarrays(parameters)
        sketch = self.round_sketch(server_round, sum(int(np.size(a)) for a in weights))
        self._rounds[server_round] = (weights, sketch)
        named = json.dumps(sketch.describe())
        return [(proxy, FitIns(ins.parameters, {**ins.config, SKETCH_KEY: named}))
                for proxy, ins in super().configure_fit(server_round, parameters, client_manager)]

    def aggregate_fit(self, server_round, results, failures):
        weights, sketch = self._rounds.pop(server_round, (None, None))
        if not results or weights is None or (failures and not self.accept_failures):
            return None, {}
        sketches, counts = [], []
        for proxy, res in results:
            arrays = parameters_to_ndarrays(res.parameters)
            if len(arrays) != 1 or np.size(arrays[0]) != sketch.b:
                log(WARNING, "client %s sent %d arrays, not one sketch of %d numbers: left out of round %d",
                    proxy.cid, len(arrays), sketch.b, server_round)
                continue
            sketches.append(torch.as_tensor(np.asarray(arrays[0], dtype=np.float64)).reshape(-1))
            counts.append(float(res.num_examples))
        if not sketches:
            return None, {}
        share = torch.tensor(counts, dtype=torch.float64)
        share = share / share.sum() if share.sum() > 0 else torch.full_like(share, 1 / len(counts))
        mean = (torch.stack(sketches) * share[:, None]).sum(0)
        w_next = flatten(weights) + self.global_lr * sketch.adjoint(mean)  # Algorithm 1, line 9
        metrics = {}
        if self.fit_metrics_aggregation_fn:
            metrics = self.fit_metrics_aggregation_fn([(res.num_examples, res.metrics) for _, res in results])
        return ndarrays_to_parameters(unflatten(w_next, weights)), metrics


def _input_shape(v) -> bool:
    return (isinstance(v, (list, tuple)) and 1 <= len(v) <= 3 and all(_integer(n, 1) for n in v)
            and math.prod(int(n) for n in v) <= MAX_INPUT_NUMBERS)


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._+-]+", "-", str(text)).strip("-.") or "x"


class RecordingStrategy(Strategy):
    """Any Flower strategy, plus message files of the chosen clients' fit results (see the module docstring).

    ``out``: the folder to write into.  ``clients``: client ids to record (the id
    a client reports as the fit metric :data:`CLIENT_ID_KEY`, else Flower's node
    id), all by default; ``rounds``: rounds to record, all by default.  ``lr``,
    ``local_steps``, ``batch_size``: the clients' training settings where the fit
    configuration does not carry them (keys :data:`CONFIG_KEYS`; the batch size
    defaults to the client's example count).  ``input_shape``, ``num_classes``,
    ``defense``: what the message files say about the model and the clients'
    defense.  ``records`` lists what was written, one dict per file.
    """

    def __init__(self, strategy: Strategy, out, *, clients: Iterable | None = None, rounds: Iterable[int] | None = None,
                 lr: float | None = None, local_steps: int | None = None, batch_size: int | None = None,
                 input_shape=None, num_classes: int | None = None, defense: str | None = None):
        self.strategy = strategy
        # a folder it can fill, refused now where it is a file (or beneath one), not at the first round's files
        self.out = writable_out(out, said=f"RecordingStrategy: out '{out}'")
        # what the message files will hold is refused now, in one sentence, not at the first file a round writes
        where = "RecordingStrategy"
        self.clients = None if clients is None else {str(c) for c in _ids(where, "clients", clients)}
        self.rounds = None if rounds is None else set(_ids(where, "rounds", rounds))
        if self.rounds is not None and not all(_integer(t, 1) for t in self.rounds):
            _refuse(where, "rounds", "round numbers, integers from 1 (Flower's first round is 1)", rounds)
        for name, v, ok, what in (
                ("lr", lr, _positive, "a positive number"),
                ("local_steps", local_steps, lambda v: _integer(v, 1, MAX_LOCAL_STEPS),
                 f"an integer in [1, {MAX_LOCAL_STEPS:,}]"),
                ("batch_size", batch_size, lambda v: _integer(v, 1), "a positive integer"),
                ("num_classes", num_classes, lambda v: _integer(v, 1, MAX_CLASSES),
                 f"an integer in [1, {MAX_CLASSES:,}]"),
                ("input_shape", input_shape, _input_shape,
                 f"a list of 1 to 3 positive integers such as [3, 32, 32], at most {MAX_INPUT_NUMBERS:,} numbers")):
            if v is not None and not ok(v):
                _refuse(where, name, what, v)
        self.defaults = {"lr": lr, "local_steps": local_steps, "batch_size": batch_size}
        if defense is not None:
            check_defense(str(defense), where)
        self.input_shape, self.num_classes, self.defense = input_shape, num_classes, defense
        self.records: list[dict] = []
        self._sent: dict[int, dict[str, tuple[list[np.ndarray], dict, Path]]] = {}
        self._written: dict[int, dict[Path, str]] = {}  # per round: the message files written, and whose node

    def __repr__(self) -> str:
        return f"RecordingStrategy({self.strategy!r}, out='{self.out}')"

    def _recorded(self, server_round: int) -> bool:
        return self.rounds is None or server_round in self.rounds

    # -- delegated, with the round's weights remembered --------------------------------------
    def initialize_parameters(self, client_manager):
        return self.strategy.initialize_parameters(client_manager)

    def configure_fit(self, server_round, parameters, client_manager):
        pairs = self.strategy.configure_fit(server_round, parameters, client_manager)
        if not self._recorded(server_round):
            return pairs
        sent, files = {}, {}
        for proxy, ins in pairs:
            key = id(ins.parameters)  # FedAvg sends one Parameters object to every client: one weights file
            if key not in files:
                weights = parameters_to_ndarrays(ins.parameters)
                name = f"round{server_round:03d}-weights.pt" if not files else \
                    f"round{server_round:03d}-weights-{len(files) + 1}.pt"
                files[key] = (weights, self.out / name)
                write_tensors(self.out / name, flatten(weights))
            weights, path = files[key]
            sent[proxy.cid] = (weights, dict(ins.config), path)
        self._sent[server_round] = sent
        return pairs

    def aggregate_fit(self, server_round, results, failures):
        sent = self._sent.pop(server_round, {})
        for proxy, res in results:
            if proxy.cid in sent:
                self._record(server_round, proxy, res, *sent[proxy.cid])
        aggregated, metrics = self.strategy.aggregate_fit(server_round, results, failures)
        if aggregated is not None and sent:
            weights = parameters_to_ndarrays(aggregated)
            path = self.out / f"round{server_round + 1:03d}-weights.pt"
            write_tensors(path, flatten(weights))
        return aggregated, metrics

    def configure_evaluate(self, server_round, parameters, client_manager):
        return self.strategy.configure_evaluate(server_round, parameters, client_manager)

    def aggregate_evaluate(self, server_round, results, failures):
        return self.strategy.aggregate_evaluate(server_round, results, failures)

    def evaluate(self, server_round, parameters):
        return self.strategy.evaluate(server_round, parameters)

    # -- the message file ------------------------------------------------------------------
    def _record(self, server_round: int, proxy, res: FitRes, before: list[np.ndarray], config: dict,
                weights_path: Path) -> None:
        client = str(res.metrics.get(CLIENT_ID_KEY, proxy.cid))
        if self.clients is not None and client not in self.clients and str(proxy.cid) not in self.clients:
            return
        settings = {k: config.get(k, self.defaults[k]) for k in CONFIG_KEYS}
        if settings["lr"] is None:
            log(WARNING, "round %d, client %s: no learning rate in the fit configuration nor given to "
                "RecordingStrategy: its update was not recorded", server_round, client)
            return
        arrays = parameters_to_ndarrays(res.parameters)
        sketch = sketch_of_config(config)
        if sketch is not None:  # the client sent R_t (u^K - w^t); the message file holds R_t (w^t - u^K)
            if len(arrays) != 1 or np.size(arrays[0]) != sketch.b:
                log(WARNING, "round %d, client %s sent no sketch of %d numbers: not recorded", server_round, client,
                    sketch.b)
                return
            message = -torch.as_tensor(np.asarray(arrays[0])).reshape(-1)
        else:
            if [np.shape(a) for a in arrays] != [np.shape(a) for a in before]:
                log(WARNING, "round %d, client %s sent arrays shaped unlike the weights it got: not recorded",
                    server_round, client)
                return
            message = flatten(before) - flatten(arrays)  # exact in float64 for float32 weights
        batch = int(settings["batch_size"] or res.num_examples or 1)
        if res.num_examples and batch != res.num_examples:  # a client need not train on the batch the server asks
            log(WARNING, "round %d, client %s reports num_examples = %d, and the batch_size of the fit "
                "configuration is %d: its message file says the update came from %d images", server_round, client,
                res.num_examples, batch, batch)
        path = self.out / f"round{server_round:03d}-client{_safe(client)}.pt"
        written = self._written.setdefault(server_round, {})
        first = written.get(path)
        if first is not None:  # another client of this round reported the same id: keep both files
            path = path.with_name(f"{path.stem}-node{_safe(proxy.cid)}.pt")
            log(WARNING, "round %d: the clients of nodes %s and %s both report client id '%s': the second's message "
                "file is %s (give each client its own id)", server_round, first, proxy.cid, client, path.name)
        written[path] = str(proxy.cid)
        if not settings["local_steps"]:  # an attack reads the file's count: one step where a client took more misleads
            log(WARNING, "round %d, client %s: no local_steps in the fit configuration nor given to "
                "RecordingStrategy: its message file says 1 local step", server_round, client)
        write_message(path, message, sketch=sketch, kind="update",
                      batch_size=batch, lr=float(settings["lr"]),
                      local_steps=int(settings["local_steps"] or 1), defense=self.defense,
                      input_shape=self.input_shape, num_classes=self.num_classes, round=server_round, client=client,
                      node=str(proxy.cid), weights=weights_path.name)
        self.records.append({"round": server_round, "client": client, "message": str(path),
                             "weights": str(weights_path)})

    def save_records(self, name: str = RECORDS_FILE) -> Path:
        """Write :attr:`records` as JSON into the folder ``out`` (``records.json``) and return its path.

        The file names it holds are relative to that folder, where the files lie, so the list stays right
        wherever the folder is read from or moved to (:attr:`records` itself holds the paths as written)."""
        path = self.out / name
        rows = [{**r, "message": _relative(r["message"], self.out), "weights": _relative(r["weights"], self.out)}
                for r in self.records]
        self.out.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(rows, indent=2) + "\n")  # an interrupt leaves the earlier list whole
        return path


def _relative(file: str, folder: Path) -> str:
    """``file`` (written under ``folder``) relative to ``folder``."""
    return Path(file).relative_to(folder).as_posix()


__all__ = ["RECORDS_FILE", "SKETCH_KEY", "CONFIG_KEYS", "CLIENT_ID_KEY", "RecordingStrategy", "SketchedFedAvg",
           "SketchingClient", "model_arrays", "load_arrays", "flatten", "unflatten", "sketch_of_config",
           "sketch_update"]
