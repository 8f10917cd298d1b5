"""Default run folders say what was attacked: <stamp>-<model>-<sketch>-<dataset>[-<defense>], every part safe for
file names, unique within one second."""

import json
import os
import re

import pytest

from leakattack.results import default_run_dir, runs
from leakattack.results.runs import defense_part, model_part, run_folder_name, safe_part

STAMP = "20240101-000000"


@pytest.fixture
def frozen_clock(monkeypatch):
    monkeypatch.setattr(runs.time, "strftime", lambda fmt: STAMP)


def test_the_name_holds_model_sketch_dataset_and_defense(tmp_path, frozen_clock):
    path = default_run_dir("lenet", "srht", "photos", "clip:C=1,gaussian:z=1.1@after_sketch", root=tmp_path)
    assert path == tmp_path / f"{STAMP}-lenet-srht-photos-clip1-gaussz1.1"


def test_without_a_defense_the_name_ends_with_the_dataset(tmp_path, frozen_clock):
    for spec in ("", "none", None):
        assert default_run_dir("resnet18", "countsketch", "imagefolder", spec, root=tmp_path).name == \
            f"{STAMP}-resnet18-countsketch-imagefolder"


def test_a_second_run_in_the_same_second_gets_a_suffix(tmp_path, frozen_clock):
    first = default_run_dir("lenet", "srht", "digits", "clip:C=1", root=tmp_path)
    first.mkdir()
    second = default_run_dir("lenet", "srht", "digits", "clip:C=1", root=tmp_path)
    second.mkdir()
    third = default_run_dir("lenet", "srht", "digits", "clip:C=1", root=tmp_path)
    assert [p.name for p in (first, second, third)] == [f"{STAMP}-lenet-srht-digits-clip1{s}" for s in ("", "-2", "-3")]


@pytest.mark.parametrize("model,part", [("path/to/net.py:Net", "net-Net"), ("nets.py:Net", "nets-Net"),
                                        ("my_pkg.models.small:TinyNet", "small-TinyNet"),
                                        (r"C:\models\net.py:Net", "net-Net"), ("lenet", "lenet")])
def test_a_user_model_is_named_by_its_file_or_module_and_class(model, part):
    assert model_part(model) == part


@pytest.mark.parametrize("spec,part", [
    ("clip:C=1", "clip1"),
    ("clip:C=1,gaussian:z=1.1@after_sketch", "clip1-gaussz1.1"),
    ("per_example:C=0.5,gaussian:sigma=1e-3", "pex0.5-gausssd1e-3"),
    ("laplace:b=0.01@after_sketch", "lapb0.01"),
    ("prune:p=0.9,quantize:bits=4", "prunep0.9-quantbits4"),
    (" clip:C=2 , gaussian:z=1 ", "clip2-gaussz1"),
])
def test_a_defense_is_summarised_short(spec, part):
    assert defense_part(spec) == part


def test_a_long_defense_is_cut_and_marked():
    part = defense_part(",".join(f"clip:C={i}" for i in range(1, 20)))
    assert len(part) <= runs.MAX_DEFENSE_CHARS + 1 and part.endswith("+") and part.startswith("clip1-clip2-")


@pytest.mark.parametrize("text", ["a/b", "a:b", "a b", "a\\b", "../x", ".hidden", "-x-", "a*?<>|\"b"])
def test_every_part_is_safe_for_file_names(text):
    part = safe_part(text)
    assert re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._+-]*", part) and ".." not in part.strip("."), part


def test_a_name_of_odd_parts_is_one_folder_level():
    name = run_folder_name("../../etc:passwd", "my sketch", "data/set", "clip:C=1@before_sketch")
    assert "/" not in name and ":" not in name and " " not in name and not name.startswith(".")
    assert name == "etc-passwd-my-sketch-data-set-clip1"


