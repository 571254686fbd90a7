"""Every file cudnn_rnn writes appears whole or not at all; and files are read back whole.

A write goes to a temporary file beside the target, which then replaces the target in one
step, so a reader of the target (or a process started after a crash) sees the old file or
the new one, never a torn one::

    <folder>/.<name>.<machine>.<pid>.<random>.partial   written, flushed, fsync'ed    (a kill here: target untouched)
    os.replace(partial, <folder>/<name>)                                             (atomic on POSIX and Windows)
    fsync(<folder>)                                                                  (the rename survives a power cut)

``<machine>`` is 12 hex digits hashing the host name and, on Linux, ``/proc/self/ns/pid``: processes
that share it see each other's process ids. ``<pid>`` is the writer's process id, ``<random>`` makes
the name unique. :func:`write_through_path`'s partial file ends in the target's extension too
(``.partial.onnx``). Where the partial name would be longer than the file system allows (a target
name of more than about 210 bytes), ``<name>`` is shortened to its start, ``~`` and a hash of the
whole name. The partial file gets the permissions ``open(path, "w")`` would leave (those of the file
it replaces, else 0o666 less the umask).

:func:`atomic_write` hands out a binary file object (``np.savez(f, ...)``); :func:`write_bytes`
writes bytes or a sequence of buffers through it, and :func:`write_through_path` lends its partial
file's *path* to writers that open a path themselves (``onnx.save``, ``torch.save``).
:func:`read_bytes` reads a file back whole, refusing what is not a regular file; readers check what
a file declares before they read it (``decompression_bomb``, ``read_npy_header``).

Leftovers. Every write first removes the partial files of earlier, killed writes of the same
target (:func:`remove_leftovers`) whose writer is known to be gone:

* written on this machine (same ``<machine>``) by a process that no longer exists
  (``os.kill(pid, 0)`` finds none): removed at once. While that process id lives, the file is kept,
  however old: a live writer, even a stopped one, never loses its partial file;
* where the writer cannot be looked up (another machine or PID namespace sharing the file system,
  Windows, or the earlier ``.<name>.<random>.partial`` form, which names no writer): removed once it
  has not been modified for :data:`UNCHECKED_AFTER` seconds (a day; a live write modifies its file
  all along, and the day also covers clocks that disagree between machines).

Only the partial files of that exact target are looked at (``.a.npz.*`` never matches
``.a.npz.old.*``), only regular files are removed, and a leftover that cannot be examined or
removed is left as it is: cleaning up never makes a write fail.

The package's own files: :mod:`cudnn_rnn.params_file` (a params buffer with its configuration),
the safetensors layout (``_safetensors``) and the endings and kinds of model files (``_containers``).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import socket
import stat
import tempfile
import time
from pathlib import Path
from typing import IO, Any, Callable, Iterable, Iterator

import numpy as np

from ._containers import COMPOUND_ENDINGS

# what the readers and writers of other packages build on besides __all__ (each ``as`` marks a name exported from here)
from ._containers import (CHECKPOINT_FORMAT as CHECKPOINT_FORMAT, DAMAGED_ZIP as DAMAGED_ZIP, ENDINGS as ENDINGS,
                          HDF5_SIGNATURE as HDF5_SIGNATURE, KERAS as KERAS,
                          KERAS_DTYPE_ATTRIBUTE as KERAS_DTYPE_ATTRIBUTE, KERAS_MARKED_DTYPES as KERAS_MARKED_DTYPES,
                          KERAS_VERSION as KERAS_VERSION, KERAS_WEIGHTS as KERAS_WEIGHTS,
                          MODEL_FILE_KINDS as MODEL_FILE_KINDS, NPZ as NPZ, ONNX as ONNX,
                          PICKLE_PROTOCOL_OPCODE as PICKLE_PROTOCOL_OPCODE, PT as PT, PTH as PTH,
                          SAFETENSORS as SAFETENSORS, ZIP_LOCAL_HEADER as ZIP_LOCAL_HEADER,
                          ZIP_READ_ERRORS as ZIP_READ_ERRORS,
                          model_file_kind as model_file_kind)
from ._safetensors import (HEADER_LENGTH as HEADER_LENGTH, MAX_HEADER_BYTES as MAX_HEADER_BYTES, Entry as Entry,
                           Layout as Layout, SafetensorsError as SafetensorsError, decode as decode, encode as encode,
                           read_array as read_array, read_layout as read_layout)

__all__ = ["atomic_write", "write_bytes", "write_through_path", "read_bytes", "remove_leftovers", "PARTIAL_SUFFIX",
           "UNCHECKED_AFTER"]

#: the suffix of a file being written (a killed write leaves one behind)
PARTIAL_SUFFIX = ".partial"

#: seconds a partial file whose writer cannot be looked up must lie unmodified before a write removes it
UNCHECKED_AFTER = 24 * 60 * 60

#: Deflate (zip, HDF5's gzip filter) shrinks data at most about 1032 times, so a member whose
#: declared size exceeds its stored size by more than this is a lie (a decompression bomb).
MAX_COMPRESSION_RATIO = 1100

#: the ``.npy`` format versions read, each with the function that reads its header into
#: ``(shape, fortran_order, dtype)``: what an array declares is checked before its data is read
NPY_HEADER_READERS: dict[tuple[int, int], Callable[[IO[bytes]], tuple[tuple[int, ...], bool, np.dtype]]] = {
    (1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}

#: a partial file's name less its target's name and ending: ``.`` ``.<machine>`` ``.<pid>`` (at most 10
#: digits) ``.<random>`` (8 characters) and the partial suffix
_PARTIAL_OVERHEAD = 1 + 13 + 11 + 9 + len(PARTIAL_SUFFIX)

#: the longest extension (bytes) a partial file's name repeats at its end
_LONGEST_ENDING = 32

PathLike = str | os.PathLike[str]


def _umask() -> int:
    """The process's umask, read without changing it where the system says it (Linux)."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)  # elsewhere: read by setting (briefly) and putting it back
    os.umask(mask)
    return mask


