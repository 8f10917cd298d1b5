"""The analytic attack on a fully connected first layer: exact division, recovery through sketches, refusals."""

import json
import re

import pytest
import torch
import torch.nn.functional as F

import targets
from leakattack import metrics
from leakattack.attacks import AttackError, get_attack, list_attacks
from leakattack.attacks.analytic import Analytic, cgls, first_layer
from leakattack.channel import Channel
from leakattack.data import get_dataset
from leakattack.errors import SettingWarning
from leakattack.observation import ThreatModel, observe
from leakattack.sketch import make_sketch

pytestmark = pytest.mark.usefixtures("one_thread")  # the attack runs on one thread


def _example(dataset, index=0, pool=1):
    data = get_dataset(dataset)
    x = data.images[index:index + 1].double()
    if pool > 1:
        x = F.avg_pool2d(x, pool)
    return x, data.labels[index:index + 1]


def _observe(model, x, labels, kind="none", b_over_m=1.0, threat=ThreatModel(), seed=0, **params):
    victim = targets.get_model(model, in_shape=tuple(x.shape[1:]), seed=seed, **params).to(dtype=torch.float64)
    b = victim.d if kind == "none" else round(b_over_m * victim.unknowns_per_example)
    return observe(victim, x, labels, Channel(make_sketch(kind, victim.d, b, seed=1)), threat)


def _psnr(result, x):
    return float(metrics.psnr(result.x.clamp(0, 1), x).mean())


def test_analytic_is_registered():
    assert "analytic" in list_attacks() and isinstance(get_attack("analytic"), Analytic)


@pytest.mark.parametrize("model", ["mlp", "logreg"])
@pytest.mark.parametrize("dataset", ["photos", "digits"])
def test_unsketched_gradient_gives_the_example_exactly(model, dataset):
    x, labels = _example(dataset, index=3)
    obs = _observe(model, x, labels)
    result = get_attack("analytic").reconstruct(obs)
    assert _psnr(result, x) > 80
    assert result.labels.tolist() == labels.tolist()  # iDLG's sign rule, no weights needed


def test_division_needs_no_weights_only_the_layout():
    # the same gradient read with another victim's weights (same architecture) gives the same x
    x, labels = _example("digits", index=1)
    obs = _observe("mlp", x, labels)
    other = targets.get_model("mlp", in_shape=tuple(x.shape[1:]), seed=7).to(dtype=torch.float64)
    obs.victim = other
    assert _psnr(get_attack("analytic").reconstruct(obs), x) > 80


@pytest.mark.parametrize("kind", ["srht", "countsketch"])
def test_mlp_on_a_digit_is_recovered_through_a_sketch_of_twice_the_pixels(kind):
    x, labels = _example("digits", index=2)
    obs = _observe("mlp", x, labels, kind, b_over_m=2.0)
    assert obs.b < obs.d / 25  # far fewer numbers than the gradient has
    result = get_attack("analytic").reconstruct(obs)
    assert result.stop_reason == "tolerance"
    assert _psnr(result, x) > 80
    assert result.losses[result.best_step] < 1e-6 * result.losses[0]  # relative residuals: 1e-12 squared


def test_logreg_on_a_pooled_digit_is_recovered_through_a_gaussian_sketch():
    x, labels = _example("digits", index=0, pool=2)  # 14 x 14: m = 196 unknown pixels, d = 1970
    obs = _observe("logreg", x, labels, "gaussian", b_over_m=1.3)
    assert _psnr(get_attack("analytic").reconstruct(obs), x) > 80


def test_square_sketch_is_solved_then_divided():
    x, labels = _example("digits", index=0, pool=2)
    victim = targets.get_model("logreg", in_shape=tuple(x.shape[1:]), seed=0).to(dtype=torch.float64)
    obs = observe(victim, x, labels, Channel(make_sketch("gaussian", victim.d, victim.d, seed=1)))
    result = get_attack("analytic").reconstruct(obs)
    assert result.message.startswith("solved g") and _psnr(result, x) > 80


