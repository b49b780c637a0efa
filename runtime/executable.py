"""``Executable``: what the compiler produces and the VM runs.

Contents: per graph-level function a small register bytecode (JSON-able lists), the constant
pool (numpy arrays), the native object code of all kernels with their ABI metadata, and the
target it was compiled for. ``save()`` writes one file with a versioned header and no pickle:

    MAGIC (8 bytes, the format version in its last byte) | u64 little-endian JSON length |
    SHA-256 (32 bytes) of everything after it | JSON | object code | constant bytes...

The JSON records every section's offset and size, dtypes and shapes; the sections follow one another
without gaps to the end of the file. ``Executable.load(path)`` needs only numpy and llvmlite (never the
compiler) and refuses, with ValueError, a file that is not exactly that: a wrong magic or version, a
digest that does not match (any damaged byte), a malformed header, constants whose bytes do not match
their dtype and shape, or bytecode that fails :func:`runtime.bytecode.validate_function`. The object
code itself is checked when it is loaded (:class:`runtime.native.NativeLibrary`: ELF structure,
manifest against the kernels' metadata, target against the host), before LLVM sees it.

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
- ``["match_shape", src, dims]``: the array in ``src`` must have ``len(dims)`` dims; a dim that is a
  symbolic var without a value binds it (a data-dependent shape such as ``vm.builtin.nonzero``'s
  count, TVM's ``match_cast``), the others must equal their value.
- ``["tuple", dst, [regs]]``, ``["get_item", dst, src, index]``, ``["null", dst]``,
  ``["const", dst, index]``, ``["move", dst, src]``, ``["ret", reg]``.

Introspection follows TVM's VM ``Executable``: :attr:`Executable.bytecode` (a readable listing),
:attr:`~Executable.stats`, :attr:`~Executable.globals`, :attr:`~Executable.primitive_ops`,
:meth:`~Executable.get_function_params` / :meth:`~Executable.get_function_arity`.
"""
from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path
from typing import Any

import numpy as np

from .bytecode import format_instruction, sinfo_text, validate_function
from .files import atomic_write, read_regular
from .memory import move_to_huge_pages
from .native import numpy_dtype

__all__ = ["Executable", "FORMAT_VERSION", "MAGIC"]

FORMAT_VERSION = 2
MAGIC = b"MBEXEC\x00" + bytes([FORMAT_VERSION])
_PREFIX = 8 + 8 + 32      # magic, JSON length, digest


