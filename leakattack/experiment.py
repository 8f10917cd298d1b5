"""One attack, end to end: data -> target -> observation -> attack -> metrics -> run folder.

:func:`prepare` builds everything and validates what needs the model or data
(raising :class:`~leakattack.config.ConfigError`) before anything is written;
:func:`execute` runs the attack and scores it; :func:`write_run` writes the run
folder.  :func:`run_attack` chains the three for the CLI and sweeps.
"""

from __future__ import annotations

import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

import targets
from . import __version__, attack, data, figures, labels as label_recovery, metrics
from .config import ConfigError, RunConfig
from .observation import Observation, attacker_simulator, observe
from .results import default_run_dir, write_csv, write_json
from .sketch import make_sketch


@dataclass
class Prepared:
    cfg: RunConfig
    device: torch.device
    dataset: data.ImageSet
    x: torch.Tensor
    labels: torch.Tensor
    model: torch.nn.Module
    sketch: object
    obs: Observation
    simulate: attack.Simulator  #: the attacker's model of the client: x, labels -> message


@dataclass
class Outcome:
    prepared: Prepared
    result: attack.AttackResult
    attack_labels: torch.Tensor | None
    metrics: dict
    trace: list[dict]


def resolve_device(name: str) -> torch.device:
    """``auto`` -> CUDA when present, else CPU."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def prepare(cfg: RunConfig) -> Prepared:
    """Load data, build the victim and the sketch, and produce the observation."""
    torch.set_num_threads(cfg.threads)
    if cfg.protocol:  # a federated protocol's message (issue 5)
        from . import protocol_attack

        return protocol_attack.prepare(cfg)
    cfg.validate()
    device = resolve_device(cfg.device)
    dtype = getattr(torch, cfg.dtype)
    try:
        ds = data.load_dataset(cfg.dataset or "photos", root=cfg.data_root, download=cfg.download)
        x, y_true = data.get_batch(ds, cfg.image_index, cfg.batch_size)
    except data.DataError as err:
        raise ConfigError(str(err)) from None
    model = targets.get_model(cfg.model, num_classes=ds.num_classes, in_shape=ds.in_shape,
                              seed=cfg.model_seed_, init=cfg.weight_init).to(device=device, dtype=dtype)
    d = targets.num_params(model)
    cfg.validate_for(d)
    sketch = make_sketch(cfg.sketch, d, cfg.sketch_b(d), seed=cfg.sketch_seed_, **cfg.sketch_params).to(device)
    x, y_true = x.to(device=device, dtype=dtype), y_true.to(device)
    target = y_true.to(dtype) if cfg.model == "linreg" else y_true
    obs = observe(model, x, target, sketch, defense=cfg.defense, noise_seed=cfg.noise_seed_)
    return Prepared(cfg, device, ds, x, target, model, sketch, obs,
                    attacker_simulator(model, sketch, cfg.defense if cfg.attacker_knows_clip else ""))


def execute(p: Prepared, progress: bool = False, with_lpips: bool = True) -> Outcome:
    """Recover labels, run the attack, score the best iterate."""
    cfg = p.cfg
    t0 = time.perf_counter()
    if cfg.label_mode == "given":
        attack_labels = p.labels
    elif cfg.label_mode == "idlg":
        attack_labels = label_recovery.recover_labels(p.model, p.sketch, p.obs.y, cfg.batch_size)
    else:
        attack_labels = None  # dlg: optimised jointly

    def monitor(step, x):
        x = x.clamp(0, 1)
        if x.shape[0] > 1:
            x = x[metrics.match(x, p.x)]
        return {"psnr": float(metrics.psnr(x, p.x).mean())}

    # restarts from independent dummy starts; the attacker keeps the lowest L_R
    # (it cannot see the truth), as in DLG/breaching
    result, restart_losses = None, []
    for r in range(cfg.restarts):
        x0 = attack.init_dummy(p.x.shape, cfg.dummy_init, cfg.init_seed + 1000 * r, p.device, p.x.dtype)
        run = attack.run(
            p.simulate, p.obs.y, x0, attack_labels,
            num_classes=p.dataset.num_classes, optimizer=cfg.optimizer, iterations=cfg.iterations,
            lr=cfg.lr_, objective=cfg.objective, tv=cfg.tv, box=cfg.box, tol=cfg.tol,
            monitor=monitor, monitor_every=cfg.trace_every, progress=progress,
        )
        restart_losses.append(run.losses[run.best_step])
        if result is None or restart_losses[-1] < result.losses[result.best_step]:
            result = run
    recon = result.x.clamp(0, 1)
    is_classifier = cfg.model != "linreg"
    scores = metrics.score(
        recon, p.x,
        labels_hat=result.labels if is_classifier else None,
        labels=p.labels if is_classifier else None,
        with_lpips=with_lpips, device=p.device,
    )
    wall = time.perf_counter() - t0
    m = {
        "mse": scores["mse"], "psnr": scores["psnr"], "ssim": scores["ssim"],
        "lpips": scores["lpips"], "lpips_note": scores["lpips_note"],
        "label_acc": scores["label_acc"],
        "final_loss": result.losses[result.best_step], "initial_loss": result.losses[0],
        "iterations": result.iterations, "best_step": result.best_step,
        "stop_reason": result.stop_reason, "message": result.message,
        "restarts": cfg.restarts, "restart_losses": restart_losses,
        "wall_s": wall, "attack_s": result.wall_s, "d": p.obs.d, "b": p.obs.b,
        "label_mode": cfg.label_mode,
        "labels_true": p.labels.tolist(),
        "labels_attack": None if result.labels is None else result.labels.tolist(),
        "psnr_each": scores["psnr_each"], "ssim_each": scores["ssim_each"], "match": scores["match"],
    }
    if cfg.defense or cfg.utility:  # defenses (issue 3): epsilon/delta of the message, test accuracy
        from .utility import privacy_metrics

        m.update(privacy_metrics(cfg, p.obs))
    by_step = {e["step"]: e for e in result.extra}
    trace = [{"step": t, "loss": loss, "psnr": by_step.get(t, {}).get("psnr")}
             for t, loss in enumerate(result.losses)]
    return Outcome(p, result, attack_labels, m, trace)


def environment(device: torch.device) -> dict:
    """Versions and machine, recorded in config.json."""
    import scipy
    import torchvision

    return {
        "leakattack": __version__, "python": sys.version.split()[0], "torch": torch.__version__,
        "torchvision": torchvision.__version__, "numpy": np.__version__, "scipy": scipy.__version__,
        "platform": platform.platform(), "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor(),
        "threads": torch.get_num_threads(),
    }


def write_run(out: Outcome, folder: Path) -> Path:
    """Write config.json, metrics.json, trace.csv and the two figures into ``folder``."""
    p, r, m = out.prepared, out.result, out.metrics
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    config = {
        "run": p.cfg.to_dict(),
        "derived": {"d": p.obs.d, "b": p.obs.b, "model_seed": p.cfg.model_seed_,
                    "sketch_seed": p.cfg.sketch_seed_, "init_seed": p.cfg.init_seed, "lr": p.cfg.lr_,
                    "dataset": p.dataset.name, "in_shape": list(p.dataset.in_shape),
                    "num_classes": p.dataset.num_classes, "sketch": p.sketch.describe()},
        "environment": environment(p.device),
    }
    write_json(folder / "config.json", config)
    write_csv(folder / "trace.csv", out.trace, ["step", "loss", "psnr"])
    title = (f"{p.cfg.model} / {p.cfg.sketch} (b/d = {p.obs.b / p.obs.d:.2f}), "
             f"{p.cfg.optimizer}, {r.iterations} it")
    # the batch is shown in ground-truth order (reconstructions matched one-to-one)
    order = torch.as_tensor(m["match"])
    figures.reconstruction_figure(folder / "reconstruction.png", p.x, r.x0[order], r.x.clamp(0, 1)[order],
                                  m["psnr_each"], m["ssim_each"], title)
    figures.convergence_figure(folder / "convergence.png", r.losses, title)
    write_json(folder / "metrics.json", m)  # last: its presence marks a finished run
    return folder


def run_attack(cfg: RunConfig, out: str | Path | None = None, progress: bool = False,
               with_lpips: bool = True) -> tuple[dict, Path]:
    """Prepare, attack, score and write; returns (metrics, run folder)."""
    p = prepare(cfg)
    outcome = execute(p, progress=progress, with_lpips=with_lpips)
    folder = Path(out) if out is not None else default_run_dir(cfg.model, cfg.sketch)
    write_run(outcome, folder)
    return outcome.metrics, folder