def test_a_run_folder_is_written_whole_or_not_at_all(tmp_path):
    from leakattack.results import write_run_folder

    folder = tmp_path / "run"
    write_run_folder(folder, lambda p: (p / "a.txt").write_text("first"))
    write_run_folder(folder, lambda p: (p / "b.txt").write_text("second"))  # replaces the earlier run
    assert sorted(p.name for p in folder.iterdir()) == ["b.txt"]

    def interrupted(p):
        (p / "c.txt").write_text("half")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_run_folder(folder, interrupted)
    assert sorted(p.name for p in folder.iterdir()) == ["b.txt"]
    assert [p.name for p in tmp_path.iterdir()] == ["run"]  # no temporary folder left behind


def test_ctrl_c_between_the_renames_that_replace_an_earlier_run_leaves_the_new_run_whole(tmp_path, monkeypatch):
    """The earlier run is moved aside, then the new one moved in: a signal between the two is held until both are
    done (it left the folder missing, the earlier run in a hidden .old folder nothing removed)."""
    import os
    import signal

    from leakattack.results import write_run_folder

    folder = tmp_path / "run"
    write_run_folder(folder, lambda p: (p / "a.txt").write_text("first"))
    real = os.replace
    calls = []

    def replace_then_interrupt(src, dst):
        real(src, dst)
        calls.append(dst)
        if len(calls) == 1:  # the earlier run just moved aside
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(runs.os, "replace", replace_then_interrupt)
    monkeypatch.setattr(runs, "_exchange", lambda a, b: False)  # a system without renameat2: two renames
    with pytest.raises(KeyboardInterrupt):
        write_run_folder(folder, lambda p: (p / "b.txt").write_text("second"))
    assert len(calls) == 2
    assert sorted(p.name for p in folder.iterdir()) == ["b.txt"]
    assert [p.name for p in tmp_path.iterdir()] == ["run"]  # the earlier run's .old folder removed


def test_an_out_that_is_a_symlink_stays_one_and_its_target_is_written(tmp_path):
    """A link to a folder on another disk: the run lands in the target, and the link is not replaced by a folder."""
    from leakattack.results import write_run_folder

    target, link = tmp_path / "disk" / "run", tmp_path / "run"
    target.mkdir(parents=True)
    (target / "old.txt").write_text("earlier run")
    link.symlink_to(target, target_is_directory=True)
    assert write_run_folder(link, lambda p: (p / "a.txt").write_text("new")) == link
    assert link.is_symlink() and link.resolve() == target.resolve()
    assert sorted(q.name for q in target.iterdir()) == ["a.txt"]
    assert sorted(q.name for q in target.parent.iterdir()) == ["run"]  # no temporary folder left beside it
    dangling = tmp_path / "later"
    dangling.symlink_to(tmp_path / "disk" / "later", target_is_directory=True)
    write_run_folder(dangling, lambda p: (p / "b.txt").write_text("new"))
    assert dangling.is_symlink() and (tmp_path / "disk" / "later" / "b.txt").read_text() == "new"


def test_a_fresh_run_folder_never_replaces_one_another_process_wrote_since(tmp_path):
    """Two runs that end in the same second pick the same default name; the second takes the next one."""
    from leakattack.results import write_run_folder

    folder = tmp_path / f"{STAMP}-lenet-srht-digits"
    assert write_run_folder(folder, lambda p: (p / "a.txt").write_text("first"), fresh=True) == folder
    second = write_run_folder(folder, lambda p: (p / "b.txt").write_text("second"), fresh=True)
    third = write_run_folder(folder, lambda p: (p / "c.txt").write_text("third"), fresh=True)
    assert (second.name, third.name) == (f"{folder.name}-2", f"{folder.name}-3")
    assert [sorted(q.name for q in f.iterdir()) for f in (folder, second, third)] == [["a.txt"], ["b.txt"], ["c.txt"]]
    assert sorted(p.name for p in tmp_path.iterdir()) == [folder.name, second.name, third.name]


def test_runs_ending_in_the_same_second_keep_both_folders(tmp_path, monkeypatch):
    from leakattack import experiment
    from leakattack.config import RunConfig

    taken = tmp_path / "runs" / f"{STAMP}-lenet-srht-digits"
    monkeypatch.setattr(experiment, "default_run_dir", lambda *args, **kwargs: taken)  # chosen before the other's write
    firsts = [experiment.run_attack(RunConfig(model="lenet", dataset="digits", iterations=2, image_index=i),
                                    with_lpips=False)[1] for i in (0, 1)]
    assert [f.name for f in firsts] == [taken.name, f"{taken.name}-2"]
    assert [json.loads((f / "config.json").read_text())["run"]["image_index"] for f in firsts] == [0, 1]


