"""A researcher's own files through the command line: a model file that imports its neighbours, a model whose
gradient is not finite, and the run folder's record of the files it read (path, size, SHA-256)."""

import hashlib
import json
import textwrap

import torch

import targets
from leakattack import cli

SMALL = ["--dataset", "digits", "--iterations", "2", "--threads", "1", "--no-lpips", "--quiet"]

HELPER = """
from torch import nn


def block(n_in, n_out):
    return nn.Sequential(nn.Flatten(), nn.Linear(n_in, n_out))
"""

NET = """
from torch import nn

from ownhelpers_for_leakattack import block


class Net(nn.Module):
    def __init__(self, in_shape, num_classes):
        super().__init__()
        n = in_shape[0] * in_shape[1] * in_shape[2]
        self.body = block(n, 8)
        self.bn = nn.BatchNorm1d(8)
        self.fc = nn.Linear(8, num_classes)

    def forward(self, x):
        return self.fc(self.bn(self.body(x)).tanh())
"""


def test_a_model_file_imports_its_neighbours_and_the_run_records_what_it_read(tmp_path, capsys):
    (tmp_path / "ownhelpers_for_leakattack.py").write_text(textwrap.dedent(HELPER))
    (tmp_path / "net.py").write_text(textwrap.dedent(NET))
    victim = targets.get_model(f"{tmp_path / 'net.py'}:Net", num_classes=10, in_shape=(1, 28, 28), seed=0)
    torch.save(victim.model.state_dict(), tmp_path / "w.pt")
    out = tmp_path / "run"
    assert cli.main(["run", "--model", f"{tmp_path / 'net.py'}:Net", "--weights", str(tmp_path / "w.pt"),
                     "--out", str(out), *SMALL]) == 0
    files = json.loads((out / "config.json").read_text())["files"]
    for key, name in (("model", "net.py"), ("weights", "w.pt")):
        data = (tmp_path / name).read_bytes()
        assert files[key] == {"path": str((tmp_path / name).resolve()), "sha256": hashlib.sha256(data).hexdigest(),
                              "bytes": len(data)}


def test_a_model_whose_gradient_is_not_finite_is_refused_and_nothing_is_written(tmp_path, capsys):
    (tmp_path / "ownhelpers_for_leakattack.py").write_text(textwrap.dedent(HELPER))
    (tmp_path / "net.py").write_text(textwrap.dedent(NET))
    victim = targets.get_model(f"{tmp_path / 'net.py'}:Net", num_classes=10, in_shape=(1, 28, 28), seed=0)
    state = victim.model.state_dict()
    state["bn.running_var"] = -torch.ones(8)  # a broken checkpoint: eval mode takes the root of a negative number
    torch.save(state, tmp_path / "broken.pt")
    out = tmp_path / "run"
    assert cli.main(["run", "--model", f"{tmp_path / 'net.py'}:Net", "--weights", str(tmp_path / "broken.pt"),
                     "--out", str(out), *SMALL]) == 2
    err = capsys.readouterr().err
    assert "the client's gradient holds" in err and "NaN or infinite" in err and "Traceback" not in err
    assert not out.exists()


def test_model_seed_beside_a_full_state_dict_is_warned_of(tmp_path, capsys):
    torch.save(targets.get_model("lenet", num_classes=10, in_shape=(1, 28, 28), seed=3).model.state_dict(),
               tmp_path / "w.pt")
    assert cli.main(["run", "--model", "lenet", "--weights", str(tmp_path / "w.pt"), "--model-seed", "5",
                     "--out", str(tmp_path / "run"), *SMALL]) == 0
    assert "--model-seed 5 changes nothing" in capsys.readouterr().err
