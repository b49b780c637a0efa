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
- ``["call_extern", name, [arg specs], [out regs], [[dtype, dims], ...]]``: the same for a Python
  function registered with ``runtime.register_extern``.
- ``["call_builtin", dst, name, [arg specs]]``: a VM builtin (``vm.builtin.*``) whose result goes
  to ``dst``. Arg specs: ``["reg", r]``, ``["int" | "float" | "str", value]``, ``["dim", tree]``,
  ``["shape", [trees]]``.
- ``["reshape", dst, src, dims]``: a view with a new shape (no copy; row-major).
- ``["tuple", dst, [regs]]``, ``["get_item", dst, src, index]``, ``["null", dst]``,
  ``["const", dst, index]``, ``["move", dst, src]``, ``["ret", reg]``.

Introspection follows TVM's VM ``Executable``: :attr:`Executable.bytecode` (a readable listing),
:attr:`~Executable.stats`, :attr:`~Executable.globals`, :attr:`~Executable.primitive_ops`,
:meth:`~Executable.get_function_params` / :meth:`~Executable.get_function_arity`.
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
            lines.append(f"  {name}: {len(fn['params'])} params ({fn.get('num_input', len(fn['params']))} "
                         f"inputs), {len(fn['instructions'])} instructions, "
                         f"{fn.get('num_registers', '?')} registers")
        lines.append(f"kernels: {len(self.kernels)}" + (f" ({', '.join(self.kernels)})" if self.kernels else ""))
        lines.append(f"constants: {len(self.constants)} ({sum(c.nbytes for c in self.constants)} bytes)")
        for i, c in enumerate(self.constants):
            lines.append(f"  const[{i}]: {c.dtype}{list(c.shape)}")
        lines.append(f"object code: {len(self.object_code)} bytes for {self.target.get('cpu', '?')}")
        return "\n".join(lines)

    @property
    def bytecode(self) -> str:
        """A readable listing of every function's instructions, e.g.::

            func main(%0: A float32[128, 128], %1: B float32[128, 128]) -> float32[128, 128]
              num_input=2 registers=4
              0: %2 = call te_matmul(%0, %1) -> float32[128, 128]
              1: %3 = call te_relu(%2) -> float32[128, 128]
              2: ret %3
        """
        out = []
        for name, fn in self.functions.items():
            params = ", ".join(f"%{i}: {p['name']} {_sinfo_text(p)}" for i, p in enumerate(fn["params"]))
            ret = f" -> {_sinfo_text(fn['ret'])}" if "ret" in fn else ""
            out.append(f"func {name}({params}){ret}")
            out.append(f"  num_input={fn.get('num_input', len(fn['params']))} "
                       f"registers={fn.get('num_registers', '?')}")
            for k, ins in enumerate(fn["instructions"]):
                out.append(f"  {k}: {_format_instruction(ins)}")
        return "\n".join(out)

    def __repr__(self) -> str:
        return (f"Executable(functions={self.globals}, kernels={len(self.kernels)}, "
                f"constants={len(self.constants)})")

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

        Raises ValueError for a file that is not an executable, of another format version, or
        truncated / corrupt.
        """
        data = source if isinstance(source, (bytes, bytearray, memoryview)) else Path(source).read_bytes()
        data = bytes(data)
        if data[:8] != MAGIC:
            raise ValueError("not a model-builder executable (bad magic)")
        if len(data) < 16:
            raise ValueError("truncated executable")
        (n,) = struct.unpack("<Q", data[8:16])
        if 16 + n > len(data):
            raise ValueError("truncated executable (header runs past the end of the data)")
        try:
            header = json.loads(data[16:16 + n])
        except ValueError as exc:
            raise ValueError(f"corrupt executable header: {exc}") from None
        if not isinstance(header, dict) or header.get("version") != FORMAT_VERSION:
            version = header.get("version") if isinstance(header, dict) else None
            raise ValueError(f"executable format version {version} is not supported "
                             f"(this runtime reads version {FORMAT_VERSION})")
        base = 16 + n

        def section(off: list[int]) -> bytes:
            start, size = off
            if start < 0 or size < 0 or base + start + size > len(data):
                raise ValueError("truncated executable")
            return data[base + start: base + start + size]

        try:
            from .native import numpy_dtype

            constants = [
                np.frombuffer(section(c["section"]), dtype=numpy_dtype(c["dtype"])).reshape(c["shape"]).copy()
                for c in header["constants"]
            ]
            return cls(header["functions"], header["kernels"], section(header["object_code"]), constants,
                       header["target"])
        except KeyError as exc:
            raise ValueError(f"corrupt executable header: missing {exc}") from None

    @classmethod
    def load_exec(cls, data: bytes | str | Path, lib: Any = None) -> "Executable":
        """TVM's spelling of :meth:`load` (``lib`` is accepted for compatibility and must be
        None: the native code travels inside the same file)."""
        if lib is not None:
            raise ValueError("the native code is part of the saved executable; pass lib=None")
        return cls.load(data)


def _dims_text(dims: list) -> str:
    from .native import dim_to_str

    return "[" + ", ".join(dim_to_str(d) for d in dims) + "]"


def _sinfo_text(j: dict) -> str:
    """``float32[n, 4]``, ``(float32[2], object)``, ``shape[n]``, ``int64`` for a struct-info JSON."""
    kind = j.get("kind")
    if kind == "tensor":
        return f"{j['dtype']}{_dims_text(j['shape'])}"
    if kind == "tuple":
        return "(" + ", ".join(_sinfo_text(f) for f in j["fields"]) + ("," if len(j["fields"]) == 1 else "") + ")"
    if kind == "shape":
        return f"shape{_dims_text(j['dims'])}"
    if kind == "prim":
        return j["dtype"]
    return str(kind)


def _arg_spec_text(spec: list) -> str:
    from .native import dim_to_str

    kind, value = spec
    if kind == "reg":
        return f"%{value}"
    if kind == "str":
        return json.dumps(value)
    if kind == "dim":
        return dim_to_str(value)
    if kind == "shape":
        return f"shape{_dims_text(value)}"
    return repr(value)


def _outs_text(specs: list) -> str:
    texts = [f"{dtype}{_dims_text(dims)}" for dtype, dims in specs]
    return texts[0] if len(texts) == 1 else "(" + ", ".join(texts) + ")"


def _format_instruction(ins: list[Any]) -> str:
    op = ins[0]
    if op == "call":
        args = ", ".join(f"%{r}" for r in ins[2])
        outs = ", ".join(f"%{r}" for r in ins[3])
        return f"{outs} = call {ins[1]}({args}) -> {_outs_text(ins[4])}"
    if op == "call_extern":
        args = ", ".join(_arg_spec_text(a) for a in ins[2])
        outs = ", ".join(f"%{r}" for r in ins[3])
        return f"{outs} = call_extern {json.dumps(ins[1])}({args}) -> {_outs_text(ins[4])}"
    if op == "call_builtin":
        args = ", ".join(_arg_spec_text(a) for a in ins[3])
        return f"%{ins[1]} = call_builtin {ins[2]}({args})"
    if op == "reshape":
        return f"%{ins[1]} = reshape %{ins[2]} {_dims_text(ins[3])}"
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
