"""How much memory this process may still allocate, the check made before large allocations, and
the pool that lets the VM reuse large buffers instead of allocating them afresh on every call.

A model whose weights, or a call whose buffers, cannot fit is refused before the first byte is
allocated, with the size and the limit in the message (a half-filled machine, an OOM kill or numpy's
"array is too big" are worse answers). The limit is the smaller of the memory the kernel reports
available (``MemAvailable`` in ``/proc/meminfo``; elsewhere the physical pages) and what remains under
this process's address-space limit (``RLIMIT_AS``), when one is set.
"""
from __future__ import annotations

import os
import resource
import sys
import threading

import numpy as np

__all__ = ["BufferPool", "CHECKED_ALLOCATION", "MemoryLimitError", "available_memory", "check_allocation"]

#: Buffers above this many bytes are checked against the memory available before they are allocated
#: (the VM's outputs, the pool's new buffers).
CHECKED_ALLOCATION = 1 << 26


class MemoryLimitError(MemoryError):
    """An allocation was refused before it was tried: it is larger than the memory available."""


def _meminfo_available() -> int | None:
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def _address_space_left() -> int | None:
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return None
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmSize:"):
                    return max(soft - int(line.split()[1]) * 1024, 0)
    except (OSError, ValueError, IndexError):
        pass
    return soft


def available_memory() -> int | None:
    """Bytes this process can still allocate (see the module docstring), or None when unknown."""
    limits = [v for v in (_meminfo_available(), _address_space_left()) if v is not None]
    return min(limits) if limits else None


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def check_allocation(nbytes: int, what: str) -> None:
    """Raise :class:`MemoryLimitError` when ``nbytes`` (an exact Python int, any size) exceed
    :func:`available_memory`; ``what`` names the allocation in the message (``"the parameters of
    llama"``). Nothing is allocated here."""
    limit = available_memory()
    if limit is not None and nbytes > limit:
        raise MemoryLimitError(f"{what} need {_size(nbytes)} ({nbytes:,} bytes), but only {_size(limit)} "
                               "of memory is available")


