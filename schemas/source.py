"""YAML parsing that keeps source positions, and :class:`SourceMap` to look them up by field path."""

from __future__ import annotations

import re
from typing import Any, Union

import yaml

from .errors import RecipeError, RecipeIssue, override_label, shorten
from core.limits import MAX_DEPTH, MAX_VALUES

FieldPath = tuple[Union[str, int], ...]
"""Path to a value in recipe data: mapping keys and list indices, e.g. ``("model", "layers", "fc", "bias")``."""

_MAPPING_TAG = yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG
_SEQUENCE_TAG = yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG
_MERGE_TAG = "tag:yaml.org,2002:merge"
class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    """PyYAML's safe loader, on libyaml where PyYAML has it (about 10x faster: a 4 MiB recipe parses in
    seconds, not a minute; both give the same nodes and marks, but libyaml's reader errors count
    bytes), resolving floats as YAML 1.2 does: a plain ``1e-12`` / ``2E5`` (no dot, or no sign in the
    exponent) is a number, where YAML 1.1 (PyYAML) makes it a string. Quoted or ``!!str`` stays a
    string."""


_Loader.add_implicit_resolver("tag:yaml.org,2002:float",
                              re.compile(r"^[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)[eE][-+]?[0-9]+$"),
                              list("-+0123456789."))
_LOADER = _Loader

# Inside a flow collection (`{a: ${n}}`) YAML ends a plain scalar at `{` or `}`, so the braces of
# `${name}` references (and `${expr}` arithmetic) are swapped for private-use characters while parsing
# and restored in the values.
_REFERENCE = re.compile(r"\$\{[^{}\n]*\}")   # `${name}`, `${3 * hidden_size}`: one line, no braces inside

_MASK = str.maketrans("{}", "\ue000\ue001")
_SURROGATE = re.compile("[\ud800-\udfff]")
_UNMASK = str.maketrans("\ue000\ue001", "{}")


def format_path(path: FieldPath) -> str:
    """Return ``path`` as dotted text (``functions.forward.x.shape.0``); the empty path gives ``""``."""
    return ".".join(str(segment) for segment in path)


def as_path(path: FieldPath | str) -> FieldPath:
    """Return ``path`` as a tuple; a dotted string is split on ``.`` and segments that are list indices
    (:func:`list_index`) become ints."""
    if isinstance(path, str):
        return tuple(part if list_index(part) is None else list_index(part) for part in path.split(".")) if path else ()
    return tuple(path)


def list_index(segment: str) -> int | None:
    """The list index a path segment names (ASCII digits, at most 18 of them: ``"0"`` -> 0), else ``None``
    (``"²"`` is a digit to ``str.isdigit`` but no index; 5,000 digits would not even convert)."""
    if segment.isascii() and segment.isdigit() and len(segment) <= 18:
        return int(segment)
    return None


class _OverrideNode:
    """One path segment in :class:`SourceMap`'s trie of overridden paths: the override that set the
    value here (``None`` if none did) and the nodes of the segments below it."""

    __slots__ = ("override", "children")

    def __init__(self) -> None:
        self.override: str | None = None
        self.children: dict[str | int, _OverrideNode] = {}


