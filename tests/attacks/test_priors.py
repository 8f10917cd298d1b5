"""Image priors: the BatchNorm statistics prior, ``--prior NAME[:WEIGHT]`` parsing, refusals, tv through --prior."""

import pytest
import torch

import targets
from leakattack import cli
from leakattack.attacks import GradientMatching, get_prior, list_priors, parse_prior
from leakattack.attacks.priors import BatchNormPrior
from leakattack.channel import Channel
from leakattack.config import ConfigError, RunConfig
from leakattack.errors import UserError
from leakattack.experiment import run_attack
from leakattack.observation import ThreatModel, observe
from leakattack.sketch import make_sketch
from leakattack.sweep import load_plan
from targets.victim import batchnorm_layers


def _observation(model="resnet20", shape=(3, 32, 32), bn="train", **kw):
    victim = targets.get_model(model, in_shape=shape, seed=0, bn_mode=bn, **kw)
    x = torch.rand((2, *shape), generator=torch.Generator().manual_seed(5), dtype=victim.dtype)
    labels = torch.tensor([1, 3])
    obs = observe(victim, x, labels, Channel(make_sketch("none", victim.d, victim.d, seed=1)), ThreatModel())
    return victim, obs, x


def _inputs_moments(victim, x):
    """Per-channel mean and biased variance of every BatchNorm layer's input, by hand (own hooks, own formula)."""
    layers = batchnorm_layers(victim.model)
    seen = {}

    def record(k):
        def hook(module, inputs):
            a = inputs[0].transpose(0, 1).reshape(inputs[0].shape[1], -1)
            seen[k] = (a.mean(1), ((a - a.mean(1, keepdim=True)) ** 2).mean(1))
        return hook

    handles = [m.register_forward_pre_hook(record(k)) for k, m in enumerate(layers)]
    victim.model(x)
    for h in handles:
        h.remove()
    return [seen[k] for k in range(len(layers))]


def _grant_statistics_of(victim, x):
    """Set every BatchNorm layer's running statistics to the batch statistics of x at its input."""
    with torch.no_grad():  # train mode: each layer normalises with the batch, so one pass fixes every input
        moments = _inputs_moments(victim, x)
    for (mean, var), m in zip(moments, batchnorm_layers(victim.model)):
        m.running_mean.copy_(mean)
        m.running_var.copy_(var)


def test_bn_prior_is_zero_at_the_granted_statistics_and_positive_elsewhere():
    victim, obs, x = _observation()
    _grant_statistics_of(victim, x)
    prior = get_prior("bn", 1.0, obs=obs)
    assert isinstance(prior, BatchNormPrior) and len(prior.layers) == len(batchnorm_layers(victim.model)) > 10
    other = torch.rand(x.shape, generator=torch.Generator().manual_seed(9), dtype=x.dtype)
    value = prior(other).item()
    assert value > 1e-3
    assert prior(x).item() < 1e-3 * value  # zero up to the float32 round-off of the norms
    assert get_prior("bn", 0.5, obs=obs)(other).item() == pytest.approx(0.5 * value, rel=1e-6)


def test_bn_prior_matches_the_formula_and_its_gradient_reaches_x():
    victim, obs, x = _observation()
    prior = get_prior("bn", 1.0, obs=obs)
    xh = (x * 0.5 + 0.2).requires_grad_(True)
    by_hand = sum((mu - m.running_mean).pow(2).sum().sqrt() + (v - m.running_var).pow(2).sum().sqrt()
                  for (mu, v), m in zip(_inputs_moments(victim, xh), batchnorm_layers(victim.model)))
    value = prior(xh)
    assert value.item() == pytest.approx(by_hand.item(), rel=1e-5)
    g, = torch.autograd.grad(value, xh)
    assert torch.isfinite(g).all() and g.abs().sum() > 0
    # the extra forward pass leaves the model as it was: no running statistics move, no hook stays
    before = [m.running_mean.clone() for m in prior.layers]
    prior(xh)
    assert all(torch.equal(b, m.running_mean) for b, m in zip(before, prior.layers))
    assert all(not m._forward_pre_hooks for m in prior.layers)


