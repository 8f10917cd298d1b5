"""Local epochs (--local-epochs): the seeded mini-batch schedule, the client's update against plain SGD, the attacker's
unrolled model of it, label recovery through -eta K, bad settings in one sentence, and SACFL's clip record."""

import json
import math
from collections import Counter

import pytest
import torch
from torch import nn

import targets
from leakattack import cases, cli, data, experiment
from leakattack.attacks import recover_labels
from leakattack.config import ConfigError, RunConfig, validate_protocol
from targets.protocols import SPEC_DEFAULTS, epoch_schedule, get_protocol

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def digits_train():
    return data.train_test_split(data.get_dataset("digits"), 0.2, seed=0)[0]


def linear_victim(train):
    """Softmax regression on 7x7-pooled digits (d = 500)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.AvgPool2d(4), nn.Flatten(), nn.Linear(49, 10))
    return targets.Victim.from_module(model, input_shape=train.in_shape, num_classes=10).to(dtype=torch.float64)


def lenet64(train):
    return targets.get_model("lenet", num_classes=10, in_shape=train.in_shape, seed=0, init="default",
                             act="tanh").to(dtype=torch.float64)


def test_epoch_schedule_cuts_each_epoch_into_minibatches_of_b_the_last_smaller():
    perms = [torch.tensor([2, 0, 4, 1, 3]), torch.tensor([4, 3, 2, 1, 0])]
    steps = epoch_schedule(2, perms)
    assert [s.tolist() for s in steps] == [[0, 1], [2, 3], [4], [2, 4], [0, 3], [1]]
    # position p of the round data holds shard image perms[0][p]: epoch 1 visits perms[1] in order
    assert torch.cat([perms[0][s] for s in steps[3:]]).tolist() == perms[1].tolist()


def test_every_shard_image_is_used_exactly_once_per_epoch_and_the_schedule_is_seeded(digits_train):
    def proto(seed=0):
        return get_protocol("fedavg", linear_victim(digits_train), digits_train, clients=7, local_epochs=3,
                            batch_size=16, seed=seed)
    p = proto()
    for c in range(p.clients):
        n = p.shards[c].numel()
        order = p.epoch_orders(1, c)[0]
        assert sorted(p.shards[c][order].tolist()) == p.shards[c].tolist()  # the round data is the whole shard
        x, _ = p.client_batch(1, c)
        torch.testing.assert_close(x, p.images[p.shards[c][order]], rtol=0, atol=0)
        steps = p.schedule(1, c)
        per_epoch = math.ceil(n / 16)
        assert len(steps) == 3 * per_epoch == p.step_count(c)
        for e in range(3):
            chunk = steps[e * per_epoch:(e + 1) * per_epoch]
            assert sorted(torch.cat(chunk).tolist()) == list(range(n))
            assert [s.numel() for s in chunk] == [16] * (per_epoch - 1) + [n - 16 * (per_epoch - 1)]
    same = [s.tolist() for s in proto().schedule(1, 2)]
    assert same == [s.tolist() for s in p.schedule(1, 2)]
    assert same != [s.tolist() for s in p.schedule(2, 2)]
    assert same != [s.tolist() for s in proto(seed=1).schedule(1, 2)]
    assert p.describe()["epoch_steps"] == [min(map(p.step_count, range(7))), max(map(p.step_count, range(7)))]


def test_client_update_is_one_sgd_step_per_minibatch_over_each_epoch(digits_train):
    """Checked against SGD steps on the model itself (p -= lr grad), walking the shard in each epoch's order."""
    victim = linear_victim(digits_train)
    p = get_protocol("fedavg", victim, digits_train, clients=9, local_epochs=2, batch_size=40, local_lr=0.3)
    w = p.initial_weights()
    c = 4
    dw = p.client_update(w, *p.client_batch(1, c), 1, c)
    model = nn.Sequential(nn.AvgPool2d(4), nn.Flatten(), nn.Linear(49, 10)).to(torch.float64)
    torch.nn.utils.vector_to_parameters(w.clone(), model.parameters())
    for order in p.epoch_orders(1, c):
        for idx in p.shards[c][order].split(40):
            loss = nn.functional.cross_entropy(model(p.images[idx]), p.labels[idx])
            grads = torch.autograd.grad(loss, list(model.parameters()))
            with torch.no_grad():
                for param, g in zip(model.parameters(), grads):
                    param -= 0.3 * g
    torch.testing.assert_close(dw, torch.nn.utils.parameters_to_vector(model.parameters()).detach() - w,
                               rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize("protocol,spec", [
    ("safl", {"sketch_ratio": 0.1}),
    ("sketched", {"sketch_ratio": 0.1}),
    ("sketched", {"sketch": "none", "local_epochs": 2}),
    ("sacfl", {"sketch_ratio": 0.1}),
    ("fedsketch-privix", {}),
])
def test_attacker_model_reproduces_the_epoch_message_at_the_true_data(digits_train, protocol, spec):
    """lenet, 50 clients (n_c = 29), B = 8: 4 unrolled steps per epoch."""
    spec = {"clients": 50, "batch_size": 8, "local_epochs": 1, **spec}
    p = get_protocol(protocol, lenet64(digits_train), digits_train, **spec)
    msg = p.observe(p.initial_weights(), 1, 3)
    n = p.shards[3].numel()
    assert msg.x.shape[0] == n and msg.info["local_steps"] == spec["local_epochs"] * math.ceil(n / 8)
    torch.testing.assert_close(msg.forward(msg.x, msg.labels).detach(), msg.y, rtol=0, atol=1e-12)
    if spec.get("local_epochs") == 1:
        # dummy rows are interchangeable within a mini-batch, not across mini-batches
        within = torch.arange(n)
        within[:8] = within[:8].flip(0)
        torch.testing.assert_close(msg.forward(msg.x[within], msg.labels[within]).detach(), msg.y, rtol=0,
                                   atol=1e-12)
        across = torch.arange(n)
        across[[0, 8]] = across[[8, 0]]
        if msg.labels[0] != msg.labels[8] or not torch.equal(msg.x[0], msg.x[8]):
            assert (msg.forward(msg.x[across], msg.labels[across]).detach() - msg.y).norm() > 1e-6


def test_labels_are_read_through_minus_eta_k_from_an_epoch_update(digits_train):
    """srht b/d = 0.1, n_c = 29, K = 4: the pooled counts get >= 26 of the 29 labels (measured 28, 28, 27 on
    clients 0-2; read through -eta instead of -eta K they got 18, 19, 12)."""
    p = get_protocol("safl", lenet64(digits_train), digits_train, clients=50, batch_size=8, local_epochs=1,
                     sketch_ratio=0.1)
    w = p.initial_weights()
    torch.nn.utils.vector_to_parameters(w, p.victim.model.parameters())
    for c in range(3):
        msg = p.observe(w, 1, c)
        got = recover_labels(p.victim, msg.linear_map, msg.y, msg.x.shape[0])
        assert sum((Counter(got.tolist()) & Counter(msg.labels.tolist())).values()) >= 26


@pytest.mark.parametrize("protocol,spec,needle", [
    ("safl", {"local_epochs": 1, "local_steps": 3}, "give --local-epochs or --local-steps, not both"),
    ("fedavg", {"local_epochs": 2, "local_steps": 2}, "give --local-epochs or --local-steps, not both"),
    ("compsgd", {"local_epochs": 1}, "--local-epochs must be 0"),
    ("safl", {"local_epochs": -1}, "local epochs E must lie in [0, 1000000], got -1"),
])
def test_bad_local_epoch_settings_are_one_sentence(protocol, spec, needle):
    with pytest.raises(ConfigError, match="^[^\n]*$") as err:
        validate_protocol(protocol, {**SPEC_DEFAULTS, **spec})
    assert needle in str(err.value)


@pytest.mark.parametrize("argv,needle", [
    (["train", "--protocol", "safl", "--local-epochs", "1", "--local-steps", "3", "--rounds", "1"],
     "not both"),
    (["run", "--protocol", "safl", "--local-epochs", "1", "--local-steps", "2", "--iterations", "2"], "not both"),
    (["run", "--protocol", "safl", "--local-epochs", "1", "--batch-size", "4", "--clients", "50",
      "--iterations", "2"], "--batch-size 4 does not apply with --local-epochs"),
])
def test_the_command_line_refuses_them_with_exit_code_2_and_writes_nothing(tmp_path, capsys, argv, needle):
    out = tmp_path / "out"
    assert cli.main(argv + ["--out", str(out), "--quiet"] + (["--no-lpips"] if argv[0] == "run" else [])) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0] and "Traceback" not in err[0], err
    assert not out.exists()


