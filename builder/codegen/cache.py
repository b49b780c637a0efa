"""On-disk cache of compiled object code, keyed by content.

The key is the SHA-256 of the unoptimized LLVM IR text that :func:`builder.codegen.emit_llvm_ir`
produced, the target (triple, cpu, features, opt level), the LLVM and llvmlite versions and
:data:`CACHE_VERSION` -- everything that decides the object code. A second build of the same
model therefore skips LLVM's optimizer and code generator (the IR is still generated: it is
the key).

Location: ``$MB_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/model-builder/objects``, else
``~/.cache/model-builder/objects``; ``MB_CACHE=0`` turns the cache off. One file per entry,
``<key>.mbo``::

    b"MBOBJ1\\n" + header (JSON, one line: key, sizes, sha256 of the payload) + b"\\n"
    + object code + zlib(optimized LLVM IR)

Entries are written to a temporary file and renamed into place (atomic on POSIX), so
concurrent builds never see half-written entries. An entry that cannot be read, has the wrong
key or fails its checksum is ignored (and overwritten by the rebuild); a cache directory that
cannot be written is not an error.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
import zlib
from pathlib import Path

import llvmlite
import llvmlite.binding as llvm

__all__ = ["CACHE_VERSION", "cache_dir", "cache_key", "load", "store", "enabled"]

#: Bump when the code generator changes in a way the IR text does not show (it always
#: shows, today; this guards against runtime-ABI changes).
CACHE_VERSION = "2"   # 2: params carry "written" in the metadata
_MAGIC = b"MBOBJ1\n"


def enabled() -> bool:
    """False when ``MB_CACHE=0`` (or ``off`` / ``false``)."""
    return os.environ.get("MB_CACHE", "1").strip().lower() not in ("0", "off", "false", "no")


def cache_dir() -> Path:
    """The cache directory (see the module docstring); not created here."""
    env = os.environ.get("MB_CACHE_DIR", "").strip()
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "model-builder" / "objects"


def cache_key(ir_text: str, target: dict) -> str:
    """Hex SHA-256 over the IR text, the target and the tool versions."""
    h = hashlib.sha256()
    meta = {"v": CACHE_VERSION, "llvmlite": llvmlite.__version__,
            "llvm": list(llvm.llvm_version_info), "target": target}
    h.update(json.dumps(meta, sort_keys=True).encode())
    h.update(b"\0")
    h.update(ir_text.encode())
    return h.hexdigest()


def _path(key: str) -> Path:
    return cache_dir() / f"{key}.mbo"


def load(key: str) -> tuple[bytes, str] | None:
    """``(object_code, optimized_ir)`` of entry ``key``, or None when absent or damaged."""
    if not enabled():
        return None
    try:
        data = _path(key).read_bytes()
    except OSError:
        return None
    try:
        if not data.startswith(_MAGIC):
            return None
        end = data.index(b"\n", len(_MAGIC))
        header = json.loads(data[len(_MAGIC):end])
        payload = data[end + 1:]
        if header.get("key") != key or len(payload) != header["object"] + header["ir"]:
            return None
        if hashlib.sha256(payload).hexdigest() != header["sha256"]:
            return None
        obj = payload[:header["object"]]
        ir_text = zlib.decompress(payload[header["object"]:]).decode()
        return obj, ir_text
    except (ValueError, KeyError, TypeError, zlib.error, UnicodeDecodeError):
        return None


def store(key: str, object_code: bytes, ir_text: str) -> bool:
    """Write entry ``key``; returns False (silently) when the directory is not writable."""
    if not enabled():
        return False
    ir_z = zlib.compress(ir_text.encode(), 1)
    payload = bytes(object_code) + ir_z
    header = {"key": key, "object": len(object_code), "ir": len(ir_z),
              "sha256": hashlib.sha256(payload).hexdigest()}
    try:
        d = cache_dir()
        d.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".mbo", dir=d)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(_MAGIC + json.dumps(header).encode() + b"\n" + payload)
            os.replace(tmp, _path(key))
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        return True
    except OSError:
        return False
