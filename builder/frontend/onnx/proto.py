"""Reading ONNX protobuf messages: the ``onnx`` package (imported when first needed), element types as
our dtype names, ``TensorProto`` as numpy arrays, a node's attributes as Python values, its name in messages.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ...ir.struct_info import DTYPES
from .errors import ONNXImportError


def _onnx():
    try:
        import onnx
    except ImportError as e:   # pragma: no cover - depends on the environment
        raise ImportError("from_onnx needs the onnx package: pip install 'model-builder[onnx]' "
                          "(or pip install onnx)") from e
    return onnx


def _np_dtype_name(elem_type: int) -> str:
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
    onnx = _onnx()
    _np_dtype_name(tensor.data_type)
    arr = onnx.numpy_helper.to_array(tensor)
    if arr.dtype.name not in DTYPES:
        raise ONNXImportError(f"from_onnx: tensor {tensor.name!r} has the unsupported dtype {arr.dtype}")
    return np.array(arr)   # writable, owned


def _attrs(node) -> dict[str, Any]:
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
    return node.name or f"{node.op_type}_{i} (-> {', '.join(node.output)})"
