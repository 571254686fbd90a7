"""Fixtures shared by every test. Shared functions and classes live in tests/support/, one module per
kind of test (``rnn_testing`` for all, ``fake_gpu`` and ``cudnn_testing`` for the cuDNN binding's host
tests, ``mpi_jobs`` and ``training_case`` for the MPI jobs, ``gpu_support`` for tests/gpu,
``convert_testing`` for the conversion oracles).

This file puts tests/support/ on ``sys.path`` for every test, so any test imports a helper by name
(``from rnn_testing import Case``); scripts that run outside pytest put it there themselves.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest

SUPPORT = Path(__file__).resolve().parent / "support"
sys.path.insert(0, str(SUPPORT))

from cudnn_rnn import _cudnn_cache  # noqa: E402
from fake_gpu import FakeCudnn, install  # noqa: E402
from rnn_testing import stable_seed  # noqa: E402


@pytest.fixture
def rng(request: pytest.FixtureRequest) -> np.random.Generator:
    """A generator seeded from the test's node id, so every test draws its own fixed numbers."""
    return np.random.default_rng(stable_seed(request.node.nodeid))


@pytest.fixture
def fake_cudnn(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeCudnn]:
    """CuPy and cuDNN faked on the host (tests/support/fake_gpu.py), with fresh backend caches, for one test.

    Afterwards every cuDNN object the test created must have been destroyed, and no kernel may have
    touched another GPU's memory.
    """
    fake = install(monkeypatch)
    yield fake
    _cudnn_cache.clear_caches()
    assert fake.open == {}, "every cuDNN object created was destroyed"
    assert fake.gpu.violations == []
