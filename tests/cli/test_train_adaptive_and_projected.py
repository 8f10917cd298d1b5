"""`leakattack train` / `run --protocol` for safl, sacfl, compsgd and privsgd: run folders, attacks on checkpoints,
bad input."""

import json

import pytest

from leakattack import cli

SMALL = ["--rounds", "2", "--clients", "3", "--client-batch", "8", "--quiet"]


def rows(folder):
    return [json.loads(line) for line in (folder / "train.jsonl").read_text().splitlines()]


def test_train_each_protocol_writes_rounds_floats_privacy_and_checkpoints_that_run_attacks(tmp_path, capsys):
    out = tmp_path / "runs"
    runs = {
        "safl": ["--sketch", "srht", "--sketch-ratio", "0.1", "--server-opt", "amsgrad"],
        "sacfl": ["--sketch", "countsketch", "--sketch-ratio", "0.1", "--clip-threshold", "0.05"],
        "compsgd": ["--sketch", "sparse", "--sketch-ratio", "0.1"],
        "privsgd": ["--sketch", "sparse", "--sketch-ratio", "0.1", "--dp-epsilon", "4", "--dp-rounds", "2"],
    }
    for proto, args in runs.items():
        assert cli.main(["train", "--protocol", proto, "--out", str(out)] + SMALL + args) == 0, proto
    capsys.readouterr()
    floats = {p: rows(out / p)[0]["floats_sent"] for p in runs}
    assert floats["safl"] == 1343 and floats["sacfl"] == 1344  # b, and b + 1 for the norm
    assert floats["compsgd"] == floats["privsgd"] == 31 + 361 + 361 + 589  # m_i = d_i / 10 per LeNet layer
    priv = rows(out / "privsgd")
    assert [r["round"] for r in priv] == [1, 2]
    assert priv[-1]["epsilon_paper"] == pytest.approx(4.0) and priv[-1]["epsilon_rdp"] > 0
    assert (out / "accuracy_vs_floats.png").stat().st_size > 0
    for proto in runs:
        assert (sorted(f.name for f in (out / proto / "checkpoints").iterdir())
                == [f"round_{t:04d}.pt" for t in (1, 2, 3)])
    # attacking round 2 reads w^2 from the checkpoint (the server state is not needed to make the message)
    for proto in ("sacfl", "compsgd"):
        rc = cli.main(["run", "--model", "lenet", "--dataset", "digits", "--protocol", proto, "--protocol-dir",
                       str(out / proto), "--round", "2", "--iterations", "2", "--quiet", "--no-lpips",
                       "--out", str(tmp_path / f"attack-{proto}")])
        assert rc == 0, proto
        cfg = json.loads((tmp_path / f"attack-{proto}" / "config.json").read_text())
        assert cfg["run"]["protocol"] == proto and cfg["derived"]["b"] == floats[proto]


BAD = [
    (["--protocol", "safl", "--server-opt", "lamb"], "unknown server optimiser 'lamb'"),
    (["--protocol", "safl", "--global-lr", "2"], "takes its server step kappa from --server-lr"),
    (["--protocol", "sacfl", "--clip-threshold", "0"], "clip threshold tau must be a positive number"),
    (["--protocol", "safl", "--server-beta1", "1"], "server beta1 must lie in [0, 1)"),
    (["--protocol", "safl", "--second-moment", "both"], "unknown second moment 'both'"),
    (["--protocol", "compsgd", "--local-steps", "3"], "--local-steps must be 1"),
    (["--protocol", "compsgd", "--projection-blocks", "row"], "unknown projection blocks 'row'"),
    (["--protocol", "privsgd", "--dp-rounds", "0"], "privsgd rounds T must be an integer of at least 1"),
    (["--protocol", "privsgd", "--l1-scale", "-1"], "l1 scale must be a positive number"),
]


@pytest.mark.parametrize("args,needle", BAD)
def test_bad_protocol_settings_are_one_line_exit_2_and_write_nothing(tmp_path, capsys, args, needle):
    for argv in (["train", "--rounds", "2", "--out", str(tmp_path / "t"), "--quiet"] + args,
                 ["run", "--model", "lenet", "--dataset", "digits", "--iterations", "2", "--quiet", "--no-lpips",
                  "--out", str(tmp_path / "r")] + args):
        assert cli.main(argv) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and needle in err[0], (argv, err)
    assert not any(tmp_path.iterdir())
