"""Ctrl-C during `leakattack run`: the first stops the attack at its best iterate, which is scored and written as any
other run (stop reason ``interrupted``); the second aborts; outside the command nothing changes."""

import json
import os
import signal
import subprocess
import sys
import threading

import pytest
import torch

import targets
from leakattack.attacks import GradientMatching
from leakattack.attacks.base import stop_on_interrupt, stop_requested
from leakattack.attacks.gauss_newton import levenberg_marquardt
from leakattack.channel import Channel
from leakattack.observation import ThreatModel, observe
from leakattack.sketch import make_sketch


@pytest.fixture(autouse=True)
def ctrl_c_raises():
    """SIGINT as in an interactive Python (under nohup or in a background job it arrives ignored)."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


pytestmark = pytest.mark.usefixtures("one_thread")


def _obs(shape=(1, 8, 8)):
    victim = targets.get_model("lenet", in_shape=shape, seed=0).to(dtype=torch.float64)
    x = torch.rand((1, *shape), generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    sketch = make_sketch("srht", victim.d, victim.d // 2, seed=1)
    return observe(victim, x, torch.tensor([3]), Channel(sketch, ""), ThreatModel(knows_labels=True)), x


def _ctrl_c_at(*steps):
    """A monitor that presses Ctrl-C once at each of ``steps`` (it is called once per start and step)."""
    left = list(steps)

    def monitor(t, x):
        if left and t == left[0]:
            left.pop(0)
            signal.raise_signal(signal.SIGINT)
        return {}
    return monitor


def test_the_first_ctrl_c_stops_the_attack_at_its_best_iterate():
    obs, _ = _obs()
    attack = GradientMatching(optimizer="adam", iterations=500, init_seed=2, labels="given", restarts=2)
    with stop_on_interrupt():
        out = attack.reconstruct(obs, monitor=_ctrl_c_at(30), monitor_every=1)
    assert out.stop_reason == "interrupted" and out.iterations == 31
    assert out.restart_stops == ["interrupted", "interrupted"]
    assert "interrupted at step 31 (Ctrl-C); returning the best iterate" in out.message
    assert out.final_loss == min(out.losses) < out.losses[0]  # the best iterate is the one returned
    assert not stop_requested() and signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_the_second_ctrl_c_aborts():
    obs, _ = _obs()

    with pytest.raises(KeyboardInterrupt), stop_on_interrupt():
        GradientMatching(optimizer="adam", iterations=500, labels="given").reconstruct(obs, monitor=_ctrl_c_at(5, 6),
                                                                                      monitor_every=1)
    assert not stop_requested()


def test_outside_the_block_ctrl_c_interrupts_as_usual():
    obs, _ = _obs()
    with pytest.raises(KeyboardInterrupt):
        GradientMatching(optimizer="adam", iterations=500, labels="given").reconstruct(obs, monitor=_ctrl_c_at(5),
                                                                                      monitor_every=1)
    result = {}
    worker = threading.Thread(target=lambda: result.setdefault("ok", [stop_on_interrupt().__enter__()]))
    worker.start()
    worker.join()
    assert "ok" in result and signal.getsignal(signal.SIGINT) is signal.default_int_handler  # no handler off-thread


def test_an_ignored_sigint_stays_ignored():
    """Under nohup a stray SIGINT must not cut the attack short."""
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with stop_on_interrupt():
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            signal.raise_signal(signal.SIGINT)
            assert not stop_requested()
    finally:  # the worker process runs other tests after this one, which press Ctrl-C themselves
        signal.signal(signal.SIGINT, before)


def _ctrl_c_in_evaluation(forward, k: int):
    """``forward`` with Ctrl-C pressed during its k-th evaluation; ``.calls`` counts the evaluations."""
    calls: list[int] = []

    def pressed(z, labels):
        calls.append(1)
        if len(calls) == k:
            signal.raise_signal(signal.SIGINT)
        return forward(z, labels)

    pressed.calls = calls  # type: ignore[attr-defined]
    return pressed


def test_ctrl_c_stops_gauss_newton_steps_and_leaves_the_first_phase_iterate():
    obs, x = _obs()
    start = x + 0.05 * torch.randn(x.shape, generator=torch.Generator().manual_seed(1), dtype=x.dtype)
    with stop_on_interrupt():  # between two Jacobians
        out = levenberg_marquardt(obs.forward, obs.y, start, obs.labels, tol=1e-30, scale=float(obs.y.pow(2).sum()),
                                  chord=False, on_step=lambda loss: signal.raise_signal(signal.SIGINT))
    assert out.stop == "interrupted" and out.steps == 1
    # Ctrl-C during the first chord step (evaluations: the residual at x, J's graph, the full step, a chord step)
    forward = _ctrl_c_in_evaluation(obs.forward, 4)
    with stop_on_interrupt():
        out = levenberg_marquardt(forward, obs.y, start, obs.labels, tol=1e-30, scale=float(obs.y.pow(2).sum()))
    assert out.stop == "interrupted" and out.steps == 1 and out.chord == 1 and len(forward.calls) == 4
    forward = _ctrl_c_in_evaluation(obs.forward, 2)  # while the first J is formed
    with stop_on_interrupt():
        out = levenberg_marquardt(forward, obs.y, start, obs.labels, tol=1e-30, scale=float(obs.y.pow(2).sum()))
    assert out.stop == "interrupted" and out.steps == 0 and out.losses == [] and out.rank is None
    assert torch.equal(out.x, start)


@pytest.mark.skipif(not hasattr(signal, "SIGINT") or os.name != "posix", reason="sends SIGINT to a child process")
def test_leakattack_run_writes_the_interrupted_run(tmp_path):
    """The command itself: Ctrl-C once the attack's progress bar is up; the run folder is whole and says so."""
    out = tmp_path / "run"
    env = {**os.environ, "LEAKATTACK_PROGRESS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "leakattack", "run", "--model", "lenet", "--dataset", "digits",
                             "--optimizer", "adam", "--iterations", "1000000", "--no-lpips", "--threads", "1",
                             "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # not ignored
    seen = b""
    while b"L_R=" not in seen:  # the bar's first postfix: the attack's loop is running
        chunk = proc.stderr.read1(4096)
        assert chunk, seen.decode(errors="replace")[-2000:]
        seen += chunk
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, (seen + stderr).decode(errors="replace")[-2000:]
    assert "stopping at the best iterate so far" in (seen + stderr).decode()
    assert "(interrupted)" in stdout.decode()
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["stop_reason"] == "interrupted" and metrics["iterations"] < 1000000
    assert (out / "reconstruction.png").is_file() and (out / "trace.csv").is_file()


def _closed_form_obs(model, x, labels, kind="none", b=None, **params):
    victim = targets.get_model(model, in_shape=tuple(x.shape[1:]), seed=0, **params).to(dtype=torch.float64)
    return observe(victim, x, labels, Channel(make_sketch(kind, victim.d, b or victim.d, seed=1)), ThreatModel())


def test_ctrl_c_stops_the_analytic_fit_at_its_best_sweep():
    from leakattack.attacks.analytic import Analytic
    from leakattack.data import get_dataset

    data = get_dataset("digits")
    x, labels = data.images[2:3].double(), data.labels[2:3]
    victim = targets.get_model("mlp", in_shape=tuple(x.shape[1:]), seed=0)
    obs = _closed_form_obs("mlp", x, labels, "srht", b=2 * victim.unknowns_per_example)  # b < d: the fit sweeps
    with stop_on_interrupt():
        out = Analytic().reconstruct(obs, monitor=_ctrl_c_at(3), monitor_every=1)
    assert out.stop_reason == "interrupted" and out.iterations == 3
    assert "Ctrl-C stopped the attack after 3 sweeps of the low-rank fit" in out.message
    assert torch.isfinite(out.x).all() and not stop_requested()
    assert Analytic().reconstruct(obs).stop_reason == "tolerance"  # uninterrupted, the same fit converges


def test_ctrl_c_stops_a_batchs_solve_and_its_label_search():
    from leakattack.attacks.analytic import Analytic
    from leakattack.data import get_dataset

    data = get_dataset("digits")
    obs = _closed_form_obs("mlp", data.images[:4].double(), data.labels[:4], hidden=32)  # g solved, then the batch
    attack = Analytic()
    read = attack.labels_for(obs)
    attack.labels_for = lambda obs: ((read + 1) % 10).sort().values  # type: ignore[method-assign]  # wrong labels
    with stop_on_interrupt():
        signal.raise_signal(signal.SIGINT)
        out = attack.reconstruct(obs)
    assert out.stop_reason == "interrupted" and "Ctrl-C stopped the attack" in out.message
    assert out.row_space_solve["steps"] == 1 and out.row_space_solve["label_sets"] == 1  # no other label set


def test_ctrl_c_stops_rgap_between_layers():
    from leakattack.attacks.rgap import Rgap

    victim = targets.get_model("lenet", in_shape=(1, 8, 8), seed=0)
    x = torch.rand((1, 1, 8, 8), generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    obs = _closed_form_obs("lenet", x, torch.tensor([3]))
    with stop_on_interrupt():
        signal.raise_signal(signal.SIGINT)
        out = Rgap().reconstruct(obs)
    layers = sum(1 for m in victim.model.modules() if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear)))
    assert out.stop_reason == "interrupted" and len(out.losses) == 1  # the head's input only
    assert f"after the head's division and 0 of the {layers - 1} layers below it" in out.message
    assert out.iterations == 0 and not bool(out.x.any())
    assert Rgap().reconstruct(obs).stop_reason == "tolerance"


