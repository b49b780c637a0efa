"""Load a recipe: parse YAML with positions, apply ``KEY=VALUE`` overrides, substitute ``${var}``, validate."""

from __future__ import annotations

import difflib
import os
import re
from typing import Any, Iterable

import yaml
from pydantic import BaseModel, ValidationError

from .errors import RecipeError, RecipeIssue
from .models import LAYER_TYPES, QUANTIZATION_KINDS, QUANTIZATION_PRESETS, InputSpec, ModelDef, Recipe, WeightsDef
from .source import FieldPath, IssueCollector, SourceMap, format_path, parse_yaml

_VARIABLE = re.compile(r"\$\$\{|\$\{([^}]*)\}")  # `$${` escapes a literal `${`
_VALID_LAYER_TYPES = ", ".join(sorted(LAYER_TYPES, key=str.lower))


def load_recipe(path: str | os.PathLike, overrides: Iterable[str] = ()) -> Recipe:
    """Load, override, interpolate and validate the recipe file at ``path``.

    ``overrides`` are ``KEY=VALUE`` strings (see :func:`load_recipe_text`); a single string is one override.

    Raises:
        RecipeError: the file cannot be read, or the recipe has problems (all of them are listed).
    """
    try:
        with open(path, encoding="utf-8") as file:
            text = file.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise RecipeError([RecipeIssue(os.fspath(path), None, None, "", f"cannot read recipe: {exc}")]) from None
    return load_recipe_text(text, filename=os.fspath(path), overrides=overrides)


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
    data = parse_yaml(text, issues)
    if not isinstance(data, dict):
        issue = source.issue((), "a recipe must be a mapping of fields" if data is not None or issues.issues
                             else "the recipe is empty: a recipe must be a mapping of fields")
        if issue.line is None and not issues.issues:   # an empty file: point at its start
            issue = RecipeIssue(issue.file, 1, 1, issue.path, issue.message)
        raise RecipeError([*issues.issues, issue])
    _apply_overrides(data, overrides, issues)
    interpolator = _Interpolator(data, issues)
    interpolator.run()
    try:
        recipe = Recipe.model_validate(data)
    except ValidationError as exc:
        _add_validation_issues(exc, data, issues, interpolator.origins)
    if issues.issues:
        raise RecipeError(sorted(issues.issues, key=lambda i: (i.line is not None, i.line or 0, i.column or 0)))
    recipe._source = source
    return recipe


def _did_you_mean(word: Any, candidates: Iterable[Any]) -> str:
    matches = difflib.get_close_matches(str(word), [str(c) for c in candidates], n=3)
    return f"; did you mean {' or '.join(map(repr, matches))}?" if matches else ""


# --- overrides -------------------------------------------------------------------------------------

def _apply_overrides(data: dict, overrides: Iterable[str], issues: IssueCollector) -> None:
    """Apply ``KEY=VALUE`` overrides, a key before the keys nested under it whatever the order
    given (``quantization.group_size=64 quantization=q4f16_1`` sets the preset, then its group
    size); otherwise in the order given (the last of two equal keys wins)."""
    items = [overrides] if isinstance(overrides, str) else list(overrides)
    found = []
    for pos, override in sorted(enumerate(items), key=lambda t: (t[1].partition("=")[0].strip().count("."), t[0])):
        problem = _apply_override(data, override, issues.source)
        if problem is not None:
            key = override.partition("=")[0].strip()
            found.append((pos, RecipeIssue(f"<override {override}>", None, None, key, problem)))
    issues.issues.extend(issue for _, issue in sorted(found, key=lambda t: t[0]))   # in the order given


def _apply_override(data: dict, override: str, source: SourceMap) -> str | None:
    """Apply one ``KEY=VALUE`` override to ``data``; return what is wrong with it, or ``None``."""
    key, has_value, text = override.partition("=")
    key = key.strip()
    if not has_value or not key:
        return "expected KEY=VALUE"
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        return f"invalid value: {getattr(exc, 'problem', None) or exc}"
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
        raise LookupError(f"no variable or recipe field named {key!r}"
                          + (_did_you_mean(key, names) or f"; valid names: {', '.join(names)}"))
    segments = key.split(".")
    if segments[0] == "quantization":
        _expand_quantization_preset(data)
    path: list[str | int] = []
    node: Any = data
    for depth, segment in enumerate(segments):
        where = format_path(path) or "the recipe"
        if isinstance(node, dict):
            if segment not in node and depth < len(segments) - 1:
                raise LookupError(f"{where} has no {segment!r}{_did_you_mean(segment, node)}")
            step: str | int = segment
        elif isinstance(node, list):
            if not (segment.isdigit() and int(segment) < len(node)):
                raise LookupError(f"{segment!r} is not an index of {where} (a list of {len(node)} items)")
            step = int(segment)
        else:
            raise LookupError(f"{where} is a {type(node).__name__}, not a mapping or a list")
        path.append(step)
        if depth < len(segments) - 1:
            node = node[step]
    return node, path[-1], tuple(path)


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
        raise LookupError(f"quantization is {value!r}, not a preset name or a mapping whose fields could be set; "
                          f"valid presets: {', '.join(QUANTIZATION_PRESETS)}")
    data["quantization"] = QUANTIZATION_PRESETS[value].model_dump(mode="python")


