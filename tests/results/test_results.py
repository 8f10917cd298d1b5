"""Atomic writes of run files, and tensor files read back without running code."""

import os
import stat
import subprocess
import sys

import pytest
import torch

from leakattack import results
from leakattack.errors import UserError
from leakattack.results import runs


def test_atomic_write_leaves_no_temporary_and_uses_normal_permissions(tmp_path):
    path = tmp_path / "sub" / "metrics.json"
    results.write_json(path, {"psnr": float("inf"), "ssim": 0.5})
    assert path.read_text().strip().startswith("{")
    assert '"psnr": null' in path.read_text()  # non-finite floats become null, never invalid JSON
    assert [p.name for p in path.parent.iterdir()] == ["metrics.json"]
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~mask


def test_atomic_write_replaces_whole_file(tmp_path):
    path = tmp_path / "a.txt"
    results.atomic_write_text(path, "x" * 1000)
    results.atomic_write_text(path, "short")
    assert path.read_text() == "short"


def test_read_jsonl_skips_blank_lines(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text('{"round": 1}\n\n{"round": 2}\n')
    assert results.read_jsonl(path) == [{"round": 1}, {"round": 2}]


def test_read_jsonl_leaves_out_a_torn_last_line_and_keeps_a_whole_one(tmp_path):
    """An append cut short by a kill leaves an unterminated line that is not JSON; one whose newline alone is
    missing is a whole row."""
    path = tmp_path / "train.jsonl"
    path.write_text('{"round": 1}\n{"round": 2, "tra')
    assert results.read_jsonl(path) == [{"round": 1}]
    path.write_text('{"round": 1}\n{"round": 2}')
    assert results.read_jsonl(path) == [{"round": 1}, {"round": 2}]


def test_tensor_files_round_trip_on_the_cpu(tmp_path):
    x = torch.rand(2, 3, generator=torch.Generator().manual_seed(0))
    results.write_tensors(tmp_path / "p.pt", {"recon": x, "truth": [x, x]})
    back = results.load_tensors(tmp_path / "p.pt")
    assert torch.equal(back["recon"], x) and torch.equal(back["truth"][1], x) and back["recon"].device.type == "cpu"
    assert [p.name for p in tmp_path.iterdir()] == ["p.pt"]


def test_a_tensor_file_holding_other_objects_is_refused_without_running_its_code(tmp_path, code_in_file):
    path = tmp_path / "p.pt"
    torch.save({"recon": torch.zeros(1), "extra": code_in_file()}, path)
    with pytest.raises(UserError, match="objects other than tensors") as err:
        results.load_tensors(path)
    assert code_in_file.loaded == [] and "\n" not in str(err.value)


def test_default_run_dir_is_unique_within_one_second(tmp_path, monkeypatch):
    monkeypatch.setattr(runs.time, "strftime", lambda fmt: "20240101-000000")
    first = results.default_run_dir("lenet", "srht", root=tmp_path)
    first.mkdir(parents=True)
    second = results.default_run_dir("lenet", "srht", root=tmp_path)
    assert first.name == "20240101-000000-lenet-srht" and second.name == "20240101-000000-lenet-srht-2"


def test_results_imports_only_leaf_modules_of_leakattack():
    code = ("import sys, leakattack.results; "
            "print(sorted(m for m in sys.modules if m.startswith('leakattack')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    mods = eval(out)
    allowed = {"leakattack", "leakattack.errors", "leakattack.registry", "leakattack.jsonable", "leakattack.rebuilt",
               "leakattack.torchfile"}
    assert [m for m in mods if m not in allowed and not m.startswith("leakattack.results")] == []