class BufferPool:
    """Large uninitialized buffers reused from call to call (the role of TVM's ``PooledAllocator``).

    A large ``np.empty`` is served by ``mmap`` and given back with ``munmap`` (glibc's allocator does
    this above its mmap threshold, 128 KiB to 32 MiB), so every call of a model touches fresh pages:
    each 4 KiB page faults and is zeroed by the kernel on first write. On the Whisper stem that was a
    quarter of the time (Zen 4: 20.6 ms per call, 14.8 ms with the same buffers reused). The pool
    keeps such buffers instead:

    - :meth:`empty` ``(shape, dtype) -> array``: a C-contiguous array of ``shape`` / ``dtype`` (a numpy
      dtype), uninitialized, 64-byte aligned, viewing a pooled byte buffer whose capacity is the size
      rounded up to one of 8 size classes per octave (at most 12.5% more), so that sizes that grow
      a little from call to call (a KV length) keep their buffer;
    - a buffer is free again as soon as no array views it any more: every array made from it holds a
      reference to it (numpy views keep their base), so a buffer whose reference count is the pool's
      own is unreachable, whatever views were made, returned or stored meanwhile. :meth:`empty` looks
      for such buffers before it allocates. Memory that a program keeps (a returned output, an array
      stored in a KV cache) is never handed out twice.
    - at most ``max_free_bytes`` (default 1 GiB) are kept free; the buffers freed longest ago are
      dropped first. Buffers below ``min_bytes`` (128 KiB, glibc's default mmap threshold, below
      which malloc already reuses memory) are not pooled: :meth:`empty` returns ``np.empty``.

    One pool per :class:`runtime.VirtualMachine`; a lock keeps the free lists consistent when
    several Python threads call the same VM (a buffer is handed out once either way). Raises
    :class:`MemoryLimitError` (via :func:`check_allocation`) for a new buffer of more than 64 MiB
    that does not fit in the memory available, after dropping the free buffers.
    """

    #: Alignment of the arrays handed out (a cache line, an AVX-512 vector), in bytes.
    ALIGN = 64

    def __init__(self, min_bytes: int = 1 << 17, max_free_bytes: int = 1 << 30) -> None:
        self.min_bytes = min_bytes
        self.max_free_bytes = max_free_bytes
        self._free: dict[int, list[np.ndarray]] = {}   # capacity -> buffers
        self._free_order: list[np.ndarray] = []          # the free buffers, oldest first
        self._free_bytes = 0
        self._in_use: list[np.ndarray] = []
        self._lock = threading.Lock()
        # the count of a buffer that only the pool's list holds
        self._unreferenced = self._refs([np.empty(1, np.uint8)], 0)

    @staticmethod
    def _refs(buffers: list, i: int) -> int:
        return sys.getrefcount(buffers[i])

    @staticmethod
    def capacity(nbytes: int) -> int:
        """``nbytes`` rounded up to its size class: a multiple of 2**(bit_length - 4), i.e. one of 8
        classes per power of two."""
        step = 1 << max(nbytes.bit_length() - 4, 0)
        return -(-nbytes // step) * step

    @property
    def free_bytes(self) -> int:
        """Bytes held in free buffers (capacities)."""
        return self._free_bytes

    @property
    def in_use(self) -> int:
        """Buffers handed out and still referenced (as of the last :meth:`empty` or :meth:`collect`)."""
        return len(self._in_use)

    def collect(self) -> None:
        """Move every handed-out buffer that no array references any more to the free lists."""
        with self._lock:
            self._collect()

    def _collect(self) -> None:
        in_use, kept = self._in_use, []
        for i in range(len(in_use)):
            if self._refs(in_use, i) == self._unreferenced:
                self._release(in_use[i])
            else:
                kept.append(in_use[i])
        self._in_use = kept

    def _release(self, buf: np.ndarray) -> None:
        cap = buf.size - self.ALIGN
        self._free.setdefault(cap, []).append(buf)
        self._free_order.append(buf)
        self._free_bytes += cap
        while self._free_bytes > self.max_free_bytes and self._free_order:
            self._drop(self._free_order[0])

    @staticmethod
    def _remove(items: list, buf: np.ndarray) -> None:
        """Remove ``buf`` from ``items`` by identity (``list.remove`` would compare arrays)."""
        for i, b in enumerate(items):
            if b is buf:
                del items[i]
                return

    def _drop(self, buf: np.ndarray) -> None:
        """Take the free buffer ``buf`` out of the free lists."""
        cap = buf.size - self.ALIGN
        bucket = self._free[cap]
        self._remove(bucket, buf)
        if not bucket:
            del self._free[cap]
        self._remove(self._free_order, buf)
        self._free_bytes -= cap

    def clear(self) -> None:
        """Drop every free buffer (the ones in use stay theirs)."""
        with self._lock:
            self._clear()

    def _clear(self) -> None:
        self._free.clear()
        self._free_order.clear()
        self._free_bytes = 0

    def empty(self, shape: tuple, dtype: np.dtype) -> np.ndarray:
        """An uninitialized C-contiguous array of ``shape`` (non-negative ints) and numpy ``dtype``,
        from the pool when it is at least ``min_bytes`` (see the class docstring)."""
        nbytes = dtype.itemsize
        for d in shape:
            nbytes *= d
        if nbytes < self.min_bytes:
            return np.empty(shape, dtype)
        cap = self.capacity(nbytes)
        with self._lock:
            self._collect()
            bucket = self._free.get(cap)
            if bucket:
                buf = bucket[-1]
                self._drop(buf)
            else:
                if cap > CHECKED_ALLOCATION:
                    self._clear()
                    check_allocation(cap, f"a buffer of shape {tuple(shape)} {dtype}")
                buf = np.empty(cap + self.ALIGN, np.uint8)
            self._in_use.append(buf)
        off = -buf.ctypes.data % self.ALIGN
        return buf[off:off + nbytes].view(dtype).reshape(shape)
