"""What the scripts that take steps on a run's L_R share: the problem's flags, the problem prepared in float64, and
a run's saved reconstruction as a start."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

import torch

from leakattack.config import RunConfig
from leakattack.config.flags import pairs_table, parse_pair
from leakattack.errors import UserError
from leakattack.experiment import prepare
from leakattack.metrics.image import psnr
from leakattack.script import count


def problem_flags(ap: argparse.ArgumentParser, model: str) -> None:
    """--model (default ``model``), --model-param, --image-size, --dataset, --image-index, --sketch, --sketch-ratio
    and --threads."""
    ap.add_argument("--model", default=model)
    ap.add_argument("--model-param", action="append", default=[], type=parse_pair, metavar="NAME=VALUE")
    ap.add_argument("--image-size", type=int, default=None)
    ap.add_argument("--dataset", default="photos")
    ap.add_argument("--image-index", type=int, default=0)
    ap.add_argument("--sketch", default="srht")
    ap.add_argument("--sketch-ratio", type=float, default=0.5)
    ap.add_argument("--threads", type=count, default=2)


@dataclass
class Problem:
    """The message y = obs.y (flattened), ||y||^2, the true input and the labels of a prepared float64 run."""

    obs: object
    labels: torch.Tensor
    y: torch.Tensor
    yy: float
    truth: torch.Tensor
    #: what a run folder's config.json must record for its reconstruction to be a start of this problem
    facts: dict

    def score(self, z: torch.Tensor) -> float:
        """PSNR of z clamped to [0, 1] against the input."""
        return float(psnr(z.clamp(0, 1), self.truth).mean())

    def start(self, folder: Path) -> torch.Tensor:
        """The run's saved reconstruction in float64, of the input's shape; one sentence and exit 2 where it holds
        another number of values."""
        path = finished_run(folder)
        self.check(folder)
        x = torch.load(path, weights_only=True)["images"].to(self.truth.dtype)
        if x.numel() != self.truth.numel():
            raise UserError(f"{path} holds {x.numel()} numbers where this input has {self.truth.numel()}: give the "
                            "run's own --model, --model-param, --image-size, --dataset and --image-index")
        return x.reshape(self.truth.shape)


    def check(self, folder: Path) -> None:
        """Refuse, in one sentence, a run whose config.json records another problem (another model, data, image,
        sketch or seed) than this one; a run without one is taken at its word."""
        try:
            config = json.loads((folder / "config.json").read_text())
            run, derived = config["run"], config["derived"]
            made = {"model": run["model"], "model_params": run.get("model_params") or {},
                    "dataset": derived["dataset"], "image_indices": derived["image_indices"],
                    "in_shape": derived["in_shape"], "d": derived["d"], "b": derived["b"],
                    "sketch": derived["sketch"]["kind"], "sketch_seed": derived["sketch"]["seed"],
                    "model_seed": derived["model_seed"]}
        except (OSError, ValueError, KeyError, TypeError):
            return
        other = {k: v for k, v in made.items() if self.facts.get(k) != v}
        if other:
            said = ", ".join(f"{k} {v!r} (here {self.facts.get(k)!r})" for k, v in other.items())
            raise UserError(f"{folder} attacked another problem than this one: its {said}; give the run's own "
                            "--model, --model-param, --image-size, --dataset, --image-index, --sketch and "
                            "--sketch-ratio")


def finished_run(folder: Path) -> Path:
    """A run folder's reconstruction.pt; one sentence (a :class:`UserError`, which ``script_main`` says) where the
    folder holds none.  Called before the problem is prepared, it refuses a wrong folder at once."""
    path = Path(folder) / "reconstruction.pt"
    if not path.is_file():
        raise UserError(f"{path} does not exist: give the folder of a finished run")
    return path


def prepared(a: argparse.Namespace) -> Problem:
    """The problem of the flags of :func:`problem_flags` in float64 on ``--threads`` threads; a setting the run
    itself refuses gives its one sentence and exit 2."""
    torch.set_num_threads(a.threads)
    params = pairs_table("--model-param", a.model_param)
    p = prepare(RunConfig(model=a.model, model_params=params, image_size=a.image_size, dataset=a.dataset,
                          image_index=a.image_index, sketch=a.sketch, sketch_ratio=a.sketch_ratio,
                          dtype="float64", threads=a.threads))
    y = p.obs.y.detach().reshape(-1)
    derived = p.cfg.derived()
    facts = {"model": a.model, "model_params": params, "dataset": p.dataset.name,
             "image_indices": [a.image_index], "in_shape": list(p.x.shape[1:]), "d": p.obs.d, "b": p.obs.b,
             "sketch": a.sketch, "sketch_seed": derived.sketch_seed, "model_seed": derived.model_seed}
    return Problem(obs=p.obs, labels=p.labels, y=y, yy=float(y @ y), truth=p.x.to(y.dtype), facts=facts)
