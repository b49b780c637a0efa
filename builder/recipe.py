"""Recipe -> ``nn.Module`` tree + export spec, and the ``forward:`` expression language.

The ``forward`` text of a recipe is Python syntax, parsed with :mod:`ast` and checked against a
whitelist -- it is never evaluated by Python. Allowed:

- statements: ``name = expr``, ``a, b = expr`` (tuple unpacking), and a final ``return expr``
  (a value or a tuple of values);
- expressions: names (function inputs, earlier assignments), calls of recipe layers
  (``gate_proj(x)``) and of registered functional ops (``silu(x)``, ``softmax(x, axis=-1)``,
  ``reshape(x, [1, -1])``, ``silu(x, name="gate")``: a ``name`` is the result's name hint in the
  printed IR and must be an identifier, as TVM's name hints are), the arithmetic operators ``+ - * / @`` and unary ``-``, numeric
  constants, tuple indexing with a constant (``parts[0]``), list / tuple literals of constants
  as op arguments.

Anything else (attribute access, comprehensions, lambdas, imports, ...) is a recipe error that
cites ``file:line:column`` inside the ``forward`` block, as are unknown names, wrong op
arguments and shape/dtype mismatches found while tracing.

Bounds (:mod:`schemas.limits`): the text is at most ``MAX_FORWARD_CHARS`` long, one expression nests at
most ``MAX_EXPRESSION_DEPTH`` deep (checked without recursion; the checker and the interpreter recurse
only that deep, any number of statements run in a loop), integer constants fit int64, and no
result with static sizes may take more than ``MAX_TENSOR_BYTES``.
"""
from __future__ import annotations

import ast
import difflib
import inspect
import math
from typing import Any, Callable

from runtime.native import numpy_dtype
from schemas import LAYER_TYPES, Recipe, RecipeError
from schemas.errors import shorten
from schemas.limits import MAX_EXPRESSION_DEPTH, MAX_FORWARD_CHARS, MAX_TENSOR_BYTES
from schemas.models import is_identifier

from . import nn
from .ops import recipe_ops
from .ir.printer import PRINTER_RESERVED

__all__ = ["instantiate", "RecipeModule", "FORWARD_OPS", "parse_forward"]

#: functional ops callable from a recipe's ``forward`` text: the ``nn.op`` function of every op record
#: marked ``in_recipes`` (:func:`builder.ops.recipe_ops`).
FORWARD_OPS: dict[str, Callable] = {name: getattr(nn.op, name) for name in recipe_ops()}

_BINOPS = {ast.Add: nn.op.add, ast.Sub: nn.op.subtract, ast.Mult: nn.op.multiply,
           ast.Div: nn.op.divide, ast.MatMult: nn.op.matmul}

_LAYER_CLASSES = {
    "Linear": nn.Linear, "LayerNorm": nn.LayerNorm, "RMSNorm": nn.RMSNorm, "Conv1D": nn.Conv1D,
    "Embedding": nn.Embedding, "ReLU": nn.ReLU, "SiLU": nn.SiLU, "GELU": nn.GELU,
}
assert set(_LAYER_CLASSES) == set(LAYER_TYPES), "every schema layer type needs a module class"

#: Names a layer, an input or a function may not take: attributes of nn.Module (a layer named
#: ``named_parameters`` or ``__dict__`` would replace it) and ``forward``. Function names may not be
#: ``PRINTER_RESERVED`` either (the printed module would define ``R`` and shadow the ``relax`` alias;
#: variables with those names are renamed by the printer, functions keep their names).
_RESERVED = set(dir(nn.Module)) | {"forward"}


def _reserved(name: str) -> bool:
    return name in _RESERVED or (name.startswith("__") and name.endswith("__"))

_FORWARD_PATH = ("model", "forward")


class _ForwardError(Exception):
    def __init__(self, node: ast.AST | None, message: str, line: int | None = None, col: int | None = None):
        super().__init__(message)
        self.message = message
        self.line = line if line is not None else getattr(node, "lineno", 1)
        self.col = col if col is not None else getattr(node, "col_offset", 0)


