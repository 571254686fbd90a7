"""Fixtures shared by every test. Shared functions and classes live in tests/support/, one module per
kind of test (``rnn_testing`` for all, ``fake_gpu`` and ``cudnn_testing`` for the cuDNN binding's host
tests, ``mpi_jobs`` and ``training_case`` for the MPI jobs, ``gpu_support`` for tests/gpu,
``convert_testing`` for the conversion oracles, ``tf_checkpoint_testing`` for the TensorFlow checkpoint
reader's).

This file puts tests/support/ on ``sys.path`` for every test, so any test imports a helper by name
(``from rnn_testing import Case``); scripts that run outside pytest put it there themselves.
"""

from __future__ import annotations

import os
import sys
import types
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest

SUPPORT = Path(__file__).resolve().parent / "support"
sys.path.insert(0, str(SUPPORT))
# JAX takes most of a GPU's memory at its first use unless told not to: CuPy's pool (cuDNN's workspaces, the op's
# arrays) needs room beside it, whichever test first starts JAX on a GPU
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

from cudnn_rnn._cudnn import _cache as _cudnn_cache  # noqa: E402
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


@pytest.fixture
def fake_cupy(fake_cudnn: FakeCudnn, monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """``fake_cudnn``, with the fake CuPy installed as a real module named ``cupy``, which is returned.

    The layers accept only the numpy or cupy module as ``xp``, so with it ``LSTM(..., xp=cupy)``
    lives on the fake GPU the way it lives on a real one.
    """
    module = types.ModuleType("cupy", "the fake of tests/support/fake_gpu.py as a module")
    module.__dict__.update(vars(sys.modules["cupy"]))
    module.sqrt = np.sqrt  # Adam's update; the ufunc runs through the fake array's kernel check
    monkeypatch.setitem(sys.modules, "cupy", module)
    return module
