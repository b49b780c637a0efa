"""How much memory this process may still allocate, the check made before large allocations, the
pool that lets the VM reuse large buffers instead of allocating them afresh on every call, and large
buffers backed by huge pages.

A model whose weights, or a call whose buffers, cannot fit is refused before the first byte is
allocated, with the size and the limit in the message (a half-filled machine, an OOM kill or numpy's
"array is too big" are worse answers). The limit is the smaller of the memory the kernel reports
available (``MemAvailable`` in ``/proc/meminfo``; elsewhere the physical pages) and what remains under
this process's address-space limit (``RLIMIT_AS``), when one is set.

Large buffers (:func:`huge_page_buffer`: the pool's, the kernel runs' arenas, and the parameters and
constants moved there by :func:`move_to_huge_pages`) are private anonymous mappings aligned to 2 MiB and
advised ``MADV_HUGEPAGE`` (Linux transparent huge pages), so that a stream through them takes one TLB
entry per 2 MiB instead of one per 4 KiB. ``np.empty`` gets huge pages only for the aligned middle of
its mapping (numpy advises them, glibc's mapping starts anywhere): on a virtual machine with nested
paging, where each TLB miss walks two page tables, the LlamaMLP's 76 MB of 4-bit weights read 11-17%
faster from one aligned huge-page buffer than from numpy's arrays (Intel Xeon, 2 threads, cold after a
1 GiB read, the same process interleaved; ``benchmarks/README.md``).
"""
from __future__ import annotations

import mmap
import os
import resource
import sys
import threading
from collections.abc import MutableMapping, MutableSequence

import numpy as np

__all__ = ["BufferPool", "CHECKED_ALLOCATION", "HUGE_PAGE", "MemoryLimitError", "available_memory",
           "check_allocation", "huge_page_buffer", "move_to_huge_pages"]

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


#: The size of a transparent huge page on x86-64 / aarch64 Linux (4 KiB base pages), in bytes.
HUGE_PAGE = 2 << 20

#: Alignment of the arrays :func:`move_to_huge_pages` places (a cache line, an AVX-512 vector), in bytes.
ARRAY_ALIGN = 64

_THP: list = []     # [bool]: whether this kernel offers transparent huge pages on request


class _HugePageMapping(mmap.mmap):
    """The mapping of one :func:`huge_page_buffer` (a subclass only to be recognised)."""


def _huge_pages_offered() -> bool:
    """Whether ``madvise(MADV_HUGEPAGE)`` can give huge pages here: Linux with transparent huge pages
    ``always`` or ``madvise`` (``/sys/kernel/mm/transparent_hugepage/enabled``), and a Python whose
    ``mmap`` has ``MADV_HUGEPAGE``. Read once."""
    if not _THP:
        mode = ""
        try:
            with open("/sys/kernel/mm/transparent_hugepage/enabled") as fh:
                text = fh.read()
            mode = text[text.index("[") + 1:text.index("]")]
        except (OSError, ValueError):
            pass
        _THP.append(hasattr(mmap, "MADV_HUGEPAGE") and mode in ("always", "madvise"))
    return _THP[0]


def huge_page_buffer(nbytes: int) -> np.ndarray:
    """An uninitialized, writeable ``uint8`` array of ``nbytes`` (>= 0) whose start is aligned to
    :data:`HUGE_PAGE` (2 MiB) and whose whole 2 MiB regions are advised ``MADV_HUGEPAGE``, in a
    private anonymous mapping of its own (unmapped when the last array viewing it goes). The part after
    the last whole region keeps 4 KiB pages, so nothing is allocated beyond ``nbytes`` but page
    rounding; memory is taken page by page as it is first written, as with ``np.empty``.

    Below one huge page, or where huge pages are not offered (not Linux, transparent huge pages
    ``never``), or when the mapping fails, it is ``np.empty(nbytes, np.uint8)``. The
    returned array is the first array over its memory, so views of it keep it (not only the mapping)
    alive: :class:`BufferPool` counts references to it. Checks nothing against the memory available
    (callers use :func:`check_allocation`)."""
    buf = _huge_page_mapping(nbytes) if nbytes >= HUGE_PAGE else None
    return np.empty(nbytes, np.uint8) if buf is None else buf


