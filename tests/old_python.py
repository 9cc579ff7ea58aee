"""The oldest python a box may have (3.8), for the tests that run box-side code under it.

This machine's image ships pyenv's 3.8 beside the 3.11 the project uses; neither Debian (bookworm
has only 3.11) nor PyPI offers a 3.8 interpreter, so CI cannot install one. Its absence is a
missing real part: `python38()` fails the test that asks, it never skips."""

from __future__ import annotations

from pathlib import Path

import pytest


def python38() -> Path:
    found = sorted(Path.home().glob(".pyenv/versions/3.8*/bin/python3.8"))
    if not found:
        pytest.fail("no Python 3.8 interpreter (~/.pyenv/versions/3.8*/bin/python3.8): the box "
                    "code must be run under the oldest python it supports; install one "
                    "(e.g. `pyenv install 3.8`)", pytrace=False)
    return found[-1]
