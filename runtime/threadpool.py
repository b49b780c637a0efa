"""A process-wide native thread pool for generated kernels (imports only llvmlite and stdlib).

Generated code splits work with one external call::

    int32_t mb_parallel_for(int32_t (*task)(void *ctx, int64_t index), void *ctx, int64_t ntasks)

which runs ``task(ctx, i)`` for every ``i`` in ``[0, ntasks)`` on the calling thread and the
pool's workers, returns when all have finished, and returns the first nonzero ``task`` result
(0 when all succeed). ``int32_t mb_num_threads(void)`` tells a kernel how many threads a
region may use (it sizes its tasks by it).

The pool itself is LLVM IR compiled once per process by :func:`ensure_pool` and registered
with ``llvmlite.binding.add_symbol``, so every kernel object loaded afterwards links to the
same pool. Design (measured dispatch cost on 2 cores: a few microseconds when the worker is
spinning, tens when it has to be woken):

* workers are pthreads started once; between regions each spins (``pause``) for
  ``MB_POOL_SPIN`` iterations (default 20000, well under a millisecond), then keeps polling
  with ``sched_yield`` for ``MB_POOL_YIELD`` more (default 2000, a few milliseconds; a
  yielding thread gives its core to any other runnable thread), then sleeps on a futex.
  Polling keeps the worker runnable on its own core between the kernels of a model, and
  beside another library's pool (OpenBLAS yields-spins for about 0.1 s after each call):
  a woken-up sleeper is often placed on the waking thread's core instead, where it only
  competes with it;
* a region publishes ``(fn, ctx, ntasks)`` and a 64-bit word ``generation << 32 | next``;
  every thread (the caller included) claims task indices with a compare-and-swap on that word
  (dynamic scheduling, so a descheduled worker costs at most the task it holds), and the
  caller waits until the count of finished tasks reaches ``ntasks``. Before it writes the new
  ``(fn, ctx, ntasks)`` a region closes the previous word (index ``2**32 - 1``): a worker that read
  the old word and then the new count cannot claim with it (without this, such a worker ran a task
  of the new region under the old word and counted it finished there, so the caller could return
  while a task still ran: crashes of a kernel whose two regions, x's conversion and the GEMM, have
  different task counts);
* a region started while another is running (a task that calls a parallel kernel, or two
  Python threads calling kernels at once) runs serially on its caller, so regions never nest
  or deadlock; after ``fork`` the child has no workers and the caller runs every task.

Threads: ``MB_NUM_THREADS`` (default: the CPUs this process may run on) is the pool size;
:func:`set_num_threads` changes how many of them regions use (1 = serial). On platforms
without futexes (anything but Linux on x86-64 / AArch64) the pool is serial.
"""
from __future__ import annotations

import ctypes
import os
import platform
import sys
import threading

import llvmlite.binding as llvm

from .host import host_target_machine, init_llvm

__all__ = ["ensure_pool", "set_num_threads", "get_num_threads", "pool_size", "SYMBOLS"]

#: Symbols the pool provides to generated code.
SYMBOLS = ("mb_parallel_for", "mb_num_threads")

_LOCK = threading.Lock()
_POOL: "_Pool | None" = None

#: ``task(ctx, i)`` for ``i`` in ``[0, n)`` on the calling thread, stopping at the first nonzero
#: result, which it returns (0 when all succeed): the serial pool's ``mb_parallel_for`` and the
#: threaded pool's fallback for a region that cannot use the workers.
_SERIAL_FOR = r"""
define internal i32 @serial_for(ptr %f, ptr %c, i64 %n) nounwind {
entry:
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%i1, %next]
  %more = icmp slt i64 %i, %n
  br i1 %more, label %body, label %done
body:
  %rc = call i32 %f(ptr %c, i64 %i)
  %bad = icmp ne i32 %rc, 0
  br i1 %bad, label %fail, label %next
fail:
  ret i32 %rc
next:
  %i1 = add i64 %i, 1
  br label %loop
done:
  ret i32 0
}
"""

