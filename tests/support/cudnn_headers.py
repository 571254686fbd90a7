"""cuDNN's own headers (the include folder beside the loaded libcudnn.so.9) against the binding, by a C compiler::

    include = include_dir()                       the headers of the library the binding loads (skips without them)
    header_text(include)                          cudnn_graph.h, cudnn_ops.h, cudnn_adv.h without comments
    source = binding_check()                      C: cudnn.h, the binding's declarations, its values as assertions
    result = compile_c(source, folder, include)   gcc -std=c11 -Wall -Werror -fsyntax-only: rc 0 when they agree

What makes the check sensitive: a declaration that differs from the header's in a parameter or return
type is gcc's "conflicting types" error, a value that differs fails its ``_Static_assert`` (whose message
names the constant), and a constant the header lacks is an undeclared identifier. ``cudnn.h`` includes
CUDA's runtime header for four names alone (``cudaStream_t``, ``cudaGraph_t``, ``size_t``,
``libraryPropertyType``): :data:`CUDA_STUB` declares them, so no CUDA toolkit is needed. Enum members
older headers lack (``_lib.NEWER_ENUM_MEMBERS``) are asserted from the version that has them.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from cudnn_rnn._cudnn import _lib
from cudnn_testing import LIBRARY

#: what cudnn.h needs of CUDA's headers, as they declare it (the file names cudnn.h includes)
CUDA_STUB = {
    "cuda_runtime_api.h": "#include <stddef.h>\n"
                          "typedef struct CUstream_st *cudaStream_t;\n"
                          "typedef struct CUgraph_st *cudaGraph_t;\n",
    "library_types.h": "typedef enum libraryPropertyType_t { MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL } "
                       "libraryPropertyType;\n",
}


def include_dir() -> Path:
    """The include folder beside the loaded library's lib folder (the wheel's ``nvidia/cudnn/include``)."""
    if LIBRARY is None:
        pytest.skip("libcudnn.so.9 is not installed (pip install nvidia-cudnn-cu12)")
    include = Path(LIBRARY.path).resolve().parent.parent / "include"
    if not (include / "cudnn.h").is_file():
        pytest.skip(f"no cuDNN headers beside {LIBRARY.path}")
    return include


def header_version(include: Path) -> int:
    """``CUDNN_VERSION`` of the headers in ``include`` (MAJOR * 10000 + MINOR * 100 + PATCHLEVEL)."""
    text = (include / "cudnn_version.h").read_text()
    major, minor, patch = (int(re.findall(rf"#define CUDNN_{name} (\d+)", text)[0])
                           for name in ("MAJOR", "MINOR", "PATCHLEVEL"))
    return major * 10000 + minor * 100 + patch


def header_text(include: Path) -> str:
    """cudnn_graph.h, cudnn_ops.h and cudnn_adv.h without comments and preprocessor lines."""
    text = "\n".join((include / name).read_text() for name in ("cudnn_graph.h", "cudnn_ops.h", "cudnn_adv.h"))
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    return re.sub(r"^\s*#[^\n]*", " ", text, flags=re.M)


def value_assertions() -> list[str]:
    """One ``_Static_assert`` per enum member and auxFlags bit of the binding, and one per enum type's size."""
    lines = []
    for enum_class, (typedef, prefix) in _lib.ENUM_TYPEDEFS.items():
        lines.append(f'_Static_assert(sizeof({typedef}) == sizeof(int), "{typedef} is passed as a C int");')
        for member in enum_class:
            constant = prefix + member.name
            assertion = (f'_Static_assert({constant} == {member.value}, "{typedef}: the binding has '
                         f'{constant} = {member.value}");')
            since = _lib.NEWER_ENUM_MEMBERS.get(member)
            lines += [f"#if CUDNN_VERSION >= {since}", assertion, "#endif"] if since else [assertion]
    for flag in _lib.AuxFlag.__members__.values():  # the zero flag too, which iterating a Flag leaves out
        constant = f"CUDNN_RNN_{flag.name}"
        lines.append(f'_Static_assert(({constant}) == {flag.value}, "auxFlags: the binding has {constant} = '
                     f'{flag.value}");')
    return lines


def binding_check() -> str:
    """The C text that compiles when the binding's declarations and values agree with cuDNN's headers."""
    return "\n".join(["#include <cudnn.h>", "", "/* the binding's declarations: cudnn_rnn._cudnn._lib.DECLARATIONS */",
                      _lib.DECLARATIONS, "/* the binding's values */", *value_assertions(), ""])


def compile_c(source: str, folder: Path, include: Path) -> subprocess.CompletedProcess[str]:
    """``gcc -std=c11 -Wall -Werror -fsyntax-only`` of ``source`` against ``include`` and :data:`CUDA_STUB`."""
    stub = folder / "cuda_stub"
    stub.mkdir(exist_ok=True)
    for name, text in CUDA_STUB.items():
        (stub / name).write_text(text)
    (folder / "check.c").write_text(source)
    return subprocess.run(["gcc", "-std=c11", "-Wall", "-Werror", "-fsyntax-only", f"-I{stub}", f"-I{include}",
                           str(folder / "check.c")], capture_output=True, text=True, timeout=120)
