"""Malformed files and out-of-range settings that reach the command line: one sentence on stderr, exit code 2, no
traceback, nothing written (a sweep file whose [base] or [sweep] is not a table, a damaged sweep.json under
figures, a model or plugin file that exits as it is imported, local epochs that make rounds of more steps than
--local-steps allows)."""

import json

import pytest
from test_bad_input import _refused  # tests/cli is on the path
from test_read_commands_input import POINT, _sweep

from leakattack import cli

GRID = '[grid]\nseed = [0]\n'


@pytest.mark.parametrize("text,said", [
    ('base = 3\n' + GRID, "[base] must be a table of NAME = VALUE lines, got base = 3"),
    ('sweep = "fast"\n' + GRID, "[sweep] must be a table of NAME = VALUE lines, got sweep = 'fast'"),
    ('[[base]]\nmodel = "lenet"\n' + GRID, "[base] must be a table of NAME = VALUE lines, got base = [{'model': "
                                           "'lenet'}]"),
])
def test_a_sweep_file_whose_base_or_sweep_is_not_a_table_is_one_sentence(tmp_path, capsys, text, said):
    """They were read with .items(): an AttributeError traceback."""
    (tmp_path / "grid.toml").write_text(text)
    for extra in (["--dry-run"], ["--out", str(tmp_path / "sweep")]):
        _refused(["sweep", str(tmp_path / "grid.toml"), "--quiet", *extra], said, tmp_path, capsys)


@pytest.mark.parametrize("text,said", [
    ("{not json", "sweep.json' is not JSON"),
    ("", "sweep.json' is not JSON"),
    ("[1, 2]", "sweep.json' holds a JSON list, not the object leakattack writes there"),
])
def test_figures_refuses_a_damaged_sweep_json_in_one_sentence(tmp_path, capsys, text, said):
    """figures read sweep.json raw (a JSONDecodeError or AttributeError traceback) where report names it."""
    sweep = _sweep(tmp_path / "sweep", json.dumps(POINT) + "\n")
    (sweep / "sweep.json").write_text(text)
    _refused(["figures", str(sweep)], said, tmp_path, capsys)
    _refused(["report", str(sweep), "--out", str(tmp_path / "r.html")], said, tmp_path, capsys)


def test_figures_refuses_a_sweep_json_that_is_a_folder(tmp_path, capsys):
    sweep = _sweep(tmp_path / "sweep", json.dumps(POINT) + "\n")
    (sweep / "sweep.json").mkdir()
    _refused(["figures", str(sweep)], "sweep.json' is a folder, not the file leakattack writes there", tmp_path,
             capsys)


@pytest.mark.parametrize("code,said", [("raise SystemExit(3)\n", "sys.exit(3)"),
                                       ("import sys\nsys.exit('usage: net.py DATA')\n",
                                        "sys.exit('usage: net.py DATA')"),
                                       ("import sys\nsys.exit()\n", "sys.exit()")])
def test_a_model_file_that_exits_as_it_is_imported_is_one_sentence(tmp_path, capsys, code, said):
    """A training script given as --model file.py:Net runs its top level on import; its sys.exit ended leakattack
    with that code and no word of why (SystemExit passed the import's `except Exception`)."""
    net = tmp_path / "models" / "net.py"
    net.parent.mkdir()
    net.write_text(code)
    work = tmp_path / "work"
    work.mkdir()
    said = (f"model file '{net}' could not be imported (SystemExit: its top level called {said}; script code "
            "belongs under if __name__ == '__main__')")
    _refused(["run", "--model", f"{net}:Net", "--iterations", "2", "--quiet", "--no-lpips",
              "--out", str(work / "run")], said, work, capsys)
    _refused(["list", "--model", f"{net}:Net"], said, work, capsys)


def test_a_plugin_file_that_exits_as_it_is_imported_is_one_sentence(tmp_path, capsys, monkeypatch):
    plugin = tmp_path / "plugin_that_exits.py"
    plugin.write_text("raise SystemExit(4)\n")
    monkeypatch.setenv("LEAKATTACK_PLUGINS", str(plugin))
    work = tmp_path / "work"
    work.mkdir()
    _refused(["list"], f"plugin file '{plugin}' (LEAKATTACK_PLUGINS) could not be imported (SystemExit: its top "
                       "level called sys.exit(4)", work, capsys)


