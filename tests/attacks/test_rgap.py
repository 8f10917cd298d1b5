"""R-GAP, the recursive gradient attack: exact recovery through a chain of convolutions, refusals in one sentence."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import targets
from leakattack import cli, metrics
from leakattack.attacks import AttackError, Rgap, get_attack, list_attacks
from leakattack.attacks.rgap import (
    NOISE_MARGIN,
    SOFTPLUS_MIN_THRESHOLD,
    SURPLUS_ROWS,
    _inverse,
    _solve,
    _standard_errors,
    _weighted,
    softplus_jump,
)
from leakattack.channel import Channel
from leakattack.data import get_dataset
from leakattack.observation import ThreatModel, observe
from leakattack.sketch import make_sketch

pytestmark = pytest.mark.usefixtures("one_thread")  # the attack runs on one thread


def _example(dataset, index=0, size=16, count=1):
    data = get_dataset(dataset)
    x = F.adaptive_avg_pool2d(data.images[index:index + count].double(), size)
    return x, data.labels[index:index + count]


def _observe(victim, x, labels, kind="none", b=None):
    victim = victim.to(dtype=torch.float64)
    return observe(victim, x, labels, Channel(make_sketch(kind, victim.d, b or victim.d, seed=1)))


def _lenet(x, **params):
    return targets.get_model("lenet", in_shape=tuple(x.shape[1:]), seed=0, **params)


def _psnr(result, x):
    return float(metrics.psnr(result.x.clamp(0, 1), x).mean())


def test_rgap_is_registered_and_listed(capsys):
    assert "rgap" in list_attacks() and isinstance(get_attack("rgap"), Rgap)
    assert cli.main(["list"]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("attacks:"))
    assert "rgap" in line.replace(",", " ").split()


@pytest.mark.parametrize("dataset,act", [("photos", "sigmoid"), ("digits", "sigmoid"), ("photos", "tanh")])
def test_lenet_gives_the_example_back_from_its_gradient(dataset, act):
    # three convolutions (two of stride 2) inverted layer by layer from the head down
    x, labels = _example(dataset, index=3)
    obs = _observe(_lenet(x, act=act), x, labels)
    result = get_attack("rgap").reconstruct(obs)
    assert result.stop_reason == "tolerance", result.message
    assert _psnr(result, x) > 100  # float64: exact up to round-off (a wrong delta or layer order gives < 20 dB)
    assert result.labels.tolist() == labels.tolist()
    assert len(result.losses) == 4 and max(result.losses) < 1e-8  # the head, then conv3, conv2, conv1


def _small_chain(bias=True):
    """A chain whose d = 512 is a power of two: a square SRHT at b = d is then orthogonal."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 4, 5, stride=2, padding=2, bias=bias), nn.Sigmoid(),
                          nn.Conv2d(4, 4, 3, padding=1), nn.LeakyReLU(0.2), nn.Flatten(), nn.Linear(64, 4))
    return targets.Victim.from_module(model, input_shape=(1, 8, 8), num_classes=4, name="chain")


def test_a_square_srht_is_solved_for_g_then_inverted():
    x, _ = _example("digits", index=5, size=8)
    labels = torch.tensor([2])
    victim = _small_chain()
    assert victim.d == 512
    obs = _observe(victim, x, labels, "srht")
    result = get_attack("rgap").reconstruct(obs)
    assert result.stop_reason == "tolerance" and _psnr(result, x) > 100
    assert result.labels.tolist() == [2]


def test_granted_labels_are_returned_and_recovered_ones_follow_the_sign_rule():
    x, _ = _example("digits", index=5, size=8)
    victim = _small_chain().to(dtype=torch.float64)
    channel = Channel(make_sketch("none", victim.d, victim.d))
    granted = observe(victim, x, torch.tensor([3]), channel, ThreatModel(knows_labels=True))
    assert get_attack("rgap").reconstruct(granted).labels.tolist() == [3]
    assert get_attack("rgap").reconstruct(observe(victim, x, torch.tensor([1]), channel)).labels.tolist() == [1]


