"""The ``weights.map`` name-rule grammar, once: what the recipe schema validates (``schemas.models.WeightsDef``)
and what the weights loader applies (``runtime.weights.load_params``) are these functions.

A name map takes our parameter names to the file's tensor names (our name -> the file's name):

- an exact entry ``{"lm_head.weight": "model.embed_tokens.weight"}`` renames one parameter;
- an entry may hold placeholders: ``{i}`` (any identifier in braces) matches one non-empty,
  dot-free piece of a name (``0``, ``q_proj``), at most one per dot-separated segment
  (``layer_{i}`` is fine, ``{a}{b}`` is not) and each at most once per side; both sides must use
  the same placeholders;
- an entry whose two sides end with ``"."`` is a *prefix* rule: ``{"layers.{i}.attn.":
  "model.layers.{i}.self_attn."}`` renames every parameter starting with the left side (a whole
  number of segments) and keeps the rest of its name; a prefix rule may map to ``""`` (strip it);
- the most specific rule wins: the most literal characters on its left side (placeholders not
  counted), a whole-name rule before a prefix rule of equal length; two rules equally specific
  naming different tensors for one parameter are an error;
- the file names a rule gives are complete (the weights ``prefix`` is not added to them); a rule that
  matches no parameter is an error (a typo would otherwise leave its parameters on ``prefix``).

Bounds (:mod:`core.limits`): at most :data:`~core.limits.MAX_WEIGHT_MAP_ENTRIES` entries, of which at
most :data:`~core.limits.MAX_WEIGHT_PATTERN_ENTRIES` with placeholders or a trailing ``.`` (each is tried
on every parameter), each side at most :data:`~core.limits.MAX_WEIGHT_NAME_CHARS` characters.
Matching splits names at dots and compares pieces: no regular expression of user text, no backtracking,
so a pathological rule or name costs time linear in its length.
"""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Mapping, Sequence

from .limits import MAX_WEIGHT_MAP_ENTRIES, MAX_WEIGHT_NAME_CHARS, MAX_WEIGHT_PATTERN_ENTRIES
from .messages import shorten

__all__ = ["NamePattern", "NameRule", "NameRules", "PARAMETER_SIDE", "FILE_SIDE", "parse_side", "parse_rule",
           "check_name_rule", "parameter_side_problems", "file_side_problems"]

PARAMETER_SIDE = "parameter side"
"""How messages name the left side of an entry (our parameter's name)."""

FILE_SIDE = "file side"
"""How messages name the right side of an entry (the file's tensor name)."""

_PLACEHOLDER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _quoted(name: str) -> str:
    """A tensor name or rule quoted for a message (:func:`core.messages.shorten`, about 80 characters)."""
    return shorten(name, 80)


@dataclass(frozen=True)
class NamePattern:
    """One side of a name rule: ``text`` split into dot-separated ``segments``, each a literal string or
    ``(pre, name, post)`` (a placeholder between two literal pieces); ``prefix``: the text ended with ``.``."""

    text: str
    segments: tuple
    prefix: bool

    @property
    def names(self) -> list[str]:
        """The placeholder names, in order."""
        return [seg[1] for seg in self.segments if isinstance(seg, tuple)]

    @property
    def literal_chars(self) -> int:
        """How specific the side is: its characters, placeholders (with their braces) not counted."""
        return len(self.text) - sum(len(n) + 2 for n in self.names)

    @property
    def head(self) -> str:
        """The literal text before the first placeholder (a quick filter)."""
        return self.text.split("{", 1)[0]

    def match(self, parts: Sequence[str]) -> dict[str, str] | None:
        """Placeholder values when this (left) side matches the name split at dots (a prefix side:
        its segments followed by at least one more), else None."""
        n = len(self.segments)
        if len(parts) <= n if self.prefix else len(parts) != n:
            return None
        values: dict[str, str] = {}
        for seg, part in zip(self.segments, parts):
            if isinstance(seg, str):
                if seg != part:
                    return None
                continue
            pre, name, post = seg
            if len(part) <= len(pre) + len(post) or not part.startswith(pre) or not part.endswith(post):
                return None
            values[name] = part[len(pre):len(part) - len(post)]
        return values

    def fill(self, values: Mapping[str, str]) -> str:
        """This (right) side with its placeholders replaced by ``values``."""
        text = ".".join(seg if isinstance(seg, str) else seg[0] + values[seg[1]] + seg[2] for seg in self.segments)
        return text + "." if self.prefix and self.segments else text


