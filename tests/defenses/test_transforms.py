"""Defense transforms: each does what its paper says, specs parse and bad specs are one sentence."""

import re

import pytest
import torch

import defenses
from defenses import DefenseError
from defenses.clipping import clip_by_norm
from defenses.pruning import prune_smallest
from defenses.quantization import stochastic_round


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def test_clip_bounds_the_norm_and_keeps_short_vectors():
    v = torch.randn(1000, generator=gen(), dtype=torch.float64)
    assert clip_by_norm(v, 1.0).norm() == pytest.approx(1.0, rel=1e-12)
    assert torch.equal(clip_by_norm(v, 1e6), v)


def test_per_example_clip_bounds_every_row_before_summing():
    G = torch.randn(5, 100, generator=gen(), dtype=torch.float64) * 10
    step = defenses.build("per_example:C=1").steps[0]
    out = step(G, gen())
    assert torch.allclose(out, clip_by_norm(G, 1.0).sum(0)) and out.norm() <= 5 + 1e-12


def test_gaussian_noise_has_the_asked_std_and_is_seeded():
    step = defenses.build("gaussian:sigma=0.5").steps[0]
    v = torch.zeros(200_000, dtype=torch.float64)
    a, b = step(v, gen(3)), step(v, gen(3))
    assert torch.equal(a, b)
    assert a.std().item() == pytest.approx(0.5, rel=0.01)  # 200k samples: rel. s.e. 0.16 %
    assert abs(a.mean().item()) < 0.005


def test_gaussian_z_means_sigma_z_times_the_clip():
    p = defenses.build("clip:C=2,gaussian:z=1.5")
    assert p.steps[1].sigma == pytest.approx(3.0)


def test_laplace_noise_has_the_asked_scale():
    a = defenses.build("laplace:b=0.2").steps[0](torch.zeros(200_000, dtype=torch.float64), gen(1))
    assert a.abs().mean().item() == pytest.approx(0.2, rel=0.01)  # E|Laplace(0,b)| = b


def test_prune_zeroes_the_smallest_fraction():
    v = torch.arange(1.0, 11.0) * torch.tensor([1, -1] * 5)
    out = prune_smallest(v, 0.3)
    assert (out == 0).sum() == 3 and torch.equal(out[3:], v[3:])


def test_stochastic_rounding_is_unbiased_and_on_the_grid():
    v = torch.linspace(-1, 1, 7, dtype=torch.float64)
    v[3] = 0.0  # linspace's middle is 0 only to rounding
    u = torch.rand(20_000, 7, generator=gen(2), dtype=torch.float64)
    q = stochastic_round(v.expand(20_000, 7), 2, u)
    off = torch.cat([q[:, :3], q[:, 4:]], 1)  # the entries that are not 0
    assert set(torch.round(off.flatten() * 3).tolist()) <= {-3.0, -1.0, 1.0, 3.0}  # 2 bits: -1, -1/3, 1/3, 1
    assert torch.allclose(q.mean(0), v, atol=0.02)  # s.e. <= 0.5/sqrt(20000) ~ 0.0035
    assert bool((q[:, 3] == 0).all())  # an exact zero stays zero, not ±1/3 at random


def test_a_pruned_message_stays_pruned_through_the_rounding():
    """With no 0 among the grid's 2^bits points every pruned entry was sent as ±s/(2^bits - 1): none stayed 0."""
    from leakattack.channel import Channel
    from leakattack.sketch import get_sketch

    g = torch.randn(1000, generator=gen(3), dtype=torch.float64)
    pruned = Channel(get_sketch("none", 1000, 1000), "clip:C=1,prune:p=0.5").send(g, gen(5))
    y = Channel(get_sketch("none", 1000, 1000), "clip:C=1,prune:p=0.5,quantize:bits=4").send(g, gen(5))
    assert torch.equal(y == 0, pruned == 0) and int((y == 0).sum()) == 500
    s = pruned.abs().max()
    assert torch.allclose(torch.round(y[y != 0] / s * 15), y[y != 0] / s * 15)  # the rest on the grid's 16 points


def test_spec_round_trips_and_defaults_place_noise_before_and_quantize_after_the_sketch():
    p = defenses.build("clip:C=1,gaussian:sigma=1e-3,quantize:bits=4")
    assert [t.placement for t in p.steps] == ["before_sketch", "before_sketch", "after_sketch"]
    assert defenses.build(p.spec).spec == p.spec
    assert defenses.build([{"name": "clip", "C": 1}, "gaussian:z=2@after_sketch"]).spec == \
        "clip:C=1.0@before_sketch,gaussian:z=2.0@after_sketch"
    assert not defenses.build("") and not defenses.build("none")


