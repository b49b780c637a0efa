"""Load a recipe: parse YAML with positions, apply ``KEY=VALUE`` overrides, substitute ``${var}`` and
``${expr}`` (arithmetic of :mod:`schemas.expressions`), validate."""

from __future__ import annotations

import difflib
import os
import re
import stat
from typing import Any, Iterable

from pydantic import BaseModel, ValidationError

from .errors import RecipeError, RecipeIssue, override_label, shorten, undecodable
from .expressions import ExpressionError, evaluate, is_expression
from core.limits import MAX_DEPTH, MAX_RECIPE_BYTES, MAX_STRING_CHARS, MAX_VALUES, MAX_VARIABLE_CHAIN
from .models import (LAYER_TYPES, QUANTIZATION_KINDS, QUANTIZATION_PRESETS, BlockDef, BlockLayer, FunctionDef, InputSpec,
                     IntInput, KVCacheInput, ModelDef, Recipe, WeightsDef, _function_tag)
from .block_args import Expander, take_templates
from .includes import merge_includes
from .source import FieldPath, IssueCollector, SourceMap, ValueBudget, format_path, list_index, parse_yaml

_VARIABLE = re.compile(r"\$\$\{|\$\{([^}]*)\}")  # `$${` escapes a literal `${`
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")   # the variables a `${expr}` may use


def _valid_layer_types() -> str:
    """The registered layer types, for messages (case-insensitive order)."""
    return ", ".join(sorted(LAYER_TYPES, key=str.lower))


def load_recipe(path: str | os.PathLike, overrides: Iterable[str] = ()) -> Recipe:
    """Load, override, interpolate and validate the recipe file at ``path``.

    ``overrides`` are ``KEY=VALUE`` strings (see :func:`load_recipe_text`); a single string is one override.

    Raises:
        RecipeError: the file cannot be read, or the recipe has problems (all of them are listed).
    """
    try:
        text = _read_text(path)
    except (OSError, ValueError) as exc:
        raise RecipeError([RecipeIssue(os.fspath(path), None, None, "", f"cannot read recipe: {exc}")]) from None
    return load_recipe_text(text, filename=os.fspath(path), overrides=overrides)


