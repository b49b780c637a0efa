"""The ``forward:`` language of recipes: the static checker of a text and its interpreter.

A block's (or a function's) ``forward`` text is checked once per block type (:func:`parse_forward`) and run
each time the block is called (:class:`BlockModule`; the model itself is a :class:`RecipeModule`, one method per
function of ``functions:``); :mod:`builder.recipe` builds the module tree these run on.

Every ``forward`` text is Python syntax, parsed with :mod:`ast` and checked against a whitelist -- it is
never evaluated by Python. Allowed:

- statements: ``name = expr``, ``a, b = expr`` (tuple unpacking), and a final ``return expr``
  (a value or a tuple of values);
- expressions: names (inputs, earlier assignments, and the symbolic dims of the inputs' shapes, such as
  ``batch`` or ``seq``, whose values are symbolic ints), calls of layers (``gate_proj(x)``; a repeated
  layer is a chain, ``layers(h, mask)``, or one copy, ``layers[0](h)``; a built-in layer takes tensors,
  numbers, symbolic ints, None, the KV cache, and strings where its ``forward`` declares a ``str``
  parameter, ``kv(q, k, v, causal_mask="BottomRight")``) and of the functional ops
  (``silu(x)``, ``softmax(x, axis=-1)``, ``reshape(x, [batch, seq, 12, 32])``; ``build --list-ops``
  lists them; ``name="gate"`` is the result's name hint in the printed IR, an identifier as TVM's name
  hints are), the operators ``+ - * / @`` (and ``//``, ``%`` between symbolic ints), unary ``-``,
  one comparison (``x > 0``: a boolean tensor), constants (numbers, ``inf`` (``-inf``: unary minus), strings,
  ``True`` / ``False`` / ``None``), indexing of tuples with an integer (``parts[0]``), slicing of tensors
  (``h[:, -1, :]``, ``x[..., 1:seq]``), and list / tuple literals as op arguments;
- a layer's parameters as values (``patch.weight``, ``layers[0].bias``, ``attn.q_proj.weight``: only those the
  layer registered) and the name of a ``Parameter`` layer, which is its tensor (``cls``, never called).

Anything else (other attribute access, comprehensions, lambdas, imports, ...) is a recipe error that
cites ``file:line:column`` inside the ``forward`` text, as are unknown names, wrong op
arguments and shape/dtype mismatches found while tracing.

Bounds (:mod:`core.limits`): each text is at most ``MAX_FORWARD_CHARS`` long, one expression nests at
most ``MAX_EXPRESSION_DEPTH`` deep (checked without recursion; the checker and the interpreter recurse
only that deep, any number of statements run in a loop), integer constants fit int64, a number combined
with a tensor fits the tensor's dtype (a finite float that would become inf is refused), no result with
static sizes may take more than ``MAX_TENSOR_BYTES``, and a recipe's functions
together trace at most ``MAX_TRACED_CALLS`` layer, block and op calls (counted while tracing: calls of a
block that calls its layers more than once multiply).
"""
from __future__ import annotations

import ast
import contextvars
import difflib
import inspect
import math
import operator
from typing import Any, Callable

from core.dtypes import numpy_dtype
from core.limits import MAX_EXPRESSION_DEPTH, MAX_FORWARD_CHARS, MAX_TENSOR_BYTES, MAX_TRACED_CALLS
from core.messages import shorten
from schemas import Recipe, RecipeError
from schemas.models import is_identifier
from schemas.source import FieldPath

from . import nn
from .nn.op.common import REFUSE_FLOAT_OVERFLOW
from .ir import expr as E

__all__ = ["RecipeModule", "BlockModule", "FORWARD_OPS", "parse_forward"]

__all__ = ["instantiate", "RecipeModule", "BlockModule", "FORWARD_OPS", "parse_forward", "MAX_MODULES"]

def size(x: nn.Tensor, axis: int):
    """The size of ``x`` along ``axis`` (PyTorch's ``x.size(axis)``): an int, or a symbolic int for a
    symbolic dim (usable in shapes, ``arange`` and arithmetic). Raises ValueError for an axis out of range."""
    if not isinstance(x, nn.Tensor) or type(axis) is not int:
        raise TypeError(f"size(x, axis) takes a tensor and an integer axis, got {_describe(x)}, {_describe(axis)}")
    if not -x.ndim <= axis < x.ndim:
        raise ValueError(f"size: axis {axis} is out of range for a {x.ndim}-D tensor")
    return x.shape[axis]


#: functional ops callable from a recipe's ``forward`` text: :func:`builder.nn.op.recipe_functions` (the
#: ``nn.op`` function of every op record marked ``in_recipes`` and the composites marked
#: ``@recipe_function``), and :func:`size`.
FORWARD_OPS: dict[str, Callable] = {**nn.op.recipe_functions(), "size": size}


