"""scripts/batch_figure.py: each reconstruction is matched to the photos before it is drawn and scored."""

import subprocess
import sys
from pathlib import Path

import torch

from leakattack import get_batch, get_dataset
from leakattack.metrics.image import psnr

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "batch_figure.py"


def test_a_permuted_batch_is_matched_back_and_scored_per_photo(tmp_path):
    truth = get_batch(get_dataset("photos"), 2, 3)[0].float()
    noisy = (truth + 0.05 * torch.randn(truth.shape, generator=torch.Generator().manual_seed(0))).clamp(0, 1)
    torch.save({"images": truth[[2, 0, 1]], "labels": torch.tensor([4, 2, 3])}, tmp_path / "run.pt")  # a run folder's
    torch.save(noisy[[1, 2, 0]], tmp_path / "plain.pt")  # breaching_ig.py --save: a bare tensor
    out = tmp_path / "fig.png"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--image-index", "2", "--batch-size", "3", "--out", str(out),
                           f"permuted={tmp_path / 'run.pt'}", f"noisy={tmp_path / 'plain.pt'}"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines[0].startswith("permuted: ") and lines[0].count("200.00") == 4  # three photos and their mean
    expected = psnr(noisy, truth).tolist()
    printed = [float(v) for v in lines[1].split(": ", 1)[1].split(" dB")[0].split(", ")]
    assert printed == [round(v, 2) for v in expected]
    assert out.stat().st_size > 1000 and out.read_bytes()[:4] == b"\x89PNG"
