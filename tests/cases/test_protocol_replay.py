"""w^t for an attack on round t of a protocol: from the run's checkpoint of w^t, else re-simulated from the latest
checkpoint before it (with the model's buffers and the server state it holds) or from the seeds, saying so first
when that is many rounds."""

import hashlib
import json
import re
import shutil
import warnings

import pytest
import torch

from leakattack import cli, training
from leakattack.errors import SettingWarning
from leakattack.training import build_victim, load_split, weights_at
from targets.protocols import get_protocol

RUN = ["run", "--model", "lenet", "--dataset", "digits", "--iterations", "2", "--quiet", "--no-lpips",
       "--threads", "1"]


@pytest.fixture(autouse=True)
def one_thread():
    """The checkpoints were written by a training on one thread: a round re-simulated on as many agrees bit for
    bit."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _train(out, *args):
    assert cli.main(["train", "--quiet", "--threads", "1", "--out", str(out)] + list(args)) == 0


def _protocol(folder):
    stored = json.loads((folder / "protocol.json").read_text())
    trainset, _ = load_split(stored["model"])
    return get_protocol(stored["protocol"], build_victim(stored["model"], trainset), trainset, **stored["spec"])


def _without(folder, copy, *rounds):
    """A copy of a run folder without the checkpoints of w^t for t in ``rounds`` (as --checkpoint-every skips them)."""
    shutil.copytree(folder, copy)
    for t in rounds:
        training.checkpoint_path(copy, t).unlink()
    return copy


@pytest.fixture(scope="module")
def safl_run(tmp_path_factory):
    """Four rounds of SAFL-Adam with a checkpoint before every round."""
    out = tmp_path_factory.mktemp("safl")
    torch.set_num_threads(1)
    _train(out, "--protocol", "safl", "--clients", "2", "--rounds", "4")
    return out / "safl"


def test_a_round_without_its_checkpoint_is_re_simulated_from_the_latest_one_with_its_server_state(safl_run, tmp_path,
                                                                                                  monkeypatch):
    """Refused before ('checkpoint ... does not exist'), though the run holds w^2 and the optimiser moments with it."""
    sparse = _without(safl_run, tmp_path / "sparse", 3, 4)
    reads = []
    read = training.read_checkpoint
    monkeypatch.setattr(training, "read_checkpoint", lambda folder, t, d: reads.append(t) or read(folder, t, d))
    w, source, _ = weights_at(_protocol(sparse), 4, sparse)
    assert reads == [2]  # the checkpoint it starts from is read once (it was read twice: to check it, then to use it)
    monkeypatch.undo()
    assert source == "re-simulated from the checkpoint of w^2"
    assert torch.equal(w, torch.load(training.checkpoint_path(safl_run, 4))["weights"])
    assert weights_at(_protocol(sparse), 2, sparse)[1:] == ("checkpoint", training.checkpoint_path(sparse, 2))
    assert cli.main(RUN + ["--protocol", "safl", "--protocol-dir", str(sparse), "--round", "4", "--out",
                           str(tmp_path / "run")]) == 0
    # config.json fingerprints the checkpoint w^4 came from: one replaced by hand is noticed
    read = training.checkpoint_path(sparse, 2)
    assert json.loads((tmp_path / "run" / "config.json").read_text())["files"]["checkpoint"] == {
        "path": str(read.resolve()), "sha256": hashlib.sha256(read.read_bytes()).hexdigest(),
        "bytes": read.stat().st_size}


def test_a_checkpoint_without_the_server_state_is_passed_over_for_an_earlier_one(safl_run, tmp_path):
    """A SAFL checkpoint that holds w alone cannot start rounds after it; w^1 starts from the fresh state."""
    sparse = _without(safl_run, tmp_path / "sparse", 3)
    path = training.checkpoint_path(sparse, 2)
    torch.save(torch.load(path)["weights"], path)
    w, source, _ = weights_at(_protocol(sparse), 3, sparse)
    assert source == "re-simulated from the checkpoint of w^1"
    assert torch.equal(w, torch.load(training.checkpoint_path(safl_run, 3))["weights"])


def test_the_re_simulation_carries_the_batchnorm_statistics_on_from_the_checkpoint(tmp_path):
    _train(tmp_path, "--protocol", "fedavg", "--model", "resnet20", "--dataset", "photos", "--clients", "2",
           "--client-batch", "8", "--rounds", "2")
    full = tmp_path / "fedavg"
    sparse = _without(full, tmp_path / "sparse", 2)
    proto = _protocol(sparse)
    w, source, _ = weights_at(proto, 2, sparse)
    expected = torch.load(training.checkpoint_path(full, 2))
    assert source == "re-simulated from the checkpoint of w^1" and torch.equal(w, expected["weights"])
    buffers = dict(proto.victim.model.named_buffers())
    assert int(buffers["bn1.num_batches_tracked"]) > 0
    assert all(torch.equal(b, expected["buffers"][n]) for n, b in buffers.items())


def _replayed(proto, t, folder=None):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        weights_at(proto, t, folder)
    return [str(w.message) for w in caught if issubclass(w.category, SettingWarning)]


def test_many_rounds_to_re_simulate_are_announced_with_an_estimate_and_a_handful_quietly(safl_run, monkeypatch):
    monkeypatch.setattr(training, "REPLAY_NOTE_ROUNDS", 2)
    proto = _protocol(safl_run)
    assert _replayed(proto, 3) == []  # 2 rounds
    note, estimate = _replayed(proto, 4)
    assert note == "w^4 is re-simulated first: 3 rounds (1..3) from the initial weights and the seeds"
    assert re.fullmatch(r"re-simulating the 3 rounds before round 4 takes about .+ \(measured on round 1\)",
                        estimate), estimate


def test_the_note_names_the_checkpoint_the_re_simulation_starts_from(safl_run, tmp_path, monkeypatch):
    monkeypatch.setattr(training, "REPLAY_NOTE_ROUNDS", 2)
    sparse = _without(safl_run, tmp_path / "sparse", 2, 3, 4)
    note, _ = _replayed(_protocol(sparse), 4, sparse)
    assert note == f"w^4 is re-simulated first: 3 rounds (1..3) from the checkpoint of w^1 in '{sparse}'"


def test_run_says_in_one_line_each_how_many_rounds_it_re_simulates_and_how_long_they_take(
        tmp_path, monkeypatch, capsys):
    """`run --protocol P --round 100000` re-simulated 99 999 rounds without a word."""
    monkeypatch.setattr(training, "REPLAY_NOTE_ROUNDS", 2)
    assert cli.main(RUN + ["--protocol", "sketched", "--round", "4", "--batch-size", "32",
                           "--out", str(tmp_path)]) == 0
    err = [line for line in capsys.readouterr().err.splitlines() if "re-simulat" in line]
    assert len(err) == 2 and "3 rounds (1..3) from the initial weights" in err[0] and "takes about" in err[1], err
