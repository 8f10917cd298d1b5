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
                                        rf"model has {lenet.d}$"):
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