_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.MatMult: operator.matmul, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod}
_SYMBOLS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.MatMult: "@", ast.FloorDiv: "//",
            ast.Mod: "%"}
_COMPARE = {ast.Lt: "less", ast.LtE: "less_equal", ast.Gt: "greater", ast.GtE: "greater_equal",
            ast.Eq: "equal", ast.NotEq: "not_equal"}


#: Names a layer, an input or a function may not take: attributes of nn.Module (a layer named
#: ``named_parameters`` or ``__dict__`` would replace it) and ``forward``. Function names may not be
#: ``PRINTER_RESERVED`` either (the printed module would define ``R`` and shadow the ``relax`` alias;
#: variables with those names are renamed by the printer, functions keep their names).
_RESERVED = set(dir(nn.Module)) | {"forward"}


_LITERALS = {"inf": math.inf}
"""Names that are float constants in forward text (``where(mask, x, -inf)``) where no input, symbolic dim or
assignment has the name."""


def _reserved(name: str) -> bool:
    return name in _RESERVED or (name.startswith("__") and name.endswith("__"))


class _ForwardError(Exception):
    """A problem in forward text at ``line`` / ``col`` of the text at ``path`` (set by the interpreter
    running that text when the raiser did not know it)."""

    def __init__(self, node: ast.AST | None, message: str, line: int | None = None, col: int | None = None,
                 path: FieldPath | None = None):
        super().__init__(message)
        self.message = message
        self.line = line if line is not None else getattr(node, "lineno", 1)
        self.col = col if col is not None else getattr(node, "col_offset", 0)
        self.path = path


def _error(recipe: Recipe, err: _ForwardError, default_path: FieldPath) -> RecipeError:
    from schemas import RecipeIssue
    from schemas.source import format_path

    src = recipe.source
    path = err.path or default_path
    pos = src.text_position(path, err.line, err.col)
    if pos is None:
        pos = src.position(path) or (None, None)
    return RecipeError([RecipeIssue(src.file_of(path), pos[0], pos[1], format_path(path), err.message)])


def _suggest(name: str, candidates) -> str:
    close = difflib.get_close_matches(name, list(candidates), n=3)
    return f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""


def parse_forward(text: str, inputs: list[str], layers: list[str], dims: set[str] | frozenset = frozenset(),
                  params: set[str] | frozenset = frozenset()) -> ast.Module:
    """Parse and statically check ``forward`` text. Raises ``_ForwardError`` with a position.

    Checks: syntax, whitelisted node types, every name defined before use (``inputs``, assignments, symbolic
    ``dims``, layers and ops only as callees, ``params``: Parameter layers, as values), ``layer.param``, a ``return``.
    """
    if len(text) > MAX_FORWARD_CHARS:
        raise _ForwardError(None, f"forward is {len(text):,} characters long, more than the "
                                  f"{MAX_FORWARD_CHARS:,} allowed", 1, 0)
    try:
        tree = ast.parse(text, mode="exec")
    except SyntaxError as exc:
        raise _ForwardError(None, f"invalid forward syntax: {exc.msg}", exc.lineno or 1,
                            max((exc.offset or 1) - 1, 0)) from None
    except (RecursionError, MemoryError, ValueError) as exc:   # nesting beyond Python's parser, a NUL
        raise _ForwardError(None, f"forward cannot be parsed: {str(exc) or type(exc).__name__}", 1, 0) from None
    _check_depth(tree)
    if not tree.body or not isinstance(tree.body[-1], ast.Return):
        last = tree.body[-1] if tree.body else None
        raise _ForwardError(last, "forward must end with a `return` statement")
    checker = _Checker(set(inputs) | set(dims), set(layers), set(params))
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign):
            if len(stmt.targets) != 1:
                raise _ForwardError(stmt, "chained assignment is not allowed in forward")
            checker.check(stmt.value)
            target = stmt.targets[0]
            names = target.elts if isinstance(target, ast.Tuple) else [target]
            for t in names:
                if not isinstance(t, ast.Name):
                    raise _ForwardError(t, "only plain names can be assigned in forward")
                if t.id in checker.layers or t.id in FORWARD_OPS:
                    raise _ForwardError(t, f"'{t.id}' is a {'layer' if t.id in checker.layers else 'function'}; "
                                           "assign to another name")
                checker.defined.add(t.id)
        elif isinstance(stmt, ast.Return):
            if stmt is not tree.body[-1]:
                raise _ForwardError(stmt, "`return` must be the last statement of forward")
            if stmt.value is None:
                raise _ForwardError(stmt, "forward must return a value")
            checker.check(stmt.value)
            for part in stmt.value.elts if isinstance(stmt.value, (ast.Tuple, ast.List)) else [stmt.value]:
                if isinstance(part, ast.Constant):
                    raise _ForwardError(part, f"forward returns the constant {part.value!r}; it must "
                                              "return tensors (a name, a layer or op call, or a tuple of them)")
        else:
            raise _ForwardError(stmt, f"{type(stmt).__name__} statements are not allowed in forward "
                                      "(only assignments and a final return)")
    return tree


