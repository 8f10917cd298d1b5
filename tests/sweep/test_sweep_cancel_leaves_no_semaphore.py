"""Stopping a sweep's worker processes (Ctrl-C with --jobs N) ends without Python's resource-tracker warning about
leaked semaphores: a progress bar drawn in a worker must not leave a process-shared lock behind when the worker is
terminated."""

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import time

    from leakattack.sweep.backends.local import LocalBackend


    def work(i):
        from leakattack.progress import progress_bar
        progress_bar(3, "point", "it", requested=False).close()  # as a point's attack does in a worker
        if i > 0:
            time.sleep(60)
        return i


    if __name__ == "__main__":
        backend = LocalBackend(jobs=2)
        for _item, _result in backend.map_unordered(work, [0, 1, 2]):
            break  # one point back; both workers have drawn a bar and are busy
        backend.close(cancel=True)  # what Ctrl-C does
        print("stopped")
""")


def test_cancelled_workers_leave_no_leaked_semaphore_warning(tmp_path):
    script = tmp_path / "cancel_workers.py"
    script.write_text(SCRIPT)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "stopped" in done.stdout
    assert "leaked semaphore" not in done.stderr, done.stderr
    assert "resource_tracker" not in done.stderr, done.stderr
