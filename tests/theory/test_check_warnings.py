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
