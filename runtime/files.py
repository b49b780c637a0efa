"""Reading and writing files that may be damaged, hostile or shared: regular files only, bounded
reads, atomic writes.

A path from a user or a cache may name a FIFO (opening it for reading blocks until a writer comes), a
device (``/dev/zero`` reads without end), a directory or a symlink to any of these. Every file the
project reads whole goes through :func:`open_regular` / :func:`read_regular`, and every file it
writes through :func:`atomic_write`, so that a crash or a full disk mid-write never leaves a
half-written file under the final name.

What a write replaces (:func:`atomic_write`): a regular file or a new name. A symlink is followed to
the regular file it resolves to, which is replaced while the link stays (as shell redirection and
``cp`` write through a link); a dangling symlink is refused (as GNU ``cp`` refuses), and so are
directories, FIFOs, devices, sockets and links to them, before anything is written. New files get
``0o666`` less the umask, as ``open()`` gives; a replaced file keeps its mode and, where possible,
its owner.
"""
from __future__ import annotations

import os
import secrets
import stat
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Callable, Iterator

__all__ = ["open_regular", "read_regular", "atomic_write", "check_writable", "NotRegularFileError"]


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


def _write_target(path: str | os.PathLike, follow_symlinks: bool = True) -> tuple[Path, os.stat_result | None]:
    """The file :func:`atomic_write` would replace for ``path``, and its ``stat`` (None when there is no
    file yet, i.e. a new name). Nothing is opened: a FIFO or a device is only ``lstat``-ed / ``stat``-ed.

    - nothing at ``path``: ``(path, None)``, a new file;
    - a regular file: ``(path, its stat)``;
    - a symlink, with ``follow_symlinks``: the file the link resolves to (every link in a chain
      followed, :func:`os.path.realpath`), which must be a regular file; the link itself stays. A
      dangling link (its target does not exist) is refused, as GNU ``cp`` refuses "writing through a
      dangling symlink": creating a file where a link points is how a link planted in a shared
      folder makes someone else's write land where its author chose;
    - a symlink, without ``follow_symlinks``: ``(path, None)``: the link itself is replaced by a new
      file (the object cache's entries, which must never write outside the cache);
    - anything else (a directory, a FIFO, a character or block device, a socket, or a link to one):
      :class:`NotRegularFileError` naming the path (and the link's target) and what it is.

    Raises OSError from ``lstat`` / ``stat`` other than "not found" (a permission error, a symlink loop:
    ``ELOOP``).
    """
    path = Path(path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return path, None
    if stat.S_ISLNK(st.st_mode):
        if not follow_symlinks:
            return path, None
        target = Path(os.path.realpath(path))
        try:
            st = os.stat(target)
        except FileNotFoundError:
            raise NotRegularFileError(f"{os.fspath(path)} is a dangling symlink (to {os.fspath(target)}, which does "
                                      "not exist): not writing through it (remove the link, or create its target "
                                      "first)") from None
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFileError(f"{os.fspath(path)} is a symlink to {os.fspath(target)}, which is "
                                      f"{_kind(st.st_mode)}: only regular files are written (refusing to replace it)")
        return target, st
    if not stat.S_ISREG(st.st_mode):
        raise NotRegularFileError(f"{os.fspath(path)} is {_kind(st.st_mode)}, not a regular file: only regular "
                                  "files are written (refusing to replace it)")
    return path, st


def check_writable(path: str | os.PathLike, follow_symlinks: bool = True) -> None:
    """Raise what :func:`atomic_write` would raise about ``path`` itself before writing a byte
    (:class:`NotRegularFileError` for a directory, a FIFO, a device, a socket, a dangling symlink or a
    symlink to any of these; OSError for a symlink loop), so that a command can refuse a bad output
    path before hours of work. The folder's writability is not checked (it may change)."""
    _write_target(path, follow_symlinks)


def atomic_write(path: str | os.PathLike, data: bytes | Callable[[BinaryIO], None], *,
                 follow_symlinks: bool = True, new_mode: int = 0o666) -> None:
    """Write ``data`` (bytes, or a function writing to the open binary file) to a temporary file
    beside the file being replaced, flush it, and rename it over that file (atomic on POSIX,
    ``rename(2)``). On any failure the temporary file is removed and a previous file is left as it was.

    What is replaced (:func:`_write_target`): a regular file at ``path``, or a new name; a symlink is
    followed (the file it resolves to is replaced and the link kept, as shell redirection and ``cp``
    write through a link) unless ``follow_symlinks`` is False, when the link itself is replaced. A
    directory, FIFO, device, socket, dangling symlink or symlink to one of these is refused before
    anything is created: replacing ``/dev/null`` with a regular file as root, or blocking on a FIFO,
    is never what a user means.

    Permissions, as ``open(path, "w")`` would leave them: a new file gets ``new_mode`` (default
    ``0o666``) less the umask (the kernel applies the umask and a default ACL of the folder at
    ``open(O_CREAT)``: ``0o644`` under umask 022, ``0o600`` under 077); an existing file keeps its
    mode and, where the process may set it, its owner and group (``fchown``; set-user/group-ID bits
    are kept only when the owner was). The new file is a new inode: extra hard links to the old one
    keep the old contents, and extended attributes / access ACLs are not copied.

    Raises :class:`NotRegularFileError` (a ValueError) for a target that is not a regular file or a new
    name, OSError when the folder cannot be written or a symlink cannot be resolved (and whatever
    ``data`` raises).
    """
    target, st = _write_target(path, follow_symlinks)
    folder = target.parent
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    for _ in range(100):
        tmp = folder / f".{target.name}.{secrets.token_hex(6)}.tmp"
        try:
            fd = os.open(tmp, flags, (new_mode & 0o777) if st is None else 0o600)
            break
        except FileExistsError:
            continue
    else:
        raise FileExistsError(f"no free temporary name beside {os.fspath(target)}")
    try:
        if st is not None:
            _keep_mode(fd, st)
        with os.fdopen(fd, "wb") as fh:
            if callable(data):
                data(fh)
            else:
                fh.write(data)
            fh.flush()
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _keep_mode(fd: int, st: os.stat_result) -> None:
    """Give the open file ``fd`` the owner, group and mode of ``st`` (the file it replaces), as far
    as this process may: owner and group, else the group alone, else neither; the mode after (a
    ``chown`` clears set-ID bits), without set-user/group-ID when the owner could not be kept."""
    kept_owner = st.st_uid == os.geteuid()
    for uid, gid in ((st.st_uid, st.st_gid), (-1, st.st_gid)):
        try:
            os.fchown(fd, uid, gid)
            kept_owner = kept_owner or uid != -1
            break
        except (OSError, AttributeError):
            continue
    mode = stat.S_IMODE(st.st_mode)
    if not kept_owner:
        mode &= ~(stat.S_ISUID | stat.S_ISGID)
    os.fchmod(fd, mode)