def _check_depth(tree: ast.AST) -> None:
    """Raise ``_ForwardError`` at the first node nested deeper than ``MAX_EXPRESSION_DEPTH`` inside a
    statement (iterative, so any depth is measured without recursion)."""
    stack = [(tree, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_EXPRESSION_DEPTH:
            raise _ForwardError(node, f"expression nested more than {MAX_EXPRESSION_DEPTH} levels deep; "
                                      "write it as a sequence of assignments")
        inner = depth + 1 if isinstance(node, ast.expr) else 0
        stack.extend((child, inner) for child in ast.iter_child_nodes(node))


class _Checker:
    """The static whitelist of forward expressions (see the module docstring)."""

    def __init__(self, defined: set[str], layers: set[str], params: set[str] = frozenset()) -> None:
        self.defined, self.layers, self.params = defined, layers, params

    def check(self, node: ast.AST) -> None:
        method = getattr(self, "_" + type(node).__name__, None)
        if method is None:
            raise _ForwardError(node, f"{type(node).__name__} expressions are not allowed in forward")
        method(node)

    def _Name(self, node: ast.Name) -> None:
        if node.id in self.params:
            return
        if node.id not in self.defined and node.id not in _LITERALS:
            if node.id in self.layers or node.id in FORWARD_OPS:
                raise _ForwardError(node, f"'{node.id}' is a {'layer' if node.id in self.layers else 'function'}; "
                                          f"call it: {node.id}(...)")
            raise _ForwardError(node, f"unknown name '{node.id}'" + _suggest(node.id, self.defined | self.layers))

    def _Call(self, node: ast.Call) -> None:
        func = node.func
        callee = func.value if isinstance(func, ast.Subscript) else func
        if isinstance(callee, ast.Name) and callee.id in self.params:
            raise _ForwardError(func, f"'{callee.id}' is a Parameter layer, a tensor: use it as a value")
        if isinstance(func, ast.Subscript) and isinstance(func.value, ast.Name) and func.value.id in self.layers:
            if _const_int(func.slice) is None:
                raise _ForwardError(func, f"a copy of '{func.value.id}' is chosen with an integer constant "
                                          f"({func.value.id}[0](...))")
        elif not isinstance(func, ast.Name):
            raise _ForwardError(node, "only layers and ops can be called (e.g. `gate_proj(x)`, `silu(x)`)")
        elif func.id not in self.layers and func.id not in FORWARD_OPS:
            hint = "; infinities are the literals inf and -inf" if func.id == "float" else ""
            raise _ForwardError(func, f"unknown layer or op '{func.id}'"
                                + (hint or _suggest(func.id, self.layers | set(FORWARD_OPS))))
        for arg in node.args:
            if isinstance(arg, ast.Starred):
                raise _ForwardError(arg, "starred arguments are not allowed in forward")
            self.check(arg)
        for kw in node.keywords:
            if kw.arg is None:
                raise _ForwardError(kw.value, "**kwargs are not allowed in forward")
            self.check(kw.value)

    def _Attribute(self, node: ast.Attribute) -> None:
        """``fc.weight``, ``attn.q_proj.weight``, ``layers[0].bias``: the interpreter checks the parameter."""
        base = node
        while isinstance(base, ast.Attribute):
            base = base.value
        copy = isinstance(base, ast.Subscript) and _const_int(base.slice) is not None
        name = getattr(base.value if copy else base, "id", None)
        if name not in self.layers or name in self.params:
            raise _ForwardError(node, "attribute access reads a layer's parameter (fc.weight, layers[0].bias), "
                                      f"not {shorten(ast.unparse(node), 60)}" + _suggest(name or "", self.layers))

    def _BinOp(self, node: ast.BinOp) -> None:
        if type(node.op) not in _BINOPS:
            raise _ForwardError(node, f"operator {type(node.op).__name__} is not allowed in forward "
                                      "(use + - * / @, and // % between symbolic ints)")
        self.check(node.left)
        self.check(node.right)

    def _UnaryOp(self, node: ast.UnaryOp) -> None:
        if not isinstance(node.op, (ast.USub, ast.UAdd)):
            raise _ForwardError(node, f"unary {type(node.op).__name__} is not allowed in forward")
        self.check(node.operand)

    def _Compare(self, node: ast.Compare) -> None:
        if len(node.ops) != 1:
            raise _ForwardError(node, "only one comparison per expression (a < b, not a < b < c)")
        if type(node.ops[0]) not in _COMPARE:
            raise _ForwardError(node, f"comparison {type(node.ops[0]).__name__} is not allowed "
                                      "(use < <= > >= == !=)")
        self.check(node.left)
        self.check(node.comparators[0])

    def _Constant(self, node: ast.Constant) -> None:
        value = node.value
        if value is not None and value is not Ellipsis and not isinstance(value, (bool, int, float, str)):
            raise _ForwardError(node, f"constant {shorten(value)} is not allowed in forward")
        if type(value) is int and not -2 ** 63 <= value < 2 ** 63:
            raise _ForwardError(node, f"an integer constant must fit int64, got {shorten(value)}")

    def _Tuple(self, node: ast.Tuple | ast.List) -> None:
        for elt in node.elts:
            self.check(elt)

    _List = _Tuple

    def _Subscript(self, node: ast.Subscript) -> None:
        self.check(node.value)
        index = node.slice
        for part in index.elts if isinstance(index, ast.Tuple) else [index]:
            if isinstance(part, ast.Slice):
                for bound in (part.lower, part.upper, part.step):
                    if bound is not None:
                        self.check(bound)
            else:
                self.check(part)


class _Program:
    """One checked forward text: its AST, where it is in the recipe (for errors), and its arguments."""

    def __init__(self, tree: ast.Module, path: FieldPath, inputs: list[str], optional: set[str] = frozenset()):
        self.tree, self.path, self.inputs, self.optional = tree, path, list(inputs), set(optional)


class BlockModule(nn.Module):
    """An instance of a recipe block (or the model itself): its layers as attributes, ``forward``
    interpreting the block's checked forward text on the arguments (bound by name as the block's
    ``inputs`` say; an optional one is ``None`` when not passed)."""

    def __init__(self, block_type: str, layers: dict[str, nn.Module], program: _Program | None) -> None:
        for name, layer in layers.items():
            self.__dict__[name] = layer
        object.__setattr__(self, "_recipe_block", (block_type, program))

    def forward(self, *args, **kwargs):
        """Run the block's forward; raises ``_ForwardError`` (a recipe error at the text) for bad
        arguments or any problem while tracing."""
        block_type, program = self.__dict__["_recipe_block"]
        names = program.inputs
        if len(args) > len(names):
            raise TypeError(f"{block_type} takes {len(names)} arguments ({', '.join(names)}), got {len(args)}")
        values = dict(zip(names, args))
        for key, value in kwargs.items():
            if key not in names:
                raise TypeError(f"{block_type} has no argument '{key}'; arguments: {', '.join(names)}")
            if key in values:
                raise TypeError(f"{block_type} got argument '{key}' twice")
            values[key] = value
        missing = [n for n in names if n not in values and n not in program.optional]
        if missing:
            raise TypeError(f"{block_type} is missing argument{'s' if len(missing) > 1 else ''} "
                            f"{', '.join(map(repr, missing))}")
        return self._run(program, {n: values.get(n) for n in names})

    def _run(self, program: _Program, env: dict[str, Any]):
        _bind_dims(env)
        try:
            for stmt in program.tree.body:
                if isinstance(stmt, ast.Return):
                    value = self._eval(stmt.value, env)
                    if not _all_outputs(value):
                        raise _ForwardError(stmt.value, f"forward returns {repr(value)[:60]} ({_describe(value)}); "
                                                        "it must return tensors (or a tuple of tensors)")
                    return value
                value = self._eval(stmt.value, env)
                target = stmt.targets[0]
                if isinstance(target, ast.Tuple):
                    if not isinstance(value, (tuple, list)) or len(value) != len(target.elts):
                        raise _ForwardError(stmt, f"cannot unpack {_describe(value)} into "
                                                  f"{len(target.elts)} names")
                    for t, v in zip(target.elts, value):
                        env[t.id] = v
                else:
                    env[target.id] = value
        except _ForwardError as err:
            if err.path is None:
                err.path = program.path
            raise
        raise AssertionError("forward ends with return (checked at parse time)")

    def _eval(self, node: ast.AST, env: dict[str, Any]):
        if isinstance(node, ast.Name):
            if isinstance(self.__dict__.get(node.id), nn.Parameter):   # a Parameter layer: its tensor
                return self.__dict__[node.id]
            if node.id not in env and node.id in _LITERALS:   # `inf`, unless an input or assignment is so named
                return _LITERALS[node.id]
            if node.id not in env:
                raise _ForwardError(node, f"'{node.id}' is not defined here: it is a symbolic dim of a function "
                                          "input, but none of this block's tensor arguments has it")
            return env[node.id]
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, (ast.Tuple, ast.List)):
            values = [self._eval(e, env) for e in node.elts]
            return tuple(values) if isinstance(node, ast.Tuple) else values
        if isinstance(node, ast.UnaryOp):
            value = self._eval(node.operand, env)
            if not _is_value(value):
                raise _ForwardError(node, f"unary {'+' if isinstance(node.op, ast.UAdd) else '-'} needs a tensor "
                                          f"or a number, got {_describe(value)}")
            if isinstance(node.op, ast.UAdd):
                return value
            return self._apply(node, nn.op.negative, [value], {}) if isinstance(value, nn.Tensor) else -value
        if isinstance(node, ast.BinOp):
            return self._binop(node, self._eval(node.left, env), self._eval(node.right, env))
        if isinstance(node, ast.Compare):
            left, right = self._eval(node.left, env), self._eval(node.comparators[0], env)
            if not isinstance(left, nn.Tensor) and not isinstance(right, nn.Tensor):
                raise _ForwardError(node, "a comparison needs a tensor on one side (forward has no control flow)")
            return self._apply(node, getattr(nn.op, _COMPARE[type(node.ops[0])]), [left, right], {})
        if isinstance(node, ast.Subscript):
            return self._subscript(node, env)
        if isinstance(node, ast.Call):
            return self._call(node, env)
        if isinstance(node, ast.Attribute):
            return self._parameter(node)
        raise _ForwardError(node, f"{type(node).__name__} is not allowed")  # pragma: no cover

    def _parameter(self, node: ast.Attribute) -> nn.Parameter:
        """The parameter ``fc.weight`` / ``layers[0].bias`` / ``attn.q_proj.weight`` names, or ``_ForwardError``."""
        parts, base = [], node
        while isinstance(base, ast.Attribute):
            parts, base = [base.attr, *parts], base.value
        copy, key = isinstance(base, ast.Subscript), ".".join(parts)
        label = name = base.value.id if copy else base.id
        layer = self.__dict__[name]
        if copy != isinstance(layer, nn.ModuleList):
            raise _ForwardError(node, f"'{name}' is not repeated; read its parameter as {name}.{key}" if copy else
                                f"'{name}' is repeated ({len(layer)} copies); read a copy's: {name}[0].{key}")
        if copy:
            if not -len(layer) <= (index := _const_int(base.slice)) < len(layer):
                raise _ForwardError(base, f"'{name}' has {len(layer)} copies; there is no {name}[{index}]")
            layer, label = layer[index], f"{name}[{index}]"
        try:
            return layer.get_parameter(key)
        except AttributeError as exc:
            kind = layer.__dict__["_recipe_block"][0] if isinstance(layer, BlockModule) else type(layer).__name__
            raise _ForwardError(node, f"layer '{label}' ({kind}) {str(exc).split(' ', 1)[1]}"
                                + _suggest(key, dict(layer.named_parameters()))) from None

    def _binop(self, node: ast.BinOp, left: Any, right: Any):
        symbol = _SYMBOLS[type(node.op)]
        for side in (left, right):
            if not _is_value(side):
                raise _ForwardError(node, f"operator {symbol} needs tensors or numbers, got {_describe(side)}")
        if isinstance(left, nn.Tensor) or isinstance(right, nn.Tensor):
            if isinstance(node.op, (ast.FloorDiv, ast.Mod)):
                raise _ForwardError(node, f"operator {symbol} is for symbolic ints; on tensors use divide / ops")
            if isinstance(node.op, ast.MatMult):
                return self._apply(node, nn.op.matmul, [left, right], {})
            fn = {ast.Add: nn.op.add, ast.Sub: nn.op.subtract, ast.Mult: nn.op.multiply,
                  ast.Div: nn.op.divide}[type(node.op)]
            if isinstance(left, nn.Tensor) and isinstance(right, nn.Tensor):
                return self._apply(node, fn, [left, right], {})
            return self._apply(node, _BINOPS[type(node.op)], [left, right], {}, symbol)
        if isinstance(node.op, ast.MatMult):
            raise _ForwardError(node, "operator @ needs tensors")
        symbolic = isinstance(left, E.PrimExpr) or isinstance(right, E.PrimExpr)
        if symbolic and isinstance(node.op, ast.Div):
            raise _ForwardError(node, "use // to divide symbolic ints (/ is for tensors and numbers)")
        if symbolic and (isinstance(left, float) or isinstance(right, float)):
            raise _ForwardError(node, f"operator {symbol} mixes a symbolic int with a float")
        try:
            result = _BINOPS[type(node.op)](left, right)
            if isinstance(result, E.PrimExpr):   # (simplify raises ValueError for a dim too large to expand)
                result = E.simplify(result)
        except ZeroDivisionError:
            raise _ForwardError(node, "division by zero") from None
        except (TypeError, ValueError) as exc:
            raise _ForwardError(node, f"operator {symbol}: {exc}") from None
        if type(result) is int and not -2 ** 63 <= result < 2 ** 63:
            raise _ForwardError(node, f"the integer {shorten(result)} does not fit int64")
        return result

    def _subscript(self, node: ast.Subscript, env: dict[str, Any]):
        value = self._eval(node.value, env)
        index = node.slice
        if isinstance(value, (tuple, list)):
            i = self._eval(index, env)
            if type(i) is not int:
                raise _ForwardError(node, f"a tuple is indexed with an integer constant (parts[0]), got {_describe(i)}")
            try:
                return value[i]
            except IndexError:
                raise _ForwardError(node, f"index {i} is out of range for {_describe(value)}") from None
        if not isinstance(value, nn.Tensor):
            raise _ForwardError(node, f"cannot index {_describe(value)}")
        parts = []
        for part in index.elts if isinstance(index, ast.Tuple) else [index]:
            if isinstance(part, ast.Slice):
                bounds = [None if b is None else self._eval(b, env) for b in (part.lower, part.upper, part.step)]
                for b in bounds:
                    if b is not None and not _is_int(b):
                        raise _ForwardError(part, f"slice bounds are integers or symbolic ints, got {_describe(b)}")
                parts.append(slice(*bounds))
            else:
                item = self._eval(part, env)
                if item is not Ellipsis and not _is_int(item):
                    raise _ForwardError(part, f"a tensor is indexed with integers, slices and ..., got {_describe(item)}")
                parts.append(item)
        key = tuple(parts) if isinstance(index, ast.Tuple) else parts[0]
        return self._apply(node, operator.getitem, [value, key], {}, "indexing")

    def _call(self, node: ast.Call, env: dict[str, Any]):
        func = node.func
        args = [self._eval(a, env) for a in node.args]
        kwargs = {kw.arg: self._eval(kw.value, env) for kw in node.keywords}
        if isinstance(func, ast.Subscript):
            name = func.value.id
            layer = self.__dict__[name]
            if not isinstance(layer, nn.ModuleList):
                raise _ForwardError(func, f"'{name}' is not repeated; call it: {name}(...)")
            index = _const_int(func.slice)
            if not -len(layer) <= index < len(layer):
                raise _ForwardError(func, f"'{name}' has {len(layer)} copies; there is no {name}[{index}]")
            return self._call_layer(node, layer[index], f"{name}[{index}]", args, kwargs)
        name = func.id
        layer = self.__dict__.get(name)
        if isinstance(layer, nn.ModuleList):
            if not args:
                raise _ForwardError(node, f"{name}(): a repeated layer is called as a chain on its first argument")
            value = args[0]
            for i, copy in enumerate(layer):
                value = self._call_layer(node, copy, f"{name}[{i}]", [value, *args[1:]], kwargs)
            return value
        if isinstance(layer, nn.Module):
            return self._call_layer(node, layer, name, args, kwargs)
        fn = FORWARD_OPS[name]
        try:
            bound = inspect.signature(fn).bind(*args, **kwargs)
        except TypeError as exc:
            raise _ForwardError(node, f"{name}(): {exc}") from None
        hint = bound.arguments.get("name")
        if isinstance(hint, str) and not is_identifier(hint):   # non-strings: the op says so
            raise _ForwardError(node, f"{name}(): name must be an identifier (letters, digits and '_', not "
                                      f"starting with a digit, not a Python keyword), got {shorten(hint)}")
        return self._apply(node, fn, args, kwargs, name)

    def _call_layer(self, node: ast.Call, layer: nn.Module, name: str, args: list, kwargs: dict):
        values = [*args, *kwargs.values()]
        if not isinstance(layer, BlockModule):   # built-in layers: a tensor first, then tensors or settings
            try:
                sig = inspect.signature(layer.forward)
                bound = sig.bind(*args, **kwargs)
            except TypeError as exc:
                raise _ForwardError(node, f"{name}(): {exc}") from None
            first = next(iter(bound.arguments.values()))
            # a string only where the layer's signature takes one (KVCache's causal_mask="BottomRight")
            values = [a for k, a in bound.arguments.items()
                      if not (isinstance(a, str) and "str" in str(sig.parameters[k].annotation))]
            bad = [a for a in values if not (_is_value(a) or a is None or isinstance(a, nn.Object))]
            if bad or not isinstance(first, nn.Tensor):
                raise _ForwardError(node, f"{name}() ({type(layer).__name__}) takes tensors, got "
                                          f"{_describe(bad[0] if bad else first)}")
        for arg in values:
            if not (_is_value(arg) or arg is None or isinstance(arg, nn.Object)):
                raise _ForwardError(node, f"{name}() takes tensors, symbolic ints, numbers, None or a KV "
                                          f"cache, got {_describe(arg)}")
        if isinstance(layer, BlockModule):
            _count_call(node)
            try:
                result = layer(*args, **kwargs)
            except TypeError as exc:
                raise _ForwardError(node, f"{name}(): {exc}") from None
            _check_result_size(node, result)
            return result
        return self._apply(node, layer, args, kwargs, name)

    @staticmethod
    def _apply(node: ast.AST, fn: Callable, args: list, kwargs: dict, name: str | None = None):
        """Call layer or op ``fn`` after checking the arguments' number and names against its
        signature (the ops check their arguments' types themselves)."""
        target = fn.forward if isinstance(fn, nn.Module) else fn
        name = name or getattr(target, "__name__", "op")
        _count_call(node)
        if target not in _OPERATORS:
            try:
                inspect.signature(target).bind(*args, **kwargs)
            except TypeError as exc:
                raise _ForwardError(node, f"{name}(): {exc}") from None
        # the recipe's numbers reach ops directly: a finite one that overflows its tensor's float dtype
        # is an error (nn.op.common.scalar_constant); a built-in layer's own constants are its business
        strict = None if isinstance(fn, nn.Module) else REFUSE_FLOAT_OVERFLOW.set(True)
        try:
            result = fn(*args, **kwargs)
        except (ValueError, TypeError, IndexError) as exc:
            message = f"{name}: {exc}" if target in _OPERATORS else str(exc)
            raise _ForwardError(node, _in_words(node, fn, name, args) + message) from None
        finally:
            if strict is not None:
                REFUSE_FLOAT_OVERFLOW.reset(strict)
        _check_result_size(node, result)
        return result


class _CallBudget:
    """How many more layer, block and op calls the functions of one export may trace
    (:data:`~core.limits.MAX_TRACED_CALLS` in all)."""

    def __init__(self, limit: int = MAX_TRACED_CALLS) -> None:
        self.limit = limit
        self.used = 0


#: The :class:`_CallBudget` of the export running a recipe's function (set by the RecipeModule's
#: methods; nested blocks' forwards spend from it).
_BUDGET: contextvars.ContextVar[_CallBudget | None] = contextvars.ContextVar("recipe_call_budget", default=None)


def _count_call(node: ast.AST) -> None:
    """Spend one call of the running export's budget; ``_ForwardError`` at ``node`` when it is spent. A
    block's forward runs each time the block is called, so calls multiply through nested blocks (a block
    calling its child twice, 30 blocks deep, would trace 3 * 2**30 calls with 32 layers): the budget bounds the
    work of tracing, and of every compiler pass after it, whatever the module count."""
    budget = _BUDGET.get()
    if budget is None:
        return
    budget.used += 1
    if budget.used > budget.limit:
        raise _ForwardError(node, f"the recipe's functions would trace more than {budget.limit:,} layer, block "
                                  "and op calls in all (a block runs its forward each time it is called, so "
                                  "calls multiply through nested blocks and repeats)")


#: Python operators applied to tensors (``x * 2``, ``h[:, -1]``): nn.Tensor implements them.
_OPERATORS = frozenset(_BINOPS.values()) | {operator.getitem}


class RecipeModule(BlockModule):
    """The model a recipe describes: ``model.layers`` as attributes and one method per function of
    ``functions:`` (``forward`` included), each running that function's forward text (or the model's)
    on its inputs. Symbolic dims of the inputs (and ``{type: int}`` inputs) are values in the text."""

    def __init__(self, recipe: Recipe, layers: dict[str, nn.Module], programs: dict[str, _Program]) -> None:
        super().__init__("model", layers, None)
        object.__setattr__(self, "_recipe_meta", (recipe, programs))
        object.__setattr__(self, "_recipe_budget", [_CallBudget()])
        for fname, program in programs.items():
            object.__setattr__(self, fname, self._method(fname, program))

    def export_tvm(self, spec: dict, debug: bool = False, allow_extern: bool = False):
        """:meth:`builder.nn.Module.export_tvm`, its functions sharing a fresh budget of
        :data:`~core.limits.MAX_TRACED_CALLS` layer, block and op calls (a recipe error at the call
        that exceeds it)."""
        self.__dict__["_recipe_budget"][0] = _CallBudget()
        return super().export_tvm(spec, debug=debug, allow_extern=allow_extern)

    def _method(self, fname: str, program: _Program) -> Callable:
        def method(*args):
            recipe, _ = self.__dict__["_recipe_meta"]
            if recipe.tensor_parallel_shards > 1:   # every worker computes on worker 0's inputs (MLC-LLM)
                args = tuple(nn.op.ccl_broadcast_from_worker0(a, name=f"{n}_bcast") if isinstance(a, nn.Tensor)
                             else a for n, a in zip(program.inputs, args))
            token = _BUDGET.set(self.__dict__["_recipe_budget"][0])
            try:
                return self._run(program, dict(zip(program.inputs, args)))
            except _ForwardError as err:
                raise _error(recipe, err, program.path) from None
            finally:
                _BUDGET.reset(token)

        method.__name__ = fname
        return method


def _const_int(node: ast.AST) -> int | None:
    """The value of an integer literal, ``-`` signs included (``layers[-1]``), else None."""
    sign = 1
    while isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        sign = -sign if isinstance(node.op, ast.USub) else sign
        node = node.operand
    return sign * node.value if isinstance(node, ast.Constant) and type(node.value) is int else None


def _bind_dims(env: dict[str, Any]) -> None:
    """Make the symbolic dims of the tensor arguments in ``env`` values (``seq`` -> its tir Var), unless
    a name is already taken by an argument."""
    for value in list(env.values()):
        if isinstance(value, nn.Tensor):
            for d in value.shape:
                if isinstance(d, E.Var) and d.name not in env:
                    env[d.name] = d


def _is_value(value: Any) -> bool:
    return isinstance(value, (nn.Tensor, int, float, E.PrimExpr)) and not isinstance(value, bool)


def _is_int(value: Any) -> bool:
    return (type(value) is int) or (isinstance(value, E.PrimExpr) and E.is_int_dtype(value.dtype))


def _check_result_size(node: ast.AST, value: Any) -> None:
    """Raise ``_ForwardError`` when a tensor in ``value`` would take more than ``MAX_TENSOR_BYTES``
    by its static sizes alone (``x @ x.T`` of a (2**40, 1) input), so that every size the compiler
    computes fits int64."""
    for t in value if isinstance(value, (tuple, list)) else [value]:
        if isinstance(t, (tuple, list)):
            _check_result_size(node, t)
        elif isinstance(t, nn.Tensor):
            static = [d for d in t._expr.struct_info.shape or () if isinstance(d, int)]
            nbytes = math.prod(static) * numpy_dtype(t.dtype).itemsize
            if nbytes > MAX_TENSOR_BYTES:
                raise _ForwardError(node, f"the result {_describe(t)} would take {nbytes:,} bytes, more than the "
                                          "2**62 any tensor may have")


def _all_outputs(value: Any) -> bool:
    if isinstance(value, (tuple, list)):
        return bool(value) and all(_all_outputs(v) for v in value)
    return isinstance(value, nn.Tensor)


def _in_words(node: ast.AST, fn: Any, name: str, args: list) -> str:
    """What failed, as the recipe wrote it, before the op's own message: ``"'h' @ 'w': 'h' is (2, 4) float32,
    'w' is (5, 3) float32: "`` for an operator; for a layer ``"gate_proj (Linear, in_features=256,
    out_features=688) on silu(gate) * up, (batch_size, 688) float32: "`` (its tensor arguments by their
    text in the forward, with their shapes); ``""`` for an op call, whose message names its arguments."""
    def shape(value: Any) -> str:
        if isinstance(value, nn.Tensor):
            return f"({', '.join(map(str, value.shape))}) {value.dtype}"
        return _describe(value)

    if isinstance(node, ast.BinOp) and len(args) == 2:
        left, right = (shorten(ast.unparse(n), 60) for n in (node.left, node.right))
        symbol = _SYMBOLS[type(node.op)]
        return f"{left} {symbol} {right}: {left} is {shape(args[0])}, {right} is {shape(args[1])}: "
    if isinstance(fn, nn.Module) and isinstance(node, ast.Call):
        settings = [f"{k}={fn.__dict__[k]}" for k in ("in_features", "out_features", "num", "dim", "hidden_size",
                                                     "in_channels", "out_channels")
                    if type(fn.__dict__.get(k)) is int]
        layer = f"{name} ({', '.join([type(fn).__name__, *settings])})"
        operands = [f"{shorten(ast.unparse(n), 60)}, {shape(a)}" for n, a in zip(node.args, args)
                    if isinstance(a, nn.Tensor)]
        return f"{layer} on {'; '.join(operands)}: " if operands else f"{layer}: "
    return ""


def _describe(value: Any) -> str:
    if isinstance(value, nn.Tensor):
        return repr(value)
    if isinstance(value, E.PrimExpr):
        return f"the symbolic int {value}"
    if value is None:
        return "None"
    return type(value).__name__
