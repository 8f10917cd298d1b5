"""--out of check, train and sweep: an empty string, the root, the current folder and a folder holding files the
command does not write are refused in one sentence before anything is written; an empty folder and the command's
own earlier output are taken."""

import warnings
from types import SimpleNamespace

import pytest
from test_bad_input import _refused  # tests/cli is on the path

from leakattack import cli
from leakattack.cli.check import CHECK_FILES
from leakattack.cli.sweep import SWEEP_FILES
from leakattack.cli.train import TRAIN_FILES, _warn_data
from leakattack.errors import SettingWarning, UserError
from leakattack.results.io import foreign_entries, own_folder, writable_out
from leakattack.training import MODEL_DEFAULTS, load_split, warn_client_batch

CHECK = ["check", "--threads", "1", "--quiet", "--samples", "2"]
TRAIN = ["train", "--quiet", "--threads", "1", "--rounds", "1", "--clients", "2", "--protocol", "fedavg"]
SWEEP = """
[sweep]
name = "tiny"
[base]
model = "lenet"
dataset = "digits"
iterations = 2
[grid]
image_index = [0]
"""




def _commands(tmp_path):
    (tmp_path / "tiny.toml").write_text(SWEEP)
    return {"check": CHECK, "train": TRAIN, "sweep": ["sweep", str(tmp_path / "tiny.toml"), "--quiet"]}


@pytest.mark.parametrize("command", ["check", "train", "sweep"])
def test_an_empty_root_or_current_out_is_refused(command, tmp_path, capsys, monkeypatch):
    argv = _commands(tmp_path)[command]
    monkeypatch.chdir(tmp_path)
    _refused(argv + ["--out", ""], "--out must name a folder, got an empty string", tmp_path, capsys)
    _refused(argv + ["--out", "/"], "--out '/' is the root folder", tmp_path, capsys)
    _refused(argv + ["--out", "."], "--out '.' is the current folder or holds it", tmp_path, capsys)
    _refused(argv + ["--out", str(tmp_path / "a\nb")], "--out holds the control character '\\n'", tmp_path, capsys)
    assert not (tmp_path / "a\nb").exists()


@pytest.mark.parametrize("command,what", [("check", "a check"), ("train", "a training"), ("sweep", "a sweep")])
def test_a_folder_holding_a_users_file_is_refused(command, what, tmp_path, capsys):
    argv = _commands(tmp_path)[command]
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "keep.txt").write_text("mine")
    _refused(argv + ["--out", str(mine)], f"holds keep.txt, which {what} does not write", tmp_path, capsys)


@pytest.mark.parametrize("entry,needle", [
    ("figures", "holds figures (a file, where a sweep writes a folder)"),
    ("points", "holds points (a file, where a sweep writes a folder)"),
    ("slurm", "holds slurm (a file, where a sweep writes a folder)"),
    ("figures/phase_transition.png/", "holds figures/phase_transition.png/ (a folder, where a sweep writes a file)"),
    ("summary.csv/", "holds summary.csv/ (a folder, where a sweep writes a file)"),
])
def test_a_sweep_folder_holding_its_own_names_as_the_other_kind_is_refused_before_any_point(entry, needle, tmp_path,
                                                                                              capsys):
    """A file where the sweep makes a folder (or the other way round) is refused before any point runs, and the
    folder is left as it was: it used to end, after every point, in a traceback and a half-written folder."""
    argv = _commands(tmp_path)["sweep"]
    out = tmp_path / "out"
    path = out / entry.rstrip("/")
    if entry.endswith("/"):
        path.mkdir(parents=True)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("mine")
    _refused(argv + ["--out", str(out)], needle, tmp_path, capsys)
    assert not (out / "results.jsonl").exists() and not (out / "sweep.json").exists()


def test_a_run_folder_holding_one_of_its_files_as_a_folder_says_so(tmp_path, capsys):
    out = tmp_path / "run"
    (out / "trace.csv").mkdir(parents=True)
    _refused(["run", "--model", "lenet", "--dataset", "digits", "--iterations", "2", "--quiet", "--out", str(out)],
             "holds trace.csv/ (a folder, where a run writes a file)", tmp_path, capsys)


