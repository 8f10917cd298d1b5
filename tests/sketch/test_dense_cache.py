"""Dense sketches within a memory budget: R held in the attack's dtype when it fits, regenerated beyond, the same R
either way."""

from __future__ import annotations

import warnings

import pytest
import torch

from leakattack.config import ConfigError, RunConfig
from leakattack.errors import SettingWarning
from leakattack.sketch import default_memory_gb, get_sketch, list_sketches, regeneration_note
from leakattack.sketch import gaussian as gaussian_module

FAMILIES = ["gaussian", "ams"]
D, B = 3000, 2900  # b*d = 8.7e6 numbers: 35 MB in float32, 70 MB in float64; 3 row blocks


def _vecs(dtype):
    g = torch.Generator().manual_seed(0)
    return torch.randn(2, D, generator=g, dtype=dtype), torch.randn(2, B, generator=g, dtype=dtype)


def _no_regeneration(sk, monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("a block was regenerated")
    monkeypatch.setattr(sk, "_make_block", refuse)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_held_and_regenerated_paths_are_the_same_operator(family, dtype):
    held = get_sketch(family, D, B, 4)  # default budget: holds R
    regen = get_sketch(family, D, B, 4, memory_gb=0)
    v, u = _vecs(dtype)
    tol = 1e-12 if dtype == torch.float64 else 1e-4
    torch.testing.assert_close(regen.apply(v), held.apply(v), rtol=0, atol=tol)
    torch.testing.assert_close(regen.adjoint(u), held.adjoint(u), rtol=0, atol=tol)
    assert held._dense is not None and held._dense.dtype == dtype and regen._dense is None
    assert torch.equal(held._dense.float(), torch.cat([regen._make_block(k) for k in range(regen.n_blocks)]))


@pytest.mark.parametrize("family", FAMILIES)
def test_the_matrix_is_held_in_the_dtype_of_the_calls(family, monkeypatch):
    sk = get_sketch(family, D, B, 5, memory_gb=1.0)
    v64, u64 = _vecs(torch.float64)
    first = sk.apply(v64)
    assert sk._dense.dtype == torch.float64 and sk._dense.shape == (B, D)
    _no_regeneration(sk, monkeypatch)  # from now on R comes from the held matrix only
    assert torch.equal(sk.apply(v64), first)
    sk.adjoint(u64.float())
    assert sk._dense.dtype == torch.float32  # converted (exactly: the entries are float32 numbers)


@pytest.mark.parametrize("family", FAMILIES)
def test_a_budget_for_float32_only_serves_float64_calls_from_the_float32_matrix(family, monkeypatch):
    budget_gb = 1.5 * B * D * 4 / 1e9  # float32 fits, float64 (2x) does not
    sk = get_sketch(family, D, B, 6, memory_gb=budget_gb)
    ref = get_sketch(family, D, B, 6)
    v64, u64 = _vecs(torch.float64)
    sk.apply(v64.float())
    assert sk._dense.dtype == torch.float32
    _no_regeneration(sk, monkeypatch)
    torch.testing.assert_close(sk.apply(v64), ref.apply(v64), rtol=0, atol=1e-12)
    torch.testing.assert_close(sk.adjoint(u64), ref.adjoint(u64), rtol=0, atol=1e-12)
    assert sk._dense.dtype == torch.float32


@pytest.mark.parametrize("family", FAMILIES)
def test_above_the_old_2_24_limit_the_matrix_is_held_when_the_budget_allows(family):
    d, b = 8192, 2049  # b*d > 2**24
    sk = get_sketch(family, d, b, 7, memory_gb=1.0)
    assert sk._dense is None  # built at the first call, in that call's dtype
    v = torch.randn(1, d, generator=torch.Generator().manual_seed(1))
    out = sk.apply(v)
    assert sk._dense is not None and sk._dense.dtype == torch.float32
    regen = get_sketch(family, d, b, 7, memory_gb=0.01)
    torch.testing.assert_close(regen.apply(v), out, rtol=0, atol=1e-4)
    assert regen._dense is None


def test_the_budget_is_passed_only_to_dense_families_and_never_changes_r():
    for kind in list_sketches():
        b_asked = 40 if kind == "none" else 12  # the identity's only b is d
        a = get_sketch(kind, 40, b_asked, 3, memory_gb=0)
        b = get_sketch(kind, 40, b_asked, 3, memory_gb=10)
        assert torch.equal(a.to_dense(), b.to_dense())
        assert "memory_gb" not in a.describe()


def test_default_budget_is_a_quarter_of_the_available_ram():
    try:
        with open("/proc/meminfo") as fh:
            avail = next(int(ln.split()[1]) * 1024 for ln in fh if ln.startswith("MemAvailable:"))
    except (OSError, StopIteration):
        pytest.skip("no /proc/meminfo")
    assert default_memory_gb() == pytest.approx(avail / 4 / 1e9, rel=0.2)  # other processes move MemAvailable
    assert get_sketch("gaussian", 30, 10, 0).memory_bytes == pytest.approx(default_memory_gb() * 1e9, rel=0.2)


def test_regeneration_note_names_the_estimate_and_the_cheaper_choices(monkeypatch):
    sk = get_sketch("gaussian", D, B, 0, memory_gb=0.01)
    monkeypatch.setattr(sk, "regeneration_seconds", lambda: 0.5)
    note = regeneration_note(sk, 4000, torch.float64)  # 0.5 s x 4000 = 33 min
    assert note is not None and "\n" not in note
    for part in ("gaussian", "0.01 GB", "0.5 s", "33 min", "4000 iterations", "the label reading", "srht",
                 "countsketch", "--sketch-memory"):
        assert part in note, part
    assert regeneration_note(sk, 100, torch.float64) is None  # 50 s: not worth a warning
    assert regeneration_note(get_sketch("gaussian", D, B, 0), 4000, torch.float64) is None  # held: fast
    assert regeneration_note(get_sketch("srht", D, B, 0), 10 ** 6, torch.float64) is None
    # the attack's time limit cuts the estimate: the note says where
    assert "at least" in regeneration_note(sk, 4000, torch.float64, optimizer="lbfgs")  # its line search
    assert "at least" not in note
    assert "time limit of 10 min stops it after at most 1200 of them" in regeneration_note(sk, 4000, torch.float64,
                                                                                         time_limit=600)
    assert "stops it after its first evaluation;" in regeneration_note(sk, 4000, torch.float64,
                                                                                time_limit=0.2)
    assert "time limit" not in regeneration_note(sk, 4000, torch.float64, time_limit=10 ** 4)
    # a closed-form attack has no iterations: "3.08 days for 6000 iterations (L-BFGS's line search ...)" had been
    # said of the analytic attack; its note gives the cost of a pair and of the run's own passes
    monkeypatch.setattr(sk, "regeneration_seconds", lambda: 43.0)  # as a run of mlp/digits, gaussian b = d, printed it
    closed = regeneration_note(sk, 6000, torch.float64, optimizer="lbfgs", closed_form=True)
    assert closed is not None and "iterations" not in closed and "L-BFGS" not in closed and "43 s each" in closed
    assert "closed-form solve" in closed and "srht" in closed
    monkeypatch.setattr(sk, "regeneration_seconds", lambda: 0.01)  # its own passes take 0.08 s: no note
    assert regeneration_note(sk, 6000, torch.float64, closed_form=True) is None


def test_the_runs_other_passes_over_a_regenerated_sketch_fit_the_estimates_allowance(monkeypatch, tmp_path):
    """A run regenerates R for its message, label reading and verdict besides its iterations: those passes, counted
    on LeNet runs of 2 and 6 iterations (the difference is the iterations' share), fit RUN_EVALUATIONS pairs."""
    from leakattack import run_attack
    from leakattack.config import RunConfig
    from leakattack.sketch import gaussian

    passes = {"n": 0}
    blocks = gaussian.RowBlockSketch._blocks

    def counted(self, device):
        passes["n"] += 1
        return blocks(self, device)

    monkeypatch.setattr(gaussian.RowBlockSketch, "_blocks", counted)
    count = {}
    for k in (2, 6):
        passes["n"] = 0
        run_attack(RunConfig(model="lenet", sketch="ams", sketch_memory=1e-6, iterations=k), out=tmp_path / str(k),
                   with_lpips=False)
        count[k] = passes["n"]
    per_iteration = (count[6] - count[2]) / 4
    assert per_iteration >= 2  # an apply and an adjoint per evaluation
    assert 0 < count[2] - 2 * per_iteration <= 2 * gaussian.RUN_EVALUATIONS


def test_regeneration_seconds_is_measured_from_a_real_block():
    sk = get_sketch("ams", 4096, 3000, 0, memory_gb=0)
    t = sk.regeneration_seconds()
    assert 0 < t < 60 and sk.n_blocks == 3


def test_sketch_memory_is_a_run_parameter_refused_when_negative():
    assert RunConfig().sketch_memory is None
    with pytest.raises(ConfigError, match="sketch memory must be a non-negative number"):
        RunConfig(sketch_memory=-1).validate()


def test_a_run_whose_dense_sketch_cannot_fit_warns_in_one_line(monkeypatch):
    from leakattack import experiment
    monkeypatch.setattr(gaussian_module.RowBlockSketch, "regeneration_seconds", lambda self: 0.3)
    cfg = RunConfig(model="lenet", dataset="digits", sketch="ams", sketch_memory=0.001, iterations=2000)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        experiment.prepare(cfg)
    notes = [str(w.message) for w in caught
             if issubclass(w.category, SettingWarning) and "regenerates" in str(w.message)]
    assert len(notes) == 1 and "10 min for 2000 iterations" in notes[0] and "--sketch-memory" in notes[0]


def test_a_run_a_regenerated_sketch_makes_hopeless_is_refused_in_one_sentence(monkeypatch):
    """The message, the label reading and the verdict pass over R outside the iterations a time limit bounds: where
    those alone would take past a day, or ten times the limit, the run is refused before it starts."""
    from leakattack.sketch import regeneration_refusal

    sk = get_sketch("gaussian", D, B, 0, memory_gb=0.01)
    monkeypatch.setattr(sk, "regeneration_seconds", lambda: 3600.0)  # 9 passes: 9 h
    assert regeneration_refusal(sk, torch.float64) is None  # under a day: warned of, not refused
    said = regeneration_refusal(sk, torch.float64, time_limit=30)
    assert said is not None and "\n" not in said
    for part in ("1 h a pass", "9 h for the message, the label reading, the verdict and one iteration",
                 "time limit of 30 s bounds the iterations only", "--sketch srht or countsketch"):
        assert part in said, part
    assert regeneration_refusal(sk, torch.float64, time_limit=4 * 3600) is None  # 9 h within ten times 4 h
    monkeypatch.setattr(sk, "regeneration_seconds", lambda: 86400.0 * 11)
    assert "11 days a pass" in regeneration_refusal(sk, torch.float64)
    assert regeneration_refusal(get_sketch("gaussian", D, B, 0), torch.float64) is None  # held


def test_a_sketch_memory_past_the_ram_warns_and_regenerates_instead_of_failing(monkeypatch):
    monkeypatch.setattr(gaussian_module, "available_memory_bytes", lambda: 10 ** 6)  # 1 MB of RAM left
    with pytest.warns(SettingWarning, match=r"--sketch-memory 1000 GB is more than the 0\.001 GB of RAM available"):
        sk = get_sketch("gaussian", D, B, 0, memory_gb=1000)
    assert sk.memory_bytes == 10 ** 6 and not sk.fits(torch.float32)
    held = get_sketch("gaussian", D, B, 0, memory_gb=1000, force_blocks=True)
    v = torch.randn(D, dtype=torch.float64)
    assert torch.equal(sk.apply(v), held.apply(v))  # the same R, regenerated
