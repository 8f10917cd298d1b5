"""The plan of a sweep: a TOML file expanded into validated points (nothing run, nothing written).

A sweep file has three tables::

    [sweep]                      # optional settings of the sweep itself
    name = "defense_sweep"
    jobs = 2                     # default of --jobs
    strength = "sigma"           # the grid key drawn as "defense strength"
    lpips = false                # LPIPS per point (off: keeps sweeps light)

    [base]                       # any RunConfig field; strings, and the strings of lists, may hold {placeholders}
    model = "lenet"
    defense = "gaussian:sigma={sigma}"

    [grid]                       # key -> list of values: a RunConfig field or a placeholder
    sigma = [0, 1e-4, 1e-3]
    image_index = [0, 1, 2]

The points are the Cartesian product of the grid in the order written; several
``[[grid]]`` tables give the union of their products (e.g. fewer points for a
slow sketch).  A point is identified by the hash of its effective parameters
(those that differ from the defaults, after :func:`effective_params`: see
:func:`point_key`); grid points with the same effective parameters run once.

Every point is checked before anything runs: its values (finite numbers,
declared constraints), and everything a run checks before it attacks (data
present, images in range, b within [1, d], the attack's refusal of what it
observes): :func:`check_runnable` prepares each distinct case once without
attacking and checks every point's own attack against it.
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import hashlib
import json
import math
import re
import sys
import unicodedata
import warnings
from collections.abc import Iterator
from dataclasses import replace
from itertools import product as _iproduct
from pathlib import Path
from typing import Any

import torch

from defenses import build as build_defense
from targets.protocols import SPEC_DEFAULTS

from .. import experiment, metrics
from ..cases import check_case_options
from ..config import RUN_PARAMS, ConfigError, RunConfig, attack_option_names, check_protocol_spec
from ..constraints import duration_seconds
from ..data import get_batch
from ..errors import SettingWarning, UserError
from ..progress import progress_bar
from ..results import default_strength
from ..results.store import COMPUTED_COLUMNS
from ..sketch import is_identity, list_sketches

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser, as the tomli package
    import tomli as tomllib

SWEEP_KEYS = {"name": str, "jobs": int, "strength": str, "lpips": bool, "utility": bool}
#: the largest grid planned; a bigger one is refused before it is expanded
MAX_POINTS = 100_000
#: the run parameters that only the attack's optimisation reads once the case is built (data, victim, channel,
#: observation): points that differ in nothing else share one prepared case in :func:`check_runnable`, which checks
#: each point's own attack against it
ATTACK_ONLY_KEYS = frozenset({"optimizer", "iterations", "lr", "objective", "schedule", "signed", "tv", "surrogate",
                              "priors", "box", "tol", "stall_window", "dummy_init", "restarts", "prune_restarts",
                              "refine", "trace_every", "threads"})
#: which images of a data set, and which random draws (weights, R, noise): for a data set's batch they change the
#: values observed, never a shape, so never what a check answers; each point's images are checked on their own.
#: (A protocol's seed decides which clients a round samples: there they are kept.)
DRAW_KEYS = frozenset({"image_index", "seed", "model_seed", "sketch_seed", "noise_seed"})
#: seconds of checking before its progress bar is drawn
CHECK_BAR_DELAY_S = 3.0
_PLACEHOLDER = re.compile(r"\{([^\W\d]\w*)\}")  # a name as Python's: letters (any script), digits, _


class Plan:
    """The validated points of a sweep file (nothing run, nothing written).

    ``duplicates`` counts the grid points left out because an earlier point has
    the same effective parameters; ``warned`` holds the texts of the run warnings
    that reading the plan printed, which its points' runs do not print again.
    """

    def __init__(self, settings: dict, base: dict, grid: list[dict], points: list[dict], duplicates: int = 0,
                 warned: frozenset[str] = frozenset()):
        self.settings, self.base, self.grid, self.points = settings, base, grid, points
        self.duplicates, self.warned = duplicates, warned

    @property
    def strength(self) -> str | None:
        if "strength" in self.settings:
            return self.settings["strength"]
        return default_strength(self.grid[0])

    def meta(self) -> dict:
        meta = {"settings": self.settings, "base": self.base, "grid": self.grid, "strength": self.strength,
                "points": len(self.points), "keys": [p["key"] for p in self.points],
                "grids": [p["grid"] for p in self.points]}
        if self.duplicates:
            meta["duplicates"] = self.duplicates
        return meta


@functools.lru_cache(maxsize=1)
def _defaults() -> dict:
    return RunConfig().resolved().to_dict()


def effective_params(params: dict) -> dict:
    """The parameters as the attack sees them: an identity sketch sends b = d whatever sketch_ratio and
    sketch_dim say, so for it they take their defaults (one point, not one per ratio); a time limit is its number
    of seconds (``"1m"``, ``"60s"``, ``60`` and ``60.0`` are one point)."""
    seconds = duration_seconds(params.get("time_limit"))
    if seconds is not None:
        params = {**params, "time_limit": seconds}
    kind = params.get("sketch")
    if isinstance(kind, str) and kind in list_sketches() and is_identity(kind):
        defaults = _defaults()
        return {**params, "sketch_ratio": defaults["sketch_ratio"], "sketch_dim": defaults["sketch_dim"]}
    return params


def point_key(params: dict) -> str:
    """12 hex digits of the SHA-1 of the point's effective parameters that differ from RunConfig's defaults (sorted
    JSON).

    Leaving the defaults out keeps old results valid when a new run parameter is
    added with a default; a changed default changes the key (the point means
    something else now) and the point is run again.
    """
    defaults = _defaults()
    own = {k: v for k, v in effective_params(params).items() if k not in defaults or defaults[k] != v}
    return hashlib.sha1(json.dumps(own, sort_keys=True, default=str).encode()).hexdigest()[:12]


def _same_run(params: dict, lr: float) -> str:
    """What tells two points' runs apart: their parameters with every integer written as the float it equals, so
    that ``lr = 1`` and ``lr = 1.0`` are one point (a parameter that must be an integer refuses a float before), and
    ``-0.0`` as ``0.0``; the defense as the run records it (``"gaussian:sigma=1e-3"`` and
    ``"gaussian:sigma=0.001@before_sketch"`` are one point, as are ``""`` and ``"none"``); with a ``sketch_dim``,
    which sets b, no ``sketch_ratio``; the step size the run takes, ``lr`` (unset and the optimiser's default,
    ``lr = 1.0`` for L-BFGS, are one point); and for a protocol, whose client's round draws its own images, no image
    index, batch draw or image size."""
    params = dict(params)
    with contextlib.suppress(Exception):  # a defense the point's validation refused never gets here
        params["defense"] = build_defense(params.get("defense")).spec
    params["lr"] = lr
    if params.get("protocol"):
        defaults = _defaults()
        params.update({k: defaults[k] for k in ("image_index", "batch_draw", "image_size")})
    if params.get("sketch_dim") is not None:
        params["sketch_ratio"] = None

    def floats(v):
        if isinstance(v, dict):
            return {k: floats(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [floats(x) for x in v]
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return v
        return float(v) + 0.0  # -0.0 + 0.0 is 0.0: the two zeros are one point (their runs are the same)
    return json.dumps(floats(params), sort_keys=True, default=str)


#: the longest sweep name in bytes: its default folder, sweep-NAME-YYYYmmdd-HHMMSS (and a -N that keeps it unique),
#: is written beside itself under a temporary name, within the 255 bytes most file systems allow a name
SWEEP_NAME_MAX = 160


def check_name(name: str) -> str:
    """A sweep's name, part of its default folder's name; a path (``..``, ``/``, absolute) is refused."""
    if (not name.strip() or name in (".", "..") or any(c in name for c in "/\\\0")
            or Path(name).is_absolute()):
        raise ConfigError(f"sweep name {name!r} must be a plain folder name, not a path: use --out to choose "
                          "where the sweep is written")
    return name


def check_name_length(name: str) -> str:
    """A sweep name its default folder can hold: at most :data:`SWEEP_NAME_MAX` bytes, and no control character,
    which would break the one-line summary that ends with the folder (ConfigError otherwise)."""
    control = next((c for c in name if unicodedata.category(c) == "Cc"), None)
    if control is not None:
        raise ConfigError(f"sweep name {name!r} holds the control character {control!r}, which would break the "
                          "one-line summary that names its default folder: give a name without control characters, "
                          "or choose the folder with --out")
    size = len(name.encode("utf-8", "surrogateescape"))
    if size > SWEEP_NAME_MAX:
        raise ConfigError(f"sweep name '{name[:24]}...' has {size} bytes, and its default folder "
                          f"(sweep-NAME-date-time) takes a name of at most {SWEEP_NAME_MAX}: give a shorter [sweep] "
                          "name, or choose the folder with --out")
    return name


def _nonfinite(value):
    """The first float in ``value`` (nested lists and tables) that is not finite, else None."""
    if isinstance(value, float) and not math.isfinite(value):
        return value
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    return next((bad for bad in map(_nonfinite, items) if bad is not None), None)


def _count(grid: dict) -> int:
    return math.prod(len(v) for v in grid.values())


def load_plan(path: str | Path, check: bool = True, progress: bool = False) -> Plan:
    """Read and validate a sweep file; every problem is a ConfigError naming the key and value.

    With ``check`` (the default) every point is also checked against its built
    case (:func:`check_runnable`; ``progress``: a bar while it takes more than
    a few seconds), so nothing fails at run time that could fail now.
    """
    try:
        with open(path, "rb") as fh:
            doc = tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"sweep file '{path}' does not exist") from None
    except IsADirectoryError:
        raise ConfigError(f"sweep file '{path}' is a folder: give the TOML file that describes the grid (examples/ "
                          "holds some)") from None
    except UnicodeDecodeError as err:
        raise ConfigError(f"sweep file '{path}' is not UTF-8 text (byte {err.object[err.start]:#04x} at offset "
                          f"{err.start}), which TOML requires") from None
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"sweep file '{path}' is not valid TOML: {err}") from None
    except OSError as err:
        raise ConfigError(f"sweep file '{path}' cannot be read ({err.strerror or type(err).__name__})") from None
    for table in doc:
        if table not in ("sweep", "base", "grid"):
            raise ConfigError(f"unknown table or key '{table}' in sweep file (value {doc[table]!r}); "
                              "use [sweep], [base], [grid]")
    for table in ("sweep", "base"):
        if not isinstance(doc.get(table, {}), dict):
            raise ConfigError(f"[{table}] must be a table of NAME = VALUE lines, got {table} = {doc[table]!r}")
    settings: dict[str, Any] = doc.get("sweep", {})
    base, grid = doc.get("base", {}), doc.get("grid", {})
    grids = grid if isinstance(grid, list) else [grid]  # [[grid]] tables: the union of their products
    for k, v in settings.items():
        if k not in SWEEP_KEYS:
            raise ConfigError(f"unknown [sweep] key '{k}' (value {v!r}); allowed: {', '.join(SWEEP_KEYS)}")
        if not isinstance(v, SWEEP_KEYS[k]) or (k == "jobs" and (isinstance(v, bool) or not isinstance(v, int)
                                                                 or v < 1)):
            raise ConfigError(f"[sweep] {k} = {v!r} must be a "
                              f"{'positive integer' if k == 'jobs' else SWEEP_KEYS[k].__name__}")
    if "name" in settings:
        check_name(settings["name"])
    fields = set(RunConfig.__dataclass_fields__) | attack_option_names()
    for k, v in base.items():
        if k not in fields:
            raise ConfigError(f"unknown [base] key '{k}' (value {v!r}): not a run parameter{_nearest(k, fields)}")
        if _nonfinite(v) is not None:
            raise ConfigError(f"[base] {k} holds {_nonfinite(v)!r}, which is not a finite number")
    holders = {h for v in base.values() for text in _texts(v) for h in _PLACEHOLDER.findall(text)}
    for g in grids:
        if not isinstance(g, dict):  # grid = [...]: a list of tables ([[grid]]) or a list of values
            raise ConfigError(f"[grid] must be a table of lists (or [[grid]] tables), got grid = {grid!r}")
    if not any(grids):  # no grid would run RunConfig's defaults: a 4000-step attack nobody asked for
        raise ConfigError(f"sweep file '{path}' has no [grid]: name at least one key and its list of values")
    for g in grids:
        if not g:
            raise ConfigError("a [[grid]] table is empty: name at least one key and its list of values")
        for k, v in g.items():
            if k not in fields and k not in holders:
                if any(f"{{{k}}}" in text for v_ in base.values() for text in _texts(v_)):
                    raise ConfigError(f"[grid] key '{k}' is not a placeholder's name, so '{{{k}}}' in [base] is "
                                      "kept as text: name a placeholder with letters, digits and _, not starting "
                                      "with a digit")
                raise ConfigError(f"unknown [grid] key '{k}' (value {v!r}): neither a run parameter nor a "
                                  f"{{placeholder}} in [base]{_unknown_hint(k, fields, base)}")
            if not isinstance(v, list) or not v:
                raise ConfigError(f"[grid] {k} = {v!r} must be a non-empty list")
            if _nonfinite(v) is not None:
                raise ConfigError(f"[grid] {k} holds {_nonfinite(v)!r}, which is not a finite number")
            if k not in fields:  # a placeholder: its values are written into [base]'s strings and summary.csv
                if k in COMPUTED_COLUMNS:
                    raise ConfigError(f"[grid] {k} is a placeholder named like the column '{k}' that summary.csv "
                                      "computes, which would hide its values there: rename the placeholder")
                bad = next((x for x in v if not isinstance(x, (str, int, float))), None)
                if bad is not None:
                    raise ConfigError(f"[grid] {k} holds {bad!r}: a placeholder's values are numbers, strings or "
                                      "booleans, written into [base]'s text")
        for h in sorted(holders - set(g)):
            raise ConfigError(f"placeholder '{{{h}}}' in [base] has no [grid] entry")
    if "strength" in settings and not any(settings["strength"] in g for g in grids):
        raise ConfigError(f"[sweep] strength = {settings['strength']!r} is not a [grid] key")
    total = sum(_count(g) for g in grids)
    if total > MAX_POINTS:
        raise ConfigError(f"the sweep has {total:,} grid points, more than the {MAX_POINTS:,} a sweep may hold: "
                          "split it into smaller sweeps")
    shadowed = [k for k in base if all(k in g for g in grids)]  # [base]'s value reaches no point
    if settings.get("utility"):
        base = {**base, "utility": True}
    warned: set[str] = set()
    with sweep_warnings(warned, hold=True):  # each run warning once, after every point passed its checks
        for k in shadowed:
            warnings.warn(f"[base] {k} = {base[k]!r} changes nothing: every [grid] table sets {k}, and each point "
                          "takes the grid's value", SettingWarning, stacklevel=2)
        points = _points(grids, base, fields, check, progress)
    return Plan(settings, base, grids, points, duplicates=total - len(points), warned=frozenset(warned))


def _nearest(key: str, fields: set[str]) -> str:
    """'; did you mean ...?' naming the run parameter an unknown sweep key most likely meant ('' when none is near):
    a command-line flag's spelling (``sketch-ratio``, ``--prior``) or a near miss (``prior`` for ``priors``); for a
    flag whose sweep key is another word it adds which (``(in a sweep file --labels is label_mode)``)."""
    spelled = key.lstrip("-").replace("-", "_")
    flag = "--" + key.lstrip("-").replace("_", "-")
    if spelled not in fields and flag in _FLAG_KEYS:  # a flag whose sweep key is spelt otherwise (--labels)
        return f"; did you mean '{_FLAG_KEYS[flag].split(' = ')[0]}'? (in a sweep file {flag} is {_FLAG_KEYS[flag]})"
    near = [spelled] if spelled in fields else difflib.get_close_matches(spelled, sorted(fields), n=1, cutoff=0.75)
    return f"; did you mean '{near[0]}'?" if near else ""


def _unknown_hint(key: str, fields, base: dict) -> str:
    """What an unknown [grid] key may have meant: a {placeholder} written inside a [base] table (filled in strings
    and lists only), a protocol's setting (set in ``protocol_spec``), else the nearest run parameter."""
    mark = "{" + key + "}"
    table = next((k for k, v in base.items() if isinstance(v, dict) and mark in json.dumps(v)), None)
    if table is not None:
        return (f" ([base] {table} writes {mark} inside a table, and placeholders are filled in strings and lists "
                f"only: give the tables as [grid] values, {table} = [{{...}}, {{...}}])")
    if key in SPEC_DEFAULTS:
        return (f" ({key} is a protocol's setting: give it in protocol_spec = {{{key} = ...}}, in [base] or as a "
                "[grid] list of such tables)")
    return _nearest(key, fields)


