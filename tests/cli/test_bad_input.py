"""Bad input through the command line: one sentence on stderr, exit code 2, no traceback, nothing written."""

import json
import re
from pathlib import Path

import pytest
import torch

from leakattack import cli
from leakattack.config.constraints import available_cores

RUN = ["run", "--model", "lenet", "--dataset", "digits", "--iterations", "2", "--quiet", "--no-lpips"]


def _files(root):
    """Every path under ``root`` with its bytes (None for a folder): what a refused command must leave as it was."""
    return {p.relative_to(root): p.read_bytes() if p.is_file() else None for p in sorted(root.rglob("*"))}


def _refused(argv, needle, root, capsys):
    before = _files(root)
    assert cli.main(argv) == 2, argv
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0] and "Traceback" not in err[0], (argv, err)
    assert _files(root) == before, argv


@pytest.mark.parametrize("args,needle", [
    (["--protocol-dir", "fl/fedavg"], "--protocol-dir chooses a protocol's message: give --protocol too"),
    (["--round", "3", "--client", "2"], "--round and --client choose a protocol's message: give --protocol too"),
    (["--round", "1"], "--round chooses a protocol's message: give --protocol too"),  # its default, given
    (["--client", "0"], "--client chooses a protocol's message: give --protocol too"),
    (["--protocol", "fedavg", "--clients", "2000"], "2000 clients leave some client without data (1438 training "
                                                    "images)"),  # client 0 holds an image, the last ones none
    (["--protocol", "sketched", "--clients", str(10 ** 20)], f"{10 ** 20} clients leave some client without data "
                                                             "(1438 training images)"),  # refused before a split
    (["--protocol", "sketched", "--noniid", "--clients", str(10 ** 12)], f"{10 ** 12} clients leave some client "
                                                                         "without data (1438 training images)"),
    (["--threads", "0"], "threads must be an integer of at least 1, got 0"),
    # Python reads 1_0 as 10: a number with '_' is refused, where a typo of 100 or 1.0 would pass unsaid
    (["--iterations", "1_0"], "argument --iterations: invalid int value: '1_0'"),
    (["--lr", "1_0"], "argument --lr: invalid float value: '1_0'"),
    (["--threads", "1_0"], "argument --threads: invalid value '1_0': give a count of threads or auto"),
    (["--time-limit", "1_0m"], "time limit must be a positive duration such as 90s, 10m, 1h, 1h30m or a number of "
                               "seconds, got '1_0m'"),
    (["--prior", "tv:1_0"], "the weight of prior 'tv' must be a non-negative number, got '1_0'"),
    (["--defense", "clip:C=1_0"], "defense 'clip': C must be a positive number, got '1_0'"),
    (["--defense", "quantize:bits=1_6"], "defense 'quantize': bits must be"),
    (["--threads", "all"], "argument --threads: invalid value 'all': give a count of threads or auto"),
    # torch's own message held an unbalanced quote
    (["--model", "mlp", "--model-param", f"hidden={10 ** 23}"], f"model 'mlp' could not be built with "
                                                               f"hidden={10 ** 23} (a size beyond the 64-bit integers "
                                                               "torch takes)"),
    (["--seed", str(2 ** 63)], "seed must be an integer in [0, 2^63 - 4]"),
    (["--model-seed", "-1"], "model seed must be an integer in [0, 2^63 - 1]"),
    (["--sketch", "sparse", "--sketch-param", "s=0"], "s must be an integer in [1, min(b, 64)], got 0"),
    (["--sketch", "sparse", "--sketch-param", "s=abc"], "s must be an integer in [1, min(b, 64)], got 'abc'"),
    (["--sketch", "sparse", "--sketch-param", "s=1000000"], "s must be an integer in [1, min(b, 64)]"),
    (["--sketch", "sparse", "--sketch-param", "k=2"], "sketch 'sparse' has no parameter 'k'"),
    (["--sketch", "srht", "--sketch-param", "s=4"], "sketch 'srht' has no parameter 's'"),
    (["--defense", "quantize:bits=1000"], "bits must be an integer in [1, 32]"),
    (["--labels", "guess"], "unknown label mode 'guess'"),
    (["--attack", "deepleakage"], "unknown attack 'deepleakage'"),
    (["--iterations", str(10 ** 20)], "iterations must lie in [1, 1000000]"),
    (["--protocol", "fedsketch-privix", "--sketch-rows", "100000"], "count-sketch rows t must lie in [1, 1000]"),
    (["--protocol", "fedavg", "--local-steps", str(10 ** 9)], "local steps K must lie in [1, 1000000], got 1000000000"),
    (["--protocol", "fedsketch-privix", "--sketch-buckets", "100000000"], "exceed d = 13426"),
])
def test_bad_run_flags_are_refused_before_any_work(tmp_path, capsys, args, needle):
    _refused(RUN + args + ["--out", str(tmp_path / "run")], needle, tmp_path, capsys)


