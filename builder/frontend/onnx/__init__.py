"""Import an ONNX model as a graph-level IRModule (TVM's ``relax.frontend.onnx.from_onnx``), issue 16.

``from_onnx(model_or_path, shape_dict=None, dtype_dict=None)`` returns an IRModule with one function,
``main``, whose parameters are the graph's inputs (those that are not initializers) in the graph's
order and whose result is the graph's output (a tuple for several outputs). Initializers and
``Constant`` nodes become constants bound inside the module (``R.const``), so the module needs no
weights at run time: ``runtime.VirtualMachine(builder.compile(mod))["main"](*inputs)``.

Translation goes through the ``nn.op`` functions (the same ops a recipe emits), so the usual
pipeline fuses the graph and picks the fast kernels: a ``MatMul`` / ``Gemm`` with a constant 2-D
weight ``W (K, N)`` becomes ``matmul(x, permute_dims(W.T))`` with ``W.T`` a constant ``(N, K)``,
which is exactly ``nn.Linear``'s pattern that ``SelectKernels`` maps to the linear kernels.

Shape computations. Every value of the graph is one of three kinds while importing:

- *static*: a numpy array known at import time (initializers, ``Constant`` nodes, and whatever
  small computation only reads static values: constant folding, bounded by
  :data:`MAX_FOLD_ELEMENTS` elements for ops whose result can be larger than their inputs);
- *symbolic*: a small int64 array whose elements are ints or symbolic dims (``Shape`` of a tensor
  with dynamic dims, and the ``Gather`` / ``Concat`` / ``Unsqueeze`` / arithmetic / ``Where`` ...
  that exporters run on it). ``Reshape``, ``Expand``, ``ConstantOfShape``, ``Range`` and ``Slice``
  read such values as symbolic shapes, as TVM's relax ONNX frontend does; a comparison of symbolic
  dims is decided at import time when it can be (dims are never negative), otherwise the import
  fails with ONNXImportError (never a guess);
- *tensor*: a graph value (``nn.Tensor``). A symbolic value used as data becomes a tensor
  through :func:`builder.nn.op.common.symbolic_scalar`.

Limits and checks (an ONNX file is untrusted input): a file or ModelProto over
:data:`MAX_MODEL_BYTES` is refused before it is parsed; ``onnx.checker.check_model`` runs before
anything else reads the model; tensors stored as external data (what ``torch.onnx.export`` writes by
default) are read from the model's folder when a path is given, each location, region and size checked and
the total checked against the memory available (:func:`.loading._read_external_data`), and refused in a ModelProto
(no folder to resolve them in); ranks over :data:`core.limits.MAX_NDIM`, symbolic dim expressions deeper
than ``MAX_EXPRESSION_DEPTH`` and more than :data:`MAX_UNROLLED_NODES` nodes from If / Loop bodies in the
whole model are refused; the default
domain's opset must be in ``[13, 24]`` (:data:`OPSETS`; opsets 7 to 12 are converted to 13 first by
``onnx.version_converter``); of other domains only onnxruntime's
``com.microsoft:MatMulNBits`` (4-bit weights, kept 4-bit), ``QGemm``, and the fused GELUs and skip layer
norms of onnxruntime's transformer optimizer are supported.
Unsupported ops are collected before anything is translated and reported in ONE
:class:`UnsupportedOpsError` naming every op type and the nodes that use it.

Supported ops: see :data:`SUPPORTED_OPS`.

Layout: :mod:`.importer` walks the graph (:func:`from_onnx`), :mod:`.loading` reads and checks the file,
:mod:`.proto` reads protobuf messages, :mod:`.values` and :mod:`.shape_folding` hold the static and symbolic
values, :mod:`.gelu_chains` finds exporters' GELU chains, :mod:`.registry` is the converter table and the
``convert_<family>`` modules hold the converters, each registered once by its ``@_register`` decorator (this
package imports them all, so the table is complete whenever any module of it is imported). A limit is read
from the module that enforces it (``builder.frontend.onnx.loading.MAX_MODEL_BYTES``, ...): the names here are
copies, for reading.

``import onnx`` inside this package is the third-party ``onnx`` (absolute imports).
"""
from __future__ import annotations

from . import (convert_attention, convert_contrib, convert_control_flow, convert_conv_pool,  # noqa: F401 (register)
               convert_elementwise, convert_indexing, convert_linear, convert_manipulation, convert_normalization,
               convert_quantization, convert_recurrent, convert_reduction, convert_sequence, convert_shape)
from .convert_manipulation import MAX_SPLIT_PIECES
from .errors import ONNXImportError, UnsupportedOpsError
from .importer import MAX_BRANCH_DEPTH, MAX_UNROLLED_NODES, from_onnx
from .loading import MAX_MODEL_BYTES, OLDEST_CONVERTED_OPSET, OPSETS
from .registry import _CONVERTERS
from .shape_folding import MAX_FOLD_ELEMENTS, MAX_SHAPE_EXPR_NODES

__all__ = [
    "MAX_BRANCH_DEPTH",
    "MAX_FOLD_ELEMENTS",
    "MAX_MODEL_BYTES",
    "MAX_SHAPE_EXPR_NODES",
    "MAX_SPLIT_PIECES",
    "MAX_UNROLLED_NODES",
    "OPSETS",
    "OLDEST_CONVERTED_OPSET",
    "SUPPORTED_OPS",
    "ONNXImportError",
    "UnsupportedOpsError",
    "from_onnx",
]

#: The ONNX op types that :func:`from_onnx` translates (default domain; others as ``domain:Op``).
SUPPORTED_OPS = tuple(sorted(_CONVERTERS))