def _texts(value) -> list[str]:
    """The strings of a [base] value that may hold {placeholders}: the value itself, or a list's strings."""
    if isinstance(value, str):
        return [value]
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _filled(value, combo: dict):
    """A [base] value with its {placeholders} written from the grid point ``combo`` (in a list, each string's)."""
    if isinstance(value, list):
        return [_filled(v, combo) for v in value]
    if isinstance(value, str) and _PLACEHOLDER.search(value):
        return _PLACEHOLDER.sub(lambda m: value_text(combo[m.group(1)]), value)
    return value


def _points(grids: list[dict], base: dict, fields: set[str], check: bool, progress: bool) -> list[dict]:
    """The distinct points of the grids, each validated (and, with ``check``, checked by :func:`check_runnable`)."""
    points, cfgs, seen = [], [], set()
    unread: set[str] = set()  # grid keys a protocol's points do not read
    for combo in (c for g in grids for c in _product(g)):
        values = {k: _filled(v, combo) for k, v in base.items()}
        values.update({k: v for k, v in combo.items() if k in fields})
        try:
            cfg = RunConfig.from_dict(values).validate()
        except TypeError as err:
            raise ConfigError(f"bad run parameter in sweep point {combo}: {err}") from None
        except UserError as err:  # a constraint's refusal, or a check of the value's own (a model file not there)
            raise ConfigError(f"{err} ({_where(values, combo, base, str(err))})") from None
        if cfg.message and not cfg.truth:  # a sweep's points are scored, summarised and drawn against their images
            raise ConfigError(f"a sweep scores each point against its images, and message = {cfg.message!r} comes "
                              f"without them: give truth = FILE beside it ({_where(values, combo, base)})")
        params = effective_params(cfg.resolved().to_dict())
        key = point_key(params)
        same = _same_run(params, cfg.derived().lr)  # lr = 1 and lr = 1.0 run the same attack: one point
        if cfg.protocol:
            unread.update(k for k in ("image_index", "batch_draw", "image_size") if k in combo)
        if same not in seen:
            seen.add(same)
            points.append({"key": key, "grid": combo, "params": params})
            cfgs.append(cfg)
    if unread:
        keys = sorted(unread)
        warnings.warn(f"grid key{'s' if len(keys) > 1 else ''} {', '.join(keys)} {'are' if len(keys) > 1 else 'is'} "
                      "not read by a protocol's points: the attacked message holds the images the client's round "
                      "draws from its own shard, so points that differ only there are one run", SettingWarning,
                      stacklevel=2)
    if check:
        check_runnable(points, cfgs, progress=progress, base=base)
    return points


