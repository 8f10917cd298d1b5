"""A sweep refuses, before its first point runs and before it writes anything, every input that cannot run as meant.

Each refusal is checked through the command line: exit code 2, exactly one
line on stderr, no traceback, no new files; a point its own attack refuses is
named before any point runs.  Also: grid points with the same effective
configuration run once, one sweep at a time per folder, a results line that is
not UTF-8 does not stop a resume, and ``--dry-run`` lists every point checked
and writes nothing.
"""

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from leakattack import cli
from leakattack.sweep import FolderLock, SweepLocked, load_plan, point_key, read_results, runner
from leakattack.sweep import plan as plan_module
from leakattack.sweep.lock import LOCK_NAME, UNWRITTEN_SECONDS

ROOT = Path(__file__).resolve().parents[2]
BASE = """
[base]
model = "lenet"
dataset = "digits"
iterations = 2
"""


def files_under(folder: Path) -> set:
    return {p.relative_to(folder) for p in folder.rglob("*")}


@pytest.fixture
def no_attack(monkeypatch):
    """Any point that starts running fails the test: refusals must come before the first point."""
    monkeypatch.setattr(runner, "run_point", lambda *a, **k: pytest.fail("a point ran before the sweep was refused"))


def refuse(tmp_path, capsys, text, *needles, extra=()):
    """Run ``leakattack sweep`` on ``text`` in ``tmp_path``; assert a one-line refusal holding ``needles``."""
    cfg = tmp_path / "bad.toml"
    cfg.write_text(text)
    before = files_under(tmp_path)
    rc = cli.main(["sweep", str(cfg), "--quiet", *extra])
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and "Traceback" not in err and out == "", (rc, err)
    for needle in needles:
        assert needle in lines[0], lines[0]
    assert files_under(tmp_path) == before
    return lines[0]


@pytest.mark.parametrize("line,key", [
    ('sketch_params = "s=4"', "sketch_params"),
    ("threads = 1.5", "threads"),
    ('box = "no"', "box"),
    ("seed = 0.5", "seed"),
    ("iterations = 2.5", "iterations"),
    ("iterations = 2.0", "iterations"),
])
@pytest.mark.parametrize("table", ["base", "grid"])
def test_a_value_of_the_wrong_type_is_refused_naming_its_key(tmp_path, capsys, monkeypatch, no_attack, line, key,
                                                             table):
    monkeypatch.chdir(tmp_path)
    name, value = line.split(" = ")
    base = BASE.replace("iterations = 2\n", "")  # the line under test may set it
    text = (base + f"{line}\n[grid]\nimage_index = [0]\n" if table == "base"
            else base + f"[grid]\nimage_index = [0]\n{name} = [{value}]\n")
    named = f"[base] {key}, which every sweep point takes" if table == "base" else f"key {key}, sweep point"
    assert "not valid TOML" not in refuse(tmp_path, capsys, text, named)


@pytest.mark.parametrize("text", ["", "[sweep]\nname = 'x'\n", BASE, BASE + "[grid]\n",
                                  BASE + "[[grid]]\nseed = [0]\n[[grid]]\n"])
def test_a_sweep_file_without_grid_values_is_refused_instead_of_running_the_default_attack(
        tmp_path, capsys, monkeypatch, no_attack, text):
    monkeypatch.chdir(tmp_path)
    refuse(tmp_path, capsys, text, "grid")


def test_a_grid_given_as_a_list_is_refused_naming_the_list(tmp_path, capsys, monkeypatch, no_attack):
    # it named the list's first element ("got 1"), which reads as a value of some key
    monkeypatch.chdir(tmp_path)
    refuse(tmp_path, capsys, "grid = [0, 1]\n" + BASE, "[grid] must be a table of lists", "got grid = [0, 1]")


@pytest.mark.parametrize("text,key", [
    (BASE + "[grid]\nlr = [1.0, inf]\n", "lr"),
    (BASE + "tv = nan\n[grid]\nimage_index = [0]\n", "tv"),
    (BASE + "defense = 'gaussian:sigma={s}'\n[grid]\ns = [1e-3, inf]\n", "s"),
    (BASE + "protocol_spec = {sketch_ratio = inf}\n[grid]\nimage_index = [0]\n", "protocol_spec"),
    (BASE + "[grid]\nsketch_params = [{s = -inf}]\nsketch = ['sparse']\n", "sketch_params"),
])
def test_a_non_finite_value_is_refused_naming_its_key(tmp_path, capsys, monkeypatch, no_attack, text, key):
    monkeypatch.chdir(tmp_path)
    line = refuse(tmp_path, capsys, text, "not a finite number")
    assert f"] {key} holds" in line


