"""Image identifiability of finished run folders, those written before runs recorded it included.

For each run folder (``metrics.json``, ``config.json``, ``reconstruction.pt``) of a batch drawn from a data set, the
script reads the data set again, takes the true images at the run's ``image_indices`` and prints, for the
reconstruction, its start (drawn again from the run's ``--dummy-init`` and init seed; runs of one start only) and
the data set's mean image, the rank of each truth among the set's images by pixel distance
(:func:`leakattack.metrics.identification`) and the share of rank 1 (IIP, Yin et al. 2021), and the same by the
victim's own features (:func:`leakattack.metrics.feature_identification`; the victim built again from the run's
config.json, ``--weights`` read from the path it records, relative to the working directory):

    python scripts/identify_runs.py RUN [RUN ...]

A line per run: folder, PSNR and verdict (from metrics.json), the truths' ranks among N, IIP of the reconstruction,
of the start and of the mean image, then the same by features.  A folder the script cannot read gets one sentence
and exit status 2 at the end.
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import torch

from leakattack.attacks.gradient_matching import init_dummy
from leakattack.config import RunConfig
from leakattack.data import get_dataset
from leakattack.errors import UserError
from leakattack.experiment import prepare
from leakattack.metrics import feature_identification, identification, in_range, match, mean_image
from leakattack.script import parser, script_main


def identified(folder: Path) -> str:
    """The line of one run folder; raises ValueError with a sentence where it cannot be read."""
    try:
        config = json.loads((folder / "config.json").read_text())
        m = json.loads((folder / "metrics.json").read_text())
        saved = torch.load(folder / "reconstruction.pt", weights_only=True)
    except (OSError, ValueError, RuntimeError) as err:
        raise ValueError(f"{folder}: not a finished run folder ({err})") from None
    run, derived = config.get("run", {}), config.get("derived", {})
    positions = derived.get("image_indices")
    if not positions:
        raise ValueError(f"{folder}: the run's batch was not drawn from a data set (a protocol's or a file's message)")
    shape = derived.get("in_shape") or []
    name = derived.get("dataset") or run.get("dataset")
    sized = name in ("photos", "imagefolder") and shape
    dataset = get_dataset(name, root=run.get("data_root"), image_size=shape[-1] if sized else None)
    truth, _ = dataset.rows(torch.as_tensor(positions))
    truth = truth.to(torch.float64)
    recon = in_range(saved["images"].to(truth))[torch.as_tensor(m["match"])]
    start = None
    if int(run.get("restarts", 1)) == 1 and "init_seed" in derived:
        x0 = in_range(init_dummy(tuple(truth.shape), run.get("dummy_init", "gaussian"), int(derived["init_seed"]),
                                 dtype=truth.dtype))
        start = x0[match(x0, truth)]  # matched to the truths as the run matches its baselines
    mean, _ = mean_image(dataset, truth)
    found = identification(recon, {"start": start, "mean": mean}, truth, dataset, positions)
    if not found:
        raise ValueError(f"{folder}: data set {name} does not hold the run's true images at its image_indices")
    try:
        with warnings.catch_warnings():  # the run's own setting warnings, said when it ran
            warnings.simplefilter("ignore")
            victim = prepare(RunConfig.from_dict(run)).victim
    except UserError as err:
        raise ValueError(f"{folder}: its victim cannot be built again ({err})") from None
    found.update(feature_identification(victim, recon, {"start": start, "mean": mean}, truth, dataset, positions))
    psnr = m.get("psnr")
    lines = [f"{folder}: PSNR {'n/a' if psnr is None else f'{psnr:.2f} dB'}, {m.get('verdict')}"]
    for suffix, how in (("", "pixels"), ("_features", "features")):
        if f"identified{suffix}_each" not in found:
            lines.append(f"{how}: not measured (no linear head)")
            continue
        share = {k: found.get(f"{k}{suffix}") for k in ("iip", "baseline_start_iip", "baseline_mean_iip")}
        said = ", ".join(f"{k} {'n/a' if v is None else f'{v:.2f}'}" for k, v in share.items())
        lines.append(f"{how}: truths' ranks {found[f'identified{suffix}_each']} among "
                     f"{found[f'identified{suffix}_among']}; {said}")
    return "; ".join(lines)


def main() -> int:
    ap = parser(__doc__)
    ap.add_argument("runs", nargs="+", type=Path, help="run folders")
    a = ap.parse_args()
    failed = False
    for folder in a.runs:
        try:
            print(identified(folder), flush=True)
        except ValueError as err:
            print(err, file=sys.stderr)
            failed = True
    return 2 if failed else 0


if __name__ == "__main__":
    script_main(main)
