"""Training and protocol inputs: the rounds bound of `train --rounds` and `run --protocol --round`, privsgd trained
past the rounds its noise covers, and the Flower strategies' arguments refused when they are made."""

import json
import math

import pytest
from test_bad_input import _refused  # tests/cli is on the path

from leakattack import cli
from leakattack.config.params import MAX_ROUNDS
from leakattack.errors import UserError

TRAIN = ["train", "--protocol", "fedavg", "--clients", "3", "--quiet", "--threads", "1"]
RUN = ["run", "--model", "lenet", "--dataset", "digits", "--iterations", "2", "--quiet", "--no-lpips",
       "--threads", "1"]


def _never(*args, **kwargs):
    raise AssertionError("the command started work that a refusal should have stopped")


@pytest.mark.parametrize("rounds", [MAX_ROUNDS + 1, 10 ** 11])
def test_train_refuses_more_rounds_than_the_bound_before_anything_is_written(tmp_path, capsys, monkeypatch, rounds):
    """`train --rounds 99999999999` trained for days (8042 rounds in its first ten minutes)."""
    monkeypatch.setattr("leakattack.cli.train.train", _never)
    _refused(TRAIN + ["--rounds", str(rounds), "--out", str(tmp_path / "out")],
             f"rounds T must lie in [1, {MAX_ROUNDS}], got {rounds}", tmp_path, capsys)


def test_the_training_function_refuses_more_rounds_than_the_bound(tmp_path, monkeypatch):
    from leakattack import training
    monkeypatch.setattr(training, "load_split", _never)
    with pytest.raises(UserError, match=r"rounds T must lie in \[1, "):
        training.train("fedavg", {}, dict(training.MODEL_DEFAULTS, seed=0), MAX_ROUNDS + 1, tmp_path)
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("dir_given", [False, True])
def test_run_refuses_a_round_beyond_the_bound_before_any_re_simulation(tmp_path, capsys, monkeypatch, dir_given):
    """`run --protocol fedavg --round 99999999999` set out to re-simulate the rounds before it (556 years, it said)."""
    monkeypatch.setattr("leakattack.cases.weights_at", _never)
    argv = RUN + ["--protocol", "fedavg", "--round", str(MAX_ROUNDS + 1), "--out", str(tmp_path / "run")]
    if dir_given:
        assert cli.main(TRAIN + ["--rounds", "1", "--out", str(tmp_path / "fl")]) == 0
        capsys.readouterr()
        argv += ["--protocol-dir", str(tmp_path / "fl" / "fedavg")]
    _refused(argv, f"round {MAX_ROUNDS + 1} does not exist: a protocol runs at most {MAX_ROUNDS:,} rounds",
             tmp_path, capsys)


def test_a_round_within_the_bound_is_not_refused_by_it():
    from leakattack.config.params import Round
    assert Round().ok(1) and Round().ok(MAX_ROUNDS)
    assert not Round().ok(0) and not Round().ok(MAX_ROUNDS + 1) and not Round().ok(True)
    assert Round().error("round", 0) == "round 0 does not exist: rounds start at 1"


PRIVSGD = ["train", "--protocol", "privsgd", "--sketch", "gaussian", "--clients", "2", "--quiet", "--threads", "1",
           "--no-checkpoints"]


def test_privsgd_trained_past_its_dp_rounds_says_so_in_one_line(tmp_path, capsys):
    """The noise is set for --dp-rounds T rounds; training more ran silently past the (epsilon, delta) it was given."""
    assert cli.main(PRIVSGD + ["--rounds", "3", "--dp-rounds", "2", "--out", str(tmp_path / "a")]) == 0
    err = [ln for ln in capsys.readouterr().err.splitlines() if "warning" in ln]
    assert len(err) == 1 and "--rounds 3 exceeds --dp-rounds 2" in err[0], err
    last = json.loads((tmp_path / "a" / "privsgd" / "train.jsonl").read_text().splitlines()[-1])
    assert f"grows to {last['epsilon_paper']:.3g} at round 3" in err[0]  # the number train.jsonl records
    assert last["epsilon_paper"] > 0.5
    # within the rounds the noise covers: no such line
    assert cli.main(PRIVSGD + ["--rounds", "2", "--dp-rounds", "2", "--out", str(tmp_path / "b")]) == 0
    assert "--dp-rounds" not in capsys.readouterr().err


