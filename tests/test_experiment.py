"""One attack end to end through the API: restarts, reproducibility from config.json."""

import json
import sys
from pathlib import Path

import pytest
import torch

from leakattack.config import RunConfig
from leakattack.experiment import run_attack


def _cfg(**kw):
    base = dict(model="lenet", sketch="countsketch", dataset="digits", iterations=15, trace_every=5)
    base.update(kw)
    return RunConfig(**base)


def test_restarts_keep_the_start_with_the_lowest_loss(tmp_path):
    m, _ = run_attack(_cfg(restarts=3), out=tmp_path / "r", with_lpips=False)
    assert len(m.restart_losses) == 3
    assert m.final_loss == min(m.restart_losses)
    assert len(set(m.restart_losses)) == 3  # the starts differ


def test_a_run_records_the_process_peak_memory(tmp_path):
    import resource

    m, folder = run_attack(_cfg(), out=tmp_path / "m", with_lpips=False)
    peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9  # Linux: kibibytes
    assert 0.05 < m.peak_memory["rss_gb"] <= peak_gb + 1e-3 and "device_gb" not in m.peak_memory
    assert json.loads((folder / "metrics.json").read_text())["peak_memory"] == m.peak_memory


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="only Linux resets a process's peak memory")
def test_each_run_records_its_own_peak_not_the_processs(tmp_path):
    """A sweep runs its points in one process: a second run after 2 GB held and handed back records its own peak,
    below that (the block is mapped and unmapped directly: the C allocator may keep a freed array's pages)."""
    import mmap

    def resident_gb() -> float:  # the process's resident memory now (a worker may keep freed heap: it counts)
        status = Path("/proc/self/status").read_text()
        return next(int(ln.split()[1]) for ln in status.splitlines() if ln.startswith("VmRSS:")) * 1024 / 1e9

    run_attack(_cfg(), out=tmp_path / "first", with_lpips=False)  # a process's first run keeps its whole peak
    held = mmap.mmap(-1, 2 * 10**9)
    for i in range(0, len(held), 4096):  # touched, so resident
        held[i] = 1
    held.close()
    before = resident_gb()
    m, _ = run_attack(_cfg(), out=tmp_path / "m", with_lpips=False)
    assert m.peak_memory["rss_from"] == "run" and before <= m.peak_memory["rss_gb"] + 0.01 < before + 1.5, before


def test_a_run_gives_the_callers_torch_thread_count_back(tmp_path):
    own = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        run_attack(_cfg(threads=1, iterations=6), out=tmp_path / "t", with_lpips=False)
        assert torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(own)