@pytest.mark.parametrize("command", ["run", "check", "train", "sweep"])
@pytest.mark.parametrize("kind,markers,home", [
    ("run", ["metrics.json"], ""), ("sweep", ["results.jsonl"], ""),
    # a training's run folder, and the train --out folder above it: a training refuses to continue in either once
    # another command wrote there
    ("training", ["protocol.json", "train.jsonl"], ""),
    ("training", ["accuracy_vs_floats.png", "fedavg/protocol.json", "fedavg/train.jsonl"], ""),
    ("training", ["accuracy_vs_floats.png", "fedavg/protocol.json", "fedavg/train.jsonl"], "fedavg"),
])
def test_an_out_inside_a_run_sweep_or_training_folder_is_refused(command, kind, markers, home, tmp_path, capsys):
    """A folder written among a run's, a sweep's or a training's files would make that folder a stranger's: it could
    no longer be run again into (a run replaces its folder whole; a training refuses to continue beside files it does
    not write) and its reader would meet foreign files."""
    argv = {**_commands(tmp_path), "run": ["run", "--quiet", "--threads", "1", "--iterations", "1"]}[command]
    top = tmp_path / "earlier"
    for marker in markers:
        (top / marker).parent.mkdir(parents=True, exist_ok=True)
        (top / marker).write_text("{}")
    holder = top / home if home else top
    _refused(argv + ["--out", str(holder / "sub" / "deeper")], f"is inside the {kind} folder '{holder}', whose files "
             f"are the {kind}'s own: name a folder outside run, sweep and training folders", tmp_path, capsys)


def test_a_folder_beside_unrelated_protocol_json_or_a_copied_training_is_not_a_training(tmp_path):
    """Only protocol.json beside train.jsonl marks a training: a protocol.json of one's own is no training folder,
    and a training's run folder copied in does not make the folder it was copied into a train --out folder (that
    holds the figure a training draws)."""
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "protocol.json").write_text("{}")
    assert writable_out(tmp_path / "mine" / "out") == tmp_path / "mine" / "out"
    (tmp_path / "copy").mkdir()
    for name in ("protocol.json", "train.jsonl"):
        (tmp_path / "copy" / name).write_text("{}")
    assert writable_out(tmp_path / "out") == tmp_path / "out"


def test_a_report_written_into_a_training_folder_is_refused_and_the_training_continues(tmp_path, capsys):
    """`report --out` into a train --out folder made continuing that training refuse ("holds rep.html, which a
    training does not write"): the report is now refused, and the training continues."""
    train = tmp_path / "train"
    assert cli.main(TRAIN + ["--out", str(train)]) == 0
    run = tmp_path / "run"
    assert cli.main(["run", "--quiet", "--threads", "1", "--iterations", "1", "--no-lpips", "--out", str(run)]) == 0
    capsys.readouterr()
    for place in (train / "rep.html", train / "fedavg" / "rep.html"):
        _refused(["report", str(run), "--out", str(place)], "is inside the training folder", tmp_path, capsys)
    assert cli.main(TRAIN[:-4] + ["--rounds", "2", "--clients", "2", "--protocol", "fedavg", "--out", str(train)]) == 0