def _mode_for(target: str) -> int:
    """The permissions ``open(target, "w")`` would leave: the existing file's, else 0o666 less the umask."""
    try:
        return stat.S_IMODE(os.stat(target).st_mode)
    except FileNotFoundError:
        return 0o666 & ~_umask()


def _machine() -> str:
    """12 hex digits naming this host and PID namespace (processes that share them see each other's ids)."""
    identity = socket.gethostname()
    with contextlib.suppress(OSError):
        identity += "\0" + os.readlink("/proc/self/ns/pid")  # containers on one host: one id, many processes
    return hashlib.blake2b(identity.encode(errors="replace"), digest_size=6).hexdigest()


def extension(name: str) -> str:
    """A file name's extension, two parts where ``_containers.COMPOUND_ENDINGS`` says (``m.weights.h5`` ->
    ``.weights.h5``); the one :func:`write_through_path`'s partial file of target ``name`` ends in. A name
    that is all extension has none, as for ``os.path.splitext``."""
    compound = next((ending for ending in COMPOUND_ENDINGS
                     if name.lower().endswith(ending) and len(name) > len(ending)), None)
    return name[-len(compound):] if compound else os.path.splitext(name)[1]


def _name_max(folder: str) -> int:
    """The longest file name (in bytes) the file system of ``folder`` takes (255 where it cannot say)."""
    try:
        return int(os.pathconf(folder, "PC_NAME_MAX"))
    except (AttributeError, OSError, ValueError, TypeError):  # (no pathconf on Windows; a folder that is gone)
        return 255


