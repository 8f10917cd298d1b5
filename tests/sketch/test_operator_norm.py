"""||R||_2 of every sketch family: closed forms and the matrix-free Lanczos default against the dense spectral norm."""

from __future__ import annotations

import math

import pytest
import torch

from leakattack.sketch import Sketch, get_sketch, list_sketches
from leakattack.sketch.base import LANCZOS_MARGIN, lanczos_top_eigenvalue
from leakattack.sketch.countsketch import countsketch_operator_norm
from leakattack.sketch.srht import srht_operator_norm
from leakattack.sketch.uniform import uniform_operator_norm

#: (d, b) pairs at small sizes: d not a power of two (srht pads), b from 1 to d
SHAPES = [(24, 12), (24, 20), (20, 19), (37, 11), (32, 5), (50, 50), (9, 1)]
SEEDS = [0, 1, 7]
TOL = 1e-9


def _dense_norm(sk: Sketch) -> float:
    return float(torch.linalg.matrix_norm(sk.to_dense(), 2))


def _bounds(estimate: float, norm: float) -> bool:
    """Whether a Lanczos estimate is an upper bound of ``norm`` within its margin (and round-off)."""
    return norm * (1 - 1e-12) <= estimate <= norm * (1 + LANCZOS_MARGIN + TOL)


@pytest.mark.parametrize("kind", ["none", "uniform", "countsketch"])
@pytest.mark.parametrize("d,b", SHAPES)
@pytest.mark.parametrize("seed", SEEDS)
def test_closed_form_operator_norm_equals_the_dense_spectral_norm(kind, d, b, seed):
    sk = get_sketch(kind, d, d if kind == "none" else b, seed)  # the identity's only b is d
    assert sk.operator_norm() == pytest.approx(_dense_norm(sk), rel=TOL)


@pytest.mark.parametrize("d,b", [(24, 9), (24, 12), (20, 19), (32, 5), (32, 32), (37, 28), (5, 4)])
@pytest.mark.parametrize("seed", SEEDS)
def test_srht_norm_is_sqrt_n_over_b_when_b_exceeds_the_padding(d, b, seed):
    """b > n - d: R R^T = (n/b)(I - N N^T) with N of rank <= n - d < b, so the top eigenvalue is n/b exactly."""
    sk = get_sketch("srht", d, b, seed)
    assert b > sk.n - d
    assert sk.operator_norm() == pytest.approx(math.sqrt(sk.n / b), rel=TOL)
    assert sk.operator_norm() == pytest.approx(_dense_norm(sk), rel=TOL)


@pytest.mark.parametrize("seed", range(6))
def test_srht_with_b_at_most_the_padding_falls_back_to_the_dense_norm_not_sqrt_n_over_b(seed):
    """d = 17 pads to n = 32: with b = 4 <= n - d the padding can take norm away, so no closed form is used."""
    sk = get_sketch("srht", 17, 4, seed)
    dense = _dense_norm(sk)
    assert _bounds(sk.operator_norm(), dense)
    assert dense <= math.sqrt(32 / 4) * (1 + 1e-12)


def test_srht_fallback_is_strictly_below_sqrt_n_over_b_for_some_seed():
    norms = [get_sketch("srht", 17, 4, s).operator_norm() for s in range(6)]
    assert min(norms) < math.sqrt(8) * (1 - 1e-3)


def test_srht_norm_for_lenet_on_digits_by_hand():
    # d = 13426 pads to n = 16384; b = d/2 = 6713 > n - d = 2958, so ||R|| = sqrt(16384/6713) = 1.562254...
    sk = get_sketch("srht", 13426, 6713, 1)
    assert sk.n == 16384
    assert sk.operator_norm() == pytest.approx(math.sqrt(16384 / 6713), rel=1e-15)
    assert srht_operator_norm(16384, 6713) == pytest.approx(1.5622540026820773, rel=1e-15)


@pytest.mark.parametrize("kind", ["gaussian", "ams", "sparse"])
@pytest.mark.parametrize("d,b", SHAPES)
@pytest.mark.parametrize("seed", SEEDS)
def test_lanczos_default_agrees_with_the_dense_norm(kind, d, b, seed):
    sk = get_sketch(kind, d, b, seed)
    assert _bounds(sk.operator_norm(), _dense_norm(sk))


@pytest.mark.parametrize("kind", list_sketches())
def test_base_class_iteration_agrees_with_each_family_closed_form(kind):
    sk = get_sketch(kind, 60, 60 if kind == "none" else 25, 3)
    assert _bounds(Sketch._operator_norm(sk), sk.operator_norm() if kind in ("none", "uniform", "countsketch", "srht")
                   else _dense_norm(sk))


def test_lanczos_on_a_larger_gaussian_sketch_agrees_with_the_dense_norm():
    """b = 300 Lanczos stops on the relative-change rule well before exhausting the space."""
    sk = get_sketch("gaussian", 900, 300, 5)
    assert _bounds(sk.operator_norm(), _dense_norm(sk))


def test_gaussian_regenerated_blocks_give_the_same_norm_as_the_cached_matrix():
    cached = get_sketch("gaussian", 80, 30, 2)
    blocks = type(cached)(80, 30, 2, force_blocks=True)
    assert blocks.operator_norm() == pytest.approx(cached.operator_norm(), rel=TOL)


def test_lanczos_top_eigenvalue_of_a_diagonal_operator_by_hand():
    diag = torch.tensor([3.0, 1.0, 0.5, 2.0, 0.0], dtype=torch.float64)
    assert lanczos_top_eigenvalue(lambda v: diag * v, 5) == pytest.approx(3.0, rel=1e-12)


def test_closed_forms_by_hand():
    assert uniform_operator_norm(50, 8) == pytest.approx(2.5)
    rows = torch.tensor([0, 2, 2, 1, 2, 0])  # bucket loads 2, 1, 3
    assert countsketch_operator_norm(torch.bincount(rows, minlength=4)) == pytest.approx(math.sqrt(3))
    assert get_sketch("none", 7, 7).operator_norm() == 1.0


def test_operator_norm_is_computed_once_and_cached():
    sk = get_sketch("sparse", 40, 10, 0)
    first = sk.operator_norm()
    sk.apply = None  # a second call must not touch the operator again
    assert sk.operator_norm() == first
