"""The worker group's collectives (``runtime/distributed.py``) on 2 local MPI ranks, against numpy
references of the same rank-dependent data; the VM externs the compiled IR calls; the launch checks and
the failure paths (an uncaught exception ends every rank, a lone process asking for 2 shards)."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from runtime import distributed

from ._collective_worker import DTYPES, data
from .conftest import ROOT, mpirun

pytestmark = pytest.mark.distributed

WORKER = [sys.executable, "tests/distributed/_collective_worker.py"]


def _as_float(a: np.ndarray, dtype: str) -> np.ndarray:
    return (a.astype(np.uint32) << 16).view(np.float32).astype(np.float64) if dtype == "bfloat16" else \
        a.astype(np.float64)


def torchrun(*args: str, ccl_timeout: float = 30, timeout: float = 120) -> subprocess.CompletedProcess:
    """``torchrun --nproc-per-node 2 args`` on a free loopback port (the gloo engine); skips without torch."""
    launcher = Path(sys.executable).parent / "torchrun"
    if not launcher.exists():
        pytest.skip("torchrun is not installed")
    pytest.importorskip("torch.distributed")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "MB_CCL_TIMEOUT": str(ccl_timeout), "PYTHONPATH": str(ROOT)}
    argv = [str(launcher), "--nproc-per-node", "2", "--master-addr", "127.0.0.1", "--master-port", str(port),
            *args]
    try:
        return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"torchrun did not finish in {timeout} s (a hang):\n{exc.stdout}\n{exc.stderr}")


@pytest.fixture(scope="module", params=["mpi", "gloo"])
def ranks(request, tmp_path_factory):
    """What each of 2 ranks received, under mpirun (MPIGroup) and under torchrun (TorchGlooGroup)."""
    out = tmp_path_factory.mktemp(f"collectives_{request.param}")
    if request.param == "mpi":
        proc = mpirun(*[[*WORKER, str(out), "collectives"]] * 2, timeout=120)
    else:
        proc = torchrun(*WORKER[1:], str(out), "collectives")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return [dict(np.load(out / f"rank{r}.npz")) for r in range(2)]


@pytest.mark.parametrize("dtype", DTYPES)
def test_allreduce_and_broadcast_every_dtype(ranks, dtype):
    a, b = (_as_float(data(r, dtype), dtype) for r in (0, 1))
    want = {"sum": a + b, "max": np.maximum(a, b), "min": np.minimum(a, b), "prod": a * b, "avg": (a + b) / 2}
    for rank in ranks:
        for op, ref in want.items():
            key = f"allreduce_{op}_{dtype}"
            if key not in rank:
                assert op == "avg" and dtype.startswith("int")
                continue
            got = rank[key]
            assert got.dtype == data(0, dtype).dtype and got.shape == (3, 5, 7)
            np.testing.assert_array_equal(_as_float(got, dtype), ref, err_msg=key)
        np.testing.assert_array_equal(rank[f"broadcast_{dtype}"], data(0, dtype))


def test_the_vm_externs_and_bytes_collectives(ranks):
    x0, x1 = data(0, "float32", (4, 2048)), data(1, "float32", (4, 2048))
    for r, rank in enumerate(ranks):
        np.testing.assert_array_equal(rank["extern_allreduce"], x0 + x1)
        np.testing.assert_array_equal(rank["extern_broadcast"], x0)
        assert list(rank["allgather"]) == ["rank 0 says hi", "rank 1 says hi!"]
        assert rank["broadcast_bytes"].tobytes() == b"from rank 0"
        assert bool(rank["same_ok"])
        assert "rank(s) 1 built something other than rank 0" in str(rank["differ"])
        assert tuple(rank["stats"]) == (200, 200 * 2048 * 4)
        np.testing.assert_array_equal(rank["small_allreduce"], np.full(2048, 2, np.float32))   # the last of the 200


def test_an_uncaught_exception_on_one_rank_ends_every_rank_at_once(tmp_path):
    proc = mpirun(*[[*WORKER, str(tmp_path), "raise"]] * 2, ccl_timeout=60, timeout=50)
    assert proc.returncode != 0
    text = proc.stdout + proc.stderr
    assert "rank 1: Traceback" in text and "rank 1 fails on purpose" in text, text[-2000:]
    assert "rank 0 was not ended" not in text


def test_a_rank_that_exits_early_makes_the_other_time_out(tmp_path):
    """Rank 0's allreduce gives up after the collective timeout (2 s) with the error naming it, and mpirun
    ends (its own limit of 60 s only stops a hang)."""
    proc = mpirun(*[[*WORKER, str(tmp_path), "exit-early"]] * 2, ccl_timeout=2, timeout=60)
    assert proc.returncode != 0
    text = proc.stdout + proc.stderr
    assert "rank 0: Traceback" in text and "CollectiveTimeout: allreduce on rank 0 of 2 waited 2 s" in text, \
        text[-2000:]
    assert "a rank died or finished early" in text and "rank 0 did not time out" not in text


def test_under_torchrun_a_rank_that_exits_early_ends_the_other(tmp_path):
    proc = torchrun(*WORKER[1:], str(tmp_path), "exit-early", ccl_timeout=2, timeout=90)
    assert proc.returncode != 0
    text = proc.stdout + proc.stderr
    assert "allreduce on rank 0 of 2" in text and "finished early" in text, text[-3000:]
    assert "rank 0 did not time out" not in text


def test_size_checks_without_a_launcher(monkeypatch):
    for var in ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "PMI_SIZE", "PMI_RANK", "PMIX_RANK", "RANK",
                "WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)
    assert distributed.launcher_rank() is None and distributed.launcher_size() is None
    with pytest.raises(distributed.DistributedError, match=r"needs 2 ranks, and this process runs alone: launch it "
                                                           r"as `mpirun -n 2 build"):
        distributed.init(2)
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "4")
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "3")
    assert distributed.launcher_rank() == 3
    with pytest.raises(distributed.DistributedError, match="the launcher started 4 ranks"):
        distributed.init(2)
    with pytest.raises(ValueError, match="backend"):
        distributed.init(4, backend="nccl")


def test_the_engine_follows_the_launcher(monkeypatch):
    for var in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "TORCHELASTIC_RUN_ID", "WORLD_SIZE", "MASTER_ADDR"):
        monkeypatch.delenv(var, raising=False)
    assert not distributed._under_torchrun()
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    assert distributed._under_torchrun()                    # torch.distributed's env:// launch
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "2")
    assert not distributed._under_torchrun()                # mpirun wins over a stray WORLD_SIZE
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "x")
    assert distributed._under_torchrun()


def test_externs_without_a_group_say_how_to_get_one():
    from runtime.externs import _EXTERNS

    if distributed.current_group() is not None:
        pytest.skip("this process joined a group")
    x = np.ones(3, np.float32)
    with pytest.raises(distributed.DistributedError, match="tensor_parallel_shards=N under `mpirun -n N`"):
        _EXTERNS["runtime.disco.allreduce"](x, "sum", np.empty_like(x))


@pytest.mark.parametrize("value, want", [("", 300.0), ("2.5", 2.5), ("0", float("inf"))])
def test_collective_timeout_setting(monkeypatch, value, want):
    monkeypatch.setenv("MB_CCL_TIMEOUT", value)
    assert distributed.collective_timeout() == want


def test_bad_collective_timeout_setting(monkeypatch):
    monkeypatch.setenv("MB_CCL_TIMEOUT", "soon")
    with pytest.raises(ValueError, match="MB_CCL_TIMEOUT"):
        distributed.collective_timeout()


def test_bfloat16_narrowing_rounds_to_nearest_even():
    from runtime.distributed import _narrow

    bits = np.array([0x3F808000, 0x3F818000, 0x3F808001, 0x3F807FFF], dtype=np.uint32)   # ties, above, below
    got = _narrow(bits.view(np.float32), "bfloat16")
    assert list(got) == [0x3F80, 0x3F82, 0x3F81, 0x3F80]
    special = np.array([0x7FFFFFFF, 0xFFFFFFFF, 0x7F800001, 0x7F800000, 0xFF800000, 0x7F7FFFFF], dtype=np.uint32)
    got = _narrow(special.view(np.float32), "bfloat16")     # NaNs stay NaN (sign kept), inf stays, max rounds up
    assert list(got) == [0x7FFF, 0xFFFF, 0x7FC0, 0x7F80, 0xFF80, 0x7F80]
