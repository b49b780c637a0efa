"""Parser for the TVMScript subset that :mod:`builder.ir.printer` and :mod:`builder.ir.tir` print.

``parse(text) -> IRModule`` reads the text with :func:`ast.parse` (it is never executed) and
rebuilds the module through the ordinary constructors, so every call's struct info is inferred
again by its op's registered rule and checked against the printed annotation.

Graph level (``@R.function``): parameters with ``R.Tensor`` / ``R.Tuple`` / ``R.Object`` /
``R.Shape`` / ``R.Prim`` annotations (symbolic dims quoted in signatures, plain inside the
body; a name that no ``n = T.int64()`` declares is defined by the signature), ``n = T.int64()``
declarations, ``R.func_attr({...})``, ``with R.dataflow():`` ...
``R.output(...)``, bindings ``name: sinfo = value`` (the annotation may be left out), tuples,
``x[i]``, ``R.shape([...])``, ``R.const(value, "dtype")``, ``R.prim_value``, ``R.str``,
``R.call_tir(cls.f, (args,), out_sinfo=...)``, ``R.call_packed``, ``cls.f(args)`` and every
registered op by its printed name (``R.nn.relu`` is ``relax.nn.relu``; keyword arguments are
the op's attributes). ``@R.function(pure=False)`` marks an impure function.

Loop level (``@T.prim_func``): ``T.Buffer[(dims), "dtype"]`` parameters, ``T.func_attr``,
the root block (printed as the comment ``# with T.block("root")``, which is why the parser
also looks at comment lines), ``T.alloc_buffer``, ``T.grid`` / ``T.serial`` / ``T.parallel`` /
``T.vectorized`` / ``T.unroll`` loops, ``with T.block(...)`` with ``T.axis.remap`` /
``T.axis.spatial`` / ``T.axis.reduce``, ``T.where``, ``T.reads`` / ``T.writes``,
``T.block_attr``, ``with T.init():``, stores, ``if`` / ``else``, ``x: T.int64 = v`` lets,
``T.evaluate`` and the scalar expressions of :func:`builder.ir.printer.print_prim_expr`
(``T.float32(0)``, ``T.Cast``, ``T.Select``, ``T.max``, intrinsics such as ``T.exp``).

Errors raise :class:`ParseError`, whose message starts with ``line L, column C`` (both
1-based) and quotes the offending source line.

Known limits (the printer loses the information): consecutive non-dataflow binding blocks come
back as one block; an ``Allocate`` / ``LetStmt`` covers every statement that follows it in its
statement list; a bare integer prints the same for int32 and int64 and parses as int64 unless
the other operand of its expression says otherwise.
"""
from __future__ import annotations

import ast
from typing import Sequence

from .. import relax as rx
from .. import tir
from .common import ParseError, call_name, dotted, is_docstring, Source
from .relax_parser import _RelaxFunctionParser
from .tir_parser import _PrimFuncParser

__all__ = ["parse", "parse_prim_func", "ParseError"]


def _decorator_kind(src: Source, fn: ast.FunctionDef) -> tuple[str, bool]:
    """("relax" | "tir", pure) from a function's decorators."""
    if len(fn.decorator_list) != 1:
        raise src.error(fn, f"function '{fn.name}' needs exactly one decorator: @R.function or @T.prim_func")
    dec = fn.decorator_list[0]
    name = dotted(dec) if not isinstance(dec, ast.Call) else call_name(dec)
    if name in ("R.function", "relax.function"):
        pure = True
        if isinstance(dec, ast.Call):
            if dec.args:
                raise src.error(dec, "@R.function takes keyword arguments only")
            for kw in dec.keywords:
                if kw.arg == "pure" and isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, bool):
                    pure = kw.value.value
                elif kw.arg != "private":
                    raise src.error(kw, f"unsupported @R.function argument '{kw.arg}'")
        return "relax", pure
    if name in ("T.prim_func", "tir.prim_func"):
        if isinstance(dec, ast.Call) and (dec.args or any(k.arg != "private" for k in dec.keywords)):
            raise src.error(dec, "unsupported @T.prim_func arguments")
        return "tir", True
    raise src.error(dec, f"unknown decorator `@{ast.unparse(dec)}`; expected @R.function or @T.prim_func")


def _parse_functions(src: Source, defs: Sequence[ast.FunctionDef], check: bool) -> rx.IRModule:
    mod = rx.IRModule()
    gvars: list[tuple[str, ast.AST]] = []
    for fn in defs:
        if fn.name in mod.functions:
            raise src.error(fn, f"function '{fn.name}' is defined twice")
        kind, pure = _decorator_kind(src, fn)
        if kind == "tir":
            mod[fn.name] = _PrimFuncParser(src, fn).parse()
        else:
            mod[fn.name] = _RelaxFunctionParser(src, fn, gvars, check).parse(pure)
    for name, node in gvars:
        if name not in mod.functions:
            raise src.error(node, f"the module has no function '{name}'")
    return mod


def parse(text: str, check_struct_info: bool = True) -> rx.IRModule:
    """Parse TVMScript ``text`` (as :meth:`IRModule.script` prints it) into an IRModule.

    The text is an ``@I.ir_module`` class of ``@R.function`` / ``@T.prim_func`` definitions,
    or such definitions at top level (then each becomes a module function under its name).
    Calls are rebuilt through the op registry, so struct info is inferred again; with
    ``check_struct_info`` (the default) each binding's annotation must equal the inferred
    struct info or be a less specific form of it. Raises :class:`ParseError` naming the line
    and column of the first problem.
    """
    src = Source(text)
    try:
        tree = ast.parse(text)
    except SyntaxError as exc:
        line = exc.lineno or 1
        raise ParseError(f"invalid syntax: {exc.msg}", line, exc.offset or 1,
                         src.lines[line - 1] if 0 < line <= len(src.lines) else None) from None
    classes = []
    defs = []
    for st in tree.body:
        if isinstance(st, (ast.Import, ast.ImportFrom)) or is_docstring(st):
            continue
        if isinstance(st, ast.ClassDef):
            classes.append(st)
        elif isinstance(st, ast.FunctionDef):
            defs.append(st)
        else:
            raise src.error(st, f"unexpected top-level statement `{ast.unparse(st).splitlines()[0]}`")
    if classes and defs:
        raise src.error(defs[0], "top-level functions next to an ir_module class")
    if len(classes) > 1:
        raise src.error(classes[1], "more than one ir_module class")
    if classes:
        cls = classes[0]
        decos = [dotted(d) for d in cls.decorator_list]
        if decos not in (["I.ir_module"], ["tvm.script.ir_module"], ["ir_module"]):
            raise src.error(cls, f"class '{cls.name}' needs the @I.ir_module decorator")
        defs = []
        for st in cls.body:
            if is_docstring(st):
                continue
            if not isinstance(st, ast.FunctionDef):
                raise src.error(st, f"unexpected statement in the module class `{ast.unparse(st).splitlines()[0]}`")
            defs.append(st)
    return _parse_functions(src, defs, check_struct_info)


def parse_prim_func(text: str) -> tir.PrimFunc:
    """Parse the text of one ``@T.prim_func`` (as :meth:`PrimFunc.script` prints it).

    Raises :class:`ParseError` when the text holds anything else than one prim_func.
    """
    mod = parse(text)
    funcs = list(mod.functions.values())
    if len(funcs) != 1 or not isinstance(funcs[0], tir.PrimFunc):
        raise ParseError("expected exactly one @T.prim_func", 1, 1)
    return funcs[0]
