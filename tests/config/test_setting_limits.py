"""Limits and one-sentence refusals of run settings: finite numbers, the largest --restarts and --bins."""

from __future__ import annotations

import pytest

from leakattack import cli
from leakattack.config import ConfigError, RunConfig
from leakattack.config.params import MAX_RESTARTS

RUN = ["run", "--iterations", "2", "--no-lpips", "--quiet", "--threads", "1"]


def refused(args, capsys, tmp_path) -> str:
    """The one error line of ``leakattack run ARGS``, which exits 2 before any attack."""
    assert cli.main(RUN + ["--out", str(tmp_path / "out"), *args]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("note: ")]
    assert len(lines) == 1 and lines[0].startswith("leakattack: error: "), lines
    assert not (tmp_path / "out").exists()
    return lines[0].removeprefix("leakattack: error: ")


@pytest.mark.parametrize("args,sentence", [
    (["--tv", "inf"], "TV weight must be a finite non-negative number, got inf"),
    (["--tol", "inf"], "tolerance must be a finite non-negative number, got inf"),
    (["--tv", "nan"], "TV weight must be a finite non-negative number, got nan"),
    (["--lr", "inf"], "learning rate must be a finite positive number, got inf"),
    (["--prior", "tv:inf"], "the weight of prior 'tv' must be a finite non-negative number, got 'inf'"),
    (["--defense", "clip:C=inf"], "defense 'clip': C must be a finite positive number, got 'inf'"),
    (["--defense", "gaussian:sigma=inf"], "defense 'gaussian': sigma must be a finite non-negative number"),
    (["--defense", "quantize:bits=inf"], "defense 'quantize': bits must be an integer in [1, 32], got 'inf'"),
])
def test_an_infinite_value_is_refused_as_not_finite(args, sentence, capsys, tmp_path):
    assert sentence in refused(args, capsys, tmp_path)


def test_a_negative_value_keeps_its_sentence():
    with pytest.raises(ConfigError, match=r"^TV weight must be non-negative, got -1.0$"):
        RunConfig(tv=-1.0).validate()


def test_restarts_are_bounded(capsys, tmp_path):
    RunConfig(restarts=MAX_RESTARTS).validate()
    assert refused(["--restarts", "100000000"], capsys, tmp_path) == \
        f"restarts must lie in [1, {MAX_RESTARTS}], got 100000000"


def test_imprint_bins_are_bounded(capsys, tmp_path):
    from leakattack.attacks.imprint import MAX_BINS

    RunConfig(attack="imprint", attack_params={"bins": MAX_BINS}).validate()
    assert refused(["--attack", "imprint", "--bins", "100000000"], capsys, tmp_path) == \
        f"imprint bins must lie in [2, {MAX_BINS}], got 100000000"
