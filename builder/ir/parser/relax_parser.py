"""Parser of ``@R.function`` definitions (graph level)."""
from __future__ import annotations

import ast
from typing import Callable

import numpy as np

from .. import expr as E
from .. import relax as rx
from ..struct_info import (ObjectStructInfo, PrimStructInfo, ShapeStructInfo, StructInfo,
    TensorStructInfo, TupleStructInfo)
from .common import (RELAX_BINOPS, ParseError, call_name, dotted, expr_call, is_call,
    is_docstring, Literals, Source, sym_decl)
from .tir_parser import _PrimParser


class _RelaxFunctionParser:
    """One ``@R.function`` definition."""

    def __init__(self, src: Source, node: ast.FunctionDef, gvars: list[tuple[str, ast.AST]],
                 check: bool) -> None:
        self.src = src
        self.node = node
        self.gvars = gvars
        self.check = check
        self.vars: dict[str, rx.Var] = {}
        self.sym: dict[str, E.Var] = {}
        self.in_signature = False
        self.p = _PrimParser(src, self.lookup_sym)
        self.lit = Literals(src, self.p.prim)

    def lookup_sym(self, name: str, node: ast.AST) -> E.Var:
        if name in self.sym:
            return self.sym[name]
        if self.in_signature:
            v = E.Var(name, "int64")
            self.sym[name] = v
            return v
        raise self.src.error(node, f"undefined symbolic variable '{name}'")

    def parse(self, pure: bool) -> rx.Function:
        node = self.node
        for st in node.body:
            decl = sym_decl(st)
            if decl is not None:
                self.sym[decl[0]] = E.Var(decl[0], decl[1])
        a = node.args
        if a.vararg or a.kwarg or a.kwonlyargs or a.posonlyargs:
            raise self.src.error(node, "an R.function takes plain parameters only")
        params = []
        self.in_signature = True
        for arg in a.args:
            if arg.annotation is None:
                raise self.src.error(arg, f"parameter '{arg.arg}' needs a struct info annotation")
            var = rx.Var(arg.arg, self.sinfo(arg.annotation))
            self.vars[arg.arg] = var
            params.append(var)
        ret = self.sinfo(node.returns) if node.returns is not None else None
        self.in_signature = False
        attrs: dict = {}
        blocks: list[rx.BindingBlock] = []
        current: rx.BindingBlock | None = None
        result: rx.Expr | None = None
        body = node.body
        for i, st in enumerate(body):
            if sym_decl(st) is not None or is_docstring(st):
                continue
            if result is not None:
                raise self.src.error(st, "statement after `return`")
            call = expr_call(st, "R.func_attr")
            if call is not None:
                if len(call.args) != 1:
                    raise self.src.error(call, "R.func_attr takes one dict")
                attrs.update(self.lit.value(call.args[0]))
                continue
            if isinstance(st, ast.With):
                if len(st.items) != 1 or not is_call(st.items[0].context_expr, "R.dataflow"):
                    raise self.src.error(st, f"unsupported with-statement `{ast.unparse(st.items[0])}`")
                current = None
                blocks.append(self.dataflow(st))
                continue
            if isinstance(st, (ast.Assign, ast.AnnAssign)):
                if current is None:
                    current = rx.BindingBlock()
                    blocks.append(current)
                current.bindings.append(self.binding(st, dataflow=False, outputs=set()))
                continue
            if isinstance(st, ast.Return):
                if st.value is None:
                    raise self.src.error(st, "an R.function must return a value")
                result = self.expr(st.value, top=True)
                continue
            raise self.src.error(st, f"unsupported statement `{ast.unparse(st).splitlines()[0]}`")
        if result is None:
            raise self.src.error(node, f"function '{node.name}' has no return statement")
        seq = rx.SeqExpr(blocks, result)
        if ret is not None and self.check and seq.struct_info is not None:
            if not _compatible(ret, seq.struct_info):
                raise self.src.error(node.returns, f"return annotation {_show(ret)} does not match the "
                                                   f"returned value's {_show(seq.struct_info)}")
        return rx.Function(params, seq, ret, attrs, pure, name=node.name)

    # -- struct info
    def sinfo(self, node: ast.AST) -> StructInfo:
        name = dotted(node) if not isinstance(node, ast.Call) else call_name(node)
        args = node.args if isinstance(node, ast.Call) else []
        kw = {k.arg: k.value for k in node.keywords} if isinstance(node, ast.Call) else {}
        if name == "R.Object":
            return ObjectStructInfo()
        if name == "R.Tensor":
            shape_node = args[0] if args else kw.get("shape")
            dtype_node = args[1] if len(args) > 1 else kw.get("dtype")
            dtype = self.p._string(dtype_node) if dtype_node is not None else "void"
            ndim = self.lit.value(kw["ndim"]) if "ndim" in kw else -1
            if shape_node is None or (isinstance(shape_node, ast.Constant) and shape_node.value is None):
                return self._build(node, lambda: TensorStructInfo(None, dtype, ndim))
            dims = self.dims(shape_node)
            return self._build(node, lambda: TensorStructInfo(dims, dtype))
        if name == "R.Tuple":
            fields = args[0].elts if len(args) == 1 and isinstance(args[0], (ast.List, ast.Tuple)) else args
            return TupleStructInfo([self.sinfo(f) for f in fields])
        if name == "R.Shape":
            if args and not (isinstance(args[0], ast.Constant) and args[0].value is None):
                dims = self.dims(args[0])
                return self._build(node, lambda: ShapeStructInfo(dims))
            ndim = self.lit.value(kw["ndim"]) if "ndim" in kw else -1
            return ShapeStructInfo(None, ndim)
        if name == "R.Prim":
            dtype_node = args[0] if args else kw.get("dtype")
            return PrimStructInfo(self.p._string(dtype_node) if dtype_node is not None else "int64")
        raise self.src.error(node, f"unknown struct info `{ast.unparse(node)}`")

    def _build(self, node: ast.AST, make: Callable[[], StructInfo]) -> StructInfo:
        try:
            return make()
        except (TypeError, ValueError) as exc:
            raise self.src.error(node, str(exc)) from None

    def dims(self, node: ast.AST) -> list:
        if not isinstance(node, (ast.Tuple, ast.List)):
            raise self.src.error(node, f"expected a shape tuple, got `{ast.unparse(node)}`")
        return [self.dim(d) for d in node.elts]

    def dim(self, node: ast.AST):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            try:
                inner = ast.parse(node.value.strip(), mode="eval").body
            except SyntaxError:
                raise self.src.error(node, f"invalid symbolic dim {node.value!r}") from None
            ast.copy_location(inner, node)
            for sub in ast.walk(inner):
                if hasattr(sub, "lineno"):
                    sub.lineno, sub.col_offset = node.lineno, node.col_offset  # type: ignore[attr-defined]
            node = inner
        if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
            return node.value
        e = self.p.prim(node, "int64")
        if not E.is_int_dtype(e.dtype) or e.dtype == "bool":
            raise self.src.error(node, f"a shape dim must be an integer expression, got `{ast.unparse(node)}`")
        return e

    # -- blocks and bindings
    def dataflow(self, st: ast.With) -> rx.DataflowBlock:
        outputs: list[str] = []
        out_node = None
        stmts = []
        for s in st.body:
            call = expr_call(s, "R.output")
            if call is not None:
                if out_node is not None:
                    raise self.src.error(s, "R.output appears twice in one dataflow block")
                out_node = call
                for a in call.args:
                    if not isinstance(a, ast.Name):
                        raise self.src.error(a, "R.output takes variable names")
                    outputs.append(a.id)
                continue
            if out_node is not None:
                raise self.src.error(s, "R.output must be the last statement of a dataflow block")
            stmts.append(s)
        # the last binding of each output name is the (non-dataflow) output var
        last: dict[str, int] = {}
        for i, s in enumerate(stmts):
            tgt = s.target if isinstance(s, ast.AnnAssign) else (s.targets[0] if isinstance(s, ast.Assign) and len(s.targets) == 1 else None)
            if isinstance(tgt, ast.Name):
                last[tgt.id] = i
        for name, a in zip(outputs, out_node.args if out_node else []):
            if name not in last:
                raise self.src.error(a, f"R.output names '{name}', which this dataflow block does not bind")
        out_idx = {last[n] for n in outputs}
        block = rx.DataflowBlock()
        before = dict(self.vars)
        for i, s in enumerate(stmts):
            if not isinstance(s, (ast.Assign, ast.AnnAssign)):
                raise self.src.error(s, f"unsupported statement in a dataflow block `{ast.unparse(s).splitlines()[0]}`")
            block.bindings.append(self.binding(s, dataflow=True, outputs={i} & out_idx))
        # dataflow vars are not visible after the block
        visible = dict(before)
        for b in block.bindings:
            if not isinstance(b.var, rx.DataflowVar):
                visible[b.var.name_hint] = b.var
        self.vars = visible
        return block

    def binding(self, st: ast.stmt, dataflow: bool, outputs: set) -> rx.VarBinding:
        if isinstance(st, ast.AnnAssign):
            target, ann, value_node = st.target, st.annotation, st.value
        else:
            assert isinstance(st, ast.Assign)
            if len(st.targets) != 1:
                raise self.src.error(st, "chained assignment is not supported")
            target, ann, value_node = st.targets[0], None, st.value
        if not isinstance(target, ast.Name):
            raise self.src.error(target, "a binding assigns one name")
        if value_node is None:
            raise self.src.error(st, "a binding needs a value")
        value = self.expr(value_node, top=True)
        sinfo = value.struct_info
        if ann is not None:
            declared = self.sinfo(ann)
            if sinfo is None:
                value.struct_info = declared
            elif self.check and not _compatible(declared, sinfo):
                raise self.src.error(ann, f"annotation {_show(declared)} does not match the inferred "
                                          f"{_show(sinfo)} of `{ast.unparse(value_node)}`")
            sinfo = declared
        if sinfo is None:
            raise self.src.error(value_node, f"cannot infer the struct info of `{ast.unparse(value_node)}`; "
                                             f"annotate the binding")
        cls = rx.DataflowVar if dataflow and not outputs else rx.Var
        var = cls(target.id, sinfo)
        self.vars[target.id] = var
        return rx.VarBinding(var, value)

    # -- expressions
    def expr(self, node: ast.AST, top: bool = False) -> rx.Expr:
        try:
            return self._expr(node)
        except ParseError:
            raise
        except (ValueError, TypeError, KeyError, IndexError) as exc:
            msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
            raise self.src.error(node, str(msg)) from None

    def _expr(self, node: ast.AST) -> rx.Expr:
        if isinstance(node, ast.Name):
            if node.id in self.vars:
                return self.vars[node.id]
            if node.id in self.sym:
                raise self.src.error(node, f"'{node.id}' is a symbolic variable, not a value")
            if node.id == "metadata":
                raise self.src.error(node, "the text refers to constants it does not contain (printed as "
                                           "metadata[...]); print the module with script(show_meta=True) to "
                                           "parse it back")
            raise self.src.error(node, f"undefined variable '{node.id}'")
        if isinstance(node, ast.Tuple):
            return rx.Tuple([self.expr(e) for e in node.elts])
        if isinstance(node, ast.Subscript):
            tup = self.expr(node.value)
            idx = self.lit.value(node.slice)
            if not isinstance(idx, int) or isinstance(idx, bool):
                raise self.src.error(node.slice, "a tuple index must be an integer")
            return rx.TupleGetItem(tup, idx)
        if isinstance(node, ast.Attribute):
            name = dotted(node)
            if name is not None and name.startswith("cls."):
                return self.gvar(node, name[4:])
            raise self.src.error(node, f"unsupported expression `{ast.unparse(node)}`")
        if isinstance(node, ast.BinOp) and type(node.op) in RELAX_BINOPS:
            op = rx.Op.get(RELAX_BINOPS[type(node.op)])
            return rx.Call(op, [self.expr(node.left), self.expr(node.right)])
        if isinstance(node, ast.Call):
            return self.call(node)
        raise self.src.error(node, f"unsupported expression `{ast.unparse(node)}`")

    def gvar(self, node: ast.AST, name: str) -> rx.GlobalVar:
        self.gvars.append((name, node))
        return rx.GlobalVar(name)

    def call(self, node: ast.Call) -> rx.Expr:
        name = call_name(node)
        if name is None:
            raise self.src.error(node, f"unsupported call `{ast.unparse(node.func)}`")
        if name.startswith("cls."):
            gv = self.gvar(node.func, name[4:])
            if node.keywords:
                raise self.src.error(node, "calls of module functions take positional arguments")
            return rx.Call(gv, [self.expr(a) for a in node.args])
        if not name.startswith("R."):
            raise self.src.error(node, f"unsupported call `{name}`")
        fn = name[2:]
        args, kw = node.args, {k.arg: k.value for k in node.keywords}
        if None in kw:
            raise self.src.error(node, "`**` arguments are not supported")
        if fn == "shape":
            if len(args) != 1:
                raise self.src.error(node, "R.shape takes one list of dims")
            return rx.ShapeExpr(self.dims(args[0]))
        if fn == "const":
            return self.const(node, args, kw)
        if fn == "prim_value":
            if len(args) != 1:
                raise self.src.error(node, "R.prim_value takes one value")
            value = self.p.prim(args[0], "int64")
            return rx.PrimValue(value, value.dtype)
        if fn == "str":
            return rx.StringImm(self.p._string(args[0]))
        if fn == "tuple":
            return rx.Tuple([self.expr(a) for a in args])
        if fn == "ExternFunc":
            return rx.ExternFunc(self.p._string(args[0]))
        if fn == "call_packed":
            if not args:
                raise self.src.error(node, "R.call_packed needs the function name")
            sinfo_args = self._sinfo_list(kw.pop("sinfo_args")) if "sinfo_args" in kw else []
            if kw:
                raise self.src.error(node, f"unsupported R.call_packed argument '{next(iter(kw))}'")
            call = rx.Call(rx.ExternFunc(self.p._string(args[0])), [self.expr(a) for a in args[1:]],
                           sinfo_args=sinfo_args)
            if sinfo_args and call.struct_info is None:
                call.struct_info = sinfo_args[0]
            return call
        if fn == "call_tir":
            if len(args) not in (2, 3):
                raise self.src.error(node, "expected R.call_tir(cls.func, (args...), out_sinfo=...)")
            callee = self.expr(args[0])
            if not isinstance(callee, rx.GlobalVar):
                raise self.src.error(args[0], "R.call_tir calls a module function `cls.name`")
            out = args[2] if len(args) == 3 else kw.pop("out_sinfo", None)
            if out is None:
                raise self.src.error(node, "R.call_tir needs out_sinfo")
            if kw:
                raise self.src.error(node, f"unsupported R.call_tir argument '{next(iter(kw))}'")
            tup = self.expr(args[1])
            if not isinstance(tup, rx.Tuple):
                raise self.src.error(args[1], "the arguments of R.call_tir are a tuple `(a, b)`")
            return rx.Call(rx.Op.get("call_tir"), [callee, tup], sinfo_args=self._sinfo_list(out))
        if fn == "dtype":
            return rx.DataTypeImm(self.p._string(args[0]))
        op = _lookup_op(fn)
        if op is None:
            raise self.src.error(node.func, f"unknown operator '{name}' (no relax.{fn} is registered)")
        sinfo_args = []
        for key in ("out_sinfo", "sinfo_args"):
            if key in kw:
                sinfo_args = self._sinfo_list(kw.pop(key))
        attrs = {k: self.lit.value(v) for k, v in kw.items()}
        # a bare string argument names a runtime function (R.call_dps_packed("f", ...))
        call_args = [rx.ExternFunc(a.value) if isinstance(a, ast.Constant) and isinstance(a.value, str)
                     else self._int_arg(a) if i in op.int_args and _is_int_literal(a)
                     else self.expr(a) for i, a in enumerate(args)]
        return rx.Call(op, call_args, attrs, sinfo_args=sinfo_args)

    def _int_arg(self, node: ast.AST) -> rx.PrimValue:
        """A plain int (``1``, ``-1``) at one of an op's ``int_args`` positions (``R.triu(x, 1)``, as
        TVM 0.27 prints it): the int64 ``R.prim_value`` it stands for."""
        if isinstance(node, ast.UnaryOp):
            return rx.PrimValue(-node.operand.value, "int64")
        return rx.PrimValue(node.value, "int64")

    def _sinfo_list(self, node: ast.AST) -> list[StructInfo]:
        if isinstance(node, (ast.List, ast.Tuple)):
            return [self.sinfo(e) for e in node.elts]
        return [self.sinfo(node)]

    def const(self, node: ast.Call, args: list, kw: dict) -> rx.Constant:
        if not args:
            raise self.src.error(node, "R.const needs a value")
        value = self.lit.value(args[0])
        dtype_node = args[1] if len(args) > 1 else kw.get("dtype")
        dtype = self.p._string(dtype_node) if dtype_node is not None else None
        if dtype is None:
            return rx.const(value)
        try:
            return rx.Constant(np.array(value), dtype)
        except (TypeError, ValueError) as exc:
            raise self.src.error(node, f"invalid constant: {exc}") from None