def test_a_square_srht_with_zero_padding_leaves_g_undetermined_and_says_so():
    # lenet's d is no power of two: the square SRHT pads g and its b x d block has a null space
    x, labels = _example("digits", index=3, size=8)
    obs = _observe(_lenet(x), x, labels, "srht")
    result = get_attack("rgap").reconstruct(obs)
    assert result.stop_reason == "stalled" and "inconsistent" in result.message and _psnr(result, x) < 30


def _gradient(victim, x, labels):
    return torch.cat([g.flatten() for g in torch.autograd.grad(
        F.cross_entropy(victim.model(x), labels), [p for p in victim.model.parameters()])])


def test_an_input_layer_of_too_few_equations_leaves_a_family_and_the_smoothest_member_is_taken():
    # one 3x3 filter of stride 2 on a 3x8x8 input: 16 forward and 27 gradient equations for 192 unknowns, and
    # one dependency among them (<W, dF/dW> = <delta, z - b> for every layer): rank 42, a family of 150 inputs
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 1, 3, stride=2, padding=1), nn.Tanh(), nn.Flatten(), nn.Linear(16, 3))
    victim = targets.Victim.from_module(model, input_shape=(3, 8, 8), num_classes=3, name="narrow")
    x, _ = _example("photos", index=1, size=8)
    labels = torch.tensor([1])
    obs = _observe(victim, x, labels)
    result = get_attack("rgap").reconstruct(obs)
    assert result.stop_reason == "tolerance" and result.input_rank == 42, result.message
    assert "rank 42 of 192 unknowns, so a 150-dimensional family" in result.message
    # every member of the family gives the message's gradient: the one taken does, inside the box up to the penalty
    g, g_hat = _gradient(obs.victim, x, labels), _gradient(obs.victim, result.x, labels)
    assert float((g_hat - g).norm() / g.norm()) < 1e-8
    assert float(result.x.min()) > -1e-3 and float(result.x.max()) < 1 + 1e-3
    assert float((result.x - x).abs().max()) > 1e-3  # and it is not the truth: the message does not determine it


def _relu_chain(hidden_out):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, hidden_out, 3, padding=1),
                          nn.ReLU(), nn.Flatten(), nn.Linear(hidden_out * 64, 4))
    return targets.Victim.from_module(model, input_shape=(3, 8, 8), num_classes=4, name="relu-chain")


def test_a_relu_chain_is_inverted_where_its_units_are_active():
    # conv2 (16 -> 12 channels) holds its 1024 inputs in 1728 gradient rows and its active units' forward
    # rows; conv1's 432 gradient rows and its active units' forward rows hold the 192 pixels: exact
    x, _ = _example("photos", index=2, size=8)
    result = get_attack("rgap").reconstruct(_observe(_relu_chain(12), x, torch.tensor([3])))
    assert result.stop_reason == "tolerance" and result.input_rank == 192, result.message
    assert _psnr(result, x) > 100 and result.labels.tolist() == [3]


def test_a_rank_deficient_hidden_layer_is_reported_with_its_rank():
    # conv2 with one output channel: 144 gradient rows and at most 64 forward rows for its 1024 inputs
    x, _ = _example("photos", index=2, size=8)
    result = get_attack("rgap").reconstruct(_observe(_relu_chain(1), x, torch.tensor([3])))
    assert result.stop_reason == "stalled" and result.input_rank is not None
    assert "layer 2: rank" in result.message and "of 1024 unknowns" in result.message
    assert "minimum-norm" in result.message
    # that layer left the input layer no equation: its residual of 0 fits nothing, which the message says
    assert result.input_rank == 0 and result.final_loss == 0
    assert ("the input layer's system holds no equation in the input (rank 0 of 192 unknowns), so its residual of 0 "
            "fits nothing") in result.message


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_an_inconsistent_relu_chain_in_float32_names_the_precision_as_a_cause(dtype):
    x, _ = _example("photos", index=1, size=8)
    victim = _relu_chain(12).to(dtype=dtype)
    obs = observe(victim, x.to(dtype), torch.tensor([3]), Channel(make_sketch("none", victim.d, victim.d)))
    gen = torch.Generator().manual_seed(0)
    obs.y.add_(1e-3 * obs.y.norm() / victim.d ** 0.5 * torch.randn(obs.y.shape, generator=gen, dtype=dtype))
    result = get_attack("rgap").reconstruct(obs)
    assert result.stop_reason == "stalled" and "inconsistent" in result.message
    assert ("--dtype float64" in result.message) == (dtype == torch.float32)


