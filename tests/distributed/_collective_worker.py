"""One rank of ``tests/distributed/test_collectives.py`` (under ``mpirun -n 2``): runs the worker group's
collectives on rank-dependent data and writes what it received to ``OUT/rank{R}.npz``.

    python tests/distributed/_collective_worker.py OUT collectives   # every collective, every dtype
    python tests/distributed/_collective_worker.py OUT raise         # rank 1 raises: the hook ends all ranks
    python tests/distributed/_collective_worker.py OUT exit-early    # rank 1 leaves (exit 0): rank 0 times out
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from runtime import distributed  # noqa: E402
from runtime.externs import _EXTERNS  # noqa: E402

DTYPES = ("float32", "float64", "float16", "int32", "int64", "bfloat16")


def data(rank: int, dtype: str, shape=(3, 5, 7)) -> np.ndarray:
    """Rank-dependent values, exact in every dtype (small integers and halves)."""
    base = (np.arange(np.prod(shape)).reshape(shape) % 13 - 6) * (rank + 1) + rank
    if dtype == "bfloat16":
        return (base.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    return base.astype(dtype)


def collectives(group, out: Path) -> None:
    result: dict[str, np.ndarray] = {}
    for dtype in DTYPES:
        x = data(group.rank, dtype)
        for op in ("sum", "max", "min", "prod", "avg"):
            if op == "avg" and dtype in ("int32", "int64"):
                continue
            y = np.empty_like(x)
            group.allreduce(x, y, op)
            result[f"allreduce_{op}_{dtype}"] = y
        y = np.empty_like(x)
        group.broadcast_from_worker0(x, y)
        result[f"broadcast_{dtype}"] = y
    # the VM's externs (what the compiled IR calls), on a non-contiguous-free 2-D buffer
    x = data(group.rank, "float32", (4, 2048))
    y = np.empty_like(x)
    _EXTERNS["runtime.disco.allreduce"](x, "sum", y)
    result["extern_allreduce"] = y
    y = np.empty_like(x)
    _EXTERNS["runtime.disco.broadcast_from_worker0"](x, y)
    result["extern_broadcast"] = y
    texts = group.allgather_bytes(b"rank %d says hi" % group.rank + b"!" * group.rank)
    result["allgather"] = np.array([t.decode() for t in texts])
    result["broadcast_bytes"] = np.frombuffer(group.broadcast_bytes(b"from rank 0" if group.rank == 0 else None),
                                              dtype=np.uint8)
    group.reset_stats()
    small, summed = np.ones(2048, np.float32), np.empty(2048, np.float32)
    for _ in range(200):   # many small calls: their counts and result (their cost: benchmarks/bench_tp.py)
        group.allreduce(small, summed)
    result["small_allreduce"] = summed
    result["stats"] = np.array([group.stats()["calls"], group.stats()["bytes"]])
    try:
        distributed.check_same(group, "the test", b"same")
        result["same_ok"] = np.array(True)
        distributed.check_same(group, "the test", b"rank %d" % group.rank)
    except distributed.DistributedError as exc:
        result["differ"] = np.array(str(exc))
    np.savez(out / f"rank{group.rank}.npz", **result)


def main(out: str, case: str) -> None:
    group = distributed.init(2)
    if case == "collectives":
        collectives(group, Path(out))
    elif case == "raise":
        if group.rank == 1:
            raise RuntimeError("rank 1 fails on purpose")
        x = np.zeros(4, np.float32)
        group.allreduce(x, np.empty_like(x))     # waits for rank 1, which never comes
        print("rank 0 was not ended", flush=True)
    elif case == "exit-early":
        if group.rank == 1:
            return                               # a normal exit (code 0): Open MPI does not end rank 0
        x = np.zeros(4, np.float32)
        group.allreduce(x, np.empty_like(x))     # CollectiveTimeout after MB_CCL_TIMEOUT, then the hook aborts
        print("rank 0 did not time out", flush=True)
    else:
        raise SystemExit(f"unknown case {case!r}")


if __name__ == "__main__":
    main(*sys.argv[1:])
