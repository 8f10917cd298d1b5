"""scripts/gauss_newton_basin.py: J at the input and where Gauss-Newton steps from noise and from a start end."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from leakattack import get_batch, get_dataset

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "gauss_newton_basin.py"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300)


def test_steps_from_near_the_input_reach_it_where_j_has_full_rank(tmp_path):
    """LeNet on a 12-px photo through srht b/d = 0.5: J of full column rank 432, so steps from the input plus small
    noise, and from a start saved as a run saves it, end at the input to round-off."""
    x, labels = get_batch(get_dataset("photos", image_size=12), 0)
    start = (x.double() + 0.02 * torch.randn(x.shape, generator=torch.Generator().manual_seed(0),
                                             dtype=torch.float64)).clamp(0, 1)
    torch.save({"images": start.float(), "labels": labels}, tmp_path / "reconstruction.pt")
    proc = _run("--model", "lenet", "--image-size", "12", "--noise", "0.01", "--run", str(tmp_path),
                "--steps", "6", "--threads", "1")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert re.search(r"J at the input: \d+ x 432, rank 432,", proc.stdout), proc.stdout
    ends = re.findall(r"-> (\S+) dB, L_R/\|\|y\|\|\^2 (\S+), \d+ steps, round-off", proc.stdout)
    assert len(ends) == 2, proc.stdout  # from the noise and from the saved start
    assert all(float(db) >= 150 and float(loss) < 1e-28 for db, loss in ends), proc.stdout
    shares = re.search(r"singular values \(largest first\): ((?:\S+ ?){10})", proc.stdout)
    assert shares and abs(sum(map(float, shares.group(1).split())) - 1) < 0.01, proc.stdout


@pytest.mark.parametrize("args, said", [
    (["--hops", "0.1"], "--hops perturbs a run's reconstruction: give --run DIR"),
    (["--model-param", "patch"], "--model-param: 'patch' must look like NAME=VALUE"),
    (["--noise", "-1"], "noise levels must be >= 0"),
    (["--image-size", "8"], "image size must lie in [11, 1024], got 8"),
])
def test_bad_arguments_are_refused_in_one_sentence_before_anything_runs(args, said):
    proc = _run(*args)
    assert proc.returncode == 2 and said in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_a_folder_without_a_reconstruction_is_refused_in_one_sentence(tmp_path):
    proc = _run("--run", str(tmp_path))
    assert proc.returncode == 2 and "reconstruction.pt does not exist" in proc.stderr


def test_a_reconstruction_of_another_shape_is_refused_in_one_sentence(tmp_path):
    torch.save({"images": torch.zeros(1, 3, 32, 32), "labels": torch.tensor([0])}, tmp_path / "reconstruction.pt")
    proc = _run("--model", "lenet", "--image-size", "12", "--noise", "--run", str(tmp_path), "--threads", "1")
    assert proc.returncode == 2 and "holds 3072 numbers where this input has 432" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
