"""The shared registry: every family names its entries and refuses unknown names in one sentence."""

import pytest

import defenses
import targets
import targets.protocols as protocols
from leakattack.attacks import get_attack, get_optimizer, get_prior, list_attacks, list_optimizers, list_priors
from leakattack.data import get_dataset, list_datasets
from leakattack.registry import Registry
from leakattack.sketch import list_sketches, make_sketch
from leakattack.sweep import get_backend, list_backends


def test_registry_registers_lists_and_refuses_unknown_names():
    reg = Registry("widget")
    reg.register("b", int)

    @reg.register("a")
    def make_a():
        return "a"

    assert reg.names() == ["a", "b"] and "a" in reg and reg.get("a") is make_a
    with pytest.raises(ValueError, match=r"^unknown widget 'c'; choose one of: a, b$"):
        reg.get("c")
    with pytest.raises(ValueError, match="widget 'a' is registered twice"):
        reg.register("a", str)


@pytest.mark.parametrize("call,family", [
    (lambda: targets.get_model("resnet"), "model"),
    (lambda: make_sketch("fourier", 8, 4), "sketch"),
    (lambda: protocols.get_protocol("gossip", None, None), "protocol"),
    (lambda: defenses.build("shield:k=1"), "defense"),
    (lambda: get_attack("deepleakage"), "attack"),
    (lambda: get_optimizer("sgd2", []), "optimizer"),
    (lambda: get_prior("gan", 1.0), "prior"),
    (lambda: get_backend("kubernetes"), "sweep backend"),
])
def test_every_family_names_its_choices_for_an_unknown_name(call, family):
    with pytest.raises(ValueError, match=rf"unknown {family} '\w+'; choose one of: "):
        call()


def test_family_listings_are_sorted_and_hold_the_required_names():
    """The one place that pins the names each family must offer (extensions may add more)."""
    required = {
        "models": (targets.list_models(), {"lenet", "linreg", "logreg", "mlp"}),
        "sketches": (list_sketches(), {"ams", "countsketch", "gaussian", "none", "sparse", "srht", "uniform"}),
        "protocols": (protocols.list_protocols(),
                      {"fedavg", "sketched", "sketched-dp", "fedsketch-privix", "fedsketch-heaprix"}),
        "defenses": (defenses.list_defenses(), {"clip", "per_example", "gaussian", "laplace", "prune", "quantize"}),
    }
    for family, (names, needed) in required.items():
        assert names == sorted(names), family
        assert needed <= set(names), (family, needed - set(names))


def test_every_registry_has_the_list_verb_and_names_its_defaults():
    assert "gradient-matching" in list_attacks() and "tv" in list_priors()
    assert list_optimizers() == ["lbfgs", "adam", "gd"]
    assert list_datasets()[:2] == ["photos", "digits"] and get_dataset("digits").name == "digits"
    assert "local" in list_backends()


def test_a_sketch_or_attack_class_missing_its_operations_is_refused_when_registered():
    from leakattack.attacks import list_attacks, register_attack
    from leakattack.attacks.base import Attack
    from leakattack.sketch import Sketch, list_sketches, register_sketch

    class HalfSketch(Sketch):
        kind = "half"

        def _apply(self, v):
            return v[..., : self.b]

    class NoAttack(Attack):
        name = "nothing"

    with pytest.raises(ValueError, match="sketch class HalfSketch does not implement _adjoint"):
        register_sketch(HalfSketch)
    with pytest.raises(ValueError, match=r"attack class NoAttack does not implement reconstruct\(obs, ...\)"):
        register_attack("nothing", NoAttack)
    assert "half" not in list_sketches() and "nothing" not in list_attacks()