def check_runnable(points: list[dict], cfgs: list | None = None, progress: bool = False,
                   base: dict | None = None) -> None:
    """Refuse, before anything runs, a point that could only fail at run time (ConfigError, one sentence naming
    the point).

    Points that share their case (every parameter but :data:`ATTACK_ONLY_KEYS`
    and, for a data set's batch, :data:`DRAW_KEYS`) are prepared once on the
    CPU (data loaded, model built, gradient observed; no attack and no seed
    search: the point runs its own), then every one of them is checked against
    it: its case options, its images in range, b within [1, d], and its own
    attack's check of the observation (``supports``: a sketch, batch or label
    setting the attack refuses), once per setting.  One prepared case is held
    at a time; ``progress`` draws a bar over the cases once checking has taken
    more than a few seconds (a dense sketch's R is drawn for each case).
    """
    cfgs = cfgs or [RunConfig.from_dict(p["params"]) for p in points]
    groups: dict[str, list[int]] = {}
    for i, pt in enumerate(points):
        groups.setdefault(_case_of(pt["params"]), []).append(i)
    threads = torch.get_num_threads()  # prepare() sets the point's thread count; the coordinator keeps its own
    bar = progress_bar(len(groups), "checking", "case", progress, delay=CHECK_BAR_DELAY_S)
    try:
        for members in groups.values():
            prepared, checked = None, set()
            for i in members:
                pt, cfg = points[i], cfgs[i]
                try:
                    check_case_options(cfg)
                    if prepared is None:
                        prepared = experiment.prepare(replace(cfg, device="cpu", sketch_seed_search=0))
                        if prepared.x is not None:  # the baseline's images, read before a run's attack too
                            metrics.mean_image(prepared.dataset, prepared.x)
                    if not cfg.protocol and not cfg.message:
                        get_batch(prepared.dataset, cfg.image_index, cfg.batch_size, cfg.batch_draw)
                    settings = _case_of(pt["params"], attack=True)
                    if settings not in checked:  # the same settings on other images: the same answer
                        cfg.validate_for(prepared.victim.d)
                        # the point's own attack, as prepare() builds it (a message file or a protocol fixes some
                        # of its settings)
                        experiment.attack_of(replace(cfg, **prepared.case.settings)).check(prepared.obs)
                        checked.add(settings)
                except UserError as err:
                    named = _base_named(str(err), pt["grid"], base or {})
                    where = f"sweep point {value_text(pt['grid'])}" + (f", with [base] {named}" if named else "")
                    raise ConfigError(f"{err} ({where}{_keys_of_flags(str(err))})") from None
            bar.update(1)
    finally:
        bar.close()
        torch.set_num_threads(threads)