def parse_side(text: str, side: str) -> tuple[NamePattern | None, list[str]]:
    """``text`` (one side of an entry) as a :class:`NamePattern`, or None and its problems (``side``:
    :data:`PARAMETER_SIDE` or :data:`FILE_SIDE`, for the messages): not a string, longer than
    :data:`~core.limits.MAX_WEIGHT_NAME_CHARS`, a segment with stray braces or two placeholders, a
    placeholder that is not an identifier, a placeholder used twice."""
    if not isinstance(text, str):
        return None, [f"the {side} must be a string, got {type(text).__name__}"]
    if len(text) > MAX_WEIGHT_NAME_CHARS:
        return None, [f"the {side} is {len(text)} characters long, more than the {MAX_WEIGHT_NAME_CHARS} allowed"]
    prefix = text.endswith(".")
    body = text[:-1] if prefix else text
    segments: list = []
    problems: list[str] = []
    seen: set[str] = set()
    for seg in (body.split(".") if body or not prefix else []):
        opens, closes = seg.count("{"), seg.count("}")
        if not opens and not closes:
            segments.append(seg)
            continue
        start, end = seg.find("{"), seg.find("}")
        if opens != 1 or closes != 1 or end < start:
            problems.append(f"the {side}'s segment {shorten(seg)} must hold at most one placeholder '{{name}}' "
                            "(braces are not allowed otherwise)")
            continue
        name = seg[start + 1:end]
        if not _PLACEHOLDER.fullmatch(name):
            problems.append(f"the {side}'s placeholder {shorten(seg[start:end + 1])} is not a name (letters, "
                            "digits and '_', not starting with a digit)")
            continue
        if name in seen:
            problems.append(f"the {side} uses the placeholder {{{name}}} twice")
            continue
        seen.add(name)
        segments.append((seg[:start], name, seg[end + 1:]))
    return (None if problems else NamePattern(text, tuple(segments), prefix)), problems


def parameter_side_problems(text: str) -> list[str]:
    """The problems of ``text`` as the parameter side of an entry (:func:`parse_side`, and it must not be
    empty); empty when it is valid."""
    problems = parse_side(text, PARAMETER_SIDE)[1]
    if text in ("", "."):
        problems.append(_EMPTY)
    return problems


def file_side_problems(text: str) -> list[str]:
    """The problems of ``text`` as the file side of an entry (:func:`parse_side`); empty when it is valid."""
    return parse_side(text, FILE_SIDE)[1]


_EMPTY = "the parameter side is empty (use 'prefix' to put a prefix before every name)"


@dataclass(frozen=True)
class NameRule:
    """One valid entry: ``left`` (our names) -> ``right`` (the file's)."""

    left: NamePattern
    right: NamePattern

    @property
    def exact(self) -> bool:
        """A whole name without placeholders (a dict lookup, not a pattern)."""
        return not self.left.prefix and not self.left.names

    @property
    def rank(self) -> tuple[int, int]:
        """Specificity: more literal characters first, a whole-name rule before a prefix rule."""
        return (self.left.literal_chars, 0 if self.left.prefix else 1)


def parse_rule(ours: str, theirs: str) -> tuple[NameRule | None, list[str]]:
    """The entry ``ours -> theirs`` as a :class:`NameRule`, or None and its problems: those of each side
    (:func:`parse_side`), an empty parameter side, a prefix rule whose other side does not end with ``.``
    (the file side may be ``""``), sides with different placeholders."""
    left, problems = parse_side(ours, PARAMETER_SIDE)
    right, more = parse_side(theirs, FILE_SIDE)
    problems += more
    if left is None or right is None:
        return None, problems
    if not ours or ours == ".":
        problems.append(_EMPTY)
    if left.prefix != right.prefix and not (left.prefix and theirs == ""):
        problems.append("a prefix rule ends with '.' on both sides (the file side may also be '' to strip the "
                        "prefix); a whole-name rule on neither")
    if sorted(left.names) != sorted(right.names):
        problems.append(f"both sides must use the same placeholders: the parameter side has "
                        f"{_names(left.names)}, the file side {_names(right.names)}")
    return (None if problems else NameRule(left, right)), problems


def check_name_rule(ours: str, theirs: str) -> list[str]:
    """The problems of the name-map entry ``ours -> theirs`` (empty when it is valid); the syntax is
    the module docstring's."""
    return parse_rule(ours, theirs)[1]


