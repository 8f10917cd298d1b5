"""matplotlib is imported on a figure's first use; a Ctrl-C during that import waits for it to end."""

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent('''
    import importlib.abc, signal, sys

    class Finder(importlib.abc.MetaPathFinder):  # a Ctrl-C as matplotlib imports its C extension
        fired = False

        def find_spec(self, name, path, target=None):
            if name == "matplotlib.ft2font" and not Finder.fired:
                Finder.fired = True
                signal.raise_signal(signal.SIGINT)
            return None

    sys.meta_path.insert(0, Finder())
    from leakattack.figures.common import plt
    try:
        plt.figure
        print("no interrupt")
    except KeyboardInterrupt:
        print("interrupted")
    print("figure", callable(plt.figure))
''')


def test_a_ctrl_c_during_matplotlibs_import_comes_after_it_and_leaves_it_whole():
    """A Ctrl-C inside the import raised ImportError ("initialization failed") where a run stops in one line (exit
    1 with a traceback, as a run writing its figure showed), and left matplotlib half imported: the next use failed
    on a missing attribute."""
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["interrupted", "figure True"], (done.stdout, done.stderr)