def _case_of(params: dict, attack: bool = False) -> str:
    """What a point's prepared case depends on (with ``attack``: what its attack's check depends on too): its
    parameters but the attack's optimisation settings (:data:`ATTACK_ONLY_KEYS`, kept with ``attack``) and, where
    the images are a data set's batch, but its images and random draws (:data:`DRAW_KEYS`)."""
    batch = not params.get("protocol") and not params.get("message")
    left_out = (set() if attack else ATTACK_ONLY_KEYS) | (DRAW_KEYS if batch else set())
    return json.dumps({k: v for k, v in params.items() if k not in left_out}, sort_keys=True, default=str)


def _where(values: dict, combo: dict, base: dict, message: str = "") -> str:
    """Where a refused point is: the run parameter whose declared constraint refuses its value (``[base] KEY``,
    which every point takes, where the value is [base]'s own), and the grid values, with the [base] value the
    refusal names (:func:`_base_named`)."""
    bad = next((p.name for p in RUN_PARAMS if p.name in values and not p.constraint.ok(values[p.name])), None)
    if bad is None and isinstance(values.get("protocol_spec"), dict):  # a table whose values have constraints
        try:
            check_protocol_spec(values["protocol_spec"], partial=True, protocol=str(values.get("protocol") or ""))
        except UserError:
            bad = "protocol_spec"
    if bad is not None and bad not in combo and not (isinstance(base.get(bad), str) and
                                                     _PLACEHOLDER.search(base[bad])):
        return f"[base] {bad}, which every sweep point takes"
    named = _base_named(message, combo, base) if bad is None else None
    return (f"key {bad}, " if bad else "") + f"sweep point {value_text(combo)}" + (
        f", with [base] {named}" if named else "")