class SourceMap:
    """Source positions of the values of one recipe, looked up by field path (a tuple or dotted string).

    Positions are ``(line, column)``, both 1-based. Values set by a command-line override have no
    file position; issues about them cite the override instead.
    """

    def __init__(self, file: str, text: str = ""):
        self.file = file
        self._lines = text.splitlines()
        self._values: dict[FieldPath, yaml.Node] = {}
        self._keys: dict[FieldPath, yaml.Node] = {}
        self._overrides = _OverrideNode()   # a trie of the paths overrides set, keyed by path segment
        self.override_steps = 0   # trie nodes visited by record_override / override (a linear-work check)
        self._aliases: dict[FieldPath, FieldPath] = {}   # ("blocks", "QKV_1") -> ("blocks", "QKV")
        self._foreign: dict[FieldPath, SourceMap] = {}    # ("blocks", "MLP") -> the included file's map

    def record(self, path: FieldPath, node: yaml.Node, key: yaml.Node | None = None) -> None:
        """Record the YAML node holding the value at ``path`` (and the node of its mapping key, if any)."""
        self._values[path] = node
        if key is not None:
            self._keys[path] = key

    def alias(self, new: FieldPath, old: FieldPath) -> None:
        """Make the positions of paths under ``new`` those of the same paths under ``old`` (an instance of a
        block with arguments, :mod:`schemas.block_args`, is located at the block's own text)."""
        self._aliases[tuple(new)] = tuple(old)

    def adopt(self, prefix: FieldPath, other: "SourceMap") -> None:
        """Locate the values under ``prefix`` (``("blocks", "MLP")``, ``("vars", "hidden")``) in ``other``, the
        source of an included file that gave them (:mod:`schemas.includes`), at the same path there."""
        self._foreign[tuple(prefix)] = other

    def _real(self, path: FieldPath) -> FieldPath:
        for _ in range(len(self._aliases)):   # an alias of an alias: bounded by their number
            old = self._aliases.get(path[:2])
            if old is None:
                break
            path = old + path[2:]
        return path

    def _owner(self, path: FieldPath) -> "SourceMap":
        """The source map (this one, or an included file's) that holds the value at ``path``."""
        return self._foreign.get(self._real(path)[:2], self)

    def file_of(self, path: FieldPath | str) -> str:
        """The file the value at ``path`` came from: this recipe's, or an included file's."""
        return self._owner(as_path(path)).file

    def record_override(self, path: FieldPath, override: str) -> None:
        """Record that the value at ``path`` (and everything below it) was set by ``override`` (``KEY=VALUE``).

        Overrides recorded earlier below ``path`` are forgotten (this one replaced their values). Work is
        ``O(len(path))``: the paths live in a trie keyed by segment, and the subtree below ``path`` is
        dropped as a whole, so ``n`` overrides are recorded in ``O(n)`` (not ``O(n**2)``) time."""
        node = self._overrides
        for segment in path:
            self.override_steps += 1
            node = node.children.setdefault(segment, _OverrideNode())
        node.override = override
        if node.children:
            node.children = {}

    def override(self, path: FieldPath | str) -> str | None:
        """Return the ``KEY=VALUE`` override that set ``path`` or its nearest ancestor that one set, else
        ``None``. ``O(len(path))``: one walk down the trie of overridden paths."""
        node = self._overrides
        found = node.override
        for segment in as_path(path):
            self.override_steps += 1
            node = node.children.get(segment)
            if node is None:
                break
            if node.override is not None:
                found = node.override
        return found

    def position(self, path: FieldPath | str) -> tuple[int, int] | None:
        """Return the position of the value at ``path``, or of its nearest recorded ancestor.

        Returns ``None`` when the value was set by an override or nothing on the path was recorded.
        """
        path = self._real(as_path(path))
        if self.override(path) is not None:
            return None
        if (owner := self._owner(path)) is not self:
            return owner.position(path)
        for depth in range(len(path), -1, -1):
            node = self._values.get(path[:depth])
            if node is not None:
                return node.start_mark.line + 1, node.start_mark.column + 1
        return None

    def key_position(self, path: FieldPath | str) -> tuple[int, int] | None:
        """Return the position of the mapping key of ``path``; falls back to :meth:`position`."""
        path = self._real(as_path(path))
        if (owner := self._owner(path)) is not self and self.override(path) is None:
            return owner.key_position(path)
        key = self._keys.get(path)
        if key is None or self.override(path) is not None:
            return self.position(path)
        return key.start_mark.line + 1, key.start_mark.column + 1

    def text_position(self, path: FieldPath | str, line: int, column: int) -> tuple[int, int] | None:
        """Map a position inside the string value at ``path`` to a file position.

        ``line`` is 1-based and ``column`` 0-based within the string (as :mod:`ast` reports them); the
        result is 1-based. Exact for literal block scalars (``|``) and single-line plain or quoted
        scalars; approximate for folded (``>``) and multi-line flow scalars, and after ``${var}``
        substitution changed the text. Falls back to :meth:`position` when ``path`` is not a string
        scalar; ``None`` for values set by an override.
        """
        path = self._real(as_path(path))
        if (owner := self._owner(path)) is not self and self.override(path) is None:
            return owner.text_position(path, line, column)
        node = self._values.get(path)
        if not isinstance(node, yaml.ScalarNode) or self.override(path) is not None:
            return self.position(path)
        start = node.start_mark
        if node.style in ("|", ">"):  # block content starts on the line after the indicator
            first = start.line + 1
            indent = next((self._indent(i) for i in range(first, len(self._lines)) if self._lines[i].strip()), 0)
            return first + line, indent + column + 1
        index = start.line + line - 1
        if line == 1:
            return index + 1, start.column + (1 if node.style in ("'", '"') else 0) + column + 1
        return index + 1, self._indent(index) + column + 1

    def issue(self, path: FieldPath | str, message: str, *, at_key: bool = False) -> RecipeIssue:
        """Build a :class:`RecipeIssue` located at the value (or with ``at_key``, the key) of ``path``."""
        path = as_path(path)
        override = self.override(path)
        if override is not None:
            return RecipeIssue(override_label(override), None, None, format_path(path), message)
        line, column = (self.key_position(path) if at_key else self.position(path)) or (None, None)
        return RecipeIssue(self.file_of(path), line, column, format_path(path), message)

    def error(self, path: FieldPath | str, message: str) -> RecipeError:
        """Return (not raise) a :class:`RecipeError` with one issue located at ``path``."""
        return RecipeError([self.issue(path, message)])

    def _indent(self, index: int) -> int:
        text = self._lines[index] if index < len(self._lines) else ""
        return len(text) - len(text.lstrip(" "))


