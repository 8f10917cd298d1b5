"""RunMetrics: the typed record of metrics.json, its schema key, and files written before it existed."""

import json
from dataclasses import fields, replace
from pathlib import Path

import pytest

from leakattack import metrics
from leakattack.metrics import METRICS_SCHEMA, MetricsError, RunMetrics

REFERENCE = Path(__file__).resolve().parents[2] / "results" / "reference" / "lenet-srht" / "metrics.json"


def test_the_baselines_and_verdict_metrics_judge_writes_are_fields():
    keys = {f.name for f in fields(RunMetrics)}
    assert set(metrics.judge({}, {})) <= keys
    assert {f"baseline_{name}_{score}" for name in metrics.BASELINES for score in ("psnr", "ssim", "lpips")} <= keys


def test_a_file_without_schema_still_reads():
    old = json.loads(REFERENCE.read_text())
    assert "schema" not in old
    m = RunMetrics.from_dict(old)
    assert m.absent == frozenset() and m.extra == {} and m.psnr == old["psnr"]
    assert m.to_dict() == {"schema": METRICS_SCHEMA, **old} and list(m.to_dict()) == ["schema", *old]


def test_keys_an_older_file_lacks_read_as_none_and_stay_left_out():
    old = json.loads(REFERENCE.read_text())
    lacking = ("verdict", "verdict_baseline", "baseline_psnr", "unique", "jacobian_rank", "restart_losses")
    for key in lacking:
        del old[key]
    m = RunMetrics.from_dict(old)
    assert m.absent == frozenset(lacking) and m.verdict is None and m.restart_losses is None
    assert not m.recorded("verdict") and m.recorded("psnr") and m.get("verdict", "none") == "none"
    assert m.to_dict() == {"schema": 1, **old}


def test_unknown_keys_are_kept_and_a_newer_schema_is_refused():
    stored = {"schema": 1, **json.loads(REFERENCE.read_text()), "from_a_later_version": [1, 2]}
    m = RunMetrics.from_dict(stored)
    assert m.extra == {"from_a_later_version": [1, 2]} and m.get("from_a_later_version") == [1, 2]
    assert m.to_dict() == stored
    with pytest.raises(MetricsError, match="schema 2"):
        RunMetrics.from_dict({**stored, "schema": 2})


def test_values_are_json_ready_and_extra_keys_cannot_shadow_fields():
    m = RunMetrics.from_dict(json.loads(REFERENCE.read_text()))
    out = replace(m, final_loss=float("nan"), restart_losses=[float("inf"), 1.0]).to_dict()
    assert out["final_loss"] is None and out["restart_losses"] == [None, 1.0]
    json.dumps(out, allow_nan=False)
    with pytest.raises(MetricsError, match="psnr"):
        replace(m, extra={"psnr": 1.0})
