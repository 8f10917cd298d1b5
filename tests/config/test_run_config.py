"""RunConfig, the typed dataclass, agrees with RUN_PARAMS, the declaration the flags and validation come from."""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

import pytest

from leakattack.config import RUN_PARAMS, RunConfig
from leakattack.config.constraints import Choice, Flag, Items, Number, Optional, Table, Text
from leakattack.config.params import Duration
from leakattack.config.run import recorded_fields

FIELDS = recorded_fields()
HINTS = typing.get_type_hints(RunConfig)


def expected_type(constraint) -> Any:
    """The annotation a field declared with ``constraint`` carries."""
    if isinstance(constraint, Optional):
        return expected_type(constraint.inner) | None
    if isinstance(constraint, Duration):
        return str | float
    if isinstance(constraint, Number):
        return int if constraint.integer else float
    if isinstance(constraint, Flag):
        return bool
    if isinstance(constraint, (Choice, Text)):
        return str
    if isinstance(constraint, Table):
        return dict[str, Any]
    if isinstance(constraint, Items):
        return list[str]
    raise AssertionError(f"no annotation known for {type(constraint).__name__}")


def _default(f: dataclasses.Field) -> Any:
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def test_the_dataclass_has_one_field_per_declared_parameter_in_its_order():
    assert [f.name for f in FIELDS] == [p.name for p in RUN_PARAMS]


@pytest.mark.parametrize("param", RUN_PARAMS, ids=lambda p: p.name)
def test_each_field_has_the_declared_default(param):
    f = next(f for f in FIELDS if f.name == param.name)
    assert _default(f) == param.default and type(_default(f)) is type(param.default)


@pytest.mark.parametrize("param", RUN_PARAMS, ids=lambda p: p.name)
def test_each_field_is_typed_as_its_constraint_accepts(param):
    assert HINTS[param.name] == expected_type(param.constraint)


@pytest.mark.parametrize("param", RUN_PARAMS, ids=lambda p: p.name)
def test_each_declared_default_satisfies_its_constraint(param):
    assert param.constraint.ok(param.default), param.name


def test_mutable_defaults_are_fresh_for_each_configuration():
    a, b = RunConfig(), RunConfig()
    assert a.model_params == {} and a.model_params is not b.model_params and a.priors is not b.priors


def test_the_configuration_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        RunConfig().seed = 1  # type: ignore[misc]


@pytest.mark.parametrize("value,said", [
    ("ten", "iterations must be an integer in [1, 1000000], got 'ten'"),
    (1.5, "iterations must be an integer in [1, 1000000], got 1.5"),
    (True, "iterations must be an integer in [1, 1000000], got True"),
    (0, "iterations must lie in [1, 1000000], got 0"),
])
def test_a_number_of_the_wrong_kind_is_named_as_such(value, said):
    from leakattack.constraints import Number

    assert Number(1, 1_000_000, integer=True).error("iterations", value) == said
    assert Number(0, 1).error("ratio", "x") == "ratio must be a number in [0, 1], got 'x'"
