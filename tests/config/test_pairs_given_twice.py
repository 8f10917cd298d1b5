"""A NAME=VALUE flag of ``leakattack run`` given the same name twice is refused in one sentence (exit 2): the model
and sketch parameters, and an attack option that takes NAME=VALUE pairs."""

from __future__ import annotations

import pytest
import torch

from leakattack import cli
from leakattack.attacks import Attack, AttackResult, register_attack
from leakattack.constraints import Param, Table

RUN = ["run", "--iterations", "2", "--no-lpips", "--quiet", "--threads", "1"]


class Weighted(Attack):
    """A closed-form attack with an option of NAME=VALUE pairs."""

    name = "weighted"
    closed_form = True
    options = (Param("mix", {}, Table(), "mix weights", "NAME=VALUE weights of the mix"),)

    def __init__(self, *, mix=None):
        self.mix = mix or {}

    def reconstruct(self, obs, *, monitor=None, monitor_every=10, progress=False):
        x = torch.full((obs.batch_size, *obs.victim.input_shape), 0.5, dtype=obs.y.dtype)
        return AttackResult(x=x, labels=None, x0=x.clone(), losses=[0.0])


def refused(args, capsys, tmp_path) -> str:
    assert cli.main(RUN + ["--out", str(tmp_path / "out"), *args]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("leakattack: error: "), lines
    assert not (tmp_path / "out").exists()
    return lines[0].removeprefix("leakattack: error: ")


@pytest.mark.parametrize("flag", ["--model-param", "--sketch-param"])
def test_a_model_or_sketch_parameter_given_twice_is_refused(flag, capsys, tmp_path):
    assert refused([flag, "s=1", flag, "t=3", flag, "s=2"], capsys, tmp_path) == \
        f"{flag} s is given 2 times (s=1, s=2): give it once"


def test_an_attack_option_of_pairs_given_twice_is_refused_naming_its_flag(fresh_registries, capsys, tmp_path):
    register_attack("weighted", Weighted)
    assert refused(["--attack", "weighted", "--mix", "a=1", "--mix", "a=2", "--mix", "a=3"], capsys, tmp_path) == \
        "--mix a is given 3 times (a=1, a=2, a=3): give it once"
