"""How many of a count sketch's b buckets its hash fills, over seeds: leakattack's countsketch (h a degree-1
polynomial over GF(2^31 - 1), reduced mod b: Carter-Wegman, 2-wise independent, Definition D.5) against a degree-3
polynomial of the same field (4-wise independent) and against a random hash's expectation b (1 - (1 - 1/b)^d).
The buckets no column hashes to are zero rows of R, so the filled ones bound its rank: the independent numbers the
message holds.

    python scripts/countsketch_buckets.py [--d 15826] [--ratios 0.5,0.25,0.1] [--seeds 200] [--unknowns 3072]

prints one line per b: the filled buckets of the linear hash (mean, min, and how many seeds fill fewer than
--unknowns), and the same for the degree-3 hash drawn from the same seeds' streams.
"""

from __future__ import annotations

import numpy as np

from leakattack.script import count, fractions, parser, script_main
from leakattack.sketch import get_sketch
from leakattack.sketch.countsketch import PRIME, poly_hash


def filled_degree3(d: int, b: int, seed: int) -> int:
    """Filled buckets of h(i) = (degree-3 polynomial over GF(p) at i) mod b, coefficients from NumPy's seed."""
    coeffs = np.random.default_rng(seed).integers(0, PRIME, size=4)
    return int((np.bincount(poly_hash(coeffs, np.arange(d)) % b, minlength=b) > 0).sum())


def main(argv=None) -> None:
    ap = parser(__doc__)
    ap.add_argument("--d", type=count, default=15826, help="columns (lenet at 32 px: 15826)")
    ap.add_argument("--ratios", type=fractions, default=[0.5, 0.25, 0.1], help="b/d, comma-separated")
    ap.add_argument("--seeds", type=count, default=200, help="seeds 0..N-1")
    ap.add_argument("--unknowns", type=count, default=3072, help="m*B (a 3x32x32 image: 3072)")
    a = ap.parse_args(argv)
    print(f"d = {a.d}, seeds 0..{a.seeds - 1}, filled buckets (R's nonzero rows): mean / min / seeds below "
          f"{a.unknowns} unknowns")
    for ratio in a.ratios:
        b = max(1, round(ratio * a.d))
        linear = np.array([get_sketch("countsketch", a.d, b, seed=s).nonzero_rows() for s in range(a.seeds)])
        cubic = np.array([filled_degree3(a.d, b, s) for s in range(a.seeds)])
        expect = b * (1 - (1 - 1 / b) ** a.d)
        print(f"b = {b:6d} (b/d {ratio:g}): random hash {expect:8.1f} | leakattack's linear hash "
              f"{linear.mean():8.1f} / {linear.min():6d} / {int((linear < a.unknowns).sum()):3d} | degree 3 "
              f"{cubic.mean():8.1f} / {cubic.min():6d} / {int((cubic < a.unknowns).sum()):3d}")


if __name__ == "__main__":
    script_main(main)
