"""Gauss-Newton (Levenberg-Marquardt) steps after the first-order phase: they converge to the input where the
message pins it down, run only where they can, and report the Jacobian's rank they saw."""

import math
import time

import pytest
import torch

import targets
from leakattack.attacks import GradientMatching, gauss_newton, gradient_matching
from leakattack.attacks.gauss_newton import (
    CHORD_GAIN,
    STEPS,
    Refined,
    Stopped,
    count_sketch,
    gram,
    gram_rank,
    jacobian,
    levenberg_marquardt,
    normal_equations,
    sketched_normal_equations,
    steps_note,
    too_large,
)
from leakattack.attacks.gradient_matching import GAUSS_NEWTON_AFTER
from leakattack.channel import Channel
from leakattack.metrics import numerical_rank
from leakattack.observation import ThreatModel, observe
from leakattack.progress import FORCE_ENV
from leakattack.sketch import make_sketch

pytestmark = pytest.mark.usefixtures("one_thread")
#: an allocation that did not fit, as a GPU, torch's CPU allocator and Python report it
ALLOCATION_FAILURES = [
    lambda: torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"),
    lambda: RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory"),
    lambda: MemoryError(),
]
ALLOCATION_FAILURE_IDS = ["cuda", "cpu-allocator", "python"]


def _obs(dtype=torch.float64, ratio=0.5, shape=(1, 8, 8), seed=5):
    victim = targets.get_model("lenet", in_shape=shape, seed=0).to(dtype=dtype)
    x = torch.rand((1, *shape), generator=torch.Generator().manual_seed(seed), dtype=dtype)
    labels = torch.tensor([3])
    sketch = make_sketch("srht", victim.d, max(1, round(ratio * victim.d)), seed=1)
    return observe(victim, x, labels, Channel(sketch, ""), ThreatModel(knows_labels=True)), x


def test_steps_from_near_the_input_converge_to_it_quadratically():
    obs, x = _obs()
    start = x + 0.05 * torch.randn(x.shape, generator=torch.Generator().manual_seed(1), dtype=x.dtype)
    scale = float(obs.y.pow(2).sum())
    out = levenberg_marquardt(obs.forward, obs.y, start, obs.labels, tol=1e-10, scale=scale)
    assert out.stop == "tolerance", out
    assert float((out.x - x).abs().max()) < 1e-8  # the input itself, not a nearby match
    assert out.losses == sorted(out.losses, reverse=True)  # every accepted step lowers L_R
    # quadratic convergence: the last steps cut L_R by far more than a constant factor each
    assert len(out.losses) <= 8 and out.losses[-1] / scale < 1e-20
    assert out.rank == 64 and out.singular[0] >= out.singular[1] > 0


def test_chord_steps_reach_the_input_on_fewer_jacobians():
    # the same start, with chord steps (the round's J and factor reused) and with one step a J: both reach the input,
    # the chord steps on one J where the full steps form three
    obs, x = _obs()
    start = x + 0.05 * torch.randn(x.shape, generator=torch.Generator().manual_seed(1), dtype=x.dtype)
    scale = float(obs.y.pow(2).sum())
    chord = levenberg_marquardt(obs.forward, obs.y, start, obs.labels, tol=1e-10, scale=scale)
    full = levenberg_marquardt(obs.forward, obs.y, start, obs.labels, tol=1e-10, scale=scale, chord=False)
    for out in (chord, full):
        assert out.stop == "tolerance" and float((out.x - x).abs().max()) < 1e-8, out
        assert out.losses == sorted(out.losses, reverse=True) and out.losses[-1] / scale < 1e-20
        assert out.rank == 64 and out.rank_loss == out.losses[-1]  # the rank where they ended
    assert full.chord == 0 and full.steps == len(full.losses) >= 2
    assert chord.chord > 0 and chord.steps == len(chord.losses) - chord.chord < full.steps
    # each chord step cut L_R at least CHORD_GAIN-fold but the round's last
    assert all(a / b >= CHORD_GAIN for a, b in zip(chord.losses[:-2], chord.losses[1:-1]))


def test_a_start_at_the_input_takes_no_step_and_still_measures_the_rank_there():
    obs, x = _obs()
    out = levenberg_marquardt(obs.forward, obs.y, x, obs.labels, tol=1e-10, scale=float(obs.y.pow(2).sum()))
    assert out.stop == "tolerance" and out.steps == 0 and out.losses == [] and torch.equal(out.x, x)
    assert out.rank == 64 and out.rank_loss is not None and out.rank_loss / float(obs.y.pow(2).sum()) <= 1e-26


def test_chord_steps_that_slow_down_give_way_to_a_new_jacobian():
    # far from the zero at x = 1 the first J's chord steps soon cut L_R less than CHORD_GAIN-fold: a second J is
    # formed, whose chord steps then go on to round-off.  The first round ends below the tolerance (L_R 99 against
    # 6705 at the start): a round that cut L_R tenfold goes on, whatever its last chord step cut
    def forward(x, labels):
        return torch.cat([x - 1, 10 * (x ** 2 - 1), torch.exp(x) - math.e])

    out = levenberg_marquardt(forward, torch.zeros(3, dtype=torch.float64), torch.tensor([3.0], dtype=torch.float64),
                              None, tol=1e3, scale=1.0)
    assert out.stop == "tolerance" and abs(float(out.x) - 1) < 1e-12, out
    assert out.steps >= 2 and out.chord > out.steps and len(out.losses) == out.steps + out.chord
    assert len(out.rounds) == out.steps and out.rounds[0] == out.losses[1] and out.rounds[-1] == out.losses[-1]
    assert out.losses == sorted(out.losses, reverse=True) and out.losses[-1] <= 1e-26


