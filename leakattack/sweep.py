"""Sweeps: a grid of attacks from a TOML file, resumable, optionally parallel.

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
slow sketch).  Every
finished point appends one JSON line ``{"key", "index", "grid", "params",
"metrics"}`` to ``DIR/results.jsonl`` (one ``write`` + ``fsync``, by the parent
process only) and its reconstruction to ``DIR/points/<key>.pt``.  A point is
identified by the hash of its parameters (those that differ from the defaults:
see :func:`point_key`), so running the same command again
skips finished points; a torn last line (kill -9 mid-write) is dropped first.
At the end ``summary.csv`` (mean and sample std over seeds and images per
setting, in grid order) and the figures are written from the stored results.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import signal
import threading
import time
import tomllib
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

from .config import ConfigError, RunConfig

#: grid keys averaged over in summary.csv (repetitions, not settings)
REPEAT_KEYS = ("seed", "image_index", "model_seed", "sketch_seed", "noise_seed")
#: metrics summarised as mean and std per setting
SUMMARY_METRICS = ("psnr", "ssim", "mse", "label_acc", "utility_acc", "epsilon", "epsilon_paper")
SWEEP_KEYS = {"name": str, "jobs": int, "strength": str, "lpips": bool, "utility": bool}
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


# -- the plan ---------------------------------------------------------------
class Plan:
    """The validated points of a sweep file (nothing run, nothing written)."""

    def __init__(self, settings: dict, base: dict, grid: dict, points: list[dict]):
        self.settings, self.base, self.grid, self.points = settings, base, grid, points

    @property
    def strength(self) -> str | None:
        if "strength" in self.settings:
            return self.settings["strength"]
        return next((k for k in self.grid[0] if k not in REPEAT_KEYS + ("sketch", "model")), None)

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


# -- the results file -------------------------------------------------------
def read_results(path: Path, repair: bool = False) -> list[dict]:
    """The finished points in results.jsonl; a torn or unparsable line is dropped (and, with ``repair``, removed from the file)."""
    if not path.exists():
        return []
    raw = path.read_bytes()
    good, lines = [], []
    for line in raw.split(b"\n"):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(rec, dict) and "key" in rec and "metrics" in rec:
            good.append(rec)
            lines.append(line)
    fixed = b"".join(l + b"\n" for l in lines)
    if repair and fixed != raw:
        from .results import atomic_write_bytes

        atomic_write_bytes(path, fixed)
    return good


def append_line(fd: int, record: dict) -> None:
    """One JSON line, one write(), then fsync: a kill leaves at most one torn last line."""
    from .results import to_jsonable

    data = (json.dumps(to_jsonable(record), sort_keys=False) + "\n").encode()
    os.write(fd, data)
    os.fsync(fd)


# -- running points ---------------------------------------------------------
def run_point(params: dict, with_lpips: bool = False):
    """One attack: (metrics incl. m = C*H*W*batch, reconstruction in truth order, truth) as numpy arrays."""
    import torch

    from . import experiment

    p = experiment.prepare(RunConfig.from_dict(params))
    out = experiment.execute(p, progress=False, with_lpips=with_lpips)
    m = dict(out.metrics)
    m["m"] = int(p.x.numel())
    order = torch.as_tensor(m["match"])
    recon = out.result.x.clamp(0, 1)[order]
    return m, recon.detach().float().cpu().numpy(), p.x.detach().float().cpu().numpy()


def _worker_init() -> None:
    """Workers: one thread, Ctrl-C handled by the parent, exit when the parent dies (kill -9)."""
    import torch

    torch.set_num_threads(1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent = os.getppid()

    def watch():
        while True:
            if os.getppid() != parent:
                os._exit(1)
            time.sleep(1.0)

    threading.Thread(target=watch, daemon=True).start()


def run_sweep(plan: Plan, out: Path, jobs: int = 1, progress: bool = True) -> dict:
    """Run the points not yet in ``out/results.jsonl``, then write summary.csv and the figures."""
    import torch
    from tqdm import tqdm

    from .results import write_json

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "sweep.json", plan.meta())
    results = out / "results.jsonl"
    done = {point_key(r["params"]) for r in read_results(results, repair=True) if "params" in r}
    todo = [(i, pt) for i, pt in enumerate(plan.points) if pt["key"] not in done]
    lpips = bool(plan.settings.get("lpips", False))
    bar = tqdm(total=len(plan.points), initial=len(plan.points) - len(todo), desc="sweep", unit="pt",
               disable=not progress, dynamic_ncols=True)
    fd = os.open(results, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    (out / "points").mkdir(exist_ok=True)

    def finish(i, pt, res):
        m, recon, truth = res
        from .results import atomic_write_bytes
        import io

        buf = io.BytesIO()
        torch.save({"recon": torch.from_numpy(recon), "truth": torch.from_numpy(truth)}, buf)
        atomic_write_bytes(out / "points" / f"{pt['key']}.pt", buf.getvalue())
        append_line(fd, {"key": pt["key"], "index": i, "grid": pt["grid"], "params": pt["params"], "metrics": m})
        bar.set_postfix_str(f"PSNR {m['psnr']:.1f} dB")
        bar.update(1)

    pool = None
    try:
        if jobs <= 1 or len(todo) <= 1:
            for i, pt in todo:
                finish(i, pt, run_point(pt["params"], lpips))
        else:
            import multiprocessing as mp

            pool = ProcessPoolExecutor(max_workers=jobs, mp_context=mp.get_context("spawn"), initializer=_worker_init)
            futures = {pool.submit(run_point, pt["params"], lpips): (i, pt) for i, pt in todo}
            for fut in as_completed(futures):
                i, pt = futures[fut]
                finish(i, pt, fut.result())
            pool.shutdown()
            pool = None
    finally:
        bar.close()
        os.close(fd)
        if pool is not None:  # interrupted: stop our workers, keep what is written
            procs = list(getattr(pool, "_processes", {}).values())
            pool.shutdown(wait=False, cancel_futures=True)
            for proc in procs:
                proc.terminate()
    return finalize(out, plan)


def finalize(out: Path, plan: Plan | None = None) -> dict:
    """summary.csv and the figures from results.jsonl (points of the current plan, in grid order)."""
    from . import figures

    records = load_records(out, plan)
    rows = summarize(records)
    from .results import write_csv

    write_csv(out / "summary.csv", rows)
    paths = figures.sweep_figures(out, records)
    return {"points": len(records), "rows": rows, "figures": paths}


def load_records(out: Path, plan: Plan | None = None) -> list[dict]:
    """Finished points, deduplicated by key, ordered as in the plan (or by their stored index)."""
    stored = read_results(Path(out) / "results.jsonl")
    if plan is None:
        return sorted({r["key"]: r for r in stored}.values(), key=lambda r: r.get("index", 0))
    recs = {point_key(r["params"]) if "params" in r else r["key"]: r for r in stored}
    return [dict(recs[p["key"]], index=i) for i, p in enumerate(plan.points) if p["key"] in recs]


def setting_of(rec: dict) -> tuple:
    """The grid values that define a setting (repetition keys left out)."""
    return tuple((k, json.dumps(v)) for k, v in rec["grid"].items() if k not in REPEAT_KEYS)


def summarize(records: list[dict]) -> list[dict]:
    """One row per setting: its grid values, n, and mean/std of each metric present (sample std, 0 for n = 1)."""
    groups: dict[tuple, list[dict]] = {}
    for r in records:
        groups.setdefault(setting_of(r), []).append(r)
    rows = []
    for setting, recs in groups.items():
        first = recs[0]
        row = {k: first["grid"][k] for k, _ in setting}
        row.update(model=first["params"]["model"], sketch=first["params"]["sketch"],
                   defense=first["metrics"].get("defense", first["params"].get("defense", "")),
                   d=first["metrics"]["d"], b=first["metrics"]["b"], m=first["metrics"].get("m"),
                   b_over_m=(first["metrics"]["b"] / first["metrics"]["m"]) if first["metrics"].get("m") else None,
                   n=len(recs))
        for name in SUMMARY_METRICS:
            vals = [r["metrics"].get(name) for r in recs]
            vals = [float(v) for v in vals if v is not None]
            if not vals:
                continue
            mean = math.fsum(vals) / len(vals)
            std = math.sqrt(math.fsum((v - mean) ** 2 for v in vals) / (len(vals) - 1)) if len(vals) > 1 else 0.0
            row[f"{name}_mean"], row[f"{name}_std"] = mean, std
        rows.append(row)
    return rows


# -- the commands -----------------------------------------------------------
def cmd_sweep(a) -> int:
    plan = load_plan(a.config)
    jobs = a.jobs if a.jobs is not None else plan.settings.get("jobs", 1)
    if jobs < 1:
        raise ConfigError(f"--jobs must be at least 1, got {jobs}")
    out = Path(a.out) if a.out else Path("results/sweeps") / plan.settings.get("name", Path(a.config).stem)
    t0 = time.perf_counter()
    res = run_sweep(plan, out, jobs=jobs, progress=not a.quiet)
    best = max((r.get("psnr_mean", -math.inf) for r in res["rows"]), default=float("nan"))
    print(f"{res['points']}/{len(plan.points)} points | {len(res['rows'])} settings | best mean PSNR {best:.2f} dB | "
          f"{time.perf_counter() - t0:.1f} s | {out / 'summary.csv'} | {len(res['figures'])} figures in {out / 'figures'}")
    return 0


def cmd_figures(a) -> int:
    out = Path(a.dir)
    if not (out / "results.jsonl").exists():
        raise ConfigError(f"no results.jsonl in '{out}': run a sweep into it first")
    plan = None
    res = finalize(out, plan)
    print(f"{res['points']} points | {len(res['figures'])} figures in {out / 'figures'}")
    return 0


def register_cli(sub) -> None:
    p = sub.add_parser("sweep", help="run a grid of attacks from a TOML file (resumable, parallel)",
                       description="Expand the [grid] of a sweep file over [base], run one attack per point, append "
                                   "results.jsonl, write summary.csv and figures. Re-running resumes.")
    p.add_argument("config", help="sweep file (TOML with [sweep], [base], [grid])")
    p.add_argument("--out", default=None, help="output folder (default: results/sweeps/<name>/)")
    p.add_argument("--jobs", type=int, default=None, help="parallel worker processes, one thread each (default: [sweep] jobs or 1)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_sweep)
    p = sub.add_parser("figures", help="draw a sweep's figures from its stored results (never re-runs attacks)")
    p.add_argument("dir", help="sweep output folder holding results.jsonl")
    p.set_defaults(func=cmd_figures)
