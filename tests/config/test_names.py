"""The registry names and constants the flags show (leakattack.config.names) equal their originals."""

from __future__ import annotations

import pytest

from leakattack.config import Choice, RunConfig, names

LISTED = sorted(n for n in names.__all__ if isinstance(getattr(names, n), names.Listed))


@pytest.mark.parametrize("name", LISTED)
def test_each_copied_registry_lists_what_the_registry_lists(name):
    listed = getattr(names, name)
    assert list(listed.shown) == listed(), f"leakattack/config/names.py: {name} is out of date"


@pytest.mark.parametrize("name", sorted(names.SOURCES))
def test_each_copied_constant_equals_its_original(name):
    copy, original = getattr(names, name), names.live(names.SOURCES[name])
    if isinstance(copy, tuple):  # a dict is copied as its keys
        original = tuple(original)
    assert copy == original, f"leakattack/config/names.py: {name} is out of date"


def test_every_copied_constant_names_its_original():
    constants = [n for n in names.__all__ if n.isupper() and n != "SOURCES" and n not in LISTED]
    assert sorted(constants) == sorted(names.SOURCES)


def test_validation_asks_the_registry_not_the_copy(monkeypatch):
    import leakattack.sketch as sketch

    monkeypatch.setattr(sketch, "list_sketches", lambda: ["srht", "registered-at-run-time"])
    choice = Choice(names.SKETCHES)
    assert choice.ok("registered-at-run-time") and not choice.ok("countsketch")
    assert "countsketch" in choice.shown  # --help prints the copy


def test_a_bad_prior_is_refused_through_the_live_check():
    with pytest.raises(Exception, match="prior"):
        RunConfig(priors=["nosuchprior"]).validate()
