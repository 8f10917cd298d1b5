"""Wrong uses of the registration verbs and of the Python API's entry points are one sentence where they are made:
at register_X, get_X, observe, a sketch's apply, reconstruct, not as a deep AttributeError or TypeError later."""

from __future__ import annotations

import pytest
import torch
from test_registries import tiny_observation  # tests/ is on the path

import targets
from defenses import Transform, register_defense
from leakattack import Channel, ThreatModel, cli, observe
from leakattack.attacks import Attack, AttackResult, get_attack, register_attack
from leakattack.attacks.priors import register_prior
from leakattack.constraints import Number, Param
from leakattack.errors import UserError
from leakattack.registry import RESERVED_CHARACTERS, Registry
from leakattack.sketch import get_sketch, register_sketch


class GreyWorld:
    """The prior of docs/extending.md."""

    def __init__(self, weight: float, *, obs=None):
        self.weight = weight

    def __call__(self, x):
        return self.weight * (x.mean() - 0.5) ** 2


class Grey(Attack):
    """A closed-form attack named ``grey`` (as in docs/extending.md)."""

    name = "grey"
    closed_form = True

    def reconstruct(self, obs, *, monitor=None, monitor_every=10, progress=False):
        x = torch.full((obs.batch_size, *obs.victim.input_shape), 0.5, dtype=obs.y.dtype)
        return AttackResult(x=x, labels=None, x0=x.clone(), losses=[0.0])


@pytest.mark.parametrize("name", [5, None, "", "a:b", "a,b", "a b", "a=b", "a@b", "tab\there"])
def test_a_name_the_command_line_cannot_write_is_refused_by_every_registry(fresh_registries, name):
    error = TypeError if not isinstance(name, str) else ValueError
    with pytest.raises(error, match=r"^prior name (must be a string|.* cannot be written on the command line)"):
        register_prior(name, GreyWorld)
    with pytest.raises(error, match="^attack name"):
        register_attack(name, Grey)
    with pytest.raises(error, match="^model name"):
        targets.register_model(name, lambda in_shape, num_classes: torch.nn.Linear(4, num_classes))
    with pytest.raises(error, match="^thing name"):
        Registry("thing").register(name, object())
    assert cli.main(["list"]) == 0  # nothing was kept: the listing still sorts


def test_the_reserved_characters_are_those_of_the_specs():
    assert set(RESERVED_CHARACTERS) == set(":,=@")


def test_an_unknown_name_that_is_not_a_string_is_the_unknown_name_sentence():
    with pytest.raises(UserError, match=r"^unknown attack \['x'\] \(list\); choose one of: "):
        get_attack(["x"])


def test_register_attack_takes_an_attack_class_whose_name_and_options_fit(fresh_registries):
    with pytest.raises(TypeError, match=r"^attack 'g2' must be registered with an Attack subclass .* an instance"):
        register_attack("g2", Grey())
    with pytest.raises(TypeError, match=r"^attack 'g3' must be registered with an Attack subclass .* class dict$"):
        register_attack("g3", dict)
    with pytest.raises(ValueError, match=r"^attack class Grey is named 'grey' .* not 'g4': register it as 'grey'"):
        register_attack("g4", Grey)

    class Steps(Grey):
        name = "steps"
        options = (Param("iterations", 5, Number(1, integer=True), "its steps", "steps of its own"),)

        def __init__(self, *, iterations: int = 5):
            self.iterations = iterations

    with pytest.raises(ValueError, match=r"^attack class Steps declares an option 'iterations', the name of a run "
                                         r"parameter: give the option another name$"):
        register_attack("steps", Steps)

    class Unnamed(Grey):
        name = Attack.name  # left at the base's: accepted under any name

    register_attack("grey", Grey)
    register_attack("unnamed", Unnamed)


def test_register_defense_and_register_sketch_take_their_classes(fresh_registries):
    with pytest.raises(TypeError, match=r"^register_defense takes a Transform subclass .* got function"):
        register_defense(lambda v, g: v)

    class Nameless(Transform):
        def __call__(self, v, gen):
            return v

    with pytest.raises(ValueError, match="^defense class Nameless sets no name"):
        register_defense(Nameless)

    class Zero(Transform):  # was listed, then never applied: the spec 'none' is no defense
        name = "none"
        schema: dict = {}

        def __call__(self, v, gen):
            return v * 0

    with pytest.raises(ValueError, match="^defense class Zero is named 'none', the spec that means no defense"):
        register_defense(Zero)
    # each fault of a schema entry is named: the type bool was said to be wrong where the predicate was missing
    for entry, said in (((bool, "flip", None), "has predicate None, not a callable"),
                        ((list, "xs", bool), "has type <class 'list'>, not one of float, int, str, bool"),
                        ((bool, "flip"), "must be a tuple (type, description, predicate), got (<class 'bool'>")):
        class Flip(Transform):
            name = "flip"
            schema = {"flip": entry}

            def __call__(self, v, gen):
                return v

        with pytest.raises(ValueError, match=r"^defense class Flip: schema entry 'flip' ") as err:
            register_defense(Flip)
        assert said in str(err.value)
    with pytest.raises(TypeError, match=r"^register_sketch takes a Sketch subclass .* got str 'x'$"):
        register_sketch("x")


