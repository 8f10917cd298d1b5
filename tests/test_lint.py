"""ruff and mypy as configured in pyproject.toml: a style or type problem fails the suite with the tool's report."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(tool: str, *args: str, timeout: float) -> subprocess.CompletedProcess:
    """``python -m tool args`` from the repository root (the paths and rules come from pyproject.toml)."""
    if importlib.util.find_spec(tool) is None:
        pytest.skip(f"{tool} is not installed (pip install -e '.[test]')")
    return subprocess.run([sys.executable, "-m", tool, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def test_ruff_reports_nothing():
    """pyflakes, pycodestyle, import order and 120 columns over the package, tests, benchmarks, scripts, examples."""
    proc = _run("ruff", "check", "--quiet", "--output-format", "concise", timeout=300)
    if proc.returncode != 0:
        pytest.fail(f"ruff check found problems (`ruff check --fix` sorts imports):\n{proc.stdout}{proc.stderr}",
                    pytrace=False)


@pytest.mark.slow
def test_mypy_reports_nothing():
    """leakattack, targets and defenses type-check (a cold run reads torch's annotations: about a minute)."""
    proc = _run("mypy", timeout=600)
    if proc.returncode != 0:
        pytest.fail(f"mypy found problems:\n{proc.stdout}{proc.stderr}", pytrace=False)
