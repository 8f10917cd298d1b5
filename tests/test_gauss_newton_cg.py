"""scripts/gauss_newton_cg.py: Gauss-Newton steps without J converge where the attack's own steps do (LeNet)."""

import re
import subprocess
import sys
from pathlib import Path

import torch

from leakattack import get_batch, get_dataset

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "gauss_newton_cg.py"


def test_matrix_free_steps_converge_on_lenet_through_a_sketch(tmp_path):
    """Near the digit, through srht b/d = 0.5 (J of full column rank, docs/attack.md), each step cuts L_R by orders
    of magnitude and the PSNR rises: the CGLS products J v and J^T u are those of the message's Jacobian."""
    x, labels = get_batch(get_dataset("digits"), 0)
    start = (x.double() + 0.02 * torch.randn(x.shape, generator=torch.Generator().manual_seed(0),
                                             dtype=torch.float64)).clamp(0, 1)
    torch.save({"images": start, "labels": labels}, tmp_path / "reconstruction.pt")
    proc = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path), "--model", "lenet", "--dataset", "digits",
                           "--steps", "2", "--cg-steps", "300", "--threads", "1"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    found = re.findall(r"L_R/\|\|y\|\|\^2 (\S+?),? .*?PSNR (\S+) dB", proc.stdout)
    assert len(found) == 3, proc.stdout
    losses, psnrs = [float(v) for v, _ in found], [float(p) for _, p in found]
    assert losses[1] < 1e-2 * losses[0] and losses[2] < 1e-2 * losses[1], proc.stdout
    assert psnrs[2] > psnrs[0] + 20, proc.stdout


def test_a_folder_without_a_reconstruction_is_refused_in_one_sentence(tmp_path):
    proc = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "reconstruction.pt does not exist" in proc.stderr


def test_a_run_of_another_problem_is_refused_in_one_sentence(tmp_path):
    """A run folder records its problem (config.json): a start from another image than the one asked for would
    measure steps towards the wrong truth, so the script names what differs and stops."""
    run = tmp_path / "run"
    made = subprocess.run([sys.executable, "-m", "leakattack.cli", "run", "--model", "lenet", "--dataset", "digits",
                           "--iterations", "2", "--refine", "none", "--threads", "1", "--no-lpips", "--quiet",
                           "--out", str(run)], capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, made.stderr[-2000:]
    proc = subprocess.run([sys.executable, str(SCRIPT), str(run), "--model", "lenet", "--dataset", "digits",
                           "--image-index", "1", "--steps", "1", "--threads", "1"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout
    assert proc.stderr.strip().splitlines() == [
        f"gauss_newton_cg.py: error: {run} attacked another problem than this one: its image_indices [0] (here [1]); "
        "give the run's own --model, --model-param, --image-size, --dataset, --image-index, --sketch and "
        "--sketch-ratio"]