def _error(recipe: Recipe, err: _ForwardError) -> RecipeError:
    from schemas import RecipeIssue

    src = recipe.source
    pos = src.text_position(_FORWARD_PATH, err.line, err.col)
    if pos is None:
        pos = src.position(_FORWARD_PATH) or (None, None)
    return RecipeError([RecipeIssue(src.file, pos[0], pos[1], "model.forward", err.message)])


def _suggest(name: str, candidates) -> str:
    close = difflib.get_close_matches(name, list(candidates), n=3)
    return f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""


def parse_forward(text: str, inputs: list[str], layers: list[str]) -> ast.Module:
    """Parse and statically check ``forward`` text. Raises ``_ForwardError`` with a position.

    Checks: syntax, whitelisted node types, every name defined before use (inputs, assignments,
    layers and ops only as callees), a final ``return``.
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
    defined = set(inputs)
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign):
            if len(stmt.targets) != 1:
                raise _ForwardError(stmt, "chained assignment is not allowed in forward")
            _check_expr(stmt.value, defined, layers)
            target = stmt.targets[0]
            names = target.elts if isinstance(target, ast.Tuple) else [target]
            for t in names:
                if not isinstance(t, ast.Name):
                    raise _ForwardError(t, "only plain names can be assigned in forward")
                defined.add(t.id)
        elif isinstance(stmt, ast.Return):
            if stmt is not tree.body[-1]:
                raise _ForwardError(stmt, "`return` must be the last statement of forward")
            if stmt.value is None:
                raise _ForwardError(stmt, "forward must return a value")
            _check_expr(stmt.value, defined, layers)
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


def _check_expr(node: ast.AST, defined: set[str], layers: list[str]) -> None:
    if isinstance(node, ast.Name):
        if node.id not in defined:
            if node.id in layers or node.id in FORWARD_OPS:
                raise _ForwardError(node, f"'{node.id}' is a {'layer' if node.id in layers else 'function'}; "
                                          f"call it: {node.id}(...)")
            raise _ForwardError(node, f"unknown name '{node.id}'" + _suggest(node.id, defined | set(layers)))
    elif isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name):
            raise _ForwardError(node, "only layers and ops can be called (e.g. `gate_proj(x)`, `silu(x)`)")
        name = node.func.id
        if name not in layers and name not in FORWARD_OPS:
            raise _ForwardError(node.func, f"unknown layer or op '{name}'"
                                + _suggest(name, set(layers) | set(FORWARD_OPS)))
        for arg in node.args:
            if isinstance(arg, ast.Starred):
                raise _ForwardError(arg, "starred arguments are not allowed in forward")
            _check_expr(arg, defined, layers)
        for kw in node.keywords:
            if kw.arg is None:
                raise _ForwardError(kw.value, "**kwargs are not allowed in forward")
            _check_expr(kw.value, defined, layers)
    elif isinstance(node, ast.BinOp):
        if type(node.op) not in _BINOPS:
            raise _ForwardError(node, f"operator {type(node.op).__name__} is not allowed in forward "
                                      "(use + - * / @)")
        _check_expr(node.left, defined, layers)
        _check_expr(node.right, defined, layers)
    elif isinstance(node, ast.UnaryOp):
        if not isinstance(node.op, (ast.USub, ast.UAdd)):
            raise _ForwardError(node, f"unary {type(node.op).__name__} is not allowed in forward")
        _check_expr(node.operand, defined, layers)
    elif isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, (int, float, str)):
            raise _ForwardError(node, f"constant {shorten(node.value)} is not allowed in forward")
        if isinstance(node.value, int) and not -2 ** 63 <= node.value < 2 ** 63:
            raise _ForwardError(node, f"an integer constant must fit int64, got {shorten(node.value)}")
    elif isinstance(node, (ast.Tuple, ast.List)):
        for elt in node.elts:
            _check_expr(elt, defined, layers)
    elif isinstance(node, ast.Subscript):
        if not isinstance(node.slice, ast.Constant) or not isinstance(node.slice.value, int):
            raise _ForwardError(node, "only indexing with an integer constant is allowed (e.g. parts[0])")
        _check_expr(node.value, defined, layers)
    else:
        raise _ForwardError(node, f"{type(node).__name__} expressions are not allowed in forward")


class RecipeModule(nn.Module):
    """The module a recipe describes: its layers as attributes, ``forward`` interpreting the
    recipe's checked forward AST on ``nn.Tensor``\\ s."""

    def __init__(self, recipe: Recipe, layers: dict[str, nn.Module], tree: ast.Module, input_names: list[str]):
        for name, layer in layers.items():
            self.__dict__[name] = layer
        object.__setattr__(self, "_recipe_meta", (recipe, tree, tuple(input_names)))

    def forward(self, *args):
        """Run the recipe's forward on the inputs (positional, in the function spec's order)."""
        recipe, tree, names = self.__dict__["_recipe_meta"]
        env: dict[str, Any] = dict(zip(names, args))
        try:
            for stmt in tree.body:
                if isinstance(stmt, ast.Return):
                    value = self._eval(stmt.value, env)
                    if not _all_tensors(value):
                        raise _ForwardError(stmt.value, f"forward returns {repr(value)[:60]} ({_describe(value)}); it "
                                                        "must return tensors (or a tuple of tensors)")
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
            raise _error(recipe, err) from None
        raise AssertionError("forward ends with return (checked at parse time)")

    def _eval(self, node: ast.AST, env: dict[str, Any]):
        if isinstance(node, ast.Name):
            return env[node.id]
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, (ast.Tuple, ast.List)):
            return tuple(self._eval(e, env) for e in node.elts) if isinstance(node, ast.Tuple) else \
                [self._eval(e, env) for e in node.elts]
        if isinstance(node, ast.UnaryOp):
            value = self._eval(node.operand, env)
            if not isinstance(value, (nn.Tensor, int, float)) or isinstance(value, bool):
                raise _ForwardError(node, f"unary {'+' if isinstance(node.op, ast.UAdd) else '-'} needs a tensor "
                                          f"or a number, got {_describe(value)}")
            if isinstance(node.op, ast.UAdd):
                return value
            return -value if not isinstance(value, nn.Tensor) else self._apply(node, nn.op.negative, [value], {})
        if isinstance(node, ast.BinOp):
            left, right = self._eval(node.left, env), self._eval(node.right, env)
            return self._apply(node, _BINOPS[type(node.op)], [left, right], {})
        if isinstance(node, ast.Subscript):
            value = self._eval(node.value, env)
            try:
                return value[node.slice.value]
            except (TypeError, IndexError):
                raise _ForwardError(node, f"cannot index {_describe(value)} with {node.slice.value}") from None
        if isinstance(node, ast.Call):
            name = node.func.id
            args = [self._eval(a, env) for a in node.args]
            kwargs = {kw.arg: self._eval(kw.value, env) for kw in node.keywords}
            layer = self.__dict__.get(name)
            fn = layer if isinstance(layer, nn.Module) else FORWARD_OPS[name]
            target = fn.forward if isinstance(fn, nn.Module) else fn
            try:
                bound = inspect.signature(target).bind(*args, **kwargs)
            except TypeError as exc:
                raise _ForwardError(node, f"{name}(): {exc}") from None
            hint = bound.arguments.get("name")
            if isinstance(hint, str) and not is_identifier(hint):   # non-strings: the op says so
                raise _ForwardError(node, f"{name}(): name must be an identifier (letters, digits and '_', not "
                                          f"starting with a digit, not a Python keyword), got {shorten(hint)}")
            if isinstance(fn, nn.Module):   # recipe layers take tensors only
                for arg in [*args, *kwargs.values()]:
                    if not isinstance(arg, nn.Tensor):
                        raise _ForwardError(node, f"{name}() ({type(fn).__name__}) takes tensors, got "
                                                  f"{_describe(arg)}")
            return self._apply(node, fn, args, kwargs, name)
        raise _ForwardError(node, f"{type(node).__name__} is not allowed")  # pragma: no cover

    @staticmethod
    def _apply(node: ast.AST, fn: Callable, args: list, kwargs: dict, name: str | None = None):
        """Call layer or op ``fn`` after checking the arguments' number and names against its
        signature (the ops check their arguments' types themselves)."""
        target = fn.forward if isinstance(fn, nn.Module) else fn
        name = name or getattr(target, "__name__", "op")
        try:
            inspect.signature(target).bind(*args, **kwargs)
        except TypeError as exc:
            raise _ForwardError(node, f"{name}(): {exc}") from None
        try:
            result = fn(*args, **kwargs)
        except (ValueError, TypeError) as exc:
            raise _ForwardError(node, str(exc)) from None
        _check_result_size(node, result)
        return result


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


