"""The benchmarks and scripts check their counts and names before they measure, train or write anything: a bad
value is one line, ``NAME.py: error: ...`` (after argparse's usage, where argparse refuses it), with exit status 2,
and no traceback; the helpers they share (the jobs of the table scripts, the draw of label batches, the order of
the restarts benchmark's times) are checked in this process."""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from leakattack.attacks.seed_search import MAX_BITS
from leakattack.errors import UserError

ROOT = Path(__file__).resolve().parents[1]


def _load(relative: str):
    """The module of a script or benchmark, its folder first on sys.path (where it imports its neighbours)."""
    path = ROOT / relative
    sys.path.insert(0, str(path.parent))
    try:
        spec = importlib.util.spec_from_file_location(f"_under_test_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(path.parent))
    return module


def _error_lines(stderr: str) -> list[str]:
    """The lines of ``stderr`` other than argparse's usage (``usage: ...`` and its indented continuation)."""
    lines, usage = [], False
    for line in stderr.strip().splitlines():
        usage = line.startswith("usage:") or (usage and line.startswith(" "))
        if not usage:
            lines.append(line)
    return lines


def _refused(folder: Path, script: str, args: list[str]) -> str:
    """Run ``script ARGS`` in the empty ``folder``; assert it refused them in one line, with exit status 2, no
    traceback and nothing written; that line."""
    name = Path(script).name
    done = subprocess.run([sys.executable, str(ROOT / script), *args], cwd=folder, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    errors = _error_lines(done.stderr)
    assert len(errors) == 1 and errors[0].startswith(f"{name}: error: "), done.stderr
    assert done.stdout == ""
    assert list(folder.iterdir()) == [], "a refused command wrote files"
    return errors[0]


REFUSED = [
    ("benchmarks/deep_step.py", ["--threads", "x"], "argument --threads: 'x' is neither a count of threads nor 'all'"),
    ("benchmarks/deep_step.py", ["--threads", "1", "0"], "argument --threads: thread count must be an integer of at "
                                                         "least 1, got 0"),
    ("benchmarks/deep_step.py", ["--threads", "100000"], "thread count 100000 exceeds the"),
    ("benchmarks/deep_step.py", ["--warmup", "-1"], "argument --warmup: -1 is below 0"),
    ("benchmarks/deep_step.py", ["--models", "resnet18", "--only", "zzzz"],
     "--only 'zzzz' matches no case of resnet18: the cases are resnet18 none, resnet18 srht b/d=0.01"),
    *([] if torch.cuda.is_available() else [
        ("benchmarks/deep_step.py", ["--device", "cuda"], "--device cuda needs a CUDA GPU, and torch finds none")]),
    ("benchmarks/sketch_overhead.py", ["--ratio", "nan"], "argument --ratio: nan is not a positive finite number"),
    ("benchmarks/sketch_overhead.py", ["--ratio", "2"], "argument --ratio: 2 is not in (0, 1]"),
    ("benchmarks/sketch_overhead.py", ["--threads", "100000"], "argument --threads: thread count 100000 exceeds the"),
    ("benchmarks/identify_cost.py", ["--image-size", "24", "--rounds", "1"],
     "vit_b_16 needs square images whose side is a multiple of 16, not 24x24"),
    ("benchmarks/label_recovery.py", ["--ratios", "1,1.5"], "argument --ratios: 1.5 is not in (0, 1]"),
    ("benchmarks/label_recovery.py", ["--sketch-dims", "99999999", "--trials", "1", "--batch-sizes", "2",
                                      "--datasets", "digits", "--victims", "lenet"],
     "--sketch-dims 99999999 is more than the d = 13426 weights of lenet on digits"),
    ("benchmarks/label_recovery.py", ["--batch-sizes", "0"], "argument --batch-sizes: 0 is below 1"),
    ("benchmarks/label_recovery.py", ["--batch-sizes", "x"], "argument --batch-sizes: 'x' is not an integer"),
    ("benchmarks/label_recovery.py", ["--distinct", "--batch-sizes", "16", "--trials", "1", "--datasets", "digits",
                                      "--victims", "lenet", "--ratios", "1"],
     "--distinct draws one image of each of B classes: batch size 16 exceeds the 10 classes of digits"),
    ("benchmarks/label_recovery.py", ["--batch-sizes", "5000", "--trials", "1", "--datasets", "digits", "--victims",
                                      "lenet", "--ratios", "1"],
     "batch size 5000 does not fit in digits: a batch's labels are 10 of its classes, and the 10 fullest hold 1797 "
     "images"),
    ("benchmarks/label_recovery.py", ["--rules", "pooled,nosuch"], "argument --rules: unknown label rule 'nosuch'"),
    ("benchmarks/label_recovery.py", ["--datasets", "nosuch"], "argument --datasets: unknown dataset 'nosuch'"),
    ("benchmarks/label_recovery.py", ["--victims", "nosuch"], "argument --victims: unknown victim 'nosuch'"),
    ("benchmarks/label_recovery.py", ["--ratios", "x"], "argument --ratios: 'x' is not a number"),
    ("benchmarks/seed_search.py", ["success", "--seed", "-1"], "argument --seed: -1 is below 0"),
    ("benchmarks/seed_search.py", ["success", "--seed", str(2 ** 63)],
     f"argument --seed: {2 ** 63} is not a seed (0 to 2^63 - 1)"),
    ("examples/capture_client.py", ["--kind", "update", "--lr", "-1"], "argument --lr: -1 is not a positive finite "
                                                                       "number"),
    ("examples/capture_client.py", ["--kind", "update", "--lr", "nan"], "argument --lr: nan is not a positive"),
    ("examples/capture_client.py", ["--seed", str(10 ** 23)], f"argument --seed: {10 ** 23} is not a seed"),
    ("examples/capture_client.py", ["--sketch-seed", "-1"], "argument --sketch-seed: -1 is below 0"),
    ("examples/flower_server.py", ["--seed", str(10 ** 23)], f"argument --seed: {10 ** 23} is not a seed"),
    ("examples/flower_server.py", ["--sketch-seed", str(2 ** 63)], "argument --sketch-seed: 9223372036854775808 is "
                                                                    "not a seed (0 to 2^63 - 1)"),
    ("examples/flower_server.py", ["--rounds", "1_0"], "argument --rounds: '1_0' is not an integer"),
    ("benchmarks/seed_search.py", ["success", "--bits", str(MAX_BITS + 1)],
     f"argument --bits: {MAX_BITS + 1} is above {MAX_BITS}, the most bits --sketch-seed-search searches"),
    ("benchmarks/seed_search.py", ["success", "--bits", "40"], f"40 is above {MAX_BITS}"),
    ("benchmarks/seed_search.py", ["separation", "--ratios", "x"], "argument --ratios: 'x' is not a number"),
    ("benchmarks/seed_search.py", ["separation", "--images", "51"],
     "argument --images: 51 is above 50, the photos of the embedded data set"),
    ("benchmarks/attack_speed.py", ["--only", "restarts", "--restart-threads", "100000"],
     "argument --restart-threads: thread count 100000 exceeds the"),
    ("benchmarks/attack_speed.py", ["--only", "products", "--columns", "1"],
     "argument --columns: 1 is below 16, the columns one batched pass forms"),
    ("benchmarks/attack_speed.py", ["--only", "restarts", "--restart-model", "nosuch"],
     "argument --restart-model: unknown model 'nosuch'"),
    ("scripts/vit_recipes.py", ["--out", "OUT", "--time-limit", "0"],
     "argument --time-limit: time limit must be a positive duration such as 90s, 10m, 1h, 1h30m or a number of "
     "seconds, got '0'"),
    ("scripts/restart_pruning.py", ["--out", "OUT", "--cases", "lenet-adam,nosuch"],
     "argument --cases: unknown case 'nosuch'; choose among lenet-adam, lenet-batch4, resnet20-ig"),
    ("scripts/label_choice.py", ["--ratios", "x"], "argument --ratios: 'x' is not a number"),
    ("scripts/label_choice.py", ["--ratios", "0.02,2"], "argument --ratios: 2 is not in (0, 1]"),
    ("scripts/label_choice.py", ["--sketches", "nosuch"], "argument --sketches: unknown sketch 'nosuch'"),
    # --train-steps 0 (keep the random weights) is taken: the sketch is what is refused
    ("scripts/label_choice.py", ["--train-steps", "0", "--sketches", "nosuch"],
     "argument --sketches: unknown sketch 'nosuch'"),
    ("scripts/label_choice.py", ["--model", "nosuch"], "argument --model: unknown model 'nosuch'"),
    ("scripts/train_determinism.py", ["--model", "nosuch"], "argument --model: unknown trainable model 'nosuch'"),
    ("scripts/train_determinism.py", ["--threads", "0"], "argument --threads: 0 is below 1"),
    ("scripts/train_determinism.py", ["--other-threads", "100000"],
     "argument --other-threads: thread count 100000 exceeds the"),
    ("scripts/train_determinism.py", ["--rounds", "1000000"], "argument --rounds: rounds must lie in [1, 100000]"),
    ("scripts/bn_prior_table.py", ["--out", "OUT", "--threads", "0"],
     "argument --threads: thread count must be an integer of at least 1, got 0"),
    ("scripts/bn_prior_table.py", ["--out", "OUT", "--tv", "-1"],
     "argument --tv: -1 is not a finite number of at least 0"),
    ("scripts/bn_prior_table.py", ["--out", "OUT", "--prior-weight", "x"],
     "argument --prior-weight: 'x' is not a number"),
    # a file to write is checked before the work (a training's minutes were lost at torch.save, in a traceback)
    ("scripts/train_photo_victim.py", ["--out", "/proc/x.pt"], "argument --out: '/proc/x.pt' cannot be written: "
                                                               "'/proc' is not a writable folder"),
    ("scripts/train_photo_victim.py", ["--out", "OUT/x.pt"], "argument --out: the folder of "),
    ("scripts/train_photo_victim.py", ["--out", "x.pt", "--lr", "-1"], "argument --lr: -1 is not a positive finite"),
    ("scripts/train_photo_victim.py", ["--out", "x.pt", "--threads", "-1"],
     "argument --threads: thread count must be an integer of at least 1, got -1"),
    ("scripts/train_photo_victim.py", ["--out", "x.pt", "--model", "nosuch"], "argument --model: unknown model"),
    ("scripts/bn_running_stats.py", ["--out", "/proc/x.pt"], "'/proc' is not a writable folder"),
    ("scripts/bn_running_stats.py", ["--out", "."], "argument --out: '.' is a folder; name a result file"),
    ("scripts/april_sketched_blocks.py", ["--image-index", "-5"], "argument --image-index: -5 is below 0"),
    ("scripts/april_sketched_blocks.py", ["--ratios", "0.5,2"], "argument --ratios: 2 is not in (0, 1]"),
    ("scripts/imprint_table.py", ["--out", "/proc/x"], "argument --out: '/proc/x' cannot be written: '/proc' is not"),
    ("scripts/rgap_relu.py", ["--out", str(ROOT / "README.md")], "argument --out: '"),  # a file
    ("scripts/batch_figure.py", ["a=b", "--out", "/proc/x.png"], "'/proc' is not a writable folder"),
    ("scripts/rgap_relu.py", ["--out", "."], "argument --out: '.' is the current folder or holds it"),
    ("scripts/transition_table.py", ["results/sweeps/attack_families", "--ssim", "2"],
     "argument --ssim: 2 is not in (0, 1]"),
]


@pytest.mark.parametrize("script, args, said", REFUSED,
                         ids=[f"{Path(s).stem}-{'-'.join(a)}" for s, a, _ in REFUSED])
def test_a_bad_argument_is_refused_in_one_line_before_any_work(tmp_path, script, args, said):
    folder = tmp_path / "work"
    folder.mkdir()
    line = _refused(folder, script, [str(tmp_path / "out") if a == "OUT" else a for a in args])
    assert said in line, line
    assert not (tmp_path / "out").exists()


def test_the_seed_search_benchmark_counts_the_embedded_photos_it_draws():
    from leakattack import data

    assert _load("benchmarks/seed_search.py").PHOTOS == len(data.get_dataset("photos", image_size=32))


def _fingerprint(paths: list[Path]) -> list:
    return [(p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest()) if p.exists() else None
            for p in paths]


@pytest.mark.parametrize("protocols, said", [
    (["nosuch"], "argument protocols: unknown protocol 'nosuch'; choose among "),
    (["safl", "fedsketch-heaprix"], "no row attacks protocol fedsketch-heaprix; the rows attack fedavg, sketched"),
])
def test_the_protocols_attack_table_refuses_a_protocol_it_has_no_rows_of_and_writes_nothing(tmp_path, protocols,
                                                                                            said):
    """Only the refusal runs here: the table itself (results/protocols/attacks.json and .md) stays as it is."""
    table = [ROOT / "results" / "protocols" / name for name in ("attacks.json", "attacks.md")]
    before = _fingerprint(table)
    line = _refused(tmp_path, "scripts/protocols_attack_table.py", ["10", *protocols])
    assert said in line, line
    assert _fingerprint(table) == before


def test_label_recovery_s_default_batch_sizes_with_distinct_leave_out_those_above_the_classes(tmp_path):
    """With --distinct and no --batch-sizes, batch size 16 on a 10-class data set is left out with a note, and the
    batches are drawn before the victims are built (a victim file that does not exist is refused after the note)."""
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "label_recovery.py"), "--distinct",
                           "--datasets", "digits", "--victims", "nofile.py:Net", "--trials", "1"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip().splitlines() == [
        "# --distinct: batch size 16 left out on digits, which has 10 classes",
        "label_recovery.py: error: model file 'nofile.py' does not exist"]


def _image_set(labels: list[int], classes: int):
    return SimpleNamespace(labels=torch.tensor(labels), num_classes=classes, name="tiny")


@pytest.mark.parametrize("labels, classes, B, distinct, said", [
    ([0, 1, 2], 3, 4, True, "batch size 4 exceeds the 3 classes of tiny"),
    ([0, 0, 1, 1], 3, 3, True, "batch size 3 exceeds the 2 classes of tiny"),  # a class without an image
    ([0, 0, 1, 1], 3, 5, False, "a batch's labels are 3 of its classes, and only 2 have an image"),
    ([0, 0, 1, 1, 2], 3, 6, False, "a batch's labels are 3 of its classes, and the 3 fullest hold 5 images"),
    ([0, 0, 0, 1, 2], 4, 7, False, "a batch's labels are 4 of its classes, and only 3 have an image"),
    ([0, 1], 2, 2, False, "a batch's labels are one of its classes, and the fullest holds 1 image"),
])
def test_label_recovery_refuses_a_batch_size_no_draw_fits(labels, classes, B, distinct, said):
    label_recovery = _load("benchmarks/label_recovery.py")
    with pytest.raises(UserError, match="batch size") as refused:
        label_recovery.draw_batches(_image_set(labels, classes), B, 1, distinct)
    assert said in str(refused.value)


def test_label_recovery_draws_the_batch_sizes_that_fit():
    label_recovery = _load("benchmarks/label_recovery.py")
    ds = _image_set([0, 0, 1, 1, 2, 2], 3)
    for B, distinct in ((3, True), (6, False), (4, False)):
        batches = label_recovery.draw_batches(ds, B, 2, distinct)
        assert [len(set(b.tolist())) for b in batches] == [B, B]


def test_label_recovery_refuses_labels_that_fit_in_none_of_its_draws(monkeypatch):
    label_recovery = _load("benchmarks/label_recovery.py")
    monkeypatch.setattr(label_recovery, "DRAW_TRIES", 0)
    with pytest.raises(UserError, match="batch size 2: none of 0 draws of its labels fitted"):
        label_recovery.draw_batches(_image_set([0, 0, 1, 1], 2), 2, 1, False)


def test_run_jobs_stops_at_the_first_failure():
    """A failed job ends the table scripts' jobs as soon as it fails, whichever job it is: the queued ones never
    start.  (Waiting on the jobs in their order, a failure behind a long job went unnoticed while the other worker
    started the queued ones, one after another.)"""
    runs = _load("scripts/_runs.py")
    started = []
    lock = threading.Lock()

    def one(job):
        with lock:
            started.append(job)
        if job == 1:
            raise subprocess.CalledProcessError(2, ["leakattack", "run"])
        time.sleep(0.5 if job == 0 else 0.01)  # job 0: a long run beside the one that fails
        return job * 10

    with pytest.raises(subprocess.CalledProcessError):
        runs.run_jobs(list(range(100)), one, 2)
    assert len(started) < 10, started
    assert runs.run_jobs([3, 1, 2], lambda job: job * 10, 2) == {3: 30, 1: 10, 2: 20}


def test_the_restarts_benchmark_prints_the_times_in_the_order_of_their_ratio():
    """``xQ (A s against B s)``: Q = A / B, R starts' time first, then one start's."""
    attack_speed = _load("benchmarks/attack_speed.py")
    assert attack_speed.against([0.15, 0.12], [0.09, 0.07]) == "0.12 s against 0.07 s"
    source = inspect.getsource(attack_speed.restarts_section)
    assert "s against {" not in source  # every such pair of times goes through against()
    assert source.count("against(") == 3


@pytest.mark.parametrize("script", ["examples/flower_server.py", "examples/flower_client.py"])
def test_the_flower_examples_help_says_what_each_option_is_and_its_default(script):
    """Server and clients must agree on their settings (docs/messages.md): --help names each option's meaning and,
    where it has one, its default."""
    text = subprocess.run([sys.executable, str(ROOT / script), "--help"], capture_output=True, text=True, check=True,
                          cwd=ROOT).stdout
    entries, current = [], None
    for line in text.split("options:")[1].splitlines():
        if line.startswith("  -"):
            current = [line.strip()]
            entries.append(current)
        elif current is not None and line.strip():
            current.append(line.strip())
    for entry in entries:
        flag = entry[0].split()[0].rstrip(",")
        words = " ".join(entry)
        assert len(words.split("  ", 1)) == 2 or len(entry) > 1, f"{flag} has no help"
        if flag not in ("-h", "--data", "--sketch", "--ratio"):  # no default, or said otherwise
            assert "(default" in words or "default " in words, f"{flag}: {words}"