def test_register_model_checks_its_builder_and_settings_and_get_model_what_the_builder_returns(fresh_registries):
    with pytest.raises(TypeError, match=r"^model 'm' must be registered with a builder\(in_shape, num_classes"):
        targets.register_model("m", 5)
    with pytest.raises(UserError, match=r"^the task of model 'm' must be one of: classification, regression; "
                                        r"got 'clf'$"):
        targets.register_model("m", torch.nn.Linear, task="clf")
    with pytest.raises(UserError, match="^the default_init of model 'm' must be one of"):
        targets.register_model("m", torch.nn.Linear, default_init="zeros")
    with pytest.raises(TypeError, match="^the loss of model 'm' must be a callable"):
        targets.register_model("m", torch.nn.Linear, loss="mse")
    assert "m" not in targets.list_models()
    targets.register_model("nothing", lambda in_shape, num_classes: None)
    with pytest.raises(UserError, match=r"^the builder of model 'nothing' returned NoneType, not an nn.Module$"):
        targets.get_model("nothing", num_classes=2, in_shape=(4,))


@pytest.mark.parametrize("seed", [-1, 2 ** 63, "a", 1.5, True])
def test_seeds_outside_the_command_lines_range_are_refused(seed):
    with pytest.raises(UserError, match=r"^the model seed must be an integer in \[0, 2\^63 - 1\], got "):
        targets.get_model("logreg", num_classes=2, in_shape=(4,), seed=seed)
    with pytest.raises(UserError, match=r"^the sketch seed must be an integer"):
        get_sketch("srht", 100, 50, seed=seed)
    obs = tiny_observation()
    x, labels = torch.rand(1, 1, 2, 2, dtype=torch.float64), torch.tensor([1])
    with pytest.raises(UserError, match=r"^the noise seed must be an integer in \[0, 2\^63 - 1\], got "):
        observe(obs.victim, x, labels, Channel(get_sketch("none", obs.victim.d, obs.victim.d)), ThreatModel(),
                noise_seed=seed)


@pytest.mark.parametrize("memory_gb", [-1, float("nan"), float("inf"), "1", True])
def test_a_sketch_memory_budget_must_be_a_non_negative_number(memory_gb):
    with pytest.raises(UserError, match=r"^memory_gb must be a non-negative number of GB or None"):
        get_sketch("gaussian", 100, 50, memory_gb=memory_gb)


def test_a_sketch_applies_only_floating_point_tensors_of_its_dimension():
    s = get_sketch("srht", 100, 50)
    with pytest.raises(UserError, match=r"^srht sketch apply\(v\) takes a tensor whose last dimension is d = 100, "
                                        r"got shape \(99,\)$"):
        s.apply(torch.rand(99))
    with pytest.raises(UserError, match=r"^srht sketch apply\(v\) takes a floating-point tensor, got torch.int64"):
        s.apply(torch.arange(100))
    with pytest.raises(UserError, match=r"^srht sketch adjoint\(u\) takes a tensor whose last dimension is b = 50"):
        s.adjoint(torch.rand(3, 100))
    with pytest.raises(UserError, match=r"^srht sketch apply\(v\) takes a torch tensor of shape \(\.\.\., 100\), "
                                        r"got list$"):
        s.apply([0.0] * 100)
    assert s.apply(torch.rand(2, 100)).shape == (2, 50)


def test_gradient_matching_takes_priors_as_a_dict_or_as_specs():
    assert get_attack("gradient-matching", priors=["tv:0.1", "bn"]).priors == {"tv": 0.1, "bn": 1e-2}
    with pytest.raises(UserError, match=r"^priors must be a dict name -> weight .* got str 'tv'$"):
        get_attack("gradient-matching", priors="tv")
    with pytest.raises(UserError, match=r"^unknown prior 'nope'; choose one of: "):
        get_attack("gradient-matching", priors={"nope": 1.0})


