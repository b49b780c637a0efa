"""Error types for recipe loading: one :class:`RecipeIssue` per problem, raised together as a :class:`RecipeError`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable


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
        return _printable(text)


def _printable(text: str) -> str:
    """``text`` on one line: control characters (a newline in an override, a record separator in a
    name) are shown escaped, as ``repr`` shows them, so that each issue stays one line."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() or ch == " " else repr(ch)[1:-1] for ch in text)


class RecipeError(ValueError):
    """A recipe could not be loaded or used; ``issues`` lists every problem found, one per line of ``str()``."""

    def __init__(self, issues: Iterable[RecipeIssue]):
        self.issues: list[RecipeIssue] = list(issues)
        super().__init__("\n".join(map(str, self.issues)))