def test_below_the_number_of_unknowns_it_warns_and_finds_another_input():
    x, labels = _example("digits", index=0, pool=2)
    obs = _observe("logreg", x, labels, "srht", b_over_m=0.5)
    with pytest.warns(SettingWarning, match="not unique"):
        result = get_attack("analytic", sweeps=20).reconstruct(obs)
    assert "not unique" in result.message and _psnr(result, x) < 30


def test_inputs_whose_column_a_sampling_sketch_leaves_out_are_named_and_the_run_stalls():
    # uniform sampling of 3000 of mlp's 50,890 coordinates draws none of 15 pixels' 64 first-layer entries: the fit
    # reaches its tolerance with those pixels at 0, which no b above the unknowns makes unique
    x, labels = _example("digits", index=0)
    victim = targets.get_model("mlp", in_shape=tuple(x.shape[1:]), seed=0).to(dtype=torch.float64)
    sketch = make_sketch("uniform", victim.d, 3000, seed=1)
    obs = observe(victim, x, labels, Channel(sketch))
    result = get_attack("analytic").reconstruct(obs)
    column = torch.zeros(victim.d, dtype=torch.bool)
    column[sketch.idx] = True
    first = next(p for p in victim.model.parameters())  # mlp's first Linear's weight, 64 x 784, first in g
    unseen = ~column[:first.numel()].reshape(first.shape).any(0)
    assert int(unseen.sum()) > 0
    assert result.stop_reason == "stalled"
    assert result.message.startswith(f"{int(unseen.sum())} of the first layer's 784 inputs have no entry")
    assert bool((result.x.reshape(-1)[unseen] == 0).all())
    wide = observe(victim, x, labels, Channel(make_sketch("uniform", victim.d, 6000, seed=1)))
    result = get_attack("analytic").reconstruct(wide)
    assert result.stop_reason == "tolerance" and _psnr(result, x) > 80


@pytest.mark.parametrize("model", ["lenet", "resnet20", "vit_small"])
def test_a_convolutional_first_layer_is_refused_in_one_sentence(model):
    x, labels = _example("digits")
    victim = targets.get_model(model, in_shape=tuple(x.shape[1:]), seed=0)
    obs = observe(victim, x.float(), labels, Channel(make_sketch("none", victim.d, victim.d)))
    reason = Analytic().supports(obs)
    assert "Conv2d" in reason and reason.count(". ") == 0
    with pytest.raises(AttackError, match="fully connected first layer"):
        Analytic().reconstruct(obs)


def _batch(size):
    data = get_dataset("digits")
    return data.images[:size].double(), data.labels[:size]


def _matched_psnr(result, x):
    xh = result.x.clamp(0, 1)
    return metrics.psnr(xh[metrics.match(xh, x)], x)


def test_a_relu_batch_is_separated_by_rows_with_one_active_unit():
    x, labels = _batch(8)
    obs = _observe("mlp", x, labels, act="relu", hidden=256)
    result = get_attack("analytic").reconstruct(obs)
    exact = int((_matched_psnr(result, x) > 80).sum())
    assert exact >= 7  # one example of these eight has no row of its own at this width
    assert (exact == 8) == (result.message == "solved g from the message, then divided")
    assert "of the batch's 8 examples were separated" in result.message or exact == 8
    # each separated example gets its own label, read from the head's block with the recovered inputs
    perm = metrics.match(result.x.clamp(0, 1), x)
    assert int((result.labels[perm] == labels).sum()) >= 7


def test_a_relu_batch_is_recovered_through_a_sketch_above_its_low_rank_unknowns():
    x, labels = _batch(2)
    obs = _observe("mlp", x, labels, "srht", b_over_m=3.6, act="relu")  # 1.5x the 2 x 922 unknowns
    assert obs.b < obs.d / 18
    result = get_attack("analytic").reconstruct(obs)
    assert result.stop_reason == "tolerance"
    assert (_matched_psnr(result, x) > 80).all()


