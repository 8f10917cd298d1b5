"""An attack's own options, declared on its class, become flags of `leakattack run`, are validated, recorded,
listed and swept, with nothing edited outside the attack's module."""

from __future__ import annotations

import json

import pytest
import torch

from leakattack import attacks, cli
from leakattack.attacks import Attack, AttackResult
from leakattack.config import RUN_PARAMS, RunConfig
from leakattack.constraints import Number, Param
from leakattack.sweep.plan import load_plan


class Toy(Attack):
    """Returns a uniform grey image whose level is its one option."""

    name = "toy"
    closed_form = True
    options = (Param("toy_option", 0.5, Number(0, 1), "toy option", "grey level of the image it returns"),)

    def __init__(self, *, toy_option: float = 0.5):
        self.level = toy_option

    def reconstruct(self, obs, *, monitor=None, monitor_every=10, progress=False) -> AttackResult:
        x = torch.full((obs.batch_size, *obs.victim.input_shape), self.level, dtype=obs.y.dtype, device=obs.y.device)
        labels = torch.zeros(obs.batch_size, dtype=torch.long, device=obs.y.device)
        return AttackResult(x=x, labels=labels, x0=x.clone(), losses=[0.0], message="a grey image")


@pytest.fixture
def toy(monkeypatch):
    """The toy attack registered for one test (the registry is restored after it)."""
    registry = attacks._ATTACKS
    monkeypatch.setattr(registry, "_items", dict(registry._items))
    monkeypatch.setattr(registry, "_meta", dict(registry._meta))
    attacks.register_attack("toy", Toy)
    return Toy


def _run(tmp_path, *flags):
    return cli.main(["run", "--attack", "toy", *flags, "--out", str(tmp_path / "run"), "--quiet", "--no-lpips"])


def test_a_registered_attacks_option_is_a_run_flag_that_reaches_the_attack_and_its_record(toy, tmp_path):
    assert _run(tmp_path, "--toy-option", "0.25") == 0
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["run"]["attack"] == "toy" and config["run"]["attack_params"] == {"toy_option": 0.25}
    images = torch.load(tmp_path / "run" / "reconstruction.pt")["images"]
    assert torch.allclose(images, torch.full_like(images, 0.25))


def test_an_option_left_out_takes_its_declared_default(toy, tmp_path):
    assert _run(tmp_path) == 0
    images = torch.load(tmp_path / "run" / "reconstruction.pt")["images"]
    assert torch.allclose(images, torch.full_like(images, 0.5))


def test_an_option_outside_its_constraint_is_one_sentence_and_exit_code_2(toy, tmp_path, capsys):
    assert _run(tmp_path, "--toy-option", "2") == 2
    err = capsys.readouterr().err.strip()
    assert err == "leakattack: error: toy option must lie in [0, 1], got 2.0"
    assert not (tmp_path / "run").exists()


def test_another_attacks_option_is_refused_naming_its_owner(toy, tmp_path, capsys):
    rc = cli.main(["run", "--attack", "analytic", "--toy-option", "0.3", "--out", str(tmp_path / "run")])
    assert rc == 2
    assert "attack 'analytic' takes no parameter 'toy_option' (an option of 'toy')" in capsys.readouterr().err


def test_help_and_list_show_the_option(toy, capsys):
    with pytest.raises(SystemExit):
        cli.main(["run", "--help"])
    assert "--toy-option" in capsys.readouterr().out
    assert cli.main(["list", "--attack", "toy"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("toy: closed form") and "--toy-option" in out and "grey level" in out


def test_a_sweep_grids_over_the_option(toy, tmp_path):
    path = tmp_path / "sweep.toml"
    path.write_text('[base]\nattack = "toy"\n[grid]\ntoy_option = [0.2, 0.4]\n')
    plan = load_plan(path, check=False)
    assert [p["params"]["attack_params"] for p in plan.points] == [{"toy_option": 0.2}, {"toy_option": 0.4}]
    assert len({p["key"] for p in plan.points}) == 2


def test_attacks_without_options_record_what_they_always_did():
    assert "attack_params" not in RunConfig().to_dict() and "attack_params" not in RunConfig().resolved().to_dict()
    assert RunConfig.from_dict(RunConfig().to_dict()) == RunConfig()


@pytest.mark.parametrize("name", attacks.list_attacks())
def test_no_attack_option_shadows_a_run_parameter(name):
    run_names = {p.name for p in RUN_PARAMS} | {p.option for p in RUN_PARAMS}
    for p in attacks.attack_class(name).options:
        assert p.name not in run_names and p.option not in run_names
        assert p.constraint.ok(p.default)


def test_get_attack_checks_its_options_in_one_sentence(toy):
    from leakattack.errors import UserError

    assert attacks.get_attack("toy", toy_option=0.25).level == 0.25
    with pytest.raises(UserError, match=r"toy option must .*got 3") as err:
        attacks.get_attack("toy", toy_option=3)
    assert "\n" not in str(err.value)
    with pytest.raises(UserError, match=r"attack 'toy' takes no option 'toy_optoin' \(its options: toy_option\)"):
        attacks.get_attack("toy", toy_optoin=0.1)
    for bad, needle in (({"iterations": -3}, "iterations must be an integer of at least 1, got -3"),
                        ({"restarts": 0}, "restarts must be an integer from 1 to 1,000 .*got 0"),
                        # the command line's bound on the starts, one batch through the victim, holds in Python too
                        ({"restarts": 1001}, "restarts must be an integer from 1 to 1,000 .*got 1001"),
                        ({"lr": -1.0}, "learning rate must be a positive number, got -1.0")):
        with pytest.raises(UserError, match=needle):
            attacks.get_attack("gradient-matching", **bad)


def test_an_option_named_like_a_setting_the_run_passes_is_one_sentence_before_anything_is_written(
        monkeypatch, tmp_path, capsys):
    """A subclass of gradient matching declaring ``init_seed`` (not a run parameter, but a keyword the run passes it)
    would receive it twice (a TypeError traceback)."""
    registry = attacks._ATTACKS
    monkeypatch.setattr(registry, "_items", dict(registry._items))
    monkeypatch.setattr(registry, "_meta", dict(registry._meta))

    class Clash(attacks.GradientMatching):
        name = "clash"
        options = (Param("init_seed", 5, Number(0, integer=True), "its start", "seed of its own start"),)

    attacks.register_attack("clash", Clash)
    rc = cli.main(["run", "--attack", "clash", "--init-seed", "3", "--out", str(tmp_path / "run"), "--quiet",
                   "--no-lpips"])
    assert rc == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "attack 'clash' declares an option 'init_seed' that the run already" in err
    assert not (tmp_path / "run").exists()


def test_the_attacks_copy_of_the_run_parameter_names_is_up_to_date():
    """register_attack refuses an option named like a run parameter from a copy of their names (the parameters are
    declared in a later station)."""
    assert attacks.RUN_PARAMETER_NAMES == {p.name for p in RUN_PARAMS}