def test_a_default_name_taken_during_the_write_takes_the_next_number(tmp_path, monkeypatch):
    """A run without --out whose default name's -2 is taken by another process while it writes becomes -3, not
    -2-2: the suffix is chosen when the folder is made."""
    from leakattack import experiment
    from leakattack.config import RunConfig

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(runs.time, "strftime", lambda fmt, *args: STAMP)
    base = tmp_path / "results" / "runs" / f"{STAMP}-lenet-srht-digits"
    base.mkdir(parents=True)
    write = experiment.write_run

    def another_process_first(outcome, folder, **kwargs):
        base.with_name(f"{base.name}-2").mkdir()
        return write(outcome, folder, **kwargs)

    monkeypatch.setattr(experiment, "write_run", another_process_first)
    folder = experiment.run_attack(RunConfig(model="lenet", dataset="digits", iterations=2), with_lpips=False)[1]
    assert folder.resolve() == base.with_name(f"{base.name}-3")
    assert (folder / "metrics.json").is_file()


def test_an_earlier_run_is_swapped_out_in_one_step_where_the_system_can(tmp_path, monkeypatch):
    """renameat2's exchange puts the new run in place and the earlier one aside at once: no moment without a run
    at the name, and no second rename (a SIGKILL between two renames left the folder missing)."""
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "one").write_text("1")
    if not runs._exchange(a, b):
        pytest.skip("this system or file system has no renameat2 exchange (the two-rename path is tested above)")
    assert (b / "one").is_file() and not (a / "one").exists()

    from leakattack.results import write_run_folder

    folder = tmp_path / "run"
    write_run_folder(folder, lambda p: (p / "a.txt").write_text("first"))
    moves = []
    real = os.replace
    monkeypatch.setattr(runs.os, "replace", lambda s, d: (moves.append(d), real(s, d)))
    write_run_folder(folder, lambda p: (p / "b.txt").write_text("second"))
    assert moves == [] and sorted(p.name for p in folder.iterdir()) == ["b.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b", "run"]


def _dead_pid() -> int:
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_what_a_killed_write_left_beside_the_folder_is_cleared_by_the_next(tmp_path):
    """A SIGKILL leaves the write's hidden temporary folder, and between the two renames the earlier run moved
    aside (.NAME....old/NAME); nothing removed them.  The next write of that folder removes those of a process that
    no longer runs, on this machine, and puts an earlier run moved aside back where its name is free; a running
    process's folders, and other names', stay."""
    import subprocess
    import sys

    from leakattack.results import write_run_folder

    folder = tmp_path / "run"
    host, dead = runs._host_part(), _dead_pid()
    stale = tmp_path / f".run.{dead}-{host}.k2j4h1ab.tmp"
    (stale / "sub").mkdir(parents=True)
    aside = tmp_path / f".run.{dead}-{host}.q8w7e6rt.old"
    (aside / "run").mkdir(parents=True)
    (aside / "run" / "metrics.json").write_text("{}")
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        running = tmp_path / f".run.{live.pid}-{host}.zz9yy8xx.tmp"
        running.mkdir()
        other = tmp_path / f".runs.{dead}-{host}.aa1bb2cc.tmp"
        other.mkdir()
        elsewhere = tmp_path / f".run.{dead}-{'0' * 6 if host != '000000' else '111111'}.mm3nn4oo.tmp"
        elsewhere.mkdir()
        # a process whose number is not this namespace's (a container sharing this machine's name) holds its folder
        held = tmp_path / f".run.{dead}-{host}.hh5gg6ff.tmp"
        held.mkdir()
        lock = runs._locked(held)[0]
        assert lock is not None
        runs._left_by_the_killed(folder)
        assert held.is_dir()
        os.close(lock)
        held.rmdir()
        assert (folder / "metrics.json").read_text() == "{}"  # the earlier run, back at its name
        assert not stale.exists() and not aside.exists()
        assert running.is_dir() and other.is_dir() and elsewhere.is_dir()
        stale.mkdir()
        write_run_folder(folder, lambda p: (p / "a.txt").write_text("new"))
        assert sorted(p.name for p in folder.iterdir()) == ["a.txt"] and not stale.exists()
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["run", running.name, other.name, elsewhere.name])
    finally:
        live.kill()
        live.wait()


