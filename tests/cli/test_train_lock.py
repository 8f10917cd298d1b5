"""One `leakattack train` per run folder: a second one, started while the first trains, is refused in one sentence
naming the owner and leaves the folder as it was (it read the first's files as a stopped run and appended its own
rounds to them, so that the folder could no longer be continued)."""

import socket
import subprocess
import sys

from leakattack import cli
from leakattack.training import TRAIN_LOCK

TRAIN = ["train", "--protocol", "sketched", "--clients", "3", "--quiet", "--threads", "1"]


def _snapshot(root):
    return {p.relative_to(root): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _live_owner(folder):
    """A live process written into the folder's lock, as a training that is running writes itself."""
    owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    (folder / TRAIN_LOCK).write_text(f"{owner.pid} {socket.gethostname()}\n")
    return owner


def test_a_training_leaves_no_lock_and_a_second_one_while_it_trains_is_refused(tmp_path, capsys):
    assert cli.main(TRAIN + ["--rounds", "2", "--out", str(tmp_path)]) == 0
    folder = tmp_path / "sketched"
    assert not (folder / TRAIN_LOCK).exists()
    owner = _live_owner(folder)
    try:
        before = _snapshot(folder)
        capsys.readouterr()
        assert cli.main(TRAIN + ["--rounds", "4", "--out", str(tmp_path)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"is in use by another training run (process {owner.pid} on" in err[0], err
        assert _snapshot(folder) == before
    finally:
        owner.kill()
        owner.wait()
    # the owner gone, its lock is stale: the training continues the two rounds kept
    assert cli.main(TRAIN + ["--rounds", "3", "--out", str(tmp_path)]) == 0
    assert len((folder / "train.jsonl").read_text().splitlines()) == 3
    assert not (folder / TRAIN_LOCK).exists()


def test_a_refused_training_into_a_new_folder_leaves_no_folder(tmp_path, capsys):
    """A refusal that comes once the folder is locked (a stored run of another setting) removes what it made."""
    out = tmp_path / "new" / "deeper"
    assert cli.main(TRAIN + ["--rounds", "2", "--out", str(tmp_path / "first")]) == 0
    (tmp_path / "first" / "sketched" / "protocol.json").write_text("{}")  # not a run of leakattack train
    assert cli.main(TRAIN + ["--rounds", "2", "--out", str(tmp_path / "first")]) == 2
    assert not (tmp_path / "first" / "sketched" / TRAIN_LOCK).exists()
    assert cli.main(TRAIN + ["--rounds", "0", "--out", str(out)]) == 2  # refused before any folder is made
    assert not (tmp_path / "new").exists()