def test_a_short_attack_on_an_epoch_message_lowers_l_r_and_scores_all_round_images():
    """safl, srht b/d = 0.1, 50 clients, B = 8 (n_c = 29, K = 4), L-BFGS float64, 15 steps; the labels of four
    mini-batches are optimised (dlg), as the run announces."""
    cfg = RunConfig(model="lenet", dataset="digits", protocol="safl", sketch="srht", sketch_ratio=0.1, seed=0,
                    iterations=15, protocol_client=1,
                    protocol_spec={"clients": 50, "batch_size": 8, "local_epochs": 1})
    with pytest.warns(UserWarning, match="share each of the 4 mini-batches .* optimises soft labels"):
        p = experiment.prepare(cfg)
    assert p.obs.batch_size == p.x.shape[0] == 29 and experiment.unknowns(p.case) == 29 * 784
    out = experiment.execute(p, with_lpips=False)
    m = out.metrics
    assert m.label_mode == "dlg" and p.cfg.label_mode == "dlg"
    assert m.final_loss < 0.1 * m.initial_loss, m  # measured 1.1 -> 0.018
    assert len(m.psnr_each) == 29 and len(m.labels_attack) == 29


def test_a_long_unrolled_attack_is_announced_in_one_line(monkeypatch):
    monkeypatch.setattr(cases, "SLOW_UNROLL_SECONDS", 1e-9)
    cfg = RunConfig(model="lenet", dataset="digits", protocol="safl", sketch="srht", sketch_ratio=0.1, seed=0,
                    iterations=7, label_mode="given", protocol_spec={"clients": 50, "batch_size": 8, "local_epochs": 1})
    with pytest.warns(UserWarning) as caught:
        experiment.prepare(cfg)
    notes = [str(w.message) for w in caught if "unrolls" in str(w.message)]
    assert len(notes) == 1 and "\n" not in notes[0], notes
    assert notes[0].startswith("the attacker unrolls 4 local step(s) over 29 image(s) per evaluation: about ")
    assert "for 7 iterations x 1 restart(s)" in notes[0]


