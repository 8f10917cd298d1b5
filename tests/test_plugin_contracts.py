"""What docs/extending.md promises a researcher's own attack, sketch, defense and model (a plugin): a class that
leaves out what the run calls is refused where it is registered, in one sentence naming the method; a name taken
names the file that holds it; a builder taking **params passes --model-param on; --help names what a plugin
registered; config.json records the plugin's file; a plugin the caller imported already is not imported twice."""

from __future__ import annotations

import hashlib
import json
import sys
import textwrap

import pytest
import torch

import targets
from defenses import Transform, register_defense
from leakattack import cli, plugins
from leakattack.attacks import Attack, AttackResult, register_attack
from leakattack.config import RunConfig
from leakattack.constraints import Choice
from leakattack.sketch import Sketch, register_sketch


def test_a_defense_without_its_own_call_or_with_another_signature_is_refused_at_registration(fresh_registries):
    class NoCall(Transform):
        name = "no-call"

    class OneArgument(Transform):
        name = "one-argument"

        def __call__(self, v):
            return v

    with pytest.raises(ValueError, match=r"^defense class NoCall does not implement __call__\(self, v, gen\)$"):
        register_defense(NoCall)
    with pytest.raises(ValueError, match=r"^defense class OneArgument: its __call__ cannot be called as "
                                         r"step\(v, gen\)"):
        register_defense(OneArgument)


def test_a_defense_whose_constructor_cannot_take_params_and_placement_is_refused_at_registration(fresh_registries):
    """Such a class was kept, and the run that named it ended in a TypeError traceback from parse_step."""
    class KeywordsOnly(Transform):
        name = "keywords-only"

        def __init__(self, **kw):
            super().__init__({}, None)

        def __call__(self, v, gen):
            return v

    with pytest.raises(ValueError, match=r"^defense class KeywordsOnly: its constructor cannot be called as "
                                         r"KeywordsOnly\(params, placement\), as a spec builds it"):
        register_defense(KeywordsOnly)


def test_an_attack_whose_reconstruct_cannot_take_the_run_s_keywords_is_refused_at_registration(fresh_registries):
    class ObsOnly(Attack):
        name = "obs-only"
        closed_form = True

        def reconstruct(self, obs):
            raise AssertionError("not called")

    with pytest.raises(ValueError, match=r"^attack class ObsOnly: its reconstruct cannot be called as "
                                         r"reconstruct\(obs, monitor=\.\.\., monitor_every=\.\.\., progress=\.\.\.\)"):
        register_attack("obs-only", ObsOnly)


def test_a_sketch_whose_constructor_takes_no_seed_is_refused_at_registration(fresh_registries):
    class NoSeed(Sketch):
        kind = "no-seed"

        def __init__(self, d, b):
            super().__init__(d=d, b=b, seed=0)

        def _apply(self, v):
            return v[..., : self.b]

        def _adjoint(self, u):
            return torch.nn.functional.pad(u, (0, self.d - self.b))

    with pytest.raises(ValueError, match=r"^sketch class NoSeed cannot be built as NoSeed\(d=\.\.\., b=\.\.\., "
                                         r"seed=\.\.\., \*\*params\).*'seed'"):
        register_sketch(NoSeed)


PLUGIN = '''
import torch
from torch import nn

from defenses import Transform, register_defense
from leakattack.sketch import Sketch, register_sketch
from targets import register_model


class FirstCoordinates(Sketch):
    kind = "KIND"

    def _apply(self, v):
        return v[..., : self.b]

    def _adjoint(self, u):
        return torch.nn.functional.pad(u, (0, self.d - self.b))


class Halve(Transform):
    name = "DEFENSE"
    schema = {}

    def __call__(self, v, gen):
        return v / 2


class Tiny(nn.Module):
    def __init__(self, in_shape, num_classes, width=4):
        super().__init__()
        self.a, self.b = nn.Linear(int(torch.tensor(in_shape).prod()), width), nn.Linear(width, num_classes)

    def forward(self, x):
        return self.b(torch.sigmoid(self.a(x.flatten(1))))


def tiny(in_shape, num_classes, **params):
    return Tiny(in_shape, num_classes, **params)


register_sketch(FirstCoordinates)
register_defense(Halve)
register_model("MODEL", tiny)
'''


@pytest.fixture
def plugin(tmp_path, monkeypatch, request, fresh_registries):
    """A plugin file registering a sketch, a defense and a model, named in LEAKATTACK_PLUGINS; names of its own."""
    tag = request.node.name[5:20].strip("_")
    names = {"KIND": f"first_{tag}", "DEFENSE": f"halve_{tag}", "MODEL": f"tiny_{tag}"}
    text = textwrap.dedent(PLUGIN)
    for key, value in names.items():
        text = text.replace(key, value)
    path = tmp_path / f"plugin_{tag}.py"
    path.write_text(text)
    monkeypatch.setenv(plugins.ENV, str(path))
    return path, names


def test_a_name_taken_names_the_file_of_the_class_that_holds_it(plugin):
    path, names = plugin
    plugins.load_plugins()

    class Again(Sketch):
        kind = names["KIND"]

        def _apply(self, v):
            return v

        def _adjoint(self, u):
            return u

    with pytest.raises(ValueError, match=f"is registered twice \\(the name is taken by FirstCoordinates of "
                                         f"{path}\\)"):
        register_sketch(Again)


def test_a_builder_taking_params_passes_model_params_on(plugin, capsys):
    _, names = plugin
    plugins.load_plugins()
    model = names["MODEL"]
    assert "params" not in targets.model_params(model)
    assert targets.get_model(model, in_shape=(1, 4, 4), num_classes=3, width=5).d == 16 * 5 + 5 + 5 * 3 + 3
    assert cli.main(["list", "--model", model]) == 0
    assert "any other its builder takes (**params)" in capsys.readouterr().out