@pytest.mark.parametrize("device,needle", [
    ("gpu", "unknown device 'gpu'; choose one of: auto, cpu, cuda or cuda:N (GPU N)"),
    ("cuda:x", "unknown device 'cuda:x'"),
    ("cuda:-1", "unknown device 'cuda:-1'"),
])
def test_a_device_that_is_not_one_is_refused(tmp_path, capsys, device, needle):
    _refused(RUN + ["--device", device, "--out", str(tmp_path / "run")], needle, tmp_path, capsys)


def test_a_gpu_by_its_index_is_a_device(tmp_path, capsys, monkeypatch):
    """cuda:N names GPU N of a machine with several; without CUDA, or past the GPUs there are, one sentence."""
    from leakattack.config import ConfigError, RunConfig

    if not torch.cuda.is_available():
        _refused(RUN + ["--device", "cuda:0", "--out", str(tmp_path / "run")],
                 "device 'cuda:0' was asked for but no CUDA device is available", tmp_path, capsys)
    monkeypatch.setattr("torch.cuda.is_available", lambda: True)
    monkeypatch.setattr("torch.cuda.device_count", lambda: 2)
    RunConfig(device="cuda:1").validate()
    with pytest.raises(ConfigError, match=r"device 'cuda:2' was asked for but CUDA has 2 devices here \(cuda:0 to "
                                          r"cuda:1\)"):
        RunConfig(device="cuda:2").validate()


def test_a_client_not_sampled_in_the_round_is_refused_with_one_that_is(tmp_path, capsys):
    """The default --client 0 may not be sampled (FedSKETCH samples a fraction of the clients): name one that is."""
    _refused(["run", "--protocol", "fedsketch-heaprix", "--clients", "2", "--client-batch", "2", "--iterations", "2",
              "--quiet", "--out", str(tmp_path / "run")],
             "client 0 is not sampled in round 1 (sampled: [1]): give --client 1", tmp_path, capsys)


def test_threads_auto_is_the_default_spelled_out(tmp_path):
    """--help gives --threads' default as auto, so auto is a value too (the choice the run makes by itself)."""
    from leakattack.cli.parser import build_parser
    from leakattack.config import config_from_args

    parser = build_parser()
    for argv in (["run"], ["run", "--threads", "auto"], ["run", "--threads", "AUTO"]):
        assert config_from_args(parser.parse_args(argv)).threads is None
    assert config_from_args(parser.parse_args(["run", "--threads", "1"])).threads == 1
    assert parser.parse_args(["check", "--threads", "auto"]).threads is None


@pytest.mark.parametrize("threads", [available_cores() + 1, 100_000])
def test_more_threads_than_cores_are_refused_before_torch_starts_them(tmp_path, capsys, threads):
    # 100000 threads crashed torch's thread pool (a segmentation fault) before the bound
    n = available_cores()
    _refused(RUN + ["--threads", str(threads), "--out", str(tmp_path / "run")],
             f"threads {threads} exceeds the {n} CPU core{'s' if n != 1 else ''} this process may use: "
             f"give at most {n}",
             tmp_path, capsys)
    _refused(["train", "--protocol", "fedavg", "--rounds", "1", "--quiet", "--threads", str(threads),
              "--out", str(tmp_path / "t")], f"threads {threads} exceeds the {n} CPU core", tmp_path, capsys)


INT_MODEL = """
import math

from torch import nn


class Rounded(nn.Module):
    def __init__(self, in_shape, num_classes):
        super().__init__()
        self.fc = nn.Linear(math.prod(in_shape), num_classes)

    def forward(self, x):
        return self.fc(x.flatten(1)).round().long()  # integer scores: no gradient flows back
"""