def test_granted_client_statistics_are_the_batch_statistics_of_the_client_data():
    victim = targets.get_model("resnet20", in_shape=(3, 32, 32), seed=0, bn_mode="eval")
    x = torch.rand((2, 3, 32, 32), generator=torch.Generator().manual_seed(5), dtype=victim.dtype)
    channel = Channel(make_sketch("none", victim.d, victim.d, seed=1))
    obs = observe(victim, x, torch.tensor([1, 3]), channel, ThreatModel(knows_bn_stats=True))
    by_hand = _inputs_moments(victim, x)
    assert len(obs.bn_stats) == len(by_hand) > 10
    for (m, v), (hm, hv) in zip(obs.bn_stats, by_hand):
        assert torch.allclose(m, hm, atol=1e-6) and torch.allclose(v, hv, atol=1e-6)
    prior = get_prior("bn", 1.0, obs=obs)
    assert prior(x).item() < 1e-10  # zero at the client's data although the running statistics differ
    assert get_prior("bn", 1.0, obs=observe(victim, x, torch.tensor([1, 3]), channel, ThreatModel()))(x).item() > 1e-3
    # not granted, or no BatchNorm: nothing is handed to the attacker
    assert _observation()[1].bn_stats is None
    lenet = targets.get_model("lenet", in_shape=(3, 32, 32), seed=0)
    assert observe(lenet, x.float(), torch.tensor([1, 3]), Channel(make_sketch("none", lenet.d, lenet.d)),
                   ThreatModel(knows_bn_stats=True)).bn_stats is None


