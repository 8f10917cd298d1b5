"""Shared test helpers."""

import signal
import sys
import threading

import pytest
import torch

from leakattack.sketch.base import Sketch


class CodeInFile:
    """An object whose unpickling calls ``record``: a stand-in for code hidden in a file someone else wrote."""

    loaded: list = []

    def __reduce__(self):
        return CodeInFile.record, ("code ran",)

    @staticmethod
    def record(tag):
        CodeInFile.loaded.append(tag)
        return tag


@pytest.fixture(autouse=True)
def signal_handlers_restored():
    """Every test starts with Python's own Ctrl-C and SIGTERM handlers and leaves them so: a test that ignores a
    signal (or a command's entry, which ignores both once it has returned) must not change what later tests in the
    same worker process see."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    for s, handler in saved.items():
        if handler is not None:
            signal.signal(s, handler)


@pytest.fixture(autouse=True)
def figures_closed():
    """Every pyplot figure a test left open (figure tests keep some to inspect them) is closed after it, so that one
    worker process does not pile them up."""
    yield
    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is not None:
        pyplot.close("all")


@pytest.fixture
def code_in_file():
    """The class to pickle into a file; ``code_in_file.loaded`` lists what ran when it was loaded."""
    CodeInFile.loaded.clear()
    return CodeInFile


@pytest.fixture
def scaled_sketch():
    """A sketch class a * R around another sketch R (a message -lr R g is a scaled sketch)."""
    class Scaled(Sketch):
        def __init__(self, inner, a):
            super().__init__(inner.d, inner.b, inner.seed)
            self.inner, self.a = inner, a

        def _apply(self, v):
            return self.a * self.inner.apply(v)

        def _adjoint(self, u):
            return self.a * self.inner.adjoint(u)

    return Scaled


@pytest.fixture
def one_thread():
    """One torch thread, as the attack runs by default (--threads 1): small tensor operations slow down badly
    when two threads share busy cores."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def fresh_registries(monkeypatch):
    """Every registry a user extends (models, sketches, attacks, priors, defenses), restored after the test: what it
    registers is gone for the next one."""
    import defenses.registry
    import targets.models
    from leakattack import attacks, data
    from leakattack import sketch as sketches
    from leakattack.attacks import priors

    for registry in (targets.models._MODELS, sketches._REGISTRY, attacks._ATTACKS, priors._PRIORS,
                     defenses.registry._REGISTRY, data._REGISTRY):
        monkeypatch.setattr(registry, "_items", dict(registry._items))
        monkeypatch.setattr(registry, "_meta", dict(registry._meta))
        monkeypatch.setattr(registry, "_by", dict(registry._by))


@pytest.fixture
def drawn(monkeypatch):
    """The sweep figures drawn, by file stem, kept open instead of saved (and closed after the test); a module that
    also draws a run's figures defines its own."""
    import matplotlib.pyplot as plt

    from leakattack.figures import sweep as sweep_figures

    figs = {}
    monkeypatch.setattr(sweep_figures, "save_both", lambda fig, folder, stem: figs.setdefault(stem, fig) and [])
    yield figs
    for fig in figs.values():
        plt.close(fig)
