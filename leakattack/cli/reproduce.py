"""`leakattack reproduce`: regenerate the reference results committed under results/.

Every number the README and docs/ quote from results/ comes from one of these steps, run
from the repository root.  ``--list`` names the steps, ``--dry-run`` prints their
commands.  Sweeps are re-run from scratch (their old results.jsonl and points are
moved aside first, otherwise the sweep would resume and skip every point), and so are the
protocol training runs (training into a folder that holds a run resumes it); what was moved
aside is put back where the step fails or is interrupted, and removed once it succeeds.

The ``reference`` step compares each regenerated run with the committed one by
the quality it reaches (:mod:`leakattack.results.reference`): it prints both,
the machines they were made on, and says "the same to the last bit" only when
that is true.  It fails (exit code 1) only when a metric lies outside the stated
tolerances; another CPU gives another trajectory, not a failure.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

from ..errors import SettingWarning, signals_held
from ..errors import UserError as ConfigError
from ..figures.report import run_metrics
from ..metrics import RunMetrics
from ..results import read_config
from ..results.reference import compare, machine_text

PY = [sys.executable]
CLI = PY + ["-m", "leakattack.cli"]
#: every sweep committed under results/sweeps/ -> the jobs it runs with (ig_recipe one at a time, as its page says)
SWEEPS = {"defense_sweep": 2, "phase_transition": 2, "privacy_utility": 2, "analytic_threshold": 2,
          "attack_families": 2, "batch_recipes": 2, "batch_size": 2, "ig_recipe": 1}
CHECKS = (("linreg", "none"), ("lenet", "srht"))


def steps() -> dict[str, list[tuple[str, list[str]]]]:
    """name -> [(what, argv)]; ``what`` is "run", "sweep:<folder>", "train:<folder>" (training runs under it, trained
    again from scratch) or "check:<model>_<sketch>"."""
    out = {
        "reference": [(f"reference:results/reference/lenet-{s}",
                       CLI + ["run", "--model", "lenet", "--sketch", s, "--quiet",
                              "--out", f"results/reference/lenet-{s}"])
                      for s in ("srht", "none")],
        "sweeps": [(f"sweep:results/sweeps/{n}", CLI + ["sweep", f"examples/{n}.toml", "--jobs", str(jobs), "--quiet",
                                                        "--out", f"results/sweeps/{n}"]) for n, jobs in SWEEPS.items()],
        "theory": [(f"check:{m}_{s}", CLI + ["check", "--model", m, "--sketch", s, "--quiet", "--out",
                                             f"results/runs/check-{m}-{s}"]) for m, s in CHECKS]
        + [("run", CLI + ["check", "--table2", "--samples", "400", "--seed", "0", "--out", "results/theory"]),
           ("run", CLI + ["check", "--embedding", "--samples", "2000", "--seed", "0", "--out", "results/theory"])],
        "protocols": [("train:results/protocols/train", ["sh", "scripts/protocols_train.sh"]),
                      ("run", PY + ["scripts/protocols_summarise.py"]),
                      ("run", PY + ["scripts/protocols_attack_table.py", "1000"])],
    }
    return out


def _committed(folder: Path) -> tuple[RunMetrics, dict | None] | None:
    """(metrics, machine record or None) of a committed reference run, or None where the folder holds no metrics.json
    (nothing to compare with).  A metrics.json or config.json that is damaged or not a run's is one UserError sentence
    naming the file, as ``leakattack collect`` and ``report`` refuse it: a reference that cannot be read is not
    "no committed run"."""
    def there(name: str) -> bool:  # a link to nothing is a damaged reference, not an absent one
        return (folder / name).exists() or (folder / name).is_symlink()

    if not there("metrics.json"):
        return None
    metrics = run_metrics(folder / "metrics.json")
    config = read_config(folder / "config.json") if there("config.json") else {}
    environment = config.get("environment")
    machine = environment.get("machine") if isinstance(environment, dict) else None
    return metrics, machine if isinstance(machine, dict) else None


#: what a sweep step regenerates in its folder, moved aside before it runs (the sweep would resume from them)
SWEEP_OUTPUTS = ("results.jsonl", "summary.csv", "sweep.json", "points", "figures")


class _Kept:
    """What a step regenerates, moved aside into a hidden folder beside it while the step runs: put back where the
    step fails or is interrupted, so that the committed results outlive a step that does not finish, and removed
    once it has succeeded."""

    def __init__(self, folder: Path, names: list[str]):
        self.folder, self.names, self.aside = folder, [], None
        present = [n for n in names if (folder / n).exists() or (folder / n).is_symlink()]
        if not present:
            return
        self.aside = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}.", suffix=".reproduce"))
        with signals_held():
            for n in present:
                os.replace(folder / n, self.aside / n)
                self.names.append(n)

    def restore(self) -> None:
        if self.aside is None:
            return
        with signals_held():
            for n in self.names:
                _remove(self.folder / n)  # what the stopped step wrote in its place
                os.replace(self.aside / n, self.folder / n)
            shutil.rmtree(self.aside, ignore_errors=True)
        self.aside = None

    def drop(self) -> None:
        if self.aside is not None:
            shutil.rmtree(self.aside, ignore_errors=True)
            self.aside = None


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


#: seconds a step is given to stop on its own (it keeps what it finished) once this command is interrupted
STOP_WAIT = 60.0


def _call(argv: list[str]) -> int:
    """Run a step and return its exit code.  Interrupted (Ctrl-C reaches the step too; SIGTERM is passed on to it), it
    is waited for while it stops, at most :data:`STOP_WAIT` s, and killed after that or at a second interrupt, so
    that nothing it runs still writes once this command moves the committed results back."""
    proc = subprocess.Popen(argv)
    try:
        return proc.wait()
    except BaseException:
        try:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=STOP_WAIT)
        except BaseException:
            proc.kill()
            proc.wait()
        raise


def _prepare(what: str) -> _Kept | None:
    """Move aside what a step regenerates (a training's runs, a sweep's results); returns what was moved aside."""
    if what.startswith("train:"):  # a training folder resumes or refuses: the runs are trained from scratch
        folder = Path(what.split(":", 1)[1])
        return _Kept(folder, sorted(run.parent.name for run in folder.glob("*/protocol.json")))
    if what.startswith("sweep:"):
        return _Kept(Path(what.split(":", 1)[1]), list(SWEEP_OUTPUTS))
    return None


def _finish(what: str, argv: list[str], before) -> bool:
    """Finish a step (copy a check's files into place, compare a reference); False when a reference disagrees."""
    if what.startswith("reference:"):
        folder = Path(what.split(":", 1)[1])
        now = _committed(folder)
        if before is None or now is None:
            print(f"[reference] {folder.name}: no committed run to compare with")
            return True
        result = compare(folder.name, before[0], now[0])
        print(f"[reference] {folder.name}: committed on {machine_text(before[1])}; now on {machine_text(now[1])}")
        for line in result.lines:
            print(f"[reference]   {line}")
        return result.agrees
    if what.startswith("check:"):  # results/theory/check_<model>_<sketch>{.json,_*.png}
        tag, src = what.split(":", 1)[1], Path(argv[-1])
        dst = Path("results/theory")
        dst.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src / "check.json", dst / f"check_{tag}.json")
        for png in ("noncritical_hist.png", "convergence.png"):
            shutil.copyfile(src / png, dst / f"check_{tag}_{png}")
    return True