# -- Flower: arguments refused when the strategy is made, not in the middle of a deployment ----------------------

def _flower():
    pytest.importorskip("flwr", reason="flwr is not installed (pip install 'leakattack[flower]')")
    from leakattack.integrations import flower
    return flower


@pytest.mark.parametrize("kwargs,needle", [
    ({"b": 0}, "SketchedFedAvg: 'b' must be a positive integer"),  # was taken as "not given": ratio times d
    ({"b": -5}, "SketchedFedAvg: 'b' must be a positive integer"),  # was refused only in round 1
    ({"b": 2.5}, "SketchedFedAvg: 'b' must be a positive integer"),
    ({"global_lr": math.inf}, "global learning rate must be a finite positive number, got inf"),
    ({"seed": -1}, "SketchedFedAvg: 'seed' must be an integer in [0, 2^63 - 1], got -1"),
    ({"seed": 1.7}, "SketchedFedAvg: 'seed' must be an integer in [0, 2^63 - 1], got 1.7"),  # was cut to 1
])
def test_the_sketched_strategy_refuses_a_bad_argument_when_it_is_made(kwargs, needle):
    flower = _flower()
    with pytest.raises(UserError) as err:
        flower.SketchedFedAvg(**kwargs)
    assert needle in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("kwargs,needle", [
    ({"clients": "12"}, "'clients' must be a collection such as ['0', '3'], got '12'"),  # recorded clients 1 and 2
    ({"clients": 3}, "'clients' must be a collection"),
    ({"rounds": 3}, "'rounds' must be a collection such as [1, 2], got 3"),  # a TypeError traceback
    ({"rounds": ["a"]}, "'rounds' must be round numbers"),
    ({"rounds": [0]}, "'rounds' must be round numbers"),  # Flower has no round 0: nothing was ever recorded
    ({"lr": -1}, "'lr' must be a positive number, got -1"),  # refused only at the first message file
    ({"local_steps": 0}, "'local_steps' must be an integer in [1, 1,000,000], got 0"),
    ({"batch_size": 0}, "'batch_size' must be a positive integer, got 0"),
    ({"input_shape": "x"}, "'input_shape' must be a list of 1 to 3 positive integers"),  # a ValueError traceback
    ({"num_classes": 0}, "'num_classes' must be an integer in [1, 1,000,000], got 0"),
])
def test_the_recorder_refuses_a_bad_argument_when_it_is_made(tmp_path, kwargs, needle):
    flower = _flower()
    from flwr.server.strategy import FedAvg
    with pytest.raises(UserError) as err:
        flower.RecordingStrategy(FedAvg(), tmp_path / "out", **kwargs)
    assert needle in str(err.value) and str(err.value).startswith("RecordingStrategy: ")
    assert not (tmp_path / "out").exists()


def test_the_recorder_takes_a_collection_of_ids_and_numpy_numbers_but_no_string_of_ids(tmp_path):
    flower = _flower()
    import numpy as np
    from flwr.server.strategy import FedAvg
    rec = flower.RecordingStrategy(FedAvg(), tmp_path, clients=[0, "3"], rounds=range(1, 3), lr=0.1,
                                   local_steps=np.int64(2), batch_size=4, input_shape=(1, 28, 28), num_classes=10)
    assert rec.clients == {"0", "3"} and rec.rounds == {1, 2}
    assert flower.SketchedFedAvg(b=10, seed=np.int64(3)).round_sketch(1, 100).b == 10
    with pytest.raises(UserError, match="'clients' must be a collection"):  # "03" was read as clients 0 and 3
        flower.RecordingStrategy(FedAvg(), tmp_path, clients="03")


@pytest.mark.parametrize("value", ["auto", "abc"])
def test_train_threads_that_are_no_count_are_one_sentence_as_run_says_them(tmp_path, capsys, value):
    """`train --threads auto` read "argument --threads: invalid int value: 'auto'", Python's wording, where run and
    check say what they take."""
    code = cli.main(["train", "--protocol", "fedavg", "--threads", value, "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err[-1] == (f"leakattack: error: argument --threads: invalid value '{value}': give "
                                                 "a count of threads (training takes no auto: its small tensors run "
                                                 "fastest on one)"), err
    assert not (tmp_path / "out").exists()