def test_a_user_model_returning_integers_is_one_sentence_before_the_attack(tmp_path, capsys):
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "rounded.py").write_text(INT_MODEL)  # imported outside the checked folder (__pycache__)
    work = tmp_path / "work"
    work.mkdir()
    argv = ["run", "--model", f"{tmp_path / 'models' / 'rounded.py'}:Rounded", "--dataset", "digits",
            "--iterations", "2", "--quiet", "--no-lpips", "--out", str(work / "run")]
    _refused(argv, "returns int64 outputs for a batch of 2; the loss and its gradient need real floating-point "
                   "outputs", work, capsys)


@pytest.mark.parametrize("value,needle", [
    (float("nan"), "the weight vector holds a non-finite number (nan) at index 3; weights must be finite"),
    (float("inf"), "the weight vector holds a non-finite number (inf) at index 3; weights must be finite"),
    (1j, "the weight vector holds complex numbers (complex64); weights must be real"),
])
def test_weights_that_are_not_real_and_finite_are_one_sentence(tmp_path, capsys, value, needle):
    import targets
    from leakattack.data import get_dataset

    ds = get_dataset("digits")
    flat = targets.flat_params(targets.get_model("lenet", in_shape=ds.in_shape, num_classes=ds.num_classes))
    flat = flat.detach().to(torch.complex64 if isinstance(value, complex) else torch.float32)
    flat[3] = value
    torch.save(flat, tmp_path / "w.pt")
    _refused(RUN + ["--weights", str(tmp_path / "w.pt"), "--out", str(tmp_path / "run")], needle, tmp_path, capsys)


def test_an_empty_or_unwritable_out_is_refused_before_the_attack(tmp_path, capsys):
    _refused(RUN + ["--out", ""], "--out must name a folder", tmp_path, capsys)
    (tmp_path / "file").write_text("x")
    _refused(RUN + ["--out", str(tmp_path / "file")], "is a file, not a folder", tmp_path, capsys)
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    try:
        if not (locked / "probe").parent.stat().st_mode & 0o200 and __import__("os").getuid() == 0:
            pytest.skip("root writes into read-only folders: the permission check cannot be provoked")
        _refused(RUN + ["--out", str(locked / "run")], "cannot be written", tmp_path, capsys)
    finally:
        locked.chmod(0o700)


def test_a_run_replaces_only_an_empty_folder_or_an_earlier_run(tmp_path, capsys, monkeypatch):
    """--out is replaced whole: a folder of other files (runs below it, notes) or the current folder is refused."""
    runs = tmp_path / "runs"
    (runs / "run1").mkdir(parents=True)
    (runs / "run1" / "metrics.json").write_text("{}")
    (runs / "notes.txt").write_text("mine")
    _refused(RUN + ["--out", str(runs)], "holds notes.txt, run1, which a run does not write", tmp_path, capsys)
    (runs / "metrics.json").write_text("{}")  # someone else's metrics.json does not make it a run folder
    _refused(RUN + ["--out", str(runs)], "holds notes.txt, run1, which a run does not write", tmp_path, capsys)
    monkeypatch.chdir(runs / "run1")
    for here in (".", "..", str(runs / "run1")):
        _refused(RUN + ["--out", here], "is the current folder or holds it", tmp_path, capsys)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "empty").mkdir()
    assert cli.main(RUN + ["--out", "empty"]) == 0 and (tmp_path / "empty" / "metrics.json").is_file()
    from leakattack.experiment import RUN_FILES

    assert {f.name for f in (tmp_path / "empty").iterdir()} == RUN_FILES  # what a run writes, all of it
    assert cli.main(RUN + ["--out", "empty", "--seed", "1"]) == 0  # an earlier run is replaced
    assert json.loads((tmp_path / "empty" / "config.json").read_text())["run"]["seed"] == 1
    (tmp_path / "empty" / "notes.txt").write_text("mine")  # but not once it holds something of the user's
    capsys.readouterr()
    _refused(RUN + ["--out", "empty"], "holds notes.txt, which a run does not write", tmp_path, capsys)


