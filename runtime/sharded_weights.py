"""A sharded safetensors checkpoint (``model.safetensors.index.json`` and its files, as Hugging Face
``save_pretrained(max_shard_size=...)`` writes them) read as one file: :class:`ShardedCheckpoint` has the
interface :func:`runtime.weights.load_params` reads a single file through (``infos``, ``read``,
``read_region``), so name maps, transforms, conversions, tensor-parallel shards and digests work the same.

The index is untrusted input: at most :data:`~core.limits.MAX_HF_INDEX_BYTES` bytes of JSON, naming at most
:data:`~core.limits.MAX_HF_SHARDS` files, each a plain file name in the index's folder (no path separators),
and every shard's header must agree with the index: a tensor in the index's ``weight_map`` that its file lacks,
a tensor of a file the index puts elsewhere or omits, or a tensor in two files is an error.
"""
from __future__ import annotations

import json
from collections import OrderedDict
from pathlib import Path

from core.limits import MAX_HF_INDEX_BYTES, MAX_HF_SHARDS

from .files import open_regular
from .weights import WeightsError, _Checkpoint

__all__ = ["INDEX_SUFFIX", "ShardedCheckpoint", "read_index"]

#: How the index file's name ends.
INDEX_SUFFIX = ".index.json"

_OPEN_FILES = 4     # shard files kept open at once (reads go mostly in file order)


def read_index(path: str | Path) -> dict[str, str]:
    """The ``weight_map`` of the index ``path``: tensor name -> shard file name. Raises WeightsError for a file
    that is not a regular file, too large, not JSON, without a ``weight_map`` of strings, naming too many files
    or a file name that is not a plain name in the index's folder."""
    path = Path(path)
    try:
        with open_regular(path, max_bytes=MAX_HF_INDEX_BYTES) as (fh, _):
            data = json.loads(fh.read(MAX_HF_INDEX_BYTES + 1).decode("utf-8"),
                              parse_constant=lambda c: (_ for _ in ()).throw(ValueError(f"{c} is not JSON")))
    except (OSError, ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise WeightsError(str(path), [f"cannot read the index: {str(exc)[:300]}"]) from None
    wmap = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(wmap, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in wmap.items()):
        raise WeightsError(str(path), ["expected a JSON object with a 'weight_map' of tensor name -> file name"])
    files = set(wmap.values())
    if len(files) > MAX_HF_SHARDS:
        raise WeightsError(str(path), [f"the index names {len(files)} files, more than the {MAX_HF_SHARDS} allowed"])
    bad = sorted(f for f in files if f in ("", ".", "..") or "/" in f or "\\" in f or "\0" in f)
    if bad:
        raise WeightsError(str(path), [f"shard file {bad[0]!r} is not a plain file name in the index's folder"])
    return wmap


class ShardedCheckpoint:
    """The files of the index ``path`` as one checkpoint: ``infos`` (name -> dtype and shape, index order),
    ``read(name, shard)`` / ``read_region(name, region)`` from the file holding ``name`` (at most a few files
    open at once). ``digests``: as :class:`runtime.weights._Checkpoint`'s, filled across the files. Use as a
    context manager. Raises WeightsError when the index and the files disagree (see the module docstring)."""

    def __init__(self, path: str | Path, digests: dict | None = None) -> None:
        self.path = str(path)
        self.digests = digests
        self.metadata: dict[str, str] = {}
        wmap = read_index(path)
        folder = Path(path).parent
        self._files = {f: folder / f for f in dict.fromkeys(wmap.values())}
        self._open: OrderedDict[str, _Checkpoint] = OrderedDict()
        self.infos: dict[str, dict] = {}
        self._where: dict[str, str] = {}
        problems = []
        for fname, fpath in self._files.items():
            with _Checkpoint(fpath) as ckpt:
                for name, info in ckpt.infos.items():
                    if wmap.get(name) != fname:
                        problems.append(f"{fname} holds {name!r}, which the index "
                                        + (f"puts in {wmap[name]}" if name in wmap else "does not name"))
                    elif name not in self.infos:
                        self.infos[name] = dict(info)
                        self._where[name] = fname
        problems += [f"the index puts {name!r} in {fname}, which has no such tensor" for name, fname in wmap.items()
                     if name not in self._where]
        if problems:
            raise WeightsError(self.path, problems[:20] + ([f"... and {len(problems) - 20} more"]
                                                           if len(problems) > 20 else []))

    def _file(self, name: str) -> _Checkpoint:
        fname = self._where[name]
        ckpt = self._open.pop(fname, None)
        if ckpt is None:
            ckpt = _Checkpoint(self._files[fname], self.digests)
            if len(self._open) >= _OPEN_FILES:
                self._open.popitem(last=False)[1].close()
        self._open[fname] = ckpt
        return ckpt

    def read(self, name: str, shard=None):
        """Tensor ``name`` (or its ``shard``) from its file (:meth:`runtime.weights._Checkpoint.read`)."""
        return self._file(name).read(name, shard)

    def read_region(self, name: str, region=None):
        """The part ``region`` of tensor ``name`` from its file (:meth:`runtime.weights._Checkpoint.read_region`)."""
        return self._file(name).read_region(name, region)

    def close(self) -> None:
        """Close every open file."""
        while self._open:
            self._open.popitem()[1].close()

    def __enter__(self) -> "ShardedCheckpoint":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