def test_a_closed_form_which_unrolls_nothing_is_not_told_how_long_unrolling_takes(monkeypatch):
    """APRIL on a 3-step fedavg message was warned that unrolling the steps would take about 57 min for 6000
    iterations: it solves once, in 1.4 s."""
    import warnings

    monkeypatch.setattr(cases, "SLOW_UNROLL_SECONDS", 1e-9)
    cfg = RunConfig(model="lenet", dataset="digits", protocol="fedavg", sketch="none", seed=0, attack="rgap",
                    protocol_spec={"local_steps": 3, "batch_size": 1})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        experiment.prepare(cfg)
    assert not [w for w in caught if "unrolls" in str(w.message)], [str(w.message) for w in caught]


def test_sacfl_records_its_clip_per_round_and_what_the_norm_gives_the_attacker(tmp_path, digits_train):
    for tau, fired in ((1e-4, True), (100.0, False)):
        rc = cli.main(["train", "--protocol", "sacfl", "--rounds", "2", "--clients", "4", "--client-batch", "64",
                       "--local-epochs", "1", "--clip-threshold", str(tau), "--out", str(tmp_path), "--name",
                       f"tau{tau}", "--quiet", "--no-checkpoints"])
        assert rc == 0
        rows = [json.loads(line) for line in (tmp_path / f"tau{tau}" / "train.jsonl").read_text().splitlines()]
        for r in rows:
            assert r["clip_fired"] is fired
            assert r["clip_factor"] == pytest.approx(min(tau / r["mean_norm"], 1.0), rel=1e-12)
        stored = json.loads((tmp_path / f"tau{tau}" / "protocol.json").read_text())
        # epoch_steps: ceil(360/64), ceil(359/64)
        assert stored["spec"]["local_epochs"] == 1 and stored["describe"]["epoch_steps"] == [6, 6]
    p = get_protocol("sacfl", linear_victim(digits_train), digits_train, clients=3, batch_size=16, local_epochs=1,
                     sketch_ratio=0.3, clip_threshold=0.1)
    w = p.initial_weights()
    msg = p.observe(w, 1, 0)
    assert msg.info["norm_sent"] == pytest.approx(msg.update_norm, rel=1e-12)
    _, stats = p.run_round(w, 1)
    for key in ("clip_factor", "clip_fired", "mean_norm"):
        assert msg.info[f"round_{key}"] == pytest.approx(stats["record"][key], rel=1e-9)
    assert 0 < msg.info["norm_error_of_sketch"] < 1


