"""`leakattack train` checkpoints of a BatchNorm victim carry its running statistics, and both ways of attacking a
trained round (``--protocol-dir``, ``--weights``) load them."""

import pytest
import torch

import targets
from leakattack import cli, experiment
from leakattack.config import ConfigError, RunConfig
from leakattack.errors import UserError
from leakattack.training import checkpoint_path, load_checkpoint, save_checkpoint
from targets.weights import load_weights


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("bn-train")
    assert cli.main(["train", "--protocol", "fedavg", "--model", "resnet20", "--dataset", "photos", "--rounds", "2",
                     "--clients", "2", "--out", str(out), "--quiet"]) == 0
    return out / "fedavg"


def _victim():
    return targets.get_model("resnet20", num_classes=10, in_shape=(3, 32, 32), seed=0)


def test_checkpoints_hold_the_running_statistics_the_clients_left(trained):
    first, buffers_1 = load_checkpoint(trained, 1, _victim().d)
    last, buffers_3 = load_checkpoint(trained, 3, _victim().d)
    assert buffers_1 is not None and buffers_3 is not None and set(buffers_1) == set(buffers_3)
    # round 1 starts from the initialisation (statistics 0 and 1); the clients' batches then move them
    assert torch.equal(buffers_1["bn1.running_mean"], torch.zeros(16))
    assert torch.equal(buffers_1["bn1.running_var"], torch.ones(16))
    assert int(buffers_3["bn1.num_batches_tracked"]) > 0
    assert (buffers_3["bn1.running_var"] - 1).abs().max() > 1e-2
    assert not torch.equal(first, last)


def test_each_batch_a_client_stepped_on_is_counted_once(trained):
    """The round's train loss, read in train mode before the clients' steps, moved the statistics too: each client's
    first batch of a round entered them twice (2 rounds of 2 clients' one step each counted 8 batches, not 4)."""
    for t, steps in ((2, 2), (3, 4)):  # w^2 after round 1's two clients, w^3 after round 2's
        assert int(load_checkpoint(trained, t, _victim().d)[1]["bn1.num_batches_tracked"]) == steps


def test_a_training_that_counted_batches_twice_is_continued_with_a_warning(trained, tmp_path, capsys):
    """A folder trained before each batch was counted once (no bn_counted_once_from in its protocol.json) continued
    with the statistics of two counts mixed, unsaid."""
    import json
    import shutil

    assert json.loads((trained / "protocol.json").read_text())["bn_counted_once_from"] == 1
    old = tmp_path / "old" / "fedavg"
    shutil.copytree(trained, old)
    spec = json.loads((old / "protocol.json").read_text())
    del spec["bn_counted_once_from"]
    (old / "protocol.json").write_text(json.dumps(spec))
    argv = ["train", "--protocol", "fedavg", "--model", "resnet20", "--dataset", "photos", "--clients", "2",
            "--out", str(tmp_path / "old"), "--quiet"]
    capsys.readouterr()
    for rounds in (3, 4):  # the rounds counted twice stay named after the first resume
        assert cli.main(argv + ["--rounds", str(rounds)]) == 0
        assert (f"'{old}' holds rounds 1..2 trained by a leakattack that counted each client's first batch of a round "
                "twice in the BatchNorm running statistics (the weights do not depend on them): rounds "
                f"{rounds}..{rounds} are trained now with each batch counted once") in capsys.readouterr().err
        assert json.loads((old / "protocol.json").read_text())["bn_counted_once_from"] == 3
    from leakattack import training

    def interrupted(*args, **kw):  # Ctrl-C as the first round trained now is evaluated
        raise KeyboardInterrupt

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(training, "evaluate", interrupted)
        assert cli.main(argv + ["--rounds", "6"]) == 130
    stopped = json.loads((old / "protocol.json").read_text())
    assert stopped["stopped"] == "interrupted" and stopped["bn_counted_once_from"] == 3  # it was written over with 1
    assert cli.main(["train", "--protocol", "fedavg", "--rounds", "1", "--out", str(tmp_path / "lenet"),
                     "--quiet"]) == 0
    assert "bn_counted_once_from" not in (tmp_path / "lenet" / "fedavg" / "protocol.json").read_text()  # no BatchNorm


def test_a_victim_in_train_mode_still_leaves_its_statistics_as_loaded(trained):
    victim = load_weights(_victim(), checkpoint_path(trained, 3))
    loaded = {n: b.clone() for n, b in victim.model.named_buffers()}
    assert torch.equal(loaded["bn1.running_var"], load_checkpoint(trained, 3, victim.d)[1]["bn1.running_var"])
    victim.model(torch.rand(4, 3, 32, 32))  # an attacker's forward pass in train mode
    assert all(torch.equal(b, loaded[n]) for n, b in victim.model.named_buffers())