def test_bn_stats_client_reaches_the_threat_model_and_bad_values_exit_2(tmp_path, capsys):
    from leakattack.cases import threat_of
    assert threat_of(RunConfig(bn_stats="client")).knows_bn_stats
    assert not threat_of(RunConfig()).knows_bn_stats
    rc = cli.main(["run", "--bn-stats", "sometimes", "--out", str(tmp_path / "r"), "--quiet"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and "choose one of: running, client" in lines[0]
    assert not (tmp_path / "r").exists()


def test_bn_prior_lowers_its_own_value_under_descent():
    victim, obs, x = _observation(bn="eval")
    prior = get_prior("bn", 1.0, obs=obs)
    xh = torch.rand(x.shape, generator=torch.Generator().manual_seed(3), dtype=x.dtype).requires_grad_(True)
    start = prior(xh).item()
    opt = torch.optim.Adam([xh], lr=0.05)
    for _ in range(15):
        opt.zero_grad()
        prior(xh).backward()
        opt.step()
    assert prior(xh).item() < 0.7 * start


def test_parse_prior_reads_name_and_weight_and_refuses_bad_ones():
    assert set(list_priors()) >= {"tv", "bn"}
    assert parse_prior("bn:1e-2") == ("bn", 0.01)
    assert parse_prior("tv:0") == ("tv", 0.0)
    assert parse_prior("bn")[0] == "bn" and parse_prior("bn")[1] > 0
    for bad, needle in [("gan:1", "unknown prior 'gan'"), ("bn:x", "non-negative"), ("bn:-1", "non-negative"),
                        ("bn:inf", "non-negative"), ("bn:", "non-negative")]:
        with pytest.raises(UserError, match=needle):
            parse_prior(bad)


def test_prior_settings_validate_and_reach_the_attack():
    cfg = RunConfig(model="resnet20", priors=["bn:0.01", "tv:0.5", "bn:1e-3"]).validate()
    assert cfg.derived().tv == 0.5 and cfg.other_priors() == {"bn": 1e-3}
    assert cfg.resolved().priors == ["bn:0.001"] and cfg.resolved().tv == 0.5
    for bad in (["gan"], ["bn:-2"], "bn:1", [1.0]):
        with pytest.raises(ConfigError):
            RunConfig(priors=bad).validate()


@pytest.mark.parametrize("args,needle", [
    (["--prior", "gan:1"], "unknown prior 'gan'; choose one of"),
    (["--prior", "bn:lots"], "the weight of prior 'bn' must be a non-negative number"),
    (["--prior", "bn:1e-2"], "needs BatchNorm layers, and model 'lenet' has none"),
])
def test_bad_priors_give_one_line_and_exit_2(tmp_path, capsys, args, needle):
    out = tmp_path / "run"
    rc = cli.main(["run", "--model", "lenet", "--iterations", "2", *args, "--out", str(out), "--quiet"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and needle in lines[0], lines
    assert not out.exists()


def test_attack_refuses_bn_prior_on_a_victim_without_batchnorm():
    victim = targets.get_model("lenet", in_shape=(1, 8, 8), seed=0)
    x = torch.rand((1, 1, 8, 8), generator=torch.Generator().manual_seed(5))
    obs = observe(victim, x, torch.tensor([3]), Channel(make_sketch("none", victim.d, victim.d, seed=1)),
                  ThreatModel())
    reason = GradientMatching(labels="idlg", priors={"bn": 1.0}).supports(obs)
    assert reason is not None and "BatchNorm" in reason
    assert GradientMatching(labels="idlg", priors={"bn": 0.0}).supports(obs) is None  # weight 0: off


def test_prior_tv_equals_the_tv_setting(tmp_path):
    base = dict(model="lenet", sketch="countsketch", dataset="digits", iterations=12, optimizer="adam", lr=0.05)
    a, _ = run_attack(RunConfig(**base, tv=0.3), out=tmp_path / "a", with_lpips=False)
    b, _ = run_attack(RunConfig(**base, tv=1e-6, priors=["tv:0.3"]), out=tmp_path / "b", with_lpips=False)
    c, _ = run_attack(RunConfig(**base, tv=0.0), out=tmp_path / "c", with_lpips=False)
    assert a.final_loss == b.final_loss and a.psnr == b.psnr
    assert c.final_loss != a.final_loss


def test_sweep_files_set_priors(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text('[base]\nmodel = "resnet20"\npriors = ["bn:0.01"]\n[grid]\ntv = [0.0, 1e-4]\n'
                    'seed = [0]\n')
    plan = load_plan(path, check=False)
    assert [pt["params"]["priors"] for pt in plan.points] == [["bn:0.01"], ["bn:0.01"]]
    path.write_text('[base]\nmodel = "resnet20"\n[grid]\npriors = [["bn:2"], ["gan:1"]]\n')
    with pytest.raises(ConfigError, match="unknown prior 'gan'"):
        load_plan(path, check=False)


class _SpareBN(torch.nn.Module):
    """A BatchNorm layer the forward pass uses and one it never calls."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv, self.bn, self.spare = torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.BatchNorm2d(4)
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x):
        return self.fc(self.bn(self.conv(x)).mean((2, 3)))


@pytest.mark.parametrize("client", [False, True])
def test_bn_prior_reads_the_layers_a_forward_pass_calls_and_skips_the_others(client):
    victim = targets.Victim.from_module(_SpareBN(), input_shape=(3, 8, 8), num_classes=3, bn_mode="eval")
    x = torch.rand(2, 3, 8, 8, generator=torch.Generator().manual_seed(1))
    obs = observe(victim, x, torch.tensor([0, 1]), Channel(make_sketch("none", victim.d, victim.d)),
                  ThreatModel(knows_labels=True, knows_bn_stats=client))
    prior = get_prior("bn", 1.0, obs=obs)
    dummy = torch.rand(2, 3, 8, 8, generator=torch.Generator().manual_seed(2), requires_grad=True)
    value = prior(dummy)
    net = victim.model
    a = net.conv(dummy)
    mean, var = a.mean((0, 2, 3)), a.var((0, 2, 3), unbiased=False)
    if client:
        c = net.conv(x)
        target = (c.mean((0, 2, 3)), c.var((0, 2, 3), unbiased=False))
    else:
        target = (net.bn.running_mean, net.bn.running_var)
    expected = (mean - target[0]).norm() + (var - target[1]).norm()
    assert torch.allclose(value, expected, rtol=1e-5)
    (grad,) = torch.autograd.grad(value, dummy)
    assert float(grad.norm()) > 0
    result = GradientMatching(optimizer="adam", iterations=2, objective="cosine", priors={"bn": 0.01},
                              labels="given").reconstruct(obs)
    assert result.x.shape == x.shape


def test_tv_refuses_inputs_of_one_axis_and_reads_an_image_one_pixel_high():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(12, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    victim = targets.Victim.from_module(net, input_shape=(12,), num_classes=3)
    x = torch.rand(2, 12, generator=torch.Generator().manual_seed(0))
    obs = observe(victim, x, torch.tensor([0, 1]), Channel(make_sketch("none", victim.d, victim.d)),
                  ThreatModel(knows_labels=True))
    with pytest.raises(UserError, match=r"takes inputs of shape \(12,\): give TV no weight"):
        GradientMatching(optimizer="adam", iterations=2, priors={"tv": 0.02}, labels="given").reconstruct(obs)
    assert GradientMatching(optimizer="adam", iterations=2, priors={"tv": 0.0},
                            labels="given").reconstruct(obs).x.shape == x.shape
    row = torch.tensor([[[[0.0, 1.0, 1.0, 3.0]]]])  # 1 x 4 pixels: the horizontal term alone, (1 + 0 + 2) / 3
    assert float(get_prior("tv", 1.0)(row)) == 1.0
