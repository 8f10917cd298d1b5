"""Plugins: a module named in LEAKATTACK_PLUGINS registers an attack the command line and a sweep's spawned
workers then know; a plugin that does not import is one sentence."""

import json
import os
import subprocess
import sys
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


def test_a_model_class_in_a_plugin_file_is_taken_from_the_plugin_s_import(plugin, capsys):
    """--model FILE.py:Class where FILE.py is a plugin file imported it again: its registrations found their names
    taken, and the run was refused."""
    folder, name = plugin
    path = folder / "myplugin.py"
    path.write_text(path.read_text() + textwrap.dedent("""
        from torch import nn


        class Tiny(nn.Module):
            def __init__(self, num_classes=10, in_shape=(1, 8, 8)):
                super().__init__()
                self.f = nn.Sequential(nn.Flatten(), nn.Linear(in_shape[0] * in_shape[1] * in_shape[2], num_classes))

            def forward(self, x):
                return self.f(x)
        """))
    out = folder / "run"
    assert cli.main(["run", "--model", f"{path}:Tiny", "--dataset", "digits", "--iterations", "2", "--no-lpips",
                     "--quiet", "--out", str(out)]) == 0, capsys.readouterr().err
    assert "registered twice" not in capsys.readouterr().err


def test_a_file_imported_already_is_reused_while_it_is_unchanged(tmp_path):
    """A model file asked for after its plugin import is reused; edited since, the reuse gave its old classes."""
    import os

    from leakattack.plugins import import_file

    path = tmp_path / "versioned_for_leakattack.py"
    path.write_text("VERSION = 1\n")
    first = import_file(path, "plugin file", "leakattack_test_plugin_")
    assert import_file(path, "model file", "leakattack_test_model_", reuse=True) is first
    path.write_text("VERSION = 22\n")
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))  # edited a second later
    again = import_file(path, "model file", "leakattack_test_model_", reuse=True)
    assert again is not first and again.VERSION == 22


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


def test_a_sweep_s_workers_import_the_user_s_own_module_that_registered_its_names(tmp_path, monkeypatch, request,
                                                                                  fresh_registries):
    # a notebook's `import mymodule` (no LEAKATTACK_PLUGINS): the workers, which run none of its cells, import it
    (tmp_path / "plugin_neighbour_for_leakattack.py").write_text("LEVEL = 0.5\n")
    name = f"own-flat-{request.node.name[5:13]}"
    module = f"own_attack_{request.node.name[5:13].replace('-', '_')}"
    (tmp_path / f"{module}.py").write_text(textwrap.dedent(PLUGIN).replace("NAME", name))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv(plugins.ENV, raising=False)
    __import__(module)
    # gone from sys.modules after the test (the registries are restored by the fixture)
    monkeypatch.setitem(sys.modules, module, sys.modules.pop(module))
    assert plugins.used_outside([{"attack": name, "defense": "none"}])[0] == [(module, str(tmp_path / f"{module}.py"))]
    assert plugins.used_outside([{"attack": "dlg"}]) == ([], [], [])  # a sweep that uses none of it ships none
    toml = tmp_path / "s.toml"
    toml.write_text(f'[base]\nattack = "{name}"\ndataset = "digits"\nthreads = 1\n'
                    '[grid]\nflat_level = [0.2, 0.4]\n')
    assert cli.main(["sweep", str(toml), "--jobs", "2", "--quiet", "--out", str(tmp_path / "sw")]) == 0
    assert len((tmp_path / "sw" / "results.jsonl").read_text().splitlines()) == 2


def test_a_sweep_whose_names_come_from_a_notebook_cell_is_refused_in_one_sentence_before_any_point(tmp_path):
    code = textwrap.dedent(PLUGIN).replace("NAME", "cell-flat").replace(
        "from plugin_neighbour_for_leakattack import LEVEL", "LEVEL = 0.5") + textwrap.dedent(f'''
        import sys
        from leakattack import cli
        open({str(tmp_path / "s.toml")!r}, "w").write(
            '[base]\\nattack = "cell-flat"\\ndataset = "digits"\\nthreads = 1\\n[grid]\\nflat_level = [0.2, 0.4]\\n')
        args = ["sweep", {str(tmp_path / "s.toml")!r}, "--quiet", "--out", {str(tmp_path / "sw")!r}]
        print("CODE", cli.main(args + ["--jobs", "2"]), flush=True)
        print("ONE", cli.main(args + ["--jobs", "1"]), flush=True)  # in this process: it runs
    ''')
    env = {k: v for k, v in os.environ.items() if k != plugins.ENV}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert "CODE 2" in done.stdout and "ONE 0" in done.stdout, done.stdout + done.stderr
    error = [line for line in done.stderr.splitlines() if line.startswith("leakattack: error")]
    assert error == ["leakattack: error: the sweep uses attack 'cell-flat', registered by code this process ran "
                     "outside any file (a notebook cell, python -c), which its worker processes cannot import: define "
                     "it in a .py file and import that, or name the file in LEAKATTACK_PLUGINS, or run the sweep with "
                     "one job"], \
        done.stderr
    assert "Traceback" not in done.stderr
    assert len((tmp_path / "sw" / "results.jsonl").read_text().splitlines()) == 2


