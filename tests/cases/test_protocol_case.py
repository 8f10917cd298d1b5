"""Attacking a protocol message: the simulator reproduces the message, the K = 1 bar, train/run CLI and bad input."""

import json

import pytest
import torch

from leakattack import cli, experiment
from leakattack.attacks import recover_labels
from leakattack.config import RunConfig


def cfg(**kw):
    base = dict(model="lenet", dataset="digits", batch_size=1, iterations=300, seed=0, protocol="sketched",
                sketch="srht", sketch_ratio=0.5)
    return RunConfig(**{**base, **kw})


@pytest.mark.parametrize("protocol,extra", [
    ("fedavg", {}),
    ("sketched", {"protocol_spec": {"local_steps": 3}}),
    ("fedsketch-privix", {"protocol_spec": {"sketch_rows": 20, "sketch_buckets": 40}}),
    ("fedsketch-privix", {"match_space": "unsketched"}),
    ("fedsketch-heaprix", {}),
])
def test_attacker_simulator_reproduces_the_message_at_the_true_data(protocol, extra):
    p = experiment.prepare(cfg(protocol=protocol, **extra))
    torch.testing.assert_close(p.obs.forward(p.x, p.labels), p.obs.y, rtol=1e-9, atol=1e-12)


def test_unknown_sketch_seed_does_not_reproduce_the_message():
    p = experiment.prepare(cfg(sketch_known=False))
    err = (p.obs.forward(p.x, p.labels) - p.obs.y).norm() / p.obs.y.norm()
    assert err > 0.5


def test_message_map_recovers_the_label_of_an_update_with_its_negative_sign():
    for c in range(5):
        p = experiment.prepare(cfg(protocol_client=c))
        assert recover_labels(p.victim, p.obs.linear_map, p.obs.y, 1).tolist() == p.labels.tolist()


def test_attack_on_k1_sketched_srht_message_at_round_1_reaches_30_db():
    """srht, b/d = 0.5, K = 1, round 1, L-BFGS float64 (measured ~78 dB in 300 steps)."""
    out = experiment.execute(experiment.prepare(cfg()), with_lpips=False)
    assert out.metrics.psnr >= 30
    assert out.metrics.label_acc == 1.0



@pytest.mark.parametrize("protocol", ["fedavg", "sketched"])
def test_attack_does_not_depend_on_the_message_scale(protocol):
    """A trained model's message is tiny (||y||^2 ~ 1e-5 at round 500); local_lr = 1e-4 makes one at round 1.

    Unnormalised, torch's L-BFGS drops every curvature pair (s^T y <= 1e-10) and stalled at ~30 dB here.
    """
    psnr = {}
    for lr in (0.1, 1e-4):
        c = cfg(protocol=protocol, iterations=150, label_mode="given", protocol_spec={"local_lr": lr})
        psnr[lr] = experiment.execute(experiment.prepare(c), with_lpips=False).metrics.psnr
    assert psnr[1e-4] >= 60 and abs(psnr[1e-4] - psnr[0.1]) < 10, psnr


def test_label_snr_is_infinite_unsketched_and_large_at_round_1():
    assert experiment.prepare(cfg(protocol="fedavg")).obs.extra["label_snr"] == float("inf")
    assert experiment.prepare(cfg()).obs.extra["label_snr"] > 2


def test_train_writes_jsonl_checkpoints_and_figure_and_attack_reads_them(tmp_path):
    out = tmp_path / "runs"
    for proto in ("fedavg", "sketched"):
        rc = cli.main(["train", "--protocol", proto, "--rounds", "3", "--clients", "4", "--client-batch", "8",
                       "--out", str(out), "--quiet"])
        assert rc == 0
    rows = [json.loads(line) for line in (out / "sketched" / "train.jsonl").read_text().splitlines()]
    assert [r["round"] for r in rows] == [1, 2, 3]
    assert {"round", "train_loss", "test_acc", "floats_sent", "floats_cum", "floats_mean_cum"} <= set(rows[0])
    fedavg_first = json.loads((out / "fedavg" / "train.jsonl").read_text().splitlines()[0])
    assert rows[0]["floats_sent"] < fedavg_first["floats_sent"]
    assert (out / "accuracy_vs_floats.png").stat().st_size > 0
    assert (sorted(f.name for f in (out / "sketched" / "checkpoints").iterdir())
            == [f"round_{t:04d}.pt" for t in range(1, 5)])
    # w^2 from the checkpoint (float32) gives the same message as re-simulating round 1 from the seeds
    common = dict(protocol_round=2, protocol_spec={"clients": 4, "batch_size": 8}, sketch_ratio=0.1)
    from_dir = experiment.prepare(cfg(protocol_dir=str(out / "sketched"), **common))
    resim = experiment.prepare(cfg(**common))
    torch.testing.assert_close(from_dir.obs.y, resim.obs.y, rtol=1e-4, atol=1e-6)
    # trained again into the same folder with fewer rounds: refused, the earlier training's checkpoints stay
    before = sorted(f.name for f in (out / "fedavg" / "checkpoints").iterdir())
    assert cli.main(["train", "--protocol", "fedavg", "--rounds", "1", "--clients", "4", "--client-batch", "8",
                     "--out", str(out), "--quiet"]) == 2
    assert sorted(f.name for f in (out / "fedavg" / "checkpoints").iterdir()) == before


