"""A full disk, a name too long for the file system and a read-only file system are one sentence, exit code 2, for
every command: `leakattack train` ended in a traceback on a full disk, and `train`, `figures`, `report`, `collect`
and a run's input paths on a name over 255 bytes."""

import errno
import os

import pytest

from leakattack import cli, training

LONG = "c" * 300  # past the 255 bytes a file name may hold on the usual file systems


@pytest.mark.parametrize("argv", [
    ["figures", LONG],
    ["report", LONG, "--out", "r.html"],
    ["collect", LONG, "--out", "t.csv"],
    ["train", "--protocol", "sketched", "--rounds", "1", "--quiet", "--out", LONG],
    ["run", "--iterations", "1", "--quiet", "--no-lpips", "--weights", f"{LONG}.pt"],
    ["run", "--iterations", "1", "--quiet", "--no-lpips", "--protocol", "fedavg", "--protocol-dir", LONG],
])
def test_a_name_too_long_for_the_file_system_is_one_sentence(argv, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("leakattack: error: ") and LONG in err and "too long" in err


def test_a_training_on_a_full_disk_is_one_sentence_and_keeps_what_it_finished(tmp_path, capsys, monkeypatch):
    written = training.atomic_write_bytes

    def full(path, data):  # the disk fills at the checkpoint of w^2, which round 1 writes when it finishes
        if path.name == "round_0002.pt":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return written(path, data)

    monkeypatch.setattr(training, "atomic_write_bytes", full)
    out = tmp_path / "t"
    assert cli.main(["train", "--protocol", "sketched", "--rounds", "2", "--quiet", "--threads", "1",
                     "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "round_0002.pt' could not be written (No space left on device); what had finished is kept" in err
    assert training.checkpoint_path(out / "sketched", 1).is_file()
    monkeypatch.undo()  # space freed: the training goes on from what it kept
    assert cli.main(["train", "--protocol", "sketched", "--rounds", "2", "--quiet", "--threads", "1",
                     "--out", str(out)]) == 0
    assert training.checkpoint_path(out / "sketched", 2).is_file()


def test_a_report_or_table_written_to_a_link_writes_the_file_it_points_to_and_a_pipe_is_refused(tmp_path, capsys):
    """The link was replaced by a file, and the file it pointed to kept the old page; a named pipe was replaced."""
    run = tmp_path / "r1"
    assert cli.main(["run", "--iterations", "1", "--quiet", "--no-lpips", "--threads", "1", "--out", str(run)]) == 0
    (tmp_path / "share").mkdir()
    for kind, name, extra in (("report", "page.html", ["--title", "SECOND"]), ("collect", "table.csv", [])):
        target = tmp_path / "share" / name
        assert cli.main([kind, str(run), "--out", str(target)]) == 0
        link = tmp_path / f"link{target.suffix}"
        link.symlink_to(target)
        before = target.read_bytes()
        assert cli.main([kind, str(run), str(run), "--out", str(link), *extra]) == 0
        assert link.is_symlink() and link.resolve() == target.resolve()
        if kind == "report":
            assert target.read_bytes() != before and b"SECOND" in target.read_bytes()
        pipe = tmp_path / f"pipe{target.suffix}"
        os.mkfifo(pipe)
        capsys.readouterr()
        assert cli.main([kind, str(run), "--out", str(pipe)]) == 2
        err = capsys.readouterr().err
        assert err == f"leakattack: error: --out '{pipe}' is a named pipe, not a file; name a {target.suffix} file\n"
        assert not pipe.is_file()


@pytest.mark.parametrize("argv", [["figures", "{p}"], ["report", "{p}", "--out", "r.html"],
                                  ["collect", "{p}", "--out", "t.csv"]])
def test_a_link_that_leads_nowhere_is_named_as_one(argv, tmp_path, capsys, monkeypatch):
    """A loop of links, or one whose target is gone, was called a path that does not exist."""
    monkeypatch.chdir(tmp_path)
    os.symlink("loopB", "loopA")
    os.symlink("loopA", "loopB")
    os.symlink("gone", "dangling")
    for p in ("loopA", "dangling"):
        assert cli.main([a.format(p=p) for a in argv]) == 2
        assert capsys.readouterr().err == (f"leakattack: error: '{p}' is a symbolic link that leads nowhere (its "
                                           "target does not exist, or the links form a loop)\n")
    assert cli.main([a.format(p="nothere") for a in argv]) == 2
    assert capsys.readouterr().err == "leakattack: error: 'nothere' does not exist\n"


def test_a_training_name_too_long_leaves_no_folder_behind(tmp_path, capsys):
    out = tmp_path / "new" / "tt"
    assert cli.main(["train", "--protocol", "sketched", "--rounds", "1", "--quiet", "--out", str(out),
                     "--name", LONG]) == 2
    assert "too long" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()


def test_a_write_that_fails_names_the_file_meant_not_its_temporary_one_and_a_link_is_replaced(tmp_path, monkeypatch):
    """write() on a full disk raises an OSError without a file name (the sentence said 'a file'), and mkstemp's
    names the hidden temporary file; a command's own file that is a link is replaced, not written through (a
    sweep's summary.csv linked to another sweep's overwrote that one)."""
    from leakattack.results import io

    target = tmp_path / "other.csv"
    target.write_text("theirs")
    link = tmp_path / "summary.csv"
    link.symlink_to(target)
    io.atomic_write_bytes(link, b"mine")
    assert not link.is_symlink() and link.read_bytes() == b"mine" and target.read_text() == "theirs"

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(io.os, "fsync", full)
    with pytest.raises(OSError) as caught:
        io.atomic_write_bytes(tmp_path / "a.json", b"{}")
    assert caught.value.errno == errno.ENOSPC and caught.value.filename == str(tmp_path / "a.json")
    assert cli.file_system_refused(caught.value) == (f"'{tmp_path / 'a.json'}' could not be written (No space left "
                                                     "on device); what had finished is kept: free space and run it "
                                                     "again")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.csv", "summary.csv"]  # no temporary file left
    big = OSError(errno.EFBIG, os.strerror(errno.EFBIG), "x.pt")
    assert cli.file_system_refused(big) == ("'x.pt' could not be written (File too large: larger than the file "
                                            "system or the file size limit takes); what had finished is kept")