def _base_named(message: str, combo: dict, base: dict) -> str | None:
    """The [base] key whose own value (not the grid's, no placeholder) a refusal of a point names (which may hold
    at this point's grid values only: an attack that refuses its sketch): its value as the sweep file
    gives it, or a spec's kind (``nosuch`` of ``nosuch:x=1``) or a file's name, at least three characters long and
    quoted or standing as a word, or for a table (``model_params``) one of its keys or texts; None where none is
    named, or where the refusal names a grid value of the point.
    The model and the data set, which many refusals name as their context, are taken only where no other key is
    named."""
    if any(_names(message, {value_text(v)}, 1) for v in combo.values()):  # a grid value's refusal is the point's
        return None
    context = ("model", "dataset")
    for key in [k for k in base if k not in context] + [k for k in context if k in base]:
        value = base[key]
        if key not in combo and isinstance(value, dict) and not any(  # a table (model_params): a key or text in it
                isinstance(v, str) and _PLACEHOLDER.search(v) for v in value.values()):
            if _names(message, {str(k) for k in value} | {v for v in value.values() if isinstance(v, str)}, 2):
                return key
            continue
        if key in combo or isinstance(value, (bool, dict, list)) or value is None:
            continue
        text = value if isinstance(value, str) else value_text(value)
        if isinstance(value, str) and _PLACEHOLDER.search(value):
            continue
        pieces = {text, text.split(":")[0].split("@")[0], Path(text).name} if isinstance(value, str) else {text}
        if _names(message, pieces, 3):
            return key
    return None


