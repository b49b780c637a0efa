"""``Executable``: what the compiler produces and the VM runs.

Contents: per graph-level function a small register bytecode (JSON-able lists), the constant
pool (numpy arrays), the native object code of all kernels with their ABI metadata, and the
target it was compiled for. ``save()`` writes one file with a versioned header and no pickle:

    MAGIC (8 bytes) | u64 little-endian JSON length | JSON | object code | constant bytes...

The JSON records every section's offset and size, dtypes and shapes. ``Executable.load(path)``
needs only numpy and llvmlite (never the compiler).

Bytecode instructions (registers are integers; the first ``len(params)`` hold the arguments):

- ``["call", kernel, [arg regs], [out regs], [[dtype, dims], ...]]``: allocate the outputs
  (dims are JSON shape trees evaluated against the bound symbolic variables), then run the kernel
  (destination-passing style: inputs then outputs).
- ``["reshape", dst, src, dims]``: a view with a new shape (no copy; row-major).
- ``["tuple", dst, [regs]]``, ``["get_item", dst, src, index]``, ``["null", dst]``,
  ``["const", dst, index]``, ``["move", dst, src]``, ``["ret", reg]``.
"""
from __future__ import annotations

import io
import json
import struct
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["Executable", "FORMAT_VERSION", "MAGIC"]

MAGIC = b"MBEXEC\x00\x01"
FORMAT_VERSION = 1


class Executable:
    """Compiled model: bytecode functions, constants, native kernels and their metadata.

    ``functions``: name -> {"params": [...], "num_input": int, "instructions": [...],
    "num_registers": int, "ret": struct-info JSON}. ``kernels``: name -> ABI metadata from the
    code generator. ``object_code``: the relocatable object file for ``target``.
    """

    def __init__(self, functions: dict[str, dict], kernels: dict[str, dict], object_code: bytes,
                 constants: list[np.ndarray] | None = None, target: dict | None = None,
                 llvm_ir: str = "") -> None:
        self.functions = functions
        self.kernels = kernels
        self.object_code = object_code
        self.constants = list(constants or [])
        self.target = dict(target or {})
        self.llvm_ir = llvm_ir

    # -- introspection (TVM's Executable surface) -----------------------------------------
    @property
    def globals(self) -> list[str]:
        """Names of the callable graph-level functions."""
        return list(self.functions)

    @property
    def primitive_ops(self) -> list[str]:
        """Names of the native kernels."""
        return list(self.kernels)

    def get_function_params(self, name: str) -> list[str]:
        """Parameter names of function ``name`` (KeyError if unknown)."""
        return [p["name"] for p in self._function(name)["params"]]

    def get_function_arity(self, name: str) -> int:
        """Number of parameters of function ``name``."""
        return len(self._function(name)["params"])

    def _function(self, name: str) -> dict:
        try:
            return self.functions[name]
        except KeyError:
            raise KeyError(f"no function '{name}' in the executable; it has {self.globals}") from None

    @property
    def stats(self) -> str:
        """A short summary: functions, instructions, kernels, constants, object code size."""
        lines = [f"functions: {len(self.functions)}"]
        for name, fn in self.functions.items():
            lines.append(f"  {name}: {len(fn['params'])} params, {len(fn['instructions'])} instructions")
        lines.append(f"kernels: {len(self.kernels)}")
        lines.append(f"constants: {len(self.constants)} ({sum(c.nbytes for c in self.constants)} bytes)")
        lines.append(f"object code: {len(self.object_code)} bytes for {self.target.get('cpu', '?')}")
        return "\n".join(lines)

    @property
    def bytecode(self) -> str:
        """A readable listing of every function's instructions."""
        out = []
        for name, fn in self.functions.items():
            params = ", ".join(f"%{i}:{p['name']}" for i, p in enumerate(fn["params"]))
            out.append(f"func {name}({params}) num_input={fn['num_input']} registers={fn['num_registers']}")
            for ins in fn["instructions"]:
                out.append("  " + _format_instruction(ins))
        return "\n".join(out)

    # -- persistence -------------------------------------------------------------------------
    def save(self, path: str | Path | None = None) -> bytes:
        """Serialize (and write to ``path`` when given); returns the bytes."""
        blobs = [self.object_code] + [np.ascontiguousarray(c).tobytes() for c in self.constants]
        offsets, pos = [], 0
        for blob in blobs:
            offsets.append([pos, len(blob)])
            pos += len(blob)
        header = {
            "version": FORMAT_VERSION,
            "functions": self.functions,
            "kernels": self.kernels,
            "target": self.target,
            "object_code": offsets[0],
            "constants": [
                {"dtype": str(c.dtype), "shape": list(c.shape), "section": off}
                for c, off in zip(self.constants, offsets[1:])
            ],
        }
        text = json.dumps(header, separators=(",", ":")).encode()
        buf = io.BytesIO()
        buf.write(MAGIC)
        buf.write(struct.pack("<Q", len(text)))
        buf.write(text)
        for blob in blobs:
            buf.write(blob)
        data = buf.getvalue()
        if path is not None:
            Path(path).write_bytes(data)
        return data

    @classmethod
    def load(cls, source: str | Path | bytes) -> "Executable":
        """Read an executable saved by :meth:`save` (a path or the bytes).

        Raises ValueError for a file that is not an executable, or of another format version.
        """
        data = source if isinstance(source, (bytes, bytearray)) else Path(source).read_bytes()
        if data[:8] != MAGIC:
            raise ValueError("not a model-builder executable (bad magic)")
        (n,) = struct.unpack("<Q", data[8:16])
        try:
            header = json.loads(data[16:16 + n])
        except ValueError as exc:
            raise ValueError(f"corrupt executable header: {exc}") from None
        if header.get("version") != FORMAT_VERSION:
            raise ValueError(f"executable format version {header.get('version')} is not supported "
                             f"(this runtime reads version {FORMAT_VERSION})")
        base = 16 + n

        def section(off: list[int]) -> bytes:
            start, size = off
            if base + start + size > len(data):
                raise ValueError("truncated executable")
            return bytes(data[base + start: base + start + size])

        constants = [
            np.frombuffer(section(c["section"]), dtype=c["dtype"]).reshape(c["shape"]).copy()
            for c in header["constants"]
        ]
        return cls(header["functions"], header["kernels"], section(header["object_code"]), constants,
                   header["target"])


def _format_instruction(ins: list[Any]) -> str:
    op = ins[0]
    if op == "call":
        args = ", ".join(f"%{r}" for r in ins[2])
        outs = ", ".join(f"%{r}" for r in ins[3])
        return f"{outs} = call {ins[1]}({args})"
    if op == "reshape":
        return f"%{ins[1]} = reshape %{ins[2]} {ins[3]}"
    if op == "tuple":
        return f"%{ins[1]} = tuple({', '.join(f'%{r}' for r in ins[2])})"
    if op == "get_item":
        return f"%{ins[1]} = %{ins[2]}[{ins[3]}]"
    if op == "null":
        return f"%{ins[1]} = null"
    if op == "const":
        return f"%{ins[1]} = const[{ins[2]}]"
    if op == "move":
        return f"%{ins[1]} = %{ins[2]}"
    if op == "ret":
        return f"ret %{ins[1]}"
    return " ".join(map(str, ins))
