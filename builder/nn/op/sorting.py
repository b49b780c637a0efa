"""Sorting along an axis: ``sort``, ``argsort``, ``topk`` (``torch.sort`` / ``argsort`` / ``topk``,
``numpy.sort`` / ``argsort`` with ``kind="stable"``, ONNX ``TopK``; TVM's ``R.sort`` / ``R.argsort`` /
``R.topk``)."""
from __future__ import annotations

from ..core import Tensor, wrap_nested
from .common import op_call


def sort(x: Tensor, axis: int = -1, descending: bool = False, name: str = "sort") -> Tensor:
    """The values of ``x`` sorted along ``axis`` (any shape, a numeric dtype -> the same): stable (equal
    values keep their order), NaN the largest (last ascending, first descending), as ``torch.sort`` and
    ``numpy.sort``; a merge sort, O(n log n) per line. ``R.sort(x, axis=a, descending=d)``. Raises
    ValueError / TypeError for a 0-d or bool ``x`` or an axis out of range."""
    return wrap_nested(op_call("sort", [x._expr], axis=int(axis), descending=bool(descending)), name)


def argsort(x: Tensor, axis: int = -1, descending: bool = False, dtype: str = "int32",
            name: str = "argsort") -> Tensor:
    """The positions (``dtype`` int32 / int64) that sort ``x`` along ``axis``, stable (``numpy.argsort(...,
    kind="stable")``, ``torch.argsort(stable=True)``), NaN the largest. ``R.argsort(x, axis=a,
    descending=d, dtype=t)``. Raises as :func:`sort`, TypeError for another index dtype."""
    return wrap_nested(op_call("argsort", [x._expr], axis=int(axis), descending=bool(descending), dtype=dtype),
                       name)


def topk(x: Tensor, k: int = 1, axis: int = -1, ret_type: str = "both", largest: bool = True,
         dtype: str = "int32", name: str = "topk"):
    """The ``k`` largest (``largest=False``: smallest) values of ``x`` along ``axis``, sorted, and their
    positions (``dtype``): ``x``'s shape with ``k`` along ``axis``; ties give the lower position first
    (ONNX ``TopK``), NaN counts as the largest (``torch.topk``). ``ret_type``: ``"both"`` (a tuple
    ``(values, indices)``), ``"values"`` or ``"indices"``. ``R.topk(x, k=k, axis=a, ret_type=r,
    largest=l, dtype=t)``. Raises ValueError for ``k`` < 0 or larger than a static axis (a symbolic axis:
    an error when the code runs), and as :func:`argsort`."""
    return wrap_nested(op_call("topk", [x._expr], k=k if not isinstance(k, int) else int(k), axis=int(axis),
                               ret_type=ret_type, largest=bool(largest), dtype=dtype), name)
