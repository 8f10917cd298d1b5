"""Privacy accounting: the paper's formulas by hand, and Opacus' accountant against them and a published value."""

import math

import pytest

import defenses
from defenses.accounting import accountant_epsilon, gaussian_epsilon, gaussian_sigma, message_privacy, paper_composition
from leakattack.sketch import get_sketch


def test_gaussian_sigma_matches_lemma_h7_by_hand():
    # sigma^2 = 2 ln(1.25/delta) Delta^2 / eps^2: eps=1, delta=1e-5, Delta=1 -> sqrt(2 ln 125000) = 4.84480
    assert gaussian_sigma(1.0, 1e-5, 1.0) == pytest.approx(4.844805, abs=1e-5)
    # linear in Delta, inverse in epsilon
    assert gaussian_sigma(0.5, 1e-5, 2.0) == pytest.approx(4 * 4.844805, abs=1e-4)


def test_gaussian_epsilon_inverts_gaussian_sigma():
    for eps, delta, sens in [(0.3, 1e-6, 1.0), (2.0, 1e-5, 0.1), (8.0, 1e-3, 5.0)]:
        assert gaussian_epsilon(gaussian_sigma(eps, delta, sens), delta, sens) == pytest.approx(eps, rel=1e-12)
    assert gaussian_epsilon(0.0, 1e-5, 1.0) == math.inf


def test_paper_composition_matches_theorem_6_2_by_hand():
    eps, delta = paper_composition(0.1, 1e-6, T=100, K=4)
    assert eps == pytest.approx(2.0, rel=1e-12) and delta == pytest.approx(4e-4, rel=1e-12)


def test_accountant_matches_opacus_published_value():
    # opacus/tests/accountants_test.py::test_rdp_accountant: z=1.5, q=0.04, 2250 steps, delta=1e-5 -> 7.32911117143
    assert accountant_epsilon(1.5, 0.04, int(90 / 0.04), 1e-5) == pytest.approx(7.32911117143, rel=1e-9)


def test_prv_and_rdp_accountants_agree_within_ten_percent():
    rdp = accountant_epsilon(1.5, 0.04, 2250, 1e-5, accountant="rdp")
    prv = accountant_epsilon(1.5, 0.04, 2250, 1e-5, accountant="prv")
    assert prv <= rdp and prv == pytest.approx(rdp, rel=0.1)  # opacus' own PRV value is 6.777


def test_accountant_options_are_keyword_only_and_checked():
    """The accountant is named by keyword; an unknown one is a ValueError listing rdp and prv."""
    with pytest.raises(TypeError):
        accountant_epsilon(1.5, 0.04, 2250, 1e-5, "rdp")
    with pytest.raises(ValueError, match="unknown accountant 'moments'; choose one of: rdp, prv"):
        accountant_epsilon(1.5, 0.04, 2250, 1e-5, accountant="moments")
    assert accountant_epsilon(0.0, 0.04, 2250, 1e-5) == math.inf


def test_accountant_is_tighter_than_paper_composition_with_subsampling():
    # DP-SGD on MNIST (Abadi et al. 2016): z=1.1, batch 256 of 60000, 60 epochs, delta=1e-5.
    # The paper's Thm 6.2 has no amplification by sub-sampling: eps_hat at delta/steps, times sqrt(steps).
    steps, delta = 60 * 60000 // 256, 1e-5
    tight = accountant_epsilon(1.1, 256 / 60000, steps, delta)
    paper, paper_delta = paper_composition(gaussian_epsilon(1.1, delta / steps, 1.0), delta / steps, steps, 1)
    assert paper_delta == pytest.approx(delta)
    assert tight < 3.0 < 100 < paper  # tight ~2.6; paper ~ 600


def test_paper_composition_undercounts_without_subsampling_at_many_steps():
    # Thm 6.2 drops the K eps_hat^2 term of advanced composition: at q=1 the tight RDP value exceeds it.
    steps, delta = 100, 1e-5
    paper, _ = paper_composition(gaussian_epsilon(1.1, delta / steps, 1.0), delta / steps, steps, 1)
    assert accountant_epsilon(1.1, 1.0, steps, delta) > paper


def test_message_privacy_reports_both_accountings_for_a_clipped_gaussian():
    p = message_privacy(defenses.build("clip:C=2,gaussian:z=1.1"), 1e-5)
    assert p["noise_multiplier"] == pytest.approx(1.1) and p["sensitivity"] == 2.0
    assert p["epsilon_paper"] == pytest.approx(gaussian_epsilon(2.2, 1e-5, 2.0))
    assert p["epsilon"] == pytest.approx(accountant_epsilon(1.1, 1.0, 1, 1e-5))
    assert p["delta"] == 1e-5


def test_message_privacy_is_unbounded_without_a_clip_and_absent_without_noise():
    p = message_privacy(defenses.build("gaussian:sigma=0.1"), 1e-5)
    assert p["epsilon"] is None and "unbounded" in p["privacy_note"]
    assert message_privacy(defenses.build("prune:p=0.5"), 1e-5)["delta"] is None