def test_a_narrow_layer_separates_fewer_examples_and_says_so():
    x, labels = _batch(8)
    result = get_attack("analytic").reconstruct(_observe("mlp", x, labels, act="relu", hidden=16))
    assert "examples were separated" in result.message
    assert result.x.shape == x.shape and torch.isfinite(result.x).all()


@pytest.mark.parametrize("kind, b_over_m", [("none", 1.0), ("srht", 14.0)])
def test_a_sigmoid_batch_is_solved_with_the_model_in_the_row_space(kind, b_over_m):
    # no inactive units to separate by: the examples' coefficients in the first block's row space, by the model
    x, labels = _batch(8)
    obs = _observe("mlp", x, labels, kind=kind, b_over_m=b_over_m, hidden=32)
    result = get_attack("analytic").reconstruct(obs)
    assert result.stop_reason == "tolerance" and "row space" in result.message
    assert (_matched_psnr(result, x) > 80).all()
    perm = metrics.match(result.x.clamp(0, 1), x)
    assert result.labels[perm].tolist() == labels.tolist()  # labels come in the examples' order


def test_a_wrong_label_leaves_the_solve_short_and_it_says_so():
    x, labels = _batch(4)
    obs = _observe("mlp", x, labels, hidden=32, threat=ThreatModel(knows_labels=True))
    obs.labels = (labels + 1) % 10
    result = Analytic(labels="given").reconstruct(obs)
    assert result.stop_reason == "stalled"
    assert "the examples returned do not send the message to the solve's threshold" in result.message


class _Coupled(torch.nn.Module):
    def __init__(self, act):
        super().__init__()
        self.fc1, self.norm, self.act, self.fc = (torch.nn.Linear(49, 16), torch.nn.BatchNorm1d(16), act,
                                                  torch.nn.Linear(16, 10))

    def forward(self, x):
        return self.fc(self.act(self.norm(self.fc1(x.flatten(1)))))


def test_batches_the_attack_cannot_read_and_a_bias_free_layer_are_refused():
    x, labels = _example("digits")
    xs, ls = torch.cat([x, x.flip(-1)]), torch.cat([labels, labels])
    small = F.avg_pool2d(xs, 4)  # 7 x 7
    for module, words in ((_Coupled(torch.nn.Sigmoid()), "batch statistics"),
                          (torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(49, 16), torch.nn.LeakyReLU(),
                                               torch.nn.Linear(16, 10)), "LeakyReLU"),
                          (torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(49, 1), torch.nn.Sigmoid(),
                                               torch.nn.Linear(1, 10)), "(at most 1) cannot hold 2 examples")):
        victim = targets.Victim.from_module(module.double(), input_shape=(1, 7, 7), num_classes=10)
        reason = Analytic().supports(observe(victim, small, ls, Channel(make_sketch("none", victim.d, victim.d))))
        assert "batch of 2" in reason and words in reason and reason.count(". ") == 0
    linreg = _observe("linreg", x, labels.double())
    assert "no trainable bias" in Analytic().supports(linreg)
    assert "not grant" in Analytic(labels="given").supports(_observe("mlp", x, labels))


def test_given_labels_are_returned_as_given():
    x, labels = _example("digits")
    obs = _observe("logreg", x, labels, threat=ThreatModel(knows_labels=True))
    assert Analytic(labels="given").reconstruct(obs).labels.tolist() == labels.tolist()


def test_bad_options_are_refused():
    # one sentence of the family users see (a UserError), naming the attack and its choices
    with pytest.raises(AttackError, match="analytic's solver must be one of .*got 'newton'"):
        Analytic(solver="newton")
    with pytest.raises(AttackError, match="analytic's labels must be one of recovered, given, got 'dlg'"):
        Analytic(labels="dlg")


