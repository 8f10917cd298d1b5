"""--threads auto: every core for deep victims, one thread for small ones; a given count always wins."""

import torch

from leakattack.config import RunConfig
from leakattack.config.constraints import available_cores
from leakattack.config.params import DEEP_WEIGHTS, resolve_threads
from leakattack.experiment import prepare


def test_auto_gives_every_core_to_deep_victims_and_one_thread_to_small_ones():
    assert resolve_threads(None, DEEP_WEIGHTS) == available_cores()
    assert resolve_threads(None, DEEP_WEIGHTS - 1) == 1
    assert resolve_threads(None) == 1  # before the victim's size is known
    assert resolve_threads(2, 10) == 2 and resolve_threads(1, 10 ** 8) == 1


def test_prepare_sets_the_resolved_count_and_a_given_one(monkeypatch):
    before = torch.get_num_threads()
    try:
        assert RunConfig().threads is None
        prepare(RunConfig(model="lenet", dataset="digits", iterations=1))
        assert torch.get_num_threads() == 1
        p = prepare(RunConfig(model="resnet20", sketch="none", iterations=1))
        assert p.victim.d >= DEEP_WEIGHTS and torch.get_num_threads() == available_cores()
        prepare(RunConfig(model="resnet20", sketch="none", iterations=1, threads=1))
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
