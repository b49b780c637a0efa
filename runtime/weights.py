"""Weights in and out of safetensors files, with name maps, conversion hooks and strict accounting.

``load_params(path, expected, prefix="", name_map=None, conversions=None, ignore=())`` reads the
tensors a model expects. Each parameter ``name`` is looked up in the file under the name the
``name_map`` rules give it (:class:`NameRules`), else ``prefix + name``. Loading is strict: every
missing parameter, every unexpected tensor (a tensor under ``prefix`` that no parameter uses and no
``ignore`` glob matches) and every shape or dtype mismatch is listed in one :class:`WeightsError`.
Tensors outside ``prefix`` belong to other parts of a checkpoint and are not looked at.

Name rules (``name_map``: our name -> the file's name): exact renames, ``{placeholder}`` patterns and
prefix rules, the most specific winning; the grammar, its bounds and :class:`NameRules` are
:mod:`core.weight_names` (the recipe schema validates ``weights.map`` with the same functions). A rule
that matches no parameter is an error (a typo would otherwise leave its parameters on ``prefix``).

``ignore`` holds :func:`fnmatch.fnmatchcase` globs over the file's tensor names (``pooler.*``:
``*`` matches dots too): a tensor no parameter uses is an error unless one of them matches it.
A glob that matches no tensor of the file is a :class:`WeightsWarning`, not an error: checkpoints
of the same model differ in such leftovers (newer ``transformers`` no longer save
``embeddings.position_ids``), and a misspelt glob hides nothing, since the tensor it meant is then
reported as unexpected. Ignoring only excuses unused tensors: a tensor a parameter uses is loaded
(and checked) whether a glob matches it or not.

Conversions (the hook a recipe's quantization / dtype transform uses): ``conversions`` maps a
*source* name (a floating-point tensor of the untransformed model, looked up by the same rule)
to a :class:`ParamConversion`: the parameters it becomes and a function computing them from its
float32 values. A parameter that is in the file with exactly the expected shape and dtype is
loaded directly (so saved transformed parameters load back without conversion); otherwise, when
a conversion produces it and its source is in the file, the source is read, widened to float32
and converted. A floating-point parameter found with the expected shape but another float dtype
(a bfloat16 checkpoint for a float32 model) is cast on load: widened exactly, narrowed with
round-to-nearest-even, as ``torch.Tensor.to`` / MLC's weight conversion do. Integer tensors
must match exactly. bfloat16 tensors are uint16 bit patterns in memory (numpy has no bfloat16)
and ``BF16`` in files.

Transforms (``transforms``, a recipe's ``weights.transforms``: :mod:`core.weight_transforms`): the file's
tensors transposed, split, sliced, reshaped or concatenated before names are bound, planned from the header
(every shape checked against the parameters before any data is read) and applied as each tensor is read,
before casts, conversions (quantization) and shards. A tensor a transform consumes counts as used; one it
makes that no parameter uses is reported with the transform that made it.

Shards (tensor parallelism): ``shards`` maps a parameter or conversion-source name to a
:class:`TensorShard`; the file holds the full tensor and only this worker's slice is read from it
(contiguous runs read one by one, so a worker's memory holds its shard, never the whole tensor),
then cast or converted like any other tensor: a quantized tensor-parallel model quantizes each
worker's shard.

Digests (``digests``, what tensor-parallel workers compare, :func:`loaded_weights_digest`): every
tensor read is hashed whole, SHA-256 over all of its bytes in the file, even when only a shard of it
is kept: the whole byte range is streamed once in blocks of at most 16 MiB, each block hashed and the
shard's runs copied out of it, so the digest costs one read of the tensor and no more memory than a
block (a tensor that ``transforms`` read in several parts, a split's, is streamed once per part: the
digest costs one read of it per part). The shards of the workers are disjoint, so a digest of only
what a worker keeps could be compared with nothing on the other workers: two checkpoints of the same shapes (the same header but
perhaps the offsets) that differ only inside one worker's slice would go unnoticed, and so would a
header or a sample of chunks. Whole-tensor digests are the same on every worker that loads the same
tensors, and differ wherever any value a worker could have used differs.
"""
from __future__ import annotations

import difflib
import fnmatch
import hashlib
import json
import os
import re
import struct
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np

from core.dtypes import bfloat16_bits_to_float32, float32_to_bfloat16_bits
from core.layout import tile_rows, untile_rows
from core.limits import MAX_WEIGHT_IGNORE, MAX_WEIGHT_NAME_CHARS
from core.messages import shorten
from core.weight_names import NameRules, check_name_rule
from core.weight_transforms import LAYOUTS, FileNode, Transform, layout_problems, parse_transforms, plan_transforms

