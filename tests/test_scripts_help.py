"""Every script and benchmark answers ``--help`` with its usage and does nothing else (shell scripts also ``-h``).

A script that parses its arguments after it has started its work (or imported a package this environment
lacks) would run, crash or rewrite committed results on ``--help``.  The scripts run one after another in one
interpreter (torch is imported once), each as ``__main__`` with its own folder first on sys.path, in an empty
working folder that must stay empty.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(p for folder in ("scripts", "benchmarks") for p in (ROOT / folder).glob("*.py")
                 if not p.name.startswith("_"))

DRIVER = r"""
import contextlib, io, json, runpy, sys
found = {}
for path in sys.argv[1:]:
    folder = path.rsplit("/", 1)[0]
    sys.path.insert(0, folder)
    sys.argv = [path, "--help"]
    out, err = io.StringIO(), io.StringIO()
    code = "returned without exiting"
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            runpy.run_path(path, run_name="__main__")
    except SystemExit as e:
        code = e.code
    except BaseException as e:
        code = f"raised {e!r}"
    finally:
        sys.path.remove(folder)
    found[path] = [code, out.getvalue(), err.getvalue()[-500:]]
sys.stdout.write(json.dumps(found))
"""


def test_there_are_scripts_to_check():
    names = {p.name for p in SCRIPTS}
    assert {"bn_prior_table.py", "deep_step.py", "breaching_ig.py"} <= names


def test_every_script_answers_help_and_does_nothing_else(tmp_path):
    done = subprocess.run([sys.executable, "-c", DRIVER, *map(str, SCRIPTS)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout)
    wrong = {Path(p).name: (code, err) for p, (code, out, err) in found.items()
             if code not in (0, None) or "usage:" not in out}
    assert not wrong, wrong
    assert list(tmp_path.iterdir()) == [], "a script wrote files on --help"
    # the description is the docstring's first paragraph, not its first line cut mid-sentence
    cut = {Path(p).name: out.split("\n\n")[1] for p, (code, out, err) in found.items()
           if out.count("\n\n") >= 2 and not out.split("\n\n")[1].rstrip().endswith((".", ":", ")"))}
    assert not cut, cut


SHELL_SCRIPTS = sorted((ROOT / "scripts").glob("*.sh"))


def test_every_shell_script_answers_help_and_does_nothing_else(tmp_path):
    assert SHELL_SCRIPTS
    for script in SHELL_SCRIPTS:
        for flag in ("--help", "-h"):
            done = subprocess.run(["sh", str(script), flag], cwd=tmp_path, capture_output=True, text=True,
                                  timeout=60, env={"PATH": "/usr/bin:/bin", "OUT": str(tmp_path / "out")})
            assert done.returncode == 0, (script.name, done.stderr)
            assert f"scripts/{script.name}" in done.stdout, (script.name, done.stdout)
            assert not done.stdout.startswith("#"), done.stdout
            assert list(tmp_path.iterdir()) == [], f"{script.name} {flag} wrote files"


def test_breaching_script_refuses_a_prior_scale_without_the_attack_that_has_the_prior(tmp_path):
    """--deep-inversion sets the prior of breaching's see-through-gradients attack: with its Inverting Gradients
    (the default --attack) it is refused in one sentence, before breaching is imported or anything runs."""
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "breaching_ig.py"), "photos.pt",
                           "--deep-inversion", "0.1"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    assert "--deep-inversion sets the prior of --attack seethroughgradients" in done.stderr
    assert "Traceback" not in done.stderr
    assert list(tmp_path.iterdir()) == []


def _repository_paths(path: Path) -> list[str]:
    """String constants of a script (docstrings left out) that name a file or folder of the repository relative to
    the working folder: ``examples/...``, ``results/...``, ``docs/...``, ``scripts/...``, ``benchmarks/...``."""
    import ast
    import re

    tree = ast.parse(path.read_text())
    docstrings = {id(body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                  and (body := node.body) and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)}
    named = re.compile(r"^(examples|results|docs|scripts|benchmarks)/")
    return [node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and id(node) not in docstrings and named.match(node.value)]


def test_scripts_find_the_repository_s_files_from_any_working_folder():
    """A script that names the repository's files by relative paths moves to the repository first: run from another
    folder it would miss them (``examples/relu_models.py``) or write an empty table beside the user's files."""
    relative = {p.name: found for p in SCRIPTS if (found := _repository_paths(p))
                and "os.chdir(Path(__file__).resolve().parents[1])" not in p.read_text()}
    assert not relative, relative


