"""Restarts run as one batched attack: the same results as one start at a time, and the stopping rule; the per-layer
restart gradients against one restart at a time."""

import dataclasses
import math
import subprocess
import sys
import time

import pytest
import torch
from torch import nn

import targets
from leakattack.attacks import GradientMatching, init_dummy
from leakattack.attacks.gradient_matching import KINK, _agree, _Problem, prune_points
from leakattack.channel import Channel
from leakattack.observation import ThreatModel, observe
from leakattack.sketch import make_sketch
from targets.oracle import restart_gradients

pytestmark = pytest.mark.usefixtures("one_thread")  # the attack runs on one thread


def _obs(victim, batch=1, kind="srht", ratio=0.5, defense="", knows_clip=False, seed=5):
    shape = victim.input_shape
    x = torch.rand((batch, *shape), generator=torch.Generator().manual_seed(seed), dtype=victim.dtype)
    labels = torch.arange(batch) % victim.num_classes
    sketch = make_sketch(kind, victim.d, None if kind == "none" else max(1, round(ratio * victim.d)), seed=1)
    threat = ThreatModel(knows_labels=True, knows_clip=knows_clip)
    return observe(victim, x, labels, Channel(sketch, defense), threat), x


def _lenet(dtype=torch.float64, shape=(1, 8, 8)):
    return targets.get_model("lenet", in_shape=shape, seed=0).to(dtype=dtype)


def _bn_victim():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.Sigmoid(), nn.Flatten(),
                        nn.Linear(4 * 6 * 6, 3))
    return targets.Victim.from_module(net.double(), input_shape=(1, 6, 6), num_classes=3, bn_mode="train")


def _sequential(attack, obs):
    """The restarts one at a time, from the starts reconstruct() draws."""
    runs = []
    for r in range(attack.restarts):
        x0 = init_dummy(obs.input_shape, attack.dummy_init, attack.init_seed + 1000 * r, dtype=obs.victim.dtype)
        runs.append(attack.run(obs, x0, obs.labels))
    return runs


def _batched(attack, obs):
    return attack.optimise(obs, torch.stack([init_dummy(obs.input_shape, attack.dummy_init,
                                                        attack.init_seed + 1000 * r, dtype=obs.victim.dtype)
                                             for r in range(attack.restarts)]), obs.labels)


def _assert_same_runs(batched, sequential, rel):
    for b, s in zip(batched, sequential, strict=True):
        assert b.losses == pytest.approx(s.losses, rel=rel)
        assert b.iterations == s.iterations and b.stop_reason == s.stop_reason and b.best_step == s.best_step
        assert torch.allclose(b.x, s.x, rtol=rel, atol=rel)


@pytest.mark.parametrize("optimizer, lr", [("adam", 0.05), ("gd", 0.5)])
def test_batched_restarts_equal_sequential_restarts_for_first_order_optimisers(optimizer, lr):
    obs, _ = _obs(_lenet())
    attack = GradientMatching(optimizer=optimizer, lr=lr, iterations=40, restarts=3, init_seed=4, labels="given",
                              tol=0)
    _assert_same_runs(_batched(attack, obs), _sequential(attack, obs), rel=1e-9)


def test_batched_lbfgs_restarts_equal_sequential_ones_with_per_restart_line_searches():
    # each restart keeps its own history and line search; the batched evaluation rounds like the single one
    obs, _ = _obs(_lenet())
    attack = GradientMatching(optimizer="lbfgs", iterations=30, restarts=3, init_seed=4, labels="given", tol=0)
    batched, sequential = _batched(attack, obs), _sequential(attack, obs)
    _assert_same_runs(batched, sequential, rel=1e-8)
    assert len({run.losses[-1] for run in batched}) == 3  # the starts differ


def _layernorm_victim():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Flatten(), nn.Linear(36, 8), nn.LayerNorm(8), nn.Tanh(), nn.Linear(8, 3))
    return targets.Victim.from_module(net.double(), input_shape=(1, 6, 6), num_classes=3)


