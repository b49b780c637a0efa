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

A second, cheaper key skips the IR as well: :func:`input_key` hashes what the IR is made from (the
PrimFuncs' TVMScript text and structure tokens in the build's order, the target, the vector unit, the
code generator's tunables and testing hooks, and the source of the ``builder`` / ``runtime`` / ``core``
packages, so that any change of the code generator is a miss). Its entry, ``<input key>.mbi``::

    b"MBIDX1\n" + JSON (one line: input key, IR key, target, stats, the kernels' metadata)

points at the object entry of that IR key (:func:`store_index` / :func:`load_index`); a build whose
inputs were seen before loads the object without emitting any IR (:func:`builder.codegen.build`).

Entries are written to a temporary file and renamed into place (atomic on POSIX), so
concurrent builds never see half-written entries. An entry is used only when it is a regular file
(a FIFO, a device or a symlink to one is never opened for reading: ``O_NONBLOCK | O_NOFOLLOW`` and
an ``fstat`` check), at most :data:`MAX_ENTRY_BYTES`, with the right key and checksum, and when its
object code is what the entry must contain: a well-formed object (:func:`runtime.elf.read_object`)
whose manifest names the key it was compiled from and exactly the kernels being built, with their
signatures (:func:`runtime.native.check_manifest`). Any other entry is a miss, overwritten by the
rebuild; a cache directory that cannot be written is not an error.
"""
from __future__ import annotations

import hashlib
import json
import os
import stat
import zlib
from pathlib import Path

import llvmlite
import llvmlite.binding as llvm

from runtime.elf import read_object
from runtime.files import atomic_write, read_regular
from runtime.native import check_manifest

__all__ = ["CACHE_VERSION", "cache_dir", "cache_key", "load", "store", "enabled", "input_key", "load_index",
           "store_index", "source_digest"]

#: Bump when the code generator changes in a way the IR text does not show (it always
#: shows, today; this guards against runtime-ABI changes).
CACHE_VERSION = "3"   # 2: params carry "written" in the metadata; 3: large code model, manifest
_MAGIC = b"MBOBJ1\n"
_INDEX_MAGIC = b"MBIDX1\n"
#: The largest index entry read (bytes: the kernels' metadata of a large model is a few MB).
MAX_INDEX_BYTES = 64 << 20

#: The largest cache entry read (bytes); a bigger file is a miss.
MAX_ENTRY_BYTES = 1 << 30


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


def _path(key: str, suffix: str = ".mbo") -> Path:
    return cache_dir() / f"{key}{suffix}"


_SOURCE_DIGEST: str | None = None


def source_digest() -> str:
    """Hex SHA-256 over the ``.py`` files of the ``builder``, ``runtime`` and ``core`` packages (relative
    paths and contents, in path order), computed once per process (about 20 ms): the part of
    :func:`input_key` that stands for the code generator itself."""
    global _SOURCE_DIGEST
    if _SOURCE_DIGEST is None:
        root = Path(__file__).resolve().parents[2]
        h = hashlib.sha256()
        for package in ("builder", "runtime", "core"):
            for path in sorted((root / package).rglob("*.py")):
                h.update(path.relative_to(root).as_posix().encode() + b"\0")
                h.update(path.read_bytes() + b"\0")
        _SOURCE_DIGEST = h.hexdigest()
    return _SOURCE_DIGEST


def input_key(prim_funcs: dict, target: dict, settings: dict) -> str:
    """Hex SHA-256 of a build's inputs: ``prim_funcs`` (symbol -> PrimFunc, in order: each one's name,
    TVMScript text and :func:`.dedup.structural_key`), ``target`` (:meth:`Target.to_dict`), ``settings``
    (JSON-able: the vector unit, tunables and testing hooks that steer the code generator), the tool
    versions, :data:`CACHE_VERSION` and :func:`source_digest`. Equal inputs give equal IR, so the key
    may stand for the IR's own (:func:`cache_key`)."""
    from ..ir.tir.printer import script
    from .dedup import structural_key

    h = hashlib.sha256()
    meta = {"v": CACHE_VERSION, "llvmlite": llvmlite.__version__, "llvm": list(llvm.llvm_version_info),
            "target": target, "settings": settings, "source": source_digest()}
    h.update(json.dumps(meta, sort_keys=True, default=repr).encode())
    for name, func in prim_funcs.items():
        h.update(b"\0\0" + str(name).encode() + b"\0")
        h.update(script(func).encode() + b"\0")
        h.update(structural_key(func).encode())
    return h.hexdigest()


