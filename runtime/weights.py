"""Weights in and out of safetensors files, with name maps, conversion hooks and strict accounting.

``load_params(path, expected, prefix="", name_map=None, conversions=None)`` reads the tensors a
model expects: each parameter ``name`` is looked up in the file as ``name_map[name]`` if given,
else ``prefix + name``. Loading is strict: every missing parameter, every unexpected tensor (a
tensor under ``prefix`` that no parameter claims) and every shape or dtype mismatch is listed in
one :class:`WeightsError`. Tensors outside ``prefix`` belong to other parts of a checkpoint and
are ignored.

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
"""
from __future__ import annotations

import difflib
import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np

from .files import atomic_write, open_regular

__all__ = ["WeightsError", "ParamConversion", "load_params", "save_params", "read_safetensors_header"]


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

    def __init__(self, path: str | Path) -> None:
        from safetensors import SafetensorError, safe_open

        self.path = str(path)
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

    def read(self, name: str) -> np.ndarray:
        """Tensor ``name`` as a new C-contiguous array (bfloat16 as uint16 bits)."""
        info = self.infos[name]
        start, nbytes = self._offsets.get(name, (0, None))
        if nbytes is None:
            raise WeightsError(self.path, [f"'{name}' has dtype {info['dtype']}, which cannot be read"])
        dtype = np.dtype(np.uint16 if info["dtype"] == "bfloat16" else info["dtype"])
        return np.frombuffer(self._read(start, nbytes), dtype=dtype.newbyteorder("<")).astype(
            dtype, copy=True).reshape(info["shape"])

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


def read_safetensors_header(path: str | Path) -> dict[str, dict]:
    """``{name: {"dtype": str (our spelling), "shape": [..]}}`` of a safetensors file, in file order.

    Raises WeightsError for a file that is not valid safetensors (as the ``safetensors`` library
    judges it) or not a regular file.
    """
    with _Checkpoint(path) as ckpt:
        return {name: dict(info) for name, info in ckpt.infos.items()}


def read_safetensors_metadata(path: str | Path) -> dict[str, str]:
    """The ``__metadata__`` string map of a safetensors file (empty when it has none). Raises
    WeightsError as :func:`read_safetensors_header`."""
    with _Checkpoint(path) as ckpt:
        return dict(ckpt.metadata)


def load_params(path: str | Path, expected: Mapping[str, tuple[Sequence[int], str]], prefix: str = "",
                name_map: Mapping[str, str] | None = None,
                conversions: Mapping[str, ParamConversion] | None = None,
                progress: Callable[[int, int, str], None] | None = None) -> dict[str, np.ndarray]:
    """Load the parameters ``expected`` (name -> (shape, dtype)) from safetensors ``path``.

    ``conversions``: source name -> :class:`ParamConversion` (see the module docstring); a
    source must be a floating-point tensor of the conversion's shape (any float dtype).
    ``progress(done, total, source_name)`` is called with ``done=0`` before the first conversion and
    after each one.

    Returns name -> numpy array (C-contiguous; loaded directly: the file's exact values).
    Raises WeightsError listing every missing / unexpected / mismatched tensor, naming the
    file's side and the parameter's side of each mismatch.
    """
    path = str(path)
    with _Checkpoint(path) as ckpt:
        return _load(ckpt, expected, prefix, name_map, conversions, progress)