@pytest.mark.filterwarnings("ignore::leakattack.errors.SettingWarning")  # one image of a client's batch of 32
def test_the_protocol_attack_loads_the_round_s_statistics(trained):
    p = experiment.prepare(RunConfig(model="resnet20", dataset="photos", protocol="fedavg", protocol_dir=str(trained),
                                     protocol_round=2, batch_size=1, bn="eval", iterations=2))
    expected = load_checkpoint(trained, 2, p.victim.d)[1]
    assert expected is not None and int(expected["bn1.num_batches_tracked"]) > 0
    for n, b in p.victim.model.named_buffers():
        torch.testing.assert_close(b, expected[n].to(b), rtol=0, atol=0)


def test_buffers_that_do_not_fit_are_one_sentence(trained, tmp_path):
    w, buffers = load_checkpoint(trained, 3, _victim().d)
    assert buffers is not None
    save_checkpoint(tmp_path, 1, w, {**buffers, "bn1.running_var": torch.ones(3)})
    with pytest.raises(UserError, match="holds buffers that do not fit this model"):
        load_weights(_victim(), checkpoint_path(tmp_path, 1))
    lenet = targets.get_model("lenet")  # another model's checkpoint is named so, before its buffers
    save_checkpoint(tmp_path, 1, w, buffers)
    with pytest.raises(UserError, match=rf"is the checkpoint of another model: it holds {w.numel()} weights, this "
                                        rf"model has {lenet.d} \(built for inputs of shape \(3, 32, 32\) and 10 "
                                        r"classes: its count depends on both\)$"):
        load_weights(lenet, checkpoint_path(tmp_path, 1))
    torch.save({"weights": w, "buffers": [1, 2]}, checkpoint_path(tmp_path, 1))
    with pytest.raises(ConfigError, match="holds buffers that are not a dict of tensors"):
        load_checkpoint(tmp_path, 1, w.numel())


def test_checkpoint_every_writes_the_first_every_kth_and_the_final_round(tmp_path):
    assert cli.main(["train", "--protocol", "fedavg", "--rounds", "5", "--clients", "2", "--checkpoint-every", "2",
                     "--out", str(tmp_path), "--quiet"]) == 0
    written = sorted(p.name for p in (tmp_path / "fedavg" / "checkpoints").iterdir())
    assert written == ["round_0001.pt", "round_0003.pt", "round_0005.pt", "round_0006.pt"]
    with pytest.raises(ConfigError, match="checkpoint-every"):
        load_checkpoint(tmp_path / "fedavg", 2, targets.get_model("lenet").d)


def test_checkpoint_every_without_checkpoints_is_a_one_line_warning(tmp_path, capsys):
    assert cli.main(["train", "--protocol", "fedavg", "--rounds", "1", "--clients", "2", "--no-checkpoints",
                     "--checkpoint-every", "5", "--out", str(tmp_path), "--quiet"]) == 0
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and "--checkpoint-every has no effect with --no-checkpoints" in err[0], err
    assert not (tmp_path / "fedavg" / "checkpoints").exists()


@pytest.mark.parametrize("with_buffers", [True, False])
def test_weights_loads_a_checkpoint_that_holds_the_server_state(trained, tmp_path, with_buffers):
    """safl's checkpoints add the server optimiser's state to w^t (and the buffers): --weights reads w^t and the
    buffers and leaves the server's state, which is no part of the client's model."""
    victim = _victim() if with_buffers else targets.get_model("lenet", in_shape=(3, 32, 32), seed=1)
    w, buffers = load_checkpoint(trained, 3, victim.d) if with_buffers else (torch.randn(victim.d), None)
    save_checkpoint(tmp_path, 2, w, buffers, server={"step": 1, "m": torch.ones(5), "v": torch.ones(5)})
    assert set(torch.load(checkpoint_path(tmp_path, 2), weights_only=True)) >= {"weights", "server"}
    load_weights(victim, checkpoint_path(tmp_path, 2))
    torch.testing.assert_close(torch.nn.utils.parameters_to_vector(victim.model.parameters()), w, rtol=0, atol=0)
    for n, b in (buffers or {}).items():
        torch.testing.assert_close(dict(victim.model.named_buffers())[n], b, rtol=0, atol=0)


