"""``_lib``, the one ctypes module: the library search order, loading and its errors, statuses and
CudnnError, and, when libcudnn.so.9 is installed (the nvidia-cudnn-cu12/-cu13 wheel), the statuses and the
ctypes of each prototype against the wheel's own headers and the handle-free dropout calls (the declarations
and values compiled against them: tests/test_cudnn_headers.py). The tests that need the
library skip only when it is absent.
"""

from __future__ import annotations

import inspect
import pickle
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from cudnn_rnn._cudnn import _descriptors, _lib
from cudnn_rnn.errors import CudnnError, CudnnNotAvailableError
from cudnn_headers import header_text, include_dir
from cudnn_testing import LIBRARY, needs_library


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


# ==== against the installed cuDNN: headers and handle-free round trips =========================
# (the declarations and every value compiled against the headers: tests/test_cudnn_headers.py)
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
def test_every_status_the_headers_define_has_a_name_here() -> None:
    statuses = _header_enums(header_text(include_dir()))["cudnnStatus_t"]
    assert len(statuses) >= 40 and set(statuses.values()) <= {s.value for s in _lib.Status}


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
    text = header_text(include_dir())
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
    match = re.search(r"\b" + name + r"\s*\(([^;{)]*)\)\s*;", header_text(include_dir()))
    header = [re.sub(r"(?<!^)(?=[A-Z])", "_", p.split()[-1].strip("*[]")).lower() for p in match.group(1).split(",")]
    assert list(inspect.signature(wrapper).parameters) == header


@needs_library
def test_library_reports_cudnn_9_and_names_statuses_like_cudnn() -> None:
    assert LIBRARY.version // 10000 == 9 and _lib.get_version() == LIBRARY.version
    assert _lib.get_cudart_version() >= 11000
    for status in _lib.Status:
        assert _lib.get_error_string(status) == _lib.status_name(status)


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
