"""What the table scripts share: one `leakattack run` per folder (kept when it has a metrics.json), a few at once."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Callable

from leakattack.script import count, out_folder, parser


def cli_run(folder: Path, args: list[str]) -> dict:
    """``leakattack run ARGS --no-lpips --quiet --out FOLDER`` unless FOLDER holds a metrics.json; its metrics."""
    if not (folder / "metrics.json").exists():
        subprocess.run([sys.executable, "-m", "leakattack.cli", "run", *args, "--no-lpips", "--quiet",
                        "--out", str(folder)], check=True, stdout=subprocess.DEVNULL)
    return json.loads((folder / "metrics.json").read_text())


def run_jobs(jobs: list, one: Callable, workers: int) -> dict:
    """{job: one(job)} for every job, ``workers`` at a time.  The first job that fails stops the rest: the jobs not
    yet started are cancelled, and its error is raised once the running ones have ended."""
    with ThreadPoolExecutor(workers) as pool:
        futures = [pool.submit(one, job) for job in jobs]
        try:
            for future in as_completed(futures):
                future.result()  # the first failure raises here
        except BaseException:  # a failed job, or an interrupt while they run
            pool.shutdown(cancel_futures=True)
            raise
        return {job: f.result() for job, f in zip(jobs, futures)}


def grid_arguments(doc: str, images: str = "images 0..N-1", figure: bool = False) -> argparse.Namespace:
    """The table scripts' command line: ``--out DIR [--images 3] [--jobs 1]`` (and ``[--figure FILE]``)."""
    ap = parser(doc)
    ap.add_argument("--out", type=out_folder, required=True, help="folder for the attack runs")
    ap.add_argument("--images", type=count, default=3, help=images)
    ap.add_argument("--jobs", type=count, default=1, help="runs at once, one thread each")
    if figure:
        ap.add_argument("--figure", help="a .png of the reconstructions")
    return ap.parse_args()


def run_grid(out: Path, cases: dict, settings: tuple, images: int, args: Callable, workers: int) -> dict:
    """{(case, setting, image): metrics} of ``args(case, setting, image)`` for every case of ``cases`` (name ->
    folder slug), setting and image, each in OUT/<slug>-<setting>-<image>."""
    jobs = [(c, s, i) for c in cases for i in range(images) for s in settings]
    return run_jobs(jobs, lambda job: cli_run(out / f"{cases[job[0]]}-{job[1]}-{job[2]}", args(*job)), workers)


def print_table(columns: list[str], rows) -> None:
    """A markdown table of ``columns`` and ``rows`` (each a list of cells) on stdout."""
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for row in rows:
        print("| " + " | ".join(str(cell) for cell in row) + " |")