class Executable:
    """Compiled model: bytecode functions, constants, native kernels and their metadata.

    ``functions``: name -> {"params": [...], "num_input": int, "instructions": [...],
    "num_registers": int, "ret": struct-info JSON}. ``kernels``: name -> ABI metadata from the
    code generator (``"kernel"``: how it was generated; ``"weight_transform": true``: a layout
    transform of model weights whose results the VM may keep). ``object_code``: the relocatable
    object file for ``target``.
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
            params = ", ".join(f"%{i}: {p['name']} {sinfo_text(p)}" for i, p in enumerate(fn["params"]))
            ret = f" -> {sinfo_text(fn['ret'])}" if "ret" in fn else ""
            out.append(f"func {name}({params}){ret}")
            out.append(f"  num_input={fn.get('num_input', len(fn['params']))} "
                       f"registers={fn.get('num_registers', '?')}")
            for k, ins in enumerate(fn["instructions"]):
                out.append(f"  {k}: {format_instruction(ins)}")
        return "\n".join(out)

    def __repr__(self) -> str:
        return (f"Executable(functions={self.globals}, kernels={len(self.kernels)}, "
                f"constants={len(self.constants)})")

    # -- persistence -------------------------------------------------------------------------
    def save(self, path: str | Path | None = None) -> bytes:
        """Serialize (see the module docstring) and, when ``path`` is given, write the file
        atomically (a temporary file in the same folder, renamed into place); returns the bytes."""
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
                {"dtype": _dtype_name(c), "shape": list(c.shape), "section": off}
                for c, off in zip(self.constants, offsets[1:])
            ],
        }
        text = json.dumps(header, separators=(",", ":")).encode()
        digest = hashlib.sha256(text)
        for blob in blobs:
            digest.update(blob)
        data = b"".join([MAGIC, struct.pack("<Q", len(text)), digest.digest(), text, *blobs])
        if path is not None:
            atomic_write(path, data)
        return data

    @classmethod
    def load(cls, source: str | Path | bytes) -> "Executable":
        """Read an executable saved by :meth:`save` (a path or the bytes). Its constants are moved
        into memory backed by huge pages where Linux offers them (:func:`runtime.memory.move_to_huge_pages`).

        Raises ValueError for a file that is not an executable, of another format version, damaged
        (its digest does not match) or malformed (see the module docstring); OSError when the path
        cannot be read.
        """
        data = bytes(source) if isinstance(source, (bytes, bytearray, memoryview)) else read_regular(source, MAX_FILE_BYTES)
        if data[:6] != MAGIC[:6]:
            raise ValueError("not a model-builder executable (bad magic)")
        if data[:8] != MAGIC:
            raise ValueError(f"executable format version {data[7] if len(data) > 7 else '?'} is not supported "
                             f"(this runtime reads version {FORMAT_VERSION}): rebuild it")
        if len(data) < _PREFIX:
            raise ValueError("truncated executable")
        (n,) = struct.unpack_from("<Q", data, 8)
        if n > len(data) - _PREFIX:
            raise ValueError("truncated executable (header runs past the end of the data)")
        if hashlib.sha256(memoryview(data)[_PREFIX:]).digest() != data[16:_PREFIX]:
            raise ValueError("the executable is damaged or truncated (its SHA-256 digest does not match its contents)")
        base = _PREFIX + n
        try:
            header = json.loads(data[_PREFIX:base])
            return cls._from_header(header, data, base)
        except RecursionError:
            raise ValueError("corrupt executable header: nested too deeply") from None
        except (KeyError, TypeError, AttributeError, IndexError) as exc:
            raise ValueError(f"corrupt executable header: {type(exc).__name__}: {exc}") from None
        except ValueError as exc:
            raise ValueError(f"corrupt executable header: {exc}") from None

    @classmethod
    def _from_header(cls, header: Any, data: bytes, base: int) -> "Executable":
        if not isinstance(header, dict) or header.get("version") != FORMAT_VERSION:
            raise ValueError("wrong or missing version")
        functions, kernels, target = header["functions"], header["kernels"], header["target"]
        consts = header["constants"]
        if not (isinstance(functions, dict) and isinstance(kernels, dict) and isinstance(target, dict)
                and isinstance(consts, list)):
            raise ValueError("functions, kernels, target and constants have the wrong types")
        sections = [header["object_code"]] + [c["section"] for c in consts]
        pos = 0
        for sec in sections:   # contiguous, in order, to the end of the data
            if not (isinstance(sec, list) and len(sec) == 2 and sec[0] == pos and isinstance(sec[1], int)
                    and not isinstance(sec[1], bool) and 0 <= sec[1] <= len(data) - base - pos):
                raise ValueError(f"section {sec!r} is not where the previous one ends ({pos})")
            pos += sec[1]
        if base + pos != len(data):
            raise ValueError(f"{len(data) - base - pos} bytes after the last section")

        def section(off: list[int]) -> bytes:
            return data[base + off[0]: base + off[0] + off[1]]

        constants = []
        for c in consts:
            shape = c["shape"]
            dtype = numpy_dtype(c["dtype"])
            if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                                      for d in shape):
                raise ValueError(f"constant shape {shape!r}")
            if int(np.prod(shape, dtype=object)) * dtype.itemsize != c["section"][1]:
                raise ValueError(f"constant of {c['dtype']}{shape} does not fill its {c['section'][1]} bytes")
            constants.append(np.frombuffer(section(c["section"]), dtype=dtype).reshape(shape).copy())
        for name, fn in functions.items():
            validate_function(name, fn, kernels, len(constants))
        move_to_huge_pages(constants)   # (the weights of an imported model: streamed on every call)
        return cls(functions, kernels, section(header["object_code"]), constants, target)

    @classmethod
    def load_exec(cls, data: bytes | str | Path, lib: Any = None) -> "Executable":
        """TVM's spelling of :meth:`load` (``lib`` is accepted for compatibility and must be
        None: the native code travels inside the same file)."""
        if lib is not None:
            raise ValueError("the native code is part of the saved executable; pass lib=None")
        return cls.load(data)


def _dtype_name(a: np.ndarray) -> str:
    """The dtype name of a constant (``bfloat16`` arrays are their uint16 bits)."""
    return "bfloat16" if a.dtype.name == "bfloat16" else str(a.dtype)


#: The largest executable file read (bytes).
MAX_FILE_BYTES = 1 << 36
