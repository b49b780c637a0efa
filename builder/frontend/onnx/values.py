"""The values of an ONNX graph while importing that are neither numpy arrays (static) nor ``nn.Tensor``
(graph values): small integer arrays known up to symbolic dims (:class:`_Sym`), sequences (:class:`_Sequence`)
and optional outputs this importer does not compute (:class:`_Unavailable`).
"""
from __future__ import annotations

import numpy as np


class _Sym:
    """A small integer array known up to symbolic dims: ``vals`` is a numpy object array of Python
    ints and int64 PrimExprs (at least one PrimExpr), ``dtype`` its ONNX integer dtype."""

    def __init__(self, vals: np.ndarray, dtype: str = "int64") -> None:
        self.vals = vals
        self.dtype = dtype

    @property
    def shape(self) -> tuple:
        return self.vals.shape


class _Unavailable:
    """An optional output this importer does not compute; reading it fails with a clear error."""

    def __init__(self, node, name: str) -> None:
        self.node, self.name = node, name


class _Sequence:
    """An ONNX sequence known at import time: a Python list of values (tensors, constants, shape values)
    whose length is static (what exporters make with ``SplitToSequence`` / ``SequenceConstruct``)."""

    def __init__(self, items: list) -> None:
        self.items = list(items)

    shape = ()   # (not a tensor: ``tensor()`` refuses it with a clear message)
