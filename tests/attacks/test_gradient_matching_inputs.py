"""Bad options to gradient matching are one UserError sentence naming the option at construction (never a bool()
that turns "no" into True, a TypeError from a comparison, an overflow in the seeds or a failure at reconstruct), and a
monitor that returns no mapping, or a monitor interval below 1, is one sentence too."""

import numpy as np
import pytest
import torch

import targets
from leakattack.attacks import GradientMatching, get_attack
from leakattack.channel import Channel
from leakattack.errors import UserError
from leakattack.observation import ThreatModel, observe
from leakattack.sketch import make_sketch

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("option, value", [
    ("box", "no"), ("box", 1), ("box", None), ("prune_restarts", "no"), ("prune_restarts", 0),
    ("signed", "no"), ("signed", 1),
    ("time_limit", "10"), ("time_limit", 0), ("time_limit", -5.0), ("time_limit", float("nan")),
    ("time_limit", float("inf")), ("time_limit", True),
    ("init_seed", -1), ("init_seed", 1.7), ("init_seed", 2 ** 70), ("init_seed", True), ("init_seed", "3"),
    ("stall_window", -5), ("stall_window", 2.5), ("stall_window", "500"), ("stall_window", True),
    ("stall_gain", -1), ("stall_gain", 1.0), ("stall_gain", "0.02"), ("stall_gain", float("nan")),
    ("threads", -3), ("threads", 0), ("threads", 2.0), ("threads", "auto"), ("threads", True),
    ("surrogate", "0.1"), ("surrogate", -0.1), ("schedule", "cosine-ish"), ("refine", "newton"),
])
def test_a_bad_option_is_one_sentence_naming_it_at_construction(option, value):
    with pytest.raises(UserError, match=option) as err:
        get_attack("gradient-matching", **{option: value})
    message = str(err.value)
    assert "\n" not in message and repr(value) in message


def test_signed_no_is_refused_as_no_bool_not_for_its_optimiser():
    with pytest.raises(UserError, match="signed must be True or False"):
        get_attack("gradient-matching", optimizer="lbfgs", signed="no")
    with pytest.raises(UserError, match="^signed gradients need a first-order optimiser, not lbfgs$"):
        get_attack("gradient-matching", optimizer="lbfgs", signed=True)


@pytest.mark.parametrize("options", [
    {}, dict(box=True, prune_restarts=True, restarts=2), dict(optimizer="adam", signed=True, lr=0.1),
    dict(time_limit=10), dict(time_limit=0.5), dict(time_limit=None), dict(init_seed=0), dict(init_seed=2 ** 63 + 1),
    dict(init_seed=np.int64(7)), dict(stall_window=0), dict(stall_window=np.int32(20)), dict(stall_gain=0),
    dict(stall_gain=0.5), dict(threads=None), dict(threads=1), dict(surrogate=0), dict(surrogate=0.1),
])
def test_valid_options_still_construct(options):
    attack = get_attack("gradient-matching", **options)
    for key, value in options.items():
        if key in ("box", "prune_restarts", "signed"):
            assert getattr(attack, key) is value
    assert isinstance(attack.init_seed, int) and isinstance(attack.stall_window, int)


def _obs():
    shape = (1, 8, 8)
    victim = targets.get_model("lenet", in_shape=shape, seed=0).to(dtype=torch.float64)
    x = torch.rand((1, *shape), generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    sketch = make_sketch("srht", victim.d, victim.d // 2, seed=1)
    return observe(victim, x, torch.tensor([3]), Channel(sketch, ""), ThreatModel(knows_labels=True))


@pytest.fixture(scope="module")
def obs():
    return _obs()


def _attack():
    return GradientMatching(optimizer="adam", lr=0.05, iterations=3, labels="given", refine="none")


@pytest.mark.parametrize("returned", [None, 21.5, [("psnr", 21.5)], "psnr"])
def test_a_monitor_returning_no_mapping_is_one_sentence(obs, returned):
    with pytest.raises(UserError, match="a monitor must return a mapping of names to numbers") as err:
        _attack().reconstruct(obs, monitor=lambda step, x: returned, monitor_every=1)
    assert type(returned).__name__ in str(err.value)


@pytest.mark.parametrize("every", [0, -1, 1.5, "10", True])
def test_a_monitor_interval_below_one_is_one_sentence(obs, every):
    with pytest.raises(UserError, match="monitor_every must be an integer of at least 1"):
        _attack().reconstruct(obs, monitor=lambda step, x: {}, monitor_every=every)


def test_a_monitor_that_is_no_function_is_one_sentence(obs):
    with pytest.raises(UserError, match="monitor must be a function"):
        _attack().reconstruct(obs, monitor={"psnr": 1.0})


def test_a_valid_monitor_still_records_its_rows(obs):
    out = _attack().reconstruct(obs, monitor=lambda step, x: {"norm": float(x.norm())}, monitor_every=1)
    assert [row["step"] for row in out.extra] == [0, 1, 2, 3]
    assert all(isinstance(row["norm"], float) for row in out.extra)
    assert not _attack().reconstruct(obs, monitor=None, monitor_every=0).extra  # no monitor: the interval is unused


def test_an_lbfgs_history_larger_than_the_memory_available_is_warned_of_before_the_steps(obs, monkeypatch):
    """The history holds 2 x 100 rows of every start's unknowns; where that exceeds the RAM available the run would be
    killed part way without a word, so it is said first (and Adam, which keeps two copies, is not warned of)."""
    import warnings

    from leakattack.errors import SettingWarning
    from leakattack.sketch import gaussian

    n = 1 * 8 * 8
    need = 2 * 100 * 2 * n * 8  # two starts, float64
    monkeypatch.setattr(gaussian, "available_memory_bytes", lambda: need - 1)
    lbfgs = GradientMatching(optimizer="lbfgs", iterations=2, restarts=2, labels="given", refine="none")
    said = r"^L-BFGS keeps its last 100 steps for each of 2 start\(s\) of 64 unknowns, 0\.000205 GB in float64, more "
    with pytest.warns(SettingWarning, match=said + r"than the 0\.000205 GB of memory available"):
        lbfgs.reconstruct(obs)
    monkeypatch.setattr(gaussian, "available_memory_bytes", lambda: need)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SettingWarning)
        lbfgs.reconstruct(obs)
        monkeypatch.setattr(gaussian, "available_memory_bytes", lambda: 0)
        _attack().reconstruct(obs)
