"""The errors :func:`builder.frontend.onnx.from_onnx` raises for a model it cannot import.
"""
from __future__ import annotations


class ONNXImportError(ValueError):
    """The model cannot be imported: a check failed, a node cannot be translated (the message names
    the node and its op type), or a shape computation cannot be decided at import time."""


class UnsupportedOpsError(ONNXImportError):
    """The model uses op types this importer does not translate. ``missing`` maps each op type
    (``domain:Op`` outside the default domain) to the names of the nodes that use it."""

    def __init__(self, missing: dict[str, list[str]]) -> None:
        self.missing = missing
        parts = [f"{op_type} (nodes: {', '.join(nodes)})" for op_type, nodes in sorted(missing.items())]
        super().__init__(f"from_onnx: {len(missing)} unsupported ONNX op type(s): " + "; ".join(parts))
