"""The closed-form attacks' QA findings: an input transformed before the first layer, a clipped batch's unknown
scale, a failed solve's reported loss and labels, imprint's bins hidden by noise, labels that do not explain a
failed imprint run."""

import json

import pytest
import torch
import torch.nn.functional as F

import targets
from leakattack import cli, metrics
from leakattack.attacks import get_attack
from leakattack.attacks.analytic import Analytic, outside_before
from leakattack.attacks.rgap import Rgap
from leakattack.channel import Channel
from leakattack.data import get_dataset
from leakattack.observation import ThreatModel, observe
from leakattack.rebuilt import failed_kind, failed_part
from leakattack.sketch import make_sketch

pytestmark = pytest.mark.usefixtures("one_thread")


def _batch(size, pool=1):
    data = get_dataset("digits")
    x = data.images[:size].double()
    return (F.avg_pool2d(x, pool) if pool > 1 else x), data.labels[:size]


class _Before(torch.nn.Module):
    """fc2(sigmoid(fc1(pre(x).flatten(1)))): an operation of the forward before the first layer."""

    def __init__(self, pre, m=49, hidden=16):
        super().__init__()
        self.pre, self.fc1, self.fc2 = pre, torch.nn.Linear(m, hidden), torch.nn.Linear(hidden, 10)

    def forward(self, x):
        return self.fc2(torch.sigmoid(self.fc1(self.pre(x).flatten(1))))


def _obs(module, x, labels, defense=None, threat=ThreatModel()):
    torch.manual_seed(0)
    victim = targets.Victim.from_module(module.double(), input_shape=tuple(x.shape[1:]), num_classes=10)
    return observe(victim, x, labels, Channel(make_sketch("none", victim.d, victim.d), defense), threat)


@pytest.mark.parametrize("pre", [lambda x: (x - 0.5) / 0.25, lambda x: x ** 2], ids=["normalised", "squared"])
def test_analytic_refuses_an_input_transformed_before_its_first_layer_as_rgap_does(pre):
    x, labels = _batch(1, pool=4)
    obs = _obs(_Before(pre), x, labels)
    reason = Analytic().supports(obs)
    assert reason is not None and outside_before("fc1") in reason and reason.count(". ") == 0
    assert outside_before("fc1") in Rgap().supports(obs)  # the one check, shared


def test_analytic_refuses_a_module_before_its_first_layer_and_takes_a_flatten():
    x, labels = _batch(1, pool=4)
    sigmoid_first = torch.nn.Sequential(torch.nn.Sigmoid(), torch.nn.Flatten(), torch.nn.Linear(49, 16),
                                        torch.nn.Sigmoid(), torch.nn.Linear(16, 10))
    assert "a Sigmoid (0) before its first layer 2" in Analytic().supports(_obs(sigmoid_first, x, labels))
    plain = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Dropout(0.1), torch.nn.Linear(49, 16),
                                torch.nn.Sigmoid(), torch.nn.Linear(16, 10))
    obs = _obs(plain, x, labels)
    assert Analytic().supports(obs) is None
    assert float(metrics.psnr(Analytic().reconstruct(obs).x.clamp(0, 1), x).mean()) > 80
    assert Analytic().supports(_obs(_Before(lambda x: x), x, labels)) is None  # nothing done to x: taken


def _clipped(C, labels_given=True, hidden=32):
    x, labels = _batch(4)
    victim = targets.get_model("mlp", in_shape=tuple(x.shape[1:]), seed=0, hidden=hidden).to(dtype=torch.float64)
    sketch = make_sketch("none", victim.d, victim.d)
    obs = observe(victim, x, labels, Channel(sketch, None if C is None else f"clip:C={C:g}"),
                  ThreatModel(knows_labels=labels_given))
    return x, labels, obs


def test_a_clipped_sigmoid_batch_is_solved_with_the_scale_of_the_clip():
    # a clip of the whole update multiplies the block by C / ||g||: the row-space solve fits that one scale
    x, labels, obs = _clipped(1e-3)
    result = Analytic(labels="given").reconstruct(obs)
    solve = result.row_space_solve
    assert solve["solved"] and result.stop_reason == "tolerance", result.message
    assert solve["scale"] == pytest.approx(1e-3 / obs.g_norm, rel=1e-8)
    assert "the model's gradient times" in result.message
    xh = result.x.clamp(0, 1)
    assert (metrics.psnr(xh[metrics.match(xh, x)], x) > 80).all()
    _, _, plain = _clipped(None)
    unclipped = Analytic(labels="given").reconstruct(plain)
    assert unclipped.row_space_solve["solved"] and unclipped.row_space_solve["scale"] == pytest.approx(1, abs=1e-9)
    assert "times" not in unclipped.message