def load_index(key: str) -> dict | None:
    """The index entry of input key ``key`` (see the module docstring): a dict with ``ir_key`` (str),
    ``target`` (dict), ``stats`` (dict) and ``functions`` (symbol -> metadata dict); None when absent,
    damaged or of the wrong shape. The object entry it names is checked by :func:`load` as always."""
    if not enabled():
        return None
    try:
        data = read_regular(_path(key, ".mbi"), MAX_INDEX_BYTES, follow_symlinks=False)
    except (OSError, ValueError):
        return None
    try:
        if not data.startswith(_INDEX_MAGIC):
            return None
        entry = json.loads(data[len(_INDEX_MAGIC):])
        if not (isinstance(entry, dict) and entry.get("key") == key and isinstance(entry.get("ir_key"), str)
                and isinstance(entry.get("target"), dict) and isinstance(entry.get("stats"), dict)
                and isinstance(entry.get("functions"), dict)
                and all(isinstance(k, str) and isinstance(v, dict) for k, v in entry["functions"].items())):
            return None
        return entry
    except (ValueError, UnicodeDecodeError):
        return None


def store_index(key: str, ir_key: str, target: dict, stats: dict, functions: dict[str, dict]) -> bool:
    """Write the index entry of input key ``key`` pointing at object entry ``ir_key`` (as :func:`store`:
    0600, atomic, never through a link; False when the folder is not writable)."""
    if not enabled():
        return False
    entry = {"key": key, "ir_key": ir_key, "target": target, "stats": stats, "functions": functions}
    try:
        text = json.dumps(entry, separators=(",", ":"))
    except (TypeError, ValueError):   # metadata that JSON cannot hold: no index, the IR key still works
        return False
    try:
        d = cache_dir()
        d.mkdir(parents=True, exist_ok=True)
        _remove_junk(_path(key, ".mbi"))
        atomic_write(_path(key, ".mbi"), _INDEX_MAGIC + text.encode() + b"\n", follow_symlinks=False,
                     new_mode=0o600)
        return True
    except (OSError, ValueError):
        return False


def load(key: str, functions: dict[str, dict]) -> tuple[bytes, str] | None:
    """``(object_code, optimized_ir)`` of entry ``key`` when it holds object code for exactly the
    kernels ``functions`` (name -> ABI metadata) compiled from ``key``; None when absent, damaged or
    holding anything else (see the module docstring)."""
    if not enabled():
        return None
    try:
        data = read_regular(_path(key), MAX_ENTRY_BYTES, follow_symlinks=False)
    except (OSError, ValueError):
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
        check_manifest(read_object(obj), functions, source=key)
        inflate = zlib.decompressobj()
        ir_text = inflate.decompress(payload[header["object"]:], MAX_ENTRY_BYTES)
        if inflate.unconsumed_tail or not inflate.eof:
            return None
        ir_text = ir_text.decode()
        return obj, ir_text
    except (ValueError, KeyError, TypeError, AttributeError, zlib.error, UnicodeDecodeError):
        return None


def store(key: str, object_code: bytes, ir_text: str) -> bool:
    """Write entry ``key`` (mode 0600, private to the user). A symlink, FIFO, device or socket at the
    entry's name is removed first (a miss in the cache's own folder, replaced by the rebuild; a link is
    never written through); returns False (silently) when the directory is not writable or the name
    is a folder (left as it is)."""
    if not enabled():
        return False
    ir_z = zlib.compress(ir_text.encode(), 1)
    payload = bytes(object_code) + ir_z
    header = {"key": key, "object": len(object_code), "ir": len(ir_z),
              "sha256": hashlib.sha256(payload).hexdigest()}
    try:
        d = cache_dir()
        d.mkdir(parents=True, exist_ok=True)
        _remove_junk(_path(key))
        # the link itself, never its target, is replaced (an entry written through a planted link would land
        # outside the cache); 0600: entries hold the optimized IR of the user's models (their structure and
        # any folded constants) and are read only by the user's own builds, like the rest of ~/.cache
        atomic_write(_path(key), _MAGIC + json.dumps(header).encode() + b"\n" + payload,
                     follow_symlinks=False, new_mode=0o600)
        return True
    except (OSError, ValueError):   # not writable, or a folder (or a FIFO made since) at the entry's name
        return False


def _remove_junk(path: Path) -> None:
    """Unlink ``path`` when it is neither a regular file nor a folder (a symlink, FIFO, device or
    socket left in the cache): only its name goes, nothing is opened or followed. ``atomic_write``
    refuses to replace such files anywhere else; here they are the cache's own misses."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        os.unlink(path)
