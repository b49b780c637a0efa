"""A one-layer recipe for the CLI tests, with its forward and input to fill in."""

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
