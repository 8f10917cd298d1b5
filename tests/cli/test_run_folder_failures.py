"""A run that cannot write its folder says so in one sentence: a mount point as --out (refused before the attack,
since the folder is written beside it and renamed into place), a full disk (nothing half-written, no stray
folder); a run that runs out of memory says so, with no traceback and no folder; and a run stopped before its first
step says that it attacked nothing."""

from __future__ import annotations

import errno
import json
import os

import pytest

from leakattack import cli
from leakattack.errors import UserError
from leakattack.results import writable_out
from leakattack.results.runs import write_run_folder


def test_a_mount_point_as_out_is_refused_before_the_attack(tmp_path, monkeypatch, capsys):
    volume = tmp_path / "volume"
    volume.mkdir()
    real = os.path.ismount
    monkeypatch.setattr(os.path, "ismount", lambda p: str(p) == str(volume) or real(p))
    with pytest.raises(UserError, match=r"is a mount point, which a run cannot replace .* name a folder inside it"):
        writable_out(volume, beside=True)
    assert writable_out(volume / "run", beside=True) == volume / "run"
    assert cli.main(["run", "--dataset", "digits", "--iterations", "2", "--quiet", "--no-lpips",
                     "--out", str(volume)]) == 2
    assert "is a mount point" in capsys.readouterr().err and list(volume.iterdir()) == []


def test_a_full_disk_is_one_sentence_and_leaves_nothing(tmp_path):
    def write(path):
        (path / "metrics.json").write_text("{}")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with pytest.raises(UserError, match=r"^the run folder '.*run' could not be written \(No space left on device\); "
                                        r"nothing of it was kept$"):
        write_run_folder(tmp_path / "run", write)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("stop", [KeyboardInterrupt(), OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))],
                         ids=["ctrl-c", "full disk"])
def test_folders_made_for_a_run_that_was_not_written_are_removed(tmp_path, stop):
    """A write stopped by Ctrl-C or an error left the folders made above the run (results/runs/) behind, empty."""
    def write(path):
        (path / "metrics.json").write_text("{}")
        raise stop

    (tmp_path / "kept").mkdir()
    with pytest.raises((KeyboardInterrupt, UserError)):
        write_run_folder(tmp_path / "results" / "runs" / "run", write)
    with pytest.raises((KeyboardInterrupt, UserError)):
        write_run_folder(tmp_path / "kept" / "runs" / "run", write)
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["kept"]
    write_run_folder(tmp_path / "results" / "runs" / "run", lambda p: (p / "a.txt").write_text("done"))
    assert (tmp_path / "results" / "runs" / "run" / "a.txt").read_text() == "done"


def test_a_run_stopped_before_its_first_step_attacked_nothing(tmp_path):
    out = tmp_path / "run"
    assert cli.main(["run", "--dataset", "digits", "--time-limit", "0.001", "--quiet", "--no-lpips", "--threads", "1",
                     "--out", str(out)]) == 0
    m = json.loads((out / "metrics.json").read_text())
    if m["iterations"] == 0:  # the limit came before the first step (a fast machine may take one)
        assert m["attacked"] is False and m["nothing_attacked"].startswith("it stopped (time-limit) before its first")
    else:
        assert m["attacked"] is (m["nothing_attacked"] is None)


def test_an_allocation_that_does_not_fit_is_one_sentence_and_leaves_no_folder(tmp_path, monkeypatch, capsys):
    """L-BFGS's history made absurdly large, so that torch's own allocator refuses it: exit 2, one line naming the
    size torch asked for, and no run folder (a RuntimeError traceback before)."""
    from leakattack.attacks import lbfgs

    real = lbfgs.History.__init__
    monkeypatch.setattr(lbfgs.History, "__init__", lambda self, size, n, dtype, device:
                        real(self, size, n * 10 ** 12, dtype, device))
    out = tmp_path / "run"
    assert cli.main(["run", "--model", "linreg", "--sketch", "none", "--iterations", "3", "--quiet", "--no-lpips",
                     "--optimizer", "lbfgs", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("leakattack: error: out of memory: an allocation of ") and "Traceback" not in err
    assert err[-1].endswith("or --optimizer adam in place of L-BFGS need less") and not out.exists()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("err, said", [
    (RuntimeError("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: you "
                  "tried to allocate 40265318400 bytes. Error code 12 (Cannot allocate memory)"), " of 40.3 GB "),
    (MemoryError(), " did not fit"),
    (RuntimeError("mat1 and mat2 shapes cannot be multiplied (1x3 and 4x5)"), None),
    (ValueError("can't allocate memory: you tried to allocate 8 bytes"), None),
])
def test_only_allocation_failures_are_read_as_out_of_memory(err, said):
    text = cli.out_of_memory(err)
    assert (text is None) if said is None else (said in text and "\n" not in text)


@pytest.mark.parametrize("link", [False, True])
def test_files_put_in_the_out_folder_while_the_run_ran_are_kept_and_the_run_goes_beside_them(tmp_path, link):
    """The folder was checked before the attack only, then replaced whole: a note put there meanwhile, or a sweep
    started in it, was deleted, and the run exited 0."""
    import warnings

    from leakattack.config import RunConfig
    from leakattack.errors import SettingWarning
    from leakattack.experiment import run_attack

    real = tmp_path / "real"
    out = tmp_path / "out"
    if link:  # a link to a folder stays a link; the folder it points to is kept the same
        real.mkdir()
        out.symlink_to(real)
    where = real if link else out
    cfg = RunConfig(model="lenet", iterations=1, threads=1)

    def meanwhile(prepared):  # after the checks, before the attack: a note put into the folder
        where.mkdir(exist_ok=True)
        (where / "notes.txt").write_text("mine")

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _, folder = run_attack(cfg, out=out, with_lpips=False, prepared=meanwhile)
    assert sorted(e.name for e in where.iterdir()) == ["notes.txt"] and (where / "notes.txt").read_text() == "mine"
    assert folder == where.with_name(f"{where.name}-2") and (folder / "metrics.json").is_file()
    said = [str(w.message) for w in caught if issubclass(w.category, SettingWarning) and "came to" in str(w.message)]
    assert said == [f"while the run ran, '{where}' came to hold notes.txt, which a run does not write: it is left "
                    f"as it is, and the run is written to '{folder}'"]
    _, again = run_attack(cfg, out=folder, with_lpips=False)  # an earlier run's folder is replaced as before
    assert again == folder and not folder.with_name(f"{folder.name}-2").exists()


def test_a_file_put_at_the_out_path_while_the_run_ran_is_kept_and_the_run_goes_beside_it(tmp_path):
    import warnings

    from leakattack.config import RunConfig
    from leakattack.errors import SettingWarning
    from leakattack.experiment import run_attack

    out = tmp_path / "out"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _, folder = run_attack(RunConfig(model="lenet", iterations=1, threads=1), out=out, with_lpips=False,
                               prepared=lambda p: out.write_text("notes"))
    assert out.read_text() == "notes" and folder == tmp_path / "out-2" and (folder / "metrics.json").is_file()
    said = [str(w.message) for w in caught if issubclass(w.category, SettingWarning) and "while" in str(w.message)]
    assert said == [f"while the run ran, '{out}' became a file: it is left as it is, and the run is written to "
                    f"'{folder}'"]