def _out_commands(tmp_path, out):
    """Every command that writes under --out, with ``out`` (a folder, or the file's name without its suffix)."""
    sweep = tmp_path / "grid.toml"
    sweep.write_text('[base]\nmodel = "lenet"\ndataset = "digits"\niterations = 1\n[grid]\nseed = [0, 1]\n')
    return [RUN + ["--out", out], ["sweep", str(sweep), "--out", out, "--quiet"],
            ["train", "--protocol", "fedavg", "--rounds", "1", "--quiet", "--out", out],
            ["check", "--quiet", "--out", out], ["collect", str(tmp_path), "--out", out + ".csv"],
            ["report", str(tmp_path), "--out", out + ".html"]]


def test_every_command_refuses_an_out_it_cannot_write_before_any_work(tmp_path, capsys):
    (tmp_path / "file").write_text("a file, not a folder")
    for argv in _out_commands(tmp_path, str(tmp_path / "file" / "out")):
        _refused(argv, f"cannot be written: '{tmp_path / 'file'}' is not a writable folder", tmp_path, capsys)


@pytest.mark.parametrize("model", ["lenet", str(Path(__file__).resolve().parents[2] / "examples" / "client_model.py")
                                   + ":ClientNet"])
@pytest.mark.parametrize("param,needle", [("init=default", "init is set by --weight-init"),
                                          ("seed=3", "seed is set by --model-seed"),
                                          ("num_classes=5", "num_classes is the data set's class count"),
                                          ("name=y", "name is the --model flag"),
                                          ("in_shape=3", "in_shape is the data set's image shape")])
def test_a_model_param_leakattack_sets_itself_is_one_sentence(tmp_path, capsys, model, param, needle):
    """Every model is built with these keywords: a --model-param of the same name was a TypeError."""
    argv = ["run", "--model", model, "--dataset", "digits", "--iterations", "2", "--quiet", "--no-lpips",
            "--model-param", param, "--out", str(tmp_path / "run")]
    _refused(argv, f"--model-param {param.split('=')[0]}: a model's {needle}", tmp_path, capsys)


def test_list_names_only_the_model_params_a_user_can_set():
    import targets

    client = str(Path(__file__).resolve().parents[2] / "examples" / "client_model.py") + ":ClientNet"
    assert targets.model_params(client) == [] and targets.model_params("lenet") == ["act"]


def test_a_sweep_into_a_run_folder_is_refused(tmp_path, capsys):
    """A run's folder (its metrics.json) would be read as that run, the sweep beside it ignored."""
    (tmp_path / "r3").mkdir()
    (tmp_path / "r3" / "metrics.json").write_text("{}")
    sweep = _out_commands(tmp_path, str(tmp_path / "r3"))[1]
    _refused(sweep, "is a run's folder (it holds metrics.json)", tmp_path, capsys)


def test_a_read_only_file_system_is_refused_even_for_root(tmp_path, capsys):
    """/proc takes no new folders whatever the permission bits say (root passes every os.access check)."""
    if not Path("/proc/self").is_dir():
        pytest.skip("no /proc on this system: a read-only file system to write into is not at hand")
    for argv in _out_commands(tmp_path, "/proc/leakattack-out"):
        _refused(argv, "cannot be written: '/proc' is not a writable folder", tmp_path, capsys)


def test_garbage_dataset_files_are_one_sentence(tmp_path, capsys):
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for name in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                 "t10k-labels-idx1-ubyte"):
        (raw / name).write_bytes(b"\x00\x01garbage" * 50)
    argv = ["run", "--dataset", "mnist", "--data-root", str(tmp_path), "--iterations", "2", "--quiet",
            "--out", str(tmp_path / "run")]
    _refused(argv, "are not readable", tmp_path, capsys)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("train")
    assert cli.main(["train", "--protocol", "fedavg", "--rounds", "2", "--clients", "3", "--out", str(out),
                     "--quiet"]) == 0
    return out / "fedavg"


def _attack(folder, tmp_path):
    return RUN + ["--protocol", "fedavg", "--protocol-dir", str(folder), "--round", "2", "--batch-size", "32",
                  "--out", str(tmp_path / "run")]