def _partial_name(folder: str, name: str) -> tuple[str, str]:
    """How the partial files of target ``name`` in ``folder`` name it: ``(stem, ending)``.

    The stem is ``name`` itself while the longest partial name fits the file system's limit;
    otherwise as much of ``name``'s start as fits, ``~`` and 16 hex digits hashing the whole name,
    so that two targets never share a stem. The ending is ``name``'s extension, or ``""`` where an
    extension that long leaves no room (longer than :data:`_LONGEST_ENDING` bytes).
    """
    ending = extension(name)
    if len(os.fsencode(ending)) > _LONGEST_ENDING:
        ending = ""
    room = _name_max(folder) - _PARTIAL_OVERHEAD - len(os.fsencode(ending))
    if len(os.fsencode(name)) <= room:
        return name, ending
    mark = "~" + hashlib.blake2b(os.fsencode(name), digest_size=8).hexdigest()
    start = name
    while start and len(os.fsencode(start + mark)) > room:
        start = start[:-1]
    return start + mark, ending


def _abandoned(found: re.Match[str], modified: float, machine: str) -> bool:
    """Whether the partial file named ``found``, last modified at ``modified``, has no writer any more."""
    # (its process looked up where it is this machine's; on Windows, os.kill(pid, 0) would end the process)
    if found["machine"] == machine and os.name == "posix" and int(found["pid"]) > 0:
        try:
            os.kill(int(found["pid"]), 0)
        except ProcessLookupError:
            return True
        except PermissionError:  # another user's process
            return False
        except (OSError, OverflowError):
            pass  # (it cannot be asked)
        else:
            return False
    return time.time() - modified > UNCHECKED_AFTER


def remove_leftovers(path: PathLike) -> list[str]:
    """Remove the partial files that killed writes of ``path`` left beside it (every write does this first).

    Only those whose writer is known to be gone, as the module docstring's Leftovers say. It never
    raises: a folder that cannot be listed, or a file that cannot be examined or removed, is left as it is.

    Args:
        path: the target file (it need not exist).

    Returns:
        The absolute paths of the files removed (empty when there were none).
    """
    folder, name = os.path.split(os.path.abspath(os.fspath(path)))
    stem, ending = _partial_name(folder, name)  # (this form, with machine and pid, and the earlier one)
    pattern = re.compile(rf"\.{re.escape(stem)}\.(?:(?P<machine>[0-9a-f]{{12}})\.(?P<pid>[0-9]+)\.)?[a-z0-9_]+"
                         rf"{re.escape(PARTIAL_SUFFIX)}(?:{re.escape(ending)})?")
    machine = _machine()
    try:
        entries = os.listdir(folder)
    except OSError:
        return []
    removed = []
    for entry in entries:
        found = pattern.fullmatch(entry)
        if found is None:
            continue
        leftover = os.path.join(folder, entry)
        try:
            info = os.lstat(leftover)
            if not stat.S_ISREG(info.st_mode) or not _abandoned(found, info.st_mtime, machine):
                continue
            os.remove(leftover)
        except OSError:
            continue
        removed.append(leftover)
    return removed


@contextlib.contextmanager
def atomic_write(path: PathLike, *, keep_extension: bool = False) -> Iterator[IO[bytes]]:
    """A binary file object whose contents become ``path`` when the block ends without an error.

    ``with atomic_write("out.npz") as f: np.savez(f, ...)``. The object writes a new partial file beside
    ``path`` (its ``name``), first removing the leftovers of earlier killed writes of ``path``
    (:func:`remove_leftovers`); the data is flushed and fsync'ed before the file takes the target's name.
    On any exception (or a KeyboardInterrupt) the partial file is removed and the target is untouched.

    Args:
        path: the file to write (replaced if it exists; its folder must exist).
        keep_extension: the partial file's name ends in ``path``'s extension too (where the name allows it),
            for a writer that looks at it (:func:`write_through_path`).

    Raises:
        IsADirectoryError: ``path`` is a folder.
        OSError: the file cannot be written (its folder does not exist, permission denied, no
            space left); the target is untouched and no partial file is left.
    """
    target = os.path.abspath(os.fspath(path))
    folder, name = os.path.split(target)
    if os.path.isdir(target):
        raise IsADirectoryError(f"{os.fspath(path)!r} is a folder; cannot write a file there")
    remove_leftovers(target)
    stem, ending = _partial_name(folder, name)
    descriptor, partial = tempfile.mkstemp(dir=folder, prefix=f".{stem}.{_machine()}.{os.getpid()}.",
                                           suffix=PARTIAL_SUFFIX + (ending if keep_extension else ""))
    os.close(descriptor)
    try:
        with open(partial, "r+b") as handle:  # (opened by name: ``handle.name`` is the partial file)
            if hasattr(os, "fchmod"):
                os.fchmod(handle.fileno(), _mode_for(target))
            yield handle
            handle.flush()
            os.fsync(handle.fileno())  # (the file's data, whichever descriptor wrote it)
        os.replace(partial, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(partial)
        raise
    if hasattr(os, "O_DIRECTORY"):  # the rename made durable (where folders cannot be opened, nothing to do)
        descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)


