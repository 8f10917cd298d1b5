"""scripts/curved_valley.py: J^T J from products at a run's reconstruction, the Gauss-Newton step and chord steps."""

import re
import subprocess
import sys
from pathlib import Path

import torch

from leakattack import get_batch, get_dataset

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "curved_valley.py"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300)


def test_from_near_the_input_the_steps_reach_it(tmp_path):
    """LeNet on a 12-px photo through srht b/d = 0.5 (J of full rank 432), from the input plus noise of 0.01 saved as
    a run saves it: the linear model holds there (||r - J e|| small against ||J e||), the undamped step lands far
    nearer the input and the chord steps go on to it."""
    x, labels = get_batch(get_dataset("photos", image_size=12), 0)
    start = (x.double() + 0.01 * torch.randn(x.shape, generator=torch.Generator().manual_seed(0),
                                             dtype=torch.float64)).clamp(0, 1)
    torch.save({"images": start.float(), "labels": labels}, tmp_path / "reconstruction.pt")
    proc = _run("--model", "lenet", "--image-size", "12", "--run", str(tmp_path), "--chords", "4",
                "--damping", "0", "1e-4", "--threads", "1")
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout
    start_db = float(re.search(r"at the reconstruction \((\S+) dB", out).group(1))
    assert re.search(r"rank 432 of 432", out), out
    found = re.search(r"\|\|J e\|\| = (\S+), \|\|r - J e\|\| = (\S+)", out)
    je, rest = map(float, found.groups())
    assert rest < 0.1 * je, out
    full = float(re.search(r"mu 0: L_R/\|\|y\|\|\^2 \S+, (\S+) dB", out).group(1))
    assert full > start_db + 20, out
    chords = re.search(r"J\^T at the reconstruction \(chord steps\): (.*)", out).group(1)
    ends = [float(db) for db in re.findall(r"(\S+) dB", chords)]
    assert len(ends) == 4 and ends[-1] > full, out
    shares = re.search(r"largest first\): ((?:\S+ ?){10})", out)
    assert shares and abs(sum(map(float, shares.group(1).split())) - 1) < 0.01, out


def test_a_folder_without_a_reconstruction_and_bad_values_are_refused_in_one_sentence(tmp_path):
    proc = _run("--run", str(tmp_path))
    assert proc.returncode == 2 and "reconstruction.pt does not exist" in proc.stderr
    torch.save({"images": torch.zeros(1, 3, 32, 32), "labels": torch.tensor([0])}, tmp_path / "reconstruction.pt")
    proc = _run("--run", str(tmp_path), "--chords", "-1")
    assert proc.returncode == 2 and "must be >= 0" in proc.stderr
    proc = _run("--model", "lenet", "--image-size", "12", "--run", str(tmp_path), "--threads", "1")
    assert proc.returncode == 2 and "holds 3072 numbers where this input has 432" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