def test_message_privacy_takes_steps_and_sample_rate_by_keyword():
    """steps and sample_rate are keyword-only; over 4 steps the paper's delta is the total delta, composed by
    Thm 6.2."""
    pipe = defenses.build("clip:C=1,gaussian:z=1.1")
    with pytest.raises(TypeError):
        message_privacy(pipe, 1e-5, 4)
    p = message_privacy(pipe, 1e-5, steps=4, sample_rate=0.5)
    assert p["delta_paper"] == pytest.approx(1e-5)
    assert p["epsilon_paper"] == pytest.approx(2 * gaussian_epsilon(1.1, 1e-5 / 4, 1.0))
    assert p["epsilon"] == pytest.approx(accountant_epsilon(1.1, 0.5, 4, 1e-5))


def test_message_privacy_for_noise_after_an_srht_divides_z_by_its_operator_norm():
    """clip:C=1 before an SRHT with ||R|| = sqrt(n/b), noise z = 1.1 after it: Delta = ||R||, noise multiplier
    1.1/||R||."""
    norm = get_sketch("srht", 13426, 6713, 1).operator_norm()
    assert norm == pytest.approx(math.sqrt(16384 / 6713), rel=1e-15)
    p = message_privacy(defenses.build("clip:C=1,gaussian:z=1.1@after_sketch"), 1e-5, sketch_norm=norm)
    assert p["noise_multiplier"] == pytest.approx(1.1 / norm, rel=1e-15)
    assert p["epsilon"] == pytest.approx(accountant_epsilon(1.1 / norm, 1.0, 1, 1e-5), rel=1e-12)
    assert p["epsilon"] == pytest.approx(7.1132, abs=1e-4)  # 4.24 with Delta = C
    assert p["epsilon_paper"] == pytest.approx(gaussian_epsilon(1.1, 1e-5, norm), rel=1e-12)
    assert p["sensitivity"] == pytest.approx(norm) and p["sketch_norm"] == norm


def test_message_privacy_composes_steps_with_the_same_delta():
    norm = 1.5
    p = message_privacy(defenses.build("clip:C=1,gaussian:z=1.1@after_sketch"), 1e-5, steps=4, sample_rate=0.5,
                        sketch_norm=norm)
    assert p["epsilon"] == pytest.approx(accountant_epsilon(1.1 / norm, 0.5, 4, 1e-5))
    assert p["epsilon_paper"] == pytest.approx(2 * gaussian_epsilon(1.1, 1e-5 / 4, norm))


def test_astronomical_noise_gives_the_accountants_floor_not_an_overflow():
    import defenses

    floor = accountant_epsilon(1e6, 1.0, 1, 1e-5)
    assert 0 < floor < 0.2 and accountant_epsilon(1e200, 1.0, 1, 1e-5) == floor
    m = message_privacy(defenses.build("clip:C=1,gaussian:sigma=1e200"), 1e-5)
    assert m["epsilon"] == floor and m["noise_multiplier"] == 1e200


def test_prv_never_reports_its_grids_cap_or_raises_where_the_loss_is_beyond_it():
    """PRV gave 709.79 (about log of the largest float) for any z <= 0.005, where the exact Gaussian mechanism's
    epsilon at one release is 20,852 (z = 0.005), and raised a RuntimeError at z = 0.01-0.02; it now answers the RDP
    bound there, which is at or above the exact epsilon."""
    zs = [0.003, 0.005, 0.01, 0.015, 0.02, 0.025, 0.028, 0.03, 0.05, 0.1]
    prv = [accountant_epsilon(z, 1.0, 1, 1e-5, accountant="prv") for z in zs]
    assert all(a > b for a, b in zip(prv, prv[1:])), prv  # less noise never reads as more private
    for z, eps in zip(zs, prv):
        rdp = accountant_epsilon(z, 1.0, 1, 1e-5, accountant="rdp")
        assert eps <= rdp and (eps == rdp or eps < 709.0), (z, eps, rdp)
        # an upper bound on the exact epsilon of one Gaussian release (20,852 at z = 0.005)
        assert eps >= _exact_gaussian_epsilon(z, 1e-5) * (1 - 1e-3), (z, eps)


def _exact_gaussian_epsilon(z: float, delta: float) -> float:
    """The exact epsilon of one Gaussian release of noise multiplier z at delta (Balle and Wang 2018, Thm. 8:
    delta(eps) = Phi(1/(2z) - eps z) - e^eps Phi(-1/(2z) - eps z)), in log space."""
    from scipy.optimize import brentq
    from scipy.special import log_ndtr

    def log_delta(eps: float) -> float:
        first, second = log_ndtr(1 / (2 * z) - eps * z), eps + log_ndtr(-1 / (2 * z) - eps * z)
        return first + math.log1p(-math.exp(second - first)) if second < first else -math.inf

    return brentq(lambda eps: log_delta(eps) - math.log(delta), 1e-6, 1e7)


@pytest.mark.parametrize("accountant", ["rdp", "prv"])
def test_a_large_delta_gives_epsilon_zero_not_a_negative_one(accountant):
    """Opacus' conversion answered -0.69 (RDP) and -0.68 (PRV) at z = 5, q = 0.1, 10 steps, delta = 0.5: the
    mechanism is (0, delta)-DP there, and epsilon never lies below 0."""
    assert accountant_epsilon(5.0, 0.1, 10, 0.5, accountant=accountant) == 0.0
    assert accountant_epsilon(100.0, 1.0, 1, 0.3, accountant=accountant) == 0.0
    assert accountant_epsilon(5.0, 0.1, 10, 1e-5, accountant=accountant) > 0  # a small delta keeps its epsilon