def test_a_solve_that_stops_short_records_no_scale():
    """A per-example clip, which no one scale models, stopped the solve short with a scale of -1.2e-4 recorded."""
    x, labels = _batch(4)
    victim = targets.get_model("mlp", in_shape=tuple(x.shape[1:]), seed=0, hidden=32).to(dtype=torch.float64)
    obs = observe(victim, x, labels, Channel(make_sketch("none", victim.d, victim.d), "per_example:C=1e-3"),
                  ThreatModel(knows_labels=True))
    result = Analytic(labels="given", time_limit=20.0).reconstruct(obs)
    assert not result.row_space_solve["solved"] and result.row_space_solve["scale"] is None, result.row_space_solve


def test_the_scaled_solves_normal_equations_are_those_of_its_jacobian():
    # J^T J and J^T r for the unknowns (A, t) of r = t D^T U - G V, against the Jacobian by autograd
    from leakattack.attacks.span import _Batch

    x, labels = _batch(3, pool=4)
    victim = targets.get_model("mlp", in_shape=(1, 7, 7), seed=0, hidden=5).to(dtype=torch.float64)
    obs = observe(victim, x, labels, Channel(make_sketch("none", victim.d, victim.d)))
    g = obs.y.flatten()
    batch = _Batch(victim, victim.model.fc1, torch.cat([g[:5 * 49].view(5, 49), g[5 * 49:5 * 50, None]], 1), labels,
                   (1, 7, 7))
    gen = torch.Generator().manual_seed(0)
    A = batch.V.T @ torch.cat([torch.rand(3, 49, generator=gen, dtype=torch.float64),
                               torch.ones(3, 1, dtype=torch.float64)], 1).T
    t = 0.37
    D = batch.deltas(A)
    r = batch.residual(A, D, t)

    def flat(z):
        return batch.residual(z[:9].view(3, 3), batch.deltas(z[:9].view(3, 3)), z[9]).reshape(-1)

    J = torch.autograd.functional.jacobian(flat, torch.cat([A.reshape(-1), torch.tensor([t], dtype=A.dtype)]))
    JtJ, Jtr = batch.scaled_system(A, D, r, t)
    assert torch.allclose(JtJ, J.T @ J, rtol=1e-9, atol=1e-12 * float(JtJ.abs().max()))
    assert torch.allclose(Jtr, J.T @ r.reshape(-1), rtol=1e-9, atol=1e-12 * float(Jtr.abs().max()))
    assert batch.scale(batch.predicted(A, D)) == pytest.approx(
        float((batch.predicted(A, D) * batch.Y).sum() / batch.predicted(A, D).pow(2).sum()))


def test_a_failed_solve_reports_its_own_residual_as_the_final_loss():
    x, labels = _batch(4)
    victim = targets.get_model("mlp", in_shape=tuple(x.shape[1:]), seed=0, hidden=32).to(dtype=torch.float64)
    obs = observe(victim, x, labels, Channel(make_sketch("none", victim.d, victim.d)), ThreatModel(knows_labels=True))
    obs.labels = (labels + 1) % 10
    result = Analytic(labels="given").reconstruct(obs)
    solve = result.row_space_solve
    assert result.stop_reason == "stalled" and not solve["solved"]
    assert result.final_loss == solve["residual"] > solve["accepted"]  # not the block's exact fit, 0
    assert result.losses[0] < 1e-20  # the block's own fit stays the first entry


def test_labels_the_search_replaced_are_recorded_beside_the_ones_kept():
    x, labels = _batch(4)
    victim = targets.get_model("mlp", in_shape=tuple(x.shape[1:]), seed=0, hidden=32).to(dtype=torch.float64)
    obs = observe(victim, x, labels, Channel(make_sketch("none", victim.d, victim.d)))
    attack = Analytic()
    wrong = attack.labels_for(obs).clone()
    wrong[0] = (wrong[0] + 1) % 10
    wrong = wrong.sort().values
    attack.labels_for = lambda obs: wrong  # type: ignore[method-assign]
    result = attack.reconstruct(obs)
    assert result.row_space_solve["solved"] and result.row_space_solve["labels_read"] == wrong.tolist()
    assert sorted(result.labels.tolist()) == sorted(labels.tolist())
    plain = Analytic().reconstruct(obs)  # the labels read solve it: nothing to record beside them
    assert "labels_read" not in plain.row_space_solve


def _imprint(defense):
    data = get_dataset("digits")
    x, labels = data.images[:8].double(), data.labels[:8]
    victim = targets.get_model("lenet", in_shape=(1, 28, 28), seed=0)
    attack = get_attack("imprint", bins=64)
    attack.modify(victim, data)
    victim.to(dtype=torch.float64)
    obs = observe(victim, x, labels, Channel(make_sketch("none", victim.d, victim.d), defense), ThreatModel())
    return attack.reconstruct(obs)