def test_a_non_finite_value_no_constraint_sees_is_not_stored_as_null_and_appended_on_every_resume(tmp_path, capsys):
    cfg = tmp_path / "s.toml"
    cfg.write_text(BASE + "protocol_spec = {sketch_ratio = inf}\n[grid]\nimage_index = [0]\n")
    for _ in range(2):
        assert cli.main(["sweep", str(cfg), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name", ["../../x", "..", "a/b", "/tmp/leakattack-sweep-name-test"])
def test_a_sweep_name_that_is_a_path_is_refused_and_nothing_is_written(tmp_path, capsys, monkeypatch, no_attack, name):
    work = tmp_path / "a" / "b"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    refuse(tmp_path, capsys, f"[sweep]\nname = {json.dumps(name)}\n" + BASE + "[grid]\nimage_index = [0]\n",
           "plain folder name")
    assert not Path("/tmp/leakattack-sweep-name-test").exists()


@pytest.mark.parametrize("name", ["a\nb", "tab\there"])
def test_a_sweep_name_with_a_control_character_is_refused_as_the_names(tmp_path, capsys, monkeypatch, no_attack, name):
    """Its default folder's name holds it: the refusal blamed an --out that was not given."""
    monkeypatch.chdir(tmp_path)
    text = f"[sweep]\nname = {json.dumps(name)}\n" + BASE + "[grid]\nimage_index = [0]\n"
    line = refuse(tmp_path, capsys, text, f"sweep name {name!r} holds the control character")
    assert line.endswith("give a name without control characters, or choose the folder with --out")
    assert not line.startswith("leakattack: error: --out")
    # with --out the name names no folder: taken as it is
    assert cli.main(["sweep", str(tmp_path / "bad.toml"), "--out", str(tmp_path / "o"), "--dry-run"]) == 0


@pytest.mark.parametrize("grid,needle", [
    ("image_index = [0, 5000]", "image index 5000 out of range"),
    ("dataset = ['digits', 'mnist']", "mnist"),
    ("sketch_dim = [100, 20000]", "sketch dimension b = 20000"),
    ("batch_size = [1, 1797]\nimage_index = [0, 1]", "out of range"),
])
def test_a_value_that_could_only_fail_at_run_time_is_refused_before_the_first_point(
        tmp_path, capsys, monkeypatch, no_attack, grid, needle):
    monkeypatch.chdir(tmp_path)
    refuse(tmp_path, capsys, BASE + f"[grid]\n{grid}\n", needle, extra=["--out", str(tmp_path / "out")])


def test_a_grid_above_the_bound_is_refused_with_its_count_before_it_is_expanded(tmp_path, capsys, monkeypatch,
                                                                                no_attack):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(plan_module, "_product", lambda grid: pytest.fail("the grid was expanded"))
    many = ", ".join(map(str, range(1000)))
    refuse(tmp_path, capsys, BASE + f"[grid]\nseed = [{many}]\nmodel_seed = [{many}]\n", "1,000,000 grid points",
           f"{plan_module.MAX_POINTS:,}")


def test_grid_points_with_the_same_parameters_are_planned_once_and_counted(tmp_path):
    cfg = tmp_path / "s.toml"
    cfg.write_text(BASE + "[grid]\nseed = [0, 1, 2, 3, 4]\nmodel_seed = [0, 1, 2, 3]\nimage_index = [0, 0]\n")
    plan = load_plan(cfg)
    assert len(plan.points) == 20 == len({p["key"] for p in plan.points}) and plan.duplicates == 20
    assert plan.meta()["duplicates"] == 20


def test_an_identity_sketch_runs_once_whatever_its_ratio_and_the_summary_line_counts_duplicates(tmp_path, capsys):
    cfg = tmp_path / "s.toml"
    cfg.write_text(BASE + "[grid]\nsketch = ['none', 'srht']\nsketch_ratio = [0.25, 0.5, 1.0]\n")
    plan = load_plan(cfg)
    assert [(p["params"]["sketch"], p["params"]["sketch_ratio"]) for p in plan.points] == [
        ("none", 0.5), ("srht", 0.25), ("srht", 0.5), ("srht", 1.0)]
    assert plan.duplicates == 2
    out = tmp_path / "out"
    assert cli.main(["sweep", str(cfg), "--out", str(out), "--quiet"]) == 0
    summary = capsys.readouterr().out.strip().splitlines()
    assert len(summary) == 1 and "4/4 points" in summary[0] and "2 duplicate grid points run once" in summary[0]
    drawn = {f.stem for f in (out / "figures").iterdir() if f.is_file()} if (out / "figures").is_dir() else set()
    assert ("no figures" in summary[0]) == (not drawn) and (f"{len(drawn)} figure" in summary[0]) == bool(drawn)
    stored = read_results(out / "results.jsonl")
    assert len(stored) == 4
    # a record stored with the ratio it was asked for still counts as the one identity point
    first = {**stored[0]["params"], "sketch_ratio": 0.25}
    assert point_key(first) == stored[0]["key"]


def test_a_results_line_that_is_not_utf8_is_dropped_and_the_sweep_resumes(tmp_path, capsys, monkeypatch):
    cfg = tmp_path / "s.toml"
    cfg.write_text(BASE + "[grid]\nimage_index = [0, 1]\n")
    out = tmp_path / "out"
    assert cli.main(["sweep", str(cfg), "--out", str(out), "--quiet"]) == 0
    good = (out / "results.jsonl").read_bytes()
    lines = good.splitlines(keepends=True)
    (out / "results.jsonl").write_bytes(lines[0] + b'{"key": "\xff\xfe\xfd", "metrics": {}}\n')
    assert cli.main(["sweep", str(cfg), "--out", str(out), "--quiet"]) == 0
    assert b"\xff" not in (out / "results.jsonl").read_bytes()
    assert [r["key"] for r in read_results(out / "results.jsonl")] == [json.loads(ln)["key"] for ln in lines]


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_second_sweep_on_a_folder_in_use_is_refused_in_one_line_and_writes_nothing(tmp_path, capsys, no_attack):
    cfg = tmp_path / "s.toml"
    cfg.write_text(BASE + "[grid]\nimage_index = [0]\n")
    out = tmp_path / "out"
    out.mkdir()
    owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (out / LOCK_NAME).write_text(f"{owner.pid} {socket.gethostname()}\n")
        line = refuse(tmp_path, capsys, cfg.read_text(), f"in use by another sweep (process {owner.pid} on",
                      extra=["--out", str(out)])
        assert "sweep.lock" in line
        # a dry run writes nothing and reads the folder as it stands, saying who runs in it (it said nothing of it)
        assert cli.main(["sweep", str(cfg), "--dry-run", "--out", str(out)]) == 0
        head = capsys.readouterr().out.splitlines()[0]
        assert (f"0 already finished in {out} (in use by another sweep, process {owner.pid} on "
                f"{socket.gethostname()}: it may finish more while it runs), 1 to run") in head, head
    finally:
        owner.kill()
        owner.wait()
    assert cli.main(["sweep", str(cfg), "--dry-run", "--out", str(out)]) == 0  # its owner gone: nothing said of it
    assert f"0 already finished in {out}, 1 to run" in capsys.readouterr().out


def test_a_stale_lock_of_a_dead_process_is_taken_over_and_released_at_the_end(tmp_path, capsys):
    cfg = tmp_path / "s.toml"
    cfg.write_text(BASE + "[grid]\nimage_index = [0]\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / LOCK_NAME).write_text(f"{_dead_pid()} {socket.gethostname()}\n")
    assert cli.main(["sweep", str(cfg), "--out", str(out), "--quiet"]) == 0
    assert len(read_results(out / "results.jsonl")) == 1 and not (out / LOCK_NAME).exists()


def test_a_lock_left_empty_is_taken_over_once_its_writer_must_have_died(tmp_path):
    """A lock file created and never written (its process died in between) names no owner: refused while it may
    still be being written, taken over once it is older than UNWRITTEN_SECONDS."""
    (tmp_path / LOCK_NAME).write_text("")
    with pytest.raises(SweepLocked, match="its lock file is still being written"):
        FolderLock(tmp_path).acquire()
    old = time.time() - UNWRITTEN_SECONDS - 5
    os.utime(tmp_path / LOCK_NAME, (old, old))
    with FolderLock(tmp_path):
        assert (tmp_path / LOCK_NAME).read_text().split()[0] == str(os.getpid())
    assert not (tmp_path / LOCK_NAME).exists()


def test_the_lock_is_atomic_and_released_on_ctrl_c(tmp_path):
    with FolderLock(tmp_path) as held:
        assert (tmp_path / LOCK_NAME).read_text().split()[0] == str(os.getpid())
        with pytest.raises(SweepLocked, match=f"in use by another sweep \\(process {os.getpid()} on"):
            FolderLock(tmp_path).acquire()
        assert held.held
    assert not (tmp_path / LOCK_NAME).exists()
    with pytest.raises(KeyboardInterrupt):
        with FolderLock(tmp_path):
            raise KeyboardInterrupt
    assert not (tmp_path / LOCK_NAME).exists()


def test_a_sweep_started_while_another_runs_in_its_folder_is_refused_and_every_point_runs_once(tmp_path, capsys):
    cfg = tmp_path / "s.toml"
    cfg.write_text(BASE.replace("iterations = 2", "iterations = 300") + "[grid]\nimage_index = [0, 1, 2, 3, 4, 5]\n")
    out = tmp_path / "out"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    first = subprocess.Popen([sys.executable, "-m", "leakattack.cli", "sweep", str(cfg), "--out", str(out), "--quiet"],
                             cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    t0 = time.time()
    while not (out / LOCK_NAME).exists() and first.poll() is None and time.time() - t0 < 120:
        time.sleep(0.01)
    assert first.poll() is None, first.communicate()
    rc = cli.main(["sweep", str(cfg), "--out", str(out), "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert first.wait(timeout=300) == 0, first.communicate()
    assert rc == 2 and len(err) == 1 and "in use by another sweep" in err[0], err
    keys = [r["key"] for r in read_results(out / "results.jsonl")]
    assert len(keys) == 6 == len(set(keys)) and not (out / LOCK_NAME).exists()


@pytest.mark.parametrize("base,grid,point", [
    # a sketch the attack refuses, after one it takes: R-GAP needs b = d
    ("attack = 'rgap'\n", "sketch = ['none', 'srht']", "{'sketch': 'srht'}"),
    # an attack that refuses the sketch, beside one that takes it: the same case, checked for each attack
    ("sketch = 'srht'\n", "attack = ['gradient-matching', 'rgap']", "{'attack': 'rgap'}"),
    # an optimisation setting the attack's own check refuses (Gauss-Newton steps minimise L_R alone)
    ("refine = 'gauss-newton'\n", "priors = [[], ['tv:0.1']]\nimage_index = [0, 1]", "{'priors': ['tv:0.1'], "
                                                                                        "'image_index': 0}"),
])
def test_a_point_its_attack_refuses_is_refused_naming_it_before_any_point_runs(tmp_path, capsys, monkeypatch,
                                                                                 no_attack, base, grid, point):
    monkeypatch.chdir(tmp_path)
    refuse(tmp_path, capsys, BASE + base + f"[grid]\n{grid}\n", "cannot run here", f"(sweep point {point}",
           extra=["--out", str(tmp_path / "out")])


def test_points_of_another_victim_are_checked_against_their_own_victim(tmp_path, capsys, monkeypatch, no_attack):
    """mlp with 8 hidden units has d = 6370: b = 20000 fits its 256-unit sibling (d = 203530), not it."""
    monkeypatch.chdir(tmp_path)
    text = BASE.replace("lenet", "mlp") + "sketch_dim = 20000\n[grid]\nmodel_params = [{hidden = 256}, {hidden = 8}]\n"
    refuse(tmp_path, capsys, text, "sketch dimension b = 20000",
           "(sweep point {'model_params': {'hidden': 8}}, with [base] sketch_dim)")


def test_points_that_differ_in_images_seeds_or_optimisation_share_one_prepared_case(tmp_path, monkeypatch):
    cfg = tmp_path / "s.toml"
    cfg.write_text(BASE + "[grid]\nsketch_ratio = [0.25, 0.5]\nseed = [0, 1]\nlr = [0.1, 0.01]\n"
                          "image_index = [0, 1, 2]\n")
    prepared = []
    real = plan_module.experiment.prepare
    monkeypatch.setattr(plan_module.experiment, "prepare", lambda cfg, **kw: prepared.append(cfg) or real(cfg, **kw))
    checked = []
    real_attack_of = plan_module.experiment.attack_of
    monkeypatch.setattr(plan_module.experiment, "attack_of", lambda cfg: checked.append(cfg) or real_attack_of(cfg))
    plan = load_plan(cfg)
    assert len(plan.points) == 24
    assert sorted(c.sketch_ratio for c in prepared) == [0.25, 0.5]  # one case per sketch size
    # each attack setting's own check once (prepare() builds its case's attack too): the images and seeds of a
    # setting share its answer
    assert {(c.sketch_ratio, c.lr) for c in checked} == {(r, lr) for r in (0.25, 0.5) for lr in (0.1, 0.01)}
    assert len(checked) <= 4 + len(prepared)


def test_a_dry_run_checks_and_lists_every_point_and_writes_nothing(tmp_path, capsys, monkeypatch, no_attack):
    monkeypatch.chdir(tmp_path)  # the default output folder would be results/runs/ here
    cfg = tmp_path / "s.toml"
    cfg.write_text(BASE + "[grid]\nsketch = ['none', 'srht']\nsketch_ratio = [0.25, 0.5]\nimage_index = [0, 1]\n")
    before = files_under(tmp_path)
    assert cli.main(["sweep", str(cfg), "--dry-run", "--quiet"]) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    plan = load_plan(cfg)
    assert lines[0].startswith(f"{cfg}: 6 points, each checked") and "nothing run or written" in lines[0]
    assert "2 duplicate grid points left out" in lines[0], lines[0]
    assert len(lines) == 1 + 6 and "error" not in err and "Traceback" not in err  # warnings as a run gives them
    for i, (line, pt) in enumerate(zip(lines[1:], plan.points), 1):
        assert line.split()[:2] == [str(i), pt["key"]], line
        assert line.split()[2:] == [f"{k}={v}" for k, v in pt["grid"].items()], line
    assert files_under(tmp_path) == before


def test_a_dry_run_refuses_a_bad_point_with_the_sentence_a_run_gives(tmp_path, capsys, monkeypatch, no_attack):
    monkeypatch.chdir(tmp_path)
    text = BASE + "attack = 'rgap'\n[grid]\nsketch = ['none', 'srht']\n"
    ran = refuse(tmp_path, capsys, text, "(sweep point {'sketch': 'srht'}, with [base] attack)")
    assert refuse(tmp_path, capsys, text, extra=["--dry-run"]) == ran


def test_a_dry_run_with_out_says_which_points_are_finished_there(tmp_path, capsys, no_attack, monkeypatch):
    cfg = tmp_path / "s.toml"
    cfg.write_text(BASE + "[grid]\nimage_index = [0, 1, 2]\n")
    out = tmp_path / "out"
    out.mkdir()
    plan = load_plan(cfg)
    pt = plan.points[1]
    done = {"key": pt["key"], "index": 1, "grid": pt["grid"], "params": pt["params"], "metrics": {"psnr": 10.0}}
    (out / "results.jsonl").write_text(json.dumps(done) + "\n" + '{"key": "torn')
    before = {p: p.read_bytes() for p in out.iterdir()}
    assert cli.main(["sweep", str(cfg), "--out", str(out), "--dry-run", "--quiet"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith(f"| 1 already finished in {out}, 2 to run"), lines[0]
    assert [ln.endswith("(finished)") for ln in lines[1:]] == [False, True, False]
    assert {p: p.read_bytes() for p in out.iterdir()} == before  # the torn line is left for the run to repair


def test_a_bad_base_value_is_named_as_bases_and_a_refusal_naming_a_flag_gives_its_sweep_key(tmp_path, capsys,
                                                                                             monkeypatch, no_attack):
    """A bad [base] value was reported against an unrelated grid point; run checks name flags (--labels) whose sweep
    key is spelt otherwise (label_mode)."""
    monkeypatch.chdir(tmp_path)
    bad_base = BASE.replace("iterations = 2", 'iterations = "five"') + "[grid]\nseed = [0, 1]\n"
    line = refuse(tmp_path, capsys, bad_base, "([base] iterations, which every sweep point takes)")
    assert "seed" not in line
    text = BASE.replace("digits", "photos") + "sketch = 'uniform'\nsketch_dim = 1\n[grid]\nseed = [1]\n"
    refuse(tmp_path, capsys, text, "--labels given", "; in a sweep file --labels is label_mode)")



@pytest.mark.parametrize("line,key", [
    ('weights = "nowhere.pt"', "weights"),
    ('defense = "nosuch:x=1"', "defense"),
    ("image_index = 100000", "image_index"),
    ("sketch_dim = 100000000", "sketch_dim"),
])
def test_a_base_value_refused_when_its_case_is_checked_is_named_as_bases(tmp_path, capsys, monkeypatch, no_attack,
                                                                         line, key):
    """Checks made while a point's case is prepared (a file, a defense, an image, b against d) named the grid point
    alone, not the [base] value they refuse; a value of the grid's own that is refused stays the point's alone."""
    monkeypatch.chdir(tmp_path)
    bad = refuse(tmp_path, capsys, BASE + line + "\n[grid]\nseed = [0, 1]\n")
    assert bad.endswith(f"(sweep point {{'seed': 0}}, with [base] {key})"), bad
    grid = refuse(tmp_path, capsys, BASE + "[grid]\nimage_index = [0, 5000]\n", "image index 5000 out of range")
    assert grid.endswith("(sweep point {'image_index': 5000})")
    model = refuse(tmp_path, capsys, BASE.replace('model = "lenet"', 'model = "nofile.py:Net"') +
                   "[grid]\nseed = [0, 1]\n", "model file 'nofile.py' does not exist")
    assert model.endswith("(sweep point {'seed': 0}, with [base] model)")

# A sweep refused after its points were checked (a bad --jobs, a bad SLURM option, a folder another sweep holds)
# prints its refusal alone, without the run warnings of its points (``refuse`` wants one line); a [grid]
# placeholder named like a column that summary.csv computes, or holding lists or tables, is refused in one sentence.

#: a sweep whose points warn (a noise of std 0 changes nothing) when they are checked
WARNS = """
[base]
model = "lenet"
dataset = "digits"
iterations = 2
defense = "gaussian:sigma=0.0@before_sketch"
[grid]
image_index = [0]
"""


def test_the_points_warn_when_the_sweep_is_not_refused(tmp_path, capsys, no_attack):
    (tmp_path / "s.toml").write_text(WARNS)
    assert cli.main(["sweep", str(tmp_path / "s.toml"), "--quiet", "--dry-run"]) == 0
    assert "changes nothing" in capsys.readouterr().err


@pytest.mark.parametrize("args,needle", [
    (["--jobs", "0"], "--jobs must be at least 1"),
    (["--backend", "slurm", "--time", "0"], "--time"),
    (["--backend", "slurm", "--mem", "-1"], "--mem"),
])
def test_a_bad_option_is_refused_without_the_points_warnings(tmp_path, capsys, monkeypatch, no_attack, args, needle):
    monkeypatch.chdir(tmp_path)
    refuse(tmp_path, capsys, WARNS, needle, extra=("--out", str(tmp_path / "out"), *args))


def test_a_folder_another_sweep_holds_is_refused_without_the_points_warnings(tmp_path, capsys, no_attack):
    out = tmp_path / "out"
    out.mkdir()
    owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (out / LOCK_NAME).write_text(f"{owner.pid} {socket.gethostname()}\n")
        refuse(tmp_path, capsys, WARNS, f"in use by another sweep (process {owner.pid}", extra=("--out", str(out)))
    finally:
        owner.kill()
        owner.wait()


@pytest.mark.parametrize("name", ["n", "d", "b", "m", "b_over_m", "psnr_mean", "ssim_std", "rebuilt",
                                  "failed_search"])
def test_a_placeholder_named_like_a_summary_column_is_refused(tmp_path, capsys, monkeypatch, no_attack, name):
    monkeypatch.chdir(tmp_path)
    text = WARNS.replace("sigma=0.0", f"sigma={{{name}}}").replace("image_index = [0]", f"{name} = [0.0, 0.1]")
    refuse(tmp_path, capsys, text, f"[grid] {name}", "summary.csv", extra=("--out", str(tmp_path / "out")))


@pytest.mark.parametrize("value", ["[1, 2]", "{a = 1}"])
def test_a_placeholder_value_that_is_a_list_or_table_is_refused_naming_it(tmp_path, capsys, monkeypatch, no_attack,
                                                                          value):
    monkeypatch.chdir(tmp_path)
    text = WARNS.replace("sigma=0.0", "sigma={s}").replace("image_index = [0]", f"s = [0.1, {value}]")
    refuse(tmp_path, capsys, text, "[grid] s", "placeholder", extra=("--out", str(tmp_path / "out")))


def test_a_number_written_as_an_integer_and_as_a_float_is_one_point(tmp_path, capsys, no_attack):
    """lr = 1 and lr = 1.0 ran the same attack twice, as two points of the summary."""
    cfg = tmp_path / "s.toml"
    cfg.write_text(BASE + "optimizer = 'adam'\n[grid]\nlr = [1, 1.0, 0.5]\n")
    assert cli.main(["sweep", str(cfg), "--dry-run", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "2 points" in out and "1 duplicate grid point left out" in out and "lr=1.0" not in out


def test_a_placeholder_may_be_named_in_any_script_and_one_that_is_no_name_is_said(tmp_path, capsys, no_attack):
    """{σ} in [base] with [grid] "σ" was refused as "neither a run parameter nor a {placeholder} in [base]"."""
    text = BASE + "defense = 'gaussian:sigma={σ}'\n[grid]\n\"σ\" = [0.001, 0.01]\n"
    out = _dry_run(tmp_path, capsys, text).out
    assert "2 points" in out and "σ=0.01" in out
    refuse(tmp_path, capsys, BASE + "defense = 'gaussian:sigma={s-1}'\n[grid]\n\"s-1\" = [0.001]\n",
           "[grid] key 's-1' is not a placeholder's name, so '{s-1}' in [base] is kept as text: name a placeholder "
           "with letters, digits and _, not starting with a digit")


def test_negative_zero_and_zero_are_one_point(tmp_path, capsys, no_attack):
    """tv = [-0.0, 0.0] gave two points of one key, both run, the second overwriting the first's files; sigma of a
    defense and tol as -0.0 and 0.0 gave two points of one run."""
    for grid in ("tv = [-0.0, 0.0, 0.5]", "tol = [-0.0, 0.0, 1e-9]"):
        out = _dry_run(tmp_path, capsys, BASE + f"[grid]\n{grid}\n").out
        assert "2 points" in out and "1 duplicate grid point left out" in out, out
    text = BASE + "defense = 'gaussian:sigma={s}'\n[grid]\ns = [-0.0, 0.0, 0.1]\n"
    out = _dry_run(tmp_path, capsys, text).out
    assert "2 points" in out and "1 duplicate grid point left out" in out, out


def test_a_defense_written_in_other_words_and_a_ratio_beside_a_dimension_are_one_point(tmp_path, capsys, no_attack):
    """Four spellings of one Gaussian noise, and "" beside "none", ran 6 identical attacks as 6 points; a
    sketch_dim beside two ratios ran b = sketch_dim twice."""
    cfg = tmp_path / "s.toml"
    cfg.write_text(BASE + "[grid]\ndefense = ['gaussian:sigma=0.001', 'gaussian:sigma=1e-3', "
                          "'gaussian:sigma=0.001@before_sketch', 'gaussian:sigma=0.0010', '', 'none']\n")
    assert cli.main(["sweep", str(cfg), "--dry-run", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "2 points" in out and "4 duplicate grid points left out" in out
    cfg.write_text(BASE + "sketch_dim = 100\n[grid]\nsketch_ratio = [0.25, 0.5]\n")
    assert cli.main(["sweep", str(cfg), "--dry-run", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "1 point," in out and "1 duplicate grid point left out" in out


def test_the_optimisers_default_step_size_written_out_is_one_point(tmp_path, capsys, no_attack):
    """lr unset (L-BFGS's default 1.0) and lr = 1.0 ran the same attack twice."""
    text = BASE + "optimizer = 'lbfgs'\n[[grid]]\nlr = [1.0, 0.5]\n[[grid]]\nseed = [0]\n"
    out = _dry_run(tmp_path, capsys, text).out
    assert "2 points" in out and "1 duplicate grid point left out" in out


def _dry_run(tmp_path, capsys, text: str):
    """``leakattack sweep FILE --dry-run --quiet`` of a sweep file holding ``text``: its captured output."""
    cfg = tmp_path / "s.toml"
    cfg.write_text(text)
    assert cli.main(["sweep", str(cfg), "--dry-run", "--quiet"]) == 0
    return capsys.readouterr()


def test_a_protocols_points_that_differ_only_in_their_images_are_one_run_with_a_warning(tmp_path, capsys, no_attack):
    """A protocol's client draws its own images: image_index = [0, 1, 2] attacked the same message three times."""
    io = _dry_run(tmp_path, capsys, "[base]\nmodel = 'lenet'\ndataset = 'digits'\nprotocol = 'fedavg'\niterations = 2\n"
                                    "[grid]\nimage_index = [0, 1, 2]\nbatch_draw = ['consecutive', 'random']\n")
    assert "1 point," in io.out and "5 duplicate grid points left out" in io.out
    assert "grid keys batch_draw, image_index are not read by a protocol's points" in io.err, io.err


def test_a_bad_protocol_setting_is_named_as_the_protocol_spec_table_that_holds_it(tmp_path, capsys, no_attack):
    """protocol_spec = {batch_size = 0} in [base] was named as the first grid point only."""
    text = BASE + "protocol = 'fedavg'\nprotocol_spec = {batch_size = 0}\n[grid]\nseed = [0, 1]\n"
    refuse(tmp_path, capsys, text, "client batch size must be an integer of at least 1, got 0 ([base] protocol_spec, "
                                   "which every sweep point takes)")
    text = BASE + "protocol = 'fedavg'\n[grid]\nprotocol_spec = [{batch_size = 4}, {batch_size = 0}]\n"
    refuse(tmp_path, capsys, text, "(key protocol_spec, sweep point {'protocol_spec': {'batch_size': 0}})")


def test_threads_auto_in_a_sweep_file_is_the_runs_own_choice_as_on_the_command_line(tmp_path, capsys, no_attack):
    """`threads = "auto"` was refused ("must be an integer of at least 1"), where --threads auto is the default."""
    from leakattack.config import RunConfig

    cfg = tmp_path / "s.toml"
    cfg.write_text(BASE + "threads = 'auto'\n[grid]\nimage_index = [0]\n")
    assert cli.main(["sweep", str(cfg), "--dry-run", "--quiet"]) == 0
    assert "1 point" in capsys.readouterr().out
    assert RunConfig.from_dict({"threads": "AUTO"}).threads is None
    # a value that is no count says that auto is taken too (it said "an integer of at least 1")
    cfg.write_text(BASE + "threads = 'abc'\n[grid]\nimage_index = [0]\n")
    assert cli.main(["sweep", str(cfg), "--dry-run", "--quiet"]) == 2
    assert "threads must be a count of threads or auto, got 'abc'" in capsys.readouterr().err


def test_a_sweep_name_too_long_for_its_default_folder_names_the_name_not_out(tmp_path, capsys, no_attack, monkeypatch):
    """A 300-byte [sweep] name was refused as "--out names 'sweep-aaaa...'" though no --out was given."""
    monkeypatch.chdir(tmp_path)
    cfg = tmp_path / "s.toml"
    cfg.write_text(f"[sweep]\nname = '{'a' * 300}'\n" + BASE + "[grid]\nimage_index = [0]\n")
    assert cli.main(["sweep", str(cfg), "--dry-run", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "sweep name 'aaaa" in err and "has 300 bytes" in err and "--out names" not in err
    assert cli.main(["sweep", str(cfg), "--dry-run", "--quiet", "--out", str(tmp_path / "out")]) == 0


@pytest.mark.parametrize("table,named", [("model_params = {width = 'abc'}", "[base] model_params"),
                                         ("sketch_params = {nonsense = 1}", "[base] sketch_params"),
                                         ("attack_params = {nonsense = 1}", "[base] attack_params")])
def test_a_refused_base_table_is_named(tmp_path, capsys, no_attack, table, named):
    """model_params = {width = ...} was blamed on [base] model, the others on the point alone."""
    cfg = tmp_path / "s.toml"
    cfg.write_text(BASE + table + "\n[grid]\nseed = [0]\n")
    assert cli.main(["sweep", str(cfg), "--dry-run", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"with {named})" in err and "[base] model)" not in err


@pytest.mark.parametrize("text,said", [
    ("model_params = {act = '{a}'}\n[grid]\na = ['relu']\n",
     "[base] model_params writes {a} inside a table, and placeholders are filled in strings and lists only: give the "
     "tables as [grid] values, model_params = [{...}, {...}]"),
    ("protocol = 'fedavg'\n[grid]\nclients = [3]\n",
     "clients is a protocol's setting: give it in protocol_spec = {clients = ...}, in [base] or as a [grid] list"),
])
def test_an_unknown_grid_key_says_what_it_may_have_meant(tmp_path, capsys, no_attack, text, said):
    """A placeholder inside a table and a protocol's setting were refused with no hint of either."""
    cfg = tmp_path / "s.toml"
    cfg.write_text(BASE + text)
    assert cli.main(["sweep", str(cfg), "--dry-run", "--quiet"]) == 2
    assert said in capsys.readouterr().err
