"""Error types for recipe loading: one :class:`RecipeIssue` per problem, raised together as a :class:`RecipeError`."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

from core.messages import shorten  # noqa: F401 - the rule for quoting user values, shared with runtime


@dataclass(frozen=True)
class RecipeIssue:
    """One problem in a recipe.

    ``file`` is the recipe file name, or ``<override KEY=VALUE>`` when the problem comes from a
    command-line override; ``line``/``column`` are 1-based (``None`` when unknown); ``path`` is the
    dotted field path (``model.layers.gate_proj.bias``, empty for the whole recipe).
    """

    file: str
    line: int | None
    column: int | None
    path: str
    message: str

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}:{self.column}"
        text = f"{where}: {self.path}: {self.message}" if self.path else f"{where}: {self.message}"
        return printable(text)


def printable(text: str) -> str:
    """``text`` on one line and safe on a terminal: control characters (a newline in an override, an
    ANSI escape sequence or a record separator in a name) are shown escaped, as ``repr`` shows them,
    so that each issue stays one line and user text cannot drive the terminal. A byte that was not
    UTF-8 in a command-line argument (Python decodes it to a lone surrogate U+DC80..U+DCFF, PEP 383
    ``surrogateescape``) is shown as that byte, ``\\xff``; other lone surrogates as ``\\udXXX``."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() or ch == " " else _escaped(ch) for ch in text)


def _escaped(ch: str) -> str:
    if "\udc80" <= ch <= "\udcff":   # surrogateescape: the undecodable byte 0x80..0xff
        return f"\\x{ord(ch) - 0xdc00:02x}"
    return repr(ch)[1:-1]


def undecodable(text: str) -> str | None:
    """What makes ``text`` not valid Unicode, for a message (``"the byte \\xff"`` for a byte that is not UTF-8,
    ``"the lone surrogate \\ud800"``), or ``None`` when it has no lone surrogate. Command-line
    arguments carry bytes that are not UTF-8 as lone surrogates (PEP 383); such text cannot be
    encoded, parsed by libyaml or printed, so it is refused where it enters."""
    found = _SURROGATE.search(text)
    if found is None:
        return None
    ch = found.group()
    if "\udc80" <= ch <= "\udcff":
        return f"the byte {_escaped(ch)}"
    return f"the lone surrogate {_escaped(ch)}"


_SURROGATE = re.compile("[\ud800-\udfff]")



def override_label(override: str) -> str:
    """How an issue names the ``KEY=VALUE`` override it comes from: ``<override KEY=VALUE>``, an override
    longer than 100 characters cut to its first 80 (``<override a=[1, 2, ...... (120,000 characters)>``)."""
    if len(override) <= 100:
        return f"<override {override}>"
    return f"<override {override[:80]}... ({len(override):,} characters)>"


class RecipeError(ValueError):
    """A recipe could not be loaded or used; ``issues`` lists every problem found, one per line of ``str()``."""

    def __init__(self, issues: Iterable[RecipeIssue]):
        self.issues: list[RecipeIssue] = list(issues)
        super().__init__("\n".join(map(str, self.issues)))