def test_first_layer_is_the_first_module_with_a_trainable_parameter():
    mlp = targets.get_model("mlp", in_shape=(1, 8, 8))
    assert first_layer(mlp.model) is mlp.model.fc1


def test_cgls_matches_dense_least_squares():
    gen = torch.Generator().manual_seed(0)
    A = torch.randn(40, 12, generator=gen, dtype=torch.float64)
    y = torch.randn(40, generator=gen, dtype=torch.float64)
    z = cgls(lambda v: A @ v, lambda u: A.T @ u, y, torch.zeros(12, dtype=torch.float64), steps=50)
    assert torch.allclose(z, torch.linalg.lstsq(A, y.unsqueeze(1)).solution.squeeze(1), atol=1e-10)


def test_experiment_passes_the_analytic_attack_only_its_own_options():
    from leakattack.config import RunConfig
    from leakattack.experiment import attack_of

    attack = attack_of(RunConfig(model="mlp", attack="analytic"))
    assert isinstance(attack, Analytic) and attack.label_mode == "recovered"


def test_a_run_through_the_experiment_writes_an_exact_reconstruction(tmp_path):
    from leakattack.config import RunConfig
    from leakattack.experiment import run_attack

    cfg = RunConfig(model="mlp", attack="analytic", dataset="digits", sketch="srht", sketch_ratio=0.03)
    m, folder = run_attack(cfg, out=tmp_path / "run", with_lpips=False)
    assert m.psnr > 80 and m.stop_reason == "tolerance" and m.label_acc == 1.0
    assert (folder / "metrics.json").exists() and (folder / "reconstruction.png").exists()


def test_a_wrong_label_read_from_the_message_is_found_by_the_solve():
    # labels read wrong (as a sketch's noise can leave them): the failed solve tries other multisets, and the one
    # that solves it gives the batch back with its labels in order
    x, labels = _batch(4)
    obs = _observe("mlp", x, labels, hidden=32)
    attack = Analytic()
    right = attack.labels_for(obs)
    wrong = right.clone()
    wrong[0] = (wrong[0] + 1) % 10
    attack.labels_for = lambda obs: wrong.sort().values  # type: ignore[method-assign]
    result = attack.reconstruct(obs)
    assert result.stop_reason == "tolerance" and "after the ones read from the message" in result.message
    assert result.row_space_solve["label_sets"] >= 2
    assert (_matched_psnr(result, x) > 80).all()
    perm = metrics.match(result.x.clamp(0, 1), x)
    assert result.labels[perm].tolist() == labels.tolist()


def test_a_label_search_that_finds_nothing_says_so(monkeypatch):
    from leakattack.attacks import analytic

    x, labels = _batch(4)
    obs = _observe("mlp", x, labels, hidden=32)
    attack = Analytic()
    read = attack.labels_for(obs)
    wrong = [(read + k) % 10 for k in (1, 2)]  # every label off: no set tried can solve it
    attack.labels_for = lambda obs: wrong[0].sort().values  # type: ignore[method-assign]
    attack._other_labels = lambda obs, labels: iter([wrong[1].sort().values])  # type: ignore[method-assign]
    result = attack.reconstruct(obs)
    assert result.stop_reason == "stalled" and "1 other label sets did not solve it either" in result.message
    assert result.row_space_solve["label_sets"] == 2 and not result.row_space_solve["solved"]
    monkeypatch.setattr(analytic, "LABEL_SEARCH_S", 0.0)
    result = attack.reconstruct(obs)
    assert result.stop_reason == "stalled" and "label search stopped at its 0 s" in result.message


def test_a_sigmoid_batch_run_records_its_row_space_solve(tmp_path):
    from leakattack.config import RunConfig
    from leakattack.experiment import run_attack

    cfg = RunConfig(model="mlp", attack="analytic", dataset="digits", sketch="none", batch_size=4)
    m, folder = run_attack(cfg, out=tmp_path / "run", with_lpips=False)
    solve = json.loads((folder / "metrics.json").read_text())["row_space_solve"]
    assert solve["solved"] and solve["residual"] <= solve["accepted"] and solve["steps"] >= 1
    assert m.psnr > 80 and m.label_acc_matched == 1.0
    assert m.iterations == solve["steps"]  # the summary line counts the solve's steps (it read "0 it")


