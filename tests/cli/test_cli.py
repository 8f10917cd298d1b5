"""The command line: a run writes its folder; bad input gives one line and exit code 2."""

import json
import subprocess
import sys

import pytest

from leakattack import cli

RUN_FILES = {"config.json", "metrics.json", "trace.csv", "reconstruction.png", "convergence.png"}
METRIC_KEYS = {"mse", "psnr", "ssim", "lpips", "lpips_note", "label_acc", "final_loss", "iterations", "wall_s", "d",
               "b"}


def test_config_records_the_prior_weights_and_batchnorm_mode_the_run_used(tmp_path, capsys):
    out = tmp_path / "run"
    assert cli.main(["run", "--model", "resnet20", "--prior", "bn:1e-4", "--prior", "bn", "--iterations", "1",
                     "--out", str(out), "--quiet", "--no-lpips", "--threads", "1"]) == 0
    derived = json.loads((out / "config.json").read_text())["derived"]
    assert derived["priors"] == {"bn": 0.01} and derived["bn_mode"] == "eval"  # --bn auto: eval for one image


def test_run_writes_every_file_of_the_run_folder(tmp_path, capsys):
    out = tmp_path / "run"
    rc = cli.main(["run", "--model", "lenet", "--sketch", "countsketch", "--dataset", "digits",
                   "--iterations", "5", "--out", str(out), "--quiet", "--no-lpips"])
    assert rc == 0
    assert RUN_FILES <= {p.name for p in out.iterdir()}
    m = json.loads((out / "metrics.json").read_text())
    assert METRIC_KEYS <= set(m)
    assert m["lpips"] is None and m["lpips_note"]
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["run"]["sketch"] == "countsketch" and cfg["derived"]["b"] == m["b"]
    # every setting the run derived, the noise seed and the time limit (none for dlg's steps) among them
    assert cfg["derived"]["noise_seed"] == 3 and cfg["derived"]["time_limit"] is None
    assert cfg["derived"]["priors"] == {} and cfg["derived"]["bn_mode"] is None  # lenet has no BatchNorm
    assert "torch" in cfg["environment"]
    summary = capsys.readouterr().out.strip().splitlines()[-1]
    assert summary.startswith(f"{m['verdict']} ") and str(out) in summary
    assert f"PSNR {m['psnr']:.2f} dB" in summary
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]


def test_a_pruned_run_records_each_start_s_stop_and_the_report_counts_the_pruned(tmp_path, capsys):
    out = tmp_path / "run"
    assert cli.main(["run", "--model", "lenet", "--dataset", "digits", "--optimizer", "adam", "--iterations", "16",
                     "--restarts", "4", "--prune-restarts", "--out", str(out), "--quiet", "--no-lpips"]) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert sorted(m["restart_stops"]) == ["iterations", "pruned", "pruned", "pruned"]
    # the summary line says so too, where only metrics.json had
    assert "16 it (iterations, 3 of 4 starts pruned)" in capsys.readouterr().out
    # LeNet's batch agrees with the starts one by one; on a busy machine it may time slower than them
    assert m["restart_path"] == "batched" or m["restart_path"].startswith("one by one: the batched pass took ")
    assert json.loads((out / "config.json").read_text())["run"]["prune_restarts"] is True
    page = tmp_path / "report.html"
    assert cli.main(["report", str(out), "--out", str(page)]) == 0
    assert "4 starts (3 pruned by halving)" in page.read_text(encoding="utf-8")


BAD = [
    (["--model", "resnet"], "unknown model"),
    (["--sketch", "fourier"], "unknown sketch"),
    (["--dataset", "imagenet"], "unknown dataset"),
    (["--optimizer", "sgd2"], "unknown optimizer"),
    (["--sketch-dim", "0"], "sketch dimension"),
    (["--sketch-dim", "10000000"], "sketch dimension"),
    (["--sketch-ratio", "0"], "sketch ratio"),
    (["--sketch-ratio", "0.00001"], "sketch dimension b = 0 (the sketch ratio 1e-05 times d) must lie in [1, d] "
                                    "with d = 15826 for model 'lenet': the ratio must be at least 1/(2d) = 3.16e-05, "
                                    "which rounds to b = 1"),
    (["--model-param", "width"], "argument --model-param: 'width' must look like NAME=VALUE"),
    (["--image-size", "10"], "image size"),
    (["--sketch-ratio", "1.5"], "sketch ratio"),
    (["--iterations", "0"], "iterations"),
    (["--image-index", "100000"], "out of range"),
    (["--dataset", "cifar10", "--data-root", "{tmp}/nothing"], "nothing"),
    (["--iterations", "many"], "invalid int"),
]


