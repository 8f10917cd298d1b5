"""Atomic writes of run files."""

import os
import stat

from leakattack import results


def test_atomic_write_leaves_no_temporary_and_uses_normal_permissions(tmp_path):
    path = tmp_path / "sub" / "metrics.json"
    results.write_json(path, {"psnr": float("inf"), "ssim": 0.5})
    assert path.read_text().strip().startswith("{")
    assert '"psnr": null' in path.read_text()  # non-finite floats become null, never invalid JSON
    assert [p.name for p in path.parent.iterdir()] == ["metrics.json"]
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~mask


def test_atomic_write_replaces_whole_file(tmp_path):
    path = tmp_path / "a.txt"
    results.atomic_write_text(path, "x" * 1000)
    results.atomic_write_text(path, "short")
    assert path.read_text() == "short"
