"""The example sweep files state what they run: point counts, L-BFGS budgets and defaults in their comments match
the plan they expand to and the recipes' defaults (comments go stale when a default or a grid changes)."""

import re
from pathlib import Path

import pytest

from leakattack.attacks.recipes import get_recipe
from leakattack.sweep import load_plan

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.toml"))


def comments(path: Path) -> str:
    return " ".join(line.lstrip("# ").strip() for line in path.read_text().splitlines() if line.startswith("#"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_comments_match_the_plan_and_the_defaults(path):
    text, plan = comments(path), load_plan(path, check=False)
    for count in re.findall(r"the (\d+) attacks", text):
        assert int(count) == len(plan.points), f"{path.name} says {count} attacks, its plan has {len(plan.points)}"
    for default in re.findall(r"default (\d+)\b", text):
        assert int(default) == get_recipe("dlg").iterations, f"{path.name} states a default budget of {default}"
    steps = {int(n.replace(",", "")) for n in re.findall(r"(\d[\d,]*) L-BFGS steps", text)}
    budgets = {p["params"].get("iterations") for p in plan.points} - {None}
    assert steps <= budgets | {get_recipe("dlg").iterations}, (path.name, steps, budgets)
    assert f"leakattack sweep examples/{path.name}" in text  # each file names the command that runs it
