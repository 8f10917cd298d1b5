"""COMPSGD and PRIVSGD: l1 projection and lift against brute-force optimality checks, the server step, sigma, seeds,
attacks."""

import json
import math

import pytest
import torch
from torch import nn

import targets
from defenses.accounting import accountant_epsilon
from leakattack import data, experiment
from leakattack.config import RunConfig
from leakattack.sketch import get_sketch
from targets.protocols import (
    get_protocol,
    layer_blocks,
    lift_l1,
    normalised_projection,
    per_example_clipped_mean,
    privsgd_epsilon,
    privsgd_sigma,
    project_l1_ball,
)


@pytest.fixture(scope="module")
def digits_train():
    return data.train_test_split(data.get_dataset("digits"), 0.2, seed=0)[0]


def small_victim(train, seed=0):
    """A two-layer net on 7x7-pooled digits (d = 49*8 + 8 + 8*10 + 10 = 490): two layers, dense sketches cheap."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.AvgPool2d(4), nn.Flatten(), nn.Linear(49, 8), nn.Tanh(), nn.Linear(8, 10))
    return targets.Victim.from_module(model, input_shape=train.in_shape, num_classes=10).to(dtype=torch.float64)


def dense(op):
    """The b x d matrix of an operator, read column by column through ``apply`` (independent of ``adjoint``)."""
    return op.apply(torch.eye(op.d, dtype=torch.float64)).T


def vertex_gaps(point, target, vertices):
    """<target - point, v - point> for every vertex v: all <= 0 iff point is the projection of target onto their
    hull."""
    return (vertices - point) @ (target - point)


@pytest.mark.parametrize("seed", range(4))
def test_l1_ball_projection_satisfies_the_projection_inequality_at_every_vertex(seed):
    """Brute force: x is the projection onto conv{+-r e_i} iff x is in the ball and <v - x, y - x> <= 0 at all 2d
    vertices."""
    gen = torch.Generator().manual_seed(seed)
    d, r = 30, 1.5
    v = 3 * torch.randn(d, generator=gen, dtype=torch.float64)
    x = project_l1_ball(v, r)
    assert float(x.abs().sum()) == pytest.approx(r, rel=1e-12)
    vertices = torch.cat([r * torch.eye(d, dtype=torch.float64), -r * torch.eye(d, dtype=torch.float64)])
    assert float(vertex_gaps(x, v, vertices).max()) <= 1e-12
    # an independent solve: x = soft-threshold(v, theta) with ||x||_1 = r, theta by bisection
    lo, hi = 0.0, float(v.abs().max())
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if float((v.abs() - mid).clamp_min(0).sum()) > r else (lo, mid)
    torch.testing.assert_close(x, v.sign() * (v.abs() - lo).clamp_min(0), rtol=0, atol=1e-12)


def test_l1_ball_projection_leaves_points_inside_the_ball_unchanged():
    v = torch.tensor([0.2, -0.3, 0.1], dtype=torch.float64)
    assert torch.equal(project_l1_ball(v, 1.0), v)


@pytest.mark.parametrize("scale", [0.05, 20.0])
def test_lift_lands_in_c_and_its_image_is_the_projection_of_z_onto_phi_c(scale):
    """Step c of COMPSGD: Phi w* = Pi_{Phi C}(z) checked at all 2d vertices +-r Phi e_i of Phi C; w* in C."""
    gen = torch.Generator().manual_seed(1)
    d, m, r = 40, 8, 2.0
    op = get_sketch("gaussian", d, m, seed=3)
    w0 = project_l1_ball(torch.randn(d, generator=gen, dtype=torch.float64), 0.5 * r)
    z = op.apply(w0) + scale * torch.randn(m, generator=gen, dtype=torch.float64)
    w, iters = lift_l1(op, z, w0, r, max_iter=20000, tol=1e-12)
    assert float(w.abs().sum()) <= r * (1 + 1e-12)
    Phi = dense(op)
    vertices = torch.cat([r * Phi.T, -r * Phi.T])  # (2d, m)
    theta = op.apply(w)
    assert float(vertex_gaps(theta, z, vertices).max()) <= 1e-9 * float(z.norm() * r * Phi.norm())
    if scale < 1:  # z inside Phi C: the lift hits it exactly
        assert float((theta - z).norm()) <= 1e-8 * float(z.norm())
    else:
        assert float(w.abs().sum()) == pytest.approx(r, rel=1e-9)  # the ball binds


def test_lift_with_an_inactive_ball_is_the_minimum_norm_change():
    """Warm-started at w_t, the lift is w_t - Phi^T (Phi Phi^T)^{-1} (Phi w_t - z), the point of S_t nearest w_t."""
    gen = torch.Generator().manual_seed(2)
    op = get_sketch("sparse", 60, 12, seed=5, s=3)
    w0 = 0.1 * torch.randn(60, generator=gen, dtype=torch.float64)
    z = op.apply(w0) - 0.01 * torch.randn(12, generator=gen, dtype=torch.float64)
    w, _ = lift_l1(op, z, w0, radius=100.0)
    Phi = dense(op)
    expect = w0 - Phi.T @ torch.linalg.solve(Phi @ Phi.T, Phi @ w0 - z)
    assert float((w - expect).norm()) <= 1e-6 * float((expect - w0).norm())  # the lift's stopping rule: 1e-7 per step


def test_block_projection_is_block_diagonal_with_per_layer_dimensions(digits_train):
    v = small_victim(digits_train)
    blocks = layer_blocks(v)
    assert [(s.start, s.stop) for s in blocks] == [(0, 400), (400, 490)]
    p = get_protocol("compsgd", v, digits_train, clients=2, sketch="gaussian", sketch_ratio=0.1)
    assert p.block_dims() == [40, 9] and p.floats_per_client() == 49
    Phi = p.operator(1)
    D = dense(Phi)
    assert D[:40, 400:].abs().max() == 0 and D[40:, :400].abs().max() == 0
    torch.testing.assert_close(Phi.adjoint(torch.eye(49, dtype=torch.float64)), D)  # de-sketch is Phi^T
    g = get_protocol("compsgd", v, digits_train, clients=2, sketch="gaussian", sketch_ratio=0.1,
                     projection_blocks="global")
    assert g.block_dims() == [49] and len(g.operator(1).ops) == 1


def test_compsgd_round_is_the_projected_sgd_step_lifted_to_the_nearest_point(digits_train):
    """Inactive ball: w_{t+1} = w_t - eta P_i g per layer, P_i = Phi_i^T (Phi_i Phi_i^T)^{-1} Phi_i, g the clients'
    mean gradient."""
    v = small_victim(digits_train)
    p = get_protocol("compsgd", v, digits_train, clients=3, batch_size=8, sketch="gaussian", sketch_ratio=0.2,
                     l1_scale=50.0, local_lr=0.1, global_lr=2.0)
    w = p.initial_weights()
    grads = [targets.flat_gradient(v, *p.client_batch(1, c), params=targets.unflatten(v, w)) for c in range(3)]
    Phi = p.operator(1)
    torch.testing.assert_close(p.encode(grads[0], 1, c=0), Phi.apply(grads[0]))
    g = torch.stack(grads).mean(0)
    parts = []
    for s, op in zip(p.blocks, Phi.ops):
        A = dense(op)
        parts.append(w[s] - 0.2 * A.T @ torch.linalg.solve(A @ A.T, A @ g[s]))
    w1, stats = p.run_round(w, 1)
    expect = torch.cat(parts)
    assert float((w1 - expect).norm()) <= 1e-6 * float((expect - w).norm())
    assert stats["floats_sent"] == p.floats_per_client()


def test_compsgd_keeps_every_layer_in_its_l1_ball(digits_train):
    v = small_victim(digits_train)
    p = get_protocol("compsgd", v, digits_train, clients=2, batch_size=16, sketch="sparse", sketch_ratio=0.3,
                     l1_scale=1.0, local_lr=2.0)
    w = p.initial_weights()
    for t in (1, 2, 3):
        w, _ = p.run_round(w, t)
    for s, r in zip(p.blocks, p.radii):
        assert float(w[s].abs().sum()) <= r * (1 + 1e-9)
    assert any(float(w[s].abs().sum()) > 0.999 * r for s, r in zip(p.blocks, p.radii))  # the ball binds


def test_privsgd_sigma_is_the_papers_formula_and_epsilon_returns_to_it(digits_train):
    """sigma^2 = 32 L^2 T log(1/delta) / (n^2 eps^2): L = 1, T = 100, delta = 1e-5, n = 32, eps = 0.5 gives 11.9963."""
    assert privsgd_sigma(1.0, 100, 1e-5, 32, 0.5) == pytest.approx(math.sqrt(3200 * math.log(1e5)) / 16, rel=1e-12)
    assert privsgd_sigma(1.0, 100, 1e-5, 32, 0.5) == pytest.approx(11.9963, abs=1e-4)
    assert privsgd_epsilon(2.0, 50, 1e-6, 10, privsgd_sigma(2.0, 50, 1e-6, 10, 3.0)) == pytest.approx(3.0)
    v = small_victim(digits_train)
    p = get_protocol("privsgd", v, digits_train, clients=2, batch_size=8, sketch="gaussian", sketch_ratio=1.0,
                     dp_epsilon=2.0, dp_rounds=25, dp_clip=0.5)
    assert p.sigma == pytest.approx(privsgd_sigma(0.5, 25, 1e-5, 8, 2.0))
    priv = p.privacy(25)
    assert priv["epsilon_paper"] == pytest.approx(2.0)
    assert priv["epsilon_paper"] > priv["epsilon_rdp"] > 0 and priv["epsilon_rdp_normalised"] > priv["epsilon_rdp"]
    # the words beside the per-record ε: the rescaling's 2L bound, and rounds past T (the run's line had neither)
    from targets.protocols import privacy_caveats
    assert priv["rounds_covered"] == 25
    assert privacy_caveats(priv, 25) == (f"; ε {priv['epsilon_rdp_normalised']:.3g} at the rescaling's sensitivity 2L, "
                                         "which bounds the message (the ε before it is at the per-record "
                                         "sensitivity, which the rescaling does not keep)")
    assert privacy_caveats(p.privacy(30), 30).endswith("; its noise was set for rounds 1..25, and past them no "
                                                       "guarantee holds")
    assert privacy_caveats({"sigma": 1.0, "epsilon_rdp": 0.1}, 30) == ""  # sketched-dp's: nothing to add


def test_privsgd_calibrates_its_noise_to_the_images_a_client_holds_where_its_shard_is_smaller_than_the_batch(
        digits_train):
    """100 clients hold 11-15 images each, so a batch of 32 is cut to them: n of the paper's formula is the images the
    released mean averages, the fewest (sigma with n = 32 gave epsilon_paper 2.29 where 1 was asked)."""
    v = small_victim(digits_train)
    p = get_protocol("privsgd", v, digits_train, clients=100, sketch="gaussian", sketch_ratio=0.5, dp_epsilon=1.0,
                     dp_rounds=2)
    fewest = min(s.numel() for s in p.shards)
    assert p.smallest_batch() == fewest < p.batch_size
    assert p.sigma == pytest.approx(privsgd_sigma(p.dp_clip, 2, p.dp_delta, fewest, 1.0))
    priv = p.privacy(2)
    assert priv["epsilon_paper"] == pytest.approx(1.0)
    assert priv["epsilon_rdp"] == pytest.approx(accountant_epsilon(p.sigma * fewest / p.dp_clip, 1.0, 2, p.dp_delta))


def test_privsgd_message_is_the_rescaled_projection_of_the_clipped_gradient_plus_sigma_noise(digits_train):
    v = small_victim(digits_train)
    p = get_protocol("privsgd", v, digits_train, clients=2, batch_size=8, sketch="gaussian", sketch_ratio=1.0,
                     projection_blocks="global", dp_epsilon=5.0, dp_clip=0.05)
    w = p.initial_weights()
    x, y = p.client_batch(1, 0)
    g = per_example_clipped_mean(v, w, x, y, 0.05)
    assert float(g.norm()) <= 0.05 + 1e-12
    Phi = p.operator(1)
    clean = normalised_projection(Phi, g)
    assert float(clean.norm()) == pytest.approx(float(g.norm()), rel=1e-12)  # ||s_t Phi_t g|| = ||g||
    noise = p.encode(g, 1, c=0) - clean
    assert noise.std().item() == pytest.approx(p.sigma, rel=0.15)  # m = 490 draws: 15 % is > 4 standard errors
    torch.testing.assert_close(p.encode(g, 1, c=0), p.encode(g, 1, c=0), rtol=0, atol=0)  # noise seeded by (t, c)
    assert (p.encode(g, 1, c=1) - p.encode(g, 1, c=0)).norm() > p.sigma


@pytest.mark.parametrize("name", ["compsgd", "privsgd"])
def test_messages_are_reproducible_from_the_seed_and_the_attacker_model_matches_without_noise(digits_train, name):
    def message(seed):
        p = get_protocol(name, small_victim(digits_train), digits_train, clients=2, batch_size=4, seed=seed,
                         sketch="sparse", sketch_ratio=0.2, dp_epsilon=1e12)
        w, _ = p.run_round(p.initial_weights(), 1)
        return p.observe(w, 2, 1, batch_size=2)
    a, b = message(0), message(0)
    torch.testing.assert_close(a.y, b.y, rtol=0, atol=0)
    assert (a.y - message(1).y).norm() > 0.1
    tol = 1e-9 if name == "compsgd" else 1e-6  # privsgd: noise at sigma ~ 1e-12 relative
    torch.testing.assert_close(a.forward(a.x, a.labels).detach(), a.y, rtol=0, atol=tol)


def cfg(**kw):
    base = dict(model="lenet", dataset="digits", batch_size=1, iterations=300, seed=0, protocol="compsgd",
                sketch="sparse", sketch_ratio=0.1)
    return RunConfig(**{**base, **kw})


@pytest.mark.parametrize("protocol,spec", [("compsgd", {}), ("privsgd", {"dp_epsilon": 1e8})])
def test_attack_on_the_round_1_projected_gradient_recovers_image_and_gradient(protocol, spec):
    """Sparse JL, m_i = d_i/10 per layer (1342 floats), L-BFGS float64, 300 steps: the image comes back, and with
    it g, against footnote 4 (measured 58.7 / 60.1 dB, ||g(x^) - g||/||g|| = 8e-4 / 7e-4; privsgd at eps = 1e8,
    i.e. without effective noise, shows the rescaling s_t and the clipping do not protect)."""
    p = experiment.prepare(cfg(protocol=protocol, protocol_spec=spec))
    out = experiment.execute(p, with_lpips=False)
    xh = out.result.x.clamp(0, 1)
    g, gh = (targets.flat_gradient(p.victim, xx, p.labels) for xx in (p.x, xh))
    rel = float((gh - g).norm() / g.norm())
    assert out.metrics.psnr >= 45 and rel <= 5e-3 and out.metrics.label_acc == 1.0, (out.metrics.psnr, rel)


def test_l1_projection_takes_a_radius_below_round_off_and_leaves_a_non_finite_vector_to_the_caller():
    """`--l1-scale 1e-300` and `--global-lr 1e300` raised torch's "max(): Expected reduction dim" from an empty
    set of indices: the radius is below the largest entry's round-off, or the vector is not finite."""
    v = torch.tensor([3.0, -2.0, 1.0], dtype=torch.float64)
    p = project_l1_ball(v, 1e-300)
    assert float(p.abs().sum()) <= 1e-299 and torch.isfinite(p).all()
    bad = torch.tensor([float("inf"), 1.0], dtype=torch.float64)
    assert project_l1_ball(bad, 1.0) is bad
    assert project_l1_ball(torch.tensor([float("nan"), 1.0]), 1.0).isnan().any()


def test_compsgd_with_weights_that_overflow_stops_as_diverged(tmp_path, capsys):
    from leakattack import cli

    assert cli.main(["train", "--protocol", "compsgd", "--rounds", "2", "--global-lr", "1e300", "--quiet",
                     "--threads", "1", "--out", str(tmp_path)]) == 2
    assert "training diverged in round 1" in capsys.readouterr().err
    assert json.loads((tmp_path / "compsgd" / "protocol.json").read_text())["stopped"] == "diverged"