def test_gradient_matching_settings_given_to_a_closed_form_attack_are_named_as_unused():
    from leakattack.config import RunConfig

    assert RunConfig(model="mlp", attack="analytic").unused_options() == []
    assert RunConfig(model="mlp", attack="gradient-matching", restarts=4, label_mode="dlg").unused_options() == []
    cfg = RunConfig(model="mlp", attack="rgap", restarts=4, priors=["tv:0.1"], optimizer="adam", label_mode="dlg")
    assert cfg.unused_options() == ["--optimizer", "--prior", "--restarts", "--labels dlg"]
    # the analytic attack reads --time-limit; R-GAP, whose solves take seconds, does not
    assert RunConfig(model="mlp", attack="analytic", time_limit="5s").unused_options() == []
    assert RunConfig(model="mlp", attack="rgap", time_limit="5s").unused_options() == ["--time-limit"]
    # a closed-form attack recovers its labels (or takes them as given): never the soft labels of --labels dlg
    assert cfg.label_source == "idlg"
    assert RunConfig(model="mlp", attack="analytic", label_mode="given").label_source == "given"
    assert RunConfig(model="mlp", label_mode="dlg").label_source == "dlg"


def test_run_attack_from_python_warns_of_the_settings_the_attack_does_not_read_by_their_field_names(tmp_path):
    from leakattack import run_attack
    from leakattack.config import RunConfig

    cfg = RunConfig(model="mlp", dataset="digits", attack="analytic", sketch="none", iterations=5, priors=["tv:0.1"])
    with pytest.warns(SettingWarning) as caught:
        m, _ = run_attack(cfg, out=tmp_path / "run", with_lpips=False)
    said = [str(w.message) for w in caught if "change nothing" in str(w.message)]
    assert said == ["iterations and priors change nothing for the analytic attack, which solves in closed form and "
                    "does not read them"]
    assert m.psnr > 80  # the run itself goes ahead
    assert RunConfig(model="mlp", attack="rgap", label_mode="dlg").unused_fields() == ["label_mode='dlg'"]
    assert RunConfig(model="mlp", attack="analytic").unused_note(python=True) is None


def test_the_run_command_notes_unused_flags_and_records_where_the_labels_came_from(tmp_path, capsys):
    from leakattack import cli

    out = tmp_path / "run"
    rc = cli.main(["run", "--model", "mlp", "--dataset", "digits", "--attack", "analytic", "--sketch", "srht",
                   "--sketch-ratio", "0.03", "--labels", "dlg", "--iterations", "50", "--no-lpips", "--quiet",
                   "--out", str(out)])
    assert rc == 0
    captured = capsys.readouterr()
    assert ("leakattack: warning: --iterations and --labels dlg change nothing for the analytic attack, which solves "
            "in closed form and does not read them; it optimises no labels and reads them from the message as the "
            "default --labels idlg does (--labels given grants them)") in captured.err
    assert "labels 1/1 (idlg)" in captured.out
    assert json.loads((out / "metrics.json").read_text())["label_mode"] == "idlg"
    from leakattack.config import RunConfig

    python = RunConfig(model="mlp", attack="analytic", label_mode="dlg").unused_note(python=True)
    assert "the default label_mode='idlg' does (label_mode='given' grants them)" in python and "--" not in python