def _is_int_literal(node: ast.AST) -> bool:
    """True for ``1`` or ``-1`` in the text (a Python int, not a bool)."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        node = node.operand
    return isinstance(node, ast.Constant) and type(node.value) is int


def _lookup_op(name: str) -> rx.Op | None:
    """The registered op ``relax.<name>`` (the op library, ``builder/ops``, registers every op when
    ``builder`` is imported), or None."""
    try:
        return rx.Op.get("relax." + name)
    except KeyError:
        return None


def _show(s: StructInfo) -> str:
    from ..printer import print_struct_info

    return print_struct_info(s)


def _compatible(declared: StructInfo, inferred: StructInfo) -> bool:
    """True when ``declared`` equals ``inferred`` or is a less specific description of it."""
    if declared.same_as(inferred):
        return True
    if isinstance(declared, ObjectStructInfo):
        return True
    if isinstance(declared, TensorStructInfo) and isinstance(inferred, TensorStructInfo):
        if declared.dtype not in ("void", inferred.dtype):
            return False
        if declared.shape is None:
            return declared.ndim in (-1, inferred.ndim)
        return False
    if isinstance(declared, ShapeStructInfo) and isinstance(inferred, ShapeStructInfo):
        return declared.values is None and declared.ndim in (-1, inferred.ndim)
    if isinstance(declared, TupleStructInfo) and isinstance(inferred, TupleStructInfo):
        return len(declared.fields) == len(inferred.fields) and all(
            _compatible(a, b) for a, b in zip(declared.fields, inferred.fields))
    if isinstance(declared, PrimStructInfo) and isinstance(inferred, PrimStructInfo):
        return declared.dtype == inferred.dtype
    return False


# =============================================================================================
# module