def test_reconstruct_takes_an_observation():
    with pytest.raises(UserError, match=r"^attack 'gradient-matching' reconstructs from an Observation .* got str "
                                        r"'obs'$"):
        get_attack("gradient-matching").reconstruct("obs")
    with pytest.raises(UserError, match=r"^attack 'grey' reconstructs from an Observation"):
        Grey().reconstruct(None)


def test_a_prior_that_returns_no_scalar_tensor_is_named(fresh_registries):
    register_prior("wordy", lambda weight, obs=None: lambda x: "penalty")
    register_prior("rows", lambda weight, obs=None: lambda x: weight * x.flatten(1).mean(1))
    for name, what in (("wordy", "a str"), ("rows", r"a tensor of shape \(1,\)")):
        attack = get_attack("gradient-matching", iterations=2, priors={name: 1.0}, labels="given")
        with pytest.raises(UserError, match=rf"^the prior named '{name}' returned {what}, not a scalar tensor"):
            attack.reconstruct(tiny_observation())


def test_a_prior_whose_builder_returns_no_callable_is_named(fresh_registries):
    """A builder returning None failed inside the search with "'NoneType' object is not callable"."""
    register_prior("nothing", lambda weight, obs=None: None)
    register_prior("number", lambda weight, obs=None: weight)
    for name, what in (("nothing", "None"), ("number", "a float")):
        attack = get_attack("gradient-matching", iterations=2, priors={name: 1.0}, labels="given")
        with pytest.raises(UserError, match=rf"cannot run here: prior '{name}''s builder returned {what}, not a "
                                            r"callable x -> weighted penalty \(or a re-parametrisation registered with "
                                            r"reparametrises=True\)$"):
            attack.reconstruct(tiny_observation())


def test_a_reparametrisation_whose_builder_returns_none_is_named_as_registered(fresh_registries):
    """It was refused as "a re-parametrisation and its builder returned a penalty: register it with
    reparametrises=False", which led to the penalty's refusal."""
    from leakattack.attacks.priors import get_prior

    register_prior("nothing-r", lambda weight, obs=None: None, reparametrises=True)
    with pytest.raises(UserError, match=r"^prior 'nothing-r''s builder returned None, not a re-parametrisation "
                                        r"\(an object with parametrise\), as it was registered$"):
        get_prior("nothing-r", 1.0)


def test_a_prior_that_returns_nan_or_an_integer_is_named(fresh_registries):
    register_prior("nanny", lambda weight, obs=None: lambda x: x.sum() * float("nan"))
    register_prior("counts", lambda weight, obs=None: lambda x: (x > 0.5).sum())
    for name, what in (("nanny", "returned nan at the attack's start"), ("counts", "returned a tensor of int64")):
        attack = get_attack("gradient-matching", iterations=2, priors={name: 1.0}, labels="given")
        with pytest.raises(UserError, match=rf"^the prior named '{name}' {what}"):
            attack.reconstruct(tiny_observation())


def test_a_function_that_builds_a_reparametrisation_says_so_or_is_named(fresh_registries):
    from leakattack.attacks.priors import DeepImagePrior, penalty_label

    register_prior("made", lambda weight, obs=None: DeepImagePrior(weight, obs=obs), reparametrises=True)
    register_prior("unsaid", lambda weight, obs=None: DeepImagePrior(weight, obs=obs))
    assert penalty_label("made") is None and penalty_label("dip") is None
    assert get_attack("gradient-matching", priors={"made": 1.0}).added_terms == ()
    assert penalty_label("unsaid") == "the unsaid prior"
    with pytest.raises(UserError, match=r"prior 'unsaid' was registered as a penalty and its builder returned a "
                                        r"re-parametrisation: register it with reparametrises=True"):
        get_attack("gradient-matching", iterations=2, priors={"unsaid": 1.0}, labels="given").reconstruct(
            tiny_observation())


def test_a_prior_named_twice_in_a_list_of_specs_is_said_as_the_command_line_says_it():
    """get_attack(priors=['tv:0.1', 'tv']) kept the last weight (TV's default 1e-4) without a word, where --prior
    given twice warns."""
    import warnings as _warnings

    from leakattack.errors import SettingWarning

    with _warnings.catch_warnings(record=True) as said:
        _warnings.simplefilter("always")
        attack = get_attack("gradient-matching", priors=["tv:0.1", "bn", "tv"])
    assert attack.priors["tv"] == 1e-4
    texts = [str(w.message) for w in said if issubclass(w.category, SettingWarning)]
    assert texts == ["priors give tv 2 times (tv:0.1, tv): tv:0.0001 is used"]
    with _warnings.catch_warnings():
        _warnings.simplefilter("error")
        get_attack("gradient-matching", priors=["tv:0.1", "bn"])  # each once: nothing said