def test_a_fit_that_runs_out_of_sweeps_says_so_and_sweeps_gives_it_more(tmp_path, capsys):
    from leakattack import cli

    common = ["run", "--model", "mlp", "--dataset", "digits", "--attack", "analytic", "--sketch", "srht",
              "--sketch-ratio", "0.03", "--no-lpips", "--quiet"]
    assert cli.main([*common, "--sweeps", "2", "--out", str(tmp_path / "short")]) == 0
    captured = capsys.readouterr()
    assert "2 it (iterations)" in captured.out
    assert "note: the low-rank fit ran all its 2 sweeps short of its tolerance (--sweeps gives it more)" in captured.err
    assert cli.main([*common, "--sweeps", "0", "--out", str(tmp_path / "none")]) == 2
    assert "sweeps" in capsys.readouterr().err and not (tmp_path / "none").exists()


class _Skip(torch.nn.Module):
    """A sigmoid MLP whose input also reaches the output past the first layer."""

    def __init__(self):
        super().__init__()
        self.fc1, self.act, self.fc = torch.nn.Linear(49, 24), torch.nn.Sigmoid(), torch.nn.Linear(24, 10)
        self.skip = torch.nn.Linear(49, 10)

    def forward(self, x):
        return self.fc(self.act(self.fc1(x.flatten(1)))) + self.skip(x.flatten(1))


def test_the_solve_skips_the_first_layers_product_only_where_nothing_else_reads_the_input():
    from leakattack.attacks.span import _Batch

    x, labels = _batch(4)
    small = F.avg_pool2d(x, 4)
    for module, collapsed in ((targets.get_model("mlp", in_shape=(1, 7, 7), seed=0, hidden=24).model, True),
                              (_Skip(), False)):
        torch.manual_seed(0)
        victim = targets.Victim.from_module(module.double(), input_shape=(1, 7, 7), num_classes=10, name="m")
        obs = observe(victim, small, labels, Channel(make_sketch("none", victim.d, victim.d)))
        layer = first_layer(victim.model)
        g = obs.y.flatten()
        block = torch.cat([g[:24 * 49].view(24, 49), g[24 * 49:24 * 50, None]], 1)
        assert _Batch(victim, layer, block, labels, (1, 7, 7)).collapsed is collapsed
        result = Analytic().reconstruct(obs)
        assert result.stop_reason == "tolerance" and (_matched_psnr(result, small) > 80).all()


def test_the_solves_normal_equations_are_those_of_its_jacobian():
    # J^T J and J^T r formed from the B forward-mode passes against the Jacobian of r(A) by autograd
    from leakattack.attacks.span import _Batch

    x, labels = _batch(3)
    small = F.avg_pool2d(x, 4)
    victim = targets.get_model("mlp", in_shape=(1, 7, 7), seed=0, hidden=5).to(dtype=torch.float64)
    obs = observe(victim, small, labels, Channel(make_sketch("none", victim.d, victim.d)))
    g = obs.y.flatten()
    batch = _Batch(victim, victim.model.fc1, torch.cat([g[:5 * 49].view(5, 49), g[5 * 49:5 * 50, None]], 1), labels,
                   (1, 7, 7))
    A = batch.V.T @ torch.cat([torch.rand(3, 49, dtype=torch.float64), torch.ones(3, 1, dtype=torch.float64)], 1).T
    D = batch.deltas(A)
    r = batch.residual(A, D)
    J = torch.autograd.functional.jacobian(lambda a: batch.residual(a, batch.deltas(a)).reshape(-1), A).reshape(15, 9)
    JtJ, Jtr = batch.system(A, D, r)
    assert torch.allclose(JtJ, J.T @ J, rtol=1e-9, atol=1e-12 * float(JtJ.abs().max()))
    assert torch.allclose(Jtr, J.T @ r.reshape(-1), rtol=1e-9, atol=1e-12 * float(Jtr.abs().max()))