_COMMON = r"""
@gen = internal global i32 0, align 64
@work = internal global i64 0, align 64
@done = internal global i64 0, align 64
@fn = internal global ptr null, align 8
@ctx = internal global ptr null, align 8
@ntasks = internal global i64 0, align 8
@err = internal global i32 0, align 4
@busy = internal global i32 0, align 64
@nworkers = internal global i32 0, align 4
@active = internal global i32 1, align 4
@spin = internal global i32 20000, align 4
@yields = internal global i32 0, align 4
@sleepers = internal global i32 0, align 64
@threads = internal global [256 x i64] zeroinitializer, align 8

declare i32 @pthread_create(ptr, ptr, ptr, ptr)
declare i32 @pthread_detach(i64)
declare i32 @sched_yield()

define i32 @mb_num_threads() nounwind {
  %a = load atomic i32, ptr @active monotonic, align 4
  %w = load atomic i32, ptr @nworkers monotonic, align 4
  %w1 = add i32 %w, 1
  %lt = icmp slt i32 %a, %w1
  %r = select i1 %lt, i32 %a, i32 %w1
  ret i32 %r
}

define void @mb_pool_set_active(i32 %n) nounwind {
  %lt = icmp slt i32 %n, 1
  %m = select i1 %lt, i32 1, i32 %n
  store atomic i32 %m, ptr @active monotonic, align 4
  ret void
}

; claim and run the tasks of generation %g until none is left
define internal void @run_tasks(i32 %g) nounwind {
entry:
  %g64 = zext i32 %g to i64
  br label %loop
loop:
  %w = load atomic i64, ptr @work acquire, align 8
  %wg = lshr i64 %w, 32
  %same = icmp eq i64 %wg, %g64
  br i1 %same, label %check, label %exit
check:
  %idx = and i64 %w, 4294967295
  %f = load atomic ptr, ptr @fn acquire, align 8
  %c = load atomic ptr, ptr @ctx acquire, align 8
  %n = load atomic i64, ptr @ntasks acquire, align 8
  %more = icmp slt i64 %idx, %n
  br i1 %more, label %claim, label %exit
claim:
  %w1 = add i64 %w, 1
  %pair = cmpxchg ptr @work, i64 %w, i64 %w1 acq_rel acquire
  %ok = extractvalue { i64, i1 } %pair, 1
  br i1 %ok, label %run, label %loop
run:
  %rc = call i32 %f(ptr %c, i64 %idx)
  %bad = icmp ne i32 %rc, 0
  br i1 %bad, label %record, label %finish
record:
  %ignored = cmpxchg ptr @err, i32 0, i32 %rc acq_rel monotonic
  br label %finish
finish:
  %old = atomicrmw add ptr @done, i64 1 release
  br label %loop
exit:
  ret void
}

define i32 @mb_parallel_for(ptr %f, ptr %c, i64 %n) nounwind {
entry:
  %le1 = icmp sle i64 %n, 1
  %a = call i32 @mb_num_threads()
  %single = icmp sle i32 %a, 1
  %noparallel = or i1 %le1, %single
  br i1 %noparallel, label %serial, label %lock
lock:
  %pair = cmpxchg ptr @busy, i32 0, i32 1 acquire monotonic
  %got = extractvalue { i32, i1 } %pair, 1
  br i1 %got, label %publish, label %serial
serial:
  %rcs = call i32 @serial_for(ptr %f, ptr %c, i64 %n)
  ret i32 %rcs
publish:
  ; close the previous region's work word before its task count changes: a worker that read the word
  ; while that region ran (its last index claimed) and reads the new count would otherwise claim an
  ; index of this region with the old word, run this region's task, and count it done here (the caller
  ; then returned while a task still ran; seen as crashes of back-to-back regions of different counts)
  %g0 = load atomic i32, ptr @gen monotonic, align 4
  %g0w = zext i32 %g0 to i64
  %g0s = shl i64 %g0w, 32
  %closed = or i64 %g0s, 4294967295
  store atomic i64 %closed, ptr @work seq_cst, align 8
  fence seq_cst
  store atomic ptr %f, ptr @fn release, align 8
  store atomic ptr %c, ptr @ctx release, align 8
  store atomic i64 %n, ptr @ntasks release, align 8
  store i32 0, ptr @err, align 4
  store atomic i64 0, ptr @done monotonic, align 8
  %g = add i32 %g0, 1
  %g64 = zext i32 %g to i64
  %w = shl i64 %g64, 32
  store atomic i64 %w, ptr @work release, align 8
  store atomic i32 %g, ptr @gen seq_cst, align 4
  %sl = load atomic i32, ptr @sleepers seq_cst, align 4
  %anysleep = icmp sgt i32 %sl, 0
  br i1 %anysleep, label %wake, label %work
wake:
  call void @futex_wake(ptr @gen)
  br label %work
work:
  call void @run_tasks(i32 %g)
  br label %wait
wait:
  %k = phi i64 [0, %work], [%k1, %yield], [%k1, %pause]
  %d = load atomic i64, ptr @done acquire, align 8
  %fin = icmp sge i64 %d, %n
  br i1 %fin, label %out, label %waitmore
waitmore:
  %k1 = add i64 %k, 1
  %long = icmp sgt i64 %k, 2000
  br i1 %long, label %yield, label %pause
yield:
  %y = call i32 @sched_yield()
  br label %wait
pause:
  call void @cpu_relax()
  br label %wait
out:
  %rc = load i32, ptr @err, align 4
  store atomic i32 0, ptr @busy release, align 4
  ret i32 %rc
}

define internal ptr @worker(ptr %arg) nounwind {
entry:
  %id = ptrtoint ptr %arg to i64
  %id32 = trunc i64 %id to i32
  %g0 = load atomic i32, ptr @gen acquire, align 4
  br label %wait
wait:
  %mine = phi i32 [%g0, %entry], [%g, %runit], [%g, %skip]
  br label %spin
spin:
  %s = phi i32 [0, %wait], [%s1, %relax], [%s2, %yield], [0, %slept]
  %g = load atomic i32, ptr @gen acquire, align 4
  %new = icmp ne i32 %g, %mine
  br i1 %new, label %got, label %idle
idle:
  %lim = load atomic i32, ptr @spin monotonic, align 4
  %spinning = icmp slt i32 %s, %lim
  br i1 %spinning, label %relax, label %yieldcheck
relax:
  call void @cpu_relax()
  %s1 = add i32 %s, 1
  br label %spin
yieldcheck:
  %ylim = load atomic i32, ptr @yields monotonic, align 4
  %total = add i32 %lim, %ylim
  %yielding = icmp slt i32 %s, %total
  br i1 %yielding, label %yield, label %sleep
yield:
  %yr = call i32 @sched_yield()
  %s2 = add i32 %s, 1
  br label %spin
sleep:
  %o1 = atomicrmw add ptr @sleepers, i32 1 seq_cst
  call void @futex_wait(ptr @gen, i32 %mine)
  %o2 = atomicrmw sub ptr @sleepers, i32 1 seq_cst
  br label %slept
slept:
  br label %spin
got:
  %a = load atomic i32, ptr @active monotonic, align 4
  %id1 = add i32 %id32, 1
  %part = icmp slt i32 %id1, %a
  br i1 %part, label %runit, label %skip
runit:
  call void @run_tasks(i32 %g)
  br label %wait
skip:
  br label %wait
}

; start %n workers (once; later calls only update the spin counts); returns how many run
define i32 @mb_pool_init(i32 %n, i32 %spin, i32 %yields) nounwind {
entry:
  store atomic i32 %spin, ptr @spin monotonic, align 4
  store atomic i32 %yields, ptr @yields monotonic, align 4
  %have = load atomic i32, ptr @nworkers monotonic, align 4
  %started = icmp sgt i32 %have, 0
  br i1 %started, label %exit, label %loop
loop:
  %i = phi i32 [0, %entry], [%i1, %ok]
  %more = icmp slt i32 %i, %n
  br i1 %more, label %create, label %exit
create:
  %i64 = zext i32 %i to i64
  %slot = getelementptr inbounds [256 x i64], ptr @threads, i64 0, i64 %i64
  %arg = inttoptr i64 %i64 to ptr
  %rc = call i32 @pthread_create(ptr %slot, ptr null, ptr @worker, ptr %arg)
  %fail = icmp ne i32 %rc, 0
  br i1 %fail, label %exit, label %ok
ok:
  %tid = load i64, ptr %slot, align 8
  %d = call i32 @pthread_detach(i64 %tid)
  %i1 = add i32 %i, 1
  store atomic i32 %i1, ptr @nworkers release, align 4
  br label %loop
exit:
  %r = load atomic i32, ptr @nworkers monotonic, align 4
  ret i32 %r
}
"""