def test_where_no_lock_is_offered_the_killed_writers_number_decides(tmp_path, monkeypatch):
    """On NFS an exclusive flock needs a file open for writing, which a folder never is: every lock fails there. The
    folders of a writer whose process is gone are then cleared as before, and an earlier run moved aside put back; a
    lock held by another process (EWOULDBLOCK) keeps its folder."""
    import errno
    import fcntl

    folder = tmp_path / "run"
    host, dead = runs._host_part(), _dead_pid()
    aside = tmp_path / f".run.{dead}-{host}.q8w7e6rt.old"
    (aside / "run").mkdir(parents=True)
    (aside / "run" / "metrics.json").write_text("{}")

    def no_locks(fd, how):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    runs._left_by_the_killed(folder)
    assert (folder / "metrics.json").read_text() == "{}" and not aside.exists()

    stale = tmp_path / f".run.{dead}-{host}.k2j4h1ab.tmp"
    stale.mkdir()

    def taken(fd, how):
        raise OSError(errno.EWOULDBLOCK, "Resource temporarily unavailable")

    monkeypatch.setattr(fcntl, "flock", taken)
    runs._left_by_the_killed(folder)
    assert stale.is_dir()


def test_a_run_that_another_took_the_name_from_between_its_renames_leaves_nothing_aside(tmp_path, monkeypatch):
    """Without the exchange: another run written to the name between this one's two renames made its second rename
    fail, and putting the earlier run back failed too; the earlier run stayed in a hidden .old folder of a process
    that exited normally.  The other run replaces it: nothing is left aside, and the sentence is one."""
    from leakattack.errors import UserError
    from leakattack.results import write_run_folder

    folder = tmp_path / "run"
    write_run_folder(folder, lambda p: ((p / "metrics.json").write_text("{}"), (p / "a.txt").write_text("first")))
    real = os.replace
    moves = []

    def another_writes_between(src, dst):
        real(src, dst)
        moves.append(dst)
        if len(moves) == 1:  # the earlier run just moved aside: another run takes the name
            folder.mkdir()
            (folder / "metrics.json").write_text("{}")
            (folder / "b.txt").write_text("other")

    monkeypatch.setattr(runs.os, "replace", another_writes_between)
    monkeypatch.setattr(runs, "_exchange", lambda a, b: False)
    with pytest.raises(UserError, match="could not be written"):
        write_run_folder(folder, lambda p: (p / "c.txt").write_text("mine"))
    assert sorted(p.name for p in folder.iterdir()) == ["b.txt", "metrics.json"]
    assert [p.name for p in tmp_path.iterdir()] == ["run"]


def test_an_earlier_run_aside_is_kept_where_its_name_holds_anything_but_a_run(tmp_path):
    """The next write cleared an earlier run moved aside whenever its name was taken, though a file there (a note put
    at --out) replaced no run: it stays aside then; a later run at the name supersedes it."""
    folder = tmp_path / "run"
    host, dead = runs._host_part(), _dead_pid()
    aside = tmp_path / f".run.{dead}-{host}.q8w7e6rt.old"
    (aside / "run").mkdir(parents=True)
    (aside / "run" / "metrics.json").write_text("{}")
    folder.write_text("a note")
    runs._left_by_the_killed(folder)
    assert (aside / "run" / "metrics.json").is_file() and folder.read_text() == "a note"
    folder.unlink()
    folder.mkdir()
    (folder / "metrics.json").write_text('{"later": 1}')
    runs._left_by_the_killed(folder)
    assert not aside.exists() and (folder / "metrics.json").read_text() == '{"later": 1}'
