"""A researcher's own image folder through the command line: the run names the files it attacked, --download is
warned of, a sweep's check reads the baseline's images as a run does, and torchvision files that are present but
not the official ones are not called missing."""

import json

import numpy as np
import pytest
from PIL import Image

from leakattack import cli

RUN = ["--model", "lenet", "--dataset", "imagefolder", "--image-size", "16", "--iterations", "2", "--threads", "1",
       "--no-lpips", "--quiet"]


def folder(tmp_path, broken: bool = False):
    root = tmp_path / "imgs"
    rng = np.random.default_rng(0)
    for cls in ("cat", "dog"):
        (root / cls).mkdir(parents=True)
        for i in range(3):
            Image.fromarray(rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)).save(root / cls / f"{i}.png")
    if broken:
        (root / "dog" / "9.png").write_bytes(b"not a png")
    return root


def test_the_run_names_the_files_it_attacked(tmp_path, capsys):
    root = folder(tmp_path)
    out = tmp_path / "run"
    assert cli.main(["run", *RUN, "--data-root", str(root), "--image-index", "2", "--batch-size", "2",
                     "--out", str(out)]) == 0
    derived = json.loads((out / "config.json").read_text())["derived"]
    assert derived["image_files"] == [str((root / "cat" / "2.png").resolve()), str((root / "dog" / "0.png").resolve())]
    assert derived["image_indices"] == [2, 3]
    # their contents and the folder, absolute: a file replaced under its name, or a relative --data-root read from
    # another folder, is noticed
    import hashlib

    files = json.loads((out / "config.json").read_text())["files"]["images"]
    assert [f["path"] for f in files] == derived["image_files"]
    assert [f["sha256"] for f in files] == [hashlib.sha256(p.read_bytes()).hexdigest()
                                            for p in (root / "cat" / "2.png", root / "dog" / "0.png")]
    assert derived["data_root"] == str(root.resolve())


@pytest.mark.parametrize("draw", ["consecutive", "class", "random"])
def test_the_run_names_the_data_set_indices_of_its_batch(tmp_path, capsys, draw):
    from leakattack.data import batch_positions, get_dataset

    out = tmp_path / draw
    assert cli.main(["run", "--model", "lenet", "--dataset", "digits", "--iterations", "1", "--no-lpips", "--quiet",
                     "--image-index", "7", "--batch-size", "3", "--batch-draw", draw, "--out", str(out)]) == 0
    derived = json.loads((out / "config.json").read_text())["derived"]
    want = batch_positions(get_dataset("digits"), 7, 3, draw).tolist()
    assert derived["image_indices"] == want and want[0] == 7 and "image_files" not in derived
    if draw == "consecutive":
        assert want == [7, 8, 9]


def test_download_with_an_image_folder_is_warned_of(tmp_path, capsys):
    root = folder(tmp_path)
    assert cli.main(["run", *RUN, "--data-root", str(root), "--download", "--out", str(tmp_path / "run")]) == 0
    assert "--download is not read: an image folder is read from --data-root" in capsys.readouterr().err


def test_a_sweep_refuses_an_unreadable_baseline_image_before_writing_anything(tmp_path, capsys):
    root = folder(tmp_path, broken=True)
    toml = tmp_path / "s.toml"
    toml.write_text(f'[base]\nmodel = "lenet"\ndataset = "imagefolder"\ndata_root = "{root}"\nimage_size = 16\n'
                    'iterations = 2\nthreads = 1\n[grid]\nimage_index = [0, 1]\n')
    for extra in (["--dry-run"], []):
        assert cli.main(["sweep", str(toml), "--out", str(tmp_path / "sw"), "--quiet", *extra]) == 2
        assert "9.png is not readable" in capsys.readouterr().err
        assert not (tmp_path / "sw").exists()


def test_torchvision_files_present_but_not_the_official_ones_are_not_called_missing(tmp_path, capsys):
    (tmp_path / "cifar-10-batches-py").mkdir()
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch", "batches.meta"]:
        (tmp_path / "cifar-10-batches-py" / name).write_bytes(b"x")
    assert cli.main(["run", "--model", "lenet", "--dataset", "cifar10", "--data-root", str(tmp_path),
                     "--iterations", "2", "--quiet", "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "cifar10 files are under data root" in err and "incomplete or corrupted" in err and "not found" not in err
