"""A run warning of a sweep's points (a setting that changes nothing) is printed once per sweep, naming the sweep key
of the flag it names, and not at all when the sweep is refused."""

import pytest

from leakattack import cli

SWEEP = """
[base]
model = "logreg"
dataset = "digits"
sketch = "srht"
sketch_ratio = 0.25
iterations = 20
defense = "clip:C=1"
noise_seed = 5

[grid]
image_index = {images}
"""
WARNING = "--noise-seed 5 changes nothing: the defense draws no noise"


@pytest.mark.parametrize("extra", [["--jobs", "1"], ["--jobs", "2"], ["--dry-run"]])
def test_a_run_warning_is_printed_once_and_names_the_sweep_key(tmp_path, capfd, extra):
    cfg = tmp_path / "s.toml"
    cfg.write_text(SWEEP.format(images="[0, 1, 2, 3]"))
    assert cli.main(["sweep", str(cfg), "--out", str(tmp_path / "out"), "--quiet", *extra]) == 0
    err = capfd.readouterr().err
    warned = [line for line in err.splitlines() if "warning" in line]
    assert len(warned) == 1, err
    assert WARNING in warned[0] and "noise_seed" in warned[0], warned[0]


def test_a_refused_sweep_prints_its_refusal_alone(tmp_path, capfd):
    cfg = tmp_path / "s.toml"
    cfg.write_text(SWEEP.format(images="[0, 100000]"))
    assert cli.main(["sweep", str(cfg), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    lines = capfd.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("leakattack: error:"), lines


@pytest.mark.parametrize("dry_run", [[], ["--dry-run"]])
def test_a_sweep_refused_for_its_out_folder_prints_its_refusal_alone(tmp_path, capfd, dry_run):
    """The --out folder is refused before the points are checked, so their run warning never precedes the refusal."""
    cfg = tmp_path / "s.toml"
    cfg.write_text(SWEEP.format(images="[0, 1]"))
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert cli.main(["sweep", str(cfg), "--out", str(out), "--quiet", *dry_run]) == 2
    lines = capfd.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("leakattack: error: --out"), lines
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]


def test_a_base_key_every_grid_sets_is_warned_of_once(tmp_path, capfd):
    """[base]'s value of a key that every [grid] table sets reaches no point; one that some [[grid]] table leaves
    out still does, and is not warned of."""
    cfg = tmp_path / "s.toml"
    cfg.write_text(SWEEP.replace("noise_seed = 5\n", "").format(images="[0, 1]") + "sketch_ratio = [0.5]\n")
    assert cli.main(["sweep", str(cfg), "--out", str(tmp_path / "out"), "--quiet", "--dry-run"]) == 0
    warned = [line for line in capfd.readouterr().err.splitlines() if "warning" in line]
    assert len(warned) == 1 and "[base] sketch_ratio = 0.25 changes nothing: every [grid] table sets sketch_ratio" \
        in warned[0], warned
    cfg.write_text(SWEEP.replace("noise_seed = 5\n", "").replace("[grid]", "[[grid]]").format(images="[0, 1]")
                   + "sketch_ratio = [0.5]\n\n[[grid]]\nimage_index = [2]\n")
    assert cli.main(["sweep", str(cfg), "--out", str(tmp_path / "out2"), "--quiet", "--dry-run"]) == 0
    assert "warning" not in capfd.readouterr().err


@pytest.mark.parametrize("extra", [["--jobs", "1"], ["--dry-run"]])
def test_points_that_warn_alike_with_other_numbers_print_one_line_that_counts_them(tmp_path, capfd, extra):
    """Each point's own numbers made each text new: a sweep over noise seeds (or over noise levels, whose share of
    the message a warning states) printed one line per point."""
    cfg = tmp_path / "s.toml"
    cfg.write_text(SWEEP.replace("noise_seed = 5\n", "").format(images="[0, 1]") + "noise_seed = [5, 6, 7]\n")
    assert cli.main(["sweep", str(cfg), "--out", str(tmp_path / "out"), "--quiet", *extra]) == 0
    warned = [line for line in capfd.readouterr().err.splitlines() if "warning" in line]
    assert len(warned) == 1, warned
    assert WARNING in warned[0] and warned[0].endswith("(and 2 more such warnings with other numbers at other "
                                                       "points)"), warned[0]
