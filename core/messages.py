"""How user values are quoted in error messages, one rule for the recipe loader, the builder and the runtime."""
from __future__ import annotations

from typing import Any

__all__ = ["shorten"]


def shorten(value: Any, limit: int = 80) -> str:
    """``repr(value)`` for quoting user values in messages, cut to about ``limit`` characters
    (``'100000...000' (5001 characters)``); an integer too large to print in decimal is described
    by its number of digits instead. Control characters come out escaped, as ``repr`` writes them."""
    try:
        text = repr(value)
    except ValueError:   # an int beyond sys.get_int_max_str_digits()
        return f"an integer of about {int(value.bit_length() * 0.30103) + 1:,} digits"
    if len(text) <= limit:
        return text
    keep = max(limit - 30, 10)
    return f"{text[:keep - 10]}...{text[-10:]} ({len(text):,} characters)"