def _names(message: str, pieces: set[str], shortest: int) -> bool:
    """Whether ``message`` holds one of ``pieces`` at least ``shortest`` characters long as a word of its own."""
    return any(len(p) >= shortest and re.search(rf"(?<![\w.]){re.escape(p)}(?![\w])", message) for p in pieces)


#: a run's command-line flag -> the run parameter (sweep key) it sets, for refusals that name flags
_FLAG_KEYS = {p.option: p.name + (" = false" if p.invert else "") for p in RUN_PARAMS if p.option}


def _keys_of_flags(message: str, every: bool = False) -> str:
    """``; in a sweep file --labels is label_mode, ...`` for the run flags a refusal names whose sweep key is not
    the flag's name with underscores (a run's checks speak of flags; ``every``: for every run flag it names), or
    ``""``."""
    named = dict.fromkeys(f for f in re.findall(r"--[a-z][a-z0-9-]*", message) if f in _FLAG_KEYS)
    other = [f"{f} is {_FLAG_KEYS[f]}" for f in named if every or _FLAG_KEYS[f] != f[2:].replace("-", "_")]
    return f"; in a sweep file {', '.join(other)}" if other else ""


#: a number in a warning's text (an integer, a decimal, a power of ten, a percentage)
_NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?%?")


def warning_kind(text: str) -> str:
    """A warning's text with its numbers masked: the points of a sweep that warn alike with other numbers (the
    noise's share of each point's message, 5 % at one and 13 % at another) give one kind, printed once."""
    return _NUMBER.sub("#", text)


