"""`leakattack collect` gives a run that attacked a captured message file the round and client its file names
(``write_message(..., round=..., client=...)``, as the Flower recorder writes them), so that a table of many recorded
messages says which message each row attacked."""

import csv
import json
from pathlib import Path

from leakattack import cli


def _message_run(folder: Path, ids: dict) -> None:
    """A run folder as `leakattack run --message` writes it: the message file under ``run``, what the file says about
    the message (its ids among it) under ``derived.sketch``."""
    folder.mkdir(parents=True)
    described = {"file": "m.pt", "kind": "update", "numbers": 5033, "batch_size": 1, "ids": ids,
                 "encoder": {"kind": "srht", "d": 10066, "b": 5033, "seed": 7}}
    (folder / "config.json").write_text(json.dumps({
        "run": {"model": "net.py:Net", "sketch": "srht", "defense": None, "attack": "gradient-matching",
                "protocol": "", "batch_size": 1, "message": "m.pt"},
        "derived": {"dataset": "message", "sketch": described}}))
    (folder / "metrics.json").write_text(json.dumps({"psnr": None, "ssim": None, "iterations": 30,
                                                     "stop_reason": "iterations", "d": 10066, "b": 5033}))


def test_collect_names_the_round_and_client_of_an_attacked_message_file(tmp_path):
    runs = tmp_path / "runs"
    _message_run(runs / "r1c0", {"round": 1, "client": "0", "node": "123", "weights": "round001-weights.pt"})
    _message_run(runs / "r2c1", {"round": 2, "client": "1"})
    _message_run(runs / "plain", {})  # a message written without ids
    out = tmp_path / "table.csv"
    assert cli.main(["collect", str(runs), "--out", str(out)]) == 0
    rows = {Path(r["run"]).name: r for r in csv.DictReader(out.open())}
    assert (rows["r1c0"]["round"], rows["r1c0"]["client"]) == ("1", "0")
    assert (rows["r2c1"]["round"], rows["r2c1"]["client"]) == ("2", "1")
    assert (rows["plain"]["round"], rows["plain"]["client"]) == ("", "")
    assert list(rows["r1c0"])[8:10] == ["round", "client"]  # at their place among the settings