def test_the_time_limit_stops_the_low_rank_fit_with_its_best_sweep():
    from leakattack.config import RunConfig
    from leakattack.experiment import attack_of

    x, labels = _example("digits", index=2)
    obs = _observe("mlp", x, labels, "srht", b_over_m=2.0)  # b < d: the low-rank fit runs
    attack = attack_of(RunConfig(model="mlp", attack="analytic", time_limit="1e-9s"))  # past at the first sweep
    assert isinstance(attack, Analytic) and attack.time_limit == 1e-9
    result = attack.reconstruct(obs)
    assert result.stop_reason == "time-limit" and result.iterations == 0 and torch.isfinite(result.x).all()
    assert "the time limit of 1e-09 s was reached after 0 sweeps" in result.message
    done = get_attack("analytic").reconstruct(obs)  # no limit: the same fit converges, and says so
    assert done.stop_reason == "tolerance" and done.message.startswith(
        f"the low-rank fit read the message in {done.iterations} sweeps (relative residual ")


def test_the_time_limit_stops_a_batchs_solve_and_its_label_search():
    x, labels = _batch(4)
    obs = _observe("mlp", x, labels, hidden=32)  # unsketched: g solved, then the batch in the row space
    attack = Analytic(time_limit=0.0)
    read = attack.labels_for(obs)
    attack.labels_for = lambda obs: ((read + 1) % 10).sort().values  # type: ignore[method-assign]
    result = attack.reconstruct(obs)
    assert result.stop_reason == "time-limit" and "the time limit of 0 s was reached" in result.message
    # one step of the first start, and no other label set
    assert result.row_space_solve["steps"] == 1 and result.row_space_solve["label_sets"] == 1


def test_a_float32_message_is_fitted_in_float64_to_its_own_round_off():
    """In float32 the low-rank fit's sweeps rose from a relative residual of 0.079 and the run stopped `stalled` at
    15 dB, saying nothing of why; the message is now read in float64, to float32's round-off."""
    x, labels = _example("digits", index=0)
    victim = targets.get_model("mlp", in_shape=tuple(x.shape[1:]), seed=0)  # float32
    obs = observe(victim, x.float(), labels, Channel(make_sketch("srht", victim.d, 2000, seed=1)))
    result = get_attack("analytic").reconstruct(obs)
    assert result.x.dtype == torch.float32 and result.stop_reason == "tolerance"
    assert result.final_loss < 1e-6 and _psnr(result, x.float()) > 100
    assert result.message.startswith("the low-rank fit read the message in")


def test_a_fit_that_stops_gaining_says_so_with_its_residual():
    x, labels = _example("digits", index=0)
    victim = targets.get_model("mlp", in_shape=tuple(x.shape[1:]), seed=0).to(dtype=torch.float64)
    channel = Channel(make_sketch("srht", victim.d, 2000, seed=1), defense="gaussian:sigma=1e-4")
    obs = observe(victim, x, labels, channel)
    result = get_attack("analytic").reconstruct(obs)
    assert result.stop_reason == "stalled"
    assert "the low-rank fit stopped gaining after" in result.message
    # and names what in the channel keeps the message from a rank-B gradient: the noise, not the sketch it models
    assert result.message.endswith("(the message is not the batch's gradient up to one scale: the defense "
                                   "gaussian:sigma=0.0001@before_sketch)"), result.message
    assert re.search(r"at a relative residual of \d\.\de-0\d, above its tolerance 1e-09", result.message)


def test_a_closed_form_run_records_the_one_start_it_solved_from(tmp_path):
    """--restarts 4 given to a closed form is warned of and changes nothing: metrics.json records one start and no
    restart stops, as a run of one start does."""
    from leakattack import run_attack
    from leakattack.config import RunConfig

    cfg = RunConfig(model="mlp", dataset="digits", attack="analytic", sketch="none", restarts=4)
    with pytest.warns(SettingWarning, match="restarts changes nothing for the analytic attack"):
        m, folder = run_attack(cfg, out=tmp_path / "run", with_lpips=False)
    stored = json.loads((folder / "metrics.json").read_text())
    assert m.restarts == 1 and stored["restarts"] == 1 and stored.get("restart_stops") is None