def _huge_page_mapping(nbytes: int) -> np.ndarray | None:
    """:func:`huge_page_buffer`'s own mapping of ``nbytes`` (mapped: ``nbytes`` + 2 MiB of address space),
    or None where huge pages are not offered or the mapping fails."""
    if not _huge_pages_offered():
        return None
    try:
        m = _HugePageMapping(-1, nbytes + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    except (OSError, ValueError, OverflowError):
        return None
    view = memoryview(m)
    base = np.frombuffer(view, np.uint8, count=1).ctypes.data
    off = -base % HUGE_PAGE
    try:
        m.madvise(mmap.MADV_HUGEPAGE, off, nbytes // HUGE_PAGE * HUGE_PAGE)
    except OSError:
        pass      # advice only: the memory works the same with 4 KiB pages
    return np.frombuffer(view[off:off + nbytes], np.uint8)


#: :func:`move_to_huge_pages` copies into buffers of at most this many bytes (or one array, when larger),
#: so that its extra memory at any moment is one such buffer.
MOVE_CHUNK = 256 << 20


def move_to_huge_pages(arrays: MutableMapping | MutableSequence) -> None:
    """Copy the numpy arrays among the values of ``arrays`` (a dict of parameters, a list of
    constants) into :func:`huge_page_buffer` memory, in place: each value is replaced by a
    C-contiguous array of the same shape, dtype and values at a 64-byte-aligned offset, consecutive
    arrays packed into buffers of up to :data:`MOVE_CHUNK` bytes, so each original can be freed right
    after its copy (the extra memory at any moment: one buffer, plus the originals something else
    still holds). A read-only array stays read-only.

    Best effort, never an error: values that are not numpy arrays, object arrays and arrays already in
    such a buffer are left as they are; nothing is moved when the arrays together are below one huge
    page or huge pages are not offered; the move stops, leaving the rest where they are, at the first
    buffer that :func:`available_memory` says cannot fit or that cannot be mapped; a buffer below
    one huge page is not made (its arrays stay)."""
    keys = list(arrays.keys()) if isinstance(arrays, MutableMapping) else list(range(len(arrays)))
    movable, aliases = [], {}     # aliases: id of an array -> every key holding it (one copy for all)
    for k in keys:
        a = arrays[k]
        if isinstance(a, np.ndarray) and not a.dtype.hasobject and not _in_huge_pages(a):
            if id(a) not in aliases:
                movable.append((k, -(-a.nbytes // ARRAY_ALIGN) * ARRAY_ALIGN))
            aliases.setdefault(id(a), []).append(k)
    if sum(n for _, n in movable) < HUGE_PAGE or not _huge_pages_offered():
        return
    chunks: list[list] = []
    size = MOVE_CHUNK
    for k, n in movable:
        if size + n > MOVE_CHUNK:
            chunks.append([])
            size = 0
        chunks[-1].append((k, n))
        size += n
    for chunk in chunks:
        total = sum(n for _, n in chunk)
        if total < HUGE_PAGE:
            continue   # (a chunk below one huge page: nothing to gain)
        limit = available_memory()
        if limit is not None and total + HUGE_PAGE > limit:
            return
        buf = _huge_page_mapping(total)
        if buf is None:
            return     # the mapping failed: the originals stay
        pos = 0
        for k, n in chunk:
            a = arrays[k]
            out = buf[pos:pos + a.nbytes].view(a.dtype).reshape(a.shape)
            np.copyto(out, a, casting="no")
            if not a.flags.writeable:
                out.flags.writeable = False
            for j in aliases[id(a)]:
                arrays[j] = out
            del a
            pos += n


def _root(a: np.ndarray):
    """What ``a``'s chain of bases ends in: the owner of its memory (an array, or a buffer object)."""
    base = a
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    return base


def _in_huge_pages(a: np.ndarray) -> bool:
    """Whether ``a`` views a :func:`huge_page_buffer` mapping (a memoryview of one at its root)."""
    root = _root(a)
    return isinstance(root, memoryview) and isinstance(root.obj, _HugePageMapping)


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
                buf = huge_page_buffer(cap + self.ALIGN)
            self._in_use.append(buf)
        off = -buf.ctypes.data % self.ALIGN
        return buf[off:off + nbytes].view(dtype).reshape(shape)