def test_every_listed_defense_builds_from_its_name():
    for name in defenses.list_defenses():
        schema = defenses.registry._REGISTRY.get(name).schema
        params = {k: 1 if typ is int else 0.5 for k, (typ, _, _) in schema.items()}
        if name == "gaussian":
            params = {"sigma": 0.5}
        assert defenses.get_defense(name, params).name == name


@pytest.mark.parametrize("spec,needle", [
    ("blur:r=1", "unknown defense 'blur'"),
    ("gaussian:sigma=-1", "sigma must be a non-negative number, got '-1'"),
    ("clip:C=0", "C must be a positive number, got '0'"),
    ("prune:p=1", "p must be a fraction in [0, 1), got '1'"),
    ("prune:p=-0.1", "got '-0.1'"),
    ("quantize:bits=0", "bits must be an integer in [1, 32], got '0'"),
    ("quantize:bits=2.5", "got '2.5'"),
    ("clip:C", "malformed defense parameter 'C'"),
    ("clip:C=1:C=2", "defense parameter 'C' is given twice in 'clip:C=1:C=2'"),
    ("clip:C=1@sideways", "unknown defense placement '@sideways'"),
    ("clip:D=1", "no parameter 'D'"),
    ("gaussian:z=1", "needs a clip"),
    ("gaussian:sigma=1:z=1", "exactly one of"),
    ("clip:C=1,per_example:C=1", "must be the first step"),
    ("per_example:C=1@after_sketch", "cannot be placed"),
])
def test_bad_spec_is_one_sentence_naming_key_and_value(spec, needle):
    with pytest.raises(DefenseError) as err:
        defenses.build(spec)
    assert needle in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("spec", ["gaussian:sigma=0.5", "laplace:b=0.5", "quantize:bits=4", "clip:C=1,gaussian:z=1"])
def test_a_step_that_draws_refuses_to_run_without_a_generator(spec):
    """Channel.send(g) without its rng drew the noise from torch's global state (unseeded, and moved by every other
    draw in the process); now the step says in one sentence that it needs a torch.Generator."""
    from leakattack.channel import Channel
    from leakattack.errors import UserError
    from leakattack.sketch import get_sketch

    channel = Channel(get_sketch("none", 50, 50), spec)
    g = torch.ones(50, dtype=torch.float64)
    state = torch.get_rng_state()
    with pytest.raises(UserError, match="draws random numbers and was given no torch.Generator") as err:
        channel.send(g)
    assert "\n" not in str(err.value) and torch.equal(torch.get_rng_state(), state)
    assert torch.equal(channel.send(g, gen(1)), channel.send(g, gen(1)))


def test_a_step_that_draws_nothing_runs_without_a_generator():
    from leakattack.channel import Channel
    from leakattack.sketch import get_sketch

    sent = Channel(get_sketch("none", 4, 4), "clip:C=1,prune:p=0.5").send(torch.ones(4, dtype=torch.float64))
    assert sent.norm().item() == pytest.approx(1 / 2 ** 0.5)


def test_a_per_example_channel_given_one_vector_or_a_threat_of_another_type_is_one_sentence():
    """A 1-D gradient through a per_example step was clipped and summed to a number, and the sketch then refused
    'shape ()'; attacker_view('x') was an AttributeError."""
    from leakattack.channel import Channel
    from leakattack.errors import UserError
    from leakattack.observation import ThreatModel
    from leakattack.sketch import get_sketch

    channel = Channel(get_sketch("srht", 100, 50, seed=1), "per_example:C=1")
    with pytest.raises(UserError, match=r"^a channel with a per_example step \('per_example:C=1.0@before_sketch'\) "
                                        r"takes the \(B, d\) matrix of per-example gradients, one row per example, "
                                        r"got shape \(100,\)$"):
        channel.send(torch.ones(100, dtype=torch.float64), gen())
    assert channel.send(torch.ones(3, 100, dtype=torch.float64), gen()).shape == (50,)
    with pytest.raises(UserError, match=r"^attacker_view takes a ThreatModel .* got str 'x'$"):
        channel.attacker_view("x")
    assert channel.attacker_view(ThreatModel(knows_clip=True)).pipeline.spec == "per_example:C=1.0@before_sketch"


