"""`leakattack train` into a folder that holds an earlier training: the same training continues from its last
finished round, exactly as an uninterrupted one would have gone on; any other is refused in one sentence that
leaves the folder as it was."""

import json
import shutil

import pytest
import torch
from test_stopped_training import _interrupt_in_round  # tests/cli is on the path

from leakattack import cli

TRAIN = ["train", "--protocol", "sketched", "--clients", "3", "--quiet", "--threads", "1"]


def _rows(folder, wall=False):
    rows = [json.loads(line) for line in (folder / "train.jsonl").read_text().splitlines()]
    return rows if wall else [{k: v for k, v in r.items() if k != "wall_s"} for r in rows]


def _snapshot(root):
    return {p.relative_to(root): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    """Five rounds in one go, the reference every continued training must equal."""
    out = tmp_path_factory.mktemp("straight")
    assert cli.main(TRAIN + ["--rounds", "5", "--out", str(out)]) == 0
    return out / "sketched"


@pytest.fixture
def interrupted(tmp_path):
    """A 50-round training, one checkpoint every 50 rounds, stopped by Ctrl-C in round 4: it keeps rounds 1..3."""
    with pytest.MonkeyPatch.context() as mp:
        _interrupt_in_round(mp, 4)
        assert cli.main(TRAIN + ["--rounds", "50", "--checkpoint-every", "50", "--out", str(tmp_path)]) == 130
    return tmp_path / "sketched"


def test_an_interrupted_training_rerun_continues_from_its_last_round_as_if_never_stopped(
        interrupted, straight, capsys):
    """The rerun deleted the 3 finished rounds and trained from round 1."""
    kept = _rows(interrupted, wall=True)
    capsys.readouterr()
    assert cli.main(TRAIN + ["--rounds", "5", "--out", str(interrupted.parent)]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "keeps rounds 1..3 of this training" in err[0] and "continues from round 4 of 5" in err[0]
    assert _rows(interrupted, wall=True)[:3] == kept  # the earlier rounds are kept as they were
    assert _rows(interrupted) == _rows(straight)
    assert [r["wall_s"] for r in _rows(interrupted, wall=True)] == sorted(r["wall_s"]
                                                                          for r in _rows(interrupted, wall=True))
    final = "checkpoints/round_0006.pt"
    assert torch.equal(torch.load(interrupted / final), torch.load(straight / final))
    stored = json.loads((interrupted / "protocol.json").read_text())
    assert stored["rounds"] == 5 and "stopped" not in stored and "rounds_planned" not in stored


def test_a_finished_training_rerun_with_more_rounds_extends_it_and_with_as_many_trains_nothing(
        tmp_path, straight, capsys):
    assert cli.main(TRAIN + ["--rounds", "2", "--out", str(tmp_path)]) == 0
    assert cli.main(TRAIN + ["--rounds", "5", "--out", str(tmp_path)]) == 0
    folder = tmp_path / "sketched"
    assert _rows(folder) == _rows(straight)
    assert torch.equal(torch.load(folder / "checkpoints" / "round_0006.pt"),
                       torch.load(straight / "checkpoints" / "round_0006.pt"))
    before = _snapshot(folder)
    capsys.readouterr()
    assert cli.main(TRAIN + ["--rounds", "5", "--out", str(tmp_path)]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "keeps rounds 1..5 of this training" in err[0] and "nothing is left to train" in err[0]
    assert _snapshot(folder) == before


def test_a_continued_training_of_a_batchnorm_model_restores_its_running_statistics(tmp_path):
    args = ["train", "--protocol", "fedavg", "--model", "resnet20", "--dataset", "photos", "--clients", "2",
            "--quiet", "--threads", "1"]
    assert cli.main(args + ["--rounds", "1", "--out", str(tmp_path / "a")]) == 0
    assert cli.main(args + ["--rounds", "2", "--out", str(tmp_path / "a")]) == 0
    assert cli.main(args + ["--rounds", "2", "--out", str(tmp_path / "b")]) == 0
    a, b = (torch.load(tmp_path / x / "fedavg" / "checkpoints" / "round_0003.pt") for x in "ab")
    assert torch.equal(a["weights"], b["weights"])
    assert a["buffers"].keys() == b["buffers"].keys()
    assert all(torch.equal(a["buffers"][k], b["buffers"][k]) for k in a["buffers"])


def _refused(argv, needles, root, capsys):
    before = _snapshot(root)
    capsys.readouterr()
    assert cli.main(argv) == 2, argv
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0], err
    assert all(n in err[0] for n in needles), err
    assert _snapshot(root) == before


@pytest.mark.parametrize("args,needles", [
    (["--sketch-ratio", "0.5"], ["holds a sketched training of lenet on digits (rounds 1..3) with other settings",
                                 "its sketch_ratio is 0.1, this training's 0.5"]),
    (["--model", "mlp"], ["its model is 'lenet', this training's 'mlp'"]),
    (["--protocol", "fedavg"], ["its protocol is 'sketched', this training's 'fedavg'"]),
])
def test_a_training_of_other_settings_is_refused_naming_the_folder_and_what_it_holds(
        interrupted, capsys, args, needles):
    """A resnet20 training into a folder holding a lenet one replaced it silently."""
    out = interrupted.parent
    argv = TRAIN + ["--rounds", "5", "--out", str(out), "--name", "sketched"] + args
    _refused(argv, [f"'{interrupted}' holds", "give another --name or --out, or remove the folder"] + needles, out,
             capsys)


def test_fewer_rounds_than_the_folder_holds_are_refused(interrupted, capsys):
    _refused(TRAIN + ["--rounds", "2", "--out", str(interrupted.parent)],
             ["(rounds 1..3), more than --rounds 2: give --rounds 3 or more to continue it"], interrupted.parent,
             capsys)


def test_a_diverged_training_is_not_continued(interrupted, capsys):
    """The same settings diverge again in the same round: continuing would only repeat it."""
    pj = interrupted / "protocol.json"
    pj.write_text(json.dumps({**json.loads(pj.read_text()), "stopped": "diverged"}))
    _refused(TRAIN + ["--rounds", "5", "--out", str(interrupted.parent)],
             ["whose loss diverged in round 4", "lower the learning rates"], interrupted.parent, capsys)


def test_a_diverged_training_asked_for_its_finished_rounds_keeps_its_record_of_how_it_stopped(interrupted, capsys):
    """`--rounds N` of a folder whose training diverged after round N trains nothing, and rewrote protocol.json
    without `stopped`: the next `--rounds 5` then trained the diverging round again."""
    pj = interrupted / "protocol.json"
    pj.write_text(json.dumps({**json.loads(pj.read_text()), "stopped": "diverged"}))
    assert cli.main(TRAIN + ["--rounds", "3", "--out", str(interrupted.parent)]) == 0
    stored = json.loads(pj.read_text())
    assert (stored["rounds"], stored["rounds_planned"], stored["stopped"]) == (3, 50, "diverged")
    _refused(TRAIN + ["--rounds", "5", "--out", str(interrupted.parent)], ["whose loss diverged in round 4"],
             interrupted.parent, capsys)


def test_a_training_whose_protocol_json_was_edited_is_not_continued_under_the_edited_setting(interrupted, capsys):
    """Its spec edited to another step size (describe, what ran, left as it was), then continued with that step: the
    rounds after would have run under another setting than those before, and the rewritten file hidden the edit."""
    pj = interrupted / "protocol.json"
    stored = json.loads(pj.read_text())
    stored["spec"]["local_lr"] = 0.3
    pj.write_text(json.dumps(stored))
    _refused(TRAIN + ["--rounds", "5", "--local-lr", "0.3", "--out", str(interrupted.parent)],
             ["protocol.json' was changed after training: it says local_lr = 0.3 where the run trained with"],
             interrupted.parent, capsys)
    # continued at the setting it trained with: the same sentence, where it said the folder trained with 0.3
    _refused(TRAIN + ["--rounds", "5", "--out", str(interrupted.parent)],
             ["protocol.json' was changed after training: it says local_lr = 0.3 where the run trained with"],
             interrupted.parent, capsys)


def test_a_training_without_the_checkpoint_to_continue_from_is_refused(tmp_path, capsys):
    assert cli.main(TRAIN + ["--rounds", "1", "--no-checkpoints", "--out", str(tmp_path)]) == 0
    _refused(TRAIN + ["--rounds", "2", "--out", str(tmp_path)],
             ["holds a sketched training of lenet on digits (rounds 1..1) without the checkpoint of w^2"], tmp_path,
             capsys)


def test_a_killed_training_continues_from_its_latest_checkpoint_as_if_never_stopped(tmp_path, straight, capsys):
    """SIGKILL writes no checkpoint when it stops: with --checkpoint-every 2 the rounds after the latest one (w^3) are
    trained again from it, and the training ends as the uninterrupted one does."""
    assert cli.main(TRAIN + ["--rounds", "3", "--checkpoint-every", "2", "--out", str(tmp_path)]) == 0
    folder = tmp_path / "sketched"
    (folder / "checkpoints" / "round_0004.pt").unlink()  # killed in round 4: rounds 1..3 logged, w^1 and w^3 saved
    assert sorted(p.name for p in (folder / "checkpoints").iterdir()) == ["round_0001.pt", "round_0003.pt"]
    capsys.readouterr()
    assert cli.main(TRAIN + ["--rounds", "5", "--checkpoint-every", "2", "--out", str(tmp_path)]) == 0
    err = capsys.readouterr().err
    assert "holds rounds 1..3 and no checkpoint after round 3" in err and "rounds 3..3 are trained again from the " \
        "checkpoint of w^3" in err
    assert _rows(folder) == _rows(straight)
    final = "checkpoints/round_0006.pt"
    assert torch.equal(torch.load(folder / final), torch.load(straight / final))


ADAPTIVE = ["--clients", "2", "--quiet", "--threads", "1"]


@pytest.mark.parametrize("protocol,opt", [("safl", "adam"), ("safl", "amsgrad"), ("safl", "sgdm"), ("sacfl", "adam")])
def test_an_interrupted_adaptive_training_continues_with_its_server_state_as_if_never_stopped(
        tmp_path, protocol, opt):
    """SAFL's server optimiser moments travel in the checkpoints: Ctrl-C in round 3 (after the round updated them,
    while it was evaluated) and a rerun give the uninterrupted training's rounds and weights bit for bit.  A
    training was refused, as its checkpoints held w alone."""
    argv = ["train", "--protocol", protocol, "--server-opt", opt] + ADAPTIVE
    if protocol == "sacfl":
        argv = ["train", "--protocol", protocol] + ADAPTIVE
    assert cli.main(argv + ["--rounds", "4", "--out", str(tmp_path / "straight")]) == 0
    with pytest.MonkeyPatch.context() as mp:
        _interrupt_in_round(mp, 3)
        assert cli.main(argv + ["--rounds", "4", "--checkpoint-every", "50", "--out", str(tmp_path / "b")]) == 130
    stopped = torch.load(tmp_path / "b" / protocol / "checkpoints" / "round_0003.pt")
    if protocol == "safl":
        assert stopped["server"]["t"] == 2  # the state w^3 continues from, not the one round 3 went on to
    assert cli.main(argv + ["--rounds", "4", "--out", str(tmp_path / "b")]) == 0
    straight, resumed = tmp_path / "straight" / protocol, tmp_path / "b" / protocol
    assert _rows(resumed) == _rows(straight)
    a, b = (torch.load(f / "checkpoints" / "round_0005.pt") for f in (straight, resumed))
    if protocol == "sacfl":  # the clip keeps nothing between rounds: w alone
        assert torch.equal(a, b)
        return
    assert torch.equal(a["weights"], b["weights"])
    assert a["server"].keys() == b["server"].keys() and a["server"]["t"] == 4
    assert all(torch.equal(a["server"][k], b["server"][k]) for k in a["server"] if k != "t")


def test_a_killed_safl_training_continues_from_its_latest_checkpoint_with_the_server_state_in_it(tmp_path, capsys):
    argv = ["train", "--protocol", "safl"] + ADAPTIVE
    assert cli.main(argv + ["--rounds", "4", "--out", str(tmp_path / "straight")]) == 0
    assert cli.main(argv + ["--rounds", "3", "--checkpoint-every", "2", "--out", str(tmp_path / "b")]) == 0
    folder = tmp_path / "b" / "safl"
    (folder / "checkpoints" / "round_0004.pt").unlink()  # killed in round 4: the latest checkpoint is w^3
    capsys.readouterr()
    assert cli.main(argv + ["--rounds", "4", "--out", str(tmp_path / "b")]) == 0
    err = capsys.readouterr().err
    assert "holds rounds 1..3 and no checkpoint after round 3" in err
    assert "rounds 3..3 are trained again from the checkpoint of w^3" in err
    assert "keeps rounds 1..2 of this training" in err  # the rounds kept, after the one trained again
    assert _rows(folder) == _rows(tmp_path / "straight" / "safl")
    a, b = (torch.load(f / "checkpoints" / "round_0005.pt") for f in (tmp_path / "straight" / "safl", folder))
    assert torch.equal(a["weights"], b["weights"]) and torch.equal(a["server"]["v"], b["server"]["v"])


def test_a_safl_checkpoint_without_the_server_state_is_not_continued_from_its_weights(tmp_path, capsys):
    """A checkpoint that holds w alone (as they were written before they held the server state) cannot continue a
    protocol whose server keeps moments: continuing from w alone would not be its training."""
    argv = ["train", "--protocol", "safl", "--out", str(tmp_path)] + ADAPTIVE
    assert cli.main(argv + ["--rounds", "1"]) == 0
    last = tmp_path / "safl" / "checkpoints" / "round_0002.pt"
    torch.save(torch.load(last)["weights"], last)
    _refused(argv + ["--rounds", "2"], ["protocol 'safl' keeps server state between rounds that its checkpoint of "
                                        "w^2 does not hold", "cannot continue from round 2 exactly"], tmp_path, capsys)
    assert cli.main(argv + ["--rounds", "1"]) == 0  # every round asked for is there: nothing to continue
    assert isinstance(torch.load(last), torch.Tensor)


def test_a_protocol_json_without_its_train_jsonl_is_refused_not_trained_over(interrupted, capsys):
    """The folder was taken for one that finished no round: its checkpoints were deleted and training began again."""
    (interrupted / "train.jsonl").unlink()
    _refused(TRAIN + ["--rounds", "5", "--out", str(interrupted.parent)],
             ["holds checkpoints after round 1 without the train.jsonl that records the rounds"], interrupted.parent,
             capsys)


def test_out_given_as_a_trainings_own_run_folder_names_the_folder_above_it(interrupted, capsys):
    _refused(TRAIN + ["--rounds", "5", "--out", str(interrupted)],
             [f"is the run folder of a training (it holds protocol.json): give the folder above it, --out "
              f"{interrupted.parent} --name sketched"], interrupted.parent, capsys)


def test_training_files_without_their_protocol_json_are_refused(interrupted, capsys):
    (interrupted / "protocol.json").unlink()
    _refused(TRAIN + ["--rounds", "5", "--out", str(interrupted.parent)],
             ["holds training files (train.jsonl) without the protocol.json"], interrupted.parent, capsys)


def test_a_training_of_the_same_settings_that_finished_no_round_starts_again(tmp_path, capsys):
    with pytest.MonkeyPatch.context() as mp:
        _interrupt_in_round(mp, 1)
        assert cli.main(TRAIN + ["--rounds", "3", "--out", str(tmp_path)]) == 130
    assert (f"training stopped in round 1 of 3, and '{tmp_path / 'sketched'}' holds no finished round (the same "
            "command starts it again)") in capsys.readouterr().err
    assert cli.main(TRAIN + ["--rounds", "2", "--out", str(tmp_path)]) == 0
    assert [r["round"] for r in _rows(tmp_path / "sketched")] == [1, 2]


def test_a_copied_folder_continues_where_it_was_copied(interrupted, tmp_path_factory, straight):
    """Nothing but the folder's own files is read: a copy under another --out continues alike."""
    copy = tmp_path_factory.mktemp("elsewhere") / "copy"
    shutil.copytree(interrupted, copy / "sketched")
    assert cli.main(TRAIN + ["--rounds", "5", "--out", str(copy)]) == 0
    assert _rows(copy / "sketched") == _rows(straight)


def test_an_act_that_changes_nothing_does_not_stop_the_training_from_continuing(tmp_path, capsys):
    """logreg has no activation: --act warns that it changes nothing, and the folder does not record it either."""
    argv = ["train", "--protocol", "fedavg", "--model", "logreg", "--clients", "2", "--client-batch", "4", "--quiet",
            "--threads", "1", "--out", str(tmp_path)]
    assert cli.main(argv + ["--act", "relu", "--rounds", "1"]) == 0
    assert "--act changes nothing for model 'logreg'" in capsys.readouterr().err
    assert cli.main(argv + ["--rounds", "2"]) == 0
    assert [r["round"] for r in _rows(tmp_path / "fedavg")] == [1, 2]


def test_settings_the_protocol_does_not_read_do_not_stop_the_training_from_continuing(tmp_path, capsys):
    """fedavg reads no sketch: --sketch warns that it changes nothing, and then kept the folder from continuing
    without it; a setting it reads (--local-lr) still does."""
    argv = ["train", "--protocol", "fedavg", "--clients", "3", "--quiet", "--threads", "1", "--out", str(tmp_path)]
    assert cli.main(argv + ["--sketch", "gaussian", "--sketch-ratio", "0.3", "--rounds", "1"]) == 0
    assert "--sketch, --sketch-ratio change nothing for protocol 'fedavg'" in capsys.readouterr().err
    assert cli.main(argv + ["--rounds", "2"]) == 0
    assert [r["round"] for r in _rows(tmp_path / "fedavg")] == [1, 2]
    _refused(argv + ["--rounds", "3", "--local-lr", "0.2"], ["its local_lr is 0.1, this training's 0.2"], tmp_path,
             capsys)


def test_server_settings_its_optimiser_leaves_unused_do_not_stop_the_training_from_continuing(tmp_path, capsys):
    """safl with --server-opt sgd reads no epsilon: given once and left out the next time, the folder still
    continues; another optimiser is another training."""
    argv = ["train", "--protocol", "safl", "--server-opt", "sgd", "--clients", "3", "--quiet", "--threads", "1",
            "--out", str(tmp_path)]
    assert cli.main(argv + ["--server-eps", "0.1", "--rounds", "1"]) == 0
    assert "--server-eps changes nothing with --server-opt sgd" in capsys.readouterr().err
    assert cli.main(argv + ["--rounds", "2"]) == 0
    assert [r["round"] for r in _rows(tmp_path / "safl")] == [1, 2]
    _refused(argv[:3] + argv[5:] + ["--rounds", "3"], ["its server_opt is 'sgd', this training's 'adam'"], tmp_path,
             capsys)


def test_a_training_continued_on_another_thread_count_says_its_last_bits_may_differ(tmp_path, capsys):
    """protocol.json records the machine (CPU, SIMD capability, threads); a continuation on another one is not refused,
    says in one line that the rounds after the stored ones need not agree bit for bit, and keeps the earlier machine
    (machines_before)."""
    assert cli.main(TRAIN + ["--rounds", "1", "--out", str(tmp_path)]) == 0
    stored = json.loads((tmp_path / "sketched" / "protocol.json").read_text())
    assert stored["machine"]["threads"] == 1 and stored["machine"]["cpu_capability"]
    capsys.readouterr()
    assert cli.main([*TRAIN[:-1], "2", "--rounds", "2", "--out", str(tmp_path)]) == 0
    warned = [line for line in capsys.readouterr().err.splitlines() if "bit for bit" in line]
    assert len(warned) == 1 and "holds rounds 1..1 trained on" in warned[0] and "1 thread(s)" in warned[0]
    assert "2 thread(s)" in warned[0]
    assert [r["round"] for r in _rows(tmp_path / "sketched")] == [1, 2]
    now = json.loads((tmp_path / "sketched" / "protocol.json").read_text())
    assert now["machine"]["threads"] == 2 and [m["threads"] for m in now["machines_before"]] == [1]
    assert cli.main([*TRAIN[:-1], "2", "--rounds", "3", "--out", str(tmp_path)]) == 0  # the same machine again
    assert [m["threads"] for m in json.loads((tmp_path / "sketched" / "protocol.json").read_text())[
        "machines_before"]] == [1]


def test_each_round_appends_its_row_rather_than_rewriting_the_log(tmp_path, straight, monkeypatch):
    """A round adds one line to train.jsonl: the whole file is written once, where the training starts, not once a
    round (which grows with the rounds before it)."""
    from leakattack import training

    rewrites = []
    write = training.atomic_write_text
    monkeypatch.setattr(training, "atomic_write_text",
                        lambda path, text: (rewrites.append(str(path)), write(path, text))[1])
    assert cli.main(TRAIN + ["--rounds", "5", "--out", str(tmp_path)]) == 0
    assert sum(p.endswith("train.jsonl") for p in rewrites) <= 1
    assert _rows(tmp_path / "sketched") == _rows(straight)


def test_a_row_cut_short_by_a_kill_is_dropped_and_its_round_trained_again(tmp_path, straight, capsys):
    """A process killed while appending round 4's row leaves an unterminated last line and no checkpoint after it:
    the rerun reads rounds 1..3 and ends as the uninterrupted training does."""
    assert cli.main(TRAIN + ["--rounds", "4", "--out", str(tmp_path)]) == 0
    folder = tmp_path / "sketched"
    log = folder / "train.jsonl"
    text = log.read_text()
    last = text.splitlines()[-1]
    log.write_text(text[: len(text) - len(last) - 1] + last[: len(last) // 2])  # round 4's row, half written
    (folder / "checkpoints" / "round_0005.pt").unlink()
    capsys.readouterr()
    assert cli.main(TRAIN + ["--rounds", "5", "--out", str(tmp_path)]) == 0
    assert "keeps rounds 1..3" in capsys.readouterr().err
    assert _rows(folder) == _rows(straight)
    final = "checkpoints/round_0006.pt"
    assert torch.equal(torch.load(folder / final), torch.load(straight / final))


def test_a_finished_training_whose_last_checkpoint_was_not_written_writes_it_again(straight, tmp_path, capsys):
    """Stopped while it wrote w^(T+1) (kill -9 or Ctrl-C in the last save), a training had every round recorded and
    said 'nothing is left to train', and w^(T+1) stayed missing; the same command now trains round T again from
    w^T and writes it, equal to the straight run's."""
    folder = tmp_path / "sketched"
    shutil.copytree(straight, folder)
    (folder / "checkpoints" / "round_0006.pt").unlink()
    capsys.readouterr()
    assert cli.main(TRAIN + ["--rounds", "5", "--out", str(tmp_path)]) == 0
    assert "rounds 5..5 are trained again from the checkpoint of w^5 to write w^6" in capsys.readouterr().err
    assert _rows(folder) == _rows(straight)
    assert _snapshot(folder / "checkpoints") == _snapshot(straight / "checkpoints")


def test_a_finished_training_without_checkpoints_has_nothing_left_to_train(tmp_path, capsys):
    assert cli.main(TRAIN + ["--rounds", "2", "--no-checkpoints", "--out", str(tmp_path)]) == 0
    capsys.readouterr()
    assert cli.main(TRAIN + ["--rounds", "2", "--no-checkpoints", "--out", str(tmp_path)]) == 0
    assert "nothing is left to train" in capsys.readouterr().err