def _names(names: Sequence[str]) -> str:
    return ", ".join("{" + n + "}" for n in sorted(names)) or "none"


class NameRules:
    """Our parameter names -> the file's tensor names, by a ``name_map`` (exact renames, placeholder
    patterns and prefix rules, as the module docstring says) and a default ``prefix``.

    Raises ValueError listing every invalid entry (or too many entries:
    :data:`~core.limits.MAX_WEIGHT_MAP_ENTRIES`, :data:`~core.limits.MAX_WEIGHT_PATTERN_ENTRIES`; sides
    longer than :data:`~core.limits.MAX_WEIGHT_NAME_CHARS`).
    """

    def __init__(self, name_map: Mapping[str, str] | None = None, prefix: str = "") -> None:
        name_map = dict(name_map or {})
        if not isinstance(prefix, str):
            raise ValueError(f"the weights prefix must be a string, got {type(prefix).__name__}")
        if len(name_map) > MAX_WEIGHT_MAP_ENTRIES:
            raise ValueError(f"the name map has {len(name_map)} entries, more than the {MAX_WEIGHT_MAP_ENTRIES} "
                             "allowed")
        self.prefix = prefix
        self.exact: dict[str, str] = {}
        self.patterns: list[NameRule] = []
        problems = []
        for ours, theirs in name_map.items():
            rule, bad = parse_rule(ours, theirs)
            problems += [f"name map entry {shorten(str(ours))}: {p}" for p in bad]
            if rule is None:
                continue
            if rule.exact:
                self.exact[ours] = theirs
            else:
                self.patterns.append(rule)
        if len(self.patterns) > MAX_WEIGHT_PATTERN_ENTRIES:
            problems.append(f"the name map has {len(self.patterns)} entries with placeholders or prefixes, more "
                            f"than the {MAX_WEIGHT_PATTERN_ENTRIES} allowed")
        if problems:
            raise ValueError("invalid weights name map:\n" + "\n".join(f"  - {p}" for p in problems))
        # most specific first; ties keep the map's order
        self.patterns.sort(key=lambda r: r.rank, reverse=True)

    def resolve(self, name: str) -> tuple[str, str | None, str | None]:
        """``(file name, the rule's left side or None when ``prefix`` applied, problem or None)``:
        the problem names two equally specific rules that give ``name`` different file names."""
        if name in self.exact:
            return self.exact[name], name, None
        parts = None
        found: tuple[str, NameRule] | None = None
        for rule in self.patterns:
            if found is not None and rule.rank < found[1].rank:
                break
            if not name.startswith(rule.left.head):
                continue
            if parts is None:
                parts = name.split(".")
            values = rule.left.match(parts)
            if values is None:
                continue
            key = rule.right.fill(values)
            if rule.left.prefix:
                rest = ".".join(parts[len(rule.left.segments):])
                key = key + rest
            if found is None:
                found = (key, rule)
            elif key != found[0]:
                return found[0], found[1].left.text, (
                    f"parameter {_quoted(name)}: the name map's entries {_quoted(found[1].left.text)} and {_quoted(rule.left.text)} "
                    f"are equally specific and name different tensors ({_quoted(found[0])}, {_quoted(key)}); add an exact entry")
        if found is not None:
            return found[0], found[1].left.text, None
        return self.prefix + name, None, None

    def file_key(self, name: str) -> str:
        """The tensor name of parameter ``name`` in the file. Raises ValueError when two equally
        specific rules disagree."""
        key, _, problem = self.resolve(name)
        if problem:
            raise ValueError(problem)
        return key

    def unused(self, names: Sequence[str]) -> list[str]:
        """Problems for the entries that match none of ``names`` (exact ones with close matches)."""
        names = list(names)
        known = set(names)
        problems = []
        for ours in self.exact:
            if ours not in known:
                close = difflib.get_close_matches(ours, sorted(known), n=2) if len(known) <= 10_000 else []
                problems.append(f"the name map's entry {_quoted(ours)} names no parameter of the model"
                                + (f" (did you mean {' or '.join(_quoted(c) for c in close)}?)" if close else ""))
        split = [n.split(".") for n in names]
        for rule in self.patterns:
            head = rule.left.head
            if not any(n.startswith(head) and rule.left.match(parts) is not None for n, parts in zip(names, split)):
                problems.append(f"the name map's rule {_quoted(rule.left.text)} matches no parameter of the model")
        return problems
