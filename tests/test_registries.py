"""The registries from Python: names registered at run time are listed by `leakattack list`, and priors have a public
register verb with the builder signature they are called with."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import targets
import targets.models
from defenses import Transform, register_defense
from leakattack import Channel, ThreatModel, cli, observe
from leakattack import sketch as sketches
from leakattack.attacks import Attack, AttackResult, get_attack, register_attack
from leakattack.attacks.priors import get_prior, list_priors, parse_prior, register_prior
from leakattack.config import names
from leakattack.sketch import Sketch, get_sketch, register_sketch


def tiny_observation():
    """The unsketched message of one 1x2x2 image through a seeded 4-to-2 linear classifier (float64)."""
    torch.manual_seed(0)
    victim = targets.Victim.from_module(torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4, 2)).double(),
                                        input_shape=(1, 2, 2), num_classes=2)
    return observe(victim, torch.rand(1, 1, 2, 2, dtype=torch.float64), torch.tensor([1]),
                   Channel(get_sketch("none", victim.d, victim.d)), ThreatModel(knows_labels=True))


class Halves(Sketch):
    """The first b coordinates (a sketch only to be registered)."""

    kind = "halves"

    def _apply(self, v):
        return v[..., :self.b]

    def _adjoint(self, u):
        return torch.nn.functional.pad(u, (0, self.d - self.b))


class Noop(Transform):
    """Sends the vector unchanged (a defense only to be registered)."""

    name = "noop"
    schema = {}

    def __call__(self, v, gen):
        return v


class Blank(Attack):
    """Returns zeros (an attack only to be registered)."""

    closed_form = True

    def reconstruct(self, obs, *, monitor=None, monitor_every=10, progress=False):
        x = torch.zeros(obs.batch_size, *obs.victim.input_shape, dtype=obs.y.dtype)
        return AttackResult(x=x, labels=None, x0=x.clone(), losses=[0.0])


def _listed(text: str) -> dict[str, list[str]]:
    return {head.strip(): body.strip().split(", ") for head, body in
            (line.split(":", 1) for line in text.strip().splitlines())}


def test_list_names_what_was_registered_at_run_time_in_every_family(fresh_registries, capsys):
    targets.register_model("wide", lambda in_shape, num_classes: torch.nn.Linear(int(np.prod(in_shape)), num_classes))
    register_sketch(Halves)
    register_attack("blank", Blank)
    register_defense(Noop)
    register_prior("flat", lambda weight, obs=None: lambda x: weight * x.var(), weight=0.5)

    assert cli.main(["list"]) == 0
    shown = _listed(capsys.readouterr().out)
    assert "wide" in shown["models"] and shown["models"] == targets.list_models()
    assert "halves" in shown["sketches"] and "blank" in shown["attacks"]
    assert "noop" in shown["defenses"] and "flat" in shown["priors"]


def test_a_registry_whose_module_is_not_loaded_answers_from_its_copy_without_importing_it():
    listed = names.Listed("leakattack_no_such_module:list_things", ("a", "b"))
    assert listed.current() == ["a", "b"]
    loaded = names.Listed("leakattack.sketch:list_sketches", ("srht",))
    assert loaded.current() == sketches.list_sketches()


# -- priors ------------------------------------------------------------------------------------------------------------
def test_register_prior_takes_a_builder_of_weight_and_obs_and_its_default_weight(fresh_registries):
    register_prior("flat", lambda weight, obs=None: lambda x: weight * x.var(), weight=0.5)
    assert "flat" in list_priors() and parse_prior("flat") == ("flat", 0.5) and parse_prior("flat:2") == ("flat", 2.0)
    x = torch.tensor([0.0, 1.0, 0.0, 1.0])
    assert get_prior("flat", 2.0)(x).item() == pytest.approx(2 * x.var().item())

    @register_prior("decorated", weight=1e-3)
    class Decorated:
        def __init__(self, weight, *, obs=None):
            self.weight = weight

        def __call__(self, x):
            return self.weight * x.sum()

    assert parse_prior("decorated") == ("decorated", 1e-3) and isinstance(get_prior("decorated", 1.0), Decorated)


def test_register_prior_refuses_a_plain_function_of_x_naming_the_wrapper_a_bad_weight_and_a_name_twice(
        fresh_registries):
    with pytest.raises(TypeError, match=r"prior 'plain': <lambda>\(x\) cannot be called as builder\(weight, "
                                        r"obs=obs\); wrap a plain function of x as lambda weight, obs=None"):
        register_prior("plain", lambda x: x.var())
    assert "plain" not in list_priors()
    with pytest.raises(ValueError, match=r"^the default weight of prior 'w' must be a non-negative number, got -1$"):
        register_prior("w", lambda weight, obs=None: None, weight=-1)
    with pytest.raises(ValueError, match="prior 'tv' is registered twice"):
        register_prior("tv", lambda weight, obs=None: None)


def test_a_registered_prior_reaches_the_attack_that_names_it(fresh_registries):
    calls = []

    def builder(weight, obs=None):
        def penalty(x):
            calls.append(x.shape)
            return weight * (x.mean() - 0.5) ** 2
        return penalty

    register_prior("pull", builder)
    result = get_attack("gradient-matching", iterations=2, priors={"pull": 1.0}, labels="given").reconstruct(
        tiny_observation())
    assert calls and calls[0] == (1, 1, 2, 2) and np.isfinite(result.final_loss)