class IssueCollector:
    """Issues found so far while loading a recipe, plus the paths they (or their root causes) concern."""

    def __init__(self, source: SourceMap):
        self.source = source
        self.issues: list[RecipeIssue] = []
        self._paths: set[FieldPath] = set()

    def add(self, path: FieldPath, message: str, *, at_key: bool = False, mark: bool = True) -> None:
        """Record an issue at ``path``; with ``mark``, later issues at or below ``path`` are dropped."""
        self.issues.append(self.source.issue(path, message, at_key=at_key))
        if mark:
            self._paths.add(path)

    def add_in_text(self, path: FieldPath, line: int, column: int, message: str) -> None:
        """Record an issue at ``line`` (1-based) and ``column`` (0-based) inside the string value at ``path``
        (:meth:`SourceMap.text_position`; the override that set it, if one did); later issues there are dropped."""
        issue = self.source.issue(path, message)
        if issue.line is not None:
            position = self.source.text_position(path, line, column)
            if position is not None:
                issue = RecipeIssue(issue.file, position[0], position[1], issue.path, message)
        self.issues.append(issue)
        self._paths.add(path)

    def mark(self, path: FieldPath) -> None:
        """Mark ``path`` as already explained by an earlier issue, so later issues there are dropped."""
        self._paths.add(path)

    def covers(self, path: FieldPath) -> bool:
        """Whether ``path`` or one of its ancestors already has an issue."""
        return any(path[:depth] in self._paths for depth in range(len(path) + 1))


class ValueBudget:
    """How many values (scalars, mappings and lists) one recipe load may build from YAML:
    :data:`~core.limits.MAX_VALUES` in all, shared by the recipe file and every override value, so
    that many small overrides cannot add up to what one large value may not."""

    def __init__(self, limit: int = MAX_VALUES) -> None:
        self.limit = limit
        self.used = 0