@pytest.mark.parametrize("flag,value,needle", [
    ("--sketch", "gaussian", "--sketch 'gaussian' contradicts"),
    ("--sketch-ratio", "0.3", "--sketch-ratio 0.3 contradicts"),
    ("--local-steps", "3", "--local-steps 3 contradicts"),
    ("--dataset", "photos", "--dataset 'photos' contradicts"),
    ("--model", "mlp", "--model 'mlp' contradicts"),
    # given at run's own default (0.5; the stored run trained with train's 0.1): given is given
    ("--sketch-ratio", "0.5", "--sketch-ratio 0.5 contradicts"),
    ("--clients", "10", "--clients 10 contradicts"),  # train's default; the stored run had 3
])
def test_a_flag_the_stored_protocol_run_fixes_is_refused_when_it_differs(trained, tmp_path, capsys, flag, value,
                                                                         needle):
    """protocol.json fixes the model, data, sketch and protocol settings: another value would be recorded for a
    message it did not make."""
    _refused(_attack(trained, tmp_path) + [flag, value], needle + f" '{trained}', whose protocol run used", tmp_path,
             capsys)


def test_a_defense_on_a_protocols_message_is_refused(trained, tmp_path, capsys):
    """The protocol's clients send its message; a --defense would be recorded as applied and change nothing."""
    for argv in (_attack(trained, tmp_path), ["run", "--protocol", "sketched", "--iterations", "2", "--quiet",
                                              "--out", str(tmp_path / "run")]):
        _refused(argv + ["--defense", "gaussian:sigma=10"], "does not apply to a protocol's message", tmp_path,
                 capsys)


def test_a_corrupt_checkpoint_is_one_sentence(trained, tmp_path, capsys):
    import shutil

    folder = tmp_path / "copy"
    shutil.copytree(trained, folder)
    ckpt = folder / "checkpoints" / "round_0002.pt"
    ckpt.write_bytes(ckpt.read_bytes()[:40])  # truncated
    _refused(_attack(folder, tmp_path), "is a damaged torch file: its zip archive cannot be read", tmp_path, capsys)
    torch.save(torch.zeros(7), ckpt)
    _refused(_attack(folder, tmp_path), "does not hold the 13426 weights", tmp_path, capsys)


def test_a_malformed_or_edited_protocol_json_is_one_sentence(trained, tmp_path, capsys):
    import shutil

    folder = tmp_path / "copy"
    shutil.copytree(trained, folder)
    pj = folder / "protocol.json"
    good = json.loads(pj.read_text())
    pj.write_text("{not json")
    _refused(_attack(folder, tmp_path), "is not a protocol.json written by `leakattack train`", tmp_path, capsys)
    pj.write_text(json.dumps({**good, "spec": {**good["spec"], "clients": 2}}))
    _refused(_attack(folder, tmp_path), "was changed after training: it says clients = 2", tmp_path, capsys)


def test_a_protocol_json_from_before_a_setting_existed_reads_as_its_default(trained, tmp_path):
    import shutil

    from leakattack.training import stored_protocol, train
    from targets.protocols import SPEC_DEFAULTS

    folder = tmp_path / "copy"
    shutil.copytree(trained, folder)
    pj = folder / "protocol.json"
    old = json.loads(pj.read_text())
    del old["spec"]["local_epochs"]  # the field postdates older stored runs
    pj.write_text(json.dumps(old))
    spec, model, rounds = stored_protocol(folder, "fedavg")
    assert spec["local_epochs"] == SPEC_DEFAULTS["local_epochs"] and rounds == 2
    train("fedavg", spec, model, 1, tmp_path / "again", "fedavg", progress=False)  # retrains as the run did
    assert cli.main(_attack(folder, tmp_path)) == 0


@pytest.mark.parametrize("args,needle", [
    (["--act", "swish"], "unknown activation 'swish'"),
    (["--seed", "-1"], "seed must be an integer in [0, 2^63 - 1]"),
    (["--sketch-buckets", "100000000", "--protocol", "fedsketch-privix"], "exceed d = 13426"),
    (["--model", "linreg"], "cannot be trained here"),
    (["--name", "../../x"], "--name must be a folder name, not a path"),
    (["--name", "/tmp/abs"], "--name must be a folder name, not a path"),
    (["--name", "accuracy_vs_floats.png"], "--name accuracy_vs_floats.png is the file a training draws its figure "
                                           "into in --out: give another name"),
    (["--checkpoint-every", "0"], "checkpoint interval must be"),
])
def test_bad_train_flags_are_one_sentence(tmp_path, capsys, args, needle):
    argv = ["train", "--protocol", "fedavg", "--rounds", "1", "--quiet", "--out", str(tmp_path / "t")] + args
    _refused(argv, needle, tmp_path, capsys)