def test_standard_errors_follow_the_noise_of_the_right_hand_side():
    gen = torch.Generator().manual_seed(0)
    A = torch.randn(400, 20, generator=gen, dtype=torch.float64) * torch.logspace(0, -3, 20, dtype=torch.float64)
    truth, sigma = torch.randn(20, generator=gen, dtype=torch.float64), 1e-6
    r = A @ truth + sigma * torch.randn(400, generator=gen, dtype=torch.float64)
    weight = A.norm(dim=1)  # the rows keep their scale: the noise stays sigma per row
    a, rank, _ = _solve(*_weighted(A, r, weight))
    se = _standard_errors(*_weighted(A, r, weight), a)
    expected = sigma * torch.linalg.inv(A.T @ A).diagonal().sqrt()
    assert rank == 20 and se is not None and torch.all((se / expected - 1).abs() < 0.15)
    assert (((a - truth) / se).abs().max()) < 5  # 20 errors of about one standard error each
    few = SURPLUS_ROWS - 1  # too few rows beyond the unknowns to tell the noise
    assert _standard_errors(*_weighted(A[:20 + few], r[:20 + few], weight[:20 + few]), a) is None
    deficient = torch.cat([A[:, :19], A[:, :1]], 1)  # two equal columns
    assert _standard_errors(*_weighted(deficient, r, weight), a) is None


def test_a_relu_unit_is_active_by_its_own_standard_error_where_one_is_given():
    # a unit at 3e-4 beside another unit's round-off of -3e-4: the layer-wide margin calls it inactive, its own
    # standard error of 2e-5 (15 of them) active; the round-off itself stays inactive under either rule
    a = torch.tensor([1.0, 3e-4, -3e-4, 2e-5], dtype=torch.float64)
    _, slope = _inverse(nn.ReLU(), a, 1e-7)
    assert slope.tolist() == [1, 0, 0, 0] and NOISE_MARGIN * 3e-4 > 3e-4
    _, slope = _inverse(nn.ReLU(), a, 1e-7, se=torch.tensor([1e-6, 2e-5, 1e-4, 1e-5], dtype=torch.float64))
    assert slope.tolist() == [1, 1, 0, 0]


@pytest.mark.slow
def test_a_relu_lenet_read_in_float32_is_rebuilt_or_its_round_off_is_named():
    # photo 1: one conv1 unit at 3.7e-4 sits inside the 5.7e-4 round-off that float32's message leaves in other units;
    # by the layer-wide margin it was inactive (stalled, 9 dB), by its own standard errors (7.5 of them) it is active,
    # and the photo is rebuilt (float64: 36.0 dB). That round-off comes from the CPU's float32 kernels: on one AVX2
    # AMD EPYC it left conv1's system inconsistent (relative residual 0.0019) with the same code and packages. Where
    # it does, the attack must stop and name float32's round-off and --dtype float64, not report a rebuild.
    x, labels = _example("photos", index=1, size=32)
    victim = _lenet(x, act="relu")
    obs = observe(victim, x.float(), labels, Channel(make_sketch("none", victim.d, victim.d)))
    result = get_attack("rgap").reconstruct(obs)
    if result.stop_reason == "tolerance":
        assert _psnr(result, x.float()) > 30, result.message
    else:
        assert "float32's round-off" in result.message and "--dtype float64" in result.message, result.message


