"""Error types for recipe loading: one :class:`RecipeIssue` per problem, raised together as a :class:`RecipeError`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable


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
    so that each issue stays one line and user text cannot drive the terminal."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() or ch == " " else repr(ch)[1:-1] for ch in text)



def shorten(value: Any, limit: int = 80) -> str:
    """``repr(value)`` for quoting user values in messages, cut to about ``limit`` characters
    (``'100000...000' (5001 characters)``); an integer too large to print in decimal is described
    by its number of digits instead."""
    try:
        text = repr(value)
    except ValueError:   # an int beyond sys.get_int_max_str_digits()
        return f"an integer of about {int(value.bit_length() * 0.30103) + 1:,} digits"
    if len(text) <= limit:
        return text
    keep = max(limit - 30, 10)
    return f"{text[:keep - 10]}...{text[-10:]} ({len(text):,} characters)"


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