@contextlib.contextmanager
def sweep_warnings(shown: set[str], hold: bool = False) -> Iterator[None]:
    """Within the block each run warning (:class:`SettingWarning`) whose kind (:func:`warning_kind`) is not in
    ``shown`` is printed once, naming the sweep key of every run flag it names (``--noise-seed 5 changes nothing ...;
    in a sweep file --noise-seed is noise_seed``), and its kind is added to ``shown``; other warnings pass as usual.

    With ``hold`` the warnings are printed when the block ends, each kind's first text with how many other points
    warned alike with other numbers, and not at all when the block raises (a refused sweep prints its refusal
    alone).
    """
    held: dict[str, list[str]] = {}
    with warnings.catch_warnings():
        show = warnings.showwarning

        def keep(message, category, filename, lineno, file=None, line=None):
            text, kind = str(message), warning_kind(str(message))
            if not issubclass(category, SettingWarning):
                show(message, category, filename, lineno, file, line)
            elif hold:
                texts = held.setdefault(kind, [])
                if text not in texts:
                    texts.append(text)
            elif kind not in shown:
                shown.add(kind)
                show(SettingWarning(text + _keys_of_flags(text, every=True)), category, filename, lineno, file, line)

        warnings.showwarning = keep
        if hold:  # every text reaches keep(), whichever line warned it; the user's filters judge it below
            warnings.simplefilter("always", SettingWarning)
        yield
    for kind, texts in held.items():
        if kind not in shown:
            shown.add(kind)
            more = (f" (and {len(texts) - 1} more such warning{'s' if len(texts) > 2 else ''} with other numbers "
                    "at other points)") if len(texts) > 1 else ""
            warnings.warn(texts[0] + _keys_of_flags(texts[0], every=True) + more, SettingWarning, stacklevel=3)


def value_text(v) -> str:
    """A grid value as a placeholder, a refusal or a listed point writes it."""
    return repr(v) if isinstance(v, float) and v != 0 and (abs(v) < 1e-3 or abs(v) >= 1e4) else str(v)


def _product(grid: dict):
    """The grid's points in the order written (the last key varies fastest), one at a time."""
    keys = list(grid)
    for values in _iproduct(*(grid[k] for k in keys)):
        yield dict(zip(keys, values))
