"""The metrics of one run as a typed record: :class:`RunMetrics`, written to ``metrics.json`` with a schema version.

Every key a run writes is a field, in the order of the file, except those
whose set varies from run to run: a defended run's privacy keys
(:func:`leakattack.utility.privacy_metrics`: ``defense``, ``noise_seed``,
``g_norm``, the observation's own entries, ``epsilon``/``delta``...,
``utility_*``) and keys this version does not know, which ``extra`` holds in
their order.  :meth:`RunMetrics.to_dict` flattens the record into the keys of
metrics.json plus ``schema``; :meth:`RunMetrics.from_dict` reads such a dict,
an older file without ``schema`` included.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Mapping

from ..jsonable import to_jsonable
from .base import MetricsError

#: the version of metrics.json's layout, written as its ``schema`` key (files without one are older, and read)
METRICS_SCHEMA = 1


@dataclass(kw_only=True)
class RunMetrics:
    """The metrics of one run (the keys of metrics.json, in its order).

    A file written before a key existed reads it as None and names it in
    ``absent``; :meth:`to_dict` leaves those keys out again, so reading and
    writing a file changes nothing but its ``schema``.
    """

    # the reconstruction's scores against the truth (None without one, or not finite)
    mse: float | None
    psnr: float | None
    ssim: float | None
    lpips: float | None
    lpips_note: str
    label_acc: float | None  #: recovered labels against the true ones, as multisets
    label_acc_matched: float | None  #: each matched image's label against its true label

    # the attack
    final_loss: float | None
    initial_loss: float | None
    iterations: int
    best_step: int
    stop_reason: str
    message: str
    restarts: int
    restart_losses: list[float | None]
    wall_s: float  #: the attack, its scores and the baselines'
    attack_s: float  #: the attack alone
    d: int
    b: int
    label_mode: str
    labels_true: list | None
    truth: bool  #: whether there were true images to score against
    labels_attack: list | None

    # per image, in ground-truth order
    psnr_each: list[float | None]
    ssim_each: list[float | None]
    match: list[int]  #: the reconstruction matched to each true image

    # the count of unknowns
    unknowns: int  #: m*B
    unique_by_count: bool  #: b >= m*B, counting only the nonzero rows of a sketch that has zero rows

    # whether anything was attacked, the baselines (metrics.BASELINES: start, mean) and the verdict (metrics.judge)
    attacked: bool
    nothing_attacked: str | None
    baseline_start_psnr: float | None
    baseline_start_ssim: float | None
    baseline_start_lpips: float | None
    baseline_mean_psnr: float | None
    baseline_mean_ssim: float | None
    baseline_mean_lpips: float | None
    baseline_psnr: float | None
    baseline_ssim: float | None
    baseline_lpips: float | None
    verdict: str | None
    verdict_baseline: str | None
    #: per image, in ground-truth order: the better baseline's PSNR and SSIM of that image, and the image's verdict
    #: on its own against them (``leakattack.rebuilt.verdict_each``); written for runs with a truth
    baseline_psnr_each: list[float | None] | None = None
    baseline_ssim_each: list[float | None] | None = None
    verdict_each: list[str] | None = None
    #: per image: the other true image its matched reconstruction is nearer to (MSE), or None; such an image is not
    #: rebuilt on its own (``leakattack.metrics.nearer_truths``); written for runs with a truth
    nearer_each: list[int | None] | None = None
    baseline_mean_image: str | None
    #: image identifiability (``leakattack.metrics.identify``): per image, in ground-truth order, the rank of its
    #: truth among ``identified_among`` images of the data set by pixel distance to its reconstruction (1: the
    #: nearest), the share of rank 1 (``iip``) and the same share for each baseline's images; written where the data
    #: set holds the true images
    identified_each: list[int | None] | None = None
    identified_among: int | None = None
    iip: float | None = None
    baseline_start_iip: float | None = None
    baseline_mean_iip: float | None = None
    baseline_iip: float | None = None  #: the higher of the baselines' shares
    #: the same by the victim's own features (the inputs of its head, cosine distance) on ``identified_features_among``
    #: images of the set; written where the run's victim has a linear head
    identified_features_each: list[int | None] | None = None
    identified_features_among: int | None = None
    iip_features: float | None = None
    baseline_start_iip_features: float | None = None
    baseline_mean_iip_features: float | None = None
    baseline_iip_features: float | None = None

    # whether the message determines the input where the run converged
    unique: bool | None
    jacobian_rank: int | None
    jacobian_note: str

    # a seed search's record, and how the labels were chosen when the label rules disagreed (each left out of the
    # file when there was none: leakattack.attacks.gradient_matching.GradientMatching.choose_labels)
    seed_search: dict[str, Any] | None = None
    label_choice: dict[str, Any] | None = None
    #: why each start stopped (``pruned``: by --prune-restarts); written for runs of several starts
    restart_stops: list[str] | None = None
    #: how the starts were evaluated: ``batched`` (one pass through the victim for all) or ``one by one`` and why;
    #: written for runs of several starts
    restart_path: str | None = None
    #: what the Gauss-Newton steps after the first-order phase did (``--refine``); written when they ran
    gauss_newton: dict[str, Any] | None = None
    #: the analytic attack's solve of a batch in its first block's row space (``residual``, ``accepted``, ``fit``,
    #: ``steps``, ``starts``, ``solved``); written when it ran
    row_space_solve: dict[str, Any] | None = None
    #: the closed-form attacks that accept this run's message (``leakattack.attacks.closed_forms_for``); written
    #: when a run that is not closed-form itself rebuilt nothing and one of them accepts it
    closed_forms: list[str] | None = None
    #: true for an attack whose images do not depend on the labels it reads (``Attack.uses_labels`` false: imprint);
    #: written only then
    labels_unused: bool | None = None
    #: the attack's own objective at the truth and at the reconstruction, term by term (``match``, each prior by
    #: name, ``total``); written where it was measured (gradient matching with fixed labels, the truth known)
    objective_at: dict[str, Any] | None = None
    #: ||message the truth sends, with its labels, through the attacker's model of the client - y|| / ||y||: far from
    #: 0, the truth file, weights, sketch or labels are not those the message was sent with; written for a message
    #: file's run with a truth file, no defense and the client's sketch held
    truth_residual: float | None = None
    #: the process's peak resident memory by the end of the run (``rss_gb``) and, on a GPU, the most device memory
    #: torch held (``device_gb``), in GB (10^9 bytes); written where the platform reports them
    peak_memory: dict[str, float | str] | None = None

    #: the keys whose set varies (a defended run's privacy keys, keys of other versions), in the file's order
    extra: dict[str, Any] = field(default_factory=dict)
    #: the keys the file this was read from lacked (written before they existed)
    absent: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        clash = sorted(set(self.extra) & (_KEYS | {"schema"}))
        if clash:
            raise MetricsError(f"extra metrics {clash} have the names of fields of the record")

    def to_dict(self) -> dict[str, Any]:
        """metrics.json's content: ``schema``, then every key in the file's order, as JSON-ready values."""
        out: dict[str, Any] = {"schema": METRICS_SCHEMA}
        for name in _ORDER:
            value = getattr(self, name)
            if name not in self.absent and not (name in _OPTIONAL and value is None):
                out[name] = value
        out.update(self.extra)
        return to_jsonable(out)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RunMetrics:
        """The record of a metrics.json's content (any schema up to :data:`METRICS_SCHEMA`); the keys it does not
        know go to ``extra``."""
        schema = d.get("schema", 0)
        if not isinstance(schema, int) or isinstance(schema, bool):
            raise MetricsError(f"the metrics' schema must be an integer, got {schema!r}")
        if schema > METRICS_SCHEMA:
            raise MetricsError(f"metrics of schema {schema} are newer than this leakattack reads "
                               f"(schema {METRICS_SCHEMA})")
        absent = frozenset(name for name in _REQUIRED if name not in d)
        values: dict[str, Any] = {**dict.fromkeys(absent), **{k: v for k, v in d.items() if k in _KEYS}}
        extra = {k: v for k, v in d.items() if k not in _KEYS and k != "schema"}
        return cls(**values, extra=extra, absent=absent)

    def get(self, key: str, default: Any = None) -> Any:
        """The value of a metrics.json key (a field, or an entry of ``extra``), or ``default`` where the run did not
        record it: for code that names metrics in data (tolerance tables, table columns)."""
        if key in _KEYS:
            value = getattr(self, key)
            return default if key in self.absent or (key in _OPTIONAL and value is None) else value
        return self.extra.get(key, default)

    def recorded(self, key: str) -> bool:
        """Whether the run recorded ``key`` (a file written before it existed did not)."""
        return self.get(key, _MISSING) is not _MISSING

    # a defended run's keys (leakattack.utility.privacy_metrics), None where the run has none

    @property
    def defense(self) -> str | None:
        """The defense's spec."""
        return self.extra.get("defense")

    @property
    def epsilon(self) -> float | None:
        """epsilon of the one message at ``delta`` (None: no guarantee)."""
        return self.extra.get("epsilon")

    @property
    def delta(self) -> float | None:
        """The delta epsilon holds at."""
        return self.extra.get("delta")

    @property
    def privacy_note(self) -> str | None:
        """How epsilon was computed, or why there is none."""
        return self.extra.get("privacy_note")

    @property
    def utility_acc(self) -> float | None:
        """With ``--utility``: the test accuracy of training under the defense."""
        return self.extra.get("utility_acc")


_MISSING = object()
#: the fields in metrics.json's order (those that are keys of the file)
_ORDER = tuple(f.name for f in fields(RunMetrics) if f.name not in ("extra", "absent"))
_KEYS = frozenset(_ORDER)
#: the keys a run writes only when it has them
_OPTIONAL = frozenset({"seed_search", "label_choice", "restart_stops", "restart_path", "gauss_newton",
                       "row_space_solve", "closed_forms", "labels_unused", "objective_at", "truth_residual",
                       "peak_memory",
                       "baseline_psnr_each", "baseline_ssim_each", "verdict_each", "nearer_each",
                       "identified_each", "identified_among", "iip", "baseline_start_iip", "baseline_mean_iip",
                       "baseline_iip", "identified_features_each", "identified_features_among", "iip_features",
                       "baseline_start_iip_features", "baseline_mean_iip_features", "baseline_iip_features"})
#: the keys every run of this schema writes
_REQUIRED = _KEYS - _OPTIONAL


__all__ = ["METRICS_SCHEMA", "RunMetrics"]
