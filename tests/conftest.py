"""Fixtures shared by every test; shared functions and classes live in tests/rnn_testing.py (and, for the
cuDNN binding's host tests, tests/cudnn_testing.py and tests/fake_gpu.py).

This folder is on ``sys.path`` for every test (pytest's default prepend import mode puts each
conftest's folder there), so tests/oracle/ imports ``rnn_testing`` too.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np
import pytest

from cudnn_rnn import _cudnn_cache
from fake_gpu import FakeCudnn, install
from rnn_testing import stable_seed


@pytest.fixture
def rng(request: pytest.FixtureRequest) -> np.random.Generator:
    """A generator seeded from the test's node id, so every test draws its own fixed numbers."""
    return np.random.default_rng(stable_seed(request.node.nodeid))


@pytest.fixture
def fake_cudnn(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeCudnn]:
    """CuPy and cuDNN faked on the host (tests/fake_gpu.py), with fresh backend caches, for one test.

    Afterwards every cuDNN object the test created must have been destroyed, and no kernel may have
    touched another GPU's memory.
    """
    fake = install(monkeypatch)
    yield fake
    _cudnn_cache.clear_caches()
    assert fake.open == {}, "every cuDNN object created was destroyed"
    assert fake.gpu.violations == []
