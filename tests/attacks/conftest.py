"""Attack tests run on one torch thread, as the attack does by default (--threads 1): small tensor
operations slow down badly when two threads share busy cores."""

import pytest
import torch


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