@pytest.fixture
def no_client_trains(monkeypatch):
    """Drawing a client's epochs fails the test: a refusal must come before the first round's data (without it, a
    million epochs were drawn, and then trained, for hours)."""
    from targets.protocols.base import Protocol

    def trained(self, t, c):
        raise AssertionError(f"client {c}'s epochs of round {t} were drawn before the settings were checked")

    monkeypatch.setattr(Protocol, "epoch_orders", trained)


@pytest.mark.parametrize("command", ["run", "train"])
def test_local_epochs_beyond_the_local_steps_bound_are_refused_before_a_round(tmp_path, capsys, no_client_trains,
                                                                              command):
    """Each local epoch is at least one local step: --local-epochs had no bound where --local-steps has
    [1, 1000000], so a typo trained (or re-simulated for the attack) for days."""
    argv = ["run", "--iterations", "2", "--no-lpips"] if command == "run" else ["train", "--rounds", "1"]
    argv += ["--protocol", "fedavg", "--clients", "2", "--quiet", "--out", str(tmp_path / "out")]
    _refused(argv + ["--local-epochs", "100000000"], "local epochs E must lie in [0, 1000000], got 100000000",
             tmp_path, capsys)
    # within the bound, yet E ceil(n_c/B) steps a round: 1,000,000 epochs of 23 batches
    _refused(argv + ["--local-epochs", "1000000"], "--local-epochs 1000000 gives client 0 23,000,000 local steps "
             "per round (E ceil(n_c/B) for its 719 images in batches of --client-batch 32), more than the 1,000,000 "
             "that --local-steps allows", tmp_path, capsys)


def test_a_sweep_point_with_too_many_local_epochs_is_refused_before_it_runs(tmp_path, capsys, no_client_trains):
    (tmp_path / "grid.toml").write_text('[base]\nprotocol = "fedavg"\niterations = 1\n'
                                        '[grid]\nprotocol_spec = [{clients = 2, local_epochs = 100000000}]\n')
    _refused(["sweep", str(tmp_path / "grid.toml"), "--dry-run", "--quiet"], "local epochs E must lie in "
             "[0, 1000000], got 100000000", tmp_path, capsys)


def test_the_shared_reader_names_the_file(tmp_path):
    from leakattack.errors import UserError
    from leakattack.results import read_object

    path = tmp_path / "metrics.json"
    path.write_bytes(b"\xff\xfe")
    with pytest.raises(UserError, match=r"metrics.json' is not JSON$"):
        read_object(path)
    path.write_text('{"psnr": 1}')
    assert read_object(path) == {"psnr": 1}


@pytest.mark.parametrize("args,said", [
    (["run", "--time-limit", "-1m"], "time limit must be a positive duration such as 90s, 10m, 1h, 1h30m or a "
                                     "number of seconds, got '-1m'"),
    (["run", "--tv", "-1e-3"], "TV weight must be non-negative, got -0.001"),
    (["run", "--lr", "-.5"], "learning rate must be a positive number, got -0.5"),
])
def test_a_negative_value_that_is_no_plain_number_is_refused_for_what_it_is(tmp_path, capsys, args, said):
    """argparse takes only plain numbers (-2, -0.5) as values after a flag: '-1m' and '-1e-3' were read as unknown
    flags, and the refusal said only 'expected one argument'."""
    _refused([*args, "--quiet", "--no-lpips", "--out", str(tmp_path / "run")], said, tmp_path, capsys)


def test_a_defense_given_twice_is_one_sentence_that_joins_its_steps(tmp_path, capsys):
    """The second --defense replaced the first unseen: clip:C=1 then gaussian:z=1 was refused as 'z needs a clip',
    and two noises ran as the last alone."""
    _refused(["run", "--defense", "clip:C=1", "--defense", "gaussian:z=1", "--out", str(tmp_path / "r")],
             "--defense is given twice ('clip:C=1' and 'gaussian:z=1'): give the steps once, joined by ',' (--defense "
             "'clip:C=1,gaussian:z=1')", tmp_path, capsys)
    out = tmp_path / "same"  # the same spec twice says one thing
    assert cli.main(["run", "--defense", "clip:C=1", "--defense", "clip:C=1", "--iterations", "1", "--no-lpips",
                     "--quiet", "--out", str(out)]) == 0
    assert json.loads((out / "metrics.json").read_text())["defense"] == "clip:C=1.0@before_sketch"


