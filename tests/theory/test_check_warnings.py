"""`leakattack check` prints its progress lines and nothing of torch's: the torch.jit.script FutureWarning that the
first forward-mode JVP of a process raises (torch loading its JVP decompositions) is silenced where the JVPs run."""

import subprocess
import sys


def test_check_prints_no_future_warning(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "leakattack", "check", "--model", "linreg", "--sketch", "none",
                           "--samples", "3", "--out", str(tmp_path / "check")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "[check] kernel eigenvalues" in proc.stderr  # the JVPs ran (their progress line is on stderr)
    assert "Warning" not in proc.stderr, proc.stderr


def test_check_takes_the_sketch_familys_parameters(tmp_path, capsys):
    """`--sketch-param s=8` reaches the sparse sketch the check measures (it was refused as an unknown flag); a
    name given twice is refused as `run` refuses it; a name the family does not take is one sentence."""
    import json

    from leakattack import cli
    from leakattack.theory.measure import build_problem

    out = tmp_path / "check"
    assert cli.main(["check", "--model", "linreg", "--sketch", "sparse", "--sketch-param", "s=2", "--sketch-param",
                     "s=8", "--samples", "3", "--quiet", "--threads", "1", "--out", str(out)]) == 2
    assert "--sketch-param s is given 2 times (s=2, s=8): give it once" in capsys.readouterr().err
    assert not out.exists()
    assert cli.main(["check", "--model", "linreg", "--sketch", "sparse", "--sketch-param", "s=8", "--samples", "3",
                     "--quiet", "--threads", "1", "--out", str(out)]) == 0
    said = capsys.readouterr()
    assert json.loads((out / "check.json").read_text())["sketch_params"] == {"s": 8}
    assert "sparse b=" in said.out and ", s=8" in said.out
    R = build_problem("linreg", "sparse", 0.5, 0, {"s": 8}).sketch.to_dense()
    assert set((R != 0).sum(0).tolist()) == {8}  # eight nonzeros per column
    assert cli.main(["check", "--model", "linreg", "--sketch", "sparse", "--sketch-param", "t=8", "--quiet",
                     "--out", str(tmp_path / "bad")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["leakattack: error: sketch 'sparse' has no parameter 't'; allowed: s"]
