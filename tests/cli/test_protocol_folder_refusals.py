"""A protocol folder that does not exist, is a file, or holds no protocol.json is refused in the same sentence by
``leakattack run --protocol-dir`` and by the reader of a stored protocol
(:func:`leakattack.training.stored_protocol`)."""

from __future__ import annotations

import pytest

from leakattack import cli
from leakattack.config import ConfigError
from leakattack.training import stored_protocol

RUN = ["run", "--iterations", "2", "--no-lpips", "--quiet", "--threads", "1", "--protocol", "fedavg"]


def folders(tmp_path):
    (tmp_path / "file").write_text("")
    (tmp_path / "empty").mkdir()
    return [(tmp_path / "nothing", "does not exist (write one with `leakattack train`)"),
            (tmp_path / "file", "is a file, not a folder: give the `leakattack train` run folder that holds "
                                "protocol.json"),
            (tmp_path / "empty", "has no protocol.json (write one with `leakattack train`)")]


@pytest.mark.parametrize("case", range(3))
def test_the_stored_protocol_reader_and_run_refuse_a_folder_in_the_same_sentence(case, tmp_path, capsys):
    folder, says = folders(tmp_path)[case]
    sentence = f"protocol folder '{folder}' {says}"
    with pytest.raises(ConfigError) as err:
        stored_protocol(folder, "fedavg")
    assert str(err.value) == sentence
    assert cli.main([*RUN, "--protocol-dir", str(folder), "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [f"leakattack: error: {sentence}"]
    assert not (tmp_path / "out").exists()