def test_a_caller_s_no_grad_or_float64_default_changes_neither_the_run_nor_its_numbers(tmp_path):
    """A notebook's torch.no_grad() or inference_mode() cell was a deep torch traceback, and its
    torch.set_default_dtype(torch.float64) drew other seeded weights and another start under the same config.json:
    the run, get_model, observe and reconstruct now draw and differentiate as they do by default, and give the
    caller's settings back."""
    import warnings

    import targets
    from leakattack import observe
    from leakattack.attacks import get_attack
    from leakattack.channel import Channel
    from leakattack.data import get_batch, get_dataset
    from leakattack.sketch import get_sketch

    cfg = RunConfig(model="lenet", iterations=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain = run_attack(cfg, out=tmp_path / "plain", with_lpips=False)[0]
        with torch.no_grad():
            assert run_attack(cfg, out=tmp_path / "no_grad", with_lpips=False)[0].psnr == plain.psnr
        with torch.inference_mode():
            assert run_attack(cfg, out=tmp_path / "inference", with_lpips=False)[0].psnr == plain.psnr
        assert torch.is_grad_enabled()
        weights = targets.get_model("lenet", seed=0).model.state_dict()
        x, labels = get_batch(get_dataset("photos"), 0, 1)
        own = torch.get_default_dtype()
        torch.set_default_dtype(torch.float64)
        try:
            wide = run_attack(cfg, out=tmp_path / "float64", with_lpips=False)[0]
            assert (wide.psnr, wide.initial_loss) == (plain.psnr, plain.initial_loss)
            assert torch.get_default_dtype() == torch.float64  # the caller's, given back
            again = targets.get_model("lenet", seed=0)
            assert all(torch.equal(v, again.model.state_dict()[k]) for k, v in weights.items())
            with torch.no_grad():
                obs = observe(again, x, labels, Channel(get_sketch("srht", d=again.d, b=again.d // 2, seed=1)))
                result = get_attack("gradient-matching", iterations=2).reconstruct(obs)
            assert result.x.dtype == torch.float32 and len(result.losses) == 3
        finally:
            torch.set_default_dtype(own)


def test_config_json_reproduces_the_metrics(tmp_path):
    m1, folder = run_attack(_cfg(), out=tmp_path / "a", with_lpips=False)
    cfg = RunConfig.from_dict(json.loads((folder / "config.json").read_text())["run"])
    m2, _ = run_attack(cfg, out=tmp_path / "b", with_lpips=False)
    for key in ("psnr", "ssim", "mse", "final_loss", "iterations", "labels_attack"):
        assert getattr(m1, key) == getattr(m2, key), key


def test_trace_has_every_step_and_psnr_every_k(tmp_path):
    _, folder = run_attack(_cfg(), out=tmp_path / "t", with_lpips=False)
    rows = (folder / "trace.csv").read_text().strip().splitlines()
    assert rows[0] == "step,loss,psnr"
    assert len(rows) == 1 + 16  # steps 0..15
    with_psnr = [r.split(",")[0] for r in rows[1:] if r.split(",")[2]]
    assert with_psnr == ["0", "5", "10", "15"]


def test_the_library_path_gives_the_numbers_of_the_configured_run(tmp_path):
    """Victim, Channel, observe, attack and score by hand equal run_attack with the same seeds."""
    import torch

    import targets
    from leakattack import Channel, ThreatModel, assess, get_attack, get_batch, get_dataset, get_sketch, observe, score

    m, _ = run_attack(_cfg(sketch="srht"), out=tmp_path / "r", with_lpips=False)
    ds = get_dataset("digits")
    x, labels = get_batch(ds, 0)
    victim = targets.get_model("lenet", num_classes=10, in_shape=ds.in_shape, seed=0).to(dtype=torch.float64)
    obs = observe(victim, x.double(), labels, Channel(get_sketch("srht", victim.d, round(victim.d / 2), seed=1)),
                  ThreatModel())
    result = get_attack("gradient-matching", iterations=15, init_seed=2).reconstruct(obs)
    assert score(result.x.clamp(0, 1), x.double(), with_lpips=False)["psnr"] == m.psnr
    judged = assess(result, x.double(), labels, dataset=ds, with_lpips=False)  # the run's baselines and verdict too
    for key in ("psnr", "ssim", "baseline_start_psnr", "baseline_mean_psnr", "baseline_psnr", "baseline_ssim",
                "verdict", "verdict_baseline", "baseline_mean_image", "label_acc"):
        assert judged[key] == getattr(m, key), key


def test_the_python_example_runs_and_reports_its_scores():
    import subprocess
    import sys
    from pathlib import Path

    example = Path(__file__).resolve().parents[1] / "examples" / "attack_from_python.py"
    proc = subprocess.run([sys.executable, str(example), "20"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("not rebuilt: PSNR ") and "after 20 iterations" in proc.stdout
    assert "better baseline" in proc.stdout


def test_an_interrupted_write_leaves_the_earlier_run_whole_and_no_temporary_folder(tmp_path, monkeypatch):
    from leakattack import experiment

    folder = tmp_path / "run"
    m1, _ = run_attack(_cfg(), out=folder, with_lpips=False)
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    real = experiment.write_json

    def interrupted(path, obj):
        real(path, obj)
        if path.name == "config.json":
            raise KeyboardInterrupt  # Ctrl-C (or SIGTERM, which the CLI turns into the same) mid-write

    monkeypatch.setattr(experiment, "write_json", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_attack(_cfg(iterations=5), out=folder, with_lpips=False)
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    assert [p.name for p in tmp_path.iterdir()] == ["run"]


def test_a_message_with_fewer_numbers_than_unknowns_warns_and_never_claims_a_unique_match(tmp_path):
    from leakattack.errors import SettingWarning

    cfg = _cfg(sketch="srht", sketch_dim=392, iterations=300, tol=1e-9)  # b = 392 < m = 784
    with pytest.warns(SettingWarning, match="not unique"):
        m, _ = run_attack(cfg, out=tmp_path / "u", with_lpips=False)
    assert m.unique_by_count is False and m.unknowns == 784
    if m.stop_reason == "tolerance":
        assert "the match is not unique" in m.message and m.unique is False
    m2, _ = run_attack(_cfg(sketch="srht", sketch_dim=1176, iterations=5), out=tmp_path / "v", with_lpips=False)
    assert m2.unique_by_count is True
    # five steps do not converge: uniqueness was not measured, and is not claimed
    assert m2.stop_reason != "tolerance" and m2.unique is None and m2.jacobian_rank is None


def test_a_count_sketch_whose_empty_buckets_leave_fewer_numbers_than_unknowns_is_not_unique_by_count(tmp_path):
    """A count sketch's seed whose linear hash leaves most buckets empty: b = 1000 >= m = 784, but R has 714 zero
    rows, so the message holds 286 independent numbers. The run said nothing and counted it unique by count."""
    from leakattack.errors import SettingWarning

    cfg = _cfg(sketch_dim=1000, sketch_seed=208, iterations=3)
    with pytest.warns(SettingWarning, match=r"b = 1000 numbers \(286 independent: its sketch R has 714 zero rows\) "
                                            r"for m\*B = 784 unknowns"):
        m, _ = run_attack(cfg, out=tmp_path / "few", with_lpips=False)
    assert m.unique_by_count is False and m.b == 1000 and m.unknowns == 784
    m2, _ = run_attack(_cfg(sketch_dim=1000, sketch_seed=0, iterations=3), out=tmp_path / "all", with_lpips=False)
    assert m2.unique_by_count is True  # seed 0 leaves more than 784 buckets filled


def test_a_run_that_matched_the_message_at_another_image_says_a_different_image_matches():
    """Converged to the tolerance but not rebuilt (or SSIM < 0.9): the message does not determine the input there."""
    from types import SimpleNamespace as NS

    import torch

    from leakattack.experiment import uniqueness

    case = NS(obs=NS(b=1000, rank_bound=1000, batch_size=1), victim=NS(unknowns_per_example=64),
              x=torch.zeros(1, 1, 8, 8))
    p = NS(case=case, cfg=NS(label_source="dlg", tol=1e-10), attack=NS(closed_form=False))  # soft labels: no rank
    result = NS(stop_reason="tolerance", message="converged at step 40: L_R/||y||^2 = 1e-10 <= tol", labels=None)
    for verdict, ssim in (("not rebuilt", 0.62), ("rebuilt", 0.85)):
        out = uniqueness(p, result, {"verdict": verdict, "ssim": ssim})
        assert out["unique"] is False and "a different image matches the message" in out["message"]
        assert out["message"].startswith(result.message) and f"SSIM {ssim:.2f}" in out["message"]
    out = uniqueness(p, result, {"verdict": "rebuilt", "ssim": 0.99})
    assert out["unique"] is None and "message" not in out and "not measured" in out["jacobian_note"]
    out = uniqueness(p, NS(**{**vars(result), "stop_reason": "stalled"}),
                     {"verdict": "not rebuilt", "ssim": 0.1})
    assert out["unique"] is None and "message" not in out  # no match, no claim either way
    # a tolerance looser than the default lets an image near the message stop the run: no claim either way
    loose = NS(**{**vars(p), "cfg": NS(label_source="dlg", tol=1e-2)})
    out = uniqueness(loose, result, {"verdict": "not rebuilt", "ssim": 0.62})
    assert out["unique"] is None and "a different image matches" not in out["message"]
    assert "--tol 0.01, looser than its default 1e-10" in out["message"] and "--tol 0.01" in out["jacobian_note"]


def test_a_batch_with_one_image_not_its_truth_is_not_unique_whatever_the_means():
    """Fifteen exact digits and one other digit in its place: the batch's means read rebuilt at SSIM 0.94, and a
    full-rank J there shows only that the wrong point is isolated; the image not rebuilt on its own says that a
    different input matches the message."""
    from types import SimpleNamespace as NS

    from leakattack import assess, get_batch, get_dataset
    from leakattack.attacks import AttackResult
    from leakattack.experiment import uniqueness

    data = get_dataset("digits")
    x, y = get_batch(data, 0, 16)
    xh = x.clone()
    xh[15] = get_batch(data, 100, 1)[0][0]
    gn = {"kept": True, "jacobian_rank": 16 * 784, "singular_values": (1.0, 1e-3)}
    result = AttackResult(x=xh, labels=y, x0=torch.full_like(x, 0.5), losses=[1.0, 1e-12], stop_reason="tolerance",
                          iterations=100, best_step=1, gauss_newton=gn)
    judged = assess(result, x, y, dataset=data, with_lpips=False)
    assert judged["verdict"] == "rebuilt" and judged["ssim"] > 0.9 and judged["verdict_each"][15] == "not rebuilt"
    case = NS(x=x, obs=NS(b=10 ** 6, rank_bound=10 ** 6, batch_size=16), victim=NS(unknowns_per_example=784))
    p = NS(case=case, cfg=NS(tol=0.0, label_source="idlg"), attack=NS(closed_form=False))
    out = uniqueness(p, result, {key: judged[key] for key in ("verdict", "ssim", "verdict_each", "ssim_each")})
    assert out["unique"] is False and out["jacobian_rank"] == 16 * 784
    assert "(SSIM 0.94; image 15 of 16 not rebuilt on its own): a different image matches" in out["message"]


def test_the_note_of_an_image_that_is_not_its_truth_names_its_cause():
    """One image rebuilt at SSIM 0.40 that met the tolerance read "image 0 of 1 not rebuilt on its own" under the
    summary line's "rebuilt"; in a batch, an image rebuilt below SSIM 0.9 was called not rebuilt as well."""
    from types import SimpleNamespace as NS

    from leakattack.experiment import uniqueness

    result = NS(stop_reason="tolerance", message="converged", labels=None, x=None, gauss_newton=None, input_rank=None)

    def note(verdicts, ssims, ssim):
        case = NS(x=torch.zeros(1), obs=NS(rank_bound=10 ** 6, batch_size=len(verdicts)),
                  victim=NS(unknowns_per_example=10))
        p = NS(case=case, cfg=NS(tol=0.0, label_source="idlg"), attack=NS(closed_form=False))
        out = uniqueness(p, result, {"verdict": "rebuilt", "ssim": ssim, "verdict_each": verdicts,
                                     "ssim_each": ssims})
        assert out["unique"] is False
        return out["message"]

    assert "(SSIM 0.40): a different image matches" in note(["rebuilt"], [0.4], 0.4)
    said = note(["rebuilt", "not rebuilt", "rebuilt", "not rebuilt"], [1.0, 0.1, 0.5, 0.2], 0.95)
    assert ("(SSIM 0.95; images 1, 3 of 4 not rebuilt on their own; image 2 of 4 rebuilt, but below SSIM 0.9): a "
            "different image matches") in said


def test_a_match_of_a_message_the_truth_does_not_send_makes_no_claim_of_another_image():
    """A converged run at an image that is not the truth said that a different image matches the message, "a finding
    in itself", where the truth file was not the message's (its own message 1.22 of the message's norm from it)."""
    from types import SimpleNamespace as NS

    from leakattack.experiment import uniqueness

    gn = {"kept": True, "jacobian_rank": 10, "singular_values": (1.0, 1e-3)}
    result = NS(stop_reason="tolerance", message="converged", labels=torch.tensor([0]), x=None, gauss_newton=gn,
                input_rank=None)
    case = NS(x=torch.zeros(1), obs=NS(rank_bound=10 ** 6, batch_size=1), victim=NS(unknowns_per_example=10))
    p = NS(case=case, cfg=NS(tol=0.0, label_source="idlg"), attack=NS(closed_form=False))
    out = uniqueness(p, result, {"verdict": "not rebuilt", "ssim": -0.1, "truth_residual": 1.22})
    assert out["message"] == ("converged, at an image that is not the truth (SSIM -0.10); the truth does not send this "
                              "message: its own message, with its labels, through the attacker's model of the client "
                              "lies 1.22 of the message's norm from it, so the truth file, the weights, the sketch or "
                              "the labels are not those the message was sent with (or the client applied a defense "
                              "the message file does not record), and no attack rebuilds this truth from it")
    assert out["unique"] is True and out["jacobian_rank"] == 10  # the match itself is isolated
    out = uniqueness(p, result, {"verdict": "not rebuilt", "ssim": -0.1, "truth_residual": 2e-7})  # the truth's
    assert out["unique"] is False and "a different image matches the message" in out["message"]


def test_converged_gauss_newton_steps_that_ran_out_of_time_before_j_at_the_reconstruction_say_so():
    from types import SimpleNamespace as NS

    import torch

    from leakattack.experiment import uniqueness

    # 3072 unknowns: too many for the measurement itself
    obs = NS(b=7913, rank_bound=7913, batch_size=1, d=15826, forward=None)
    p = NS(case=NS(obs=obs, victim=NS(unknowns_per_example=3072), x=None), cfg=NS(label_source="idlg"))
    gn = {"kept": True, "jacobian_rank": None, "singular_values": None}
    result = NS(stop_reason="tolerance", message="converged", labels=torch.tensor([0]), x=torch.zeros(1, 3, 32, 32),
                gauss_newton=gn, input_rank=None)
    out = uniqueness(p, result, {"verdict": "rebuilt", "ssim": 1.0})
    assert out["unique"] is None and out["jacobian_rank"] is None
    assert out["jacobian_note"].startswith("not measured: the time limit or Ctrl-C came before")
    gn.update(jacobian_rank=3072, singular_values=(25.7, 1.4e-3))
    out = uniqueness(p, result, {"verdict": "rebuilt", "ssim": 1.0})
    assert out["unique"] is True and out["jacobian_note"].startswith("rank 3072 of m*B = 3072 at the reconstruction")


def test_a_closed_form_s_rank_of_its_equations_for_the_input_says_whether_the_match_is_unique():
    from types import SimpleNamespace as NS

    import torch

    from leakattack.experiment import uniqueness

    # 3072 unknowns: too many for the measurement itself
    obs = NS(b=15826, rank_bound=15826, batch_size=1, d=15826, forward=None)
    p = NS(case=NS(obs=obs, victim=NS(unknowns_per_example=3072), x=None), cfg=NS(label_source="idlg"))
    result = NS(stop_reason="tolerance", message="solved", labels=torch.tensor([0]), x=torch.zeros(1, 3, 32, 32),
                gauss_newton=None, input_rank=2639)
    out = uniqueness(p, result, {"verdict": "rebuilt", "ssim": 1.0})
    assert out["unique"] is False and out["jacobian_rank"] == 2639
    assert out["jacobian_note"] == "rank 2639 of m*B = 3072: the equations the closed form solved the input from"
    result.input_rank = 3072
    assert uniqueness(p, result, {"verdict": "rebuilt", "ssim": 1.0})["unique"] is True


def test_a_closed_form_solve_that_stalled_says_so_rather_than_that_it_did_not_converge():
    """R-GAP with ReLU rebuilt the image at 26 dB while its layers' systems were inconsistent (stop reason stalled):
    a solve does not converge or not, and its note says how it ended."""
    from types import SimpleNamespace as NS

    from leakattack.experiment import uniqueness

    obs = NS(b=15826, rank_bound=15826, batch_size=1, d=15826, forward=None)
    p = NS(case=NS(obs=obs, victim=NS(unknowns_per_example=3072), x=None), cfg=NS(label_source="idlg"),
           attack=NS(closed_form=True))
    result = NS(stop_reason="stalled", message="the layers' systems are inconsistent", input_rank=3072)
    out = uniqueness(p, result, {"verdict": "rebuilt", "ssim": 0.93})
    assert out["unique"] is None and "did not converge" not in out["jacobian_note"]
    assert out["jacobian_note"] == ("not measured: the closed-form solve ended stalled (its message says why), so it "
                                    "does not tell whether the message determines the input; the equations it solved "
                                    "the input from have rank 3072 of m*B = 3072")
    p.attack.closed_form = False  # an iterative attack that stopped short of its tolerance
    assert uniqueness(p, result, {"verdict": "rebuilt", "ssim": 0.93})["jacobian_note"] == (
        "not measured: the run did not converge")


def test_the_baselines_of_a_batch_are_its_start_and_the_mean_image_scored_after_matching():
    import torch

    from leakattack.experiment import execute, prepare
    from leakattack.metrics import MEAN_IMAGE_SAMPLE, score

    p = prepare(_cfg(batch_size=3, iterations=1))
    out = execute(p, with_lpips=False)
    m, x0 = out.metrics, out.result.x0.clamp(0, 1)
    assert x0.shape == p.x.shape
    start = score(x0, p.x, with_lpips=False)
    assert m.baseline_start_psnr == start["psnr"] and m.baseline_start_ssim == start["ssim"]
    assert score(x0.flip(0), p.x, with_lpips=False)["psnr"] == pytest.approx(start["psnr"])  # matched one-to-one
    n = len(p.dataset)
    picked = torch.linspace(0, n - 1, MEAN_IMAGE_SAMPLE).round().long()
    mean = p.dataset.images[picked].double().mean(0).expand_as(p.x)
    assert m.baseline_mean_psnr == pytest.approx(score(mean, p.x, with_lpips=False)["psnr"], abs=1e-9)
    assert m.baseline_psnr == max(m.baseline_start_psnr, m.baseline_mean_psnr)
    assert m.verdict == "not rebuilt"  # one step on a batch of three


def test_a_batch_drawn_from_one_class_is_attacked_with_its_repeated_labels(tmp_path):
    """``--batch-draw class``: the client's batch holds image I and the next images of its class, and the run
    folder's config names the draw, so ``leakattack run`` on it attacks the same batch again."""
    import torch

    from leakattack.experiment import prepare

    cfg = _cfg(dataset="photos", batch_size=4, image_index=13, batch_draw="class", iterations=2, label_mode="given")
    p = prepare(cfg)
    ds = p.dataset  # photos: labels i % 10
    assert p.labels.tolist() == [3, 3, 3, 3] and torch.equal(p.x.float(), ds.images[[13, 23, 33, 43]])
    run_attack(cfg, out=tmp_path / "run", with_lpips=False)
    saved = json.loads((tmp_path / "run" / "config.json").read_text())["run"]
    assert saved["batch_draw"] == "class"
    again = prepare(RunConfig.from_dict({k: v for k, v in saved.items() if k in RunConfig.__dataclass_fields__}))
    assert torch.equal(again.x, p.x)


def _setting_warnings(cfg) -> list[str]:
    """The SettingWarning lines :func:`leakattack.experiment.prepare` gives for ``cfg``."""
    import warnings

    from leakattack.errors import SettingWarning
    from leakattack.experiment import prepare

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        prepare(cfg)
    return [str(w.message) for w in caught if issubclass(w.category, SettingWarning)]


def test_batchnorm_in_train_mode_on_one_image_is_warned_of_before_the_attack():
    said = "on one image normalises it by its own statistics, which no training client does"
    one = [m for m in _setting_warnings(RunConfig(model="resnet20", bn="train", iterations=1, threads=1)) if said in m]
    assert len(one) == 1 and "expect 'not rebuilt'" in one[0] and "--bn auto (eval for one image" in one[0]
    for quiet in (RunConfig(model="resnet20", bn="train", batch_size=2, iterations=1, threads=1),  # a batch
                  RunConfig(model="resnet20", iterations=1, threads=1),  # --bn auto: eval for one image
                  RunConfig(model="lenet", bn="train", iterations=1, threads=1),  # no BatchNorm
                  # a protocol's client, which trains on the one image it is given
                  RunConfig(model="resnet20", protocol="fedavg", batch_size=1, iterations=1, threads=1)):
        assert not [m for m in _setting_warnings(quiet) if said in m]


def test_a_sketch_memory_budget_beside_force_blocks_is_warned_of_as_unread():
    said = "--sketch-memory 0.5 changes nothing with --sketch-param force_blocks=true"
    base = dict(model="lenet", sketch="gaussian", sketch_memory=0.5, iterations=1, threads=1)
    assert [m for m in _setting_warnings(RunConfig(**base, sketch_params={"force_blocks": True})) if said in m]
    assert not [m for m in _setting_warnings(RunConfig(**base, sketch_params={"force_blocks": False}))
                if "sketch-memory" in m]


def test_config_json_records_no_box_for_the_deep_image_prior_which_keeps_its_images_in_range(tmp_path):
    _, folder = run_attack(RunConfig(model="lenet", recipe="ig", priors=["dip"], iterations=2, threads=1),
                           out=tmp_path / "dip", with_lpips=False)
    assert json.loads((folder / "config.json").read_text())["derived"]["box"] is False
    assert RunConfig(model="lenet", recipe="ig").derived().box is True  # the recipe's box, without the prior
    assert RunConfig(model="lenet", recipe="ig", priors=["dip:0"]).derived().box is True  # the prior off


def test_config_json_records_whether_a_dense_r_was_held_or_regenerated(tmp_path):
    """The two ways give the same R and other last bits; config.json could not tell them apart."""
    held = {}
    for memory in (None, 1e-4):  # 1e-4 GB: 100 kB, short of R's b x d = 791 x 15826 float64 numbers
        cfg = RunConfig(model="lenet", sketch="gaussian", sketch_ratio=0.05, sketch_memory=memory, iterations=1,
                        threads=1)
        _, folder = run_attack(cfg, out=tmp_path / str(memory), with_lpips=False)
        held[memory] = json.loads((folder / "config.json").read_text())["derived"]["sketch_held"]
    assert held == {None: True, 1e-4: False}
    cfg = RunConfig(model="lenet", sketch="srht", iterations=1, threads=1)  # a sketch with no matrix to hold
    _, folder = run_attack(cfg, out=tmp_path / "srht", with_lpips=False)
    assert "sketch_held" not in json.loads((folder / "config.json").read_text())["derived"]


def test_a_sweep_started_under_no_grad_runs_its_points_as_a_run_would(tmp_path, capsys):
    """A sweep started from a notebook's torch.no_grad() cell ran its in-process point's utility training without
    gradients (a torch traceback); its points now run as run_attack does."""
    import warnings

    from leakattack import cli

    (tmp_path / "u.toml").write_text('[sweep]\nname = "u"\n[base]\nmodel = "lenet"\ndataset = "digits"\n'
                                     'iterations = 2\nutility = true\nutility_steps = 2\ndefense = "clip:C=1"\n'
                                     '[grid]\nimage_index = [0]\n')
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        assert cli.main(["sweep", str(tmp_path / "u.toml"), "--quiet", "--out", str(tmp_path / "u")]) == 0
    assert "1/1 points" in capsys.readouterr().out and torch.is_grad_enabled()
