"""SAFL and SACFL: server optimisers against hand-computed steps, de-sketch R^T, clipping, seeds, attack bars."""

import re

import pytest
import torch
from torch import nn

import targets
from leakattack import data, experiment
from leakattack.config import RunConfig
from targets.protocols import PAPER_SERVER_LR, WithNorm, ada_opt, clip_factor, get_protocol, new_server_state

HP = dict(lr=0.1, beta1=0.9, beta2=0.99, eps=1e-3)


@pytest.fixture(scope="module")
def digits_train():
    return data.train_test_split(data.get_dataset("digits"), 0.2, seed=0)[0]


def linear_victim(train, seed=0):
    """Softmax regression on 7x7-pooled digits (d = 500): small enough for dense sketches."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.AvgPool2d(4), nn.Flatten(), nn.Linear(49, 10))
    return targets.Victim.from_module(model, input_shape=train.in_shape, num_classes=10).to(dtype=torch.float64)


def vec(*v):
    return torch.tensor(v, dtype=torch.float64)


def test_adam_step_matches_hand_computation_including_a_non_positive_second_moment():
    """Algorithm 4 with bias correction; the paper's R^T(squares) rule can give v <= 0, read as 0 (step kappa m/eps)."""
    x, s = vec(1.0, 2.0), new_server_state(vec(0.0, 0.0))
    x1, s = ada_opt("adam", x, s, vec(0.5, -1.0), vec(0.25, 1.0), **HP)
    # m = [0.05, -0.1], v = [0.0025, 0.01], m^ = [0.5, -1], v^ = [0.25, 1]
    torch.testing.assert_close(x1, vec(1 - 0.1 * 0.5 / 0.501, 2 + 0.1 * 1 / 1.001))
    torch.testing.assert_close(s["m"], vec(0.05, -0.1))
    torch.testing.assert_close(s["v"], vec(0.0025, 0.01))
    x2, s = ada_opt("adam", x1, s, vec(0.5, -1.0), vec(-0.25, 1.0), **HP)
    # m = [0.095, -0.19], v = [-2.5e-5, 0.0199]; m^ = [0.5, -1], v^ = [-0.00126, 1] -> [0, 1]
    torch.testing.assert_close(s["v"], vec(-2.5e-5, 0.0199))
    torch.testing.assert_close(x2, x1 - 0.1 * vec(0.5 / 1e-3, -1 / 1.001))
    assert s["t"] == 2


def test_amsgrad_keeps_the_running_maximum_of_the_second_moment_without_bias_correction():
    x, s = vec(1.0, 2.0), new_server_state(vec(0.0, 0.0))
    x1, s = ada_opt("amsgrad", x, s, vec(0.5, -1.0), vec(0.25, 1.0), **HP)
    torch.testing.assert_close(x1, vec(1 - 0.1 * 0.05 / 0.051, 2 + 0.1 * 0.1 / 0.101))
    x2, s = ada_opt("amsgrad", x1, s, vec(0.0, 0.0), vec(0.0, 0.0), **HP)
    torch.testing.assert_close(s["v"], vec(0.002475, 0.0099))
    torch.testing.assert_close(s["vhat"], vec(0.0025, 0.01))  # v fell; v^ kept its maximum
    torch.testing.assert_close(x2, x1 - 0.1 * vec(0.045 / 0.051, -0.09 / 0.101))


def test_sgd_and_heavy_ball_steps():
    x, s = vec(1.0, 2.0), new_server_state(vec(0.0, 0.0))
    x1, _ = ada_opt("sgd", x, s, vec(0.5, -1.0), None, **HP)
    torch.testing.assert_close(x1, vec(0.95, 2.1))
    x1, s = ada_opt("sgdm", x, s, vec(0.5, -1.0), None, **HP)
    x2, s = ada_opt("sgdm", x1, s, vec(0.5, -1.0), None, **HP)
    torch.testing.assert_close(x2, vec(0.855, 2.29))  # m_2 = 0.9 * m_1 + g