def test_run_help_names_what_a_plugin_registered_after_the_built_in_names(plugin, capsys, monkeypatch):
    _, names = plugin
    monkeypatch.setenv("COLUMNS", "1000")  # no name broken over two lines
    with pytest.raises(SystemExit):
        cli.main(["run", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert f"none, sparse, srht, uniform, {names['KIND']} (default: srht)" in shown
    assert names["MODEL"] in shown


def test_choice_shows_the_copy_then_the_names_registered_at_run_time(monkeypatch):
    import leakattack.sketch as sketch
    from leakattack.config import names

    monkeypatch.setattr(sketch, "list_sketches", lambda: ["srht", "mine"])
    assert Choice(names.SKETCHES).shown == [*names.SKETCHES.shown, "mine"]


def test_config_json_records_the_plugin_s_file_and_digest(plugin):
    path, names = plugin
    out = path.parent / "run"
    assert cli.main(["run", "--model", names["MODEL"], "--sketch", names["KIND"], "--defense", names["DEFENSE"],
                     "--attack", "analytic", "--dataset", "digits", "--labels", "given", "--no-lpips", "--quiet",
                     "--out", str(out)]) == 0
    recorded = json.loads((out / "config.json").read_text())["plugins"]
    entry = next(e for e in recorded if e.get("path") == str(path.resolve()))
    assert entry["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert entry["plugin"] == f"{plugins.ENV}={path}"
    assert {f"sketch '{names['KIND']}'", f"defense '{names['DEFENSE']}'", f"model '{names['MODEL']}'"} \
        <= set(entry["registers"])


def test_a_name_a_plugin_registers_for_a_built_in_loader_is_the_plugin_s(fresh_registries, tmp_path, monkeypatch):
    """register_dataset("my-digits", load_digits) was recorded by where load_digits is defined, leakattack: config.json
    did not list it under the plugin, and a sweep's other processes were not told to import the plugin for it."""
    from leakattack.registry import members_outside, registered_outside

    (tmp_path / "digits_alias.py").write_text(
        "from leakattack.data import register_dataset\n"
        "from leakattack.data.embedded import load_digits\n\n"
        "register_dataset('my-digits', load_digits, offline=True, shape=(1, 28))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "digits_alias", raising=False)
    try:
        __import__("digits_alias")
        assert registered_outside()["digits_alias"] == ["dataset 'my-digits'"]
        assert ("digits_alias", "dataset", "digits") not in members_outside()  # the built-in name stays built-in
    finally:
        sys.modules.pop("digits_alias", None)


def test_a_plugin_file_the_caller_imported_already_is_not_imported_twice(plugin, monkeypatch, capsys):
    path, names = plugin
    monkeypatch.syspath_prepend(str(path.parent))
    monkeypatch.delitem(sys.modules, path.stem, raising=False)
    __import__(path.stem)  # the caller's `import myplugins`, then LEAKATTACK_PLUGINS=myplugins.py
    try:
        assert cli.main(["list"]) == 0, capsys.readouterr().err
        assert names["KIND"] in capsys.readouterr().out
        from leakattack.registry import registered_outside

        assert path.stem in registered_outside()
    finally:
        sys.modules.pop(path.stem, None)


def test_an_optimising_plugin_attack_reads_gradient_matching_s_settings(fresh_registries):
    class Optimising(Attack):
        name = "optimising-for-test"

        def __init__(self, *, iterations=10, **settings):
            self.iterations = iterations

        def reconstruct(self, obs, *, monitor=None, monitor_every=10, progress=False):
            x = torch.zeros(obs.batch_size, *obs.victim.input_shape)
            return AttackResult(x=x, labels=None, x0=x, losses=[0.0])

    register_attack(Optimising.name, Optimising)
    assert RunConfig(attack=Optimising.name, iterations=5, lr=0.5).unused_options() == []
    assert RunConfig(attack="analytic", iterations=5).unused_options() == ["--iterations"]


def test_sweep_json_records_the_plugins_the_sweep_ran_with(plugin):
    path, names = plugin
    toml = path.parent / "tiny.toml"
    toml.write_text(f'[base]\nmodel = "{names["MODEL"]}"\ndataset = "digits"\niterations = 1\nthreads = 1\n\n'
                    '[grid]\nseed = [0]\n')
    out = path.parent / "sweep"
    assert cli.main(["sweep", str(toml), "--out", str(out), "--jobs", "1", "--quiet"]) == 0
    recorded = json.loads((out / "sweep.json").read_text())["plugins"]
    entry = next(e for e in recorded if e.get("path") == str(path.resolve()))
    assert entry["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest() and f"model '{names['MODEL']}'" \
        in entry["registers"]


def test_run_help_names_a_prior_registered_at_run_time(fresh_registries, capsys, monkeypatch):
    """--prior's help printed the built-in names alone, where --sketch, --attack and --model named a plugin's too."""
    from leakattack.attacks.priors import register_prior

    class GreyWorld:
        def __init__(self, weight: float, *, obs=None):
            self.weight = weight

        def __call__(self, x):
            return self.weight * (x.mean() - 0.5) ** 2

    register_prior("grey-world-help", GreyWorld, weight=1e-3)
    monkeypatch.setenv("COLUMNS", "1000")
    with pytest.raises(SystemExit):
        cli.main(["run", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert "image prior added to the matching objective, one of bn, dip, grey-world-help, tv (tv: total" in shown