_FUTEX = r"""
declare i64 @syscall(i64, ...)

define internal void @futex_wait(ptr %addr, i32 %val) nounwind {
  %r = call i64 (i64, ...) @syscall(i64 {SYS_FUTEX}, ptr %addr, i32 128, i32 %val, ptr null)
  ret void
}

define internal void @futex_wake(ptr %addr) nounwind {
  %r = call i64 (i64, ...) @syscall(i64 {SYS_FUTEX}, ptr %addr, i32 129, i32 2147483647)
  ret void
}
"""

_RELAX = {
    "x86_64": "declare void @llvm.x86.sse2.pause()\n"
              "define internal void @cpu_relax() nounwind {\n"
              "  call void @llvm.x86.sse2.pause()\n  ret void\n}\n",
    "aarch64": "declare void @llvm.aarch64.hint(i32)\n"
               "define internal void @cpu_relax() nounwind {\n"
               "  call void @llvm.aarch64.hint(i32 1)\n  ret void\n}\n",
}
_SYS_FUTEX = {"x86_64": 202, "aarch64": 98}


def _arch() -> str | None:
    """``x86_64`` / ``aarch64`` on Linux (the platforms with a futex-based pool), else None."""
    if not sys.platform.startswith("linux"):
        return None
    machine = platform.machine().lower()
    if machine in ("x86_64", "amd64"):
        return "x86_64"
    if machine in ("aarch64", "arm64"):
        return "aarch64"
    return None


