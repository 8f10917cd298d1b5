"""RunMetrics: the typed record of metrics.json, its schema key, and files written before it existed."""

import json
from dataclasses import fields, replace
from pathlib import Path

import pytest

from leakattack import metrics
from leakattack.config import RunConfig
from leakattack.experiment import run_attack
from leakattack.metrics import METRICS_SCHEMA, MetricsError, RunMetrics

REFERENCE = Path(__file__).resolve().parents[2] / "results" / "reference" / "lenet-srht" / "metrics.json"
#: the fields that are not keys of metrics.json
NOT_KEYS = {"extra", "absent"}
#: a lenet run on digits whose attacker searched the sketch seed, under noise and with --utility: every kind of key
SEARCHED = dict(model="lenet", dataset="digits", sketch="srht", iterations=3, sketch_known=False,
                sketch_seed_search=2, defense="gaussian:sigma=1e-4", utility=True, utility_steps=2)


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    """(metrics, run folder) of a short undefended lenet run on digits."""
    return run_attack(RunConfig(model="lenet", dataset="digits", iterations=3),
                      out=tmp_path_factory.mktemp("plain") / "run", with_lpips=False)


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    return run_attack(RunConfig(**SEARCHED), out=tmp_path_factory.mktemp("searched") / "run", with_lpips=False)


def _stored(folder: Path) -> dict:
    return json.loads((folder / "metrics.json").read_text())


def test_the_schema_is_written_first_in_metrics_json(plain):
    m, folder = plain
    assert METRICS_SCHEMA == 1
    assert list(m.to_dict())[0] == "schema" and m.to_dict()["schema"] == 1
    assert _stored(folder) == m.to_dict()


@pytest.mark.parametrize("run", ["plain", "searched"])
def test_a_record_survives_a_round_trip(run, request):
    m, folder = request.getfixturevalue(run)
    assert RunMetrics.from_dict(m.to_dict()).to_dict() == m.to_dict()
    assert RunMetrics.from_dict(_stored(folder)) == RunMetrics.from_dict(m.to_dict())


def test_every_field_is_a_key_of_a_real_runs_metrics_json(plain, searched):
    keys = [f.name for f in fields(RunMetrics) if f.name not in NOT_KEYS]
    stored = _stored(searched[1])
    # label_choice is written only where the label rules read different labels (tests/attacks/test_label_choice.py),
    # restart_stops and restart_path only for runs of several starts (tests/cli/test_cli.py)
    # gauss_newton only where Gauss-Newton steps ran (tests/attacks/test_gauss_newton.py), row_space_solve only where
    # the analytic attack solved a batch in its first block's row space (tests/attacks/test_analytic.py),
    # closed_forms only where a run rebuilt nothing and a closed form accepts its message (tests/attacks/test_rgap.py),
    # labels_unused only for an attack whose images do not depend on labels (tests/attacks/test_analytic_qa.py),
    # truth_residual only for a message file's run with a truth file (tests/cli/test_message.py)
    assert [k for k in keys if k not in stored] == ["label_choice", "restart_stops", "restart_path", "gauss_newton",
                                                    "row_space_solve", "closed_forms", "labels_unused",
                                                    "truth_residual"]
    assert [k for k in keys if k not in _stored(plain[1])] == ["seed_search", "label_choice", "restart_stops",
                                                               "restart_path", "gauss_newton", "row_space_solve",
                                                               "closed_forms", "labels_unused", "truth_residual"]
    # a defended run's keys are flattened into the file beside the fields, in the order they were recorded
    m = searched[0]
    assert list(m.extra)[:3] == ["defense", "noise_seed", "g_norm"] and "seed_search" not in m.extra
    written = [k for k in keys if k in stored]
    assert list(stored)[len(written) + 1:] == list(m.extra)  # after schema and the fields written
    assert m.defense == "gaussian:sigma=0.0001@before_sketch" and m.epsilon == stored["epsilon"]
    assert m.utility_acc == stored["utility_acc"] and m.seed_search == stored["seed_search"]


def test_the_baselines_and_verdict_metrics_judge_writes_are_fields():
    keys = {f.name for f in fields(RunMetrics)}
    assert set(metrics.judge({}, {})) <= keys
    assert {f"baseline_{name}_{score}" for name in metrics.BASELINES for score in ("psnr", "ssim", "lpips")} <= keys


def test_a_file_without_schema_still_reads():
    old = json.loads(REFERENCE.read_text())
    old.pop("schema", None)  # as the files written before the schema key existed
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