def test_safl_adam_rounds_follow_algorithm_1_with_the_desketch_being_the_transpose(digits_train):
    """Two rounds by hand: m̄ = -mean_c R_t dw_c, desk = the dense R_t^T, V_t = R_t^T mean_c (R_t dw_c)^2."""
    v = linear_victim(digits_train)
    p = get_protocol("safl", v, digits_train, clients=3, batch_size=8, sketch="gaussian", sketch_ratio=0.2)
    assert p.kappa == PAPER_SERVER_LR["adam"] == 0.01
    b1, b2, eps, k = 0.9, 0.99, 1e-3, 0.01
    w = p.initial_weights()
    m = vv = torch.zeros_like(w)
    expect = w.clone()
    for t in (1, 2):
        R = p.operator(t).to_dense()  # b x d
        sent = torch.stack([R @ p.client_update(expect, *p.client_batch(t, c), t, c) for c in range(3)])
        g = R.T @ (-sent.mean(0))
        m = b1 * m + (1 - b1) * g
        vv = b2 * vv + (1 - b2) * (R.T @ sent.pow(2).mean(0))
        expect = expect - k * (m / (1 - b1 ** t)) / ((vv / (1 - b2 ** t)).clamp_min(0).sqrt() + eps)
        w, stats = p.run_round(w, t)
        torch.testing.assert_close(w, expect, rtol=0, atol=1e-10)
        assert stats["floats_sent"] == p.b == round(0.2 * p.d)


def test_safl_sgd_is_song_et_al_algorithm_1_with_kappa_as_global_rate(digits_train):
    kw = dict(clients=2, batch_size=8, sketch="srht", sketch_ratio=0.3)
    a = get_protocol("safl", linear_victim(digits_train), digits_train, server_opt="sgd", server_lr=0.5, **kw)
    b = get_protocol("sketched", linear_victim(digits_train), digits_train, global_lr=0.5, **kw)
    wa, wb = a.initial_weights(), b.initial_weights()
    for t in (1, 2, 3):
        wa, _ = a.run_round(wa, t)
        wb, _ = b.run_round(wb, t)
    torch.testing.assert_close(wa, wb, rtol=0, atol=1e-12)


def test_desketched_second_moment_squares_the_desketched_average(digits_train):
    v = linear_victim(digits_train)
    p = get_protocol("safl", v, digits_train, clients=2, batch_size=8, sketch="countsketch", sketch_ratio=0.2,
                     server_opt="amsgrad", second_moment="desketched", server_lr=0.05)
    w = p.initial_weights()
    R = p.operator(1)
    g = R.adjoint(-torch.stack([R.apply(p.client_update(w, *p.client_batch(1, c), 1, c)) for c in range(2)]).mean(0))
    m, vv = 0.1 * g, 0.01 * g.pow(2)
    w1, _ = p.run_round(w, 1)
    torch.testing.assert_close(w1, w - 0.05 * m / (vv.sqrt() + 1e-3), rtol=0, atol=1e-12)


def test_safl_rounds_must_run_in_order_and_replay_restarts_the_server_state(digits_train):
    p = get_protocol("safl", linear_victim(digits_train), digits_train, clients=2, batch_size=8)
    w = p.initial_weights()
    with pytest.raises(RuntimeError, match="in order"):
        p.run_round(w, 2)
    w2, _ = p.run_round(w, 1)
    torch.testing.assert_close(p.replay(2), w2, rtol=0, atol=0)
    done = []
    w3, _ = p.run_round(w2, 2)
    torch.testing.assert_close(p.replay(3, on_round=done.append), w3, rtol=0, atol=0)
    assert done == [1, 2]  # a progress bar's hook: once after each replayed round


@pytest.mark.parametrize("opt", ["adam", "amsgrad", "sgd", "sgdm"])
def test_a_replay_from_the_server_state_before_a_round_continues_the_rounds_exactly(digits_train, opt):
    """The state ``server_state`` gives before round 3 and w^3 let another protocol object run rounds 3..4 as the
    uninterrupted one does; it holds the round count and only the moments the optimiser updates."""
    def build():
        return get_protocol("safl", linear_victim(digits_train), digits_train, clients=2, batch_size=8,
                            server_opt=opt, server_lr=0.05)
    p = build()
    assert p.server_state() is None  # before round 1
    w = p.initial_weights()
    for t in (1, 2):
        w, _ = p.run_round(w, t)
    state = p.server_state()
    assert state is not None and state["t"] == 2
    assert set(state) - {"t"} == {"sgd": set(), "sgdm": {"m"}, "adam": {"m", "v"}, "amsgrad": {"m", "v", "vhat"}}[opt]
    w3 = w
    for t in (3, 4):
        w, _ = p.run_round(w, t)
    torch.testing.assert_close(build().replay(5, start=3, w=w3, state=state), w, rtol=0, atol=0)