_SERIAL = r"""
define i32 @mb_num_threads() nounwind {
  ret i32 1
}

define void @mb_pool_set_active(i32 %n) nounwind {
  ret void
}

define i32 @mb_pool_init(i32 %n, i32 %spin, i32 %yields) nounwind {
  ret i32 0
}

define i32 @mb_parallel_for(ptr %f, ptr %c, i64 %n) nounwind {
  %rc = call i32 @serial_for(ptr %f, ptr %c, i64 %n)
  ret i32 %rc
}
"""


def _pool_ir(arch: str | None) -> str:
    if arch is None:
        return _SERIAL_FOR + _SERIAL
    return _SERIAL_FOR + _COMMON + _FUTEX.replace("{SYS_FUTEX}", str(_SYS_FUTEX[arch])) + _RELAX[arch]


def _env_int(name: str, default: int) -> int:
    """A non-negative int from the environment (``default`` when unset)."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{name} must be a non-negative integer, got {text!r}") from None
    if value < 0:
        raise ValueError(f"{name} must be a non-negative integer, got {text!r}")
    return min(value, 2**31 - 1)


def _default_threads() -> int:
    env = os.environ.get("MB_NUM_THREADS", "").strip()
    if env:
        try:
            return max(1, min(int(env), 256))
        except ValueError:
            raise ValueError(f"MB_NUM_THREADS must be a positive integer, got {env!r}") from None
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


class _Pool:
    """The compiled pool: an MCJIT engine kept alive for the life of the process (its worker
    threads run code inside it)."""

    def __init__(self) -> None:
        arch = _arch()
        self.tm = host_target_machine(llvm.get_process_triple(), llvm.get_host_cpu_name(),
                                      llvm.get_host_cpu_features().flatten(), opt=2)
        mod = llvm.parse_assembly(_pool_ir(arch))
        mod.triple = llvm.get_process_triple()
        mod.verify()
        self.engine = llvm.create_mcjit_compiler(mod, self.tm)
        self.engine.finalize_object()
        self.addresses = {name: self.engine.get_function_address(name)
                          for name in SYMBOLS + ("mb_pool_init", "mb_pool_set_active")}
        for name in SYMBOLS:
            llvm.add_symbol(name, self.addresses[name])
        self._init = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_int32, ctypes.c_int32,
                                      ctypes.c_int32)(self.addresses["mb_pool_init"])
        self._set_active = ctypes.CFUNCTYPE(None, ctypes.c_int32)(
            self.addresses["mb_pool_set_active"])
        self._num = ctypes.CFUNCTYPE(ctypes.c_int32)(self.addresses["mb_num_threads"])
        self.parallel_for = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p,
                                             ctypes.c_int64)(self.addresses["mb_parallel_for"])
        self.size = 1
        if arch is not None:
            spin = _env_int("MB_POOL_SPIN", 20000)
            yields = _env_int("MB_POOL_YIELD", 2000)
            threads = _default_threads()
            workers = self._init(threads - 1, spin, yields) if threads > 1 else 0
            self.size = workers + 1
            self._set_active(self.size)

    def set_active(self, n: int) -> None:
        self._set_active(int(n))

    def num_threads(self) -> int:
        return int(self._num())


def ensure_pool() -> _Pool:
    """Compile and start the pool once per process (LLVM's native target must be initialized)
    and register its symbols; returns it."""
    global _POOL
    if _POOL is None:
        with _LOCK:
            if _POOL is None:
                init_llvm()
                _POOL = _Pool()
    return _POOL


def pool_size() -> int:
    """Threads in the pool, the caller included (1 = serial)."""
    return ensure_pool().size


def get_num_threads() -> int:
    """Threads a parallel region uses now (``<= pool_size()``)."""
    return ensure_pool().num_threads()


def set_num_threads(n: int) -> int:
    """Use ``n`` threads per region from now on (clamped to ``[1, pool_size()]``); returns the
    previous value. Raises ValueError for ``n < 1``."""
    if int(n) < 1:
        raise ValueError(f"set_num_threads: need at least 1 thread, got {n}")
    pool = ensure_pool()
    old = pool.num_threads()
    pool.set_active(min(int(n), pool.size))
    return old
