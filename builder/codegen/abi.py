"""The calling convention of generated functions and their JSON metadata.

Every generated function is ``i32 @<name>(ptr %data, ptr %shapes)``:

* ``data``: array of ``void*``, one data pointer per buffer param, in param order;
* ``shapes``: array of ``i64``, the dims of every buffer param concatenated in param order.

The prologue binds each symbolic var from its first occurrence as a plain ``Var`` dim, then checks
every dim of every param (``n >= 0`` at a binding site, equality with the expected value
elsewhere: constants and expressions such as ``n * 2``). The first failing check ``k`` (1-based)
returns ``k`` before any buffer memory is touched; ``errors[k - 1]`` in the metadata is the
message, ``error_params[k - 1]`` the offending param (``-1`` for errors raised inside the body,
such as a failed intermediate allocation). ``0`` means success.

Metadata per function (JSON-able)::

    {"name": str, "params": [{"name", "dtype", "shape": [dim, ...], "written": bool}],
     "sym_vars": [str], "errors": [str], "error_params": [int]}

``written`` marks the params the function stores into (its outputs): the runtime refuses a
read-only array there.

A dim is an int or a tree ``["var", name]`` / ``[op, a, b]`` with op in ``add sub mul floordiv
floormod min max`` (see :func:`runtime.native.eval_dim`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from core.dtypes import DTYPES

from ..ir import expr as E
from ..ir.expr import PrimExpr, Var
from ..ir.printer import print_prim_expr
from ..ir.tir import Block, Buffer, BufferStore, PrimFunc, walk_stmt
from ..ir.tir.intrinsics import INTRINSICS

__all__ = ["SUPPORTED_DTYPES", "DimCheck", "Signature", "plan_signature", "dim_to_json"]

SUPPORTED_DTYPES = DTYPES   # every dtype of the IR (core.dtypes)

_OPS = {E.Add: "add", E.Sub: "sub", E.Mul: "mul", E.FloorDiv: "floordiv", E.FloorMod: "floormod",
        E.Min: "min", E.Max: "max"}


def dim_to_json(e: PrimExpr, names: dict | None = None):
    """Serialize an int64 dim expression: an ``int``, ``["var", name]`` or ``[op, a, b]``.

    ``names`` optionally maps Var -> the name to write. The dim is simplified once (ValueError past
    ``builder.ir.arith.MAX_EXPR_NODES`` / ``MAX_EXPR_DEPTH``) and walked without recursion, a shared
    subexpression serialized once. Raises ValueError for nodes outside ``+ - * // % min max``.
    """
    root = E.simplify(e)
    names = names or {}
    memo: dict[int, tuple[PrimExpr, object]] = {}   # id -> (node kept alive, its JSON)
    stack: list[tuple[PrimExpr, bool]] = [(root, False)]
    while stack:
        node, ready = stack.pop()
        if id(node) in memo:
            continue
        if isinstance(node, E.IntImm):
            out: object = node.value
        elif isinstance(node, Var):
            out = ["var", names.get(node, node.name)]
        else:
            op = _OPS.get(type(node))
            if op is None:
                raise ValueError(f"cannot serialize the shape expression {node} (only + - * // % min max)")
            if not ready:
                stack += [(node, True), (node.b, False), (node.a, False)]  # type: ignore[attr-defined]
                continue
            out = [op, memo[id(node.a)][1], memo[id(node.b)][1]]  # type: ignore[attr-defined]
        memo[id(node)] = (node, out)
    return memo[id(root)][1]


@dataclass
class DimCheck:
    """One prologue check: ``shapes[offset]`` (param ``param`` dim ``dim``) against ``expected``.

    ``kind`` is ``"nonneg"`` (a binding site: the value must be ``>= 0``) or ``"equal"``.
    """

    param: int
    dim: int
    offset: int
    expected: PrimExpr
    kind: str
    message: str


@dataclass
class Signature:
    """The planned prologue of a function: where each param's dims start in ``shapes``, which
    entry binds each symbolic var, and the ordered checks (error code = index + 1)."""

    name: str
    params: list[Buffer]
    offsets: list[int]
    binds: list[tuple[Var, int]]
    checks: list[DimCheck]
    sym_vars: list[Var]
    sym_names: dict = field(default_factory=dict)
    written: list[bool] = field(default_factory=list)

    def metadata(self, extra_errors: list[str] = ()) -> dict:
        """The JSON-able metadata; ``extra_errors`` are body errors numbered after the checks."""
        return {
            "name": self.name,
            "params": [
                {"name": p.name, "dtype": p.dtype,
                 "shape": [dim_to_json(d, self.sym_names) for d in p.shape],
                 "written": bool(self.written[i]) if i < len(self.written) else False}
                for i, p in enumerate(self.params)
            ],
            "sym_vars": [self.sym_names[v] for v in self.sym_vars],
            "errors": [c.message for c in self.checks] + list(extra_errors),
            "error_params": [c.param for c in self.checks] + [-1] * len(extra_errors),
        }


def plan_signature(func: PrimFunc, name: str | None = None) -> Signature:
    """Plan the prologue of ``func`` (see the module docstring).

    Raises ValueError for an unsupported param dtype, or a symbolic var that never appears as a
    plain dim (it could not be bound from the shapes).
    """
    name = name or func.name
    sym_vars = func.sym_vars
    sym_names: dict = {}
    used: set[str] = set()
    for v in sym_vars:
        base, k, n = v.name, 0, v.name
        while n in used:
            k += 1
            n = f"{base}_{k}"
        used.add(n)
        sym_names[v] = n

    def text(e: PrimExpr) -> str:
        return print_prim_expr(e, lambda v: sym_names.get(v, v.name))

    offsets, binds, checks = [], [], []
    bound: dict = {}
    offset = 0
    for i, p in enumerate(func.params):
        if p.dtype not in SUPPORTED_DTYPES:
            raise ValueError(f"{name}: param '{p.name}' has unsupported dtype {p.dtype!r}")
        offsets.append(offset)
        for d, dim in enumerate(p.shape):
            where = f"argument '{p.name}' (param {i}) dim {d}"
            if isinstance(dim, Var) and dim not in bound:
                bound[dim] = f"argument '{p.name}' dim {d}"
                binds.append((dim, offset + d))
                checks.append(DimCheck(i, d, offset + d, dim, "nonneg",
                                       f"{where}: expected {text(dim)} >= 0"))
            else:
                origin = "".join(f", {text(v)} from {bound[v]}" for v in E.free_vars(dim)
                                 if v in bound)
                checks.append(DimCheck(i, d, offset + d, dim, "equal",
                                       f"{where}: expected {text(dim)}"
                                       + (f" ({origin[2:]})" if origin else "")))
        offset += p.ndim
    for v in sym_vars:
        if v not in bound:
            raise ValueError(f"{name}: symbolic var '{v.name}' never appears as a plain dim of a "
                             f"param, so it cannot be bound from the argument shapes")
    stored = _stored_buffers(func)
    return Signature(name, list(func.params), offsets, binds, checks, sym_vars, sym_names,
                     [id(p) in stored for p in func.params])


def _stored_buffers(func: PrimFunc) -> set[int]:
    """``id`` of every buffer ``func`` writes: BufferStore targets and block write regions."""
    out: set[int] = set()

    def visit(s) -> None:
        if isinstance(s, BufferStore):
            out.add(id(s.buffer))
        elif isinstance(s, Block):
            out.update(id(r.buffer) for r in s.writes)

    walk_stmt(func.body, visit)
    return out


#: C library functions generated code may call: the libm functions behind the intrinsics (LLVM lowers
#: ``llvm.exp.f64`` to a call of ``exp``, ``.f32`` to ``expf``), memory helpers LLVM emits, and the
#: thread pool's entry points. A kernel whose symbol had one of these names would be called instead
#: (a float64 ``exp`` kernel calling itself until the stack overflows).
RESERVED_SYMBOLS: frozenset[str] = frozenset(
    [name for i in INTRINSICS.values() if i.llvm for name in (i.llvm, i.llvm + "f")]
    + [name for i in INTRINSICS.values() if i.libm for name in i.libm]
    + ["memcpy", "memset", "memmove", "memcmp", "sincos", "sincosf", "exp10", "exp10f", "fmod", "fmodf",
       "fma", "fmaf", "ldexp", "ldexpf", "frexp", "frexpf", "abort", "mb_parallel_for", "mb_num_threads"])


def kernel_symbols(names: Iterable[str]) -> dict[str, str]:
    """The object-code symbol of each kernel name: the name itself, or ``<name>_kernel`` (then
    ``_kernel1``, ...) for a name in :data:`RESERVED_SYMBOLS`, never equal to another kernel's."""
    names = list(names)
    taken = set(names)
    out = {}
    for name in names:
        symbol = name
        if name in RESERVED_SYMBOLS:
            symbol, i = f"{name}_kernel", 0
            while symbol in taken:
                i += 1
                symbol = f"{name}_kernel{i}"
            taken.add(symbol)
        out[name] = symbol
    return out
