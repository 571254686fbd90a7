"""The binding's C declarations and values compiled against cuDNN's own headers (tests/support/cudnn_headers.py).

Every prototype of ``_lib.DECLARATIONS`` is declared again after ``#include <cudnn.h>``, and every enum value and
auxFlags bit is a static assertion; gcc with ``-Werror`` must accept the file. The negative controls show the
check is sensitive: a changed parameter or return type, two parameters swapped, a wrong value or a misspelt
constant each fail to compile, naming what differs. The headers are those beside the library the binding
loads (the wheel of the ``cudnn-lib`` extra); no GPU and no CUDA toolkit are needed.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cudnn_headers import binding_check, compile_c, header_version, include_dir
from cudnn_rnn._cudnn import _lib


def test_the_bindings_declarations_and_values_compile_after_cudnns_headers(tmp_path: Path) -> None:
    include = include_dir()
    assert header_version(include) == _lib.library().version, "the headers are those of the library loaded"
    source = binding_check()
    assert _lib.DECLARATIONS in source and len(_lib.PROTOTYPES) == 36  # every function the binding calls
    members = sum(len(enum_class) for enum_class in _lib.ENUM_TYPEDEFS) + len(_lib.AuxFlag.__members__)
    assert source.count("_Static_assert(CUDNN_") + source.count("_Static_assert((CUDNN_") == members
    result = compile_c(source, tmp_path, include)
    assert result.returncode == 0, result.stderr


#: (what changes, the text it changes in the check, into what, what gcc must say): each must fail to compile
MUTATIONS = [
    ("a parameter's type", "int32_t hiddenSize,", "int64_t hiddenSize,",
     r"conflicting types for .cudnnSetRNNDescriptor_v8"),
    ("two parameters swapped",  # cudnnRNNForward's weight space and workspace
     "const void *weightSpace, size_t workSpaceSize, void *workSpace,\n        size_t reserveSpaceSize",
     "void *weightSpace, size_t workSpaceSize, const void *workSpace,\n        size_t reserveSpaceSize",
     r"conflicting types for .cudnnRNNForward"),
    ("a return type", "size_t cudnnGetVersion(void);", "int cudnnGetVersion(void);",
     r"conflicting types for .cudnnGetVersion"),
    ("a value", 'CUDNN_DATA_DOUBLE == 1, "cudnnDataType_t: the binding has CUDNN_DATA_DOUBLE = 1"',
     'CUDNN_DATA_DOUBLE == 2, "cudnnDataType_t: the binding has CUDNN_DATA_DOUBLE = 2"',
     r'static assertion failed: "cudnnDataType_t: the binding has CUDNN_DATA_DOUBLE = 2"'),
    ("a misspelt constant", "CUDNN_RNN_ALGO_PERSIST_STATIC_SMALL_H ==", "CUDNN_RNN_ALGO_PERSIST_STATIC_SMALL ==",
     r".CUDNN_RNN_ALGO_PERSIST_STATIC_SMALL. undeclared"),
]


@pytest.mark.parametrize("what, old, new, message", MUTATIONS, ids=[what for what, *_ in MUTATIONS])
def test_a_binding_that_differs_from_the_headers_does_not_compile(tmp_path: Path, what: str, old: str, new: str,
                                                                 message: str) -> None:
    source = binding_check()
    assert source.count(old) == 1, f"{what}: the check holds {old!r} once"
    result = compile_c(source.replace(old, new), tmp_path, include_dir())
    assert result.returncode != 0 and re.search(message, result.stderr), result.stderr
