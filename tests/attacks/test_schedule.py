"""Inverting Gradients' step-size schedule and signed steps in gradient matching."""

import pytest
import torch

import targets
from leakattack.attacks import GradientMatching, init_dummy
from leakattack.attacks.gradient_matching import STEP_MILESTONES
from leakattack.channel import Channel
from leakattack.observation import observe
from leakattack.sketch import make_sketch


def _obs():
    victim = targets.get_model("lenet", in_shape=(1, 8, 8), seed=0)
    victim = victim.to(dtype=torch.float64)
    x = torch.rand((1, 1, 8, 8), generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    labels = torch.tensor([3])
    return observe(victim, x, labels, Channel(make_sketch("srht", victim.d, victim.d // 2, seed=1))), x, labels


def _steps(schedule, iterations=16, lr=0.01):
    """Per-step moves max|x_{t+1} - x_t| of signed gd (each coordinate moves by exactly the step size)."""
    obs, x, labels = _obs()
    xs = []
    gm = GradientMatching(optimizer="gd", iterations=iterations, lr=lr, labels="given", tol=0, schedule=schedule,
                          signed=True)
    gm.run(obs, init_dummy(x.shape, "gaussian", 2, dtype=torch.float64), labels,
           monitor=lambda step, xt: xs.append(xt.clone()) or {}, monitor_every=1)
    return [float((b - a).abs().max()) for a, b in zip(xs, xs[1:])]


def test_signed_steps_move_every_coordinate_by_the_step_size():
    moves = _steps("none")
    assert moves == pytest.approx([0.01] * 16, rel=1e-9)


def test_step_schedule_divides_the_step_by_ten_at_three_eighths_five_eighths_and_seven_eighths():
    moves = _steps("step")
    cut = [round(f * 16) for f in STEP_MILESTONES]  # 6, 10, 14
    want = [0.01 * 0.1 ** sum(t >= c for c in cut) for t in range(16)]
    assert moves == pytest.approx(want, rel=1e-9)


def test_signed_steps_are_refused_for_lbfgs_and_unknown_schedules_are_refused():
    with pytest.raises(ValueError, match="first-order"):
        GradientMatching(optimizer="lbfgs", signed=True)
    with pytest.raises(ValueError, match="schedule"):
        GradientMatching(schedule="cosine")


def _moves_on_clock(monkeypatch, seconds, time_limit):
    """Per-step moves of signed gd under the step schedule and ``time_limit``, on a clock that the monitor of step t
    moves by ``seconds(t)``; and the result."""
    from types import SimpleNamespace

    from leakattack.attacks import gradient_matching
    clock = [0.0]
    monkeypatch.setattr(gradient_matching, "time", SimpleNamespace(perf_counter=lambda: clock[0]))
    obs, x, labels = _obs()
    xs = []

    def monitor(step, xt):
        xs.append(xt.clone())
        clock[0] += seconds(step)
        return {}

    gm = GradientMatching(optimizer="gd", iterations=1000, lr=0.01, labels="given", tol=0, schedule="step",
                          signed=True, stall_window=0, time_limit=time_limit)
    result = gm.run(obs, init_dummy(x.shape, "gaussian", 2, dtype=torch.float64), labels, monitor=monitor,
                    monitor_every=1)
    return [float((b - a).abs().max()) for a, b in zip(xs, xs[1:])], result


def test_with_a_time_limit_the_step_schedule_fits_the_steps_the_limit_allows(monkeypatch):
    """On a clock where a step takes 1.2 s, a 20 s limit allows 16 steps: the cuts fall at 6, 10 and 14, not at
    3/8, 5/8 and 7/8 of the 1000 iterations the attack would otherwise take."""
    moves, _ = _moves_on_clock(monkeypatch, lambda step: 1.0, 20)
    # six monitor calls (1 s each) by the probe at step 5: 1.2 s a step, int(20 / 1.2) = 16 steps
    cut = [round(f * 16) for f in STEP_MILESTONES]
    assert cut == [6, 10, 14] and len(moves) >= 16
    want = [0.01 * 0.1 ** sum(t >= c for c in cut) for t in range(len(moves))]
    assert moves == pytest.approx(want, rel=1e-9)


def test_under_the_step_schedule_a_plateau_stops_a_start_only_after_the_last_decay():
    """A step far too small leaves L_R flat: without a schedule the stall rule stops the start after its window;
    under the step schedule the window only starts at the last decay (step 35 of 40), so the start runs its 40."""
    obs, x, labels = _obs()
    x0 = init_dummy(x.shape, "gaussian", 2, dtype=torch.float64)

    def run(schedule):
        return GradientMatching(optimizer="gd", iterations=40, lr=1e-12, labels="given", tol=0, schedule=schedule,
                                stall_window=3, stall_gain=0.01).run(obs, x0, labels)

    flat = run("none")
    assert flat.stop_reason == "stalled" and flat.iterations == 3
    stepped = run("step")
    assert stepped.stop_reason == "stalled" and stepped.iterations == round(STEP_MILESTONES[-1] * 40) + 3
    assert run("step").losses == stepped.losses


def test_after_a_prune_the_decays_still_to_come_are_refitted_to_the_shorter_steps_of_fewer_starts(monkeypatch):
    """Two starts, pruned at half the budget, on a clock where each running start adds 0.5 s to a step.

    Two starts take 1 s a step: the fit at step 5 allows 5 + int(14 / 1.2) = 16 steps of a 20 s limit, so the
    decays fall at 6, 10 and 14 and the cut at step 8 (half of 16).  The survivor then takes 0.5 s a step: timed
    over the five steps after the cut, the 11 s then left (9 s spent by step 8, 2.5 s more by step 13) allow
    13 + int(8.5 / 0.5) = 30 steps, and the last decay, still to come, moves from 14 to round(7/8 * 30) = 26.
    The two decays already passed stay where they were, and the survivor runs to the limit (step 31).
    """
    from types import SimpleNamespace

    from leakattack.attacks import gradient_matching
    clock = [0.0]
    monkeypatch.setattr(gradient_matching, "time", SimpleNamespace(perf_counter=lambda: clock[0]))
    obs, x, labels = _obs()

    def monitor(step, xt):
        clock[0] += 0.5
        return {"x": xt.clone()}

    gm = GradientMatching(optimizer="gd", iterations=1000, lr=0.01, labels="given", tol=0, schedule="step",
                          signed=True, stall_window=0, time_limit=20, restarts=2, prune_restarts=True)
    x0 = torch.stack([init_dummy(x.shape, "gaussian", seed, dtype=torch.float64) for seed in (2, 3)])
    runs = gm.optimise(obs, x0, labels, monitor=monitor, monitor_every=1)
    assert sorted(run.stop_reason for run in runs) == ["pruned", "time-limit"]
    cut, survivor = sorted(runs, key=lambda run: run.iterations)
    assert cut.iterations == 8 and survivor.iterations == 31

    def moves(run):
        xs = [e["x"] for e in run.extra]
        return [float((b - a).abs().max()) for a, b in zip(xs, xs[1:])]

    for run, decays in ((cut, [6, 10, 14]), (survivor, [6, 10, 26])):
        want = [0.01 * 0.1 ** sum(t >= c for c in decays) for t in range(run.iterations)]
        assert moves(run) == pytest.approx(want, rel=1e-9)


def test_the_decays_still_to_come_are_refitted_once_the_first_steps_slow_start_is_over(monkeypatch):
    """On a clock where the first steps take 4 s (one-off work: a GPU's kernel loading) and later ones 1 s, the fit
    at step 5 (4.8 s a step) allows 20 steps of a 100 s limit: decays at 8, 12 and 18.  The window of the next ten
    steps, timed on its own, reads 1 s a step: 15 + 66 = 81 steps, and the last decay, still to come, moves to
    round(7/8 * 81) = 71.  Without the refit it stayed at 18, two thirds of the time before the end."""
    moves, result = _moves_on_clock(monkeypatch, lambda step: 4.0 if step <= 5 else 1.0, 100)
    assert result.stop_reason == "time-limit" and len(moves) >= 81
    want = [0.01 * 0.1 ** sum(t >= c for c in (8, 12, 71)) for t in range(len(moves))]
    assert moves == pytest.approx(want, rel=1e-9)
