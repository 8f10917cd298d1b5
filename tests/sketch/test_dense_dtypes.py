"""Sketch operators called in several dtypes, and other properties checked against Appendix D of the sketching
paper."""

from __future__ import annotations

import pytest
import torch

from leakattack.sketch import get_sketch


@pytest.mark.parametrize("family", ["gaussian", "ams"])
@pytest.mark.parametrize("narrow", [torch.float16, torch.bfloat16])
def test_a_call_in_a_narrow_dtype_leaves_r_the_same_for_later_calls(family, narrow):
    """A dense sketch holds R in the dtype of its calls; one call in float16 or bfloat16 must not leave a rounded R
    behind for the float32 and float64 calls after it (the sender and the attacker would then use different R)."""
    sk = get_sketch(family, 300, 100, seed=7)
    v = torch.randn(300, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    u = torch.randn(100, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    before, before_t = sk.apply(v), sk.adjoint(u)
    sk.apply(v.to(narrow))
    assert torch.equal(sk.apply(v), before)
    assert torch.equal(sk.adjoint(u), before_t)
    sk.adjoint(u.to(narrow))
    fresh = get_sketch(family, 300, 100, seed=7)
    assert torch.equal(sk.apply(v.float()), fresh.apply(v.float()))
    assert torch.equal(sk.apply(v), before)
