"""The plan of a sweep: a TOML file expanded into validated points (nothing run, nothing written).

A sweep file has three tables::

    [sweep]                      # optional settings of the sweep itself
    name = "defense_sweep"
    jobs = 2                     # default of --jobs
    strength = "sigma"           # the grid key drawn as "defense strength"
    lpips = false                # LPIPS per point (off: keeps sweeps light)

    [base]                       # any RunConfig field; strings may hold {placeholders}
    model = "lenet"
    defense = "gaussian:sigma={sigma}"

    [grid]                       # key -> list of values: a RunConfig field or a placeholder
    sigma = [0, 1e-4, 1e-3]
    image_index = [0, 1, 2]

The points are the Cartesian product of the grid in the order written; several
``[[grid]]`` tables give the union of their products (e.g. fewer points for a
slow sketch).  A point is identified by the hash of its parameters (those that
differ from the defaults: see :func:`point_key`).
"""

from __future__ import annotations

import hashlib
import json
import re
import tomllib
from pathlib import Path

from ..config import ConfigError, RunConfig
from ..results import default_strength

SWEEP_KEYS = {"name": str, "jobs": int, "strength": str, "lpips": bool, "utility": bool}
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


class Plan:
    """The validated points of a sweep file (nothing run, nothing written)."""

    def __init__(self, settings: dict, base: dict, grid: dict, points: list[dict]):
        self.settings, self.base, self.grid, self.points = settings, base, grid, points

    @property
    def strength(self) -> str | None:
        if "strength" in self.settings:
            return self.settings["strength"]
        return default_strength(self.grid[0])

    def meta(self) -> dict:
        return {"settings": self.settings, "base": self.base, "grid": self.grid, "strength": self.strength,
                "points": len(self.points)}


def point_key(params: dict) -> str:
    """12 hex digits of the SHA-1 of the point's parameters that differ from RunConfig's defaults (sorted JSON).

    Leaving the defaults out keeps old results valid when a new run parameter is
    added with a default; a changed default changes the key (the point means
    something else now) and the point is run again.
    """
    defaults = RunConfig().to_dict()
    own = {k: v for k, v in params.items() if k not in defaults or defaults[k] != v}
    return hashlib.sha1(json.dumps(own, sort_keys=True, default=str).encode()).hexdigest()[:12]


def load_plan(path: str | Path) -> Plan:
    """Read and validate a sweep file; every problem is a ConfigError naming the key and value."""
    try:
        with open(path, "rb") as fh:
            doc = tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"sweep file '{path}' does not exist") from None
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"sweep file '{path}' is not valid TOML: {err}") from None
    for table in doc:
        if table not in ("sweep", "base", "grid"):
            raise ConfigError(f"unknown table or key '{table}' in sweep file (value {doc[table]!r}); use [sweep], [base], [grid]")
    settings, base, grid = doc.get("sweep", {}), doc.get("base", {}), doc.get("grid", {})
    grids = grid if isinstance(grid, list) else [grid]  # [[grid]] tables: the union of their products
    for k, v in settings.items():
        if k not in SWEEP_KEYS:
            raise ConfigError(f"unknown [sweep] key '{k}' (value {v!r}); allowed: {', '.join(SWEEP_KEYS)}")
        if not isinstance(v, SWEEP_KEYS[k]) or (k == "jobs" and (isinstance(v, bool) or v < 1)):
            raise ConfigError(f"[sweep] {k} = {v!r} must be a {'positive integer' if k == 'jobs' else SWEEP_KEYS[k].__name__}")
    fields = set(RunConfig.__dataclass_fields__)
    for k, v in base.items():
        if k not in fields:
            raise ConfigError(f"unknown [base] key '{k}' (value {v!r}): not a run parameter")
    holders = {h for v in base.values() if isinstance(v, str) for h in _PLACEHOLDER.findall(v)}
    for g in grids:
        if not isinstance(g, dict):
            raise ConfigError(f"[grid] must be a table of lists, got {g!r}")
        for k, v in g.items():
            if k not in fields and k not in holders:
                raise ConfigError(f"unknown [grid] key '{k}' (value {v!r}): neither a run parameter nor a {{placeholder}} in [base]")
            if not isinstance(v, list) or not v:
                raise ConfigError(f"[grid] {k} = {v!r} must be a non-empty list")
        for h in sorted(holders - set(g)):
            raise ConfigError(f"placeholder '{{{h}}}' in [base] has no [grid] entry")
    if "strength" in settings and not any(settings["strength"] in g for g in grids):
        raise ConfigError(f"[sweep] strength = {settings['strength']!r} is not a [grid] key")
    if settings.get("utility"):
        base = {**base, "utility": True}
    points = []
    for combo in [c for g in grids for c in _product(g)]:
        values = {k: v for k, v in base.items()}
        for k, v in values.items():
            if isinstance(v, str) and _PLACEHOLDER.search(v):
                values[k] = _PLACEHOLDER.sub(lambda m: _text(combo[m.group(1)]), v)
        values.update({k: v for k, v in combo.items() if k in fields})
        try:
            cfg = RunConfig.from_dict(values).validate()
        except TypeError as err:
            raise ConfigError(f"bad run parameter in sweep point {combo}: {err}") from None
        except ConfigError as err:
            raise ConfigError(f"{err} (sweep point {_text(combo)})") from None
        params = cfg.to_dict()
        key = point_key(params)
        if key not in {p["key"] for p in points}:
            points.append({"key": key, "grid": combo, "params": params})
    return Plan(settings, base, grids, points)


def _text(v) -> str:
    return repr(v) if isinstance(v, float) and v != 0 and (abs(v) < 1e-3 or abs(v) >= 1e4) else str(v)


def _product(grid: dict) -> list[dict]:
    combos = [{}]
    for k, values in grid.items():
        combos = [{**c, k: v} for c in combos for v in values]
    return combos
