"""How much memory this process may still allocate, and the check made before large allocations.

A model whose weights, or a call whose buffers, cannot fit is refused before the first byte is
allocated, with the size and the limit in the message (a half-filled machine, an OOM kill or numpy's
"array is too big" are worse answers). The limit is the smaller of the memory the kernel reports
available (``MemAvailable`` in ``/proc/meminfo``; elsewhere the physical pages) and what remains under
this process's address-space limit (``RLIMIT_AS``), when one is set.
"""
from __future__ import annotations

import os
import resource

__all__ = ["MemoryLimitError", "available_memory", "check_allocation"]


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