from .files import atomic_write, open_regular
from .memory import move_to_huge_pages

__all__ = ["WeightsError", "WeightsWarning", "ParamConversion", "TensorShard", "NameRules", "load_params", "save_params",
           "tile_rows", "untile_rows", "loaded_weights_digest",
           "read_safetensors_header", "check_name_rule"]


def _quoted(name: str) -> str:
    """A tensor name, rule or glob quoted for a message (``repr``, :func:`core.messages.shorten`): one longer
    than about 80 characters is cut to its start and end with its length (``'aaaa...aaaa' (100,002
    characters)``), so that a file's 100,000-character name cannot flood the error; control characters
    come out escaped."""
    return shorten(name, 80)


class WeightsError(ValueError):
    """One error listing every problem found while binding weights (``.problems``)."""

    def __init__(self, path: str, problems: Sequence[str]) -> None:
        self.path = path
        self.problems = list(problems)
        super().__init__(f"{path}: {len(self.problems)} problem(s) loading weights:\n"
                         + "\n".join(f"  - {p}" for p in self.problems))


@dataclass(frozen=True)
class ParamConversion:
    """How one floating-point source tensor of shape ``shape`` becomes the parameters ``targets``:
    ``func(float32 array) -> arrays`` (one per target, in order)."""

    targets: tuple[str, ...]
    func: Callable[[np.ndarray], Sequence[np.ndarray]]
    shape: tuple


@dataclass(frozen=True)
class TensorShard:
    """Part ``index`` of ``count`` equal, contiguous slices of a tensor along axis ``dim``: a worker's
    piece of a tensor-parallel parameter (rows of a column-parallel weight: ``dim=0``; columns of a
    row-parallel one: ``dim=1``). Raises ValueError for ``count < 1``, ``index`` outside
    ``[0, count)`` or a negative ``dim``."""

    dim: int
    index: int
    count: int

    def __post_init__(self) -> None:
        if self.count < 1 or not 0 <= self.index < self.count or self.dim < 0:
            raise ValueError(f"invalid shard {self.index} of {self.count} along dim {self.dim}")

    def full_shape(self, shape: Sequence[int]) -> tuple[int, ...]:
        """The whole tensor's shape, given the shard's ``shape``. Raises ValueError when ``dim`` is not
        an axis of it."""
        shape = tuple(int(d) for d in shape)
        if self.dim >= len(shape):
            raise ValueError(f"shard dim {self.dim} is not an axis of shape {shape}")
        return shape[:self.dim] + (shape[self.dim] * self.count,) + shape[self.dim + 1:]

    def take(self, full: np.ndarray) -> np.ndarray:
        """This shard of the whole tensor ``full``, as a new C-contiguous array. Raises ValueError when
        ``full``'s axis ``dim`` does not split into ``count`` equal parts."""
        if self.dim >= full.ndim or full.shape[self.dim] % self.count:
            raise ValueError(f"a tensor of shape {full.shape} does not split into {self.count} parts along "
                             f"dim {self.dim}")
        size = full.shape[self.dim] // self.count
        index = [slice(None)] * full.ndim
        index[self.dim] = slice(self.index * size, (self.index + 1) * size)
        return np.ascontiguousarray(full[tuple(index)])


class WeightsWarning(UserWarning):
    """Something odd but harmless about a weights binding (an ``ignore`` glob that matches no tensor)."""



def _ignore_globs(ignore: Sequence[str]) -> list[tuple[str, "re.Pattern[str]"]]:
    """``ignore`` checked and compiled (fnmatch escapes everything but its wildcards). Raises ValueError."""
    ignore = list(ignore or ())
    problems = []
    if len(ignore) > MAX_WEIGHT_IGNORE:
        raise ValueError(f"{len(ignore)} ignore patterns, more than the {MAX_WEIGHT_IGNORE} allowed")
    out = []
    for glob in ignore:
        if not isinstance(glob, str) or not glob:
            problems.append(f"ignore pattern {glob!r} must be a non-empty string")
        elif len(glob) > MAX_WEIGHT_NAME_CHARS:
            problems.append(f"ignore pattern {glob[:80]!r}... is {len(glob)} characters long, more than the "
                            f"{MAX_WEIGHT_NAME_CHARS} allowed")
        else:
            out.append((glob, re.compile(fnmatch.translate(glob))))
    if problems:
        raise ValueError("invalid weights ignore patterns:\n" + "\n".join(f"  - {p}" for p in problems))
    return out


