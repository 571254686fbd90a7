"""The cuDNN binding's host side: everything that needs no GPU.

* the library search order and its error text (fake folders, fake libraries);
* statuses, CudnnError text and pickling;
* the bounded caches and the one-owner resources (fake resources);
* ``cudnn-rnn info`` without a GPU;
* when libcudnn.so.9 is installed (the nvidia-cudnn-cu12/-cu13 wheel): enum values and
  prototypes against the wheel's own headers, and set-then-get round trips of the RNN, RNN-data
  and tensor descriptors through cuDNN's getters (handle-free calls only: cudnnCreate needs a
  driver). Those tests skip only when the library is absent.
"""

from __future__ import annotations

import argparse
import collections
import gc
import inspect
import itertools
import json
import os
import pickle
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest

from cudnn_rnn import _cudnn, _descriptors, _lib, _reserve, info
from cudnn_rnn._descriptors import LRUCache, Resource, live_counts
from cudnn_rnn.config import RNNConfig
from cudnn_rnn.errors import CudnnError, CudnnNotAvailableError
from fake_gpu import FakeCudnn, install, to_device

REPO = Path(__file__).resolve().parents[1]


def _library_or_none() -> _lib.Library | None:
    try:
        return _lib.library()
    except CudnnNotAvailableError:
        return None


LIBRARY = _library_or_none()
needs_library = pytest.mark.skipif(LIBRARY is None,
                                   reason="libcudnn.so.9 is not installed (pip install nvidia-cudnn-cu12)")


def _touch(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"not a shared library")
    return path


# ==== the search order ========================================================================
def test_candidates_wheel_then_sys_path_then_soname(tmp_path: Path) -> None:
    wheel_lib = tmp_path / "site-a" / "nvidia" / "cudnn" / "lib"
    in_wheel = _touch(wheel_lib / "libcudnn.so.9")
    in_b = _touch(tmp_path / "site-b" / "nvidia" / "cudnn" / "lib" / "libcudnn.so.9")
    empty = tmp_path / "site-c"
    empty.mkdir()
    candidates = _lib.library_candidates(environ={}, wheel_dirs=[str(wheel_lib)],
                                         search_path=[str(empty), str(tmp_path / "site-a"), str(tmp_path / "site-b")])
    # site-a holds the same file as the wheel folder: listed once, under the wheel.
    assert [c.path for c in candidates] == [str(in_wheel), str(in_b), "libcudnn.so.9"]
    assert "wheel" in candidates[0].source
    assert "site-b" in candidates[1].source
    assert candidates[2].source == "the system library path"


def test_candidates_env_override_is_the_only_candidate(tmp_path: Path) -> None:
    file = _touch(tmp_path / "custom" / "libcudnn.so.9")
    wheel = _touch(tmp_path / "w" / "libcudnn.so.9").parent
    assert _lib.library_candidates(environ={"CUDNN_RNN_LIBRARY": str(file)}, wheel_dirs=[str(wheel)]) == [
        _lib.Candidate(str(file), "$CUDNN_RNN_LIBRARY")]
    # a folder means the soname inside it; a missing path is kept, so the failure names it
    assert _lib.library_candidates(environ={"CUDNN_RNN_LIBRARY": str(file.parent)})[0].path == str(file)
    missing = str(tmp_path / "nowhere.so")
    assert [c.path for c in _lib.library_candidates(environ={"CUDNN_RNN_LIBRARY": missing})] == [missing]


