"""The same seed gives the same R under torch's vectorised and scalar CPU kernels: bit for bit for the kinds NumPy
draws, and to float32's last bits for ``gaussian``, whose entries torch's normal sampler draws
(docs/sketches.md)."""

import json
import os
import subprocess
import sys

import pytest
import torch

from leakattack.sketch import get_sketch

KINDS = ("gaussian", "srht", "ams", "countsketch", "sparse", "uniform")

PROGRAM = """
import json, sys, torch
from leakattack.sketch import get_sketch
out = {}
for kind in %r:
    R = get_sketch(kind, 1027, 300, seed=5).to_dense().double()
    out[kind] = R.reshape(-1).tolist()
json.dump(out, sys.stdout)
""" % (KINDS,)


def _dense_under(capability: str) -> dict:
    env = {**os.environ, "ATEN_CPU_CAPABILITY": capability}
    done = subprocess.run([sys.executable, "-c", PROGRAM], env=env, capture_output=True, text=True, check=True)
    return {k: torch.tensor(v, dtype=torch.float64) for k, v in json.loads(done.stdout).items()}


@pytest.mark.parametrize("kind", KINDS)
def test_scalar_kernels_draw_the_same_sketch(kind, scalar_and_default):
    default, here = scalar_and_default
    if kind == "gaussian":
        assert float((default[kind] - here[kind]).norm() / here[kind].norm()) < 1e-6
    else:
        assert torch.equal(default[kind], here[kind])


@pytest.fixture(scope="module")
def scalar_and_default():
    here = {k: get_sketch(k, 1027, 300, seed=5).to_dense().double().reshape(-1) for k in KINDS}
    return _dense_under("default"), here
