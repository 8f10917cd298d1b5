"""A user's norm-bounding step (``bounds_norm = True``): with a ``C`` it is counted as a clip; without one the
accounting tracks no bound across it and says so, and a run with it works."""

import json
import textwrap

import pytest

import defenses
from defenses.base import Transform, norm_bound
from defenses.registry import register_defense
from leakattack import cli, plugins

PLUGIN = '''
from defenses.base import Transform
from defenses.registry import register_defense


class Unit(Transform):
    """Scale the message to unit norm."""

    name = "unit_norm_test"
    schema = {}
    bounds_norm = True

    def __call__(self, v, gen):
        return v / v.norm().clamp_min(1e-30)


register_defense(Unit)
'''


def _plugin_class(name: str) -> type[Transform]:
    """The plugin's step class, defined from its text under ``name`` (and registered, as the plugin does)."""
    space: dict = {}
    exec(textwrap.dedent(PLUGIN).replace("unit_norm_test", name), space)
    return space["Unit"]


@pytest.fixture
def units(fresh_registries):
    unit = _plugin_class("unit_nameless_bound")

    class UnitC(unit):  # type: ignore[valid-type,misc]
        name = "unit_with_bound"
        C = 1.0

    register_defense(UnitC)


@pytest.mark.parametrize("spec", ["unit_nameless_bound,gaussian:sigma=1",
                                  "unit_nameless_bound,gaussian:sigma=1@after_sketch",
                                  "clip:C=1,unit_nameless_bound,gaussian:sigma=1"])
def test_a_norm_bound_without_c_leaves_the_sensitivity_untracked_and_says_why(units, spec):
    pipeline = defenses.build(spec)
    bound = pipeline.noise_bound(1.0)
    assert bound is not None and bound.sensitivity is None
    assert bound.reason == "'unit_nameless_bound@before_sketch' bounds the norm but names no bound C: sensitivity " \
                           "not tracked"
    assert not pipeline.needs_sketch_norm


def test_a_norm_bound_with_c_is_counted_as_a_clip(units):
    assert norm_bound(defenses.build("unit_with_bound").steps[0]) == 1.0
    assert norm_bound(defenses.build("unit_nameless_bound").steps[0]) is None
    assert defenses.build("unit_with_bound,gaussian:sigma=2").sensitivity(1.0) == 1.0
    assert defenses.build("unit_with_bound,gaussian:z=3").steps[1].sigma == 3.0  # z scales the step's C
    assert defenses.build("unit_with_bound,gaussian:sigma=1@after_sketch").needs_sketch_norm
    with pytest.raises(defenses.DefenseError, match="needs a clip"):
        defenses.build("unit_nameless_bound,gaussian:z=3")


def test_a_plugin_norm_bound_without_c_runs_from_the_command_line(tmp_path, monkeypatch, fresh_registries, capsys):
    (tmp_path / "unitplugin.py").write_text(textwrap.dedent(PLUGIN))
    monkeypatch.setenv(plugins.ENV, str(tmp_path / "unitplugin.py"))
    out = tmp_path / "run"
    assert cli.main(["run", "--defense", "unit_norm_test,gaussian:sigma=0.01", "--iterations", "3", "--no-lpips",
                     "--quiet", "--out", str(out)]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["defense"] == "unit_norm_test@before_sketch,gaussian:sigma=0.01@before_sketch"
    assert metrics["epsilon"] is None
    assert metrics["privacy_note"].startswith("'unit_norm_test@before_sketch' bounds the norm but names no bound C")