def test_wheel_folder_found_through_the_namespace_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # nvidia/ and nvidia/cudnn/ have no __init__.py: a namespace package, as the wheels install it
    library = _touch(tmp_path / "nvidia" / "cudnn" / "lib" / "libcudnn.so.9")
    for name in ("nvidia", "nvidia.cudnn"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert str(library.parent) in _lib._wheel_lib_dirs()
    paths = [c.path for c in _lib.library_candidates(environ={}, search_path=[])]
    assert paths[0] == str(library) and paths[-1] == "libcudnn.so.9"


# ==== loading and its errors (fake libraries) =================================================
class FakeFunction:
    """Stands in for a ctypes function: callable, with settable restype/argtypes."""

    def __init__(self, result: int) -> None:
        self.result, self.restype, self.argtypes = result, None, None

    def __call__(self, *args: Any) -> int:
        return self.result


class FakeLibrary:
    """A 'CDLL' exporting every cudnn* symbol except ``missing``."""

    def __init__(self, version: int, missing: tuple[str, ...] = (), version_check: int = 0) -> None:
        self.version, self.missing, self.version_check = version, missing, version_check

    def __getattr__(self, name: str) -> FakeFunction:
        if not name.startswith("cudnn") or name in self.missing:
            raise AttributeError(name)
        result = self.version if name == "cudnnGetVersion" else self.version_check if "VersionCheck" in name else 0
        function = FakeFunction(result)
        setattr(self, name, function)
        return function


def _load_fake(fake: FakeLibrary, path: str = "/fake/libcudnn.so.9") -> _lib.Library:
    return _lib.load_library([_lib.Candidate(path, "a test")], opener=lambda _: fake)


def test_loader_binds_every_prototype() -> None:
    fake = FakeLibrary(92800)
    library = _load_fake(fake)
    assert library.version == 92800 and library.path == "/fake/libcudnn.so.9"
    assert set(library.functions) == {p.name for p in _lib.PROTOTYPES}
    for prototype in _lib.PROTOTYPES:
        function = getattr(fake, prototype.name)
        assert (function.restype, function.argtypes) == (prototype.restype, prototype.argtypes), prototype.name


@pytest.mark.parametrize("version, shown", [(8907, "cuDNN 8.9.7 (version 8907)"), (7605, "cuDNN 7.6.5"),
                                            (100100, "cuDNN 10.1.0")])
def test_loader_refuses_other_major_versions(version: int, shown: str) -> None:
    with pytest.raises(CudnnNotAvailableError) as error:
        _load_fake(FakeLibrary(version))
    message = str(error.value)
    assert shown in message and "cuDNN 9 is required" in message
    assert "/fake/libcudnn.so.9" in message
    assert "pip install nvidia-cudnn-cu12" in message and "nvidia-cudnn-cu13" in message


def test_loader_names_a_missing_symbol_and_a_sublibrary_mismatch() -> None:
    with pytest.raises(CudnnNotAvailableError, match="cuDNN 9.0.0 does not export cudnnRNNForward"):
        _load_fake(FakeLibrary(90000, missing=("cudnnRNNForward",)))
    with pytest.raises(CudnnNotAvailableError, match="CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH"):
        _load_fake(FakeLibrary(92800, version_check=1002))
    with pytest.raises(CudnnNotAvailableError, match="not a cuDNN library"):
        _load_fake(FakeLibrary(92800, missing=("cudnnGetVersion",)))


def test_loader_goes_on_to_the_next_candidate() -> None:
    libraries = {"/old/libcudnn.so.9": FakeLibrary(8907), "/good/libcudnn.so.9": FakeLibrary(92800)}
    candidates = [_lib.Candidate(path, "a test") for path in libraries]
    assert _lib.load_library(candidates, opener=libraries.__getitem__).path == "/good/libcudnn.so.9"


def test_loader_error_lists_each_candidate_and_the_fix(tmp_path: Path) -> None:
    not_elf = _touch(tmp_path / "nvidia" / "cudnn" / "lib" / "libcudnn.so.9")
    candidates = [_lib.Candidate(str(not_elf), "the nvidia-cudnn wheel (nvidia.cudnn)"),
                  _lib.Candidate("libcudnn_absent_for_test.so.9", "the system library path")]
    with pytest.raises(CudnnNotAvailableError) as error:
        _lib.load_library(candidates)  # the real ctypes loader
    message = str(error.value)
    assert message.startswith("cuDNN 9 (libcudnn.so.9) could not be loaded. Tried:")
    assert f"{not_elf} (from the nvidia-cudnn wheel (nvidia.cudnn)):" in message
    assert "libcudnn_absent_for_test.so.9 (from the system library path):" in message
    assert "pip install nvidia-cudnn-cu12 (CUDA 12) or nvidia-cudnn-cu13 (CUDA 13)" in message
    assert isinstance(error.value, ImportError)


def test_version_string() -> None:
    assert _lib.version_string(92800) == "9.28.0"
    assert _lib.version_string(90100) == "9.1.0"
    assert _lib.version_string(8907) == "8.9.7"


# ==== statuses and errors =====================================================================
#: a few codes as cudnn_api.md lists them from cudnn_graph.h
DOCUMENTED_STATUSES = {0: "SUCCESS", 1001: "NOT_INITIALIZED", 1002: "SUBLIBRARY_VERSION_MISMATCH",
                       2000: "BAD_PARAM", 2002: "BAD_PARAM_NULL_POINTER", 3000: "NOT_SUPPORTED",
                       3005: "NOT_SUPPORTED_INCOMPATIBLE_CUDA_DRIVER", 4000: "INTERNAL_ERROR",
                       5000: "EXECUTION_FAILED", 5004: "EXECUTION_FAILED_CURAND"}


def test_status_names() -> None:
    for code, name in DOCUMENTED_STATUSES.items():
        assert _lib.status_name(code) == "CUDNN_STATUS_" + name
    assert _lib.status_name(2999) == "CUDNN_STATUS_UNKNOWN(2999, category CUDNN_STATUS_BAD_PARAM)"
    assert _lib.status_name(7) == "CUDNN_STATUS_UNKNOWN(7, category CUDNN_STATUS_UNKNOWN)"
    assert len({s.value for s in _lib.Status}) == len(_lib.Status)  # no silent aliases


def test_check_raises_cudnn_error_with_detail(monkeypatch: pytest.MonkeyPatch) -> None:
    _lib.check(0, "cudnnAnything")  # success: nothing raised
    monkeypatch.setattr(_lib, "last_error_string", lambda: "seqLengthArray[2] > maxSeqLength")
    with pytest.raises(CudnnError) as raised:
        _lib.check(2000, "cudnnSetRNNDataDescriptor")
    error = raised.value
    assert (error.status_name, error.status, error.function) == ("CUDNN_STATUS_BAD_PARAM", 2000,
                                                                 "cudnnSetRNNDataDescriptor")
    assert str(error) == ("cudnnSetRNNDataDescriptor failed with CUDNN_STATUS_BAD_PARAM (2000): "
                          "seqLengthArray[2] > maxSeqLength")
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is CudnnError and str(copy) == str(error)
    assert (copy.status_name, copy.status, copy.function, copy.detail) == (
        error.status_name, error.status, error.function, error.detail)


def test_check_without_detail(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_lib, "last_error_string", lambda: "")
    with pytest.raises(CudnnError, match=r"^cudnnRNNForward failed with CUDNN_STATUS_EXECUTION_FAILED \(5000\)$"):
        _lib.check(5000, "cudnnRNNForward")


# ==== resources and caches (fake resources) ===================================================
class FakeResource:
    def __init__(self, name: str, closed: list[str]) -> None:
        self.name, self._closed = name, closed

    def close(self) -> None:
        self._closed.append(self.name)


def test_lru_cache_is_bounded_and_evicts_least_recently_used() -> None:
    closed: list[str] = []
    cache: LRUCache[str, FakeResource] = LRUCache(3)
    made = {key: cache.get(key, lambda k=key: FakeResource(k, closed)) for key in "abc"}
    assert cache.get("a", lambda: pytest.fail("a hit must not create")) is made["a"]  # a is now the newest
    cache.get("d", lambda: FakeResource("d", closed))
    assert closed == ["b"] and cache.keys() == ["c", "a", "d"]
    cache.get("e", lambda: FakeResource("e", closed))
    assert closed == ["b", "c"] and len(cache) == 3 and "c" not in cache
    assert (cache.hits, cache.misses, cache.evictions) == (1, 5, 2)
    cache.clear()
    assert closed == ["b", "c", "a", "d", "e"] and len(cache) == 0


def test_lru_cache_stores_nothing_when_creation_fails() -> None:
    cache: LRUCache[int, FakeResource] = LRUCache(2)

    def fail() -> FakeResource:
        raise RuntimeError("creation failed")

    with pytest.raises(RuntimeError, match="creation failed"):
        cache.get(1, fail)
    assert len(cache) == 0 and cache.misses == 1
    with pytest.raises(ValueError, match="maxsize must be >= 1; got 0"):
        LRUCache(0)


def test_lru_cache_with_a_custom_close() -> None:
    freed: list[int] = []
    cache: LRUCache[int, int] = LRUCache(1, close=freed.append)
    for key in range(4):
        cache.get(key, lambda k=key: k * 10)
    assert freed == [0, 10, 20] and cache.values() == [30]


class FakeDescriptor(Resource):
    __slots__ = ()

    def __init__(self, pointer: int, destroyed: list[int]) -> None:
        super().__init__(pointer, destroyed.append)


def test_resource_close_is_idempotent_and_counted() -> None:
    destroyed: list[int] = []
    before = live_counts().get("FakeDescriptor", 0)
    descriptor = FakeDescriptor(1234, destroyed)
    assert descriptor.pointer == 1234 and not descriptor.closed
    assert live_counts()["FakeDescriptor"] == before + 1
    descriptor.close()
    descriptor.close()
    assert destroyed == [1234] and descriptor.closed
    assert live_counts().get("FakeDescriptor", 0) == before
    with pytest.raises(RuntimeError, match="FakeDescriptor is closed"):
        _ = descriptor.pointer


def test_resource_context_manager_and_garbage_collection_backstop() -> None:
    destroyed: list[int] = []
    with FakeDescriptor(1, destroyed) as descriptor:
        assert descriptor.pointer == 1
    assert destroyed == [1]
    FakeDescriptor(2, destroyed)  # dropped at once: the finalizer frees it
    gc.collect()
    assert destroyed == [1, 2]
    assert not hasattr(FakeDescriptor, "__del__")


def test_adopt_destroys_the_object_when_its_setup_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, str, int]] = []
    monkeypatch.setattr(_lib, "create", lambda kind: calls.append(("create", kind, 77)) or 77)
    monkeypatch.setattr(_lib, "destroy", lambda kind, pointer: calls.append(("destroy", kind, pointer)))

    def bad_setup(pointer: int) -> None:
        raise CudnnError("CUDNN_STATUS_BAD_PARAM", 2000, "cudnnSetTensorNdDescriptor")

    before = live_counts()
    with pytest.raises(CudnnError):
        Resource._adopt("TensorDescriptor", bad_setup)
    assert calls == [("create", "TensorDescriptor", 77), ("destroy", "TensorDescriptor", 77)]
    assert live_counts() == before