def parse_yaml(text: str, issues: IssueCollector, budget: ValueBudget | None = None) -> Any:
    """Parse one YAML document safely, recording every value's position in ``issues.source``.

    Supports anchors, aliases and ``<<`` merge keys. Duplicate keys, non-scalar keys, unknown tags,
    values a tag cannot construct (``!!int 1e3``), strings that are not valid Unicode (lone
    surrogates) and recursive aliases are added to ``issues``. Values built count against ``budget``
    (a fresh :class:`ValueBudget` when ``None``). Returns ``None`` for an empty document.

    Raises:
        RecipeError: the text is not well-formed YAML, nests deeper than :data:`~core.limits.MAX_DEPTH`
            (mappings and lists, or ``<<`` merges of merges, after aliases are followed), or expands
            (through aliases) to more than the budget's values (one issue at the problem's position).
    """
    masked = "\ue000" not in text and "\ue001" not in text
    if masked:
        text = _REFERENCE.sub(lambda match: match.group(0).translate(_MASK), text)
    try:
        _check_nesting(text, issues.source.file)
        root = yaml.compose(text, Loader=_LOADER)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        message = f"invalid YAML: {exc.problem or exc.context}"
        if exc.context and exc.context_mark is not None and exc.problem:
            message += f" ({exc.context} at line {exc.context_mark.line + 1}, column {exc.context_mark.column + 1})"
        line, column = (mark.line + 1, mark.column + 1) if mark is not None else (None, None)
        raise RecipeError([RecipeIssue(issues.source.file, line, column, "", message)]) from None
    except yaml.reader.ReaderError as exc:  # a character not allowed in YAML
        position = exc.position
        if any(base.__module__ == "yaml._yaml" for base in _LOADER.__mro__):   # libyaml counts UTF-8 bytes
            position = len(text.encode("utf-8", "surrogatepass")[:position].decode("utf-8", "ignore"))
        line = text.count("\n", 0, position) + 1
        column = position - (text.rfind("\n", 0, position) + 1) + 1
        message = f"invalid YAML: {exc.reason} (character #x{exc.character:04x})"
        raise RecipeError([RecipeIssue(issues.source.file, line, column, "", message)]) from None
    if root is None:
        return None
    builder = _DataBuilder(issues, masked, budget or ValueBudget())
    try:
        return builder.build(root, ())
    except _TooLarge as exc:
        mark = exc.node.start_mark
        raise RecipeError([RecipeIssue(issues.source.file, mark.line + 1, mark.column + 1, format_path(exc.path),
                                       exc.message)]) from None


def _check_nesting(text: str, file: str) -> None:
    """Raise RecipeError at the first collection nested deeper than :data:`MAX_DEPTH` (checked on the
    event stream, which PyYAML produces without recursion, before the recursive composer runs)."""
    depth = 0
    for event in yaml.parse(text, Loader=_LOADER):
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                mark = event.start_mark
                raise RecipeError([RecipeIssue(file, mark.line + 1, mark.column + 1, "",
                                               f"mappings and lists nested more than {MAX_DEPTH} levels deep")])
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


class _TooLarge(Exception):
    """Building the data exceeded a bound; ``node`` and ``path`` say where."""

    def __init__(self, node: yaml.Node, path: FieldPath, message: str) -> None:
        super().__init__(message)
        self.node, self.path, self.message = node, path, message