def test_a_step_across_a_curved_valley_is_taken_where_its_chord_steps_lead_below_the_start():
    # Rosenbrock's valley as a residual, zero at (1, 1): from (-1, 1), on the valley's floor (L_R 4), the Gauss-Newton
    # step lands at (1, -3) with L_R 1600, and one chord step on the first J from there is (nearly) the zero.
    # Levenberg-Marquardt alone damps the step until L_R falls and creeps along the valley (one step a J: stalled)
    def forward(x, labels):
        return torch.stack([10 * (x[1] - x[0] ** 2), 1 - x[0]])

    y, start = torch.zeros(2, dtype=torch.float64), torch.tensor([-1.0, 1.0], dtype=torch.float64)
    out = levenberg_marquardt(forward, y, start, None, tol=1e-20, scale=1.0)
    assert out.stop == "tolerance" and float((out.x - 1).abs().max()) < 1e-12, out
    assert out.watched == 1 and out.losses[0] > 100 * out.start_loss > out.start_loss > out.losses[1]
    assert out.losses[1:] == sorted(out.losses[1:], reverse=True) and out.steps <= 3
    assert len(out.losses) == out.steps + out.chord
    damped = levenberg_marquardt(forward, y, start, None, tol=1e-20, scale=1.0, chord=False)
    assert damped.watched == 0 and damped.stop == "stalled" and float((damped.x - 1).abs().max()) > 0.1


