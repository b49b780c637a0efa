"""A one-layer recipe for the CLI tests, with its forward and input to fill in; the one problem a recipe text has
(:func:`recipe_issue`) and where a snippet of it is (:func:`line_col`), for the recipe-error tests."""
import pytest

#: A recipe with one Linear layer (16 -> 8): its forward is the placeholder ``FORWARD`` (line 6),
#: its function ``forward`` takes ``x`` of shape ``[batch, 16]``, float32 (line 9).
BASE = """\
name: base
model:
  layers:
    fc: {type: Linear, in_features: 16, out_features: 8}
  forward: |
    FORWARD
functions:
  forward:
    x: {shape: [batch, 16], dtype: float32}
"""


def with_forward(body: str, dtype: str = "float32", shape: str = "[batch, 16]") -> str:
    """:data:`BASE` with ``body`` (one or more lines) as its forward and ``x`` of ``shape`` and
    ``dtype``."""
    text = BASE.replace("{shape: [batch, 16], dtype: float32}", f"{{shape: {shape}, dtype: {dtype}}}")
    return text.replace("FORWARD", body.replace("\n", "\n    "))


def recipe_issue(text: str, filename: str = "r.yaml"):
    """The one :class:`schemas.RecipeIssue` that loading and exporting the recipe ``text`` (as ``filename``) raises;
    fails the test when it raises none or several."""
    from builder.build_model import export_recipe
    from schemas import RecipeError, load_recipe_text

    with pytest.raises(RecipeError) as info:
        export_recipe(load_recipe_text(text, filename))
    assert len(info.value.issues) == 1, info.value.issues
    return info.value.issues[0]


def line_col(text: str, snippet: str, nth: int = 0) -> tuple[int, int]:
    """(line, column), 1-based, of the ``nth`` occurrence (0: the first) of ``snippet`` in ``text``."""
    index = -1
    for _ in range(nth + 1):
        index = text.index(snippet, index + 1)
    before = text[:index]
    return before.count("\n") + 1, len(before) - (before.rfind("\n") + 1) + 1