def test_the_protocols_summary_from_another_folder_reads_the_repository_s_runs(tmp_path):
    """Run from an empty folder, the summary reads and writes the repository's results/protocols/: a copy of the
    script in a repository without training runs says so in one line and writes nothing."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    (repo / "scripts" / "protocols_summarise.py").write_text((ROOT / "scripts" / "protocols_summarise.py").read_text())
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = subprocess.run([sys.executable, str(repo / "scripts" / "protocols_summarise.py")], cwd=elsewhere,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        f"protocols_summarise.py: error: no training runs under {repo / 'results' / 'protocols' / 'train'} "
        "(sh scripts/protocols_train.sh makes them)"]
    assert list(elsewhere.iterdir()) == [] and not (repo / "results").exists()


def test_every_script_ends_in_one_sentence_on_bad_input():
    """Each script's and benchmark's entry point is :func:`leakattack.script.script_main` (a leakattack refusal, a
    missing file or a failed run: one line and exit status 2); the modules the scripts share have none."""
    without = [p.name for p in SCRIPTS if "script_main(main)" not in p.read_text()
               and p.name not in ("breaching_ig.py", "protocols_summarise.py")]  # top-level scripts with their own
    assert not without, without


@pytest.mark.parametrize("argv, said", [
    (["transition_table.py", "NOWHERE"], "NOWHERE/results.jsonl does not exist"),
    (["april_sketched_blocks.py", "--run", "NOWHERE"], "NOWHERE/config.json does not exist"),
    (["relu_jumps.py", "--weights", "NOWHERE/w.pt"], "weights file 'NOWHERE/w.pt' does not exist"),
    (["label_scale.py", "--batch-sizes", "4,0"], "argument --batch-sizes: 0 is below 1"),
    (["label_scale.py", "--clips", "1,-1"], "argument --clips: -1 is not a positive finite number"),
    (["rgap_margins.py", "--images", "0"], "argument --images: 0 is below 1"),
    (["analytic_batches.py", "--unsketched", "4y"], "argument --unsketched: '4y' is not BxH"),
    (["bn_running_stats.py", "--out", "s.pt", "--first", "5", "--last", "2"], "--first 5 --last 2: give"),
    (["../benchmarks/deep_step.py", "--models", "lenet", "bogus", "--steps", "1"], "unknown model 'bogus'"),
    (["../benchmarks/attack_speed.py", "--only", "lbfgs", "--rounds", "0"], "argument --rounds: 0 is below 1"),
    (["bn_prior_table.py", "--out", "NOWHERE", "--rows", "("], "argument --rows: '(' is not a regular expression"),
    (["../examples/attack_from_python.py", "0"], "argument iterations: 0 is below 1"),
    (["../examples/capture_client.py", "--sketch", "bogus", "--out", "NOWHERE"], "unknown sketch 'bogus'"),
    (["../examples/capture_client.py", "--index", "999", "--out", "NOWHERE"], "image index 999 out of range"),
])
def test_a_script_given_bad_input_says_so_in_one_line_with_exit_status_2(tmp_path, argv, said):
    nowhere = str(tmp_path / "nowhere")
    args = [a.replace("NOWHERE", nowhere) for a in argv]
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / args[0]), *args[1:]], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 2 and last.startswith(f"{Path(argv[0]).name}: error: ")
    assert said.replace("NOWHERE", nowhere) in last
    assert "Traceback" not in done.stderr and done.stdout == ""


def test_the_transition_table_tells_apart_the_recipes_a_grid_names(tmp_path):
    """Points that differ only in the recipe their grid names (examples/attack_families.toml's batches of four) are
    two rows, each named by it; a grid that names none keeps the attack's name alone."""
    records = []
    for recipe, ssim in ((None, 0.5), ("ig", 0.95)):
        for b in (100, 200):
            grid = {"model": "mlp", "sketch_dim": b, **({"recipe": recipe} if recipe else {})}
            records.append({"grid": grid, "params": {"model": "mlp", "dataset": "digits", "attack": "gradient-matching",
                                                     "batch_size": 4, "priors": []},
                            "metrics": {"ssim": ssim, "psnr": 20.0, "b": b, "m": 100, "wall_s": 1.0}})
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "transition_table.py"), str(tmp_path)],
                          capture_output=True, text=True, timeout=120, check=True)
    rows = [line for line in done.stdout.splitlines() if line.startswith("| mlp")]
    assert [r.split(" | ")[1] for r in rows] == ["gradient-matching", "gradient-matching (ig recipe)"]
    assert "| none ≤ 2 |" in rows[0] and "| 1 | 0.950 / 20.0 dB |" in rows[1]


def test_the_capture_example_refuses_an_out_that_is_a_file_before_any_work(tmp_path):
    """--out naming a file ended in a FileExistsError traceback (exit 1) after the gradient was computed."""
    (tmp_path / "afile").write_text("")
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "capture_client.py"), "--out",
                           str(tmp_path / "afile")], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "Traceback" not in done.stderr and done.stdout == ""
    assert done.stderr.strip() == (f"capture_client.py: error: --out '{tmp_path / 'afile'}' is a file, not a folder "
                                   "for message.pt, weights.pt and truth.pt")


def test_the_scripts_parser_shows_every_options_default_and_the_whole_first_paragraph():
    """Options without help showed no default in --help; descriptions were the docstring's first line."""
    from leakattack.script import count, parser

    ap = parser("Train a victim on the photos, a sentence that\n   wraps onto a second line.\n\nMore.")
    ap.add_argument("--steps", type=count, default=200)
    ap.add_argument("--lr", type=float, default=0.05, help="step size")
    ap.add_argument("--tv", type=float, default=0.1, help="TV weight (default 0.1)")
    ap.add_argument("--quiet", action="store_true", help="no bars")
    ap.add_argument("--out", help="a file")
    ap.add_argument("--seed", type=int, default=0)  # 0 is a default, not "none"
    ap.add_argument("--ratios", type=lambda t: [float(v) for v in t.split(",")], default=[0.5, 0.25])
    ap.add_argument("--models", nargs="+", default=["lenet", "resnet20"])
    ap.add_argument("--model-param", action="append", default=[])
    ap.add_argument("--clips", default="1,1e-3", help="thresholds (the default victim's norm is 24)")
    text = " ".join(ap.format_help().split())
    assert "--seed SEED (default: 0)" in text and "norm is 24) (default: 1,1e-3)" in text
    assert "(default: 0.5,0.25)" in text and "(default: lenet resnet20)" in text and "[]" not in text
    assert "Train a victim on the photos, a sentence that wraps onto a second line." in text and "More." not in text
    assert "--steps STEPS (default: 200)" in text and "--lr LR step size (default: 0.05)" in text
    assert "TV weight (default 0.1) " in text and "(default: 0.1)" not in text  # said once
    assert "no bars --out" in text and "(default: False)" not in text and "(default: None)" not in text