def _read_text(path: str | os.PathLike) -> str:
    """The UTF-8 text of the regular file ``path`` (at most :data:`~core.limits.MAX_RECIPE_BYTES`);
    a FIFO or a device is refused without blocking. Raises OSError / ValueError (UnicodeDecodeError)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError("it is not a regular file" + (" (a directory)" if stat.S_ISDIR(st.st_mode) else ""))
        if st.st_size > MAX_RECIPE_BYTES:
            raise ValueError(f"it is {st.st_size:,} bytes, more than the {MAX_RECIPE_BYTES:,} a recipe may have")
        os.set_blocking(fd, True)
        with os.fdopen(os.dup(fd), "rb") as fh:
            data = fh.read(MAX_RECIPE_BYTES + 1)
    finally:
        os.close(fd)
    return data.decode("utf-8")


def load_recipe_text(text: str, filename: str = "<string>", overrides: Iterable[str] = ()) -> Recipe:
    """Load a recipe from YAML ``text``; ``filename`` is used in error locations.

    Each override ``KEY=VALUE`` has its VALUE parsed as YAML. A bare KEY names a variable of ``vars:``
    or else a top-level recipe field; a dotted KEY is a path into the recipe
    (``model.layers.fc.bias=false``; integer segments index lists). Then ``${name}`` in string
    values is replaced from ``vars:`` (a string that is exactly ``${name}`` takes the variable's
    value and type; ``$${`` is a literal ``${``).

    Raises:
        RecipeError: listing every problem found, each located at ``file:line:column`` (or at the
            override that caused it) with the dotted field path.
    """
    source = SourceMap(filename, text)
    issues = IssueCollector(source)
    budget = ValueBudget()   # one budget of values for the recipe and all its overrides
    data = parse_yaml(text, issues, budget)
    if not isinstance(data, dict):
        issue = source.issue((), "a recipe must be a mapping of fields" if data is not None or issues.issues
                             else "the recipe is empty: a recipe must be a mapping of fields")
        if issue.line is None and not issues.issues:   # an empty file: point at its start
            issue = RecipeIssue(issue.file, 1, 1, issue.path, issue.message)
        raise RecipeError([*issues.issues, issue])
    merge_includes(data, filename, issues, budget, _read_text)
    _apply_overrides(data, overrides, issues, budget)
    templates = take_templates(data, issues)   # blocks with args: interpolated per use, below
    interpolator = _Interpolator(data, issues)
    interpolator.run()
    if templates:
        _expand_block_args(data, templates, interpolator, source)
    _check_layer_types(data, issues)
    try:
        recipe = Recipe.model_validate(data)
    except ValidationError as exc:
        _add_validation_issues(exc, data, issues, interpolator.origins)
    if issues.issues:
        raise RecipeError(sorted(issues.issues, key=lambda i: (i.line is not None, i.line or 0, i.column or 0)))
    recipe._source = source
    return recipe


def _expand_block_args(data: dict, templates: dict, interpolator: "_Interpolator", source: SourceMap) -> None:
    """Instantiate the blocks with ``args:`` that ``data`` uses (:mod:`schemas.block_args`), each instance's
    text interpolated with the recipe's resolved variables and its arguments (which shadow them)."""
    def interpolate(value: Any, path: FieldPath, scope: dict) -> Any:
        sub = _Interpolator({}, interpolator.issues)
        sub.raw, sub.resolved = scope, dict(scope)
        sub.sizes = {name: _measure(v) for name, v in scope.items()}
        sub.values, sub.chars = interpolator.values, interpolator.chars
        try:
            return sub.substitute(value, path)
        finally:
            interpolator.values, interpolator.chars = sub.values, sub.chars
            interpolator.origins.update(sub.origins)

    variables = {k: v for k, v in data["vars"].items()} if isinstance(data.get("vars"), dict) else {}
    expander = Expander(data, templates, variables, interpolator.issues, interpolate, source.alias,
                        interpolator.values)
    expander.run()
    interpolator.values = max(interpolator.values, expander.values)


def _check_layer_types(data: dict, issues: IssueCollector) -> None:
    """An issue at ``type`` for every layer entry whose type is neither built in nor a block of the recipe
    (its other fields are then not checked: which model they belong to is unknown)."""
    blocks = data.get("blocks") if isinstance(data.get("blocks"), dict) else {}
    tables: list[tuple[FieldPath, Any]] = [(("model", "layers"), (data.get("model") or {}).get("layers")
                                            if isinstance(data.get("model"), dict) else None)]
    tables += [(("blocks", name, "layers"), b.get("layers")) for name, b in blocks.items() if isinstance(b, dict)]
    for path, layers in tables:
        for name, entry in (layers.items() if isinstance(layers, dict) else ()):
            kind = entry.get("type") if isinstance(entry, dict) else None
            if isinstance(kind, str) and kind not in LAYER_TYPES and kind not in blocks:
                valid = _valid_layer_types() + (f"; blocks: {', '.join(blocks)}" if blocks else "")
                hint = _did_you_mean(kind, [*LAYER_TYPES, *blocks])
                issues.add(path + (name, "type"), f"unknown layer type {shorten(kind)}{hint}; valid types: {valid}")
                issues.mark(path + (name,))


def _did_you_mean(word: Any, candidates: Iterable[Any]) -> str:
    matches = difflib.get_close_matches(str(word), [str(c) for c in candidates], n=3)
    return f"; did you mean {' or '.join(map(repr, matches))}?" if matches else ""


# --- overrides -------------------------------------------------------------------------------------

def _apply_overrides(data: dict, overrides: Iterable[str], issues: IssueCollector, budget: ValueBudget) -> None:
    """Apply ``KEY=VALUE`` overrides, a key before the keys nested under it whatever the order
    given (``quantization.group_size=64 quantization=q4f16_1`` sets the preset, then its group
    size); otherwise in the order given (the last of two equal keys wins).

    Bounded as a recipe file is: all overrides together at most
    :data:`~core.limits.MAX_RECIPE_BYTES` characters, and their values count against ``budget``."""
    items = [overrides] if isinstance(overrides, str) else list(overrides)
    for override in items:
        if not isinstance(override, str):
            raise TypeError(f"an override must be a KEY=VALUE string, got {type(override).__name__}")
    found = []
    chars = 0
    for pos, override in sorted(enumerate(items), key=lambda t: (t[1].partition("=")[0].strip().count("."), t[0])):
        if chars + len(override) > MAX_RECIPE_BYTES:   # refused unread: it does not count
            problem = (f"the overrides would be more than {MAX_RECIPE_BYTES:,} characters long in all with this "
                       "one, more than a recipe may have")
        else:
            chars += len(override)
            problem = _apply_override(data, override, issues.source, budget)
        if problem is not None:
            key = override.partition("=")[0].strip()
            key = key if len(key) <= 100 else f"{key[:80]}... ({len(key):,} characters)"
            found.append((pos, RecipeIssue(override_label(override), None, None, key, problem)))
    issues.issues.extend(issue for _, issue in sorted(found, key=lambda t: t[0]))   # in the order given


def _apply_override(data: dict, override: str, source: SourceMap, budget: ValueBudget) -> str | None:
    """Apply one ``KEY=VALUE`` override to ``data``; return what is wrong with it, or ``None``."""
    bad = undecodable(override)
    if bad is not None:   # a byte that is not UTF-8 on the command line (PEP 383), in the key or the value
        return f"the override is not valid UTF-8 text: it contains {bad}"
    key, has_value, text = override.partition("=")
    key = key.strip()
    if not has_value or not key:
        return "expected KEY=VALUE"
    value_issues = IssueCollector(SourceMap("<value>", text))
    try:   # the recipe's own bounded, position-keeping parser; what it builds counts even if unused
        value = parse_yaml(text, value_issues, budget)
    except RecipeError as exc:
        return f"invalid value: {exc.issues[0].message}"
    if value_issues.issues:
        return f"invalid value: {value_issues.issues[0].message}"
    try:
        container, last, path = _override_target(data, key)
    except LookupError as exc:
        return str(exc.args[0])
    container[last] = value
    source.record_override(path, override)
    return None


def _override_target(data: dict, key: str) -> tuple[dict | list, str | int, FieldPath]:
    """Return (container, key or index in it, full path) of the value an override KEY sets.

    Raises:
        LookupError: KEY names no variable or field, or a container on its path does not exist.
    """
    if "." not in key:
        variables = data.get("vars")
        variables = variables if isinstance(variables, dict) else {}
        if key in variables:
            return variables, key, ("vars", key)
        if key in Recipe.model_fields:
            return data, key, (key,)
        names = [*variables, *Recipe.model_fields]
        raise LookupError(f"no variable or recipe field named {shorten(key)}"
                          + (_did_you_mean(key, names) or f"; valid names: {', '.join(names)}"))
    segments = key.split(".")
    if segments[0] == "quantization":
        _expand_quantization_preset(data)
    path: list[str | int] = []
    node: Any = data
    for depth, segment in enumerate(segments):
        where = format_path(path) or "the recipe"
        if isinstance(node, dict):
            if node.get(segment) is None and depth < len(segments) - 1 and _sub_model(tuple(path), node, segment):
                node[segment] = {}     # weights.prefix=mlp. in a recipe without weights: as 'weights={prefix: mlp.}'
            if segment not in node and depth < len(segments) - 1:
                raise LookupError(f"{where} has no {shorten(segment)}{_did_you_mean(segment, node)}")
            step: str | int = segment
        elif isinstance(node, list):
            step = list_index(segment)
            if step is None or step >= len(node):
                raise LookupError(f"{shorten(segment)} is not an index of {where} (a list of {len(node)} items)")
        else:
            raise LookupError(f"{where} is a {type(node).__name__}, not a mapping or a list")
        path.append(step)
        if depth < len(segments) - 1:
            node = node[step]
    return node, path[-1], tuple(path)


def _sub_model(path: FieldPath, node: dict, name: str) -> bool:
    """Whether field ``name`` of the mapping ``node`` at ``path`` is an optional section the schema
    defines as a mapping of its own (a pydantic model, such as the recipe's ``weights``): a dotted override
    of one of its fields may then create it, empty, when the recipe leaves it out."""
    import typing

    model = _model_at(path, node)
    field = model.model_fields.get(name) if model is not None else None
    if field is None:
        return False
    types = typing.get_args(field.annotation) or (field.annotation,)
    return any(isinstance(t, type) and issubclass(t, BaseModel) for t in types)


def _expand_quantization_preset(data: dict) -> None:
    """Replace a preset name in ``data["quantization"]`` (default ``none``) by its full spec mapping, so that
    a dotted override (``quantization.group_size=64``) can change one field of the preset.

    Raises:
        LookupError: the value is not a known preset name (nor already a mapping).
    """
    value = data.get("quantization", "none")
    if isinstance(value, dict):
        return
    if not isinstance(value, str) or value not in QUANTIZATION_PRESETS:
        raise LookupError(f"quantization is {shorten(value)}, not a preset name or a mapping whose fields could be set; "
                          f"valid presets: {', '.join(QUANTIZATION_PRESETS)}")
    data["quantization"] = QUANTIZATION_PRESETS[value].model_dump(mode="python")


# --- interpolation ---------------------------------------------------------------------------------

class _Interpolator:
    """Replaces ``${name}`` in the string values of recipe data with the variables of ``vars:``.

    Bounded (:mod:`core.limits`): the values substituted count toward ``MAX_VALUES`` each time
    they are used, nesting after substitution stays within ``MAX_DEPTH`` (and so does the nesting
    walked while variables are resolved, the values of the variables being resolved counted
    together, which bounds the recursion), a string built by interpolation and all of them together
    stay within ``MAX_STRING_CHARS``, and variables may reference each other at most
    ``MAX_VARIABLE_CHAIN`` deep; each excess is an issue at the reference (or the value) where it happened.
    """

    def __init__(self, data: dict, issues: IssueCollector):
        self.data = data
        self.issues = issues
        variables = data.get("vars")
        self.raw: dict = variables if isinstance(variables, dict) else {}
        self.resolved: dict = {}
        self.sizes: dict = {}  # variable -> (values, depth) of its resolved value
        self.failed: set = set()  # variables whose own value has a problem, reported once
        self.resolving: list = []  # variables being resolved, to detect cycles
        self.origins: dict[FieldPath, str] = {}  # values that are exactly "${name}" -> name
        self.values = _measure(data)[0]  # values in the data, plus those substitutions add
        self.chars = 0  # characters built by interpolation into strings
        self.level = 0  # mappings and lists being substituted, across the variables being resolved

    def run(self) -> None:
        for name in self.raw:
            self.variable(name, ("vars", name), "")
        if self.raw:
            self.data["vars"] = {name: self.resolved.get(name, value) for name, value in self.raw.items()}
        for key, value in self.data.items():
            if key != "vars":
                self.data[key] = self.substitute(value, (key,))

    def substitute(self, value: Any, path: FieldPath) -> Any:
        if isinstance(value, str):
            return self.expand(value, path)
        if not isinstance(value, (dict, list)):
            return value
        if self.level >= MAX_DEPTH:   # a variable's value nested inside the value that references it, ...
            self.too_large(path, "", f"mappings and lists nested more than {MAX_DEPTH} levels deep through the "
                                     "values of variables that reference each other")
            return value
        self.level += 1
        try:
            if isinstance(value, dict):
                return {key: self.substitute(item, path + (key,)) for key, item in value.items()}
            return [self.substitute(item, path + (index,)) for index, item in enumerate(value)]
        finally:
            self.level -= 1

    def expand(self, text: str, path: FieldPath) -> Any:
        whole = _VARIABLE.fullmatch(text)
        if whole and whole.group(1) is not None:  # exactly "${name}" or "${expr}": keep the value's type
            name = whole.group(1).strip()
            self.origins[path] = name
            if name not in self.raw and is_expression(name):
                return self.arithmetic(whole, path, text)
            value = self.variable(name, path, text)
            if value is not text and name in self.sizes:
                count, depth = self.sizes[name]
                self.values += count
                if self.values > MAX_VALUES:
                    return self.too_large(path, text, f"the recipe expands to more than {MAX_VALUES:,} values "
                                                      f"(${{{name}}} repeats its value each time it is used)")
                if len(path) + depth > MAX_DEPTH:
                    return self.too_large(path, text, f"${{{name}}} nests its value more than {MAX_DEPTH} "
                                                      "levels deep here")
            return value
        length, last = 0, 0
        out: list[str] = []
        for m in _VARIABLE.finditer(text):
            out.append(text[last:m.start()])
            if m.group(1) is None:
                piece = "${"
            elif m.group(1).strip() not in self.raw and is_expression(m.group(1)):
                value = self.arithmetic(m, path, text)
                piece = m.group(0) if value is text else str(value)
            else:
                piece = str(self.variable(m.group(1).strip(), path, m.group(0)))
            length += len(piece)
            self.chars += len(piece)
            if length > MAX_STRING_CHARS or self.chars > MAX_STRING_CHARS:
                return self.too_large(path, text, f"${{...}} interpolation builds more than {MAX_STRING_CHARS:,} "
                                                  "characters")
            out.append(piece)
            last = m.end()
        out.append(text[last:])
        return "".join(out)

    def arithmetic(self, match: re.Match, path: FieldPath, text: str) -> Any:
        """The value of the ``${expr}`` that ``match`` found in the string ``text`` at ``path``
        (:mod:`schemas.expressions`); on a problem, an issue at the file column of the offending token
        inside the expression, and ``text`` is returned."""
        inner, start = match.group(1), match.start(1)

        def lookup(name: str, offset: int) -> Any:
            if name not in self.raw:
                known = _did_you_mean(name, self.raw) or (
                    f"; defined variables: {', '.join(self.raw)}" if self.raw else "; no variables are defined")
                raise ExpressionError(f"unknown variable {shorten(name)}{known}", offset)
            value = self.variable(name, path, failed)
            if value is failed:   # the variable's own problem is reported where it is
                raise _Reported()
            return value

        failed = object()
        try:
            return evaluate(inner, lookup)
        except _Reported:
            return text
        except ExpressionError as err:
            index = start + err.offset
            line = text.count("\n", 0, index) + 1
            column = index - (text.rfind("\n", 0, index) + 1)
            reference = match.group(0) if len(match.group(0)) <= 60 else match.group(0)[:56] + "...}"
            self.issues.add_in_text(path, line, column, f"in {reference}: {err.message}")
            return text

    def too_large(self, path: FieldPath, text: str, message: str) -> str:
        if not self.issues.covers(path):
            self.issues.add(path, message)
        return text

    def variable(self, name: str, path: FieldPath, text: str) -> Any:
        """Value of variable ``name`` referenced as ``text`` at ``path``; on a problem, report it and keep ``text``."""
        if name in self.resolved:
            return self.resolved[name]
        if name in self.failed:
            self.issues.mark(path)
            return text
        if name not in self.raw:
            known = _did_you_mean(name, self.raw) or (
                f"; defined variables: {', '.join(self.raw)}" if self.raw else "; no variables are defined")
            self.issues.add(path, f"unknown variable {shorten(name)}{known}")
            return text
        if name in self.resolving:
            cycle = " -> ".join(self.resolving[self.resolving.index(name):] + [name])
            self.issues.add(path, f"variables reference each other in a cycle: {cycle}")
            return text
        if len(self.resolving) >= MAX_VARIABLE_CHAIN:
            self.issues.add(path, f"variables reference each other more than {MAX_VARIABLE_CHAIN} levels deep")
            return text
        self.resolving.append(name)
        value = self.substitute(self.raw[name], ("vars", name))
        self.resolving.pop()
        if self.issues.covers(("vars", name)):
            self.failed.add(name)
            self.issues.mark(path)
            return text
        self.resolved[name] = value
        self.sizes[name] = _measure(value)
        return value


class _Reported(Exception):
    """A variable used in a ``${...}`` expression has a problem already reported at its own place."""


def _measure(value: Any) -> tuple[int, int]:
    """``(values, depth)`` of plain data: how many scalars, mappings and lists it holds (shared
    objects counted each time they occur) and how deeply its mappings and lists nest. Iterative."""
    count, deepest = 0, 0
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        count += 1
        if isinstance(item, dict):
            deepest = max(deepest, depth + 1)
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            deepest = max(deepest, depth + 1)
            stack.extend((v, depth + 1) for v in item)
        if count > MAX_VALUES:   # an already oversized value: no need to count the rest
            break
    return count, deepest


# --- validation ------------------------------------------------------------------------------------

def _add_validation_issues(exc: ValidationError, data: dict, issues: IssueCollector,
                           origins: dict[FieldPath, str]) -> None:
    found: dict[tuple[FieldPath, str, bool], None] = {}  # ordered set: pydantic may repeat an error
    for error in exc.errors(include_url=False):
        path, rest = _data_path(data, error["loc"])
        kind, at_key = error["type"], rest[:1] == ("[key]",)
        if kind == "missing":
            message = f"missing required field {rest[0]!r}"
        elif kind == "extra_forbidden":
            message, at_key = _unknown_field(data, path), True
        elif kind == "union_tag_invalid":
            message = f"unknown layer type {shorten(error['ctx']['tag'])}; valid types: {_valid_layer_types()}"
            path += ("type",)
        elif kind in ("union_tag_not_found", "layer_type_missing"):
            message = f"missing required field 'type'; valid types: {_valid_layer_types()}"
        elif kind == "input_kind":
            message = f"{error['msg']}, got type {shorten(_value_at(data, path).get('type'))}" \
                if isinstance(_value_at(data, path), dict) else f"{error['msg']}, got {shorten(_value_at(data, path))}"
        elif kind == "quantization_kind":
            message, path = _quantization_kind_issue(data, path)
        else:
            message = error["msg"]
            if message.startswith("Input should") and isinstance(error["input"], (str, int, float)):
                message += f", got {shorten(error['input'])}"
            if path in origins:
                known = data["vars"] if isinstance(data.get("vars"), dict) else {}
                names = [origins[path]] if origins[path] in known else _NAME.findall(origins[path])
                overrides = ", ".join(o for o in dict.fromkeys(issues.source.override(("vars", n)) for n in names) if o)
                message += f" (from ${{{origins[path]}}}{f' set by override {overrides}' if overrides else ''})"
        if not issues.covers(path):
            found[path, message, at_key] = None
    for path, message, at_key in found:
        issues.add(path, message, at_key=at_key)


#: Tags the models' callable discriminators put into pydantic error locations (not keys of the data).
_UNION_TAGS = ("block", "tensor", "function", "inputs")


def _data_path(data: Any, loc: tuple) -> tuple[FieldPath, tuple]:
    """Split a pydantic error ``loc`` into the longest path that exists in ``data`` and the rest.

    Drops the discriminator tags pydantic inserts for layers (``('model', 'layers', 'fc', 'Linear', 'bias')``).
    """
    path: list = []
    node = data
    for index, segment in enumerate(loc):
        if isinstance(node, dict) and segment in node:
            node = node[segment]
        elif isinstance(node, list) and isinstance(segment, int) and 0 <= segment < len(node):
            node = node[segment]
        elif isinstance(node, dict) and segment in (node.get("type"), node.get("kind")):
            continue
        elif isinstance(node, dict) and segment in _UNION_TAGS:   # tags of callable discriminators
            continue
        elif isinstance(node, str) and segment == "preset" and path == ["quantization"]:
            continue
        else:
            return tuple(path), tuple(loc[index:])
        path.append(segment)
    return tuple(path), ()


def _value_at(data: Any, path: FieldPath) -> Any:
    for segment in path:
        data = data[segment]
    return data


def _unknown_field(data: dict, path: FieldPath) -> str:
    parent: Any = data
    for segment in path[:-1]:
        parent = parent[segment]
    model = _model_at(path[:-1], parent)
    if model is None:
        return f"unknown field {shorten(path[-1])}"
    fields = list(model.model_fields)
    return f"unknown field {shorten(path[-1])}" + (_did_you_mean(path[-1], fields) or f"; valid fields: {', '.join(fields)}")


def _model_at(path: FieldPath, value: Any) -> type[BaseModel] | None:
    """The model that validates the mapping ``value`` found at ``path`` of the recipe data."""
    match path:
        case ():
            return Recipe
        case ("model",):
            return ModelDef
        case ("model", "layers", _):
            layer_type = value.get("type")
            return LAYER_TYPES.get(layer_type, BlockLayer) if isinstance(layer_type, str) else None
        case ("functions", _) if isinstance(value, dict) and _function_tag(value) == "function":
            return FunctionDef
        case ("functions", _, _) | ("functions", _, "inputs", _):
            kind = value.get("type", "tensor")
            return {"tensor": InputSpec, "int": IntInput, "kv_cache": KVCacheInput}.get(kind)
        case ("blocks", _):
            return BlockDef
        case ("blocks", _, "layers", _):
            layer_type = value.get("type")
            return LAYER_TYPES.get(layer_type, BlockLayer) if isinstance(layer_type, str) else None
        case ("weights",):
            return WeightsDef
        case ("quantization",):
            kind = value.get("kind")
            return QUANTIZATION_KINDS.get(kind) if isinstance(kind, str) else None
    return None


def _quantization_kind_issue(data: dict, path: FieldPath) -> tuple[str, FieldPath]:
    """Message and path for a ``quantization`` value that is neither a preset name nor a spec with a known kind."""
    value = data.get("quantization")
    kinds = ", ".join(QUANTIZATION_KINDS)
    if isinstance(value, dict):
        if "kind" not in value:
            return f"missing required field 'kind'; valid kinds: {kinds}", path
        return (f"unknown quantization kind {shorten(value['kind'])}{_did_you_mean(value['kind'], QUANTIZATION_KINDS)}; "
                f"valid kinds: {kinds}"), path + ("kind",)
    return (f"expected a preset name ({', '.join(QUANTIZATION_PRESETS)}) or a mapping with a 'kind' "
            f"({kinds}), got {shorten(value)}"), path