def write_bytes(path: PathLike, data: bytes | bytearray | memoryview | Iterable[Any]) -> None:
    """Write ``data`` to ``path`` through :func:`atomic_write`, with its errors.

    Args:
        path: the file to write (replaced if it exists).
        data: bytes, or an iterable of buffers (bytes, memoryviews, arrays) written back to back.
    """
    chunks: Iterable[Any] = [data] if isinstance(data, (bytes, bytearray, memoryview)) else data
    with atomic_write(path) as handle:
        for chunk in chunks:
            handle.write(chunk)


def write_through_path(path: PathLike, write: Callable[[str], None]) -> None:
    """Let ``write(temporary_path)`` write the file (a library that opens paths itself) through :func:`atomic_write`.

    The temporary path is the partial file's, beside ``path`` and ending in its extension, for writers that look
    at it. Errors as :func:`atomic_write`'s.

    Args:
        path: the file to write (replaced if it exists).
        write: called once with the temporary path; it must write the whole file there.
    """
    with atomic_write(path, keep_extension=True) as handle:
        write(handle.name)


def read_bytes(path: PathLike, what: str = "file") -> bytes:
    """The whole content of ``path`` (never blocks on a pipe or a device: those are refused).

    Args:
        path: the file to read.
        what: what the file should be, for error messages (``"checkpoint"``, say).

    Raises:
        FileNotFoundError: no such file, or a path through a file (the message names it and says
            ``what`` was expected).
        IsADirectoryError: ``path`` is a folder.
        ValueError: ``path`` is not a regular file (a device, a pipe, a socket).
    """
    name = os.fspath(path)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    try:
        descriptor = os.open(name, flags)
    except (FileNotFoundError, NotADirectoryError):  # (a path through a file names no file either)
        raise FileNotFoundError(f"no such {what}: {name!r}") from None
    except IsADirectoryError:
        raise IsADirectoryError(f"{name!r} is a folder; expected a {what}") from None
    try:
        mode = os.fstat(descriptor).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(f"{name!r} is a folder; expected a {what}")
        if not stat.S_ISREG(mode):
            raise ValueError(f"{name!r} is not a regular file (a device, pipe or socket); expected a {what}")
    except BaseException:
        os.close(descriptor)
        raise
    with os.fdopen(descriptor, "rb") as handle:
        return handle.read()


def decompression_bomb(declared: int, stored: int) -> bool:
    """Whether ``declared`` bytes are more than ``stored`` compressed bytes can give: over
    :data:`MAX_COMPRESSION_RATIO` times as many (a decompression bomb)."""
    return declared > stored * MAX_COMPRESSION_RATIO


def read_npy_header(member: IO[bytes], name: str,
                    refuse: Callable[[str], Exception] = ValueError) -> tuple[tuple[int, ...], np.dtype]:
    """The shape and dtype ``.npy`` member ``name`` declares, from the header at ``member``'s start (``member`` is
    left at its data); ``refuse(message)`` is raised for a format version :data:`NPY_HEADER_READERS` does not read,
    NumPy's ValueError for a malformed header."""
    version = np.lib.format.read_magic(member)
    if version not in NPY_HEADER_READERS:
        raise refuse(f"member {name!r} uses .npy format version {version}, which is not read here")
    shape, _, dtype = NPY_HEADER_READERS[version](member)
    return tuple(shape), dtype