def test_weights_of_a_training_build_the_model_with_the_training_s_activation(trained, recwarn):
    """`leakattack train` trains with --act tanh by default, and resnet20's own activation is relu: `run --weights`
    on its checkpoint builds the tanh units the clients trained (it had loaded them into relu units without a word),
    records the act in config.json's model_params, and says so in one line; an act given explicitly is kept, with a
    warning where it is not the training's."""
    weights = str(checkpoint_path(trained, 3))
    with pytest.warns(UserWarning, match=r"trained by `leakattack train` with act=tanh \(its protocol.json\): "
                                         r"resnet20 is built with act=tanh units to match"):
        p = experiment.prepare(RunConfig(model="resnet20", dataset="photos", weights=weights, iterations=2))
    assert p.cfg.model_params == {"act": "tanh"}
    assert any(isinstance(m, torch.nn.Tanh) for m in p.case.victim.model.modules())
    assert not any(isinstance(m, torch.nn.ReLU) for m in p.case.victim.model.modules())
    recwarn.clear()
    experiment.prepare(RunConfig(model="resnet20", dataset="photos", weights=weights, iterations=2,
                                 model_params={"act": "tanh"}))
    assert not [w for w in recwarn if "leakattack train" in str(w.message)]
    with pytest.warns(UserWarning, match=r"trained by `leakattack train` with act=tanh \(its protocol.json\), and "
                                         r"this run's resnet20 has relu units: .* give --model-param act=tanh$"):
        experiment.prepare(RunConfig(model="resnet20", dataset="photos", weights=weights, iterations=2,
                                     model_params={"act": "relu"}))


def test_a_checkpoint_that_does_not_fit_names_the_model_and_data_it_was_trained_on(trained):
    """resnet20 trained on the photos (3 channels) has other weights than resnet20 on the digits (1 channel): the
    refusal names the training's model and data from its protocol.json."""
    with pytest.raises(ConfigError, match=r"is the checkpoint of another model: .* \(its protocol.json: a training of "
                                          r"resnet20 on photos; give --model resnet20 --dataset photos\)$"):
        experiment.prepare(RunConfig(model="resnet20", dataset="digits", weights=str(checkpoint_path(trained, 3)),
                                     iterations=2))


def test_a_checkpoint_round_that_was_never_written_is_refused_before_any_note_naming_the_rounds_held(trained,
                                                                                                   recwarn):
    """A mistyped round (round_1.pt for round_0001.pt) was refused after the training's activation note, as a
    model and data set to give that were the ones given."""
    missing = str(checkpoint_path(trained, 3).parent / "round_1.pt")
    with pytest.raises(ConfigError, match=r"weights file '.*round_1.pt' does not exist \(its folder holds "
                                          r"round_0001.pt to round_0003.pt\)$"):
        experiment.prepare(RunConfig(model="resnet20", dataset="photos", weights=missing, iterations=2))
    assert not [w for w in recwarn if "leakattack train" in str(w.message)]


def test_the_hint_for_a_checkpoint_of_an_image_folder_names_its_root(tmp_path):
    from PIL import Image

    root = tmp_path / "my images"
    for c in ("a", "b"):
        (root / c).mkdir(parents=True)
        for i in range(3):
            Image.new("RGB", (24, 24), (40 * i, 100 if c == "a" else 200, 0)).save(root / c / f"{i}.png")
    assert cli.main(["train", "--protocol", "fedavg", "--model", "lenet", "--dataset", "imagefolder", "--data-root",
                     str(root), "--rounds", "1", "--clients", "2", "--out", str(tmp_path / "t"), "--quiet"]) == 0
    weights = str(tmp_path / "t" / "fedavg" / "checkpoints" / "round_0001.pt")
    with pytest.raises(ConfigError, match=r"give --model lenet --dataset imagefolder --data-root '.*my images'\)$"):
        experiment.prepare(RunConfig(model="lenet", dataset="digits", weights=weights, iterations=2))


def test_a_checkpoint_read_at_another_image_size_names_the_size_its_training_read(tmp_path):
    """lenet trained on the photos (at their default 32 px) and attacked with --image-size 40 was refused with the
    weight counts alone, which did not say that the image size made them differ."""
    assert cli.main(["train", "--protocol", "fedavg", "--model", "lenet", "--dataset", "photos", "--rounds", "1",
                     "--clients", "2", "--out", str(tmp_path), "--quiet"]) == 0
    with pytest.raises(ConfigError, match=r"not the \d+ weights of this model \(built for inputs of shape "
                                          r"\(3, 40, 40\) and 10 classes: its count depends on both\); its "
                                          r"protocol.json: a training of lenet on photos at the set's default image "
                                          r"size, which `leakattack train` reads: leave out --image-size 40$"):
        experiment.prepare(RunConfig(model="lenet", dataset="photos", image_size=40, iterations=2,
                                     weights=str(checkpoint_path(tmp_path / "fedavg", 1))))