@pytest.mark.parametrize("shape", [(50, 10), (300, 2000), (1000, 1537), (40, 3072)])
def test_the_gram_matrix_by_blocks_is_j_transpose_j(shape):
    J = torch.randn(*shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    A, full = gram(J), J.T @ J
    torch.testing.assert_close(A, full, rtol=0, atol=1e-13 * float(full.abs().max()))
    torch.testing.assert_close(A, A.T, rtol=0, atol=1e-13 * float(full.abs().max()))


def test_the_rank_from_the_gram_matrix_is_the_rank_of_j():
    g = torch.Generator().manual_seed(0)
    J = torch.randn(300, 40, generator=g, dtype=torch.float64) @ torch.diag(torch.logspace(0, -3, 40,
                                                                                           dtype=torch.float64))
    assert gram_rank(J.T @ J)[0] == numerical_rank(J) == 40
    J[:, 7] = J[:, 3] - 2 * J[:, 5]  # one column a combination of two others
    rank, (top, low) = gram_rank(J.T @ J)
    assert rank == numerical_rank(J) == 39 and low < 1e-6 * top


def test_the_attack_follows_l_bfgs_with_gauss_newton_and_records_it():
    obs, x = _obs()
    plain = GradientMatching(iterations=10, init_seed=2, labels="given", refine="none").reconstruct(obs)
    refined = GradientMatching(iterations=10, init_seed=2, labels="given", refine="gauss-newton").reconstruct(obs)
    assert plain.gauss_newton is None and plain.stop_reason == "iterations"
    gn = refined.gauss_newton
    assert gn is not None and gn["after_step"] == 10 and gn["loss_before"] == plain.final_loss and gn["kept"]
    assert gn["jacobians"] >= 1 and 0 <= gn["chord"] < gn["accepted"] <= gn["jacobians"] + gn["chord"]
    assert len(gn["round_losses"]) == gn["jacobians"] and gn["round_losses"][-1] == gn["loss_after"]
    assert gn["from_step"] == plain.best_step and f"best iterate (step {plain.best_step}" in refined.message
    assert gn["clamped"] == int(((plain.x < 0) | (plain.x > 1)).sum())
    # the first phase is the same run; the steps after it lower L_R and the result is their last iterate
    assert refined.losses[:11] == plain.losses
    assert refined.final_loss == gn["loss_after"] < plain.final_loss
    assert refined.iterations == refined.best_step == 10 + gn["accepted"] == len(refined.losses) - 1
    assert refined.stop_reason == "tolerance" and "Gauss-Newton" in refined.message
    assert float((refined.x - x).abs().max()) < 1e-6 < float((plain.x - x).abs().max())
    assert gn["jacobian_rank"] == 64


@pytest.mark.parametrize("change, reason", [
    ({"objective": "cosine"}, "the objective is cosine"),
    ({"priors": {"tv": 1e-3}}, "a prior (tv)"),
    ({"box": True}, "box"),
    ({"labels": "dlg"}, "the labels are optimised"),
    ({"refine": "none"}, "--refine none"),
])
def test_auto_leaves_out_objectives_that_are_not_l_r_alone(change, reason):
    obs, _ = _obs()
    assert reason in GradientMatching(**change).refinement(obs)
    assert GradientMatching().refinement(obs) is None


def test_auto_runs_in_float64_with_as_many_numbers_as_unknowns_after_the_first_phase_ended_on_its_own():
    attack = GradientMatching()
    assert "float32" in attack.refinement(_obs(dtype=torch.float32)[0])
    small, _ = _obs(ratio=0.005)  # b = 40 < 64 unknowns: no full-rank J exists
    assert "b = " in attack.refinement(small) and small.b < 64
    obs, _ = _obs()
    assert attack.refinement(obs, "stalled") is None and attack.refinement(obs, "tolerance") is None
    for stop in ("time-limit", "diverged", "pruned"):
        assert stop in attack.refinement(obs, stop)
    # a budget of steps used up: below GAUSS_NEWTON_AFTER it was a probe's
    assert GradientMatching(iterations=GAUSS_NEWTON_AFTER).refinement(obs, "iterations") is None
    assert "probe" in GradientMatching(iterations=GAUSS_NEWTON_AFTER - 1).refinement(obs, "iterations")
    # asked for by name, only the objective decides
    assert GradientMatching(refine="gauss-newton").refinement(small, "time-limit") is None


def test_the_size_bounds():
    assert too_large(7913, 3072, 15826) is None  # the DLG LeNet through srht b = d/2
    assert "unknowns" in too_large(10**5, 4097, 10**4)
    assert "numbers" in too_large(10**5, 3072, 10**4)
    assert "passes" in too_large(10**4, 3072, 272474)  # ResNet-20


def test_steps_left_out_for_size_alone_say_what_asking_for_them_costs_and_asked_for_they_run(monkeypatch):
    from leakattack.errors import size_text

    monkeypatch.setattr(gradient_matching, "GAUSS_NEWTON_AFTER", 20)
    monkeypatch.setattr(gauss_newton, "MAX_UNKNOWNS", 32)  # 64 unknowns: too many for auto
    obs, x = _obs()
    out = GradientMatching(iterations=30, init_seed=2, labels="given").reconstruct(obs)
    assert out.gauss_newton is None and out.stop_reason == "iterations"
    assert (f"o Gauss-Newton steps: m*B = 64 unknowns (it runs up to 32); --refine gauss-newton takes them anyway "
            f"(J of {obs.b} x 64 numbers, {size_text(8 * obs.b * 64)} in float64)") in out.message
    assert "--time-limit" not in out.message  # beyond the unknowns auto takes, a time limit does not pay for them
    asked = GradientMatching(iterations=30, init_seed=2, labels="given", refine="gauss-newton").reconstruct(obs)
    assert asked.gauss_newton["kept"] and float((asked.x - x).abs().max()) < 1e-6
    assert "--refine gauss-newton takes them" not in asked.message
    # another reason (a first phase cut short by its budget): no such note
    assert "--refine" not in GradientMatching(iterations=10, init_seed=2, labels="given").reconstruct(obs).message
    # a J too large to hold: the note names the passes that form a sketch of J without holding it
    monkeypatch.setattr(gauss_newton, "MAX_HELD", obs.b * 64 - 1)
    said = GradientMatching(iterations=30, init_seed=2, labels="given").reconstruct(obs).message
    assert (f"--refine gauss-newton takes them anyway (64 backward passes for a sketch of J, as J of {obs.b} x 64 "
            f"numbers would hold {size_text(8 * obs.b * 64)}), which can reach the input") in said
    # within the unknowns auto takes: a time limit that leaves room for them takes them too, and the note says so
    monkeypatch.setattr(gauss_newton, "MAX_UNKNOWNS", 4096)
    monkeypatch.setattr(gauss_newton, "MAX_WORK", 10)
    said = GradientMatching(iterations=30, init_seed=2, labels="given").reconstruct(obs).message
    assert "numbers would hold" in said and ", as does a --time-limit that leaves room for them, which can" in said


def test_steps_left_out_for_their_work_alone_are_taken_where_a_time_limit_pays_for_them(monkeypatch):
    monkeypatch.setattr(gradient_matching, "GAUSS_NEWTON_AFTER", 20)
    monkeypatch.setattr(gauss_newton, "MAX_WORK", 10)  # forming J is "too much work" for auto without a time limit
    obs, x = _obs()
    plain = GradientMatching(iterations=30, init_seed=2, labels="given").reconstruct(obs)
    assert plain.gauss_newton is None and "as does a --time-limit" in plain.message
    paid = GradientMatching(iterations=30, init_seed=2, labels="given", time_limit=600.0).reconstruct(obs)
    assert paid.gauss_newton["kept"] and paid.gauss_newton["paid_by_time"] and paid.stop_reason == "tolerance"
    assert float((paid.x - x).abs().max()) < 1e-6 and paid.gauss_newton["jacobian_rank"] == 64
    # too many unknowns for auto: a time limit does not change that
    monkeypatch.setattr(gauss_newton, "MAX_UNKNOWNS", 32)
    assert GradientMatching(iterations=30, init_seed=2, labels="given",
                            time_limit=600.0).reconstruct(obs).gauss_newton is None


def test_steps_a_time_limit_cannot_pay_for_stop_after_three_batches_and_say_what_one_j_takes(monkeypatch):
    monkeypatch.setattr(gradient_matching, "GAUSS_NEWTON_AFTER", 20)
    monkeypatch.setattr(gauss_newton, "MAX_WORK", 10)
    obs, _ = _obs()
    plain = GradientMatching(iterations=30, init_seed=2, labels="given").reconstruct(obs)
    real, calls = gauss_newton.products, []

    def slow(*args, **kw):  # each batched pass of columns takes a tenth of the time limit: J two tenths
        y, j, jt = real(*args, **kw)

        def column(e):
            calls.append(1)
            time.sleep(0.5)
            return j(e)

        return y, column, jt

    monkeypatch.setattr(gauss_newton, "products", slow)
    out = GradientMatching(iterations=30, init_seed=2, labels="given", time_limit=5.0).reconstruct(obs)
    assert len(calls) == 3 and out.gauss_newton["jacobians"] == 0 and not out.gauss_newton["kept"]
    assert out.gauss_newton["paid_by_time"] and 1.5 <= out.gauss_newton["foreseen_s"] <= 4.0  # 4 batches of 0.5 s
    assert out.stop_reason == "iterations" and torch.equal(out.x, plain.x)  # the first phase's run, as it was
    assert "stopped before their first step (at the pace of its first columns one J takes about" in out.message
    assert "did not leave room for it and one more J)" in out.message


def test_asked_for_by_name_on_another_objective_the_attack_refuses_in_one_sentence():
    obs, _ = _obs()
    reason = GradientMatching(refine="gauss-newton", objective="cosine").supports(obs)
    assert reason.startswith("Gauss-Newton steps need L_R itself as the objective: the objective is cosine")
    with pytest.raises(ValueError, match="refine must be one of"):
        GradientMatching(refine="newton")


def test_a_larger_budget_tries_the_steps_after_gauss_newton_after_first_order_steps(monkeypatch):
    # L-BFGS meets the tolerance at step ~40 here: with the threshold at 20 the steps follow step 20 and converge,
    # and the rest of the budget is not run
    monkeypatch.setattr(gradient_matching, "GAUSS_NEWTON_AFTER", 20)
    obs, x = _obs()
    out = GradientMatching(iterations=3000, init_seed=2, labels="given").reconstruct(obs)
    gn = out.gauss_newton
    assert gn["after_step"] == 20 and gn["kept"] and "first_attempt" not in gn
    assert out.iterations == 20 + gn["accepted"] and out.stop_reason == "tolerance"
    assert float((out.x - x).abs().max()) < 1e-8
    # not with a step schedule (its steps depend on the budget) nor below the threshold
    assert not GradientMatching(iterations=3000, schedule="step", labels="given")._tries_early(obs)
    assert not GradientMatching(iterations=20, labels="given")._tries_early(obs)


def test_steps_after_the_shorter_phase_that_do_not_converge_leave_the_whole_budget_to_run(monkeypatch):
    monkeypatch.setattr(gradient_matching, "GAUSS_NEWTON_AFTER", 20)
    calls = []

    def first_fails(forward, y, x, labels, **kw):
        calls.append(x.clone())
        if len(calls) == 1:
            return Refined(x=x + 1, losses=[1.0], steps=2, stop="stalled")
        return levenberg_marquardt(forward, y, x, labels, **kw)

    monkeypatch.setattr(gradient_matching, "levenberg_marquardt", first_fails)
    obs, x = _obs()
    out = GradientMatching(iterations=3000, init_seed=2, labels="given").reconstruct(obs)
    plain = GradientMatching(iterations=3000, init_seed=2, labels="given", refine="none").reconstruct(obs)
    assert len(calls) == 2 and torch.equal(calls[1], plain.x)  # the second time from the whole budget's iterate
    gn = out.gauss_newton
    assert gn["kept"] and gn["after_step"] == plain.iterations
    assert gn["first_attempt"]["after_step"] == 20 and not gn["first_attempt"]["kept"]
    assert "after step 20 had not converged" in out.message \
        and "so the attack ran again from its start, given its whole budget of" in out.message
    assert out.losses[: plain.iterations + 1] == plain.losses  # the whole budget's run is the run without them
    assert out.wall_s > plain.wall_s * 0.5


def test_steps_after_the_shorter_phase_that_reach_the_time_limit_leave_its_iterate(monkeypatch):
    monkeypatch.setattr(gradient_matching, "GAUSS_NEWTON_AFTER", 20)

    def slow(forward, y, x, labels, *, deadline, **kw):
        time.sleep(max(0.0, deadline - time.perf_counter()) + 0.01)
        return Refined(x=x, losses=[], steps=1, stop="time-limit")

    monkeypatch.setattr(gradient_matching, "levenberg_marquardt", slow)
    obs, x = _obs()
    out = GradientMatching(iterations=3000, init_seed=2, labels="given", time_limit=1.0).reconstruct(obs)
    short = GradientMatching(iterations=20, init_seed=2, labels="given", refine="none").reconstruct(obs)
    # no whole budget started with no time left: the 20-step iterate stays, with what the steps did
    assert out.iterations == 20 and torch.equal(out.x, short.x) and out.losses == short.losses
    assert out.gauss_newton["after_step"] == 20 and not out.gauss_newton["kept"]
    assert "the time limit was reached" in out.message


def test_the_steps_draw_their_own_bar_where_bars_are_drawn(monkeypatch, capsys):
    monkeypatch.setenv(FORCE_ENV, "1")
    obs, x = _obs()
    out = GradientMatching(iterations=10, init_seed=2, labels="given", refine="gauss-newton").reconstruct(
        obs, progress=True)
    err = capsys.readouterr().err
    assert "Gauss-Newton" in err and "L_R=" in err and "J: 16/64 columns" in err and out.gauss_newton["kept"]
    monkeypatch.setenv(FORCE_ENV, "0")
    GradientMatching(iterations=10, init_seed=2, labels="given", refine="gauss-newton").reconstruct(obs, progress=True)
    assert "Gauss-Newton" not in capsys.readouterr().err


def test_the_normal_equations_by_products_are_those_of_j():
    obs, x = _obs()
    J = jacobian(obs.forward, x, obs.labels)
    full = J.T @ J
    for chunk in (None, 1, 5):  # batched columns (CHUNK, and a last batch cut short) and one at a time
        A, jt = normal_equations(obs.forward, x, obs.labels, chunk=chunk)
        torch.testing.assert_close(A, full, rtol=0, atol=1e-12 * float(full.abs().max()))
        assert torch.equal(A, A.T)
    u = torch.randn(obs.b, generator=torch.Generator().manual_seed(2), dtype=x.dtype)
    torch.testing.assert_close(jt(u), J.T @ u, rtol=0, atol=1e-12 * float((J.T @ u).abs().max()))
    calls: list[int] = []
    with pytest.raises(Stopped):  # between batches of CHUNK columns, as jacobian
        normal_equations(obs.forward, x, obs.labels, stop=lambda: calls.append(1) or len(calls) == 2)



def test_a_count_sketch_adds_each_coordinate_with_a_sign_into_one_bucket():
    S = count_sketch(50, 8, torch.float64, "cpu", seed=3)
    M = S(torch.eye(50, dtype=torch.float64))  # row i: S e_i
    assert M.shape == (50, 8) and torch.equal((M != 0).sum(1), torch.ones(50, dtype=torch.long))
    assert set(M[M != 0].tolist()) <= {-1.0, 1.0} and len(set(M.argmax(1).tolist()) | set(M.argmin(1).tolist())) > 4
    u = torch.randn(3, 50, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    torch.testing.assert_close(S(u), u @ M, rtol=0, atol=1e-14)
    assert torch.equal(count_sketch(50, 8, torch.float64, "cpu", seed=3)(u), S(u))  # one seed, one S
    assert not torch.equal(count_sketch(50, 8, torch.float64, "cpu", seed=4)(u), S(u))


def _spread(A_s: torch.Tensor, A: torch.Tensor) -> torch.Tensor:
    """The eigenvalues of A^-1/2 A_s A^-1/2: how far A_s is from A along each direction."""
    L = torch.linalg.cholesky(A)
    inner = torch.linalg.solve_triangular(L, A_s, upper=False)
    return torch.linalg.eigvalsh(torch.linalg.solve_triangular(L, inner.T, upper=False))


def test_the_sketched_normal_equations_hold_j_transpose_j_in_every_direction_and_its_exact_products():
    obs, x = _obs()
    J = jacobian(obs.forward, x, obs.labels)
    A = J.T @ J
    A_s, jt, normal = sketched_normal_equations(obs.forward, x, obs.labels)  # S of 4n rows
    assert obs.b > 4 * x.numel()  # the message is compressed
    spread = _spread(A_s, A)
    assert 0.2 < float(spread.min()) and float(spread.max()) < 3  # within a constant factor in every direction
    assert gram_rank(A_s)[0] == gram_rank(A)[0] == x.numel()
    gen = torch.Generator().manual_seed(2)
    d, u = torch.randn(x.numel(), generator=gen, dtype=x.dtype), torch.randn(obs.b, generator=gen, dtype=x.dtype)
    torch.testing.assert_close(normal(d), A @ d, rtol=0, atol=1e-10 * float((A @ d).abs().max()))
    torch.testing.assert_close(jt(u), J.T @ u, rtol=0, atol=1e-12 * float((J.T @ u).abs().max()))
    more = _spread(sketched_normal_equations(obs.forward, x, obs.labels, rows=16)[0], A)  # more rows: nearer
    assert float(more.max() / more.min()) < float(spread.max() / spread.min())
    whole = sketched_normal_equations(obs.forward, x, obs.labels, rows=obs.b)[0]  # s >= b: S = I
    torch.testing.assert_close(whole, A, rtol=0, atol=1e-12 * float(A.abs().max()))
    calls: list[int] = []
    with pytest.raises(Stopped):  # between batches of CHUNK columns, as jacobian
        sketched_normal_equations(obs.forward, x, obs.labels, stop=lambda: calls.append(1) or len(calls) == 2)


@pytest.mark.parametrize("damping", [0.0, 1e-6])
def test_conjugate_gradients_preconditioned_by_a_sketch_solve_ill_conditioned_normal_equations(damping):
    # J of 20,000 x 64 with singular values from 1 to 1e-5 (condition 1e5): the sketch's preconditioner leaves
    # conjugate gradients a few dozen products where the plain ones do not get near in 60
    gen = torch.Generator().manual_seed(4)
    b, n = 20_000, 64
    U, _ = torch.linalg.qr(torch.randn(b, n, generator=gen, dtype=torch.float64))
    V, _ = torch.linalg.qr(torch.randn(n, n, generator=gen, dtype=torch.float64))
    J = U @ torch.diag(torch.logspace(0, -5, n, dtype=torch.float64)) @ V.T
    SJ = count_sketch(b, 4 * n, torch.float64, "cpu")(J.T).T
    A, A_s = J.T @ J, SJ.T @ SJ
    level = damping * float(A.diagonal().mean())
    g = J.T @ torch.randn(b, generator=gen, dtype=torch.float64)
    want = torch.linalg.solve(A + level * torch.eye(n, dtype=A.dtype), -g)
    products: list[int] = []
    got = gauss_newton._refined(A_s, level, lambda d: products.append(1) or A @ d)(g)
    assert float((got - want).norm() / want.norm()) < 1e-7 and len(products) <= 40, len(products)
    products.clear()
    plain = gauss_newton._refined(torch.eye(n, dtype=A.dtype) * float(A.diagonal().mean()), level,
                                  lambda d: products.append(1) or A @ d)(g)
    assert float((plain - want).norm() / want.norm()) > 1e-3 and len(products) > 40


def test_the_normal_equations_go_on_one_column_at_a_time_where_a_batched_pass_fails(monkeypatch):
    obs, x = _obs()
    J = jacobian(obs.forward, x, obs.labels)
    full = J.T @ J
    batched = torch.func.vmap
    calls: list[int] = []

    def third_fails(f):
        calls.append(1)
        if len(calls) == 3:  # an operation without a batching rule, met in the third batch
            raise NotImplementedError("no batching rule")
        return batched(f)

    monkeypatch.setattr(torch.func, "vmap", third_fails)
    A, _ = normal_equations(obs.forward, x, obs.labels, chunk=16)
    assert len(calls) == 3
    torch.testing.assert_close(A, full, rtol=0, atol=1e-12 * float(full.abs().max()))


@pytest.mark.parametrize("fails", ALLOCATION_FAILURES, ids=ALLOCATION_FAILURE_IDS)
def test_a_batch_of_columns_that_does_not_fit_is_formed_again_at_half_its_size(monkeypatch, fails):
    obs, x = _obs()
    full = jacobian(obs.forward, x, obs.labels, chunk=1)
    batched = torch.func.vmap
    sizes: list[int] = []

    def above_four_fails(f):
        def run(e):
            sizes.append(e.shape[0])
            if e.shape[0] > 4:  # a batch's temporaries that do not fit in memory
                raise fails()
            return batched(f)(e)
        return run

    monkeypatch.setattr(torch.func, "vmap", above_four_fails)
    J = jacobian(obs.forward, x, obs.labels, chunk=16)
    assert sizes[:3] == [16, 8, 4] and max(sizes[3:]) == 4 and sum(s for s in sizes if s <= 4) == x.numel()
    torch.testing.assert_close(J, full, rtol=0, atol=1e-12 * float(full.abs().max()))


def test_a_single_column_that_does_not_fit_is_the_caller_s_allocation_failure(monkeypatch):
    obs, x = _obs()
    exact = gauss_newton.products
    columns: list[int] = []

    def failing_columns(*args):
        y, _, jt = exact(*args)

        def column(e):
            columns.append(1)
            raise MemoryError
        return y, column, jt

    def never_fits(f):
        raise MemoryError

    monkeypatch.setattr(gauss_newton, "products", failing_columns)
    monkeypatch.setattr(torch.func, "vmap", never_fits)
    with pytest.raises(MemoryError):
        jacobian(obs.forward, x, obs.labels, chunk=16)
    assert columns == [1]  # halving ends at one column a pass, whose failure is the caller's to report


def test_steps_without_j_held_reach_the_input_as_those_with_it(monkeypatch):
    # above MAX_HELD numbers J is not formed: J^T J and J^T r come from products, and the steps are the same
    obs, x = _obs()
    start = x + 0.05 * torch.randn(x.shape, generator=torch.Generator().manual_seed(1), dtype=x.dtype)
    scale = float(obs.y.pow(2).sum())
    counts: dict[str, list] = {"held": [], "products": []}
    held = levenberg_marquardt(obs.forward, obs.y, start, obs.labels, tol=1e-10, scale=scale,
                               on_columns=lambda k, n: counts["held"].append((k, n)))
    formed: list[int] = []
    monkeypatch.setattr(gauss_newton, "MAX_HELD", 0)
    monkeypatch.setattr(gauss_newton, "jacobian", lambda *a, **k: formed.append(1))
    products = levenberg_marquardt(obs.forward, obs.y, start, obs.labels, tol=1e-10, scale=scale,
                                   on_columns=lambda k, n: counts["products"].append((k, n)))
    assert formed == [] and products.stop == held.stop == "tolerance", products
    for route, out in (("held", held), ("products", products)):  # each J's columns told a batch at a time
        batches = [k for k, n in counts[route] if n == 64]
        assert len(batches) == len(counts[route]) and out.steps <= batches.count(64) <= out.steps + 1  # and the rank's
        assert all(b > a or b == 16 for a, b in zip(batches, batches[1:])) and batches[0] == 16
    assert float((products.x - x).abs().max()) < 1e-8 and products.losses[-1] / scale < 1e-20
    assert (products.steps, products.chord, products.rank) == (held.steps, held.chord, held.rank) == \
        (held.steps, held.chord, 64)
    for a, b in zip(products.losses, held.losses):
        assert math.isclose(a, b, rel_tol=1e-3) or max(a, b) / scale < 1e-24


def test_a_deadline_that_has_passed_stops_before_forming_j():
    obs, x = _obs()
    out = levenberg_marquardt(obs.forward, obs.y, x + 0.1, obs.labels, tol=1e-10, scale=1.0,
                              deadline=time.perf_counter())
    assert out.stop == "time-limit" and out.steps == 0 and out.losses == [] and out.rank is None
    assert torch.equal(out.x, x + 0.1)


@pytest.mark.parametrize("chunk", [None, 1])
def test_jacobian_stops_between_batches_of_columns_when_asked(chunk):
    obs, x = _obs()  # 64 unknowns: four batches of CHUNK columns
    asked: list[int] = []

    def stop() -> bool:
        asked.append(1)
        return len(asked) == 3

    with pytest.raises(Stopped):
        jacobian(obs.forward, x, obs.labels, chunk=chunk, stop=stop)
    assert len(asked) == 3
    J = jacobian(obs.forward, x, obs.labels, chunk=chunk, stop=lambda: False)
    assert J.shape == (obs.b, 64)


def test_jacobian_columns_are_directional_derivatives():
    obs, x = _obs()
    J = jacobian(obs.forward, x, obs.labels)
    v = torch.randn(x.numel(), generator=torch.Generator().manual_seed(3), dtype=x.dtype)
    eps = 1e-6
    with torch.enable_grad():
        plus = obs.forward((x + eps * v.view_as(x)).requires_grad_(True), obs.labels).detach()
        minus = obs.forward((x - eps * v.view_as(x)).requires_grad_(True), obs.labels).detach()
    fd = (plus - minus).reshape(-1) / (2 * eps)
    assert math.isclose(float((J @ v - fd).norm()), 0.0, abs_tol=1e-6 * float(fd.norm()))


@pytest.mark.parametrize("kind", ["none", "srht", "gaussian", "countsketch", "sparse", "uniform", "ams"])
def test_batched_jacobian_is_the_column_by_column_one(kind):
    # the columns formed CHUNK at a time (vmap over the backward pass, through the sketch's linear map and a defense)
    # are those of one backward pass each
    victim = targets.get_model("lenet", in_shape=(1, 8, 8), seed=0).to(dtype=torch.float64)
    x = torch.rand((1, 1, 8, 8), generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    sketch = make_sketch(kind, victim.d, victim.d if kind == "none" else victim.d // 2, seed=1)
    obs = observe(victim, x, torch.tensor([3]), Channel(sketch, "clip:C=1"), ThreatModel(knows_labels=True))
    batched, single = jacobian(obs.forward, x, obs.labels), jacobian(obs.forward, x, obs.labels, chunk=1)
    assert batched.shape == single.shape == (obs.b, 64)
    assert float((batched - single).norm()) <= 1e-12 * float(single.norm())


class _Opaque(torch.autograd.Function):
    """2 x, differentiable to any order, in the style torch.func cannot transform (``ctx`` in ``forward``)."""

    @staticmethod
    def forward(ctx, x):
        return 2 * x

    @staticmethod
    def backward(ctx, g):
        return _Opaque.apply(g)


def test_a_graph_vmap_cannot_batch_is_formed_one_column_at_a_time():
    w = torch.randn(5, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)

    def forward(x, labels):
        return torch.tanh(_Opaque.apply(w @ x.reshape(-1))) ** 2

    x = torch.randn(3, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    with pytest.raises(RuntimeError):  # the batched path indeed fails here
        torch.func.vmap(lambda e: _Opaque.apply(e))(torch.ones(2, 3, dtype=torch.float64)).sum()
    J = jacobian(forward, x, None)
    expected = torch.autograd.functional.jacobian(lambda z: torch.tanh(2 * (w @ z)) ** 2, x)
    assert torch.allclose(J, expected, rtol=1e-12, atol=1e-14)


def test_steps_that_stop_converging_quadratically_stall():
    # (x - 1)^2 + x^4: its minimum (x ~ 0.59) leaves a residual, so L_R tends to a positive value and each step
    # gains less and less: two steps in a row below SLOW end them
    def forward(x, labels):
        return torch.cat([x - 1, x ** 2])

    x0 = torch.tensor([2.0], dtype=torch.float64)
    out = levenberg_marquardt(forward, torch.zeros(2, dtype=torch.float64), x0, None, tol=1e-10, scale=1.0)
    assert out.stop == "stalled" and 2 <= out.steps < STEPS, out
    assert out.losses == sorted(out.losses, reverse=True) and out.losses[-1] < float(forward(x0, None).pow(2).sum())
    assert abs(float(out.x) - 0.5898) < 0.05  # near the least-squares minimum
    assert out.rank == 1 and out.rank_loss > out.losses[-1]  # not converged: no J formed just for the rank


def test_steps_that_do_not_converge_leave_the_first_phase_as_it_was(monkeypatch):
    obs, _ = _obs()
    plain = GradientMatching(iterations=10, init_seed=2, labels="given", refine="none").reconstruct(obs)
    closer = plain.x + 0.01

    def not_converged(forward, y, x, labels, **kw):
        return Refined(x=closer, losses=[plain.final_loss / 3], steps=2, stop="stalled", rank=64,
                       singular=(1.0, 0.1))

    monkeypatch.setattr(gradient_matching, "levenberg_marquardt", not_converged)
    result = GradientMatching(iterations=10, init_seed=2, labels="given", refine="gauss-newton").reconstruct(obs)
    assert torch.equal(result.x, plain.x) and result.losses == plain.losses
    assert result.stop_reason == plain.stop_reason and result.iterations == plain.iterations
    gn = result.gauss_newton
    assert gn["kept"] is False and gn["stop"] == "stalled" and gn["loss_after"] == plain.final_loss / 3
    assert result.message.endswith("without converging (they stopped converging): the first phase's iterate is kept")

    def no_step(forward, y, x, labels, **kw):  # one J formed, and none of its dampings lowered L_R
        return Refined(x=x, losses=[], steps=1, stop="stalled", rank=64, singular=(1.0, 0.1))

    monkeypatch.setattr(gradient_matching, "levenberg_marquardt", no_step)
    result = GradientMatching(iterations=10, init_seed=2, labels="given", refine="gauss-newton").reconstruct(obs)
    # it read "then 0 Gauss-Newton steps on 1 Jacobian ... took L_R from A to A without converging"
    assert result.gauss_newton["accepted"] == 0 and "0 Gauss-Newton steps" not in result.message
    assert f"at L_R {plain.final_loss:.2e}" in result.message
    assert result.message.endswith("formed 1 Jacobian and took no step (no damping of the Jacobian lowered L_R): the "
                                   "first phase's iterate is kept")


def test_steps_start_from_the_iterate_clamped_to_the_images_box(monkeypatch):
    # the projection onto [0, 1], which holds the input, is never farther from it; the record counts the values it
    # moved and the message says so
    obs, _ = _obs()
    plain = GradientMatching(iterations=10, init_seed=2, labels="given", refine="none").reconstruct(obs)
    outside = int(((plain.x < 0) | (plain.x > 1)).sum())
    assert outside > 0  # the 10-step iterate leaves the box somewhere
    seen = []

    def capture(forward, y, x, labels, **kw):
        seen.append(x.clone())
        return Refined(x=x, losses=[plain.final_loss / 3], steps=1, stop="stalled")

    monkeypatch.setattr(gradient_matching, "levenberg_marquardt", capture)
    result = GradientMatching(iterations=10, init_seed=2, labels="given", refine="gauss-newton").reconstruct(obs)
    assert torch.equal(seen[0], plain.x.clamp(0, 1)) and result.gauss_newton["clamped"] == outside
    said = f"{outside} value{'s' if outside != 1 else ''} clamped to [0, 1]"
    assert f"best iterate (step {plain.best_step}, {said})" in result.message
    assert torch.equal(result.x, plain.x)  # not converged: the first phase's own iterate stays, unclamped


def test_steps_stopped_before_their_first_jacobian_say_so(monkeypatch):
    obs, _ = _obs()
    plain = GradientMatching(iterations=10, init_seed=2, labels="given", refine="none").reconstruct(obs)
    monkeypatch.setattr(gradient_matching, "levenberg_marquardt",
                        lambda forward, y, x, labels, **kw: Refined(x=x, stop="time-limit"))
    result = GradientMatching(iterations=10, init_seed=2, labels="given", refine="gauss-newton").reconstruct(obs)
    assert torch.equal(result.x, plain.x) and result.gauss_newton["jacobians"] == 0
    assert result.message.endswith("stopped before their first step (the time limit was reached, or too little of "
                                   "it was left for a step): the first phase's iterate is kept")
    # its steps all taken, the run stopped where the time limit cut what followed them
    assert plain.stop_reason == "iterations" and result.stop_reason == "time-limit"


def test_the_summary_line_names_the_steps_and_whether_they_were_kept():
    from types import SimpleNamespace as Namespace

    from leakattack.cli.run import _steps

    def SimpleNamespace(**fields):  # noqa: N802 -- a run's metrics as _steps reads them, of one start
        return Namespace(restart_stops=None, **fields)

    plain = SimpleNamespace(iterations=5686, stop_reason="stalled", gauss_newton=None)
    assert _steps(plain) == "5686 it (stalled)"
    kept = SimpleNamespace(iterations=1015, stop_reason="tolerance",
                           gauss_newton={"accepted": 15, "jacobians": 1, "chord": 14, "kept": True})
    assert _steps(kept) == "1015 it (tolerance, 15 Gauss-Newton on 1 Jacobian)"
    kept.gauss_newton["jacobians"] = 2
    assert _steps(kept) == "1015 it (tolerance, 15 Gauss-Newton on 2 Jacobians)"
    older = SimpleNamespace(iterations=5690, stop_reason="tolerance", gauss_newton={"accepted": 4, "kept": True})
    assert _steps(older) == "5690 it (tolerance, 4 Gauss-Newton)"  # a record from before the chord steps
    assert steps_note({"accepted": 1, "jacobians": 1}, steps=True) == "1 Gauss-Newton step on 1 Jacobian"
    assert steps_note({"accepted": 15, "jacobians": 1}, steps=True) == "15 Gauss-Newton steps on 1 Jacobian"
    left = SimpleNamespace(iterations=2000, stop_reason="iterations", gauss_newton={"accepted": 2, "kept": False})
    assert _steps(left) == "2000 it (iterations, Gauss-Newton not converged)"
    none = SimpleNamespace(iterations=20, stop_reason="time-limit",
                           gauss_newton={"accepted": 0, "jacobians": 0, "kept": False})
    assert _steps(none) == "20 it (time-limit, no Gauss-Newton step)"
    failed = SimpleNamespace(iterations=300, stop_reason="stalled", gauss_newton={"kept": False, "error": "..."})
    assert _steps(failed) == "300 it (stalled, no Gauss-Newton)"


def test_a_model_of_the_client_that_j_cannot_go_through_leaves_the_first_phase_and_says_so(monkeypatch):
    obs, _ = _obs()
    plain = GradientMatching(iterations=10, init_seed=2, labels="given", refine="none").reconstruct(obs)

    def fails(*args, **kw):
        raise RuntimeError("derivative for aten::something is not implemented")

    monkeypatch.setattr(gradient_matching, "levenberg_marquardt", fails)
    result = GradientMatching(iterations=10, init_seed=2, labels="given", refine="gauss-newton").reconstruct(obs)
    assert torch.equal(result.x, plain.x) and result.losses == plain.losses
    assert result.gauss_newton["kept"] is False and "not implemented" in result.gauss_newton["error"]
    assert "could not be differentiated twice" in result.message


@pytest.mark.parametrize("error", ALLOCATION_FAILURES, ids=ALLOCATION_FAILURE_IDS)
def test_steps_that_do_not_fit_in_memory_leave_the_first_phase_and_say_so(monkeypatch, error):
    obs, _ = _obs()
    plain = GradientMatching(iterations=10, init_seed=2, labels="given", refine="none").reconstruct(obs)

    def fails(*args, **kw):
        raise error()

    monkeypatch.setattr(gradient_matching, "levenberg_marquardt", fails)
    result = GradientMatching(iterations=10, init_seed=2, labels="given", refine="gauss-newton").reconstruct(obs)
    assert torch.equal(result.x, plain.x) and result.losses == plain.losses
    assert result.gauss_newton["kept"] is False and result.gauss_newton["error"]
    assert "no Gauss-Newton steps: J did not fit in memory" in result.message
    assert "differentiated" not in result.message


def test_no_normal_equations_are_begun_when_the_time_left_is_under_their_share_of_js(monkeypatch):
    """J took 10 s (a fake clock) and 4 s are left: J^T J and its factor (0.3-0.75 of J's time measured) would
    overrun the limit, so the steps stop there; with 6 s left they are taken."""
    from leakattack.attacks import gauss_newton

    obs, x = _obs()
    start = x + 0.05 * torch.randn(x.shape, generator=torch.Generator().manual_seed(1), dtype=x.dtype)
    clock = [0.0]
    monkeypatch.setattr(gauss_newton.time, "perf_counter", lambda: clock[0])
    real = gauss_newton.jacobian

    def slow(*args, **kw):
        clock[0] += 10.0
        return real(*args, **kw)

    monkeypatch.setattr(gauss_newton, "jacobian", slow)
    scale = float(obs.y.pow(2).sum())
    for left, steps in ((4.0, 0), (6.0, 1)):
        clock[0] = 0.0
        out = levenberg_marquardt(obs.forward, obs.y, start, obs.labels, tol=1e-30, scale=scale, deadline=10.0 + left,
                                  chord=False)
        assert out.stop == "time-limit" and out.steps == steps, (left, out.stop, out.steps)
        assert out.rank is None  # no time left for the last J's eigenvalues either


@pytest.mark.parametrize(("held", "left", "ahead", "formed", "chunk"), [
    (True, 5.0, 1, False, 16), (True, 7.0, 1, True, 16), (True, 7.0, 2, False, 16), (True, 13.0, 2, True, 16),
    (False, 3.5, 1, False, 16), (False, 5.0, 1, True, 16), (False, 7.0, 2, False, 16), (False, 9.0, 2, True, 16),
    (False, 8.5, 1, True, 8), (False, 7.5, 1, False, 8)])
def test_a_j_that_its_columns_pace_says_would_end_after_the_deadline_stops_when_the_pace_is_known(
        monkeypatch, held, left, ahead, formed, chunk):
    """Each batch of J's 64 columns takes 1 s of a fake clock: of 16 columns, J takes 4 s.  Its pace is known after
    the first three batches (the first also builds the graph and is not timed): at 3 s, with one batch to go, a held
    J and its normal equations (half of J's time) would end at 6 s, J^T J from products (formed with it) at 4 s.
    Where that is after the deadline it stops there and says how long a J takes; asked for room for one more J
    (``ahead=2``), the time left must also hold another 6 s (held) or 4 s (products).  Of 8 columns a batch J takes
    8 s, and each later batch is checked against the columns still to form: 8.5 s are enough, 7.5 s are not.
    (Without J held, the conjugate-gradient products after J is formed are not timed.)"""
    obs, x = _obs()
    start = x + 0.05 * torch.randn(x.shape, generator=torch.Generator().manual_seed(1), dtype=x.dtype)
    clock, calls, complete = [0.0], [], []
    monkeypatch.setattr(gauss_newton.time, "perf_counter", lambda: clock[0])
    if not held:
        monkeypatch.setattr(gauss_newton, "MAX_HELD", 0)
    real = gauss_newton.products

    def paced(*args, **kw):
        y, j, jt = real(*args, **kw)

        def column(e):
            if not complete:
                calls.append(1)
                clock[0] += 1.0  # one batched pass: one second
            return j(e)

        return y, column, jt

    monkeypatch.setattr(gauss_newton, "products", paced)
    scale = float(obs.y.pow(2).sum())
    out = levenberg_marquardt(obs.forward, obs.y, start, obs.labels, tol=1e-30, scale=scale, deadline=left,
                              ahead=ahead, steps=1, chord=False, chunk=chunk,  # one round, one step: no rank's J
                              on_columns=lambda k, n: complete.append(1) if k == n else None)
    if formed:
        assert len(calls) == 64 // chunk and out.steps == 1 and out.losses and out.losses[-1] < out.start_loss
        assert out.foreseen is None
    else:
        assert len(calls) == 1 + gauss_newton.PACE_BATCHES and out.steps == 0 and out.stop == "time-limit"
        assert out.foreseen == 64 // chunk and torch.equal(out.x, start) and out.rank is None


def test_a_batched_pass_takes_fewer_columns_where_each_holds_much():
    assert gauss_newton.columns_per_pass(903_269, 1_806_538) == gauss_newton.CHUNK  # vit_small, srht b/d = 0.5
    assert gauss_newton.columns_per_pass(11_173_962, 11_173_962) == 2  # ResNet-18 unsketched, float64
    assert gauss_newton.columns_per_pass(11_173_962, 11_173_962, itemsize=4) == 4
    assert gauss_newton.columns_per_pass(10**9, 10**9) == 1  # never none
    for b, d in ((7913, 15826), (10**6, 10**7), (3 * 10**6, 3 * 10**6)):
        k = gauss_newton.columns_per_pass(b, d)
        assert 1 <= k <= gauss_newton.CHUNK and (k == 1 or 3 * (b + d) * 8 * k <= gauss_newton.BATCH_BYTES)


def test_the_attack_forms_j_at_the_batch_width_its_sizes_allow(monkeypatch):
    obs, x = _obs()
    widths: list = []
    formed = gauss_newton.jacobian

    def recorded(*args, **kwargs):
        widths.append(kwargs.get("chunk"))
        return formed(*args, **kwargs)

    monkeypatch.setattr(gauss_newton, "jacobian", recorded)
    monkeypatch.setattr(gauss_newton, "BATCH_BYTES", 3 * (obs.b + obs.d) * 8 * 5)  # five columns a pass
    out = GradientMatching(iterations=300, init_seed=2, labels="given", refine="gauss-newton").reconstruct(obs)
    assert widths and set(widths) == {5} and out.gauss_newton["kept"]