@pytest.mark.parametrize("change,needle", [
    (lambda s: {**s, "t": 1}, "not the one after round 2 (its round count is 1)"),
    (lambda s: {k: v for k, v in s.items() if k != "v"}, "does not hold the adam moments (m, v) of 500 weights"),
    (lambda s: {**s, "m": s["m"][:3]}, "does not hold the adam moments"),
    (lambda s: None, "round 3 needs the server state after round 2"),
])
def test_a_server_state_that_is_not_the_one_before_the_round_is_refused_in_one_sentence(digits_train, change,
                                                                                          needle):
    p = get_protocol("safl", linear_victim(digits_train), digits_train, clients=2, batch_size=8)
    w = p.initial_weights()
    for t in (1, 2):
        w, _ = p.run_round(w, t)
    with pytest.raises(ValueError, match=re.escape(needle)):
        p.load_server_state(change(p.server_state()), 3)


@pytest.mark.parametrize("tau", [0.13, 10.0])
def test_sacfl_records_the_round_s_clip_as_the_server_computed_it_whatever_batch_is_attacked(digits_train, tau):
    """The attacked message on 1 image, while clients train on batches of 8, has about twice their norm: the round's
    mean norm, clip factor and whether the clip fired mixed that norm into the clients' (0.155 for the server's
    0.112: the clip 'fired' at tau = 0.13 where the server's did not).  They are the server's, as train.jsonl
    records them."""
    p = get_protocol("sacfl", linear_victim(digits_train), digits_train, clients=3, batch_size=8,
                     sketch_ratio=0.3, clip_threshold=tau)
    w = p.initial_weights()
    _, stats = p.run_round(w, 1)
    for batch in (None, 8, 1):
        info = p.observe(w, 1, 0, batch_size=batch).info
        assert {k: info[f"round_{k}"] for k in stats["record"]} == stats["record"], batch
    one = p.observe(w, 1, 0, batch_size=1).info
    assert one["norm_sent"] > 1.5 * stats["record"]["mean_norm"]  # the attacked message's own norm stays its own


def test_sacfl_clip_factor_is_min_of_tau_over_mean_norm_and_one():
    assert clip_factor(0.1, 0.4) == pytest.approx(0.25)
    assert clip_factor(0.1, 0.05) == 1.0
    assert clip_factor(0.1, 0.0) == 1.0


@pytest.mark.parametrize("tau", [1e-3, 10.0])
def test_sacfl_message_carries_the_norm_and_the_server_clips_by_the_mean_norm(digits_train, tau):
    v = linear_victim(digits_train)
    p = get_protocol("sacfl", v, digits_train, clients=3, batch_size=8, sketch="gaussian", sketch_ratio=0.1,
                     clip_threshold=tau, server_lr=2.0)
    w = p.initial_weights()
    R = p.operator(1).to_dense()
    deltas = [p.client_update(w, *p.client_batch(1, c), 1, c) for c in range(3)]
    msg = p.encode(deltas[0], 1, c=0)
    assert msg.numel() == p.floats_per_client() == p.b + 1
    torch.testing.assert_close(msg, torch.cat([R @ deltas[0], deltas[0].norm().reshape(1)]))
    mean_norm = sum(float(d.norm()) for d in deltas) / 3
    factor = min(tau / mean_norm, 1.0)
    assert (factor < 1) == (tau < mean_norm)
    w1, _ = p.run_round(w, 1)
    torch.testing.assert_close(w1, w + 2.0 * factor * R.T @ (R @ torch.stack(deltas).mean(0)), rtol=0, atol=1e-12)