def test_a_run_folder_is_not_a_training_folder(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.json").write_text("{}")
    _refused(TRAIN + ["--out", str(run)], "holds metrics.json, which a training does not write", tmp_path, capsys)


def test_the_commands_own_output_is_taken_and_anything_else_named(tmp_path):
    check = tmp_path / "check"
    check.mkdir()
    for name in CHECK_FILES:
        (check / name).write_text("")
    (check / ".check.json.abc.tmp").write_text("")  # left by a killed atomic write
    assert own_folder(check, "check", CHECK_FILES, "a check") == check
    sweep = tmp_path / "sweep"
    for name in ("figures/a.png", "points/k.pt", "slurm/jobs.json", "results.jsonl", "sweep.json", "summary.csv"):
        (sweep / name).parent.mkdir(parents=True, exist_ok=True)
        (sweep / name).write_text("")
    assert own_folder(sweep, "sweep", SWEEP_FILES, "a sweep") == sweep
    train = tmp_path / "train"
    for name in ("accuracy_vs_floats.png", "fedavg/protocol.json", "fedavg/train.jsonl",
                 "fedavg/checkpoints/round_0001.pt", "other/train.jsonl"):
        (train / name).parent.mkdir(parents=True, exist_ok=True)
        (train / name).write_text("")
    assert own_folder(train, "train", TRAIN_FILES, "a training") == train
    (train / "fedavg" / "notes.txt").write_text("")
    (train / "fedavg" / "checkpoints" / "keep").mkdir()
    assert foreign_entries(train, TRAIN_FILES) == ["fedavg/checkpoints/keep/", "fedavg/notes.txt"]
    with pytest.raises(UserError, match="holds fedavg/checkpoints/keep/, fedavg/notes.txt, which a training"):
        own_folder(train, "train", TRAIN_FILES, "a training")
    assert own_folder(tmp_path / "missing", "missing", TRAIN_FILES, "a training") == tmp_path / "missing"


def test_entries_that_vanish_while_the_folder_is_read_are_not_held(tmp_path, monkeypatch):
    """A sweep writing its folder renames a temporary file into place (or removes one) between another command's
    listing of the folder and its look at each entry: what is gone by then is not held there."""
    import pathlib

    sweep = tmp_path / "sweep"
    sweep.mkdir()
    (sweep / "sweep.json").write_text("")
    listed = pathlib.Path.iterdir

    def iterdir(self):
        yield from listed(self)
        if self == sweep:  # listed, then renamed into place or removed before it is looked at
            yield from (sweep / ".sweep.json.a1b2c3d4.tmp", sweep / "notes.txt", sweep / "points")

    monkeypatch.setattr(pathlib.Path, "iterdir", iterdir)
    assert foreign_entries(sweep, SWEEP_FILES) == []
    assert own_folder(sweep, "sweep", SWEEP_FILES, "a sweep") == sweep


def test_the_root_is_refused_for_every_kind_of_out():
    for beside in (False, True):
        with pytest.raises(UserError, match="is the root folder"):
            writable_out("/", beside=beside)


def test_an_unknown_sketch_is_refused_whether_or_not_the_protocol_reads_it(tmp_path, capsys):
    _refused(TRAIN + ["--sketch", "nope", "--out", str(tmp_path / "t")], "unknown sketch 'nope'", tmp_path, capsys)


def test_a_split_leaving_a_client_without_data_is_refused_without_the_client_batch_warning(tmp_path, capsys):
    """One sentence (no warning of a client's batch cut to its 0 images before it), nothing written."""
    _refused(TRAIN + ["--clients", "2000", "--out", str(tmp_path / "t")],
             "2000 clients leave some client without data (1438 training images)", tmp_path, capsys)


def test_data_root_and_download_with_an_embedded_set_warn():
    args = SimpleNamespace(dataset="digits", data_root="/tmp", download=True)
    with pytest.warns(SettingWarning, match="--data-root and --download are not read: the embedded data set digits"):
        _warn_data(args)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _warn_data(SimpleNamespace(dataset="digits", data_root=None, download=False))
        _warn_data(SimpleNamespace(dataset="mnist", data_root="/tmp", download=True))


def test_a_client_batch_beyond_a_clients_images_warns():
    spec = {"clients": 2, "noniid": False, "seed": 0, "batch_size": 100_000}
    model_spec = {**MODEL_DEFAULTS, "dataset": "digits", "data_root": None, "seed": 0}
    with pytest.warns(SettingWarning, match="--client-batch 100000 exceeds the .* images the smallest client holds"):
        warn_client_batch(spec, load_split(model_spec)[0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_client_batch({**spec, "batch_size": 32}, load_split(model_spec)[0])
    train = load_split(model_spec)[0]  # a client of one image: said in the singular
    with pytest.warns(SettingWarning, match="--client-batch 32 exceeds the 1 image the smallest client holds"):
        warn_client_batch({**spec, "clients": train.images.shape[0], "batch_size": 32}, train)


def test_noniid_clients_too_few_to_hold_every_class_warn():
    """Client c holds classes c and c+1 of a shuffled order: 2 clients leave 7 of digits' 10 classes to no one."""
    spec = {"clients": 2, "noniid": True, "seed": 0, "batch_size": 32}
    model_spec = {**MODEL_DEFAULTS, "dataset": "digits", "data_root": None, "seed": 0}
    trainset = load_split(model_spec)[0]
    with pytest.warns(SettingWarning, match=r"^--noniid with 2 client\(s\) leaves 7 of the 10 classes in no client's "
                                            r"data .* 9 or more clients cover every class$"):
        warn_client_batch(spec, trainset)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_client_batch({**spec, "clients": 9}, trainset)
        warn_client_batch({**spec, "noniid": False}, trainset)
