"""The paper's theory beside the attack flow: Song, Wang, Yu, Zhang (ICML 2023), §4, §7 and App. I–M.

* :mod:`~leakattack.theory.analysis` — the constants and inequalities as pure functions.
* :mod:`~leakattack.theory.measure` — β, θ₁², θ₂², τ, γ₁, γ₂, the non-critical and
  semi-smooth inequalities and GD's linear rate, measured on real victims and sketches (``check``).
* :mod:`~leakattack.theory.table2` — numerical verdicts on the functions of Table 2.
* :mod:`~leakattack.theory.embedding` — the coordinate-wise embedding parameter a (Def. 4.1, Table 1).
* :mod:`~leakattack.theory.report` — the plain-text summary, check.json and the Markdown tables.

Figures of a check are drawn from its stored result by :mod:`leakattack.figures.theory`.
"""

from __future__ import annotations

from .analysis import (
                       embedding_a,
                       gd_rate_theorem_l1,
                       lanczos_extremes,
                       linear_rate,
                       noncritical_constants_lemma77,
                       semismooth_constants,
                       semismooth_rhs,
)
from .embedding import TABLE1_A, embedding_markdown, measure_embedding
from .measure import (
                       CHECK_TARGETS,
                       DEFAULT_ITERATIONS,
                       DEFAULT_SAMPLES,
                       EXACT_LIMIT,
                       Problem,
                       build_problem,
                       check,
                       gradient_descent,
                       jacobian_T,
                       kernel_eigs,
                       sample_points,
                       sketch_constants,
)
from .report import CHECK_JSON, summary_table, write_check, write_markdown
from .table2 import table2_markdown, table2_results

__all__ = [
    "noncritical_constants_lemma77", "semismooth_constants", "semismooth_rhs", "gd_rate_theorem_l1", "linear_rate",
    "embedding_a", "lanczos_extremes",
    "CHECK_TARGETS", "EXACT_LIMIT", "DEFAULT_SAMPLES", "DEFAULT_ITERATIONS", "Problem", "build_problem",
    "sketch_constants", "jacobian_T", "kernel_eigs", "sample_points", "gradient_descent", "check",
    "TABLE1_A", "measure_embedding", "embedding_markdown",
    "CHECK_JSON", "summary_table", "write_check", "write_markdown",
    "table2_results", "table2_markdown",
]
