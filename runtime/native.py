"""Loader for native kernels produced by ``builder.codegen`` (imports only numpy, llvmlite,
stdlib).

Calling convention of every function (see ``builder/codegen/abi.py``)::

    int32_t name(void **data, int64_t *shapes)

``data`` holds one data pointer per buffer param (in order), ``shapes`` the dims of every param
concatenated. A nonzero return ``k`` means ``metadata["errors"][k - 1]``. A param whose
metadata says ``"written": true`` is an output: a read-only array there is refused (metadata
without the key, from older objects, is not checked).

Before any byte of an object reaches LLVM, :class:`NativeLibrary` checks it: its structure
(:func:`runtime.elf.read_object`), that it was made for this host (:func:`check_target`), that every
external symbol it needs resolves, and that its manifest (section ``.mb_manifest``, written by the code
generator: :func:`manifest_bytes`) names exactly the kernels of the metadata it comes with, with the
same signatures. Code is generated and loaded with the large code model and static relocations
(:func:`host_target_machine`), so it runs wherever the JIT puts its sections.

Shape dims in the metadata are ints or JSON trees ``["var", name]`` / ``[op, a, b]`` with op in
``add sub mul floordiv floormod min max``; :func:`dim_from_json` validates one and
:func:`eval_dim` evaluates it.
"""
from __future__ import annotations

import ctypes
import hashlib
import json
import re
import struct
from typing import Sequence

import llvmlite.binding as llvm
import numpy as np

from core.dtypes import (DTYPES, as_bfloat16_bits, bfloat16_bits_to_float32, float32_to_bfloat16_bits,  # noqa: F401
                         is_ml_dtypes_bfloat16, numpy_dtype)

from .elf import ElfObject, read_object
from .host import check_target, host_target_machine, init_llvm
from .threadpool import ensure_pool

__all__ = ["NativeLibrary", "kernel_signature", "manifest_bytes",
           "check_manifest", "MANIFEST_SECTION", "dim_from_json", "eval_dim", "dim_to_str", "numpy_dtype", "as_bfloat16_bits",
           "float32_to_bfloat16_bits", "bfloat16_bits_to_float32"]

_BINOPS = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "floordiv": lambda a, b: a // b,
    "floormod": lambda a, b: a % b,
    "min": min,
    "max": max,
}
_SYMBOLS = {"add": "+", "sub": "-", "mul": "*", "floordiv": "//", "floormod": "%"}

MANIFEST_SECTION = ".mb_manifest"
"""The object-code section holding the manifest (:func:`manifest_bytes`)."""