def _restart_gradients(obs, xs, labels):
    """d/dxs of sum_r ||restarts(xs)[r] - y||^2, and the same restart by restart."""
    xs = xs.clone().requires_grad_(True)
    batched = torch.autograd.grad((obs.forward.restarts(xs, labels) - obs.y).pow(2).sum(), xs)[0]
    alone = []
    for x, lab in zip(xs.detach(), labels):
        x = x.clone().requires_grad_(True)
        alone.append(torch.autograd.grad((obs.forward(x, lab) - obs.y).pow(2).sum(), x)[0])
    return batched, torch.stack(alone)


@pytest.mark.parametrize("make", [_bn_victim, _layernorm_victim], ids=["batchnorm", "layernorm"])
def test_batched_messages_and_their_derivatives_match_restart_by_restart_with_normalisation_layers(make):
    # autograd through vmap(grad) gets these layers' second derivatives wrong; the batched model must not
    obs, _ = _obs(make(), batch=2, kind="none")
    xs = torch.rand(3, 2, 1, 6, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    labels = obs.labels.expand(3, 2)
    rows = obs.forward.restarts(xs, labels)
    for r in range(3):
        assert torch.allclose(rows[r], obs.forward(xs[r], labels[r]), rtol=1e-10, atol=1e-12)
    batched, alone = _restart_gradients(obs, xs, labels)
    assert torch.allclose(batched, alone, rtol=1e-10, atol=1e-12)


def test_batchnorm_in_train_mode_keeps_each_restarts_batch_statistics_apart():
    # BatchNorm couples the examples of a batch: stacking restarts into one batch would mix their statistics
    victim = _bn_victim()
    obs, _ = _obs(victim, batch=2, kind="none")
    xs = torch.rand(3, 2, 1, 6, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    labels = obs.labels.expand(3, 2)
    mixed = obs.forward(xs.reshape(6, 1, 6, 6), labels.reshape(6))  # all six images as one batch
    assert not torch.allclose(obs.forward.restarts(xs, labels).mean(0), mixed, rtol=1e-3)
    # gd: a step linear in the gradient (Adam's g/sqrt(v) would turn round-off in near-zero entries into +-lr)
    attack = GradientMatching(optimizer="gd", lr=0.5, iterations=15, restarts=2, init_seed=4, labels="given")
    _assert_same_runs(_batched(attack, obs), _sequential(attack, obs), rel=1e-9)


def test_restarts_through_a_clipping_channel_match_one_message_at_a_time():
    victim = _lenet()
    obs, _ = _obs(victim, batch=2, kind="none", defense="clip:C=0.01", knows_clip=True)
    xs = torch.rand(3, 2, 1, 8, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    labels = obs.labels.expand(3, 2)
    rows = obs.forward.restarts(xs, labels)
    assert torch.allclose(rows.norm(dim=1), torch.full((3,), 0.01, dtype=torch.float64))  # each row clipped alone
    for r in range(3):
        assert torch.allclose(rows[r], obs.forward(xs[r], labels[r]), rtol=1e-10, atol=1e-14)


def test_a_batched_model_with_wrong_derivatives_is_detected_and_replaced_by_one_start_at_a_time():
    obs, _ = _obs(_lenet())

    class Doubled:
        """The right messages, with twice their derivative."""

        def __call__(self, x, labels):
            return obs.forward(x, labels)

        def restarts(self, xs, labels):
            m = obs.forward.restarts(xs, labels)
            return m + (m - m.detach())

    wrong = dataclasses.replace(obs, forward=Doubled())
    plain = dataclasses.replace(obs, forward=lambda x, labels: obs.forward(x, labels))
    attack = GradientMatching(optimizer="gd", lr=0.5, iterations=10, restarts=2, init_seed=4, labels="given")
    _assert_same_runs(_batched(attack, wrong), _batched(attack, plain), rel=1e-12)


def test_an_observation_without_a_batched_model_runs_its_restarts_one_by_one_alike():
    obs, _ = _obs(_lenet())
    plain = dataclasses.replace(obs, forward=lambda x, labels: obs.forward(x, labels))
    attack = GradientMatching(optimizer="adam", lr=0.05, iterations=10, restarts=2, init_seed=4, labels="given")
    _assert_same_runs(_batched(attack, plain), _batched(attack, obs), rel=1e-9)


def test_dlg_restarts_optimise_their_soft_labels_separately():
    obs, _ = _obs(_lenet(), kind="none")
    attack = GradientMatching(optimizer="lbfgs", iterations=20, restarts=2, init_seed=4, labels="dlg")
    batched = attack.optimise(obs, torch.stack([init_dummy(obs.input_shape, "gaussian", 4 + 1000 * r,
                                                           dtype=torch.float64) for r in range(2)]), None)
    for r, run in enumerate(batched):
        alone = attack.run(obs, init_dummy(obs.input_shape, "gaussian", 4 + 1000 * r, dtype=torch.float64), None)
        assert run.losses == pytest.approx(alone.losses, rel=1e-8)
        assert torch.equal(run.labels, alone.labels)


def test_reconstruct_returns_the_restart_with_the_lowest_loss_and_every_restarts_loss():
    obs, _ = _obs(_lenet())
    attack = GradientMatching(optimizer="lbfgs", iterations=15, restarts=3, init_seed=4, labels="given")
    result = attack.reconstruct(obs)
    runs = _sequential(attack, obs)
    assert result.restart_losses == pytest.approx([run.final_loss for run in runs], rel=1e-8)
    assert result.final_loss == min(result.restart_losses)


def test_a_start_that_stops_improving_stops_with_the_reason_recorded():
    # a step far too small: L_R barely moves, so the lowest L_R falls by < 1% over any window of 5 steps
    obs, _ = _obs(_lenet())
    x0 = init_dummy(obs.input_shape, "gaussian", 4, dtype=torch.float64)
    run = GradientMatching(optimizer="gd", lr=1e-9, iterations=50, labels="given", stall_window=5,
                           stall_gain=0.01).run(obs, x0, obs.labels)
    assert run.stop_reason == "stalled" and run.iterations == 5 and len(run.losses) == 6
    assert "less than 1% over the last 5 steps" in run.message
    assert run.losses[5] > 0.99 * run.losses[0]
    off = GradientMatching(optimizer="gd", lr=1e-9, iterations=50, labels="given", stall_window=0).run(
        obs, x0, obs.labels)
    assert off.stop_reason == "iterations" and off.iterations == 50


def test_the_stopping_rule_leaves_an_improving_attack_running():
    obs, _ = _obs(_lenet())
    x0 = init_dummy(obs.input_shape, "gaussian", 4, dtype=torch.float64)
    run = GradientMatching(optimizer="lbfgs", iterations=60, labels="given", tol=0, stall_window=10,
                           stall_gain=0.01).run(obs, x0, obs.labels)
    assert run.stop_reason == "iterations" and run.iterations == 60
    lowest = [min(run.losses[: t + 1]) for t in range(61)]
    assert all(lowest[t] <= 0.99 * lowest[t - 10] for t in range(10, 61))


def test_restarts_that_stop_early_drop_out_while_the_others_go_on():
    # tolerance 1e-3 of ||y||^2: the start at the truth stops at step 0, the random one runs on
    obs, x = _obs(_lenet())
    attack = GradientMatching(optimizer="lbfgs", iterations=12, labels="given", tol=1e-3)
    x0 = torch.stack([x, init_dummy(obs.input_shape, "gaussian", 4, dtype=torch.float64)])
    at_truth, random = attack.optimise(obs, x0, obs.labels)
    assert at_truth.stop_reason == "tolerance" and at_truth.iterations == 0
    alone = attack.run(obs, x0[1], obs.labels)
    assert random.iterations == alone.iterations > 0
    assert random.losses == pytest.approx(alone.losses, rel=1e-8)


class _Mixed(nn.Module):
    """Every layer kind the per-layer restart gradients know, with a strided, dilated and padded convolution, a
    BatchNorm1d on (N, C, L), a Linear on three-dimensional input and one layer used twice."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 3, 3, stride=2, padding=2, dilation=2)
        self.bn2 = nn.BatchNorm2d(3)
        self.bn1 = nn.BatchNorm1d(3, affine=False)
        self.mix = nn.Linear(9, 9)
        self.head = nn.Linear(27, 3, bias=False)

    def forward(self, x):
        z = torch.tanh(self.bn2(self.conv(x)))  # (N, 3, 3, 3)
        z = self.bn1(z.flatten(2))  # (N, 3, 9)
        z = torch.tanh(self.mix(torch.tanh(self.mix(z))))
        return self.head(z.flatten(1))


@pytest.mark.parametrize("way", ["grouped", "unfold"])
@pytest.mark.parametrize("bn_mode", ["train", "eval"])
def test_per_layer_restart_gradients_equal_each_restarts_gradient_and_its_derivatives(bn_mode, way, monkeypatch):
    """Both ways of forming a Conv2d's weight gradients per restart (targets.oracle._grouped picks one per layer)
    through a strided, dilated, padded convolution."""
    from targets import oracle

    monkeypatch.setattr(oracle, "_grouped", lambda m, positions: way == "grouped")
    torch.manual_seed(0)
    net = _Mixed().double()
    with torch.no_grad():  # running statistics away from (0, 1), so eval mode differs from train mode
        net.bn2.running_mean.uniform_(-1, 1), net.bn2.running_var.uniform_(0.5, 2)
    victim = targets.Victim.from_module(net, input_shape=(2, 6, 6), num_classes=3, bn_mode=bn_mode)
    xs = torch.rand(3, 2, 2, 6, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(1),
                    requires_grad=True)
    labels = torch.tensor([[0, 2], [1, 1], [2, 0]])
    rows = restart_gradients(victim, xs, labels)
    alone = torch.stack([targets.flat_gradient(victim, x, lab, create_graph=True) for x, lab in zip(xs, labels)])
    assert rows.shape == (3, victim.d) and torch.allclose(rows, alone, rtol=1e-10, atol=1e-13)
    v = torch.randn(3, victim.d, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    batched, = torch.autograd.grad((rows * v).sum(), xs)
    reference, = torch.autograd.grad((alone * v).sum(), xs)
    assert torch.allclose(batched, reference, rtol=1e-9, atol=1e-12)


def test_strided_layers_and_layers_with_few_positions_take_unfold():
    """The grouped weight-gradient convolution serves layers of stride 1 with at least one output position per 16
    columns of the weight (and, in float64 on the CPU, at least 16 x 16 positions); a strided layer and a deep layer
    at few positions unfold (benchmarks/attack_speed.py --only convgrad measured both ways)."""
    from torch import nn

    from targets import oracle

    assert oracle._grouped(nn.Conv2d(16, 16, 3, padding=1), 32 * 32)
    assert not oracle._grouped(nn.Conv2d(16, 32, 3, stride=2, padding=1), 16 * 16)
    assert not oracle._grouped(nn.Conv2d(3, 12, 5, stride=2, padding=2), 16 * 16)  # LeNet's first layer
    assert not oracle._grouped(nn.Conv2d(512, 512, 3, padding=1), 4 * 4)  # 16 positions, 4608 columns
    last = nn.Conv2d(12, 12, 5, padding=2)  # LeNet's last layer: 64 positions, 300 columns
    assert oracle._grouped(last, 8 * 8) and not oracle._grouped(last.double(), 8 * 8)
    assert oracle._grouped(nn.Conv2d(128, 128, 3, padding=1).double(), 16 * 16)


def test_a_model_with_weights_outside_the_known_layers_gets_no_per_layer_gradients():
    xs = torch.rand(2, 1, 1, 6, 6, dtype=torch.float64)
    assert restart_gradients(_layernorm_victim(), xs, torch.tensor([[0], [1]])) is None  # vmap serves it
    assert restart_gradients(_lenet(shape=(1, 6, 6)), xs, torch.tensor([[0], [1]])) is not None


def _timed_batch(obs, slow_calls):
    """The observation with a batched model of the client that sleeps 0.5 s in its calls numbered ``slow_calls``, and
    whose one-start calls sleep 20 ms: the batched pass's own calls are then clearly faster or clearly slower than the
    starts one by one, whatever else the machine is running (on a tiny LeNet both take about a millisecond, and a
    busy machine's scheduling could tip their ratio past SLOWER)."""
    calls = []

    class Timed:
        def __call__(self, x, labels):
            time.sleep(0.02)
            return obs.forward(x, labels)

        def restarts(self, xs, labels):
            calls.append(len(calls))
            if calls[-1] in slow_calls:
                time.sleep(0.5)
            return obs.forward.restarts(xs, labels)

    return dataclasses.replace(obs, forward=Timed())


def _problem_of(obs):
    attack = GradientMatching(optimizer="adam", lr=0.05, iterations=3, restarts=2, init_seed=4, labels="given")
    xs = torch.stack([init_dummy(obs.input_shape, "gaussian", 4 + 1000 * r, dtype=torch.float64) for r in range(2)])
    return _Problem(attack, obs, xs, obs.labels)


def test_a_batched_model_slower_than_one_start_at_a_time_is_dropped():
    obs, _ = _obs(_lenet())
    problem = _problem_of(_timed_batch(obs, slow_calls=range(100)))
    problem.evaluate([0, 1], problem.z0)
    assert problem.batched is not None and problem.path == "batched"  # the first answer is checked, not timed
    values, G, fits = problem.evaluate([0, 1], problem.z0)
    assert problem.batched is None  # and the answer is the one-by-one one
    assert problem.path.startswith("one by one: the batched pass took ") and "times as long" in problem.path
    assert fits == [problem.evaluate([r], problem.z0[r:r + 1])[2][0] for r in range(2)]


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-4), (torch.float64, 1e-9)])
def test_batched_gradients_agree_to_round_off_but_for_starts_moved_by_a_gated_relu_unit(dtype, tol):
    ref = torch.randn(4, 300, generator=torch.Generator().manual_seed(0), dtype=dtype)
    direction = torch.randn(4, 300, generator=torch.Generator().manual_seed(1), dtype=dtype)
    direction = direction / direction.norm(dim=1, keepdim=True) * ref.norm(dim=1, keepdim=True)

    def moved(*by):
        return ref + torch.tensor(by, dtype=dtype)[:, None] * direction

    assert _agree(moved(0.1 * tol, 0, 0.5 * tol, 0), ref)
    # one start of four moved by 5e-3 of its norm: a ReLU unit that round-off gated differently in one pass
    # (float32 ResNet-18 and ResNet-20 starts, see KINK)
    assert _agree(moved(0, 5e-3, 0, 0.5 * tol), ref) and _agree(moved(5e-3, 5e-3, 0, 0), ref)
    assert not _agree(moved(0, 2 * KINK, 0, 0), ref)  # beyond any gated unit
    assert not _agree(moved(1e-3, 5e-3, 0, 1e-3), ref)  # most starts beyond round-off: a wrong derivative
    assert not _agree(moved(*[10 * tol] * 4), ref)


def test_a_batched_model_whose_derivatives_are_wrong_is_dropped():
    obs, _ = _obs(_lenet())

    class Wrong:  # the batched messages of the starts, each off by 1 % (as a missing term would make them)
        def __call__(self, x, labels):
            return obs.forward(x, labels)

        def restarts(self, xs, labels):
            return 1.01 * obs.forward.restarts(xs, labels)

    problem = _problem_of(dataclasses.replace(obs, forward=Wrong()))
    values, G, fits = problem.evaluate([0, 1], problem.z0)
    assert problem.batched is None and problem.path == "one by one: the batched pass disagreed with them"
    assert fits == [problem.evaluate([r], problem.z0[r:r + 1])[2][0] for r in range(2)]


def test_a_batched_model_slow_only_on_its_first_call_is_kept():
    # a GPU's first batched pass loads the kernels of the batch's shapes: that one-off cost is not the batch's speed
    obs, _ = _obs(_lenet())
    problem = _problem_of(_timed_batch(obs, slow_calls={0}))
    for _ in range(3):
        problem.evaluate([0, 1], problem.z0)
    assert problem.batched is not None and problem.path == "batched" and problem.checks == 2


def test_a_run_whose_starts_went_one_by_one_says_why(monkeypatch):
    from leakattack.attacks import gradient_matching

    obs, _ = _obs(_lenet())
    attack = GradientMatching(optimizer="adam", lr=0.05, iterations=4, restarts=2, init_seed=4, labels="given")
    result = attack.reconstruct(_timed_batch(obs, slow_calls=range(100)))
    assert result.restart_path.startswith("one by one: the batched pass took ")
    # printed after 'note: ' and after the stop reason in the report: lower case, as every attack message starts
    assert result.message.startswith("the starts ran one by one: the batched pass took"), result.message
    # the untimed run keeps its batch whatever else loads the machine (its own timing is not under test here)
    monkeypatch.setattr(gradient_matching, "SLOWER", math.inf)
    kept = attack.reconstruct(obs)
    assert kept.restart_path == "batched" and "one by one" not in kept.message


def test_starts_that_went_one_by_one_take_exactly_the_steps_they_take_alone(monkeypatch):
    # the checked evaluations hand on the one-by-one values: in float32, where L-BFGS carries a batch's round-off into
    # another trajectory, a start that goes on one by one is its run alone to the last bit (more starts never end worse)
    from leakattack.attacks import gradient_matching

    monkeypatch.setattr(gradient_matching, "SLOWER", 0.0)  # any batched pass is "slower": one by one after two checks
    obs, _ = _obs(_lenet(torch.float32))
    attack = GradientMatching(optimizer="lbfgs", iterations=30, restarts=2, init_seed=4, labels="given", tol=0)
    batched = _batched(attack, obs)
    assert [r.losses for r in batched] == [r.losses for r in _sequential(attack, obs)]


def test_restarts_of_a_lenet_attack_do_not_import_torch_dynamo():
    # torch.func's first gradient imports torch._dynamo (seconds); the per-layer path needs none of it
    code = ("import sys, torch\n"
            "from leakattack.config import RunConfig\n"
            "from leakattack.experiment import execute, prepare\n"
            "execute(prepare(RunConfig(dataset='digits', optimizer='adam', iterations=3, restarts=3)), "
            "with_lpips=False)\n"
            "print('torch._dynamo' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "False", out.stdout + out.stderr


# successive halving of the restarts (--prune-restarts)

@pytest.mark.parametrize("R, points", [(1, []), (2, [0.5]), (3, [0.25, 0.5]), (4, [0.25, 0.5]),
                                       (5, [0.125, 0.25, 0.5]), (8, [0.125, 0.25, 0.5]),
                                       (9, [0.0625, 0.125, 0.25, 0.5])])
def test_prune_points_halve_down_to_one_start_for_the_last_half(R, points):
    assert prune_points(R) == points
    alive = R
    for _ in points:
        alive = math.ceil(alive / 2)
    assert alive == 1


def test_a_start_that_never_went_below_its_start_is_pruned_before_one_that_did():
    """With Adam, a start whose first steps rose kept its low start value as its lowest L_R and outranked starts that
    had halved theirs: the run kept it and ended "nothing was attacked"."""
    from types import SimpleNamespace as NS

    from leakattack.attacks.gradient_matching import _prune

    problem = NS(fit_name="L_R")
    runs = [NS(best_loss=30.0, best_step=12, stop=None, message="", problem=problem),  # from 60 to 30
            NS(best_loss=52.6, best_step=0, stop=None, message="", problem=problem),  # never below its 52.6
            NS(best_loss=40.0, best_step=3, stop=None, message="", problem=problem),
            NS(best_loss=20.0, best_step=0, stop=None, message="", problem=problem)]
    assert _prune(runs, [0, 1, 2, 3], [0, 1, 2, 3], 20, 0.25) == [0, 2]
    assert [run.stop for run in runs] == [None, "pruned", None, "pruned"]
    runs = [NS(best_loss=v, best_step=0, stop=None, message="", problem=problem) for v in (3.0, 1.0)]
    assert _prune(runs, [0, 1], [0, 1], 20, 0.5) == [1]  # none moved: the lowest start value


@pytest.mark.parametrize("optimizer, lr", [("adam", 0.05), ("lbfgs", None)])
def test_pruning_stops_the_worse_half_at_each_point_and_the_survivor_runs_as_if_alone(optimizer, lr):
    obs, _ = _obs(_lenet())
    common = dict(optimizer=optimizer, lr=lr, iterations=40, restarts=4, init_seed=4, labels="given", tol=0,
                  stall_window=0)
    pruned = _batched(GradientMatching(**common, prune_restarts=True), obs)
    alone = _sequential(GradientMatching(**common), obs)
    stops = [run.stop_reason for run in pruned]
    assert stops.count("pruned") == 3 and stops.count("iterations") == 1
    assert sorted(run.iterations for run in pruned) == [10, 10, 20, 40]  # at 1/4 and 1/2 of the 40 steps
    for step, k in ((10, 4), (20, 2)):  # each cut keeps the starts whose lowest L_R up to it was lowest
        # (a start that never went below its start value behind those that did)
        at = [((min(run.losses[1: step + 1]) >= run.losses[0], min(run.losses[: step + 1])), run) for run in pruned
              if run.iterations >= step]
        assert len(at) == k
        ranked = sorted(at, key=lambda pair: pair[0])
        assert all(run.iterations > step for _, run in ranked[: k // 2])
        assert all(run.iterations == step and run.stop_reason == "pruned" for _, run in ranked[k // 2:])
        assert all(f"pruned at step {step}" in run.message for _, run in ranked[k // 2:])
    for p, s in zip(pruned, alone, strict=True):  # every start follows its own trajectory until it stops
        n = p.iterations + 1
        assert p.losses == pytest.approx(s.losses[:n], rel=1e-8)
    survivor = next(i for i, run in enumerate(pruned) if run.stop_reason == "iterations")
    assert torch.allclose(pruned[survivor].x, alone[survivor].x, rtol=1e-8, atol=1e-8)


def test_reconstruct_keeps_a_survivor_and_reports_every_start_s_stop():
    obs, _ = _obs(_lenet())
    attack = GradientMatching(optimizer="adam", lr=0.05, iterations=32, restarts=8, labels="given", tol=0,
                              stall_window=0, prune_restarts=True)
    result = attack.reconstruct(obs)
    assert result.restart_stops.count("pruned") == 7 and result.stop_reason == "iterations"
    assert result.final_loss == min(result.restart_losses)


def test_pruning_under_a_time_limit_counts_the_budget_in_seconds():
    # far more iterations than the time allows: the cuts come from the elapsed share of the time limit (5 s: a
    # first step that outlasted the limit on a machine under load 5 would stop every start at once, 3 s did once)
    obs, _ = _obs(_lenet())
    attack = GradientMatching(optimizer="adam", lr=0.05, iterations=10 ** 7, restarts=4, labels="given", tol=0,
                              stall_window=0, time_limit=5.0, prune_restarts=True)
    result = attack.reconstruct(obs)
    assert result.restart_stops.count("pruned") == 3 and result.stop_reason == "time-limit"
