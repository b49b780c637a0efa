"""Reading ONNX protobuf messages: the ``onnx`` package (imported when first needed), element types as
our dtype names, ``TensorProto`` as numpy arrays, a node's attributes as Python values, its name in messages.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ...ir.struct_info import DTYPES
from .errors import ONNXImportError


def _onnx():
    """The ``onnx`` package, imported on first use (``import builder`` works without it). Raises ImportError saying how
    to install it."""
    try:
        import onnx
    except ImportError as e:   # pragma: no cover - depends on the environment
        raise ImportError("from_onnx needs the onnx package: pip install 'model-builder[onnx]' "
                          "(or pip install onnx)") from e
    return onnx


def _np_dtype_name(elem_type: int) -> str:
    """Our dtype name of an ONNX ``TensorProto`` element type (``1`` -> ``float32``). Raises ONNXImportError for
    bfloat16 tensors and element types we have no dtype for (strings, complex, float8, ...)."""
    onnx = _onnx()
    if elem_type == onnx.TensorProto.BFLOAT16:
        raise ONNXImportError("from_onnx: bfloat16 ONNX tensors are not supported")
    try:
        name = str(np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type)))
    except Exception as e:
        raise ONNXImportError(f"from_onnx: unsupported ONNX element type {elem_type}") from e
    if name not in DTYPES:
        raise ONNXImportError(f"from_onnx: unsupported ONNX element type {name}")
    return name


def _to_array(tensor) -> np.ndarray:
    """A ``TensorProto``'s data as a writable numpy array of its shape and dtype (external data already read in,
    :func:`~.loading._read_external_data`). Raises ONNXImportError for an unsupported element type."""
    onnx = _onnx()
    _np_dtype_name(tensor.data_type)
    arr = onnx.numpy_helper.to_array(tensor)
    if arr.dtype.name not in DTYPES:
        raise ONNXImportError(f"from_onnx: tensor {tensor.name!r} has the unsupported dtype {arr.dtype}")
    return np.array(arr)   # writable, owned


def _attrs(node) -> dict[str, Any]:
    """A node's attributes by name as Python values: tensors as numpy arrays, strings decoded, ints / floats / lists as
    ``onnx.helper`` reads them; graphs and sparse tensors kept as their protos (the converters that take none refuse
    them)."""
    onnx = _onnx()
    out = {}
    for a in node.attribute:
        if a.type == onnx.AttributeProto.TENSOR:
            out[a.name] = _to_array(a.t)
        elif a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS, onnx.AttributeProto.SPARSE_TENSOR,
                        onnx.AttributeProto.SPARSE_TENSORS, onnx.AttributeProto.TENSORS):
            out[a.name] = a   # kept as the proto; the converters that accept none of these refuse them
        else:
            v = onnx.helper.get_attribute_value(a)
            out[a.name] = v.decode() if isinstance(v, bytes) else v
    return out


def _node_name(node, i: int) -> str:
    """How messages name the ``i``-th node: its name, else ``OpType_i (-> outputs)``."""
    return node.name or f"{node.op_type}_{i} (-> {', '.join(node.output)})"
