"""Shared test helpers."""

import pytest


class CodeInFile:
    """An object whose unpickling calls ``record``: a stand-in for code hidden in a file someone else wrote."""

    loaded: list = []

    def __reduce__(self):
        return CodeInFile.record, ("code ran",)

    @staticmethod
    def record(tag):
        CodeInFile.loaded.append(tag)
        return tag


@pytest.fixture
def code_in_file():
    """The class to pickle into a file; ``code_in_file.loaded`` lists what ran when it was loaded."""
    CodeInFile.loaded.clear()
    return CodeInFile
