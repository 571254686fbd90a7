"""HDF5 files through h5py: hard links only, no data kept in other files, no data the file does not store.

    h5 = open_h5(h5py, path)  or  open_h5(h5py, path, member_bytes, "model.weights.h5")
    h5.child(group, "vars")      the child, or None; a soft or external link is refused
    h5.attribute(obj, "name")    str / list[str] / value
    h5.array(dataset)            np.ndarray, once its storage (no external or virtual data), dtype
                                 and declared size (against the bytes stored: libhdf5 fills what a
                                 file never stored with zeros) are checked; call it inside h5py_errors

Every h5py error on a damaged file (a TypeError for an unknown string encoding, an OSError, ...)
becomes a FileReadError naming the file (:func:`h5py_errors`); what libhdf5 itself does on a
damaged file (crash, loop, allocate without bound) the child process bounds (:mod:`._child`).
"""

from __future__ import annotations

import contextlib
import io
from typing import Any, Iterator

import numpy as np

from ...files import KERAS_DTYPE_ATTRIBUTE, KERAS_MARKED_DTYPES
from ...config import BUILTIN_DTYPES
from ..._dtypes import widen_bfloat16
from ._found import FileReadError, check_declared_size, one_line

__all__ = ["H5File", "open_h5", "h5py_errors"]


# ---- the HDF5 file and the checks every read from it passes -------------------------------------
class H5File:
    """An open HDF5 file: children through hard links only, checked attributes and datasets."""

    def __init__(self, h5py: Any, file: Any, path: str, where: str) -> None:
        self.h5py, self.file, self.path = h5py, file, path
        self.where = where  # "" for the file itself, "model.weights.h5: " for an archive member

    def fail(self, reason: str) -> FileReadError:
        return FileReadError(self.path, self.where + reason)

    def child(self, group: Any, name: str) -> Any:
        """``group[name]`` if it is there (None if not), refusing links that lead elsewhere."""
        with h5py_errors(self.path, self.where):
            if not isinstance(group, self.h5py.Group) or not name or name not in group:
                return None
            link = group.get(name, getlink=True)
            if not isinstance(link, self.h5py.HardLink):
                target = getattr(link, "filename", "") or getattr(link, "path", "")
                raise self.fail(f"{group.name}/{name} is a link to {target!r}, which is not followed; "
                                "re-save the model so that it holds its weights itself")
            return group[name]

    def groups(self, group: Any) -> dict[str, Any]:
        """The child groups of ``group`` ({} when it is no group)."""
        if not isinstance(group, self.h5py.Group):
            return {}
        with h5py_errors(self.path, self.where):
            names = list(group)
        children = {name: self.child(group, name) for name in names}
        return {name: item for name, item in children.items() if isinstance(item, self.h5py.Group)}

    def attribute(self, obj: Any, name: str) -> Any:
        """An attribute as str / list[str] / value (None when ``obj`` has none of that name)."""
        with h5py_errors(self.path, self.where):
            if name not in obj.attrs:
                return None
            value = obj.attrs[name]
        if isinstance(value, bytes):
            return value.decode("utf-8", "replace")
        if isinstance(value, np.ndarray) and value.dtype.kind in "OSU":
            return [item.decode("utf-8", "replace") if isinstance(item, bytes) else str(item) for item in value.ravel()]
        return value

    def dtype(self, dataset: Any) -> str:
        """The dataset's dtype name (Keras marks bfloat16 data with a ``dtype`` attribute)."""
        marked = self.attribute(dataset, KERAS_DTYPE_ATTRIBUTE)
        return marked if isinstance(marked, str) else dataset.dtype.name

    def marked_bfloat16(self, dataset: Any) -> bool:
        """Whether the dataset holds bfloat16 values as Keras stores them: 2-byte data marked ``dtype="bfloat16"``."""
        return self.dtype(dataset) in KERAS_MARKED_DTYPES and dataset.dtype.itemsize == 2

    def array(self, dataset: Any) -> np.ndarray:
        """The dataset's data, once its storage and its declared size (against the bytes stored) are checked."""
        dtype, name = self.dtype(dataset), dataset.name
        if dataset.is_virtual or dataset.external:
            raise self.fail(f"dataset {name} keeps its data in other files, which are not read")
        bfloat16 = self.marked_bfloat16(dataset)
        if dtype not in BUILTIN_DTYPES and not bfloat16:
            raise self.fail(f"dataset {name} holds {dtype}, not one of {BUILTIN_DTYPES} or bfloat16")
        compressed = dataset.id.get_create_plist().get_nfilters() > 0
        check_declared_size(self.path, self.where + name, tuple(dataset.shape), dataset.dtype.itemsize,
                            int(dataset.id.get_storage_size()), compressed)
        data = np.ascontiguousarray(dataset[()])
        return widen_bfloat16(data) if bfloat16 else data


@contextlib.contextmanager
def h5py_errors(path: str, where: str) -> Iterator[None]:
    """h5py's errors on a damaged file (a TypeError for an unknown string encoding, ...) as FileReadError."""
    try:
        yield
    except (TypeError, OSError, RuntimeError, KeyError) as error:
        raise FileReadError(path, f"{where}a damaged HDF5 file ({type(error).__name__}: {one_line(error, 160)})") \
            from None


def open_h5(h5py: Any, path: str, member: bytes | None = None, member_name: str = "") -> H5File:
    """The HDF5 file at ``path``, or its archive member ``member_name`` (``member``, its bytes) in memory."""
    where = f"{member_name}: " if member is not None else ""
    try:
        file = h5py.File(path if member is None else io.BytesIO(member), "r")
    except (OSError, ValueError) as error:
        raise FileReadError(path, f"{where}not a readable HDF5 file, it may be truncated ({one_line(error, 160)})") \
            from None
    return H5File(h5py, file, path, where)