@pytest.mark.parametrize("cut", ["interrupted", "time-limit"])
def test_a_run_cut_during_the_early_gauss_newton_steps_stops_for_that_reason(monkeypatch, cut):
    """The first phase ran GAUSS_NEWTON_AFTER steps of a larger budget: its own stop reason (iterations) is not the
    run's when Ctrl-C or the time limit ends the steps after it."""
    from leakattack.attacks.gradient_matching import GAUSS_NEWTON_AFTER

    obs, _ = _obs()
    attack = GradientMatching(optimizer="adam", lr=1e-4, iterations=GAUSS_NEWTON_AFTER + 500, init_seed=2,
                              labels="given", time_limit=None if cut == "interrupted" else 3600.0)
    assert attack._tries_early(obs)

    def cut_short(self, obs, best, deadline, monitor, progress=False):
        if cut == "interrupted":
            signal.raise_signal(signal.SIGINT)
        else:
            monkeypatch.setattr("time.perf_counter", lambda: deadline + 1.0)
        return False

    monkeypatch.setattr(GradientMatching, "_refine", cut_short)
    with stop_on_interrupt():
        out = attack.reconstruct(obs)
    assert out.stop_reason == cut and out.iterations == GAUSS_NEWTON_AFTER


def test_pruning_one_start_changes_nothing():
    obs, _ = _obs()
    one = GradientMatching(iterations=2000, labels="given")
    assert one._tries_early(obs)
    assert GradientMatching(iterations=2000, labels="given", prune_restarts=True)._tries_early(obs)
    assert not GradientMatching(iterations=2000, labels="given", prune_restarts=True, restarts=2)._tries_early(obs)


def test_ctrl_c_during_the_label_choice_says_the_choice_is_from_unfinished_runs(monkeypatch):
    from leakattack.attacks import gradient_matching
    from leakattack.cli.run import label_choice_line

    obs, _ = _obs()
    monkeypatch.setattr(gradient_matching, "readings_to_compare",
                        lambda *a, **k: {"pooled": torch.tensor([3]), "sign": torch.tensor([5])})
    with stop_on_interrupt():
        signal.raise_signal(signal.SIGINT)
        labels, choice = GradientMatching(iterations=50, labels="idlg").choose_labels(obs)
    assert choice["interrupted"] and choice["probe_losses"] == [float("inf")] * 2 and labels.tolist() == [3]
    assert "Ctrl-C stopped the short runs that compare them, so [3] was kept" in label_choice_line(choice)