def test_packed_strides() -> None:
    assert _descriptors.packed_strides((4, 3, 5)) == (15, 5, 1)
    assert _descriptors.packed_strides((2, 0, 3)) == (3, 3, 1)


# ==== backend decisions that need no GPU ======================================================
def test_network_key_ignores_dropout_where_cudnn_does(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_cudnn, "_tf32", False)
    two = RNNConfig("lstm", 2, 4, 3, dropout=0.5, seed=7, seed2=-3)
    key = _cudnn._network_key
    assert key(two, training=False) == key(two.replace(dropout=0.0, seed=0, seed2=0), training=False)
    assert key(two, training=True)[3:] == (0.5,)
    assert key(two, training=True) != key(two.replace(dropout=0.25), training=True)
    # seeds are applied to a network's dropout state, not keyed: an advancing seed reuses the network
    assert key(two, training=True) == key(two.replace(seed=8, seed2=3), training=True)
    one = RNNConfig("gru", 1, 4, 3, dropout=0.5, seed=1)
    assert key(one, training=True) == key(one.replace(dropout=0.0, seed=0), training=True)


def test_math_type_per_dtype_and_tf32_opt_in(monkeypatch: pytest.MonkeyPatch) -> None:
    configs = {dtype: RNNConfig("gru", 1, 4, 3, dtype=dtype) for dtype in ("float16", "float32", "float64")}
    monkeypatch.setattr(_cudnn, "_tf32", False)
    assert not _cudnn.tf32_allowed()
    default = {dtype: _cudnn._network_key(c, True)[2] for dtype, c in configs.items()}
    assert default == {"float16": _lib.MathType.TENSOR_OP_MATH, "float32": _lib.MathType.FMA_MATH,
                       "float64": _lib.MathType.DEFAULT_MATH}
    _cudnn.allow_tf32(True)
    assert _cudnn.tf32_allowed()
    opted = {dtype: _cudnn._network_key(c, True)[2] for dtype, c in configs.items()}
    assert opted == {**default, "float32": _lib.MathType.DEFAULT_MATH}
    _cudnn.allow_tf32(False)
    with pytest.raises(TypeError, match="enabled must be a bool; got int 1"):
        _cudnn.allow_tf32(1)  # type: ignore[arg-type]


def test_tf32_environment_default() -> None:
    code = "from cudnn_rnn import _cudnn; print(_cudnn.tf32_allowed())"
    for value, expected in (("1", "True"), ("0", "False"), ("", "False")):
        env = {**os.environ, "CUDNN_RNN_ALLOW_TF32": value}
        result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=REPO,
                                check=True)
        assert result.stdout.strip() == expected, value


def test_descriptor_fields_of_a_config() -> None:
    config = RNNConfig("lstm", 3, 8, 8, input_mode="skip_input", direction="bidirectional", num_proj=5,
                       dtype="float16")
    fields = _cudnn._rnn_fields(config, _lib.MathType.TENSOR_OP_MATH, dropout_desc=0)
    assert fields == _lib.RNNDescriptorFields(
        _lib.RNNAlgo.STANDARD, _lib.RNNMode.LSTM, _lib.RNNBiasMode.DOUBLE_BIAS, _lib.DirectionMode.BIDIRECTIONAL,
        _lib.RNNInputMode.SKIP_INPUT, _lib.DataType.HALF, _lib.DataType.FLOAT, _lib.MathType.TENSOR_OP_MATH,
        8, 8, 5, 3, 0, _lib.AuxFlag.PADDED_IO_ENABLED)
    no_projection = _cudnn._rnn_fields(RNNConfig("gru", 1, 6, 2), _lib.MathType.FMA_MATH, 0)
    assert no_projection.proj_size == no_projection.hidden_size == 6  # projSize = hiddenSize means none


def test_layout_grid_covers_every_case() -> None:
    grid = _cudnn.layout_check_configs()
    assert len(grid) == len(set(grid))
    seen = {(c.rnn_mode, c.num_layers, c.direction, c.input_mode, bool(c.num_proj), c.dtype) for c in grid}
    expected = {(m, n, d, i, p, t) for m, n, d, i, p, t in itertools.product(
        ("rnn_relu", "rnn_tanh", "lstm", "gru"), (1, 2, 3), ("unidirectional", "bidirectional"),
        ("linear_input", "skip_input"), (False, True), ("float16", "float32", "float64")) if m == "lstm" or not p}
    assert seen == expected


def test_clear_caches_and_cache_info_without_a_gpu() -> None:
    _cudnn.clear_caches()  # nothing cached on this thread: needs no CuPy
    info_now = _cudnn.cache_info()
    assert (info_now["devices"], info_now["networks"], info_now["plans"]) == ([], 0, 0)