def _load(ckpt: _Checkpoint, expected, prefix, name_map, conversions, progress) -> dict[str, np.ndarray]:
    path, header = ckpt.path, ckpt.infos
    name_map = dict(name_map or {})
    conversions = dict(conversions or {})
    producer = {t: src for src, conv in conversions.items() for t in conv.targets}

    def key_of(name: str) -> str:
        return name_map.get(name, prefix + name)

    problems: list[str] = []
    direct: dict[str, str] = {}      # parameter -> file key
    cast: dict[str, str] = {}        # parameter -> file key of another float dtype
    convert: dict[str, str] = {}     # source name -> file key
    claimed: set[str] = set()
    for name, (shape, dtype) in expected.items():
        key = key_of(name)
        shape = tuple(int(d) for d in shape)
        info = header.get(key)
        if info is not None and tuple(info["shape"]) == shape and info["dtype"] == dtype:
            direct[name] = key
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
            want = tuple(conversions[src].shape)
            bad = []
            if tuple(sinfo["shape"]) != want:
                bad.append(f"'{skey}' has shape {tuple(sinfo['shape'])}, parameter '{src}' (converted into "
                           f"{', '.join(conversions[src].targets)}) expects {want}")
            if sinfo["dtype"] not in _FLOATS:
                bad.append(f"'{skey}' has dtype {sinfo['dtype']}, parameter '{src}' (converted into "
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
        if info is None:
            close = [k for k in header if k.endswith(name.split(".")[-1]) and k.startswith(prefix)][:3]
            hint = f" (file has e.g. {', '.join(close)})" if close else ""
            also = f" or its source '{key_of(src)}' to convert from" if src is not None and src != name else ""
            problems.append(f"missing tensor '{key}'{also} for parameter '{name}'{hint}")
            continue
        claimed.add(key)
        if tuple(info["shape"]) != shape:
            problems.append(f"'{key}' has shape {tuple(info['shape'])}, parameter '{name}' expects {shape}")
        if info["dtype"] != dtype:
            problems.append(f"'{key}' has dtype {info['dtype']}, parameter '{name}' expects {dtype}")
    for key in header:
        if key.startswith(prefix) and key not in claimed and key not in name_map.values():
            problems.append(f"unexpected tensor '{key}' (no parameter uses it)")
    known = set(expected) | set(conversions)
    for name in name_map:
        if name not in known:
            close = difflib.get_close_matches(name, sorted(known), n=2)
            problems.append(f"the name map's entry '{name}' names no parameter of the model"
                            + (f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""))
    if problems:
        raise WeightsError(path, problems)

    out: dict[str, np.ndarray] = {}
    read = ckpt.read
    for name, key in direct.items():
        if producer.get(name) not in convert:
            out[name] = read(key)
    for name, key in cast.items():
        out[name] = _cast_float(read(key), header[key]["dtype"], expected[name][1])
    total = len(convert)
    if progress is not None and total:
        progress(0, total, next(iter(convert)))
    for done, (src, skey) in enumerate(convert.items(), start=1):
        conv = conversions[src]
        arrays = list(conv.func(_float32(read(skey), header[skey]["dtype"])))
        problems.extend(_check_converted(src, conv.targets, arrays, expected))
        out.update(zip(conv.targets, arrays))
        if progress is not None:
            progress(done, total, src)
    if problems:
        raise WeightsError(path, problems)
    return {name: out[name] for name in expected}


def _cast_float(a: np.ndarray, src: str, dst: str) -> np.ndarray:
    """Float values of dtype ``src`` as ``dst`` (bfloat16 as uint16 bits on both sides)."""
    if src == "float64" and dst != "bfloat16":
        return np.ascontiguousarray(a.astype(dst))
    wide = _float32(a, src)
    if dst == "bfloat16":
        from .native import float32_to_bfloat16_bits

        return float32_to_bfloat16_bits(wide)
    return np.ascontiguousarray(wide.astype(dst))


def _float32(a: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "bfloat16":
        return (a.astype(np.uint32) << np.uint32(16)).view(np.float32)
    return a.astype(np.float32)


def _check_converted(src: str, targets: Sequence[str], arrays: Sequence[np.ndarray],
                     expected: Mapping[str, tuple[Sequence[int], str]]) -> list[str]:
    if len(arrays) != len(targets):
        return [f"converting '{src}' gave {len(arrays)} arrays for {len(targets)} parameters {list(targets)}"]
    problems = []
    for name, a in zip(targets, arrays):
        if name not in expected:
            continue
        shape, dtype = expected[name]
        np_dtype = np.dtype(np.uint16) if dtype == "bfloat16" else np.dtype(dtype)
        if tuple(a.shape) != tuple(int(d) for d in shape) or a.dtype != np_dtype:
            problems.append(f"converting '{src}' gave '{name}' of shape {tuple(a.shape)} {a.dtype}, parameter "
                            f"'{name}' expects {tuple(shape)} {dtype}")
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
                raise ValueError(f"'{name}': bfloat16 data must be 2-byte bits, got dtype {a.dtype}")
            data = np.ascontiguousarray(a).view(np.uint16).astype("<u2").tobytes()
        else:
            if dtype not in _OUR_TO_ST or dtype != str(a.dtype):
                raise ValueError(f"'{name}': cannot write dtype {a.dtype} as {dtype} to safetensors")
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
