"""How many BLAS threads each process runs after ``distributed.init()``; each rank writes FOLDER/rank<r>.json.

    mpiexec -n N python tests/distributed/jobs/host_threads_job.py FOLDER
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from threadpoolctl import threadpool_info

from cudnn_rnn import cpu, distributed
from cudnn_rnn._host import host_cores


def blas_threads() -> list[int]:
    return [pool["num_threads"] for pool in threadpool_info() if pool.get("user_api") == "blas"]


def main() -> None:
    before = blas_threads()
    comm = distributed.init()
    after = blas_threads()
    with cpu.blas_threads() as plan:  # the threads a NumPy backend call gives its small and its large products
        plan.for_products(cpu.GRAIN - 1)
        small = blas_threads()
        plan.for_products(cpu.GRAIN)
        large = blas_threads()
    facts = dict(rank=comm.rank, before=before, after=after, cores=host_cores(), local_size=comm.local_size,
                 small=small, large=large, restored=blas_threads())
    (Path(sys.argv[1]) / f"rank{comm.rank}.json").write_text(json.dumps(facts))
    comm.close()


if __name__ == "__main__":
    main()