# --- interpolation ---------------------------------------------------------------------------------

class _Interpolator:
    """Replaces ``${name}`` in the string values of recipe data with the variables of ``vars:``."""

    def __init__(self, data: dict, issues: IssueCollector):
        self.data = data
        self.issues = issues
        variables = data.get("vars")
        self.raw: dict = variables if isinstance(variables, dict) else {}
        self.resolved: dict = {}
        self.failed: set = set()  # variables whose own value has a problem, reported once
        self.resolving: list = []  # variables being resolved, to detect cycles
        self.origins: dict[FieldPath, str] = {}  # values that are exactly "${name}" -> name

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
        if isinstance(value, dict):
            return {key: self.substitute(item, path + (key,)) for key, item in value.items()}
        if isinstance(value, list):
            return [self.substitute(item, path + (index,)) for index, item in enumerate(value)]
        return value

    def expand(self, text: str, path: FieldPath) -> Any:
        whole = _VARIABLE.fullmatch(text)
        if whole and whole.group(1) is not None:  # exactly "${name}": keep the value's type
            self.origins[path] = whole.group(1).strip()
            return self.variable(self.origins[path], path, text)
        return _VARIABLE.sub(
            lambda m: "${" if m.group(1) is None else str(self.variable(m.group(1).strip(), path, m.group(0))), text)

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
            self.issues.add(path, f"unknown variable {name!r}{known}")
            return text
        if name in self.resolving:
            cycle = " -> ".join(self.resolving[self.resolving.index(name):] + [name])
            self.issues.add(path, f"variables reference each other in a cycle: {cycle}")
            return text
        self.resolving.append(name)
        value = self.substitute(self.raw[name], ("vars", name))
        self.resolving.pop()
        if self.issues.covers(("vars", name)):
            self.failed.add(name)
            self.issues.mark(path)
            return text
        self.resolved[name] = value
        return value


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
            message = f"unknown layer type {error['ctx']['tag']!r}; valid types: {_VALID_LAYER_TYPES}"
            path += ("type",)
        elif kind == "union_tag_not_found":
            message = f"missing required field 'type'; valid types: {_VALID_LAYER_TYPES}"
        elif kind == "quantization_kind":
            message, path = _quantization_kind_issue(data, path)
        else:
            message = error["msg"]
            if message.startswith("Input should") and isinstance(error["input"], (str, int, float)):
                message += f", got {error['input']!r}"
            if path in origins:
                override = issues.source.override(("vars", origins[path]))
                message += f" (from ${{{origins[path]}}}{f' set by override {override}' if override else ''})"
        if not issues.covers(path):
            found[path, message, at_key] = None
    for path, message, at_key in found:
        issues.add(path, message, at_key=at_key)


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
        elif isinstance(node, str) and segment == "preset" and path == ["quantization"]:
            continue
        else:
            return tuple(path), tuple(loc[index:])
        path.append(segment)
    return tuple(path), ()


def _unknown_field(data: dict, path: FieldPath) -> str:
    parent: Any = data
    for segment in path[:-1]:
        parent = parent[segment]
    model = _model_at(path[:-1], parent)
    if model is None:
        return f"unknown field {path[-1]!r}"
    fields = list(model.model_fields)
    return f"unknown field {path[-1]!r}" + (_did_you_mean(path[-1], fields) or f"; valid fields: {', '.join(fields)}")


def _model_at(path: FieldPath, value: Any) -> type[BaseModel] | None:
    """The model that validates the mapping ``value`` found at ``path`` of the recipe data."""
    match path:
        case ():
            return Recipe
        case ("model",):
            return ModelDef
        case ("model", "layers", _):
            layer_type = value.get("type")
            return LAYER_TYPES.get(layer_type) if isinstance(layer_type, str) else None
        case ("functions", _, _):
            return InputSpec
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
        return (f"unknown quantization kind {value['kind']!r}{_did_you_mean(value['kind'], QUANTIZATION_KINDS)}; "
                f"valid kinds: {kinds}"), path + ("kind",)
    return (f"expected a preset name ({', '.join(QUANTIZATION_PRESETS)}) or a mapping with a 'kind' "
            f"({kinds}), got {value!r}"), path
