"""Files that torch.load cannot read are refused in one sentence that says what the file is, wherever the command
line reads a torch file: a weights file, a message, a checkpoint, a sweep's reconstructions."""

from __future__ import annotations

import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from leakattack import cli
from leakattack.errors import UserError
from leakattack.torchfile import load_torch_file, unreadable

ROOT = Path(__file__).resolve().parents[2]
SWEEP = ROOT / "results" / "sweeps" / "defense_sweep"


def _kinds(tmp: Path) -> dict[str, Path]:
    """One file of each kind torch.load refuses, and what the sentence says of it."""
    torch.save({"w": torch.zeros(3)}, tmp / "whole.pt")
    whole = (tmp / "whole.pt").read_bytes()
    files = {
        "is empty": b"",
        "is a text file, not a torch file (torch.save)": "model.weight 0.1 0.2\nnaïve\n".encode(),
        "is a damaged torch file: its zip archive cannot be read": whole[: len(whole) // 2],
        "is a pickle that torch.load cannot read as a torch file": pickle.dumps({"a": {1, 2}}),
        "is not a torch file (torch.save)": bytes(range(256)) * 4,
    }
    out = {}
    for i, (said, data) in enumerate(files.items()):
        (tmp / f"f{i}.pt").write_bytes(data)
        out[said] = tmp / f"f{i}.pt"
    np.save(tmp / "a.npy", np.zeros(3))
    out["is a NumPy file (numpy.save), not a torch file (torch.save)"] = tmp / "a.npy"
    # a whole zip archive that is not torch's was called a damaged torch file
    np.savez(tmp / "a.npz", images=np.zeros((1, 3, 4, 4)))
    out["is a NumPy archive (numpy.savez), not a torch file (torch.save)"] = tmp / "a.npz"
    import zipfile

    with zipfile.ZipFile(tmp / "z.pt", "w") as archive:
        archive.writestr("weights.txt", "0.1 0.2")
    out["is a zip archive, not a torch file (torch.save): it holds no data.pkl"] = tmp / "z.pt"
    return out


def test_each_kind_of_unreadable_file_is_named(tmp_path):
    for said, path in _kinds(tmp_path).items():
        with pytest.raises(UserError) as err:
            load_torch_file(path, f"file '{path}'")
        assert str(err.value).startswith(f"file '{path}' {said}"), (said, str(err.value))
        assert "\n" not in str(err.value)
        assert unreadable(path).startswith(said)


def test_a_text_file_cut_inside_a_character_is_still_text(tmp_path):
    path = tmp_path / "t.pt"
    path.write_bytes(("é" * 300).encode())  # 600 bytes: the 512th byte falls inside a character
    assert unreadable(path).startswith("is a text file")


def test_a_torch_file_is_read_and_objects_are_refused(tmp_path):
    torch.save({"w": torch.arange(3.0)}, tmp_path / "ok.pt")
    assert torch.equal(load_torch_file(tmp_path / "ok.pt", "x")["w"], torch.arange(3.0))
    torch.save(torch.nn.Linear(2, 2), tmp_path / "model.pt")
    with pytest.raises(UserError, match=r"^x holds objects other than tensors and plain containers; it was not "
                                        r"loaded: save it so$"):
        load_torch_file(tmp_path / "model.pt", "x", objects_hint=": save it so")


def test_weights_given_as_a_text_file_are_refused_in_one_sentence(tmp_path, capsys):
    weights = tmp_path / "w.pt"
    weights.write_text("conv1.weight: [0.1, 0.2]\n")
    out = tmp_path / "run"
    assert cli.main(["run", "--model", "lenet", "--weights", str(weights), "--iterations", "1", "--no-lpips",
                     "--quiet", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"leakattack: error: weights file '{weights}' is a text file, not a torch file (torch.save)"
    assert not out.exists()


@pytest.mark.parametrize("damage, said", [(lambda b: b[:300], "is a damaged torch file"),
                                          (lambda b: b"results\n", "is a text file")], ids=["cut", "text"])
def test_a_damaged_reconstruction_in_a_sweep_is_one_sentence_in_report_and_figures(tmp_path, capsys, damage, said):
    folder = tmp_path / "sweep"
    shutil.copytree(SWEEP, folder)
    for pt in sorted((folder / "points").glob("*.pt")):
        pt.write_bytes(damage(pt.read_bytes()))
    page = tmp_path / "audit.html"
    assert cli.main(["report", str(folder), "--out", str(page)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "/points/" in err[0] and said in err[0], err
    assert not page.exists()
    figures = sorted(p.name for p in (folder / "figures").iterdir())
    assert cli.main(["figures", str(folder)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "/points/" in err[0] and said in err[0], err
    assert sorted(p.name for p in (folder / "figures").iterdir()) == figures
