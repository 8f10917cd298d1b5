"""Seed streams: every random object of leakattack draws from one of these.

Seeds are data (a run's config.json reproduces its numbers), so each consumer
derives its own independent stream from a master seed and a fixed tag instead of
sharing global state.  The tags are named here once.  A leaf module.
"""

from __future__ import annotations

import contextlib
import numbers
from typing import Iterator

import numpy as np
import torch

from .constraints import MAX_SEED
from .errors import UserError

#: stream tags of the sketch families (numpy streams: SeedSequence([seed, tag]))
SRHT, COUNTSKETCH, SPARSE, UNIFORM = 3, 5, 6, 8
#: stream tags of the federated protocols (torch streams: hashed key tuples)
CLIENT_SPLIT, CLIENT_SAMPLING, CLIENT_BATCH, DP_NOISE, HEAVYMIX = 101, 202, 303, 404, 505
#: stream tag of a client's local-epoch shuffles (seed, t, c, epoch)
CLIENT_EPOCH = 606
#: stream tag of the noise of a defense on a protocol's clients (seed, t, c[, k])
DEFENSE_NOISE = 707


def check_seed(seed, what: str) -> int:
    """``seed`` as an int, refused in one sentence naming ``what`` (``"sketch seed"``) unless it is a whole number
    (an int or a NumPy integer; not True/False) in [0, :data:`MAX_SEED`]."""
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or not 0 <= int(seed) <= MAX_SEED:
        raise UserError(f"the {what} must be an integer in [0, 2^63 - 1], got {seed!r}")
    return int(seed)


def numpy_stream(seed: int, *tags: int) -> np.random.Generator:
    """A NumPy generator for (seed, *tags): independent streams per tag (``SeedSequence`` spawning keys)."""
    return np.random.default_rng(seed_sequence(seed, *tags))


def seed_sequence(seed: int, *tags: int) -> np.random.SeedSequence:
    """``SeedSequence([seed mod 2^63, *tags])``: the entropy behind :func:`numpy_stream`."""
    return np.random.SeedSequence([int(seed) % 2 ** 63, *map(int, tags)])


def torch_stream(*keys: int) -> torch.Generator:
    """A CPU ``torch.Generator`` seeded by a tuple of integers (a polynomial hash mod the Mersenne prime 2^61 - 1)."""
    h = 0
    for k in keys:
        h = (h * 1_000_003 + int(k) + 1) % (2 ** 61 - 1)
    return torch.Generator().manual_seed(h)


#: torch's CPU generator (MT19937) is seeded by the low 32 bits of a seed alone
TORCH_SEEDS = 2 ** 32


def torch_seed(seed: int) -> int:
    """The seed torch's CPU generator is given for ``seed``: ``seed`` itself below 2^32, and from 2^32 on 32 bits
    mixed from the whole of it (``SeedSequence``).  The generator reads only a seed's low 32 bits, so ``seed`` and
    ``seed + 2^32`` given as they are would draw the same weights, starts and noise, two seeds a run records as
    different."""
    seed = int(seed)
    return seed if seed < TORCH_SEEDS else int(np.random.SeedSequence(seed).generate_state(1, np.uint32)[0])


def torch_generator(seed: int) -> torch.Generator:
    """A CPU ``torch.Generator`` seeded by ``seed`` (weights, dummy starts, client noise): :func:`torch_seed`."""
    return torch.Generator().manual_seed(torch_seed(seed))


@contextlib.contextmanager
def torch_defaults() -> Iterator[None]:
    """Inside the block torch's process-wide defaults are those leakattack's draws and gradients are made under,
    whatever the caller set: float32 default dtype (a seeded model or start drawn under float64 would be other
    numbers, under the same config.json), gradients on and inference mode off (a notebook's ``torch.no_grad()``
    cell); the caller's come back afterwards."""
    dtype = torch.get_default_dtype()
    torch.set_default_dtype(torch.float32)
    try:
        with torch.inference_mode(False), torch.enable_grad():
            yield
    finally:
        torch.set_default_dtype(dtype)


__all__ = ["torch_defaults", "numpy_stream", "seed_sequence", "torch_seed", "torch_stream", "torch_generator"]