def test_a_learning_rate_beyond_the_attack_dtype_is_one_sentence(tmp_path, capsys):
    """--lr 1e39 in float32 was a RuntimeError traceback from the optimiser's first step (it cannot be a float32)."""
    out = tmp_path / "run"
    code = cli.main(["run", "--dataset", "digits", "--optimizer", "gd", "--lr", "1e39", "--dtype", "float32",
                 "--iterations", "2", "--quiet", "--no-lpips", "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0 and not out.exists()
    assert err.endswith("the learning rate, 1e+39, is beyond the largest float32 number (3.4e+38), and the attack "
                        "runs in float32: give a smaller --lr, or --dtype float64")


def test_a_prior_weight_beyond_the_attack_dtype_names_both_ways_to_give_it(tmp_path, capsys):
    """--prior tv:1e39 in float32 was told to give a smaller --tv, a flag it had not given."""
    code = cli.main(["run", "--prior", "tv:1e39", "--dtype", "float32", "--iterations", "2", "--quiet", "--no-lpips",
                     "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.endswith("the weight of prior 'tv', 1e+39, is beyond the largest float32 number "
                                      "(3.4e+38), and the attack runs in float32: give a smaller --tv (or --prior "
                                      "tv:W), or --dtype float64"), err


def test_list_refuses_a_class_that_names_an_unknown_recipe_as_run_does(tmp_path, capsys):
    """`leakattack list --model file.py:Net` printed "recipe fast" with exit code 0 where run refuses the class."""
    net = tmp_path / "models" / "net.py"
    net.parent.mkdir()
    net.write_text("import torch.nn as nn\n\n\nclass Net(nn.Module):\n    leakattack_recipe = 'fast'\n\n"
                   "    def __init__(self, num_classes=10, in_shape=(3, 32, 32)):\n        super().__init__()\n"
                   "        self.fc = nn.Linear(3 * 32 * 32, num_classes)\n\n"
                   "    def forward(self, x):\n        return self.fc(x.flatten(1))\n")
    work = tmp_path / "work"
    work.mkdir()
    said = f"model '{net}:Net' names the attack recipe 'fast'; choose one of: dlg, ig"
    _refused(["list", "--model", f"{net}:Net"], said, work, capsys)
    _refused(["run", "--model", f"{net}:Net", "--iterations", "2", "--quiet", "--no-lpips",
              "--out", str(work / "run")], said, work, capsys)


@pytest.mark.parametrize("attribute, said", [
    ("leakattack_head = 'nope'", "leakattack_head of '{spec}' (class Net at {net}:4) names no submodule 'nope'; "
                                 "its nn.Linear layers: fc"),
    ("leakattack_head = 'conv'", "leakattack_head of '{spec}' names a Conv2d, not an nn.Linear"),
    ("leakattack_loss = 3", "leakattack_loss of '{spec}' must take (output, target)"),
    ("leakattack_loss = staticmethod(lambda out: out.sum())", "leakattack_loss of '{spec}' must take (output, target)"),
])
def test_list_refuses_a_class_whose_head_or_loss_run_refuses(tmp_path, capsys, attribute, said):
    """`leakattack list --model file.py:Net` printed a class whose head or loss cannot work with exit code 0,
    where run refuses it in one sentence."""
    net = tmp_path / "models" / "net.py"
    net.parent.mkdir()
    net.write_text("import torch\nimport torch.nn as nn\n\nclass Net(nn.Module):\n"
                   f"    {attribute}\n\n"
                   "    def __init__(self, num_classes=10):\n        super().__init__()\n"
                   "        self.conv = nn.Conv2d(3, 2, 3)\n        self.fc = nn.Linear(2 * 30 * 30, num_classes)\n\n"
                   "    def forward(self, x):\n        return self.fc(torch.sigmoid(self.conv(x)).flatten(1))\n")
    work = tmp_path / "work"
    work.mkdir()
    said = said.format(spec=f"{net}:Net", net=net)
    _refused(["list", "--model", f"{net}:Net"], said, work, capsys)
    _refused(["run", "--model", f"{net}:Net", "--iterations", "2", "--quiet", "--no-lpips",
              "--out", str(work / "run")], said, work, capsys)
