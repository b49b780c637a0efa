"""The JSON Schema of recipes, for editors (``build --schema``).

:func:`recipe_json_schema` is pydantic's schema of :class:`~schemas.models.Recipe` (draft 2020-12),
post-processed by a generic walk, so that it describes recipe *files* rather than validated
recipes:

- wherever a number, an integer, a boolean, an enumerated value or a constrained string is
  expected, a ``${var}`` interpolation string is accepted too (``in_features: ${hidden_size}``,
  ``dtype: ${dtype}``): the loader replaces a string that is exactly ``${name}`` by the variable's
  value before validation. Plain strings accept interpolation already. Tags (``const``: a layer's
  ``type``, a quantization's ``kind``) stay literal: editors pick the alternative of a union by them;
- in a union whose alternatives are objects told apart by one ``const`` property (``type``,
  ``kind``), that property is required, as the loader requires it (pydantic leaves it optional
  because the models give it a default);
- the file-only syntax of block arguments (:mod:`schemas.block_args`, expanded by the loader before
  validation, so absent from the models): a block's ``args``, a block layer's ``per_layer`` and its
  argument keys (any other key of a block layer entry); a recipe's ``include`` list (:mod:`schemas.includes`,
  merged by the loader too);
- ``$schema`` and ``title`` are set.

The walk follows only schema-valued keywords (``properties``, ``items``, ``anyOf``, ``$defs``, ...),
never ``default`` / ``examples`` values, so new recipe fields need nothing here. What the schema
cannot say (a placeholder's syntax in ``weights.map``, divisibility of ``group_size``, a shape's
memory) the loader still checks; the schema is for completion and early squiggles, not a
replacement for ``build --validate``.
"""
from __future__ import annotations

import copy
import json
from typing import Any

from .models import Recipe

__all__ = ["recipe_json_schema", "accept_interpolation", "INTERPOLATION_SCHEMA", "JSON_SCHEMA_DIALECT"]

JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
"""The ``$schema`` of the schema: JSON Schema draft 2020-12 (what pydantic 2 generates)."""

INTERPOLATION_SCHEMA: dict[str, Any] = {
    "type": "string",
    "pattern": r"^\$\{[^}]*\}$",
    "description": "${name}: the value of the recipe variable `name` (vars: or a KEY=VALUE override); "
                   "${expr}: arithmetic of variables and numbers (${3 * hidden_size}, ${hidden_size // num_heads})",
}
"""A string that is exactly one ``${name}`` reference or ``${expr}`` expression (what the loader replaces by a
typed value)."""

# schema-valued keywords of draft 2020-12: a schema, a list of schemas, or a map of name -> schema
_ONE = ("additionalProperties", "items", "contains", "not", "if", "then", "else", "unevaluatedItems",
        "unevaluatedProperties", "propertyNames", "contentSchema")
_LIST = ("anyOf", "allOf", "oneOf", "prefixItems")
_MAP = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
# annotations kept on the outside when a schema is wrapped in anyOf
_META = ("title", "description", "default", "examples", "deprecated", "readOnly", "writeOnly", "$comment")
_SCALARS = ("integer", "number", "boolean")
_STRING_CONSTRAINTS = ("pattern", "minLength", "maxLength", "format", "enum")


def _takes_interpolation(node: Any) -> bool:
    """Whether ``node`` expects a value that a ``${var}`` string would not satisfy and may stand for:
    a number, integer, boolean, enumerated value, constrained string (not a tag ``const``) or a
    model's object (a ``$ref``: a var may hold a whole mapping, as ``rope_scaling: ${rope_scaling}``)."""
    if not isinstance(node, dict) or "const" in node:
        return False
    if "enum" in node or "$ref" in node:
        return True
    kind = node.get("type")
    kinds = kind if isinstance(kind, list) else [kind]
    if any(k in _SCALARS for k in kinds):
        return True
    return "string" in kinds and any(k in node for k in _STRING_CONSTRAINTS)


def _takes_any_string(node: Any) -> bool:
    return isinstance(node, dict) and node.get("type") == "string" and not any(
        k in node for k in (*_STRING_CONSTRAINTS, "const"))


class _Walker:
    """One walk of a schema; ``ref`` is the ``$ref`` of the interpolation schema in its ``$defs``."""

    def __init__(self, ref: str) -> None:
        self.ref = {"$ref": ref}

    def wrap(self, node: dict) -> dict:
        """``node`` or an interpolation: ``{meta..., "anyOf": [node without meta, {"$ref": ...}]}``."""
        core = {k: v for k, v in node.items() if k not in _META}
        outer = {k: node[k] for k in _META if k in node}
        outer["anyOf"] = [core, dict(self.ref)]
        return outer

    def flatten_any_of(self, alternatives: list) -> list:
        """Splice alternatives that are bare ``anyOf`` lists; drop repeats, and the interpolation
        where another alternative takes any string."""
        out, seen = [], set()
        for alt in alternatives:
            bare = isinstance(alt, dict) and "anyOf" in alt and set(alt) <= {"anyOf", *_META}
            for item in alt["anyOf"] if bare else [alt]:
                key = json.dumps(item, sort_keys=True)
                if key not in seen:
                    seen.add(key)
                    out.append(item)
        if any(map(_takes_any_string, out)):
            out = [item for item in out if item != self.ref]
        return out

    def walk(self, node: Any, wrap: bool) -> Any:
        if not isinstance(node, dict):
            return node
        out = dict(node)
        for key in _MAP:
            if isinstance(node.get(key), dict):
                out[key] = {name: self.walk(sub, True) for name, sub in node[key].items()}
        for key in _ONE:
            if isinstance(node.get(key), dict):
                # keys are never interpolated; nor is a negated schema (an interpolation there would forbid
                # `${x}`: a block layer's `type: ${pooler_type}` is not a layer type's name)
                out[key] = self.walk(node[key], key not in ("propertyNames", "not"))
        for key in ("anyOf", "allOf", "prefixItems"):
            if isinstance(node.get(key), list):
                out[key] = [self.walk(sub, True) for sub in node[key]]
        if isinstance(out.get("anyOf"), list):
            out["anyOf"] = self.flatten_any_of(out["anyOf"])
        if isinstance(node.get("oneOf"), list):
            # exactly one alternative must match: wrapping several alternatives would make `${x}` match
            # each of them, so the union as a whole takes the interpolation instead
            alternatives = node["oneOf"]
            out["oneOf"] = [self.walk(sub, False) for sub in alternatives]
            if wrap and any(map(_takes_interpolation, alternatives)) and not any(map(_takes_any_string, alternatives)):
                return self.wrap(out)
        if wrap and _takes_interpolation(node):
            return self.wrap(out)
        return out