def test_a_matrix_through_a_channel_without_a_per_example_step_is_refused():
    """Rows given without a per_example step were clipped each (a whole-update clip acting per example, with no sum
    and no division by B), pruned and rounded over the whole matrix: a message of (B, b) numbers came back."""
    from leakattack.channel import Channel
    from leakattack.errors import UserError
    from leakattack.observation import ThreatModel
    from leakattack.sketch import get_sketch

    for spec in ("clip:C=1", "prune:p=0.5", "quantize:bits=4", ""):
        channel = Channel(get_sketch("srht", 100, 50, seed=1), spec)
        with pytest.raises(UserError, match=r"^a channel without a per_example step \('.*'\) takes the gradient as "
                                            r"one vector of d numbers \(the batch's mean\), got shape \(4, 100\): "
                                            r"flatten it, or put per_example:C=\.\.\. first"):
            channel.send(torch.ones(4, 100, dtype=torch.float64), gen())
        assert channel.send(torch.ones(100, dtype=torch.float64), gen()).shape == (50,)
        view = channel.attacker_view(ThreatModel(knows_clip=True, knows_prune=True))
        if view.pipeline.steps:  # the attacker's model of the steps: the same refusal
            with pytest.raises(UserError, match=r"^a channel without a per_example step"):
                view(torch.ones(4, 100, dtype=torch.float64))
        else:  # the sketch alone takes rows, as batched restarts send them
            assert view(torch.ones(4, 100, dtype=torch.float64)).shape == (4, 50)
    with pytest.raises(UserError, match="floating-point torch tensor, got a tensor of dtype int64"):  # dtype first
        Channel(get_sketch("srht", 100, 50, seed=1), "clip:C=1").send(torch.ones(4, 100, dtype=torch.int64), gen())


@pytest.mark.parametrize("g,needle", [
    (torch.arange(100), "got a tensor of dtype int64"),
    ([1.0] * 100, "got list"),
])
def test_a_gradient_that_is_not_a_float_tensor_is_refused_before_a_defense_step_reads_it(g, needle):
    """A clip read an integer tensor or a list first: torch's vector_norm error, or 'list' has no attribute 'norm'."""
    from leakattack.channel import Channel
    from leakattack.errors import UserError
    from leakattack.sketch import get_sketch

    channel = Channel(get_sketch("srht", 100, 50, seed=1), "clip:C=1,gaussian:sigma=0.1@after_sketch")
    with pytest.raises(UserError, match=f"^the channel takes the gradient as a floating-point torch tensor, {needle}"):
        channel.send(g, gen())


def test_a_generator_of_another_type_is_named_as_given():
    from leakattack.channel import Channel
    from leakattack.errors import UserError
    from leakattack.sketch import get_sketch

    channel = Channel(get_sketch("none", 4, 4), "gaussian:sigma=0.1")
    with pytest.raises(UserError, match="was given int 5, not a torch.Generator"):
        channel.send(torch.ones(4, dtype=torch.float64), 5)


@pytest.mark.parametrize("args,needle", [
    ((2.0, 0), "batch_size must be an integer of at least 1, got int 0"),
    ((1.0, 2.5), "batch_size must be an integer of at least 1, got float 2.5"),
    ((1.0, True), "batch_size must be an integer of at least 1, got bool True"),
    ((-1.0, 2), "sketch_norm must be a finite positive number, got -1.0"),
])
def test_the_sensitivity_refuses_a_batch_size_or_sketch_norm_message_privacy_refuses(args, needle):
    """Pipeline.sensitivity(2.0, 0) returned 2.0 (a batch of 0 read as no batch), 2.5 and True were taken."""
    from leakattack.errors import UserError

    pipeline = defenses.build("per_example:C=1,gaussian:z=1@after_sketch")
    with pytest.raises(UserError, match=re.escape(needle)):
        pipeline.sensitivity(*args)
    assert pipeline.sensitivity(2.0, 4) == 0.5


@pytest.mark.parametrize("p", [0.29, 0.57, 0.58, 0.5, 0.999])
def test_prune_zeroes_floor_p_n_entries_of_the_fraction_as_written(p):
    """0.29 * 100 is 28.999999999999996 as floats: 28 entries were zeroed where floor(0.29 * 100) = 29."""
    step = defenses.build(f"prune:p={p}").steps[0]
    assert int((step(torch.arange(1.0, 101.0), None) == 0).sum()) == round(p * 1000) // 10