BAD_TRAIN = [
    (["--local-steps", "0"], "local steps"),
    (["--clients", "0"], "clients"),
    (["--sketch-ratio", "0.00001"], "b < 1"),
    (["--protocol", "fedprox"], "unknown protocol"),
]


@pytest.mark.parametrize("args,needle", BAD_TRAIN)
def test_bad_train_input_is_one_line_exit_2_and_writes_nothing(tmp_path, capsys, args, needle):
    out = tmp_path / "t"
    argv = ["train", "--protocol", "sketched", "--rounds", "2", "--out", str(out), "--quiet"] + args
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0]
    assert not out.exists()


def test_bad_attack_input_is_one_line_exit_2_and_writes_nothing(tmp_path, capsys):
    trained = tmp_path / "tr"
    assert cli.main(["train", "--protocol", "fedavg", "--rounds", "2", "--clients", "3", "--out", str(trained),
                     "--quiet"]) == 0
    capsys.readouterr()
    cases = [
        (["--protocol", "fedavg", "--protocol-dir", str(trained / "fedavg"), "--round", "9"], "round 9 does not exist"),
        (["--protocol", "fedavg", "--client", "12"], "client 12 does not exist"),
        (["--protocol", "fedavg", "--round", "0"], "round 0 does not exist"),
        (["--protocol", "sketched", "--local-steps", "0"], "local steps"),
        (["--protocol", "sketched", "--clients", "0"], "clients"),
        (["--protocol", "sketched", "--sketch-ratio", "0.00001"], "b < 1"),
        (["--protocol", "fedsketch-privix", "--client", "1"], "not sampled"),
        (["--protocol", "sketched", "--protocol-dir", str(trained / "fedavg")], "holds protocol 'fedavg'"),
    ]
    for args, needle in cases:
        out = tmp_path / "run"
        rc = cli.main(["run", "--model", "lenet", "--dataset", "digits", "--iterations", "2", "--out", str(out),
                       "--quiet", "--no-lpips"] + args)
        err = capsys.readouterr().err.strip().splitlines()
        assert rc == 2, args
        assert len(err) == 1 and needle in err[0], (args, err)
        assert not out.exists()


def test_a_protocol_that_samples_half_the_clients_counts_half_the_uplink_per_client(tmp_path, capsys):
    """fedsketch samples half of the clients per round: the average client sends half of what a sampled one does
    (floats_mean_cum), which the summary line says beside the per-sampled-client count."""
    assert cli.main(["train", "--protocol", "fedsketch-privix", "--rounds", "2", "--clients", "4",
                     "--client-batch", "8", "--out", str(tmp_path), "--quiet"]) == 0
    rows = [json.loads(line) for line in (tmp_path / "fedsketch-privix" / "train.jsonl").read_text().splitlines()]
    for r in rows:
        assert len(r["clients"]) == 2
    assert rows[-1]["floats_mean_cum"] == rows[-1]["floats_cum"] / 2 == rows[0]["floats_sent"]
    assert (f"floats/client {rows[-1]['floats_mean_cum']:.0f} in all on average, {rows[-1]['floats_cum']} per client "
            "sampled every round") in capsys.readouterr().out


def test_image_flags_a_protocol_does_not_read_are_said_in_one_warning(tmp_path, capsys):
    """--image-index and --image-size ran with --protocol without a word, the reconstruction the same as without
    them, while config.json recorded the values."""
    out = tmp_path / "run"
    assert cli.main(["run", "--protocol", "fedavg", "--round", "1", "--client", "0", "--image-index", "3",
                     "--image-size", "16", "--iterations", "2", "--no-lpips", "--quiet", "--out", str(out)]) == 0
    said = [ln for ln in capsys.readouterr().err.splitlines() if "not read with --protocol" in ln]
    assert said == ["leakattack: warning: --image-index 3 and --image-size 16 are not read with --protocol: the "
                    "attacked message holds the images the client's round draws from its own shard, at the size its "
                    "training read them"]
    assert cli.main(["run", "--protocol", "fedavg", "--round", "1", "--client", "0", "--iterations", "2",
                     "--no-lpips", "--quiet", "--out", str(tmp_path / "plain")]) == 0
    assert "not read with --protocol" not in capsys.readouterr().err