def test_imprint_does_not_call_bins_hidden_by_noise_shared():
    clean = _imprint(None)
    assert clean.stop_reason == "tolerance" and "8 of 64 bins held images" in clean.message
    noisy = _imprint("clip:C=1,gaussian:sigma=1e-4")
    assert noisy.stop_reason == "stalled"
    assert "shared a bin with another" not in noisy.message
    assert "fewer bins than images, which images sharing a bin or bins hidden by the noise explain" in noisy.message
    assert "the defense adds noise, gaussian:sigma=0.0001" in noisy.message


def test_wrong_labels_do_not_explain_a_failed_run_of_an_attack_that_does_not_use_them(tmp_path, capsys):
    assert get_attack("imprint").uses_labels is False
    assert get_attack("analytic").uses_labels and get_attack("rgap").uses_labels
    run = {"verdict": "not rebuilt", "label_mode": "idlg", "label_acc": 0.12}
    assert failed_kind(run) == "labels" and "--labels given" in failed_part(run)
    assert failed_kind({**run, "labels_unused": True}) is None and failed_part({**run, "labels_unused": True}) is None
    # the run records it, and its summary does not blame the labels
    out = tmp_path / "run"
    assert cli.main(["run", "--model", "lenet", "--dataset", "digits", "--attack", "imprint", "--sketch", "none",
                     "--batch-size", "8", "--bins", "64", "--defense", "clip:C=1,gaussian:sigma=1e-4", "--no-lpips",
                     "--threads", "1", "--quiet", "--out", str(out)]) == 0
    said = capsys.readouterr()
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["labels_unused"] is True and metrics["verdict"] == "not rebuilt" and metrics["label_acc"] < 1
    assert "the label reading failed" not in said.out + said.err
    # its final loss is the bins' signal it leaves out, not a fit to the message: it was called the residual
    assert "| bin signal left out " in said.out and "| residual " not in said.out


def test_a_solve_for_g_that_does_not_converge_is_warned_of_not_blamed_on_the_sketch(monkeypatch):
    """rgap through a square gaussian sketch of lenet stopped after 4.5 min with a note blaming noise or a null
    space, where the CGLS solve for g had stopped short on the ill-conditioned R; it now says so in one line."""
    import warnings

    import leakattack.attacks.analytic as analytic
    from leakattack.errors import SettingWarning
    from leakattack.sketch import get_sketch

    monkeypatch.setattr(analytic, "DENSE_LIMIT", 0)  # the CGLS path of a large message, on a small one
    M = get_sketch("gaussian", 300, 300, seed=1)
    g = torch.randn(300, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    with pytest.warns(SettingWarning, match=r"reading g from the message stopped at a relative residual of .* after "
                                            r"10 CGLS steps"):
        Analytic(cgls_steps=10, sweeps=1)._solve_square(M, M.apply(g))
    with warnings.catch_warnings():  # a well-conditioned R solves to round-off, unwarned
        warnings.simplefilter("error")
        srht, g = get_sketch("srht", 256, 256, seed=1), g[:256]  # d a power of two: an orthogonal R
        assert torch.allclose(Analytic()._solve_square(srht, srht.apply(g)), g, atol=1e-10)


def test_a_closed_form_fit_of_its_own_model_is_not_called_an_image_that_gives_the_message(tmp_path, capsys):
    """mlp through srht b = 800 (922 unknowns of the low-rank model) fits its model to 1.8e-11 at an image that is not
    the truth, whose own message is far from y: the run said "a different image matches the message to the
    tolerance ... this is a finding in itself" and recorded unique: false."""
    out = tmp_path / "a4"
    assert cli.main(["run", "--model", "mlp", "--dataset", "digits", "--attack", "analytic", "--sketch", "srht",
                     "--sketch-dim", "800", "--no-lpips", "--quiet", "--out", str(out)]) == 0
    said = "".join(capsys.readouterr())
    m = json.loads((out / "metrics.json").read_text())
    assert m["verdict"] == "not rebuilt" and m["stop_reason"] == "tolerance" and m["final_loss"] < 1e-8
    assert m["unique"] is None and m["jacobian_note"] == "not measured: the reconstruction does not give the message"
    assert "finding in itself" not in said and "the message its own gradient sends lies" in said


def test_the_dependence_test_holds_for_near_identical_examples_the_way_a_gpu_solves_it():
    """torch's CUDA least squares (gels) assumes full rank; the examples the analytic attack reads can be
    near-identical, so off the CPU it solves by the pseudo-inverse, which agrees with the CPU's gelsy."""
    from leakattack.attacks.analytic import rank_safe_lstsq

    gen = torch.Generator().manual_seed(0)
    x = torch.rand(50, dtype=torch.float64, generator=gen)
    A = torch.stack([x, x, torch.rand(50, dtype=torch.float64, generator=gen)], 1)  # rank 2 of 3 columns
    b = (A[:, :1] * 0.3 + A[:, 2:] * 0.7)
    for cpu in (True, False):
        X = rank_safe_lstsq(A, b, cpu=cpu)
        assert float((A @ X - b).norm()) <= 1e-10 * float(b.norm())