@pytest.mark.slow
def test_a_relu_lenet_leaves_a_family_whose_smoothest_member_is_the_photo():
    # 900 gradient rows and 1772 active units' forward rows for 3072 pixels: rank 2639 (measured), and the least
    # total variation over the family, inside the box and the 1300 inactive units, gives the photo at 40 dB
    x, labels = _example("photos", index=0, size=32)
    result = get_attack("rgap").reconstruct(_observe(_lenet(x, act="relu"), x, labels))
    assert result.stop_reason == "tolerance", result.message
    assert 2500 < result.input_rank < 3072 and "dimensional family" in result.message
    assert _psnr(result, x) > 30  # the minimum-norm member: 11.7 dB


def test_the_svd_solve_used_off_the_cpu_agrees_with_gelsd():
    gen = torch.Generator().manual_seed(0)
    A = torch.randn(60, 40, generator=gen, dtype=torch.float64)
    A[:, 7] = A[:, 3] - 2 * A[:, 5]  # rank 39
    r, weight = torch.randn(60, generator=gen, dtype=torch.float64), torch.rand(60, generator=gen, dtype=torch.float64)
    a, rank, residual = _solve(*_weighted(A, r, weight))
    b, rank_svd, residual_svd = _solve(*_weighted(A, r, weight), svd=True)
    assert rank == rank_svd == 39 and abs(residual - residual_svd) < 1e-12 and residual > 0.1
    assert float((a - b).norm()) < 1e-10 * float(a.norm())


def _reason(obs):
    reason = Rgap().supports(obs)
    assert reason is not None and reason.count(". ") == 0 and "gradient-matching" in reason
    with pytest.raises(AttackError, match="cannot run here"):
        Rgap().reconstruct(obs)
    return reason


def test_refusals_name_what_is_not_supported_in_one_sentence():
    x, labels = _example("digits", size=8)
    assert Rgap().supports(_observe(_lenet(x, act="relu"), x, labels)) is None
    assert "a MaxPool2d (1), which is not an nn.Conv2d" in _reason(_observe(targets.Victim.from_module(
        nn.Sequential(nn.Conv2d(1, 2, 3, padding=1), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(32, 3)),
        input_shape=(1, 8, 8), num_classes=3, name="pooled"), x, labels))
    # an AvgPool2d was "a AvgPool2d"
    assert "an AvgPool2d (1), which is not an nn.Conv2d" in _reason(_observe(targets.Victim.from_module(
        nn.Sequential(nn.Conv2d(1, 2, 3, padding=1), nn.AvgPool2d(2), nn.Flatten(), nn.Linear(32, 3)),
        input_shape=(1, 8, 8), num_classes=3, name="pooled"), x, labels))
    xb, lb = _example("digits", size=8, count=2)
    assert "batch of 2" in _reason(_observe(_lenet(xb), xb, lb))
    assert "BatchNorm2d" in _reason(_observe(targets.get_model("resnet20", in_shape=(1, 8, 8), seed=0), x, labels))
    lenet = _lenet(x)
    assert "b = 100 numbers for d = " in _reason(_observe(lenet, x, labels, "srht", b=100))


def test_a_softplus_that_jumps_where_it_turns_linear_is_refused():
    """Softplus(threshold=1) jumps by 0.31 where it turns linear, so that outputs just above 1 come from two inputs;
    R-GAP took each for the linear branch's and ended "rebuilt" at 33.6 dB."""
    x, labels = _example("digits", size=8)

    def victim(threshold):
        net = nn.Sequential(nn.Conv2d(1, 2, 3, padding=1), nn.Softplus(threshold=threshold), nn.Flatten(),
                            nn.Linear(128, 3))
        return targets.Victim.from_module(net, input_shape=(1, 8, 8), num_classes=3, name="soft")

    reason = _reason(_observe(victim(1.0), x, labels))
    assert "softplus of threshold 1 (1), which jumps by 0.31 where it turns linear" in reason
    assert Rgap().supports(_observe(victim(20.0), x, labels)) is None  # torch's default: a jump of 2e-9
    assert Rgap().supports(_observe(victim(SOFTPLUS_MIN_THRESHOLD), x, labels)) is None
    assert "softplus" in _reason(_observe(victim(SOFTPLUS_MIN_THRESHOLD - 0.1), x, labels))
    assert "softplus of threshold -1000" in _reason(_observe(victim(-1000.0), x, labels))  # no overflow
    # the bound: the jump below a float32 round-off of the output at the threshold, from SOFTPLUS_MIN_THRESHOLD up
    eps = torch.finfo(torch.float32).eps
    for t, below in ((SOFTPLUS_MIN_THRESHOLD, True), (SOFTPLUS_MIN_THRESHOLD - 0.1, False)):
        assert (softplus_jump(nn.Softplus(beta=2.0, threshold=t)) < eps * t / 2.0) is below