def test_a_training_checkpoint_away_from_its_folder_says_it_names_no_activation(tmp_path, capsys):
    """A round_TTTT.pt copied out of its training folder was attacked with LeNet's default sigmoid, where the
    training used tanh, without a word."""
    import shutil

    trained = tmp_path / "trained"
    assert cli.main(["train", "--quiet", "--threads", "1", "--rounds", "1", "--clients", "2", "--protocol", "fedavg",
                     "--out", str(trained)]) == 0
    lone = tmp_path / "lone.pt"
    shutil.copy(trained / "fedavg" / "checkpoints" / "round_0001.pt", lone)
    run = ["run", "--model", "lenet", "--dataset", "digits", "--iterations", "1", "--no-lpips", "--quiet"]
    capsys.readouterr()
    assert cli.main(run + ["--weights", str(lone), "--out", str(tmp_path / "a")]) == 0
    said = [ln for ln in capsys.readouterr().err.splitlines() if "flat weight vector" in ln]
    assert said == [f"leakattack: warning: weights file '{lone}' holds a flat weight vector, which does not say "
                    "which activation it was trained with: lenet is built with its default act=sigmoid (a `leakattack "
                    "train` checkpoint gives its training's only where it lies in its folder, beside protocol.json; "
                    "`leakattack train` uses tanh): give --model-param act=... as trained"]
    for extra in (["--weights", str(lone), "--model-param", "act=tanh"],
                  ["--weights", str(trained / "fedavg" / "checkpoints" / "round_0001.pt")]):
        assert cli.main(run + extra + ["--out", str(tmp_path / f"b{len(extra)}")]) == 0
        assert "flat weight vector" not in capsys.readouterr().err
    # copied into the folder of a training of another model: that protocol.json names no activation of lenet's
    other = tmp_path / "other" / "fedavg"
    (other / "checkpoints").mkdir(parents=True)
    spec = json.loads((trained / "fedavg" / "protocol.json").read_text())
    spec["model"] = {**spec["model"], "model": "resnet20", "dataset": "photos", "act": "relu"}
    (other / "protocol.json").write_text(json.dumps(spec))
    shutil.copy(lone, other / "checkpoints" / "round_0001.pt")
    assert cli.main(run + ["--weights", str(other / "checkpoints" / "round_0001.pt"), "--out",
                           str(tmp_path / "c")]) == 0
    assert "holds a flat weight vector, which does not say which activation" in capsys.readouterr().err


def test_the_report_says_a_protocol_run_attacked_another_batch_than_the_protocols_clients_send(tmp_path):
    """run --protocol at a --batch-size other than the protocol's clients' warned of it, and the report's message row
    read as the protocol's own message."""
    from leakattack.figures.report import build_report

    rows = {}
    for batch in (2, 32):
        out = tmp_path / f"b{batch}"
        assert cli.main(["run", "--protocol", "fedavg", "--model", "lenet", "--dataset", "digits", "--batch-size",
                         str(batch), "--iterations", "1", "--quiet", "--no-lpips", "--out", str(out)]) == 0
        text = build_report([out])
        start = text.index("protocol fedavg, round 1, client 0")
        rows[batch] = text[start:text.index("</td>", start)]
    assert rows[2] == ("protocol fedavg, round 1, client 0, a batch of 2 where the client&#x27;s round trains on "
                       "batches of 32 (--batch-size 2), K = 1 local step at learning rate 0.1")
    assert rows[32] == "protocol fedavg, round 1, client 0, a batch of 32, K = 1 local step at learning rate 0.1"


def test_the_report_names_the_local_steps_and_learning_rate_the_message_covers(tmp_path):
    """The report's setting named neither: K appeared only inside the epsilon formula."""
    from leakattack.figures.report import build_report

    out = tmp_path / "k3"
    assert cli.main(["run", "--protocol", "fedavg", "--model", "lenet", "--dataset", "digits", "--local-steps", "3",
                     "--local-lr", "0.05", "--batch-size", "32", "--iterations", "1", "--quiet", "--no-lpips", "--out",
                     str(out)]) == 0
    assert "protocol fedavg, round 1, client 0, a batch of 32, K = 3 local steps at learning rate 0.05</td>" in \
        build_report([out])
    out = tmp_path / "compsgd"  # its clients send one projected gradient: no local step, whatever K the spec holds
    assert cli.main(["run", "--protocol", "compsgd", "--model", "lenet", "--dataset", "digits", "--batch-size", "32",
                     "--iterations", "1", "--quiet", "--no-lpips", "--out", str(out)]) == 0
    assert "protocol compsgd, round 1, client 0, a batch of 32, one gradient at w^t (no local step)</td>" in \
        build_report([out])