@pytest.mark.parametrize("args,needle", BAD)
def test_bad_input_gives_one_line_exit_2_and_no_folder(tmp_path, capsys, args, needle):
    out = tmp_path / "run"
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    rc = cli.main(["run", *args, "--out", str(out), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert needle in lines[0]
    assert not out.exists()


def test_bad_input_from_the_shell_has_no_traceback(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "leakattack.cli", "run", "--sketch-ratio", "2", "--out", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "leakattack: error: sketch ratio must lie in (0, 1], got 2.0"
    assert not out.exists()


def test_list_names_what_every_registry_accepts(capsys):
    import defenses
    import targets
    from leakattack.attacks import list_attacks, list_optimizers, list_priors, list_recipes
    from leakattack.data import list_datasets
    from leakattack.sketch import list_sketches
    from leakattack.sweep import list_backends
    from targets.protocols import list_protocols

    assert cli.main(["list"]) == 0
    shown = {head.strip(): names.strip().split(", ") for head, names in
             (line.split(":", 1) for line in capsys.readouterr().out.strip().splitlines())}
    assert shown == {"models": targets.list_models(), "sketches": list_sketches(), "datasets": list_datasets(),
                     "attacks": list_attacks(), "recipes": list_recipes(), "priors": list_priors(),
                     "optimizers": list_optimizers(), "defenses": defenses.list_defenses(),
                     "protocols": list_protocols(), "sweep backends": list_backends()}


def test_help_documents_defaults():
    proc = subprocess.run([sys.executable, "-m", "leakattack.cli", "run", "--help"], capture_output=True, text=True)
    assert proc.returncode == 0
    for flag in ("--sketch-ratio", "--optimizer", "--iterations", "--lr", "--seed", "--image-index", "--device"):
        assert flag in proc.stdout
    assert "default" in proc.stdout


def test_list_names_what_a_recipe_fills_and_what_a_defense_takes(capsys):
    import defenses
    from leakattack.attacks.recipes import get_recipe

    assert cli.main(["list", "--recipe", "ig"]) == 0
    head, fills = capsys.readouterr().out.strip().splitlines()
    ig = get_recipe("ig")
    assert head.startswith("ig: Inverting Gradients") and fills.startswith("  fills: optimizer adam (step 0.025); ")
    for shown in (f"{ig.iterations:,} steps or 8 minutes", "objective cosine", "schedule step", "signed steps",
                  f"TV {ig.tv:g} (", "0.8 from 8 examples", f"{ig.trained_tv:g} for one example at loaded --weights",
                  "box [0, 1]", "dtype float32"):
        assert shown in fills, shown
    for name in defenses.list_defenses():
        assert cli.main(["list", "--defense", name]) == 0
        lines = capsys.readouterr().out.strip().splitlines()
        cls = defenses.registry.defense_class(name)
        assert lines[0].startswith(f"{name}: ") and "no description" not in lines[0] and "``" not in lines[0]
        assert [ln.split("=")[0].strip() for ln in lines[1:-1]] == list(cls.schema)
        assert lines[-1] == f"  placements: {', '.join(cls.placements)} (default {cls.default_placement})"
    from targets.protocols import list_protocols, protocol_class

    for name in list_protocols():
        assert cli.main(["list", "--protocol", name]) == 0
        lines = capsys.readouterr().out.strip().splitlines()
        reads = protocol_class(name).reads
        assert lines[0].startswith(f"{name}: ") and "no description" not in lines[0] and lines[0].endswith(".")
        assert "--clients" in lines[1] and len(lines) == 2 + len(reads), lines
        assert [ln.split()[0] for ln in lines[2:]] == ["--" + k.replace("_", "-").replace("sketch-params",
                                                                                           "sketch-param")
                                                       for k in reads]
        # every flag listed is train's, but --sketch-param, which says it is run's alone
        train_flags = {o for act in cli.parser.build_parser()._subparsers._group_actions[0].choices["train"]._actions
                       for o in act.option_strings}
        for ln in lines[2:]:
            assert ln.split()[0] in train_flags or ln.endswith("(leakattack run only: train takes the sketch's "
                                                               "defaults)"), ln
    for flag, name in (("--recipe", "nope"), ("--defense", "nope"), ("--protocol", "nope")):
        assert cli.main(["list", flag, name]) == 2
        assert capsys.readouterr().err.strip().startswith("leakattack: error: unknown ")


@pytest.mark.parametrize("flag", ["--model", "--attack", "--recipe", "--defense", "--protocol"])
def test_list_refuses_an_empty_name_as_run_does(flag, capsys):
    """list --model '' printed the whole overview with exit 0, as if the flag were not given."""
    assert cli.main(["list", flag, ""]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("leakattack: error: unknown ") and "''" in err[0], err


def test_a_stalled_run_whose_gauss_newton_steps_were_not_kept_says_why(tmp_path, capsys):
    """The line said 'stalled, Gauss-Newton not converged' and the note explaining it was in metrics.json only."""
    out = tmp_path / "run"
    assert cli.main(["run", "--model", "lenet", "--iterations", "30", "--optimizer", "adam", "--lr", "0.01",
                     "--stall-window", "3", "--threads", "1", "--quiet", "--no-lpips", "--out", str(out)]) == 0
    text = capsys.readouterr()
    m = json.loads((out / "metrics.json").read_text())
    # eight Adam steps from the start leave the steps far from the image (about 9 dB): they cannot converge there
    assert m["stop_reason"] == "stalled" and m["gauss_newton"] and not m["gauss_newton"].get("kept"), m["message"]
    assert "Gauss-Newton not converged" in text.out
    assert f"note: {m['message']}" in text.err


def test_list_protocol_says_which_common_settings_a_protocol_holds_at_their_defaults(capsys):
    """safl refuses --global-lr away from 1 and compsgd --local-steps away from 1, where list said each read them."""
    assert cli.main(["list", "--protocol", "safl"]) == 0
    line = capsys.readouterr().out.splitlines()[1]
    assert "--global-lr at its default 1.0 only" in line and "--local-lr, --client-batch" in line
    assert "--global-lr," not in line
    assert cli.main(["list", "--protocol", "compsgd"]) == 0
    line = capsys.readouterr().out.splitlines()[1]
    assert "--local-steps at its default 1 only" in line and "--local-epochs at its default 0 only" in line
    assert cli.main(["list", "--protocol", "fedavg"]) == 0
    assert "only" not in capsys.readouterr().out.splitlines()[1]


def test_every_subcommand_s_help_has_a_description():
    """`leakattack CMD --help` says what CMD does under its usage, for every subcommand."""
    import argparse

    from leakattack.cli.parser import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    missing = [name for name, p in sub.choices.items() if not (p.description or "").strip()]
    assert not missing, missing
