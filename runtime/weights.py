"""Weights in and out of safetensors files, with name maps and strict accounting.

``load_params(path, expected, prefix="", name_map=None)`` reads the tensors a model expects:
each parameter ``name`` is looked up in the file as ``name_map[name]`` if given, else
``prefix + name``. Loading is strict: every missing parameter, every unexpected tensor (a tensor
under ``prefix`` that no parameter claims) and every shape or dtype mismatch is listed in one
:class:`WeightsError`. Tensors outside ``prefix`` belong to other parts of a checkpoint and are
ignored. bfloat16 tensors are returned as their uint16 bit patterns (numpy has no bfloat16).
"""
from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

__all__ = ["WeightsError", "load_params", "save_params", "read_safetensors_header"]


class WeightsError(ValueError):
    """One error listing every problem found while binding weights (``.problems``)."""

    def __init__(self, path: str, problems: Sequence[str]) -> None:
        self.path = path
        self.problems = list(problems)
        super().__init__(f"{path}: {len(self.problems)} problem(s) loading weights:\n"
                         + "\n".join(f"  - {p}" for p in self.problems))


_ST_DTYPES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64",
              "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "U16": "uint16",
              "U32": "uint32", "U64": "uint64", "BOOL": "bool"}


def read_safetensors_header(path: str | Path) -> dict[str, dict]:
    """``{name: {"dtype": str (our spelling), "shape": [..]}}`` from a safetensors header.

    Raises WeightsError for a file that is not safetensors.
    """
    path = Path(path)
    try:
        with path.open("rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            if n > 100_000_000:
                raise ValueError("header too large")
            header = json.loads(f.read(n))
    except (OSError, ValueError, struct.error) as exc:
        raise WeightsError(str(path), [f"not a readable safetensors file: {exc}"]) from None
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        out[name] = {"dtype": _ST_DTYPES.get(info["dtype"], info["dtype"]), "shape": list(info["shape"])}
    return out


def load_params(path: str | Path, expected: Mapping[str, tuple[Sequence[int], str]], prefix: str = "",
                name_map: Mapping[str, str] | None = None) -> dict[str, np.ndarray]:
    """Load the parameters ``expected`` (name -> (shape, dtype)) from safetensors ``path``.

    Returns name -> numpy array (C-contiguous, the file's exact values). Raises WeightsError
    listing every missing / unexpected / mismatched tensor.
    """
    from safetensors import safe_open

    path = str(path)
    header = read_safetensors_header(path)
    name_map = dict(name_map or {})
    problems: list[str] = []
    wanted: dict[str, str] = {}
    for name, (shape, dtype) in expected.items():
        key = name_map.get(name, prefix + name)
        wanted[key] = name
        if key not in header:
            close = [k for k in header if k.endswith(name.split(".")[-1]) and k.startswith(prefix)][:3]
            hint = f" (file has e.g. {', '.join(close)})" if close else ""
            problems.append(f"missing tensor '{key}' for parameter '{name}'{hint}")
            continue
        info = header[key]
        if list(info["shape"]) != [int(d) for d in shape]:
            problems.append(f"'{key}' has shape {tuple(info['shape'])}, parameter '{name}' expects {tuple(shape)}")
        if info["dtype"] != dtype:
            problems.append(f"'{key}' has dtype {info['dtype']}, parameter '{name}' expects {dtype}")
    for key in header:
        if key.startswith(prefix) and key not in wanted and key not in name_map.values():
            problems.append(f"unexpected tensor '{key}' (no parameter uses it)")
    if problems:
        raise WeightsError(path, problems)
    out: dict[str, np.ndarray] = {}
    with safe_open(path, framework="numpy") as f:
        for key, name in wanted.items():
            if header[key]["dtype"] == "bfloat16":
                out[name] = _read_raw(path, key).view(np.uint16).reshape(header[key]["shape"])
            else:
                out[name] = np.ascontiguousarray(f.get_tensor(key))
    return out


def _read_raw(path: str, key: str) -> np.ndarray:
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        start, end = header[key]["data_offsets"]
        f.seek(8 + n + start)
        return np.frombuffer(f.read(end - start), dtype=np.uint8).copy()


def save_params(path: str | Path, params: Mapping[str, np.ndarray], metadata: Mapping[str, str] | None = None) -> None:
    """Write ``params`` (name -> numpy array) to a safetensors file."""
    from safetensors.numpy import save_file

    save_file({k: np.ascontiguousarray(v) for k, v in params.items()}, str(path),
              metadata=dict(metadata) if metadata else None)
