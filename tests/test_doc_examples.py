"""The Python the documentation shows runs as written: the package docstring's example (docs/api/leakattack.md
renders it) and every snippet of docs/extending.md, each registered and then used the way the page says."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest
import torch
from test_registries import tiny_observation  # tests/ is on the path

import defenses
import defenses.registry
import leakattack
from leakattack import cli
from leakattack.attacks import get_attack
from leakattack.attacks import priors as prior_registry
from leakattack.attacks.priors import get_prior
from leakattack.sketch import get_sketch, register_sketch

ROOT = Path(__file__).resolve().parents[1]
EXTENDING = ROOT / "docs" / "extending.md"

def python_blocks(text: str) -> list[str]:
    """The code of every ```python fence of a Markdown page."""
    return re.findall(r"^```python\n(.*?)^```$", text, flags=re.S | re.M)


def snippet(defines: str) -> dict:
    """Run the one snippet of docs/extending.md that defines ``defines`` (``class Grey(``) in a namespace of its own
    and return that namespace."""
    found = [code for code in python_blocks(EXTENDING.read_text(encoding="utf-8")) if defines in code]
    assert len(found) == 1, f"docs/extending.md shows {len(found)} snippets with {defines!r}"
    namespace: dict = {"__name__": "extending_snippet"}
    exec(compile(found[0], f"docs/extending.md ({defines})", "exec"), namespace)
    return namespace


def docstring_example(doc: str) -> str:
    """The indented block after the first ``::`` of a docstring, dedented."""
    head, sep, rest = doc.partition("::\n")
    assert sep, "the docstring shows no example block"
    block = []
    for line in rest.splitlines():
        if line.strip() and not line.startswith("    "):
            break
        block.append(line)
    return textwrap.dedent("\n".join(block))


def test_every_python_snippet_of_the_extending_page_is_one_these_tests_run():
    run_here = ("class SignedSubsample(", "class SignOnly(", "class GreyWorld", "class Grey(")
    blocks = python_blocks(EXTENDING.read_text(encoding="utf-8"))
    assert len(blocks) == len(run_here) and all(any(k in b for b in blocks) for k in run_here)


def test_the_package_docstring_example_runs_as_written(one_thread, capsys):
    """Only its iteration count is cut (the example shows 500 steps), so that the test stays small."""
    code = docstring_example(leakattack.__doc__)
    assert "iterations=500" in code
    exec(compile(code.replace("iterations=500", "iterations=3"), "leakattack.__doc__", "exec"), {})
    verdict, psnr, baseline = capsys.readouterr().out.strip().rsplit(" ", 2)
    assert verdict == "not rebuilt" and 0 < float(psnr) < float(baseline) + 1  # three steps rebuild nothing


def test_the_sketch_snippet_is_a_sketch_once_registered(fresh_registries):
    cls = snippet("class SignedSubsample(")["SignedSubsample"]
    register_sketch(cls)
    s = get_sketch("signed-subsample", 40, 10, 3)
    v, u = torch.randn(40, dtype=torch.float64), torch.randn(10, dtype=torch.float64)
    assert torch.allclose(s.to_dense() @ v, s(v))
    assert torch.allclose(s(v) @ u, v @ s.adjoint(u))  # <Rv, u> = <v, R^T u>


def test_the_defense_snippet_is_a_step_of_a_pipeline_once_registered(fresh_registries):
    cls = snippet("class SignOnly(")["SignOnly"]
    defenses.register_defense(cls)
    pipeline = defenses.build("clip:C=1,sign")
    v = torch.tensor([3.0, -4.0], dtype=torch.float64)
    assert [step.name for step in pipeline.before] == ["clip", "sign"]
    out = v
    for step in pipeline.before:
        out = step(out, torch.Generator().manual_seed(0))
    assert torch.allclose(out, torch.tensor([1.0, -1.0], dtype=torch.float64) * 0.7)  # clipped to norm 1, then signs


def test_the_prior_snippet_registers_a_prior_the_attack_takes_by_name(fresh_registries, one_thread):
    snippet("class GreyWorld")
    assert prior_registry.parse_prior("grey-world") == ("grey-world", 1e-3)
    assert get_prior("grey-world", 2.0)(torch.zeros(1, 1, 2, 2)).item() == pytest.approx(2.0 * 0.25)
    result = get_attack("gradient-matching", iterations=2, priors={"grey-world": 0.01}, labels="given").reconstruct(
        tiny_observation())
    assert result.x.shape == (1, 1, 2, 2)


def test_the_attack_snippet_runs_through_the_command_line_with_its_option(fresh_registries, tmp_path):
    snippet("class Grey(")
    out = tmp_path / "run"
    rc = cli.main(["run", "--attack", "grey", "--grey-level", "0.3", "--out", str(out), "--threads", "1", "--quiet",
                   "--no-lpips", "--dataset", "digits", "--image-index", "3"])
    assert rc == 0
    assert json.loads((out / "config.json").read_text())["run"]["attack_params"] == {"grey_level": 0.3}
    images = torch.load(out / "reconstruction.pt")["images"]
    assert torch.allclose(images, torch.full_like(images, 0.3))
    metrics = json.loads((out / "metrics.json").read_text())  # its labels read from the message, as idlg's are
    assert metrics["label_mode"] == "idlg" and metrics["labels_attack"] == metrics["labels_true"] == [3]