def _stopped_text(name: str, what: str, kept: _Kept | None) -> str:
    """What an interrupted step leaves: the step's own last lines may say that it kept what it finished and how to
    resume it, which is not so here (the committed results go back, or a reference run is not written)."""
    if kept is not None and kept.names:
        left = f"; what it had written is not kept, and the committed results are back in '{kept.folder}'"
    elif what.startswith("reference:"):
        left = f"; the committed run in '{what.split(':', 1)[1]}' is as it was"
    else:
        left = ""
    return (f"leakattack: reproduce stopped step '{name}'{left} (`leakattack reproduce {name}` runs it again from the "
            "start)")


def cmd_reproduce(a) -> int:
    table = steps()
    names = a.names or list(table)
    for n in names:
        if n not in table:
            raise ConfigError(f"unknown reproduce step '{n}'; choose one of: {', '.join(table)}")
    if len(set(names)) < len(names):  # a second pass would compare with the first's output as if it were committed
        twice = sorted({n for n in names if names.count(n) > 1})
        warnings.warn(f"step {', '.join(twice)} named more than once runs once", SettingWarning, stacklevel=2)
        names = list(dict.fromkeys(names))
    if a.list:  # the steps named, or all
        for name in names:
            print(f"{name}: {len(table[name])} command(s)")
        return 0
    if not a.dry_run and (not Path("examples").is_dir() or not Path("results").is_dir()):  # printing needs neither
        raise ConfigError("run `leakattack reproduce` from the repository root (it needs examples/ and results/)")
    # every committed reference is read (and a damaged one refused) before any step rewrites one
    committed = {} if a.dry_run else {w: _committed(Path(w.split(":", 1)[1])) for n in names for w, _ in table[n]
                                      if w.startswith("reference:")}
    failed = False
    for n in names:
        for what, argv in table[n]:
            print(f"[{n}] {' '.join(argv)}", flush=True)
            if a.dry_run:
                continue
            before, kept = committed.get(what), _prepare(what)
            t0 = time.perf_counter()
            try:
                rc = _call(argv)
            except BaseException:  # Ctrl-C or SIGTERM: the step has stopped; the committed results go back in place
                if kept is not None:
                    kept.restore()
                print(_stopped_text(n, what, kept), file=sys.stderr)
                raise
            if rc != 0:
                back = ""
                if kept is not None and kept.names:
                    kept.restore()
                    back = f"; the results it was regenerating are back in '{kept.folder}'"
                print(f"leakattack: error: step '{n}' failed (exit code {rc}): {' '.join(argv)}{back}", file=sys.stderr)
                return 2 if rc == 2 else 1  # a step that refused its input (exit code 2) is bad input here too
            if kept is not None:
                kept.drop()
            agrees = _finish(what, argv, before)
            print(f"[{n}] done in {time.perf_counter() - t0:.0f} s", flush=True)
            if not agrees:
                print(f"leakattack: error: the regenerated {Path(what.split(':', 1)[1]).name} lies outside the "
                      "tolerances of the committed reference (see the lines above)", file=sys.stderr)
                failed = True
    return 1 if failed else 0