def test_a_module_not_on_the_worker_s_path_is_imported_from_its_file(tmp_path, monkeypatch):
    (tmp_path / "elsewhere_module_for_leakattack.py").write_text("VALUE = 7\n")
    name = "elsewhere_module_for_leakattack"
    monkeypatch.delitem(sys.modules, name, raising=False)
    plugins.import_modules([(name, str(tmp_path / f"{name}.py"))])  # tmp_path is not on sys.path
    assert sys.modules[name].VALUE == 7
    monkeypatch.delitem(sys.modules, name)
    (tmp_path / f"{name}.py").write_text("raise ValueError('broken')\n")
    with pytest.raises(plugins.UserError, match=rf"^module '{name}', which registered names the sweep uses .* could "
                                                r"not be imported \(ValueError: broken\) at .*:1$"):
        plugins.import_modules([(name, str(tmp_path / f"{name}.py"))])


@pytest.mark.parametrize("option, flag", [("time", "--time"), ("mode", "--mode")])
def test_a_plugin_option_whose_flag_begins_a_run_flag_reaches_the_attack(tmp_path, monkeypatch, capsys,
                                                                         fresh_registries, option, flag):
    """--time was read as an abbreviation of --time-limit (the attack got its default, unseen) and --mode was
    refused as ambiguous (--model, --model-param, ...), both listed by --help: the run flags argparse matched
    before the attacks' own flags were added."""
    name = f"plugin-{option}"
    text = PLUGIN.replace("from plugin_neighbour_for_leakattack import LEVEL", "LEVEL = 0.5").replace(
        "flat_level", option).replace("NAME", name)
    (tmp_path / "optplugin.py").write_text(textwrap.dedent(text))
    monkeypatch.setenv(plugins.ENV, str(tmp_path / "optplugin.py"))
    out = tmp_path / "run"
    assert cli.main(["run", "--attack", name, flag, "0.25", "--dataset", "digits", "--no-lpips", "--quiet",
                     "--out", str(out)]) == 0
    run = json.loads((out / "config.json").read_text())["run"]
    assert run["attack_params"] == {option: 0.25} and run.get("time_limit") is None
    assert cli.main(["run", "--dataset", "digits", "--iter", "2", "--no-lpips", "--quiet", "--out",
                     str(tmp_path / "abbreviated")]) == 0  # a run flag's own abbreviation still reads
    assert json.loads((tmp_path / "abbreviated" / "config.json").read_text())["run"]["iterations"] == 2


NEEDS_OPTION = '''
from leakattack.attacks import Attack, register_attack


class NeedsLevel(Attack):
    """A closed-form attack with an option that has no default; never run below."""

    name = "plugin-needs-level"
    closed_form = True

    def __init__(self, *, level):
        self.level = level

    def reconstruct(self, obs, *, monitor=None, monitor_every=10, progress=False):
        raise NotImplementedError


register_attack("plugin-needs-level", NeedsLevel)
'''


def test_a_plugin_closed_form_that_cannot_be_built_unasked_does_not_stop_another_attacks_run(
        tmp_path, monkeypatch, capsys, fresh_registries):
    """A run that rebuilt nothing asks every closed form whether it reads the message: one needing an option raised
    TypeError there, after the run's attack, and the run ended in a traceback without its folder."""
    (tmp_path / "needs.py").write_text(NEEDS_OPTION)
    monkeypatch.setenv(plugins.ENV, str(tmp_path / "needs.py"))
    out = tmp_path / "run"
    assert cli.main(["run", "--model", "lenet", "--dataset", "digits", "--iterations", "2", "--no-lpips", "--quiet",
                     "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "attack 'plugin-needs-level' (" in err and "could not be asked whether it reads this message (TypeError: " \
        in err and "left out of the closed forms named" in err, err
    assert json.loads((out / "metrics.json").read_text())["verdict"] == "not rebuilt"


def test_run_and_train_help_name_a_plugins_protocol(monkeypatch):
    """run --help listed the built-in protocols alone beside a plugin's (--attack, --model named theirs)."""
    from leakattack.cli.parser import build_parser
    from targets import protocols

    monkeypatch.setattr(protocols._PROTOCOLS, "_items", dict(protocols._PROTOCOLS._items))
    monkeypatch.setattr(protocols._PROTOCOLS, "_meta", dict(protocols._PROTOCOLS._meta))

    class Mine(protocols.FedAvg):
        """FedAvg under another name."""

    protocols.register_protocol("plugin-proto", Mine)
    for command in ("run", "train"):
        sub = build_parser()._subparsers._group_actions[0].choices[command]
        flag = next(a for a in sub._actions if "--protocol" in a.option_strings)
        assert "plugin-proto" in sub._get_formatter()._expand_help(flag), command