_ST_DTYPES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64",
              "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "U16": "uint16",
              "U32": "uint32", "U64": "uint64", "BOOL": "bool"}
_OUR_TO_ST = {v: k for k, v in _ST_DTYPES.items()}
_FLOATS = ("float16", "bfloat16", "float32", "float64")


class _Checkpoint:
    """A safetensors file opened for reading: the ``safetensors`` library validates it (header
    syntax and size, dtypes, shapes, offsets contiguous from 0 and ending exactly at the end of the
    file, shape x dtype size = bytes), then single tensors are read from the validated layout.

    ``infos``: name -> ``{"dtype": our name (or the file's for dtypes we do not know), "shape": list}``;
    ``metadata``: the ``__metadata__`` string map. Use as a context manager. Raises WeightsError for
    a path that is not a regular file or a file the library refuses.
    """

    def __init__(self, path: str | Path, digests: dict | None = None) -> None:
        from safetensors import SafetensorError, safe_open

        self.path = str(path)
        self.digests = digests      # file name -> (dtype, shape, SHA-256 hex of the whole tensor): see read()
        self._ctx = open_regular(path)
        try:
            self._fh, size = self._ctx.__enter__()
        except (OSError, ValueError) as exc:
            raise WeightsError(self.path, [f"cannot open it: {exc}"]) from None
        try:
            fd_path = f"/proc/self/fd/{self._fh.fileno()}"   # the file we checked, not whatever the path names now
            with safe_open(fd_path if os.path.exists(fd_path) else self.path, framework="numpy") as st:
                names = list(st.offset_keys())
                self.metadata = {str(k): str(v) for k, v in (st.metadata() or {}).items()}
                self.infos = {}
                for name in names:
                    sl = st.get_slice(name)
                    self.infos[name] = {"dtype": _ST_DTYPES.get(sl.get_dtype(), sl.get_dtype()),
                                        "shape": [int(d) for d in sl.get_shape()]}
        except (SafetensorError, OSError, ValueError, TypeError, RecursionError) as exc:
            self.close()
            message = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
            if "not fully covered" in message:
                message += " (the file is truncated, or has bytes after its last tensor)"
            raise WeightsError(self.path, [f"not a valid safetensors file: {message}"]) from None
        header_len = struct.unpack("<Q", self._read(0, 8))[0]
        self._offsets: dict[str, tuple[int, int]] = {}
        pos = 8 + header_len
        for name in names:      # the library checked: contiguous, in this order, sizes from dtype x shape
            info = self.infos[name]
            nbytes = _nbytes(info) if info["dtype"] in _ITEMSIZE else None
            self._offsets[name] = (pos, nbytes)
            if nbytes is None:   # a dtype we cannot read: nothing after it is located
                break
            pos += nbytes
        if pos > size:
            self.close()
            raise WeightsError(self.path, ["not a valid safetensors file: tensors run past its end"])

    def _read(self, start: int, nbytes: int) -> bytes:
        self._fh.seek(start)
        data = self._fh.read(nbytes)
        if len(data) != nbytes:
            raise WeightsError(self.path, [f"the file ended after {start + len(data)} bytes, while reading "
                                           f"{nbytes} bytes at {start}: it changed while it was read"])
        return data

    def read(self, name: str, shard: TensorShard | None = None) -> np.ndarray:
        """Tensor ``name`` (or only its ``shard``) as a new C-contiguous array (bfloat16 as uint16 bits).
        With :attr:`digests` (a dict), ``digests[name]`` becomes ``(dtype, shape, SHA-256 hex of all the
        tensor's bytes in the file)``, for a shard too (:meth:`_read_shard_hashing`)."""
        region = None
        if shard is not None:
            shape = self.infos[name]["shape"]
            if shard.dim >= len(shape) or shape[shard.dim] % shard.count:
                raise ValueError(f"{_quoted(name)} of shape {tuple(shape)} does not split into {shard.count} parts "
                                 f"along dim {shard.dim}")
            size = shape[shard.dim] // shard.count
            region = (shard.dim, shard.index * size, (shard.index + 1) * size)
        return self.read_region(name, region)

    def read_region(self, name: str, region: tuple[int, int, int] | None = None) -> np.ndarray:
        """Tensor ``name``, or (``region = (dim, lo, hi)``) only its part ``[lo, hi)`` along ``dim``, as
        :meth:`read` (the part read in runs, the digest over the whole tensor). Raises ValueError for a
        region outside the tensor."""
        info = self.infos[name]
        start, nbytes = self._offsets.get(name, (0, None))
        if nbytes is None:
            raise WeightsError(self.path, [f"{_quoted(name)} has dtype {info['dtype']}, which cannot be read"])
        dtype = np.dtype(np.uint16 if info["dtype"] == "bfloat16" else info["dtype"])
        if region is not None:
            dim, lo, hi = region
            if not (0 <= dim < len(info["shape"]) and 0 <= lo < hi <= info["shape"][dim]):
                raise ValueError(f"{_quoted(name)} of shape {tuple(info['shape'])} has no part [{lo}, {hi}) "
                                 f"along dim {dim}")
            if self.digests is None:
                return self._read_shard(start, info["shape"], dtype, dim, lo, hi - lo)
            hasher = hashlib.sha256()
            out = self._read_shard_hashing(start, info["shape"], dtype, dim, lo, hi - lo, hasher)
        else:
            data = self._read(start, nbytes)
            if self.digests is not None:
                hasher = hashlib.sha256(data)
            out = np.frombuffer(data, dtype=dtype.newbyteorder("<")).astype(dtype, copy=True).reshape(info["shape"])
        if self.digests is not None:
            self.digests[name] = (info["dtype"], tuple(info["shape"]), hasher.hexdigest())
        return out

    _SHARD_BLOCK_BYTES = 16 << 20

    def _read_shard(self, start: int, shape: Sequence[int], dtype: np.dtype, dim: int, lo: int,
                    local: int) -> np.ndarray:
        """The part ``[lo, lo + local)`` along ``dim`` (a shard) of the row-major tensor of ``shape`` at byte
        ``start``: ``outer = prod(shape[:dim])``
        runs of ``run`` contiguous bytes, one every ``stride`` bytes. Short runs are read in blocks of
        whole strides of at most 16 MiB (then sliced), long ones one by one: memory stays bounded by the
        shard plus one block."""
        shape = [int(d) for d in shape]
        inner = int(np.prod(shape[dim + 1:], dtype=np.int64)) * dtype.itemsize
        outer = int(np.prod(shape[:dim], dtype=np.int64))
        run, stride = local * inner, shape[dim] * inner
        first = start + lo * inner
        out = np.empty(outer * run, dtype=np.uint8)
        rows = max(1, min(outer, self._SHARD_BLOCK_BYTES // max(stride, 1))) if run * 4 < stride else 1
        for i in range(0, outer, rows):
            n = min(rows, outer - i)
            if n == 1:
                out[i * run:(i + 1) * run] = np.frombuffer(self._read(first + i * stride, run), np.uint8)
            else:
                block = np.frombuffer(self._read(first + i * stride, (n - 1) * stride + run), np.uint8)
                out[i * run:(i + n) * run] = np.lib.stride_tricks.as_strided(
                    block, (n, run), (stride, 1)).reshape(-1)
        local_shape = shape[:dim] + [local] + shape[dim + 1:]
        return out.view(dtype.newbyteorder("<")).astype(dtype, copy=False).reshape(local_shape)

    def _read_shard_hashing(self, start: int, shape: Sequence[int], dtype: np.dtype, dim: int, lo: int,
                            local: int, hasher) -> np.ndarray:
        """:meth:`_read_shard`'s result, reading the whole tensor once in order and feeding every byte to
        ``hasher`` (a ``hashlib`` object): blocks of whole strides of at most 16 MiB (a stride longer than
        that in pieces of 16 MiB), the shard's run copied out of each. Memory: the shard plus one block."""
        shape = [int(d) for d in shape]
        inner = int(np.prod(shape[dim + 1:], dtype=np.int64)) * dtype.itemsize
        outer = int(np.prod(shape[:dim], dtype=np.int64))
        run, stride = local * inner, shape[dim] * inner
        lo = lo * inner
        out = np.empty(outer * run, dtype=np.uint8)
        block_bytes = self._SHARD_BLOCK_BYTES
        if stride <= block_bytes:
            rows = max(1, block_bytes // max(stride, 1))
            for i in range(0, outer, rows):
                n = min(rows, outer - i)
                block = np.frombuffer(self._read(start + i * stride, n * stride), np.uint8)
                hasher.update(block)
                out[i * run:(i + n) * run] = block.reshape(n, stride)[:, lo:lo + run].reshape(-1)
        else:
            for i in range(outer):
                row = start + i * stride
                for a in range(0, stride, block_bytes):
                    b = min(stride, a + block_bytes)
                    piece = self._read(row + a, b - a)
                    hasher.update(piece)
                    x, y = max(a, lo), min(b, lo + run)
                    if x < y:
                        out[i * run + x - lo:i * run + y - lo] = np.frombuffer(piece, np.uint8)[x - a:y - a]
        local_shape = shape[:dim] + [local] + shape[dim + 1:]
        return out.view(dtype.newbyteorder("<")).astype(dtype, copy=False).reshape(local_shape)

    def close(self) -> None:
        """Close the file."""
        if self._ctx is not None:
            self._ctx.__exit__(None, None, None)
            self._ctx = None

    def __enter__(self) -> "_Checkpoint":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


_ITEMSIZE = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4, "int16": 2,
             "int8": 1, "uint8": 1, "uint16": 2, "uint32": 4, "uint64": 8, "bool": 1}


def _nbytes(info: dict) -> int:
    n = _ITEMSIZE[info["dtype"]]
    for d in info["shape"]:
        n *= d
    return n


def _open_checkpoint(path: str | Path, digests: dict | None = None):
    """A safetensors file, or the files of a sharded checkpoint's ``*.index.json``
    (:class:`runtime.sharded_weights.ShardedCheckpoint`), opened for reading."""
    if str(path).endswith(".index.json"):
        from .sharded_weights import ShardedCheckpoint

        return ShardedCheckpoint(path, digests)
    return _Checkpoint(path, digests)


def read_safetensors_header(path: str | Path) -> dict[str, dict]:
    """``{name: {"dtype": str (our spelling), "shape": [..]}}`` of a safetensors file, in file order (of all
    the files of a sharded checkpoint's ``*.index.json``).

    Raises WeightsError for a file that is not valid safetensors (as the ``safetensors`` library
    judges it) or not a regular file.
    """
    with _open_checkpoint(path) as ckpt:
        return {name: dict(info) for name, info in ckpt.infos.items()}


def read_safetensors_metadata(path: str | Path) -> dict[str, str]:
    """The ``__metadata__`` string map of a safetensors file (empty when it has none). Raises
    WeightsError as :func:`read_safetensors_header`."""
    with _Checkpoint(path) as ckpt:
        return dict(ckpt.metadata)


def load_params(path: str | Path, expected: Mapping[str, tuple[Sequence[int], str]], prefix: str = "",
                name_map: Mapping[str, str] | None = None,
                conversions: Mapping[str, ParamConversion] | None = None,
                progress: Callable[[int, int, str], None] | None = None,
                ignore: Sequence[str] = (), shards: Mapping[str, TensorShard] | None = None,
                row_tiles: Mapping[str, int] | None = None, digests: dict | None = None,
                transforms: Sequence[Mapping] | None = None,
                layout: Mapping[str, str] | None = None,
                where: Mapping[str, str] | None = None) -> dict[str, np.ndarray]:
    """Load the parameters ``expected`` (name -> (shape, dtype)) from safetensors ``path`` (or the files of a
    sharded checkpoint whose ``model.safetensors.index.json`` ``path`` is: :mod:`runtime.sharded_weights`).

    ``name_map`` (our name -> the file's name: exact entries, ``{placeholder}`` patterns, prefix
    rules) and ``prefix`` say where each parameter is in the file; ``ignore`` lists globs of file
    tensors that may stay unused (see the module docstring). ``conversions``: source name ->
    :class:`ParamConversion` (see the module docstring), its source looked up by the same rules; a
    source must be a floating-point tensor of the conversion's shape (any float dtype).
    ``progress(done, total, source_name)`` is called with ``done=0`` before the first conversion and
    after each one. ``shards``: parameter or conversion-source name -> :class:`TensorShard`: the file
    holds the whole tensor (its shape is the expected one with the shard's axis ``count`` times longer)
    and only the shard is read. ``row_tiles``: parameter name -> ``T`` for the packed words and
    scales of quantized weights stored in row tiles ((rows / T, cols, T), :func:`tile_rows`): the
    file may hold them as (rows, cols) in the same dtype (a checkpoint in MLC-LLM's layout, or
    parameters saved before the tiles), tiled when read. ``digests``: a dict to fill with file name ->
    ``(dtype, shape, SHA-256 hex of the whole tensor's bytes)`` for every tensor read, shards included
    (the module docstring says why whole tensors; :func:`loaded_weights_digest` combines them).
    ``transforms``: the recipe's ``weights.transforms`` entries (mappings, :mod:`core.weight_transforms`):
    the file's table of tensors as they rewrite it is what the names bind to, checked against ``expected``
    before any data is read; a shard of a transformed tensor reads only its part of the inputs where the
    transform allows it (all but ``reshape``, which reads its input whole). ``layout``: the recipe's
    ``weights.layout`` (glob -> ``in_out`` / ``out_in``, :func:`core.weight_transforms.layout_problems`):
    every ``in_out`` tensor must be transposed by a transform on its way to a parameter, no ``out_in`` one.
    ``where``: recipe field -> its place (``{"weights.transforms.0": "r.yaml:12:7", "weights.layout.GLOB":
    ...}``), named in the messages of those transforms and layout globs.

    Returns name -> numpy array (C-contiguous; loaded directly: the file's exact values; floats of
    another float dtype cast; converted ones as their conversion gives them), moved into memory
    backed by huge pages where Linux offers them (:func:`runtime.memory.move_to_huge_pages`).
    Raises ValueError for an invalid ``name_map`` / ``ignore`` / ``transforms`` (before opening the file);
    WeightsError listing every missing / unexpected / mismatched tensor, naming the file's side and
    the parameter's side of each mismatch, every name-map entry that matches no parameter and every
    parameter two rules disagree on. Warns :class:`WeightsWarning` for an ``ignore`` glob that
    matches no tensor of the file.
    """
    path = str(path)
    rules = NameRules(name_map, prefix)
    globs = _ignore_globs(ignore)
    where = dict(where or {})
    parsed = parse_transforms(transforms, [where.get(f"weights.transforms.{i}", "")
                                           for i in range(len(transforms or ()))])
    layout = dict(layout or {})
    bad = [f"weights.layout {_quoted(str(g))}: {k!r} is not one of {', '.join(LAYOUTS)}" for g, k in layout.items()
           if k not in LAYOUTS]
    if bad:
        raise ValueError("invalid weights layout:\n" + "\n".join(f"  - {p}" for p in bad))
    layout_globs = _ignore_globs(list(layout))
    with _open_checkpoint(path, digests) as ckpt:
        return _load(ckpt, expected, rules, globs, conversions, progress, dict(shards or {}),
                     dict(row_tiles or {}), parsed, [(g, rx, layout[g]) for g, rx in layout_globs],
                     {g: where.get(f"weights.layout.{g}", "") for g in layout})


def _load(ckpt: _Checkpoint, expected, rules: NameRules, globs, conversions, progress,
          shards: dict[str, TensorShard], row_tiles: dict[str, int],
          transforms: Sequence[Transform] = (), layout: Sequence[tuple] = (),
          layout_where: Mapping[str, str] | None = None) -> dict[str, np.ndarray]:
    path, header = ckpt.path, ckpt.infos
    prefix = rules.prefix
    conversions = dict(conversions or {})
    problems: list[str] = []
    nodes: dict = {}
    failed: set[str] = set()     # outputs of transforms that failed (reported once, by the transform)
    if transforms or layout:      # the table the transforms leave, planned from the header alone
        nodes, problems = plan_transforms(transforms, header, failed)
        if layout:
            kinds = {glob: kind for glob, _, kind in layout}
            regexes = {glob: rx for glob, rx, _ in layout}
            problems += layout_problems(nodes, kinds, header, lambda name, glob: regexes[glob].match(name),
                                        layout_where)
        header = {name: {"dtype": node.dtype, "shape": list(node.shape)} for name, node in nodes.items()}

    def what(key: str) -> str:
        """A tensor name for a message, with the transform that made it."""
        node = nodes.get(key)
        return _quoted(key) + (node.origin if node is not None else "")

    def read(key: str, shard: TensorShard | None) -> np.ndarray:
        node = nodes.get(key)
        if node is None or isinstance(node, FileNode):
            return ckpt.read(key, shard)
        region = None
        if shard is not None:
            size = node.shape[shard.dim] // shard.count
            region = (shard.dim, shard.index * size, (shard.index + 1) * size)
        return node.read(region, ckpt.read_region)

    def file_shape(name: str, shape) -> tuple:
        """The shape tensor ``name`` has in the file: the whole tensor of a shard."""
        shape = tuple(int(d) for d in shape)
        return shards[name].full_shape(shape) if name in shards else shape

    producer = {t: src for src, conv in conversions.items() for t in conv.targets}

    keys: dict[str, str] = {}
    for name in [*expected, *conversions]:
        if name not in keys:
            keys[name], _, problem = rules.resolve(name)
            if problem:
                problems.append(problem)

    def key_of(name: str) -> str:
        return keys[name]

    direct: dict[str, str] = {}      # parameter -> file key
    tiled: dict[str, str] = {}       # parameter -> file key of its rows, to be tiled (row_tiles)
    cast: dict[str, str] = {}        # parameter -> file key of another float dtype
    convert: dict[str, str] = {}     # source name -> file key
    claimed: set[str] = set()
    hints = 0
    for name, (shape, dtype) in expected.items():
        key = key_of(name)
        shape = file_shape(name, shape)
        info = header.get(key)
        if info is not None and tuple(info["shape"]) == shape and info["dtype"] == dtype:
            direct[name] = key
            claimed.add(key)
            continue
        tile = row_tiles.get(name, 0)
        if (tile and info is not None and len(shape) == 3 and shape[2] == tile and info["dtype"] == dtype
                and tuple(info["shape"]) == (shape[0] * tile, shape[1])):
            tiled[name] = key
            claimed.add(key)
            continue
        src = producer.get(name)
        if src is not None and key_of(src) in header:
            skey = key_of(src)
            sinfo = header[skey]
            claimed.add(skey)
            if info is not None:
                claimed.add(key)
            if src in convert:
                continue
            want = file_shape(src, conversions[src].shape)
            bad = []
            if tuple(sinfo["shape"]) != want:
                bad.append(f"{what(skey)} has shape {tuple(sinfo['shape'])}, parameter {_quoted(src)} (converted into "
                           f"{', '.join(conversions[src].targets)}) expects {want}")
            if sinfo["dtype"] not in _FLOATS:
                bad.append(f"{what(skey)} has dtype {sinfo['dtype']}, parameter {_quoted(src)} (converted into "
                           f"{', '.join(conversions[src].targets)}) expects a floating-point tensor")
            problems.extend(bad)
            if not bad:
                convert[src] = skey
            continue
        if (info is not None and tuple(info["shape"]) == shape and info["dtype"] in _FLOATS
                and dtype in _FLOATS):
            cast[name] = key
            claimed.add(key)
            continue
        if info is None and key in failed:
            continue
        if info is None:
            hint = ""
            hints += 1
            if hints <= 20:     # the nearest names with the same last segment (bounded work)
                last = key.rsplit(".", 1)[-1]
                pool = [k for k in header if k.rsplit(".", 1)[-1] == last][:5000]
                close = difflib.get_close_matches(key, pool, n=2, cutoff=0.5)
                hint = f" (the file has e.g. {', '.join(_quoted(c) for c in close)})" if close else ""
            also = f" or its source {_quoted(key_of(src))} to convert from" if src is not None and src != name else ""
            problems.append(f"missing tensor {_quoted(key)}{also} for parameter {_quoted(name)}{hint}")
            continue
        claimed.add(key)
        if tuple(info["shape"]) != shape:
            problems.append(f"{what(key)} has shape {tuple(info['shape'])}, parameter {_quoted(name)} expects {shape}")
        if info["dtype"] != dtype:
            problems.append(f"{what(key)} has dtype {info['dtype']}, parameter {_quoted(name)} expects {dtype}")
    exact_keys = set(rules.exact.values())
    matched = [False] * len(globs)
    for key in header:
        hits = [i for i, (_, rx) in enumerate(globs) if rx.match(key)]
        for i in hits:
            matched[i] = True
        if key.startswith(prefix) and key not in claimed and key not in exact_keys and not hits:
            problems.append(f"unexpected tensor {what(key)} (no parameter uses it)")
    problems.extend(rules.unused(list(keys)))
    for (glob, _), hit in zip(globs, matched):
        if not hit:
            warnings.warn(f"{path}: the ignore pattern {_quoted(glob)} matches no tensor of the file", WeightsWarning,
                          stacklevel=3)
    if problems:
        raise WeightsError(path, problems)

    out: dict[str, np.ndarray] = {}
    for name, key in direct.items():
        if producer.get(name) not in convert:
            out[name] = read(key, shards.get(name))
    for name, key in tiled.items():
        out[name] = tile_rows(read(key, shards.get(name)), row_tiles[name])
    for name, key in cast.items():
        out[name] = _cast_float(read(key, shards.get(name)), header[key]["dtype"], expected[name][1])
    total = len(convert)
    if progress is not None and total:
        progress(0, total, next(iter(convert)))
    for done, (src, skey) in enumerate(convert.items(), start=1):
        conv = conversions[src]
        arrays = list(conv.func(_float32(read(skey, shards.get(src)), header[skey]["dtype"])))
        problems.extend(_check_converted(src, conv.targets, arrays, expected))
        out.update(zip(conv.targets, arrays))
        if progress is not None:
            progress(done, total, src)
    if problems:
        raise WeightsError(path, problems)
    result = {name: out.pop(name) for name in expected}
    del out
    move_to_huge_pages(result)      # each original freed after its copy: one copy's extra memory
    return result


def loaded_weights_digest(digests: Mapping[str, tuple[str, tuple, str]] | None) -> bytes:
    """One SHA-256 (32 bytes) over what :func:`load_params` recorded in ``digests`` (file name -> dtype,
    shape, whole-tensor SHA-256), in name order, so that the order of reading does not matter; for None
    (no weights file: random weights), the digest of that fact. Two workers get the same value exactly
    when they read the same tensors, names, dtypes, shapes and bytes (SHA-256's collision resistance)."""
    if digests is None:
        return hashlib.sha256(b"no weights file").digest()
    text = json.dumps(sorted([name, dtype, list(shape), hexdigest]
                             for name, (dtype, shape, hexdigest) in digests.items()), separators=(",", ":"))
    return hashlib.sha256(b"weights\0" + text.encode()).digest()


def _cast_float(a: np.ndarray, src: str, dst: str) -> np.ndarray:
    """Float values of dtype ``src`` as ``dst`` (bfloat16 as uint16 bits on both sides)."""
    if src == "float64" and dst != "bfloat16":
        return np.ascontiguousarray(a.astype(dst))
    wide = _float32(a, src)
    if dst == "bfloat16":
        return float32_to_bfloat16_bits(wide)
    return np.ascontiguousarray(wide.astype(dst))


def _float32(a: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "bfloat16":
        return bfloat16_bits_to_float32(a)
    return a.astype(np.float32)


def _check_converted(src: str, targets: Sequence[str], arrays: Sequence[np.ndarray],
                     expected: Mapping[str, tuple[Sequence[int], str]]) -> list[str]:
    if len(arrays) != len(targets):
        return [f"converting {_quoted(src)} gave {len(arrays)} arrays for {len(targets)} parameters {list(targets)}"]
    problems = []
    for name, a in zip(targets, arrays):
        if name not in expected:
            continue
        shape, dtype = expected[name]
        np_dtype = np.dtype(np.uint16) if dtype == "bfloat16" else np.dtype(dtype)
        if tuple(a.shape) != tuple(int(d) for d in shape) or a.dtype != np_dtype:
            problems.append(f"converting {_quoted(src)} gave {_quoted(name)} of shape {tuple(a.shape)} {a.dtype}, parameter "
                            f"{_quoted(name)} expects {tuple(shape)} {dtype}")
    return problems


def save_params(path: str | Path, params: Mapping[str, np.ndarray], metadata: Mapping[str, str] | None = None,
                dtypes: Mapping[str, str] | None = None) -> None:
    """Write ``params`` (name -> numpy array, in order) to a safetensors file.

    ``dtypes`` names the element type of arrays whose numpy dtype does not (``"bfloat16"`` for
    uint16 bits, written as ``BF16``); ``ml_dtypes.bfloat16`` arrays are written as ``BF16`` too.
    ``metadata`` goes to the header's ``__metadata__`` (string values). The file is written to a
    temporary file beside ``path`` and renamed into place (a failed save leaves an earlier file
    intact). Raises ValueError for an unsupported dtype, OSError when the folder cannot be written.
    """
    dtypes = dict(dtypes or {})
    header: dict = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    blobs: list[bytes] = []
    offset = 0
    for name, a in params.items():
        a = np.asarray(a)
        dtype = dtypes.get(name) or ("bfloat16" if a.dtype.name == "bfloat16" else str(a.dtype))
        if dtype == "bfloat16":
            if a.dtype.itemsize != 2:
                raise ValueError(f"{_quoted(name)}: bfloat16 data must be 2-byte bits, got dtype {a.dtype}")
            data = np.ascontiguousarray(a).view(np.uint16).astype("<u2").tobytes()
        else:
            if dtype not in _OUR_TO_ST or dtype != str(a.dtype):
                raise ValueError(f"{_quoted(name)}: cannot write dtype {a.dtype} as {dtype} to safetensors")
            data = np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": _OUR_TO_ST[dtype], "shape": list(a.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)

    def write(f) -> None:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)

    atomic_write(path, write)