def _all_tensors(value: Any) -> bool:
    if isinstance(value, (tuple, list)):
        return bool(value) and all(_all_tensors(v) for v in value)
    return isinstance(value, nn.Tensor)


def _describe(value: Any) -> str:
    if isinstance(value, nn.Tensor):
        return repr(value)
    return type(value).__name__


def _make_layer(recipe: Recipe, name: str, cfg) -> nn.Module:
    kwargs = cfg.model_dump(exclude={"type"})
    cls = _LAYER_CLASSES[cfg.type]
    try:
        return cls(**kwargs)
    except (ValueError, TypeError) as exc:
        raise recipe.source.error(("model", "layers", name), f"{cfg.type}: {exc}") from None


def instantiate(recipe: Recipe) -> tuple[nn.Module, dict]:
    """Build the module tree and the export spec of ``recipe``.

    Returns ``(module, spec)`` with ``spec = {function: {input: nn.spec.Tensor(shape, dtype)}}``.
    The recipe's top-level ``dtype`` is applied afterwards by the transforms in
    ``builder.quant``. Raises :class:`schemas.RecipeError` (file:line:col) for a layer name that
    clashes with a Module attribute, and for any problem in the ``forward`` text.
    """
    layers: dict[str, nn.Module] = {}
    for name, cfg in recipe.model.layers.items():
        if _reserved(name):
            raise recipe.source.error(("model", "layers", name),
                                      f"layer name '{name}' is reserved (it is an nn.Module attribute)")
        if name in FORWARD_OPS:
            raise recipe.source.error(("model", "layers", name),
                                      f"layer name '{name}' shadows the op of the same name in forward; "
                                      "rename the layer")
        layers[name] = _make_layer(recipe, name, cfg)
    spec: dict[str, dict] = {}
    input_names: list[str] | None = None
    for fname, inputs in recipe.functions.items():
        if (_reserved(fname) and fname != "forward") or fname in PRINTER_RESERVED:
            raise recipe.source.error(("functions", fname),
                                      f"function name '{fname}' is reserved (an nn.Module attribute or a name of the printed IR)")
        names = list(inputs)
        if input_names is not None and names != input_names:
            raise recipe.source.error(("functions", fname),
                                      f"every function shares the recipe's forward, so its inputs must be "
                                      f"{input_names}; got {names}")
        input_names = names
        for iname in names:
            if iname in layers or iname in FORWARD_OPS or _reserved(iname):
                raise recipe.source.error(("functions", fname, iname),
                                          f"input name '{iname}' shadows a layer, an op or an nn.Module "
                                          "attribute of the same name")
        spec[fname] = {iname: nn.spec.Tensor(list(s.shape), s.dtype) for iname, s in inputs.items()}
    try:
        tree = parse_forward(recipe.model.forward, input_names or [], list(layers))
    except _ForwardError as err:
        raise _error(recipe, err) from None
    module = RecipeModule(recipe, layers, tree, input_names or [])
    for fname in spec:
        if fname != "forward":
            setattr(module, fname, module.forward)
    return module, spec
