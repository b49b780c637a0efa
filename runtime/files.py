"""Reading and writing files that may be damaged, hostile or shared: regular files only, bounded
reads, atomic writes.

A path from a user or a cache may name a FIFO (opening it for reading blocks until a writer comes), a
device (``/dev/zero`` reads without end), a directory or a symlink to any of these. Every file the
project reads whole goes through :func:`open_regular` / :func:`read_regular`, and every file it
writes through :func:`atomic_write`, so that a crash or a full disk mid-write never leaves a
half-written file under the final name.
"""
from __future__ import annotations

import os
import stat
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Callable, Iterator

__all__ = ["open_regular", "read_regular", "atomic_write", "NotRegularFileError"]


class NotRegularFileError(ValueError):
    """The path exists but is not a regular file (a FIFO, a device, a directory, a socket)."""


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


@contextmanager
def open_regular(path: str | os.PathLike, max_bytes: int | None = None, follow_symlinks: bool = True
                 ) -> Iterator[tuple[BinaryIO, int]]:
    """Open ``path`` for reading as ``(binary file, size in bytes)`` when it is a regular file of at
    most ``max_bytes`` bytes. The open never blocks (``O_NONBLOCK``, so a FIFO cannot hang it) and the
    type is checked on the opened descriptor (no race with a rename). With ``follow_symlinks=False`` a
    symlink at ``path`` itself is refused.

    Raises FileNotFoundError / PermissionError / other OSError as ``open`` does,
    :class:`NotRegularFileError` (a ValueError) for anything but a regular file, ValueError when the
    file is larger than ``max_bytes``.
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    if not follow_symlinks:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, flags)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFileError(f"{os.fspath(path)} is {_kind(st.st_mode)}, not a regular file")
        if max_bytes is not None and st.st_size > max_bytes:
            raise ValueError(f"{os.fspath(path)} is {st.st_size} bytes, more than the {max_bytes} allowed")
        os.set_blocking(fd, True)
        fh = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with fh:
        yield fh, st.st_size


def read_regular(path: str | os.PathLike, max_bytes: int | None = None, follow_symlinks: bool = True) -> bytes:
    """All bytes of the regular file ``path`` (at most its size when opened, so a file growing while
    it is read cannot make the read unbounded). Raises as :func:`open_regular`."""
    with open_regular(path, max_bytes, follow_symlinks) as (fh, size):
        return fh.read(size)


def atomic_write(path: str | os.PathLike, data: bytes | Callable[[BinaryIO], None]) -> None:
    """Write ``data`` (bytes, or a function writing to the open binary file) to a temporary file in
    ``path``'s folder, flush it, and rename it to ``path`` (atomic on POSIX). On any failure the
    temporary file is removed and a previous file at ``path`` is left as it was.

    Raises OSError when the folder cannot be written (and whatever ``data`` raises).
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            if callable(data):
                data(fh)
            else:
                fh.write(data)
            fh.flush()
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
