"""Which GPU each process takes under NCCL, which wants one GPU per process: pure rules, no CUDA calls.

:func:`device_for_local_rank` picks a process's GPU; :func:`check_one_gpu_per_process` checks the
PCI bus ids the node's processes chose.
"""

from __future__ import annotations

from typing import Sequence

__all__ = ["device_for_local_rank", "check_one_gpu_per_process"]


def device_for_local_rank(local_rank: int, local_size: int, device_count: int) -> int:
    """The CUDA device id for the process of local rank ``local_rank`` of ``local_size`` on its node.

    Args:
        local_rank: the process's rank among the processes on its node, in ``[0, local_size)``.
        local_size: the number of processes on the node.
        device_count: the number of CUDA devices the process sees.

    Returns:
        ``local_rank`` when the node has a GPU for every process; 0 when the process sees one
        GPU (the launcher gave each process its own, with CUDA_VISIBLE_DEVICES: the PCI bus ids
        must then differ across the node).

    Raises:
        TypeError: an argument that is not an int.
        ValueError: counts out of range, or more processes on the node than visible GPUs
            (and more than one GPU visible, so the launcher did not pin one per process).
    """
    for name, value in (("local_rank", local_rank), ("local_size", local_size), ("device_count", device_count)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an int; got {type(value).__name__} {value!r}")
    if not 0 <= local_rank < local_size:
        raise ValueError(f"local_rank must be in [0, local_size={local_size}); got {local_rank}")
    if device_count < 1:
        raise ValueError("NCCL needs a GPU for every process; this process sees no CUDA device")
    if device_count >= local_size:
        return local_rank
    if device_count == 1:
        return 0
    raise ValueError(f"NCCL needs one GPU per process: {local_size} processes run on this node but it has "
                     f"{device_count} GPUs; start at most {device_count} processes per node (mpiexec -n, or "
                     "--ppn / --npernode), or use backend='mpi'")


def check_one_gpu_per_process(bus_ids: Sequence[str]) -> None:
    """Check that no two processes of a node chose the same GPU.

    Args:
        bus_ids: the PCI bus id of each process's GPU, ``bus_ids[local_rank]`` (compared
            case-insensitively).

    Raises:
        ValueError: two local ranks chose the GPU of one bus id (both ranks and the id named).
    """
    seen: dict[str, int] = {}
    for local_rank, bus_id in enumerate(bus_ids):
        key = bus_id.lower()
        if key in seen:
            raise ValueError(f"NCCL needs one GPU per process: local ranks {seen[key]} and {local_rank} of this node "
                             f"would both use the GPU at PCI bus id {bus_id}; give each process its own GPU "
                             "(fewer processes per node, or one CUDA_VISIBLE_DEVICES entry each), or use backend='mpi'")
        seen[key] = local_rank