OPTIONAL_TAG = "x-optional-tag"
"""Marks (in a model field's ``json_schema_extra``) a union tag that may be left out: the loader takes
its default (an input without ``type`` is a tensor)."""


def _require_tags(schema: dict) -> None:
    """In every ``oneOf`` / ``anyOf`` of ``$ref``s to object schemas that all have one ``const``
    property of the same name (a tag), make that property required in each of them."""
    defs = schema.get("$defs", {})

    def target(alt: Any) -> dict | None:
        ref = alt.get("$ref", "") if isinstance(alt, dict) else ""
        return defs.get(ref[len("#/$defs/"):]) if ref.startswith("#/$defs/") else None

    def tags(obj: dict) -> set[str]:
        props = obj.get("properties", {})
        return {name for name, sub in props.items() if isinstance(sub, dict) and "const" in sub}

    def visit(node: Any) -> None:
        if isinstance(node, dict):
            for key in ("oneOf", "anyOf"):
                objs = [target(alt) for alt in node.get(key, []) if target(alt) is not None]
                if len(objs) >= 2:
                    shared = set.intersection(*(set(o.get("properties", {})) for o in objs))
                    for name in sorted(shared):
                        if sum(name in tags(o) for o in objs) < 2:
                            continue
                        for obj in objs:   # a tag the loader defaults when absent is marked OPTIONAL_TAG
                            prop = obj["properties"][name]
                            if not prop.get(OPTIONAL_TAG) and name not in obj.setdefault("required", []):
                                obj["required"].append(name)
            for value in node.values():
                visit(value)
        elif isinstance(node, list):
            for value in node:
                visit(value)

    visit(schema)


def accept_interpolation(schema: dict) -> dict:
    """A copy of the JSON Schema ``schema`` in which every number, integer, boolean, enumerated
    value and constrained string also accepts a ``${var}`` string (:data:`INTERPOLATION_SCHEMA`,
    added to ``$defs`` as ``Interpolation`` -- or ``Interpolation1``... if that name is taken),
    except tag ``const``s and inside ``oneOf`` alternatives (the ``oneOf`` takes it as a whole),
    and in which the tag of a union of tagged objects is required. Generic: it walks every
    schema-valued keyword and ignores what it does not know. Raises nothing for a dict; any other
    input is returned unchanged."""
    if not isinstance(schema, dict):
        return schema
    defs = schema.get("$defs", {})
    name = next(n for n in ("Interpolation", *(f"Interpolation{i}" for i in range(1, len(defs) + 2)))
                if n not in defs)
    out = _Walker(f"#/$defs/{name}").walk(copy.deepcopy(schema), False)
    out.setdefault("$defs", {})[name] = dict(INTERPOLATION_SCHEMA)
    _require_tags(out)
    return out


def _block_arguments(schema: dict) -> None:
    """Add block arguments' file syntax (:mod:`schemas.block_args`) to ``BlockDef`` / ``BlockLayer``."""
    defs = schema.get("$defs", {})
    if "BlockDef" in defs:
        defs["BlockDef"]["properties"]["args"] = {
            "description": "block arguments: {name: default, ...} or [name, {name: default}, ...]",
            "anyOf": [{"type": "object"}, {"type": "array", "items": {"anyOf": [{"type": "string"},
                                                                                {"type": "object"}]}}]}
    if "BlockLayer" in defs:
        defs["BlockLayer"]["properties"]["per_layer"] = {
            "description": "with repeat: {argument: [value per copy, cycled], ...}",
            "type": "object", "additionalProperties": {"type": "array"}}
        defs["BlockLayer"]["additionalProperties"] = True   # the block's arguments
    schema.setdefault("properties", {})["include"] = {
        "description": "YAML files (paths relative to this one) whose vars and blocks this recipe uses",
        "type": "array", "items": {"type": "string"}}


def recipe_json_schema() -> dict:
    """The JSON Schema (draft 2020-12) of recipe files: :class:`~schemas.models.Recipe`'s pydantic
    schema with ``${var}`` interpolation accepted wherever a number, boolean or enumerated value
    is expected, union tags required, ``$schema`` and ``title`` set. A new dict each call
    (JSON-serializable: ``json.dumps(recipe_json_schema(), indent=2)`` is what ``build --schema``
    prints)."""
    schema = accept_interpolation(Recipe.model_json_schema())
    _block_arguments(schema)
    head = {"$schema": JSON_SCHEMA_DIALECT, "title": "model-builder recipe"}
    schema.pop("title", None)
    return {**head, **schema}
