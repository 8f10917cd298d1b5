"""leakattack.script: the scripts' and benchmarks' entry point and argument types."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from leakattack.errors import UserError
from leakattack.script import count, counts, one_of, positives, script_main, seed, some_of


def _exit(main, monkeypatch, capsys) -> tuple[int, str]:
    monkeypatch.setattr(sys, "argv", ["/somewhere/tool.py"])
    with pytest.raises(SystemExit) as stop:
        script_main(main)
    return stop.value.code, capsys.readouterr().err


@pytest.mark.parametrize("error, said", [
    (UserError("unknown model 'x'; choose one of: lenet"), "tool.py: error: unknown model 'x'; choose one of: lenet\n"),
    (FileNotFoundError(2, "No such file or directory", "/run/metrics.json"),
     "tool.py: error: /run/metrics.json does not exist\n"),
    (FileExistsError(17, "File exists", "/tmp/a_file"), "tool.py: error: /tmp/a_file: File exists\n"),
    (subprocess.CalledProcessError(2, ["leakattack", "run", "--model", "a b"]),
     "tool.py: error: a command it ran failed with exit status 2: leakattack run --model 'a b'\n"),
])
def test_bad_input_ends_in_one_line_and_exit_status_2(monkeypatch, capsys, error, said):
    def main():
        raise error
    assert _exit(main, monkeypatch, capsys) == (2, said)


def test_the_script_s_own_status_is_its_exit_status_and_other_faults_stay_tracebacks(monkeypatch, capsys):
    assert _exit(lambda: None, monkeypatch, capsys) == (0, "")
    assert _exit(lambda: 3, monkeypatch, capsys) == (3, "")

    def broken():
        raise KeyError("a fault of the script, not of its input")
    with pytest.raises(KeyError):
        script_main(broken)


def test_the_argument_types_refuse_what_they_cannot_take():
    assert count("3") == 3 and counts("1,4,8") == [1, 4, 8] and positives("1,1e-3") == [1.0, 1e-3]
    assert seed("0") == 0 and seed(str(2 ** 63 - 1)) == 2 ** 63 - 1
    for bad, parse in (("0", count), ("x", count), ("4,-1", counts), ("1,0", positives), ("inf", positives),
                       ("nan", positives), ("a", positives), ("1_0", count), ("1_0", positives), ("-1", seed),
                       (str(2 ** 63), seed)):
        with pytest.raises(argparse.ArgumentTypeError):
            parse(bad)
    models = one_of(lambda: ["lenet", "mlp"], "model", files=True)
    assert models("mlp") == "mlp" and models("net.py:Net") == "net.py:Net"
    with pytest.raises(argparse.ArgumentTypeError, match="unknown model 'resnet'; choose among lenet, mlp or file"):
        models("resnet")
    sketches = some_of(lambda: ["srht", "none"], "sketch")
    assert sketches("srht,none") == ["srht", "none"]
    with pytest.raises(argparse.ArgumentTypeError, match="unknown sketch 'x.py:S'"):
        sketches("srht,x.py:S")


def test_a_thread_count_with_an_underscore_is_refused():
    from leakattack.script import thread_count

    assert thread_count("1") == 1
    with pytest.raises(argparse.ArgumentTypeError, match="^'0_1' is neither a count of threads nor 'all'$"):
        thread_count("0_1")  # read as 1


def test_a_type_is_named_with_the_article_a_sentence_gives_it():
    from torch import nn

    from leakattack.errors import a_type

    said = [a_type(v) for v in (nn.AvgPool2d(2), nn.MaxPool2d(2), nn.LSTM(2, 2), nn.LPPool2d(2, 2), nn.GELU(),
                                nn.ELU(), nn.Identity(), nn.ReLU(), 1.0, None)]
    assert said == ["an AvgPool2d", "a MaxPool2d", "an LSTM", "an LPPool2d", "a GELU", "an ELU", "an Identity",
                    "a ReLU", "a float", "a NoneType"]


def test_a_port_beyond_65535_is_refused_by_the_scripts_port_type():
    """examples/flower_server.py --port 99999 ended in Flower's own error and exit 1."""
    import argparse

    import pytest

    from leakattack.script import port

    assert port("8080") == 8080
    for bad in ("99999", "0", "-1", "x"):
        with pytest.raises(argparse.ArgumentTypeError):
            port(bad)