def test_messages_are_reproducible_from_the_seed_and_change_with_it(digits_train):
    def two_rounds(seed):
        p = get_protocol("safl", linear_victim(digits_train), digits_train, clients=2, batch_size=8, seed=seed)
        w = p.initial_weights()
        w, _ = p.run_round(w, 1)
        return p.observe(w, 2, 1).y
    torch.testing.assert_close(two_rounds(0), two_rounds(0), rtol=0, atol=0)
    assert (two_rounds(0) - two_rounds(1)).norm() > 0.1


def test_sacfl_attacker_model_reproduces_the_message_and_its_norm(digits_train):
    p = get_protocol("sacfl", linear_victim(digits_train), digits_train, clients=2, local_steps=2, sketch_ratio=0.3)
    msg = p.observe(p.initial_weights(), 1, 0, batch_size=2)
    torch.testing.assert_close(msg.forward(msg.x, msg.labels).detach(), msg.y, rtol=0, atol=1e-12)
    assert isinstance(msg.linear_map.inner, WithNorm) and msg.y.numel() == msg.linear_map.b
    unit = msg.info["message_norm"]
    assert msg.y[-1] * unit == pytest.approx(msg.update_norm, rel=1e-12)


def cfg(**kw):
    base = dict(model="lenet", dataset="digits", batch_size=1, iterations=200, seed=0, protocol="safl",
                sketch="srht", sketch_ratio=0.1)
    return RunConfig(**{**base, **kw})


@pytest.mark.parametrize("protocol", ["safl", "sacfl"])
def test_attack_on_the_round_1_message_at_b_over_d_0_1_reaches_60_db(protocol):
    """srht b/d = 0.1, K = 1, digits image of client 0, L-BFGS float64, 200 steps (measured 70.0 / 69.3 dB)."""
    out = experiment.execute(experiment.prepare(cfg(protocol=protocol)), with_lpips=False)
    assert out.metrics.psnr >= 60 and out.metrics.label_acc == 1.0, out.metrics


#: a value other than its default for each setting that only some protocols read
OTHER_SETTINGS = {"sketch": "gaussian", "sketch_ratio": 0.2, "sketch_rows": 10, "sketch_buckets": 20, "dp_epsilon": 1.0,
                  "dp_delta": 1e-6, "dp_clip": 2.0, "server_opt": "sgd", "server_lr": 0.5, "server_beta1": 0.8,
                  "server_beta2": 0.9, "server_eps": 1e-2, "second_moment": "desketched", "clip_threshold": 0.2,
                  "projection_blocks": "global", "l1_scale": 1.5, "dp_rounds": 50}


@pytest.mark.parametrize("name", ["fedavg", "sketched", "sketched-dp", "safl", "sacfl", "compsgd", "privsgd",
                                  "fedsketch-privix", "fedsketch-heaprix"])
def test_the_settings_a_protocol_does_not_read_change_nothing_it_computes(name, digits_train):
    """What ``train`` and ``run --protocol`` warn of as changing nothing (``unread_settings``) leaves a round's
    weights bit for bit; every setting the protocol names in ``reads`` has another value to try here."""
    from targets.protocols import COMMON_SETTINGS, SPEC_DEFAULTS, list_protocols, protocol_class, unread_settings

    assert sorted(list_protocols()) == sorted(["fedavg", "sketched", "sketched-dp", "safl", "sacfl", "compsgd",
                                               "privsgd", "fedsketch-privix", "fedsketch-heaprix"])
    assert set(OTHER_SETTINGS) | {"sketch_params"} == set(SPEC_DEFAULTS) - set(COMMON_SETTINGS)
    cls = protocol_class(name)
    unread = {k: v for k, v in OTHER_SETTINGS.items() if k in unread_settings(cls, OTHER_SETTINGS)}
    assert set(unread) == set(OTHER_SETTINGS) - set(cls.reads)

    def one_round(**spec):
        p = get_protocol(name, linear_victim(digits_train), digits_train, clients=2, batch_size=8, **spec)
        return p.run_round(p.initial_weights(), 1)[0]

    assert torch.equal(one_round(**unread), one_round())