# ==== cudnn-rnn info without a GPU ============================================================
def test_info_text_without_gpu(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cupy", None)  # as on a machine without CuPy
    assert info.run(argparse.Namespace(json=False)) == 0
    out = capsys.readouterr().out
    assert re.search(r"^NumPy +" + re.escape(np.__version__) + "$", out, re.M)
    assert re.search(r"^CuPy +not installed; pip install 'cudnn_rnn\[cuda12\]'", out, re.M)
    assert re.search(r"^ +numpy \(reference\) +usable$", out, re.M)
    assert re.search(r"^ +cupy \(cuDNN\) +not usable: CuPy is not installed", out, re.M)
    if LIBRARY is not None:
        assert re.search(r"^cuDNN +9\.\d+\.\d+ \(.*libcudnn\.so\.9; built for CUDA \d+\.\d+\)$", out, re.M)


def test_info_json_without_cudnn(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                                 tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "cupy", None)
    monkeypatch.setenv("CUDNN_RNN_LIBRARY", str(tmp_path / "missing" / "libcudnn.so.9"))
    monkeypatch.setattr(_lib, "_loaded", None)
    assert info.main(["--json"]) == 0
    facts = json.loads(capsys.readouterr().out)
    assert facts["cudnn"]["available"] is False
    assert "missing/libcudnn.so.9 (from $CUDNN_RNN_LIBRARY)" in facts["cudnn"]["reason"]
    assert facts["backends"]["numpy (reference)"] == "usable"
    assert facts["backends"]["cupy (cuDNN)"].startswith("not usable")
    assert facts["cupy"]["available"] is False


def test_info_command_exits_zero_in_a_fresh_process(tmp_path: Path) -> None:
    env = {**os.environ, "CUDNN_RNN_LIBRARY": str(tmp_path / "absent.so")}
    result = subprocess.run([sys.executable, "-m", "cudnn_rnn.info"], env=env, capture_output=True, text=True,
                            cwd=REPO, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "cuDNN         not available" in result.stdout
    assert "absent.so (from $CUDNN_RNN_LIBRARY)" in result.stdout
    assert "numpy (reference)   usable" in result.stdout


@pytest.mark.parametrize("script", ["benchmarks/bench_gpu.py", "scripts/check_layout.py", "scripts/gpu_smoke.py"])
def test_gpu_scripts_explain_a_missing_gpu(script: str) -> None:
    code = (f"import sys, runpy; sys.modules['cupy'] = None; sys.argv = [{script!r}]; "
            f"runpy.run_path({script!r}, run_name='__main__')")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "needs a CUDA GPU with CuPy" in result.stderr


def _gpu_check(tmp_path: Path, *stages: str, **env: str) -> subprocess.CompletedProcess:
    environment = {**os.environ, "OUT": str(tmp_path), "PYTHON": sys.executable, **env}
    return subprocess.run(["bash", str(REPO / "scripts" / "gpu_check.sh"), *stages], cwd=REPO, env=environment,
                          capture_output=True, text=True, timeout=120)


def _python_that(folder: Path, first: str) -> Path:
    """This interpreter behind a shell script that runs the shell line ``first`` before it."""
    python = folder / "python"
    python.write_text(f'#!/bin/sh\n{first}\nexec {sys.executable} "$@"\n')
    python.chmod(0o755)
    return python


def test_gpu_check_refuses_an_unknown_stage(tmp_path: Path) -> None:
    subprocess.run(["bash", "-n", str(REPO / "scripts" / "gpu_check.sh")], check=True)
    for stages in ((), ("everything",), ("smoke", "nope")):
        result = _gpu_check(tmp_path, *stages)
        assert result.returncode == 2 and "usage: bash scripts/gpu_check.sh STAGE" in result.stderr, stages
    assert list(tmp_path.iterdir()) == [], "nothing ran"


def test_gpu_check_stage_leaves_its_log_and_record(tmp_path: Path) -> None:
    result = _gpu_check(tmp_path, "smoke", "layout")
    assert result.returncode == 1  # both stages fail here: no GPU
    for stage, script in (("smoke", "scripts/gpu_smoke.py"), ("layout", "scripts/check_layout.py")):
        assert "needs a CUDA GPU with CuPy" in (tmp_path / stage / f"{stage}.log").read_text()
        record = (tmp_path / stage / "record.md").read_text()
        assert record.startswith(f"# GPU check, stage `{stage}`: failed (exit 2)"), record
        assert f"- command: `{sys.executable} {script}` (limit 180 s, took " in record
        for fact in ("- date: ", "- commit: ", "- GPU: ", "- CUDA driver: ", "- cuDNN: ", "- CuPy: ", "- PyTorch: "):
            assert fact in record, fact


def test_gpu_check_pytest_stage_fails_without_a_gpu_instead_of_skipping(tmp_path: Path) -> None:
    result = _gpu_check(tmp_path, "tests")
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert "CUDNN_RNN_REQUIRE_GPU=1, but the GPU tests cannot run" in (tmp_path / "tests" / "tests.log").read_text()
    record = (tmp_path / "tests" / "record.md").read_text()
    assert record.startswith("# GPU check, stage `tests`: failed (exit 4)"), record


def test_gpu_check_takes_mpich_from_a_wheel_folder_only_when_mpi4py_has_no_mpi(tmp_path: Path) -> None:
    python = _python_that(tmp_path, '[ "$2" = "from mpi4py import MPI" ] && exit 1')  # mpi4py finds no MPI
    empty = tmp_path / "wheels"
    empty.mkdir()
    result = _gpu_check(tmp_path / "out", "smoke", PYTHON=str(python), MPICH_WHEEL_DIR=str(empty),
                        TMPDIR=str(tmp_path))
    assert result.returncode == 2 and f"MPICH_WHEEL_DIR={empty} holds no mpich-*.whl" in result.stderr, result
    assert not (tmp_path / "out" / "smoke").exists(), "no stage ran"
    result = _gpu_check(tmp_path / "out", "smoke", MPICH_WHEEL_DIR=str(empty))  # this mpi4py loads its MPI
    assert result.returncode == 1 and "MPI for mpi4py" not in result.stdout, result
    assert "- MPI: mpi4py " in (tmp_path / "out" / "smoke" / "record.md").read_text()


def test_gpu_check_fits_its_stages_into_a_budget(tmp_path: Path) -> None:
    result = _gpu_check(tmp_path / "some", "smoke", BUDGET="100")  # 100 s less 30 for the records: limit 70 s
    assert "(limit 70 s, took " in (tmp_path / "some" / "smoke" / "record.md").read_text(), result
    result = _gpu_check(tmp_path / "none", "smoke", "layout", BUDGET="80")  # 50 s left: nothing starts
    assert result.returncode == 1 and "== smoke: not run, BUDGET=80 s is spent" in result.stdout, result
    for stage in ("smoke", "layout"):
        record = (tmp_path / "none" / stage / "record.md").read_text()
        assert record.startswith(f"# GPU check, stage `{stage}`: not run (exit 3)"), record


def test_gpu_check_stage_is_cut_off_at_its_limit(tmp_path: Path) -> None:
    python = _python_that(tmp_path, '[ "$1" = scripts/gpu_smoke.py ] && sleep 60')  # the smoke script hangs
    out = tmp_path / "out"
    result = _gpu_check(out, "smoke", PYTHON=str(python), STAGE_TIMEOUT="2")
    assert result.returncode == 1
    record = (out / "smoke" / "record.md").read_text()
    assert record.startswith("# GPU check, stage `smoke`: timed out (exit 124)"), record
    assert "(limit 2 s, took " in record


def test_gpu_record_counts_pytest_results_from_xml_or_a_cut_off_log(tmp_path: Path) -> None:
    record_script = str(REPO / "scripts" / "gpu_record.py")
    (tmp_path / "tests.log").write_text("tests/gpu/test_a.py::test_one PASSED\ntests/gpu/test_a.py::test_two FAILED\n"
                                        "tests/gpu/test_b.py::test_three[x] SKIPPED (needs two GPUs)\n")
    subprocess.run([sys.executable, record_script, str(tmp_path), "tests", "124", "540", "540", "--", "pytest"],
                   check=True, timeout=120)
    record = (tmp_path / "record.md").read_text()
    assert "1 passed, 1 failed, 0 error, 1 skipped (from the log (the run was cut off before its XML))" in record
    assert "- FAILED tests/gpu/test_a.py::test_two" in record
    (tmp_path / "tests.junit.xml").write_text(
        '<testsuites><testsuite><testcase classname="tests.gpu.test_a" name="test_one"/>'
        '<testcase classname="tests.gpu.test_a" name="test_two"><failure message="assert 1 == 2">trace</failure>'
        '</testcase></testsuite></testsuites>')
    subprocess.run([sys.executable, record_script, str(tmp_path), "tests", "1", "3", "540", "--", "pytest"],
                   check=True, timeout=120)
    record = (tmp_path / "record.md").read_text()
    assert record.startswith("# GPU check, stage `tests`: failed (exit 1)")
    assert "1 passed, 1 failed, 0 error, 0 skipped (from JUnit XML)" in record
    assert "- FAILED tests.gpu.test_a::test_two: assert 1 == 2" in record


# ==== against the installed cuDNN: headers and handle-free round trips =========================
def _include_dir() -> Path:
    include = [Path(d).parent / "include" for d in _lib._wheel_lib_dirs() if (Path(d).parent / "include").is_dir()]
    if not include:
        pytest.skip("the nvidia-cudnn wheel's headers are not installed")
    return include[0]


def _header_text() -> str:
    """cudnn_graph.h, cudnn_ops.h and cudnn_adv.h without comments and preprocessor lines."""
    text = "\n".join((_include_dir() / name).read_text() for name in ("cudnn_graph.h", "cudnn_ops.h", "cudnn_adv.h"))
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    return re.sub(r"^\s*#[^\n]*", " ", text, flags=re.M)


def _header_enums(text: str) -> dict[str, dict[str, int]]:
    """typedef name -> {constant: value}, resolving constants defined as other constants."""
    enums: dict[str, dict[str, int]] = {}
    for body, name in re.findall(r"typedef\s+enum\s*\{(.*?)\}\s*(\w+)\s*;", text, flags=re.S):
        values: dict[str, int] = {}
        for item in body.split(","):
            match = re.match(r"\s*(\w+)(?:\s+CUDNN_DEPRECATED_ENUM)?\s*=\s*(\w+)\s*$", item)
            if match:
                key, value = match.groups()
                values[key] = values[value] if value in values else int(value.rstrip("uUlL"), 0)
        enums[name] = values
    return enums


@needs_library
def test_enum_values_match_the_headers() -> None:
    enums = _header_enums(_header_text())
    for enum_class, (typedef, prefix) in _lib.ENUM_TYPEDEFS.items():
        header = enums[typedef]
        ours = {prefix + member.name: member.value for member in enum_class}
        assert {name: header.get(name) for name in ours} == ours, typedef
    statuses = set(enums["cudnnStatus_t"].values())
    assert statuses == {s.value for s in _lib.Status}, "every status the header defines has a name here"
    define = r"#define CUDNN_RNN_PADDED_IO_ENABLED \(1U << 0\)"
    assert re.search(define, (_include_dir() / "cudnn_adv.h").read_text()) and _lib.AuxFlag.PADDED_IO_ENABLED == 1


#: C parameter/return types -> the ctypes class names this binding must use (LP64 Linux).
_C_SCALARS = {"int": "c_int", "int32_t": "c_int", "uint32_t": "c_uint", "size_t": "c_ulong", "float": "c_float",
              "double": "c_double", "unsigned long long": "c_ulong", "char": "c_char"}


def _expected_ctype(declaration: str) -> str | None:
    """The ctypes class name for one C declaration such as ``const int32_t devSeqLengths[]``."""
    declaration = declaration.replace("const ", " ").strip()
    depth = declaration.count("*") + declaration.count("[]")
    words = declaration.replace("*", " ").replace("[]", " ").split()
    name, base = (words[-1], " ".join(words[:-1])) if len(words) > 1 else ("", words[0])
    if name.startswith("dev"):
        return "c_void_p"  # device memory: an address
    if base in ("void", "char"):
        if depth == 0:
            return None
        base, depth = ("c_void_p" if base == "void" else "c_char_p"), depth - 1
    elif base in _C_SCALARS:
        base = _C_SCALARS[base]
    elif base.endswith(("Descriptor_t", "Handle_t")) or base == "cudaStream_t":
        base = "c_void_p"
    elif base.startswith("cudnn") and base.endswith("_t"):
        base = "c_int"  # every other cuDNN type is an enum
    else:
        raise AssertionError(f"unmapped C type {base!r}")
    return "LP_" * depth + base


@needs_library
def test_prototypes_match_the_headers() -> None:
    text = _header_text()
    for prototype in _lib.PROTOTYPES:
        match = re.search(r"\b" + prototype.name + r"\s*\(([^;{)]*)\)\s*;", text)
        assert match, f"{prototype.name} is not declared in the headers"
        before = re.split(r"[;}{)]", text[:match.start()])[-1]  # the return type, after the previous declaration
        returns = " ".join(before.replace("CUDNNWINAPI", "").replace("CUDNN_DEPRECATED", "").split())
        parameters = [p for p in (" ".join(p.split()) for p in match.group(1).split(",")) if p and p != "void"]
        expected_return = "c_char_p" if returns == "const char *" else _expected_ctype(returns + " result")
        ours_return = None if prototype.restype is None else prototype.restype.__name__
        assert ours_return == expected_return, f"{prototype.name} returns {returns}"
        ours = [t.__name__ for t in prototype.argtypes]
        assert ours == [_expected_ctype(p) for p in parameters], f"{prototype.name}({', '.join(parameters)})"


@needs_library
@pytest.mark.parametrize("wrapper, name", [(_lib.rnn_forward, "cudnnRNNForward"),
                                           (_lib.rnn_backward_data, "cudnnRNNBackwardData_v8"),
                                           (_lib.rnn_backward_weights, "cudnnRNNBackwardWeights_v8")])
def test_compute_wrappers_take_the_headers_arguments_in_order(wrapper: Any, name: str) -> None:
    # Their argument types repeat ((size_t, pointer) pairs), so only the names tell the order.
    match = re.search(r"\b" + name + r"\s*\(([^;{)]*)\)\s*;", _header_text())
    header = [re.sub(r"(?<!^)(?=[A-Z])", "_", p.split()[-1].strip("*[]")).lower() for p in match.group(1).split(",")]
    assert list(inspect.signature(wrapper).parameters) == header


@needs_library
def test_library_reports_cudnn_9_and_names_statuses_like_cudnn() -> None:
    assert LIBRARY.version // 10000 == 9 and _lib.get_version() == LIBRARY.version
    assert _lib.get_cudart_version() >= 11000
    for status in _lib.Status:
        assert _lib.get_error_string(status) == _lib.status_name(status)


def _rnn_field_grid() -> list[_lib.RNNDescriptorFields]:
    precisions = [(_lib.DataType.HALF, _lib.DataType.FLOAT, _lib.MathType.TENSOR_OP_MATH),
                  (_lib.DataType.HALF, _lib.DataType.HALF, _lib.MathType.DEFAULT_MATH),
                  (_lib.DataType.FLOAT, _lib.DataType.FLOAT, _lib.MathType.FMA_MATH),
                  (_lib.DataType.FLOAT, _lib.DataType.FLOAT, _lib.MathType.DEFAULT_MATH),
                  (_lib.DataType.DOUBLE, _lib.DataType.DOUBLE, _lib.MathType.DEFAULT_MATH)]
    grid = []
    for mode, direction, input_mode, (data, prec, math), bias in itertools.product(
            _lib.RNNMode, _lib.DirectionMode, _lib.RNNInputMode, precisions,
            (_lib.RNNBiasMode.DOUBLE_BIAS, _lib.RNNBiasMode.SINGLE_INP_BIAS)):
        hidden = 9
        projection = 5 if mode == _lib.RNNMode.LSTM and input_mode == _lib.RNNInputMode.LINEAR_INPUT else hidden
        input_size = hidden if input_mode == _lib.RNNInputMode.SKIP_INPUT else 7
        grid.append(_lib.RNNDescriptorFields(_lib.RNNAlgo.STANDARD, mode, bias, direction, input_mode, data, prec,
                                             math, input_size, hidden, projection, 3, 0,
                                             int(direction) & _lib.AuxFlag.PADDED_IO_ENABLED))
    return grid


@needs_library
def test_rnn_descriptor_round_trip() -> None:
    for fields in _rnn_field_grid():
        with _descriptors.RNNDescriptor(fields) as descriptor:
            assert descriptor.read() == fields


@needs_library
def test_backend_descriptor_settings_are_accepted_for_the_whole_grid() -> None:
    for config in _cudnn.layout_check_configs():
        math = _cudnn._PRECISIONS[config.dtype].math_type
        fields = _cudnn._rnn_fields(config, math, 0)
        with _descriptors.RNNDescriptor(fields) as descriptor:
            assert descriptor.read() == fields, config


@needs_library
def test_rnn_descriptor_errors_carry_status_and_function() -> None:
    fields = _rnn_field_grid()[0]
    before = live_counts()
    bad = _lib.RNNDescriptorFields(**{**fields.__dict__, "cell_mode": _lib.RNNMode.LSTM,
                                      "hidden_size": 4, "proj_size": 6})  # projSize > hiddenSize
    with pytest.raises(CudnnError) as raised:
        _descriptors.RNNDescriptor(bad)
    assert (raised.value.status_name, raised.value.status) == ("CUDNN_STATUS_NOT_SUPPORTED", 3000)
    assert raised.value.function == "cudnnSetRNNDescriptor_v8"
    assert live_counts() == before  # the half-built descriptor was destroyed


@needs_library
def test_tensor_descriptor_round_trip() -> None:
    for data_type, dims, strides in ((_lib.DataType.FLOAT, (6, 4, 5), None),
                                     (_lib.DataType.DOUBLE, (2, 3, 7), (100, 30, 1)),
                                     (_lib.DataType.HALF, (1, 1, 3), None)):
        with _descriptors.TensorDescriptor(data_type, dims, strides) as descriptor:
            assert descriptor.read() == (data_type, dims, strides or _descriptors.packed_strides(dims))


@needs_library
def test_rnn_data_descriptor_round_trip() -> None:
    for data_type, layout, fill in itertools.product(
            (_lib.DataType.HALF, _lib.DataType.FLOAT, _lib.DataType.DOUBLE),
            (_lib.RNNDataLayout.SEQ_MAJOR_UNPACKED, _lib.RNNDataLayout.BATCH_MAJOR_UNPACKED), (0.0, -1.5)):
        fields = _lib.RNNDataFields(data_type, layout, 6, 4, 5, (6, 0, 2, 3), fill)
        with _descriptors.RNNDataDescriptor(fields) as descriptor:
            assert descriptor.read() == fields


@needs_library
def test_rnn_data_descriptor_refuses_a_length_above_max_time() -> None:
    fields = _lib.RNNDataFields(_lib.DataType.FLOAT, _lib.RNNDataLayout.SEQ_MAJOR_UNPACKED, 3, 2, 4, (4, 1))
    with pytest.raises(CudnnError) as raised:
        _descriptors.RNNDataDescriptor(fields)
    assert raised.value.status == 2000 and raised.value.function == "cudnnSetRNNDataDescriptor"
    assert "maxSeqLength" in raised.value.detail  # cuDNN's own text, through cudnnGetLastErrorString


@needs_library
def test_dropout_calls_without_a_handle() -> None:
    # A full dropout round trip needs a handle (tests/gpu); here: the handle-free query, and the
    # NULL-handle refusal, which proves cudnnSetDropoutDescriptor's arguments reach cuDNN in order.
    with _descriptors.TensorDescriptor(_lib.DataType.FLOAT, (4, 3, 5)) as x:
        assert _lib.dropout_reserve_size(x.pointer) > 0
    pointer = _lib.create("DropoutDescriptor")
    try:
        with pytest.raises(CudnnError) as raised:
            _lib.set_dropout(pointer, 0, 0.5, 0, 0, 42)
        assert raised.value.status == 2000 and "handle" in raised.value.detail
    finally:
        _lib.destroy("DropoutDescriptor", pointer)


@needs_library
@pytest.mark.skipif(_lib.cuda_driver_version() is not None, reason="a CUDA driver is present")
def test_handle_creation_without_a_driver_is_a_clear_error() -> None:
    with pytest.raises(CudnnError) as raised:
        _descriptors.Handle(0)
    assert raised.value.status_name == "CUDNN_STATUS_NOT_INITIALIZED" and raised.value.function == "cudnnCreate"


# ==== the backend's own logic on a fake device =================================================
# tests/fake_gpu.py stands in for CuPy and for the cuDNN calls that need a GPU, so the Python
# side of _cudnn (plans and caches, the arguments of each cuDNN call, the length-0 rows,
# dropout rewinding, the reserve, the layout check) runs here; the arithmetic is cuDNN's and is
# checked in tests/gpu. tests/test_cudnn_fake_gpu.py covers devices, streams and host transfers.
@pytest.fixture
def fake_gpu(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeCudnn]:
    fake = install(monkeypatch)
    yield fake
    _cudnn.clear_caches()
    assert fake.open == {}, "every cuDNN object created was destroyed"
    assert fake.gpu.violations == []


LSTMP = RNNConfig("lstm", 2, 5, 3, direction="bidirectional", num_proj=2, dropout=0.5, seed=7, seed2=1,
                  dtype="float64")


def _fake_inputs(config: RNNConfig, max_time: int, batch: int, time_major: bool = True, device: int = 0
                 ) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    seq = (max_time, batch) if time_major else (batch, max_time)
    states = (config.num_pseudo_layers, batch)
    from cudnn_rnn.layout import params_layout

    def draw(*shape: int) -> Any:
        return to_device(rng.uniform(-1, 1, shape), device)

    return dict(x=draw(*seq, config.input_size), h0=draw(*states, config.state_size),
                c0=draw(*states, config.num_units) if config.has_cell else None,
                params=draw(params_layout(config).size), y=draw(*seq, config.output_size),
                dy=draw(*seq, config.output_size), dhy=draw(*states, config.state_size),
                dcy=draw(*states, config.num_units) if config.has_cell else None)


def _forward(config: RNNConfig, a: dict, lengths: Any, training: bool = True, time_major: bool = True) -> tuple:
    return _cudnn.forward(config, a["x"], a["h0"], a["c0"], a["params"], np.asarray(lengths, np.int32),
                          is_training=training, time_major=time_major)


def test_fake_forward_arguments_and_length_zero_rows(fake_gpu: FakeCudnn) -> None:
    a = _fake_inputs(LSTMP, 4, 3)
    x_before = np.array(a["x"])
    y, hy, cy, reserve = _forward(LSTMP, a, [3, 0, 2])
    seen = fake_gpu.seen
    assert seen["mode"] == _lib.ForwardMode.TRAINING
    np.testing.assert_array_equal(seen["lengths"], [3, 1, 2])  # length 0 runs as 1 ...
    np.testing.assert_array_equal(seen["x"][0, 1], 0.0)  # ... on a zeroed input
    for row, length in enumerate((3, 0, 2)):
        np.testing.assert_array_equal(seen["x"][:length, row], x_before[:length, row])
        np.testing.assert_array_equal(seen["x"][length:, row], 0.0)  # padding reaches cuDNN as zeros
    np.testing.assert_array_equal(np.array(a["x"]), x_before)  # the caller's x is untouched
    assert seen["weight_size"] == a["params"].nbytes and seen["work_size"] == FakeCudnn.WORKSPACE
    header = _reserve.header_elements(np.float64)
    assert reserve.shape == (header + FakeCudnn.RESERVE // 8,) and seen["reserve_size"] == FakeCudnn.RESERVE
    assert seen["reserve"] == reserve.data.ptr + _reserve.HEADER_BYTES
    assert _reserve.read_header(reserve) == _cudnn.header_tag(LSTMP, 4, 3, True, np.array([3, 0, 2]))
    y, hy, cy = (np.array(v) for v in (y, hy, cy))
    assert y.shape == (4, 3, 4) and not y[:, 1].any() and (y[:, [0, 2]] == 1).all()
    np.testing.assert_array_equal(hy[:, 1], np.array(a["h0"])[:, 1])
    np.testing.assert_array_equal(cy[:, 1], np.array(a["c0"])[:, 1])
    assert (hy[:, [0, 2]] == 2).all() and (cy[:, [0, 2]] == 3).all()
    data = [call[1] for call in fake_gpu.calls if call[0] == "data"]
    assert [(d.layout, d.max_seq_length, d.batch_size, d.vector_size, d.seq_lengths) for d in data] == [
        (_lib.RNNDataLayout.SEQ_MAJOR_UNPACKED, 4, 3, 3, (3, 1, 2)),
        (_lib.RNNDataLayout.SEQ_MAJOR_UNPACKED, 4, 3, 4, (3, 1, 2))]
    assert sorted(dims for _, dims, _ in fake_gpu.tensors.values() if dims[0] == 4) == [(4, 3, 2), (4, 3, 5)]
    assert ("set_dropout", 0.5, FakeCudnn.DROPOUT_STATES, LSTMP.seed64) in fake_gpu.calls


def test_fake_batch_major_and_inference(fake_gpu: FakeCudnn) -> None:
    config = RNNConfig("gru", 1, 4, 3, dtype="float64")
    a = _fake_inputs(config, 5, 2, time_major=False)
    y, hy, cy, reserve = _forward(config, a, [0, 5], training=False, time_major=False)
    assert fake_gpu.seen["mode"] == _lib.ForwardMode.INFERENCE and fake_gpu.seen["reserve_size"] == 0
    assert reserve.shape == (0,) and cy is None
    y = np.array(y)
    assert not y[0].any() and (y[1] == 1).all()
    np.testing.assert_array_equal(fake_gpu.seen["x"][0, 0], 0.0)
    np.testing.assert_array_equal(np.array(hy)[:, 0], np.array(a["h0"])[:, 0])
    data = [call[1] for call in fake_gpu.calls if call[0] == "data"]
    assert {d.layout for d in data} == {_lib.RNNDataLayout.BATCH_MAJOR_UNPACKED}


def test_fake_steady_calls_create_nothing_and_caches_are_bounded(fake_gpu: FakeCudnn,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    a = _fake_inputs(LSTMP, 4, 3)
    _forward(LSTMP, a, [4, 4, 4])
    created = len(fake_gpu.open)
    for _ in range(5):
        _forward(LSTMP, a, [4, 4, 4])
    assert len(fake_gpu.open) == created  # cache hits only
    assert _cudnn.cache_info()["networks"] == 1 and _cudnn.cache_info()["plans"] == 1
    _forward(LSTMP, a, [4, 4, 4], training=False)  # inference: a dropout-free network of its own
    assert _cudnn.cache_info()["networks"] == 2
    monkeypatch.setattr(_cudnn, "PLAN_CACHE_SIZE", 2)
    _cudnn.clear_caches()
    assert fake_gpu.open == {}
    for lengths in ([1, 2, 3], [2, 2, 2], [3, 3, 0], [4, 1, 1]):
        _forward(LSTMP, a, lengths)
    assert _cudnn.cache_info()["plans"] == 2
    # the handle (""), one network's RNN and dropout descriptors, and two plans of two data and two tensor descriptors
    assert collections.Counter(fake_gpu.open.values()) == {"": 1, "DropoutDescriptor": 1, "RNNDescriptor": 1,
                                                            "RNNDataDescriptor": 4, "TensorDescriptor": 4}


def test_fake_dropout_state_is_rewound_before_every_training_forward(fake_gpu: FakeCudnn) -> None:
    a = _fake_inputs(LSTMP, 4, 3)
    _forward(LSTMP, a, [4, 2, 3])
    network = _cudnn._context(0).network(LSTMP, True, fake_gpu.gpu.current_stream())
    fake_gpu.seen["dropout_states"] = network.dropout.working
    created = dict(fake_gpu.open)
    for seed2 in (1, 1, 5, 6, 1, 1):  # the seed of each call; the state it must start from is the seed's own
        config = LSTMP.replace(seed2=seed2)
        _forward(config, a, [4, 2, 3])
        assert (fake_gpu.seen["states"] == config.seed64 % 251).all(), seed2
    assert fake_gpu.open == created  # new seeds re-seed the same descriptor: nothing new is built
    reseeds = [call[3] for call in fake_gpu.calls if call[0] == "set_dropout"]
    assert reseeds == [LSTMP.seed64] + [LSTMP.replace(seed2=s).seed64 for s in (5, 6, 1)]


def test_fake_backward_arguments_and_length_zero_rows(fake_gpu: FakeCudnn, monkeypatch: pytest.MonkeyPatch) -> None:
    a = _fake_inputs(LSTMP, 4, 3)
    lengths = np.array([3, 0, 2], np.int32)
    y, _, _, reserve = _forward(LSTMP, a, lengths)
    upstream = {name: np.array(a[name]) for name in ("dy", "dhy", "dcy")}
    dx, dh0, dc0, dparams = (np.array(v) for v in _cudnn.backward(
        LSTMP, a["x"], a["h0"], a["c0"], a["params"], lengths, y, a["dy"], a["dhy"], a["dcy"], reserve,
        time_major=True))
    seen = fake_gpu.seen
    for name in ("dy", "dhy", "dcy"):
        np.testing.assert_array_equal(np.array(a[name]), upstream[name])  # the caller's gradients are untouched
        assert not seen[name][:, 1].any(), f"{name} of the length-0 row reaches cuDNN as zeros"
    np.testing.assert_array_equal(seen["dhy"][:, [0, 2]], upstream["dhy"][:, [0, 2]])
    for row, length in enumerate(lengths):
        np.testing.assert_array_equal(seen["dy"][:length, row], upstream["dy"][:length, row])
        assert not seen["dy"][length:, row].any() and not seen["weights_x"][length:, row].any()  # padding: zeros
    assert not dx[:, 1].any() and (dx[:, [0, 2]] == 7).all()
    np.testing.assert_array_equal(dh0[:, 1], upstream["dhy"][:, 1])
    np.testing.assert_array_equal(dc0[:, 1], upstream["dcy"][:, 1])
    assert (dh0[:, [0, 2]] == 8).all() and (dc0[:, [0, 2]] == 9).all()
    assert (dparams == 1).all()  # ADD into a zeroed buffer
    payload = reserve.data.ptr + _reserve.HEADER_BYTES
    assert seen["backward_reserve"] != payload  # a copy: the reserve stays valid for another backprop
    monkeypatch.setattr(_cudnn, "RESERVE_SURVIVES_BACKWARD", True)
    _cudnn.backward(LSTMP, a["x"], a["h0"], a["c0"], a["params"], lengths, y, a["dy"], a["dhy"], a["dcy"], reserve,
                    time_major=True)
    assert seen["backward_reserve"] == payload
    with pytest.raises(ValueError, match=r"reserve_space must hold 4096 bytes after its header for this call; got 8"):
        _cudnn.backward(LSTMP, a["x"], a["h0"], a["c0"], a["params"], lengths, y, a["dy"], a["dhy"], a["dcy"],
                        reserve[:_reserve.header_elements(np.float64) + 1], time_major=True)


def test_fake_refusals(fake_gpu: FakeCudnn) -> None:
    a = _fake_inputs(LSTMP, 4, 3)
    with pytest.raises(ValueError, match=r"params must have 640 elements for this configuration .*; got 639"):
        _cudnn.forward(LSTMP, a["x"], a["h0"], a["c0"], a["params"][:-1], np.full(3, 4, np.int32),
                       is_training=True, time_major=True)
    elsewhere = to_device(np.array(a["c0"]), 1)
    with pytest.raises(ValueError, match="all arrays of one call must be on one GPU; got x on device 0, h0 on "
                                         "device 0, c0 on device 1, params on device 0"):
        _cudnn.forward(LSTMP, a["x"], a["h0"], elsewhere, a["params"], np.full(3, 4, np.int32),
                       is_training=True, time_major=True)


def test_fake_non_contiguous_inputs_are_copied(fake_gpu: FakeCudnn) -> None:
    config = RNNConfig("rnn_tanh", 1, 4, 3, dtype="float64")
    a = _fake_inputs(config, 4, 3)
    strided = to_device(np.repeat(np.array(a["x"]), 2, axis=2))[:, :, ::2]
    assert not strided.flags.c_contiguous
    _cudnn.forward(config, strided, a["h0"], None, a["params"], np.full(3, 4, np.int32), is_training=False,
                   time_major=True)
    np.testing.assert_array_equal(fake_gpu.seen["x"], np.array(a["x"]))


def test_fake_layout_disagreement_is_loud(monkeypatch: pytest.MonkeyPatch) -> None:
    from cudnn_rnn.layout import LayoutAssumptions

    fake = install(monkeypatch, LayoutAssumptions(projection_position="after_all_matrices",
                                                  skip_input_keeps_input_biases=False))
    differences = _cudnn.check_layout_against_cudnn(LSTMP)
    projection = "pseudo-layer 0 projection matrix (linLayerID 8): offset 100 in the layout table, 440 in cuDNN"
    assert projection in differences
    skip = RNNConfig("gru", 1, 4, 4, input_mode="skip_input")
    assert any(line.startswith("pseudo-layer 0 input bias of gate 'r' (linLayerID 0): the layout table has it at")
               and line.endswith("cuDNN has none") for line in _cudnn.check_layout_against_cudnn(skip))
    assert any(line.startswith("weight space:") for line in _cudnn.check_layout_against_cudnn(skip))
    a = _fake_inputs(LSTMP, 4, 3)
    with pytest.raises(RuntimeError, match="the params layout table disagrees with cuDNN") as raised:
        _forward(LSTMP, a, [4, 4, 4])
    assert "projection matrix" in str(raised.value) and "scripts/check_layout.py" in str(raised.value)
    facts = _cudnn.cudnn_layout_facts()
    assert (facts.projection_position, facts.skip_input_keeps_input_biases) == ("after_all_matrices", False)
    assert facts.verified_on == "cuDNN 9.28.0 on Fake GPU"
    _cudnn.clear_caches()
    assert fake.open == {}  # nothing half-built was kept


def test_fake_layout_agreement(fake_gpu: FakeCudnn) -> None:
    from cudnn_rnn.layout import UNCONFIRMED

    for config in _cudnn.layout_check_configs()[::5]:
        assert _cudnn.check_layout_against_cudnn(config) == [], config
    fake_gpu.refuse_absent = True  # should cuDNN refuse, rather than answer NULL, for skip_input's absent weights
    skip = RNNConfig("gru", 2, 4, 4, input_mode="skip_input", direction="bidirectional")
    assert _cudnn.check_layout_against_cudnn(skip) == []
    facts = _cudnn.cudnn_layout_facts()
    assert (facts.projection_position, facts.skip_input_keeps_input_biases) == (
        UNCONFIRMED.projection_position, UNCONFIRMED.skip_input_keeps_input_biases)
