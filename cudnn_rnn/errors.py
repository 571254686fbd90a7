"""Exceptions raised by cudnn_rnn (no C imports here, so importing them never loads cuDNN)."""

from __future__ import annotations

__all__ = ["CudnnError", "CudnnNotAvailableError", "CheckpointError"]


class CudnnError(RuntimeError):
    """A cuDNN call returned a status other than CUDNN_STATUS_SUCCESS.

    Each argument is kept as the attribute of the same name.

    Args:
        status_name: the status enum name, e.g. ``"CUDNN_STATUS_BAD_PARAM"``.
        status: the numeric status.
        function: the C function that failed, e.g. ``"cudnnRNNForward"``.
        detail: cuDNN's own last-error text, where it gave one.
    """

    def __init__(self, status_name: str, status: int, function: str, detail: str = "") -> None:
        self.status_name = status_name
        self.status = status
        self.function = function
        self.detail = detail
        message = f"{function} failed with {status_name} ({status})"
        super().__init__(f"{message}: {detail}" if detail else message)

    def __reduce__(self) -> tuple[type[CudnnError], tuple[str, int, str, str]]:  # picklable across processes
        return (type(self), (self.status_name, self.status, self.function, self.detail))


class CudnnNotAvailableError(ImportError):
    """libcudnn.so.9 (or CuPy, or a GPU) could not be found; the message says what to install."""


class CheckpointError(ValueError):
    """A checkpoint file that cannot be used: damaged, truncated, of another kind or version, or inconsistent.

    Each argument is kept as the attribute of the same name.

    Args:
        path: the file, as given.
        reason: what is wrong with it.
    """

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"checkpoint {path!r}: {reason}")

    def __reduce__(self) -> tuple[type[CheckpointError], tuple[str, str]]:  # picklable across processes
        return (type(self), (self.path, self.reason))