def test_a_long_unrolled_attack_under_a_time_limit_says_how_many_iterations_the_limit_allows(monkeypatch):
    monkeypatch.setattr(cases, "SLOW_UNROLL_SECONDS", 1e-9)
    cfg = RunConfig(model="lenet", dataset="digits", protocol="safl", sketch="srht", sketch_ratio=0.1, seed=0,
                    iterations=100000, time_limit=0.01, label_mode="given",
                    protocol_spec={"clients": 50, "batch_size": 8, "local_epochs": 1})
    with pytest.warns(UserWarning) as caught:
        experiment.prepare(cfg)
    notes = [str(w.message) for w in caught if "unrolls" in str(w.message)]
    assert len(notes) == 1 and "its time limit of" in notes[0], notes
    allowed = int(notes[0].split("stops it after about ")[1].split(";")[0])
    assert 0 <= allowed < 100000


def test_fedavg_weights_each_client_by_the_examples_it_trained_on(digits_train):
    """McMahan et al. 2017, Algorithm 1: w^{t+1} = w^t + sum_c n_c / n dw_c, with n_c a client's shard under
    --local-epochs (non-iid shards differ in size); equal batches of B give the plain mean."""
    victim = linear_victim(digits_train)
    p = get_protocol("fedavg", victim, digits_train, clients=3, noniid=True, local_epochs=1, batch_size=64,
                     local_lr=0.3)
    sizes = [int(p.shards[c].numel()) for c in range(3)]
    assert len(set(sizes)) == 3
    w = p.initial_weights()
    w_next, stats = p.run_round(w, 1)
    dws = [p.client_update(w, *p.client_batch(1, c), 1, c) for c in stats["clients"]]
    n = [sizes[c] for c in stats["clients"]]
    torch.testing.assert_close(w_next, w + sum(dw * (k / sum(n)) for dw, k in zip(dws, n)), rtol=1e-12, atol=1e-15)
    assert float((w_next - (w + torch.stack(dws).mean(0))).norm()) > 1e-3 * float(torch.stack(dws).norm())
    batch = get_protocol("fedavg", victim, digits_train, clients=3, noniid=True, batch_size=16, local_lr=0.3)
    w_next, stats = batch.run_round(w, 1)
    dws = [batch.client_update(w, *batch.client_batch(1, c), 1, c) for c in stats["clients"]]
    assert torch.equal(w_next, w + torch.stack(dws).mean(0))