def test_an_operation_between_modules_is_refused():
    class Residual(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.act, self.fc = nn.Conv2d(1, 1, 3, padding=1), nn.Sigmoid(), nn.Linear(64, 3)

        def forward(self, x):
            return self.fc((self.act(self.conv(x)) + x).flatten(1))

    victim = targets.Victim.from_module(Residual(), input_shape=(1, 8, 8), num_classes=3, name="residual")
    x, _ = _example("digits", size=8)
    assert "residual connection" in _reason(_observe(victim, x, torch.tensor([0])))


@pytest.mark.parametrize("flags, said", [
    (["--model", "resnet20", "--dataset", "digits"], ["BatchNorm2d"]),
    # LeNet at 224 px: conv1's system would be 151,428 x 150,528 numbers (its identity alone 181 GB in float64)
    (["--model", "lenet", "--image-size", "224"],
     ["conv1 would hold 151428 x 150528", "use gradient-matching or a smaller --image-size"]),
])
def test_the_command_line_refuses_with_one_line_and_exit_2(flags, said, tmp_path, capsys):
    out = tmp_path / "run"
    rc = cli.main(["run", *flags, "--attack", "rgap", "--sketch", "none", "--no-lpips", "--quiet", "--out", str(out)])
    lines = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and all(s in lines[0] for s in said), lines
    assert not out.exists()


def test_a_too_large_first_linear_layer_is_pointed_at_the_analytic_attack():
    # mlp on photos: fc1's 196,672 gradient and output rows for 3,072 pixels (R-GAP took 85 s and 15 GB here); the
    # analytic attack divides the same block in well under a second
    x, labels = _example("photos", index=0, size=32)
    victim = targets.get_model("mlp", in_shape=tuple(x.shape[1:]), seed=0)
    refusal = get_attack("rgap").supports(_observe(victim, x, labels))
    assert refusal is not None and "fc1 would hold 196672 x 3072" in refusal and "use --attack analytic" in refusal


@pytest.mark.parametrize("sketch", ["none", "srht"])
def test_a_failed_gradient_matching_run_names_the_closed_form_that_accepts_its_message(sketch, tmp_path, capsys):
    import json

    out = tmp_path / "run"
    rc = cli.main(["run", "--model", "lenet", "--model-param", "act=relu", "--dataset", "digits", "--sketch", sketch,
                   "--iterations", "3", "--no-lpips", "--quiet", "--out", str(out)])
    err = capsys.readouterr().err
    stored = json.loads((out / "metrics.json").read_text())
    assert rc == 0 and stored["verdict"] == "not rebuilt"
    if sketch == "none":  # the whole gradient: R-GAP reads it
        assert stored["closed_forms"] == ["rgap"]
        assert "note: a closed-form attack also accepts this message: --attack rgap" in err
    else:  # b = d/2: no closed form accepts it
        assert "closed_forms" not in stored and "closed-form" not in err


def test_experiment_passes_rgap_no_options_of_other_attacks():
    from leakattack.config import RunConfig
    from leakattack.experiment import attack_of

    assert isinstance(attack_of(RunConfig(model="lenet", attack="rgap")), Rgap)