class _DataBuilder:
    """Turns a composed YAML node tree into Python data, like ``yaml.safe_load`` but keeping positions."""

    def __init__(self, issues: IssueCollector, masked: bool, budget: ValueBudget):
        self.issues = issues
        self.masked = masked
        self.budget = budget  # values built (an alias's target counts each time it is used)
        self.constructor = yaml.SafeLoader("")  # only its scalar constructors are used
        self.active: set[int] = set()  # collection nodes being built, to detect recursive aliases
        self.depth = 0  # collections being built, merged bases included (bounds the recursion)

    def build(self, node: yaml.Node, path: FieldPath, key: yaml.Node | None = None) -> Any:
        self.budget.used += 1
        if self.budget.used > self.budget.limit:
            raise _TooLarge(node, path, f"the YAML expands to more than {self.budget.limit:,} values (aliases "
                                        "repeat what they refer to each time they are used; override values "
                                        "count too)")
        if len(path) > MAX_DEPTH:
            raise _TooLarge(node, path, f"mappings and lists nested more than {MAX_DEPTH} levels deep "
                                        "(through aliases)")
        self.issues.source.record(path, node, key)
        if isinstance(node, yaml.ScalarNode):
            return self._scalar(node, path)
        if node.tag not in (_MAPPING_TAG, _SEQUENCE_TAG):
            self.issues.add(path, f"unsupported YAML tag {shorten(node.tag)}")
            return None
        if id(node) in self.active:
            self.issues.add(path, "recursive YAML alias")
            return None
        if self.depth >= MAX_DEPTH:   # `<<: *base` builds the base at the same path: count it here
            raise _TooLarge(node, path, f"mappings and lists nested more than {MAX_DEPTH} levels deep "
                                        "(through '<<' merges of mappings that merge others)")
        self.active.add(id(node))
        self.depth += 1
        try:
            if isinstance(node, yaml.SequenceNode):
                return [self.build(child, path + (index,)) for index, child in enumerate(node.value)]
            return self._mapping(node, path)
        finally:
            self.depth -= 1
            self.active.discard(id(node))

    def _scalar(self, node: yaml.ScalarNode, path: FieldPath) -> Any:
        try:
            value = self.constructor.construct_object(node)
        except yaml.MarkedYAMLError as exc:  # e.g. an unknown tag such as `!python/name:os.system`
            self.issues.add(path, exc.problem or str(exc))
            return None
        except (ValueError, TypeError, OverflowError, ArithmeticError) as exc:  # `!!int 1e3`, `!!float abc`
            self.issues.add(path, f"cannot read {shorten(node.value)} as {node.tag.rsplit(':', 1)[-1]}: "
                                  f"{shorten(str(exc), 200)[1:-1]}")
            return None
        if isinstance(value, str):
            if self.masked:
                value = value.translate(_UNMASK)
            bad = _SURROGATE.search(value)
            if bad is not None:
                self.issues.add(path, f"text is not valid Unicode: it contains the lone surrogate "
                                      f"\\u{ord(bad.group()):04x}")
                return None
        return value

    def _mapping(self, node: yaml.MappingNode, path: FieldPath) -> dict:
        merged: dict = {}
        for key_node, value_node in node.value:  # `<<: *base` entries; explicit keys take precedence
            if key_node.tag == _MERGE_TAG:
                bases = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
                for base in reversed(bases):  # earlier bases take precedence over later ones
                    value = self.build(base, path)
                    if isinstance(value, dict):
                        merged.update(value)
                    else:
                        self.issues.add(path, "a '<<' merge key needs a mapping or a list of mappings")
        self.issues.source.record(path, node)
        result: dict = {}
        keys: dict = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                continue
            key = self._scalar(key_node, path) if isinstance(key_node, yaml.ScalarNode) else None
            if key is None:
                self.issues.add(path, "mapping keys must be non-empty scalars", mark=False)
                continue
            first = keys.setdefault(key, key_node).start_mark
            result[key] = self.build(value_node, path + (key,), key_node)
            if keys[key] is not key_node:
                self.issues.add(path + (key,), f"duplicate key {shorten(key)} (first defined at line {first.line + 1},"
                                               f" column {first.column + 1})", at_key=True, mark=False)
        return {**merged, **result}