def kernel_signature(meta: dict) -> str:
    """SHA-256 (hex) of one kernel's ABI metadata (params, dtypes, shape trees, errors, ...), in
    canonical JSON: what the VM will pass to the kernel and how it reads the kernel's errors."""
    return hashlib.sha256(json.dumps(meta, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def manifest_bytes(source: str, functions: dict[str, dict]) -> bytes:
    """The manifest the code generator embeds in an object: ``source`` (the hash of what the object
    was compiled from: the object cache's key) and each kernel's :func:`kernel_signature`."""
    return json.dumps({"format": 1, "source": source,
                       "kernels": {name: kernel_signature(meta) for name, meta in sorted(functions.items())}},
                      sort_keys=True, separators=(",", ":")).encode()


def check_manifest(obj: ElfObject, functions: dict[str, dict], source: str | None = None) -> None:
    """Raise ValueError unless ``obj``'s manifest names exactly the kernels of ``functions`` with the
    same signatures (and, when given, the same ``source``): object code of another model, or of
    another version of this one, is refused before it is loaded."""
    raw = obj.section(MANIFEST_SECTION)
    if raw is None:
        raise ValueError("the object code has no manifest (made by an older model-builder?): rebuild it")
    try:
        manifest = json.loads(raw.rstrip(b"\0").decode())
        kernels, made_from = manifest["kernels"], manifest["source"]
        if not isinstance(kernels, dict):
            raise TypeError
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        raise ValueError("the object code's manifest is damaged") from None
    if source is not None and made_from != source:
        raise ValueError("the object code was compiled from other source than expected")
    expected = {name: kernel_signature(meta) for name, meta in functions.items()}
    if set(kernels) != set(expected):
        extra, absent = sorted(set(kernels) - set(expected)), sorted(set(expected) - set(kernels))
        raise ValueError("the object code does not hold the kernels its metadata lists"
                         + (f" (missing {', '.join(absent[:5])})" if absent else "")
                         + (f" (unexpected {', '.join(extra[:5])})" if extra else ""))
    wrong = sorted(name for name in expected if kernels[name] != expected[name])
    if wrong:
        raise ValueError(f"the object code's kernels {', '.join(wrong[:5])} were compiled for other "
                         "signatures than their metadata describes")


def dim_from_json(tree):
    """Validate a serialized dim and return it normalized (an ``int``, ``("var", name)`` or
    ``(op, a, b)`` tuples). Raises ValueError for a malformed tree."""
    if isinstance(tree, bool):
        raise ValueError(f"invalid dim {tree!r}")
    if isinstance(tree, int):
        return tree
    if isinstance(tree, (list, tuple)) and tree:
        head = tree[0]
        if head == "var" and len(tree) == 2 and isinstance(tree[1], str):
            return ("var", tree[1])
        if head in _BINOPS and len(tree) == 3:
            return (head, dim_from_json(tree[1]), dim_from_json(tree[2]))
    raise ValueError(f"invalid dim {tree!r}")


def eval_dim(tree, env: dict) -> int:
    """Evaluate a dim tree with ``env`` mapping symbolic var names to ints.

    Raises KeyError naming an unbound var, ValueError for a malformed tree, and
    :class:`DimDivisionByZero` (a ValueError naming the dim) for a ``//`` or ``%`` by zero.
    """
    if isinstance(tree, bool):
        raise ValueError(f"invalid dim {tree!r}")
    if isinstance(tree, int):
        return tree
    if isinstance(tree, (list, tuple)) and tree:
        head = tree[0]
        if head == "var" and len(tree) == 2:
            if tree[1] not in env:
                raise KeyError(f"symbolic var '{tree[1]}' has no value")
            return int(env[tree[1]])
        if head in _BINOPS and len(tree) == 3:
            a, b = eval_dim(tree[1], env), eval_dim(tree[2], env)
            if b == 0 and head in ("floordiv", "floormod"):
                raise DimDivisionByZero(tree, env)
            return int(_BINOPS[head](a, b))
    raise ValueError(f"invalid dim {tree!r}")


class DimDivisionByZero(ValueError, ZeroDivisionError):
    """A symbolic dim that divides by zero for the values of this call (``batch // k`` with ``k = 0``): a
    ValueError naming the dim and the values of its vars (also a ZeroDivisionError, what it was before)."""

    def __init__(self, tree, env: dict) -> None:
        names: list[str] = []
        stack = [tree]
        while stack:
            t = stack.pop()
            if isinstance(t, (list, tuple)) and t:
                if t[0] == "var":
                    if t[1] not in names:
                        names.append(t[1])
                else:
                    stack.extend(reversed(t[1:]))
        values = ", ".join(f"{n} = {env[n]}" for n in names if n in env)
        super().__init__(f"the shape dim {dim_to_str(tree)} divides by zero: {dim_to_str(tree[2])} is 0"
                         + (f" for {values}" if values else ""))


def dim_to_str(tree) -> str:
    """Human-readable form of a dim tree (``n * 2``, ``min(n, 4)``)."""
    if isinstance(tree, int):
        return str(tree)
    head = tree[0]
    if head == "var":
        return str(tree[1])

    def operand(t) -> str:
        text = dim_to_str(t)
        return f"({text})" if not isinstance(t, int) and t[0] in _SYMBOLS else text

    if head in _SYMBOLS:
        return f"{operand(tree[1])} {_SYMBOLS[head]} {operand(tree[2])}"
    return f"{head}({dim_to_str(tree[1])}, {dim_to_str(tree[2])})"


def _data_pointer(a: np.ndarray) -> int:
    """Address of ``a``'s first element (the buffer-protocol path is several times faster than
    ``a.ctypes.data``; read-only arrays, which it refuses, go to ``ctypes.data`` first, empty ones after
    it fails)."""
    if a.flags.writeable:
        try:
            return ctypes.addressof(ctypes.c_char.from_buffer(a))
        except (TypeError, ValueError, BufferError):
            pass
    return a.ctypes.data


_addressof = ctypes.addressof
_c_char = ctypes.c_char

def _eight_zero_bytes(*_) -> bytes:
    return bytes(8)


_FUNC_TYPE = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p)


class _Entry:
    """Prebuilt per-function call state."""

    __slots__ = ("name", "cfunc", "dtypes", "arg_checks", "dtype_names", "param_names", "ndims", "nparams",
                 "pack_ptrs", "pack_shapes", "errors", "error_params", "meta", "accept_bf16_bits",
                 "written")

    def __init__(self, name: str, cfunc, meta: dict) -> None:
        self.name = name
        self.cfunc = cfunc
        self.meta = meta
        params = meta.get("params") if isinstance(meta, dict) else None
        errors = meta.get("errors", []) if isinstance(meta, dict) else None
        if not isinstance(params, list) or not isinstance(errors, list) or not all(
                isinstance(p, dict) and isinstance(p.get("name"), str) and isinstance(p.get("dtype"), str)
                and isinstance(p.get("shape"), list) for p in params):
            raise ValueError(f"kernel '{name}': malformed metadata")
        for p in params:
            numpy_dtype(p["dtype"])
            for d in p["shape"]:
                dim_from_json(d)
        self.dtype_names = [p["dtype"] for p in params]
        self.dtypes = [numpy_dtype(p["dtype"]) for p in params]
        self.accept_bf16_bits = [p["dtype"] == "bfloat16" for p in params]
        self.param_names = [p["name"] for p in params]
        self.written = [bool(p.get("written", False)) for p in params]
        self.arg_checks = list(zip(self.dtypes, [len(p["shape"]) for p in params], self.written))
        self.ndims = [len(p["shape"]) for p in params]
        self.nparams = len(params)
        # the two argument arrays, packed as bytes (several times cheaper than building ctypes arrays;
        # the kernel only reads them); never empty, so that the kernel always gets valid pointers
        self.pack_ptrs = struct.Struct(f"={self.nparams}Q").pack if self.nparams else _eight_zero_bytes
        self.pack_shapes = struct.Struct(f"={sum(self.ndims)}q").pack if sum(self.ndims) else _eight_zero_bytes
        self.errors = [str(e) for e in errors]
        self.error_params = meta.get("error_params", [-1] * len(self.errors))
        if not isinstance(self.error_params, list) or not all(
                isinstance(i, int) and not isinstance(i, bool) for i in self.error_params):
            raise ValueError(f"kernel '{name}': malformed metadata (error_params)")


_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _dim_values(entry: _Entry, msg: str, arrays) -> dict[str, tuple[int, int, str]]:
    """``{var: (value, dim, param name)}`` for each symbolic dim of kernel ``entry`` that ``msg``
    names as a word and that is a whole dim of a parameter (``["var", name]`` in its shape), valued
    from the first such parameter's array in ``arrays``; in the order ``msg`` names them. Empty
    when there is none (or ``arrays`` does not fit the parameters)."""
    named = list(dict.fromkeys(_IDENTIFIER.findall(msg)))
    if not named:
        return {}
    where: dict[str, tuple[int, int]] = {}
    for i, p in enumerate(entry.meta.get("params", ())):
        for d, tree in enumerate(p.get("shape", ())):
            if isinstance(tree, list) and len(tree) == 2 and tree[0] == "var" and isinstance(tree[1], str):
                where.setdefault(tree[1], (i, d))
    out: dict[str, tuple[int, int, str]] = {}
    for name in named:
        if name not in where:
            continue
        i, d = where[name]
        shape = getattr(arrays[i], "shape", None) if i < len(arrays) else None
        if shape is None or d >= len(shape):
            continue
        out[name] = (int(shape[d]), d, entry.param_names[i])
    return out


class NativeLibrary:
    """Native kernels loaded from object code into an llvmlite MCJIT engine.

    ``object_code``: bytes from ``CompiledLibrary.object_code`` (host target);
    ``functions``: its metadata (symbol -> dict, see the module docstring); ``target``: the
    target it was compiled for (``{"triple", "cpu", "features"}``), checked against the host when
    given. Raises ValueError, before any byte reaches LLVM, when the target does not match the host,
    the object is not well formed (:func:`runtime.elf.read_object`), its manifest does not match
    ``functions`` (:func:`check_manifest`), the metadata is malformed, or the object needs an external
    symbol (libm / libc / libgcc helper) this process cannot resolve; and when a listed function is
    missing from the loaded code.
    """

    def __init__(self, object_code: bytes, functions: dict[str, dict], target: dict | None = None) -> None:
        init_llvm()
        if target is not None:
            check_target(target)
        if not isinstance(functions, dict) or not all(isinstance(m, dict) for m in functions.values()):
            raise ValueError("kernel metadata must map names to dicts")
        obj = read_object(bytes(object_code))   # every structure checked before LLVM sees a byte
        check_manifest(obj, functions)
        ensure_pool()  # kernels call mb_parallel_for / mb_num_threads, which the pool defines
        missing = [sym for sym in obj.undefined_symbols if not llvm.address_of_symbol(sym)]
        if missing:  # calling into an unresolved symbol would crash the process
            raise ValueError("the object code needs symbols that this process does not provide: "
                             + ", ".join(missing))
        entries = {name: _Entry(name, None, meta) for name, meta in functions.items()}   # metadata checked
        self.functions = dict(functions)
        self._tm = host_target_machine(llvm.get_process_triple(), llvm.get_host_cpu_name(),
                                       llvm.get_host_cpu_features().flatten())
        self._module = llvm.parse_assembly("")
        self._engine = llvm.create_mcjit_compiler(self._module, self._tm)
        self._object = llvm.ObjectFileRef.from_data(obj.data)
        self._engine.add_object_file(self._object)
        self._engine.finalize_object()
        self._entries: dict[str, _Entry] = {}
        for name, entry in entries.items():
            addr = self._engine.get_function_address(name)
            if not addr:
                raise ValueError(f"function '{name}' is not in the object code")
            entry.cfunc = _FUNC_TYPE(addr)
            self._entries[name] = entry

    def __contains__(self, name: str) -> bool:
        return name in self._entries

    def __getitem__(self, name: str):
        """A callable ``f(*arrays)`` for ``call(name, arrays)``."""
        if name not in self._entries:
            raise KeyError(f"no function '{name}' in this library")
        return lambda *arrays: self.call(name, arrays)

    def call(self, name: str, arrays: Sequence[np.ndarray]) -> None:
        """Run ``name`` on ``arrays`` (inputs then outputs, written in place).

        Checks the count, each array's dtype and ndim, C-contiguity and that the outputs (params
        the function writes) are writeable (ValueError naming the param); the kernel checks every dim and a mismatch raises
        ``ValueError(f"{name}: {message}, got shape {shape}")``. Raises KeyError for an unknown
        function.
        """
        entry = self.entry(name)
        if len(arrays) != entry.nparams:
            raise ValueError(f"{name}: expected {entry.nparams} arrays "
                             f"({', '.join(entry.param_names)}), got {len(arrays)}")
        self.invoke(entry, arrays, len(arrays))

    def entry(self, name: str) -> _Entry:
        """The prepared call state of kernel ``name`` (for :meth:`invoke`); KeyError when the library
        has no such kernel."""
        entry = self._entries.get(name)
        if entry is None:
            raise KeyError(f"no function '{name}' in this library")
        return entry

    def invoke(self, entry: _Entry, arrays: Sequence[np.ndarray], n_checked: int) -> None:
        """Run the kernel of ``entry`` (from :meth:`entry`) on ``arrays``: exactly ``entry.nparams``
        arrays, inputs then outputs (the caller guarantees the count).

        The first ``n_checked`` arrays are checked as :meth:`call` checks them. The rest must be
        buffers the caller has just allocated itself of the kernel's dtypes and ranks (``np.empty`` or
        :meth:`runtime.memory.BufferPool.empty`: C-contiguous, writeable, viewed by nothing else, so
        never an input), as the VM does for a ``call``'s outputs
        (their dtypes and ranks are checked against the kernel when the bytecode is loaded): only
        their addresses and shapes are read. The kernel checks every dim of every array natively;
        a mismatch raises ValueError as in :meth:`call`.
        """
        # fast path: exact ndarray of the declared dtype and ndim whose buffer ctypes can take (which
        # it refuses unless the array is C-contiguous and writeable); anything else goes through
        # _checked_args for the precise error, bf16 views and read-only inputs
        addrs = []
        dims: list = []
        for a, (dt, nd, out) in zip(arrays, entry.arg_checks[:n_checked]):
            if a.__class__ is not np.ndarray or a.dtype is not dt and a.dtype != dt or a.ndim != nd:
                break
            try:
                addrs.append(_addressof(_c_char.from_buffer(a)))
            except (TypeError, ValueError, BufferError):   # read-only, empty or not C-contiguous
                flags = a.flags
                if not flags.c_contiguous or out and not flags.writeable:
                    break
                addrs.append(a.ctypes.data)
            dims += a.shape
        if len(addrs) < n_checked:
            addrs, dims = self._checked_args(entry, arrays)
        else:
            for i in range(n_checked, len(arrays)):   # the caller's fresh buffers
                a = arrays[i]
                try:
                    addrs.append(_addressof(_c_char.from_buffer(a)))
                except (TypeError, ValueError, BufferError):   # empty
                    addrs.append(a.ctypes.data)
                dims += a.shape
        rc = entry.cfunc(entry.pack_ptrs(*addrs), entry.pack_shapes(*dims))
        if rc:
            raise ValueError(self.error_text(entry, rc, arrays))

    @staticmethod
    def _checked_args(entry: _Entry, arrays) -> tuple[list, list]:
        """Pointers and dims of ``arrays``, checking each (ValueError naming the param)."""
        name = entry.name
        addrs, dims = [], []
        for i, a in enumerate(arrays):
            if type(a) is not np.ndarray and not isinstance(a, np.ndarray):
                raise ValueError(f"{name}: argument '{entry.param_names[i]}' (param {i}) must be "
                                 f"a numpy array, got {type(a).__name__}")
            if a.dtype != entry.dtypes[i] and not (entry.accept_bf16_bits[i] and (
                    a.dtype in (np.uint16, np.int16) or is_ml_dtypes_bfloat16(a.dtype))):
                raise ValueError(f"{name}: argument '{entry.param_names[i]}' (param {i}) has dtype "
                                 f"{a.dtype}, expected {entry.dtype_names[i]}")
            shape = a.shape
            if len(shape) != entry.ndims[i]:
                expected = [dim_to_str(dim_from_json(d)) for d in entry.meta["params"][i]["shape"]]
                raise ValueError(f"{name}: argument '{entry.param_names[i]}' (param {i}) has "
                                 f"{a.ndim} dims, expected {entry.ndims[i]} "
                                 f"(shape [{', '.join(expected)}]), got shape {tuple(shape)}")
            if not a.flags.c_contiguous:
                raise ValueError(f"{name}: argument '{entry.param_names[i]}' (param {i}) must be "
                                 "C-contiguous (use np.ascontiguousarray)")
            if entry.written[i] and not a.flags.writeable:
                raise ValueError(f"{name}: argument '{entry.param_names[i]}' (param {i}) is an "
                                 "output the function writes, but the array is read-only")
            addrs.append(_data_pointer(a))
            dims.extend(shape)
        return addrs, dims

    @staticmethod
    def error_text(entry: _Entry, rc: int, arrays) -> str:
        """The message of kernel ``entry``'s nonzero return code ``rc`` for ``arrays`` (anything with a
        ``shape`` per parameter): its error text, with the shape of the parameter the error names, and
        the value of each of the kernel's symbolic dims that the text names (:func:`_dim_values`)::

            pad: index out of range: expected 0 <= index < v0, where v0 = 2 (dim 0 of argument 'x')

        A kernel's dims are its own variables (``v0`` where the call's dim was an expression such as
        ``p + q``; shared kernels serve several call sites), so the text alone cannot say what they
        were; their values, read from the arrays, can."""
        if not 1 <= rc <= len(entry.errors):
            return f"{entry.name}: failed with unknown error code {rc}"
        msg = entry.errors[rc - 1]
        p = entry.error_params[rc - 1] if rc - 1 < len(entry.error_params) else -1
        text = f"{entry.name}: {msg}"
        if 0 <= p < len(arrays):
            text += f", got shape {tuple(arrays[p].shape)}"
        values = _dim_values(entry, msg, arrays)
        if values:
            text += ", where " + ", ".join(f"{v} = {n} (dim {d} of argument '{where}')"
                                           for v, (n, d, where) in values.items())
        return text
