"""Plugins: a module named in LEAKATTACK_PLUGINS registers an attack the command line and a sweep's spawned
workers then know; a plugin that does not import is one sentence."""

import json
import textwrap

import pytest

from leakattack import cli, plugins

PLUGIN = '''
import torch

from leakattack.attacks import Attack, AttackResult, register_attack
from leakattack.constraints import Number, Param

from plugin_neighbour_for_leakattack import LEVEL


class Flat(Attack):
    """Uniform images at a level (a baseline)."""

    name = "NAME"
    closed_form = True
    options = (Param("flat_level", LEVEL, Number(0, 1), "flat level", "level of the image it returns"),)

    def __init__(self, *, flat_level: float = LEVEL):
        self.level = flat_level

    def reconstruct(self, obs, *, monitor=None, monitor_every=10, progress=False):
        y = obs.y
        x = torch.full((obs.batch_size, *obs.victim.input_shape), self.level, dtype=y.dtype, device=y.device)
        labels = torch.zeros(obs.batch_size, dtype=torch.long, device=y.device)
        return AttackResult(x=x, labels=labels, x0=x.clone(), losses=[0.0], message="a flat image")


register_attack("NAME", Flat)
'''


@pytest.fixture
def plugin(tmp_path, monkeypatch, request, fresh_registries):
    (tmp_path / "plugin_neighbour_for_leakattack.py").write_text("LEVEL = 0.5\n")
    name = f"plugin-flat-{request.node.name[5:13]}"  # one name per test: the registry is the process's
    (tmp_path / "myplugin.py").write_text(textwrap.dedent(PLUGIN).replace("NAME", name))
    monkeypatch.setenv(plugins.ENV, str(tmp_path / "myplugin.py"))
    return tmp_path, name


def test_a_plugin_attack_runs_from_the_command_line_with_its_option(plugin, capsys):
    folder, name = plugin
    assert cli.main(["list", "--attack", name]) == 0
    assert "--flat-level" in capsys.readouterr().out
    out = folder / "run"
    assert cli.main(["run", "--attack", name, "--flat-level", "0.3", "--dataset", "digits", "--no-lpips",
                     "--quiet", "--out", str(out)]) == 0
    assert json.loads((out / "config.json").read_text())["run"]["attack_params"] == {"flat_level": 0.3}


def test_a_sweep_s_spawned_workers_import_the_plugin(plugin, capsys):
    folder, name = plugin
    toml = folder / "s.toml"
    toml.write_text(f'[base]\nattack = "{name}"\ndataset = "digits"\nthreads = 1\n'
                    '[grid]\nflat_level = [0.2, 0.4]\n')
    assert cli.main(["sweep", str(toml), "--jobs", "2", "--quiet", "--out", str(folder / "sw")]) == 0
    lines = (folder / "sw" / "results.jsonl").read_text().splitlines()
    assert len(lines) == 2


def test_a_plugin_that_does_not_import_is_one_sentence(tmp_path, monkeypatch, capsys, fresh_registries):
    (tmp_path / "broken.py").write_text("raise RuntimeError('no')\n")
    monkeypatch.setenv(plugins.ENV, str(tmp_path / "broken.py"))
    assert cli.main(["list"]) == 2
    assert f"plugin file '{tmp_path / 'broken.py'}' (LEAKATTACK_PLUGINS) could not be imported (RuntimeError: no)" \
        in capsys.readouterr().err
    monkeypatch.setenv(plugins.ENV, "no_such_module_for_leakattack")
    assert cli.main(["list"]) == 2
    assert "plugin 'no_such_module_for_leakattack' (LEAKATTACK_PLUGINS) is no importable module" \
        in capsys.readouterr().err