def test_training_that_diverges_stops_with_one_sentence_and_no_nan_in_its_log(tmp_path, capsys):
    rc = cli.main(["train", "--protocol", "fedavg", "--rounds", "5", "--clients", "2", "--local-lr", "1e38",
                   "--global-lr", "1e38", "--out", str(tmp_path), "--quiet", "--no-checkpoints"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "training diverged in round" in err[0], err
    log = tmp_path / "fedavg" / "train.jsonl"
    text = log.read_text() if log.exists() else ""
    assert "NaN" not in text and "Infinity" not in text


def test_a_diverged_trainings_losses_are_said_to_four_digits(tmp_path, capsys):
    """The sentence printed the losses' full repr: `train loss 2.2993497371673586, test loss nan`."""
    rc = cli.main(["train", "--protocol", "fedavg", "--rounds", "1", "--clients", "2", "--local-lr", "1e300",
                   "--out", str(tmp_path), "--quiet", "--no-checkpoints"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and re.search(r"training diverged in round 1 \(train loss \d\.\d{3}, test loss nan\); no round "
                                 r"finished", err), err


def test_a_setting_the_protocol_does_not_read_is_warned_of(tmp_path, capsys):
    """fedavg reads no sketch and no DP settings: train and run --protocol say so in one line (it was silent)."""
    assert cli.main(["train", "--protocol", "fedavg", "--sketch", "gaussian", "--dp-epsilon", "1", "--rounds", "1",
                     "--clients", "2", "--quiet", "--out", str(tmp_path / "t")]) == 0
    assert "--sketch, --dp-epsilon change nothing for protocol 'fedavg', which does not read them" in \
        capsys.readouterr().err
    assert cli.main(["run", "--protocol", "fedavg", "--sketch", "gaussian", "--iterations", "2", "--quiet",
                     "--no-lpips", "--out", str(tmp_path / "r")]) == 0
    assert "--sketch changes nothing for protocol 'fedavg', which does not read it" in capsys.readouterr().err


def test_an_unsketched_message_asked_of_fedavg_is_not_warned_of(tmp_path, capsys):
    """fedavg sends the whole update: --sketch none says what it does, and was named as a setting it does not read;
    --sketch-ratio beside it still changes nothing and is named."""
    assert cli.main(["run", "--protocol", "fedavg", "--sketch", "none", "--iterations", "2", "--quiet",
                     "--no-lpips", "--out", str(tmp_path / "r")]) == 0
    assert "change" not in capsys.readouterr().err
    assert cli.main(["train", "--protocol", "fedavg", "--sketch", "none", "--sketch-ratio", "0.5", "--rounds", "1",
                     "--clients", "2", "--quiet", "--out", str(tmp_path / "t")]) == 0
    assert "--sketch-ratio changes nothing for protocol 'fedavg'" in capsys.readouterr().err
    assert cli.main(["train", "--protocol", "fedsketch-privix", "--sketch", "none", "--rounds", "1",
                     "--clients", "2", "--quiet", "--out", str(tmp_path / "f")]) == 0
    assert "--sketch changes nothing for protocol 'fedsketch-privix'" in capsys.readouterr().err


def test_sacfl_warns_of_the_server_optimiser_settings_it_does_not_read(tmp_path, capsys):
    """SACFL's server takes Algorithm 3's clipped step (kappa, tau) and runs no adaptive optimiser: SAFL's optimiser
    settings change nothing there and are named (they were taken silently), while --server-lr, its kappa, is read."""
    assert cli.main(["train", "--protocol", "sacfl", "--server-opt", "amsgrad", "--server-beta2", "0.9",
                     "--second-moment", "desketched", "--server-lr", "0.5", "--rounds", "1", "--clients", "2",
                     "--quiet", "--out", str(tmp_path / "t")]) == 0
    err = capsys.readouterr().err
    assert "--server-opt, --server-beta2, --second-moment change nothing for protocol 'sacfl'" in err, err
    assert "--server-lr" not in err


def test_a_sketch_parameter_the_protocol_does_not_read_is_warned_of_not_checked_against_srht(tmp_path, capsys):
    """fedavg and fedsketch-* read no --sketch-param: it is named in the unread warning under its flag's name,
    and not refused as a parameter of the default sketch srht the protocol does not use either (it was)."""
    assert cli.main(["run", "--protocol", "fedavg", "--sketch-param", "s=3", "--iterations", "2", "--quiet",
                     "--no-lpips", "--out", str(tmp_path / "r")]) == 0
    assert "--sketch-param changes nothing for protocol 'fedavg', which does not read it" in capsys.readouterr().err
    assert cli.main(["run", "--protocol", "fedsketch-privix", "--sketch", "sparse", "--sketch-param", "s=3",
                     "--iterations", "2", "--quiet", "--no-lpips", "--out", str(tmp_path / "f")]) == 0
    assert "--sketch, --sketch-param change nothing for protocol 'fedsketch-privix'" in capsys.readouterr().err
    # a protocol that reads the sketch still refuses a parameter its sketch lacks, in one sentence
    assert cli.main(["run", "--protocol", "sketched", "--sketch-param", "s=3", "--iterations", "2", "--quiet",
                     "--no-lpips", "--out", str(tmp_path / "s")]) == 2
    assert "sketch 'srht' has no parameter 's'" in capsys.readouterr().err


def test_a_flag_given_at_its_default_value_is_warned_of_like_any_other(tmp_path, capsys):
    """A flag the run does not read is named whatever its value: given at the default, it was not given for
    nothing either (those warnings once compared the value with the default)."""
    assert cli.main(["run", "--protocol", "fedavg", "--sketch", "srht", "--sketch-ratio", "0.5", "--iterations", "2",
                     "--quiet", "--no-lpips", "--out", str(tmp_path / "r")]) == 0
    assert "--sketch, --sketch-ratio change nothing for protocol 'fedavg', which does not read them" in \
        capsys.readouterr().err
    assert cli.main(["run", "--sketch", "none", "--sketch-ratio", "0.5", "--bn", "auto", "--bn-stats", "running",
                     "--iterations", "2", "--quiet", "--no-lpips", "--out", str(tmp_path / "s")]) == 0
    err = capsys.readouterr().err
    for needle in ("--sketch-ratio and --sketch-dim change nothing", "--bn auto changes nothing",
                   "--bn-stats running changes nothing"):
        assert needle in err, err
    assert cli.main(["run", "--sketch", "none", "--iterations", "2", "--quiet", "--no-lpips",
                     "--out", str(tmp_path / "t")]) == 0
    assert "changes nothing" not in capsys.readouterr().err


def test_an_unreadable_image_the_mean_baseline_reads_stops_the_run_before_its_attack(tmp_path, capsys, monkeypatch):
    """The data set's mean image, a baseline, averages images other than the attacked one: a broken one among them
    is one sentence before the attack runs, not after its minutes, and nothing is written."""
    from PIL import Image

    from leakattack.attacks import GradientMatching

    root = tmp_path / "imgs"
    for cls in ("a", "b"):
        (root / cls).mkdir(parents=True)
        Image.new("RGB", (20, 20), (40, 90, 200)).save(root / cls / "good.png")
    (root / "b" / "zz_bad.png").write_bytes(b"\x89PNG\r\n\x1a\n but cut off")

    def attacked(*args, **kwargs):
        raise AssertionError("the attack ran before the baseline's images were read")

    monkeypatch.setattr(GradientMatching, "reconstruct", attacked)
    argv = ["run", "--dataset", "imagefolder", "--data-root", str(root), "--image-size", "16", "--iterations", "2",
            "--quiet", "--no-lpips", "--out", str(tmp_path / "run")]
    _refused(argv, "zz_bad.png is not readable", tmp_path, capsys)



@pytest.mark.parametrize("args,needle", [
    (["--seed", str(10 ** 20)], "seed must be an integer in [0, 2^63 - 1]"),
    (["--seed", "-1"], "seed must be an integer in [0, 2^63 - 1], got -1"),
    (["--samples", "100000000"], "samples must be an integer in [1, 100,000], got 100000000"),
    (["--table2", "--samples", "100000000"], "samples must be an integer in [1, 100,000]"),
    (["--threads", "0"], "threads must be an integer of at least 1, got 0"),
    (["--samples", "1_0"], "argument --samples: invalid int value: '1_0'"),
    (["--sketch-ratio", "0.0_1"], "argument --sketch-ratio: invalid float value: '0.0_1'"),
    (["--threads", "all"], "argument --threads: invalid value 'all': give a count of threads or auto"),
    (["--threads", "100000"], "threads 100000 exceeds the"),
])
def test_bad_check_flags_are_refused_before_any_work(tmp_path, capsys, args, needle):
    _refused(["check", *args, "--quiet", "--out", str(tmp_path / "check")], needle, tmp_path, capsys)


@pytest.mark.parametrize("marker,what", [("metrics.json", "a run"), ("sweep.json", "a sweep")])
def test_check_does_not_write_into_a_run_or_a_sweep_folder(tmp_path, capsys, marker, what):
    folder = tmp_path / "earlier"
    folder.mkdir()
    (folder / marker).write_text("{}")
    _refused(["check", "--quiet", "--out", str(folder)], f"holds {what} ({marker}), whose files a check would",
             tmp_path, capsys)


def test_a_folder_given_as_the_dataset_is_pointed_to_imagefolder(tmp_path, capsys):
    folder = tmp_path / "my photos"
    folder.mkdir()
    for needle in (f"unknown dataset '{folder}'; choose one of: photos, digits",
                   f"a folder of images is the data set imagefolder: --dataset imagefolder --data-root {folder}"):
        _refused(RUN + ["--dataset", str(folder), "--out", str(tmp_path / "run")], needle, tmp_path, capsys)
    assert cli.main(RUN + ["--dataset", "imagenet", "--out", str(tmp_path / "run")]) == 2
    assert "imagefolder --data-root" not in capsys.readouterr().err  # a name that is no folder: the names alone


def test_the_training_summary_prints_a_huge_loss_in_four_digits_and_says_the_floats_are_the_total(tmp_path, capsys,
                                                                                                   monkeypatch):
    from leakattack.cli import train as train_cli

    row = {"round": 3, "test_acc": 0.1, "train_loss": 3.3854479148838581e31, "floats_mean_cum": 40278,
           "floats_cum": 40278, "wall_s": 1.0}
    monkeypatch.setattr(train_cli, "read_jsonl", lambda path: [row])
    monkeypatch.setattr(train_cli, "train", lambda *a, **k: tmp_path)
    assert cli.main(["train", "--protocol", "fedavg", "--rounds", "3", "--out", str(tmp_path / "o"), "--quiet"]) == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert "train loss 3.385e+31 | floats/client 40278 in all |" in line, line


@pytest.mark.parametrize("argv, said", [
    (["figures", ""], "a sweep folder must be named, got an empty string"),
    (["report", "", "--out", "r.html"], "a run or sweep folder to report must be named, got an empty string"),
])
def test_an_empty_folder_argument_is_refused_not_read_as_the_current_folder(tmp_path, capsys, monkeypatch, argv,
                                                                            said):
    monkeypatch.chdir(tmp_path)
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and said in err[0], err
    assert not any(tmp_path.iterdir())


REGRESSION = '''
import torch.nn as nn


class Reg(nn.Module):
    leakattack_task = "regression"

    def __init__(self, num_classes=1, in_shape=(1, 28, 28), outputs=None):
        super().__init__()
        self.fc = nn.Linear(in_shape[0] * in_shape[1] * in_shape[2], outputs or num_classes)

    def forward(self, x):
        return self.fc(x.flatten(1))
'''


def test_a_regression_of_more_than_one_output_per_example_is_one_sentence_naming_num_classes(tmp_path, capsys):
    """The class's num_classes was set to the data set's 10 classes and the run failed at the message with "the
    regression targets have shape (1,) and the model's outputs (1, 10): give one target per output", which a
    command-line user cannot do."""
    net = tmp_path / "reg.py"
    net.write_text(REGRESSION)
    base = ["run", "--model", f"{net}:Reg"] + RUN[3:] + ["--out", str(tmp_path / "run")]
    _refused(base, "is a regression that answers 10 numbers per example (its class takes num_classes, which a run "
             "sets to the data set's 10 classes: leave it out of __init__)", tmp_path, capsys)
    _refused(base + ["--model-param", "outputs=3"], "is a regression that answers 3 numbers per example, and a run's "
             "targets are the data set's labels", tmp_path, capsys)
    assert cli.main(base + ["--model-param", "outputs=1"]) == 0
