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
the total checked against the memory available (:func:`_read_external_data`), and refused in a ModelProto
(no folder to resolve them in); ranks over :data:`schemas.limits.MAX_NDIM`, symbolic dim expressions deeper
than ``MAX_EXPRESSION_DEPTH`` and more than :data:`MAX_UNROLLED_NODES` nodes from If / Loop bodies in the
whole model are refused; the default
domain's opset must be in ``[13, 24]`` (:data:`OPSETS`; opsets 7 to 12 are converted to 13 first by
``onnx.version_converter``); of other domains only onnxruntime's
``com.microsoft:MatMulNBits`` (4-bit weights, kept 4-bit), ``QGemm``, and the fused GELUs and skip layer
norms of onnxruntime's transformer optimizer are supported.
Unsupported ops are collected before anything is translated and reported in ONE
:class:`UnsupportedOpsError` naming every op type and the nodes that use it.

Supported ops: see :data:`SUPPORTED_OPS`.
"""
from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from schemas.limits import MAX_EXPRESSION_DEPTH, MAX_NDIM

from ..ir import arith
from ..ir import expr as E
from ..ir import relax as rx
from ..ir.block_builder import BlockBuilder
from ..ir.op import exact_scaled_size
from ..ir.struct_info import DTYPES, TensorStructInfo
from ..ir.verifier import verify
from ..nn import op
from ..nn.core import Tensor, wrap_nested
from ..nn.op.common import op_call, symbolic_scalar
from .common import acosh, asinh, atanh, cosh, sinh   # (torch-free compositions shared with the torch importers)

__all__ = [
    "MAX_FOLD_ELEMENTS",
    "MAX_MODEL_BYTES",
    "OPSETS",
    "OLDEST_CONVERTED_OPSET",
    "SUPPORTED_OPS",
    "ONNXImportError",
    "UnsupportedOpsError",
    "from_onnx",
]

#: Largest accepted model, file or ModelProto: 2 GiB - 1, protobuf's own limit for one message.
MAX_MODEL_BYTES = 2**31 - 1
#: Constant folding of an op whose result may be larger than its inputs (Expand, ConstantOfShape,
#: Range, broadcasting arithmetic, ...) stops at this many elements; a larger result is computed by
#: the compiled graph instead.
MAX_FOLD_ELEMENTS = 1 << 16
#: Opsets of the default domain (``""`` / ``"ai.onnx"``) this importer follows.
OPSETS = (13, 24)
_BIG = 1 << 62   # ONNX Slice ends at or beyond this mean "to the end" (exporters write INT64_MAX)
_END_SENTINELS = (2**31 - 1, 2**63 - 1)   # ONNX Slice ends meaning "to the end" in either direction


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


# ------------------------------------------------------------------------------------------------
# Values
# ------------------------------------------------------------------------------------------------

class _Sym:
    """A small integer array known up to symbolic dims: ``vals`` is a numpy object array of Python
    ints and int64 PrimExprs (at least one PrimExpr), ``dtype`` its ONNX integer dtype."""

    def __init__(self, vals: np.ndarray, dtype: str = "int64") -> None:
        self.vals = vals
        self.dtype = dtype

    @property
    def shape(self) -> tuple:
        return self.vals.shape


def _simp(e):
    """A dim value in canonical form: a Python int, or a simplified PrimExpr that is not constant."""
    if isinstance(e, (bool, np.bool_)):
        return int(e)
    if isinstance(e, (int, np.integer)):
        return int(e)
    if isinstance(e, E.PrimExpr):
        e = E.simplify(e)
        if isinstance(e, E.IntImm):
            return int(e.value)
        _check_expr_size(e)
        return e
    raise ONNXImportError(f"not an integer shape value: {e!r}")


#: The largest symbolic dim expression shape arithmetic may build (nodes of the expression tree): each value
#: is checked as it is made, so no expression given to the simplifier or the compiler nests deeper than
#: :data:`schemas.limits.MAX_EXPRESSION_DEPTH` (a chain of thousands of Div nodes on a Shape used to end in a
#: RecursionError).
MAX_SHAPE_EXPR_NODES = 4096


def _check_expr_size(e) -> None:
    """ONNXImportError when the symbolic dim expression ``e`` nests deeper than MAX_EXPRESSION_DEPTH or has more
    than :data:`MAX_SHAPE_EXPR_NODES` nodes (walked without recursion)."""
    stack, seen = [(e, 1)], 0
    while stack:
        x, depth = stack.pop()
        seen += 1
        if depth > MAX_EXPRESSION_DEPTH or seen > MAX_SHAPE_EXPR_NODES:
            raise ONNXImportError(f"shape arithmetic builds a symbolic dim expression deeper than "
                                  f"{MAX_EXPRESSION_DEPTH} levels or larger than {MAX_SHAPE_EXPR_NODES} nodes "
                                  "(schemas.limits.MAX_EXPRESSION_DEPTH, MAX_SHAPE_EXPR_NODES)")
        for name in ("a", "b", "condition", "true_value", "false_value", "value", "body"):
            child = getattr(x, name, None)
            if isinstance(child, E.PrimExpr):
                stack.append((child, depth + 1))
        for child in getattr(x, "args", ()) if isinstance(x, E.Call) else ():
            if isinstance(child, E.PrimExpr):
                stack.append((child, depth + 1))


def _shape_value(vals: np.ndarray, dtype: str = "int64"):
    """An object array of dim values as a static array when every element is an int, else _Sym."""
    if not isinstance(vals, np.ndarray):   # numpy returns a lone element for 0-d results
        one = np.empty((), dtype=object)
        one[()] = vals
        vals = one
    flat = [_simp(v) for v in vals.ravel()]
    if all(isinstance(v, int) for v in flat):
        return np.array(flat, dtype=dtype).reshape(vals.shape)
    out = np.empty(len(flat), dtype=object)
    out[:] = flat
    return _Sym(out.reshape(vals.shape), dtype)


def _objects(v) -> np.ndarray:
    """A static integer array or a _Sym as an object array of ints / PrimExprs."""
    if isinstance(v, _Sym):
        return v.vals
    out = np.empty(v.shape, dtype=object)
    out.ravel()[:] = [int(x) for x in v.ravel()]
    return out


def _nonneg(e) -> bool:
    """Whether the dim expression is provably >= 0 (shape variables are never negative)."""
    if isinstance(e, int):
        return e >= 0
    if isinstance(e, E.IntImm):
        return e.value >= 0
    if isinstance(e, E.Var):
        return True
    if isinstance(e, (E.Add, E.Mul, E.FloorDiv, E.FloorMod, E.Max)):
        return _nonneg(e.a) and _nonneg(e.b)
    if isinstance(e, E.Min):
        return _nonneg(e.a) or _nonneg(e.b)
    return False


def _sign(a, b, what: str) -> int:
    """-1, 0 or 1 for ``a - b`` of dim values; ONNXImportError when it cannot be decided."""
    d = _simp(a - b) if not (isinstance(a, int) and isinstance(b, int)) else a - b
    if isinstance(d, int):
        return (d > 0) - (d < 0)
    if _nonneg(d) and _nonneg(_simp(d - 1)):
        return 1
    if _nonneg(_simp(-d)) and _nonneg(_simp(-d - 1)):
        return -1
    if _nonneg(d) and isinstance(b, int) and b < 0 or _nonneg(a) and isinstance(b, int) and b < 0:
        return 1
    if isinstance(a, int) and a < 0 and _nonneg(b):
        return -1
    raise ONNXImportError(f"{what}: cannot decide the comparison of symbolic dims {a} and {b} at import time")


# ------------------------------------------------------------------------------------------------
# Loading and checks
# ------------------------------------------------------------------------------------------------

def _onnx():
    try:
        import onnx
    except ImportError as e:   # pragma: no cover - depends on the environment
        raise ImportError("from_onnx needs the onnx package: pip install 'model-builder[onnx]' "
                          "(or pip install onnx)") from e
    return onnx


def _load(model_or_path):
    """The checked ModelProto of a path or a ModelProto (see the module docstring)."""
    onnx = _onnx()
    if isinstance(model_or_path, (str, os.PathLike)):
        path = Path(model_or_path)
        if not path.is_file():
            raise FileNotFoundError(f"from_onnx: no ONNX file at {str(path)!r}")
        size = path.stat().st_size
        if size > MAX_MODEL_BYTES:
            raise ONNXImportError(f"from_onnx: {path} is {size} bytes, more than the limit of "
                                  f"{MAX_MODEL_BYTES} (MAX_MODEL_BYTES)")
        try:
            model = onnx.load(str(path), load_external_data=False)
        except Exception as e:   # protobuf's DecodeError and friends
            raise ONNXImportError(f"from_onnx: {path} is not a readable ONNX model: {e}") from e
    elif isinstance(model_or_path, onnx.ModelProto):
        model = model_or_path
        size = model.ByteSize()
        if size > MAX_MODEL_BYTES:
            raise ONNXImportError(f"from_onnx: the model is {size} bytes, more than the limit of "
                                  f"{MAX_MODEL_BYTES} (MAX_MODEL_BYTES)")
    elif isinstance(model_or_path, (bytes, bytearray, memoryview)):
        size = memoryview(model_or_path).nbytes
        if size > MAX_MODEL_BYTES:
            raise ONNXImportError(f"from_onnx: the model is {size} bytes, more than the limit of "
                                  f"{MAX_MODEL_BYTES} (MAX_MODEL_BYTES)")
        try:
            model = onnx.load_model_from_string(bytes(model_or_path))
        except Exception as e:   # protobuf's DecodeError and friends
            raise ONNXImportError(f"from_onnx: the {size} bytes are not a readable ONNX model: {e}") from e
    else:
        raise TypeError("from_onnx: expected an onnx.ModelProto, its serialized bytes or a path, got "
                        f"{type(model_or_path).__name__}")
    external = [t.name for t in _all_tensors(model.graph)
                if t.data_location == onnx.TensorProto.EXTERNAL]
    if external and not isinstance(model_or_path, (str, os.PathLike)):
        raise ONNXImportError(
            f"from_onnx: tensors stored as external data ({', '.join(external[:5])}"
            f"{', ...' if len(external) > 5 else ''}) in a ModelProto or bytes: pass the model's path instead (its "
            "external files are read from its folder), or load them with onnx.load(path)")
    try:
        # with external data, the checker needs the file's folder to find the data files
        onnx.checker.check_model(str(model_or_path) if external else model)
    except Exception as e:
        raise ONNXImportError(f"from_onnx: the model fails onnx.checker.check_model: {e}") from e
    if external:
        _read_external_data(model, Path(model_or_path).parent)
    return model


def _external_nbytes(tensor, count: int) -> int:
    """Bytes of ``count`` elements of an ONNX tensor's data type as raw data (4-bit types two per byte)."""
    onnx = _onnx()
    from onnx.helper import tensor_dtype_to_np_dtype

    T = onnx.TensorProto
    if tensor.data_type in (T.INT4, T.UINT4, getattr(T, "FLOAT4E2M1", -1)):
        return (count + 1) // 2
    if tensor.data_type in (T.STRING, T.UNDEFINED):
        raise ONNXImportError(f"from_onnx: external data of tensor '{tensor.name}' has data type "
                              f"{tensor.data_type}, which has no raw byte layout")
    try:
        return tensor_dtype_to_np_dtype(tensor.data_type).itemsize * count
    except Exception as e:   # an unknown data type number
        raise ONNXImportError(f"from_onnx: tensor '{tensor.name}' has the unknown data type {tensor.data_type}") from e


def _read_external_data(model, folder: Path) -> None:
    """Read every tensor stored as external data into its ``raw_data`` (ONNX's external data: ``location``
    relative to the model's folder, ``offset`` and ``length`` in bytes), after checking it as untrusted
    input: the location is a relative path inside ``folder`` (no ``..``, no absolute path, no symlink out of
    it) naming a regular file; the region lies within the file and holds exactly the bytes the tensor's dims
    and data type need; all regions together hold no more bytes than the distinct files do (no region
    read twice to multiply memory). Raises ONNXImportError naming the tensor otherwise.

    Memory: before anything is read, the bytes of all the regions together, and before each read that
    tensor's bytes, are checked against the memory available (:func:`runtime.memory.check_allocation`,
    ``MemAvailable`` and ``RLIMIT_AS``): :class:`runtime.memory.MemoryLimitError` (a MemoryError) naming the
    tensor and both sizes, instead of a read that fails with an empty MemoryError or an OOM kill (a sparse
    file of many GiB costs the disk nothing)."""
    from runtime.memory import check_allocation

    from pathlib import PurePosixPath

    onnx = _onnx()
    root = folder.resolve()
    sizes: dict[Path, int] = {}
    total = 0
    regions = []
    for t in _all_tensors(model.graph):
        if t.data_location != onnx.TensorProto.EXTERNAL:
            continue
        info = {e.key: e.value for e in t.external_data}
        where = f"from_onnx: external data of tensor '{t.name}'"
        loc = info.get("location", "")
        rel = PurePosixPath(loc.replace("\\", "/"))
        if not loc or rel.is_absolute() or ".." in rel.parts or ":" in loc or "\0" in loc:
            raise ONNXImportError(f"{where}: location {loc!r} is not a relative path inside the model's folder")
        target = (root / rel).resolve()
        if root not in target.parents or not target.is_file():
            raise ONNXImportError(f"{where}: {loc!r} is not a regular file inside {str(root)!r}")
        if target not in sizes:
            sizes[target] = target.stat().st_size
        size = sizes[target]
        try:
            offset = int(info.get("offset", "0"))
            length = int(info["length"]) if "length" in info else size - offset
        except ValueError as e:
            raise ONNXImportError(f"{where}: offset / length are not integers") from e
        if any(d < 0 for d in t.dims):
            raise ONNXImportError(f"{where}: negative dims {list(t.dims)}")
        need = _external_nbytes(t, math.prod(t.dims))
        if offset < 0 or length != need or offset + length > size:
            raise ONNXImportError(f"{where}: bytes [{offset}, {offset + length}) of {loc!r} ({size} bytes) for "
                                  f"{need} bytes of data (dims {list(t.dims)})")
        total += length
        if total > sum(sizes.values()):
            raise ONNXImportError(f"{where}: the external regions read more bytes ({total}) than the files hold")
        regions.append((t, where, loc, target, offset, length))
    if regions:
        check_allocation(total, f"from_onnx: the external data of {len(regions)} tensor(s) in {str(root)!r}")
    for t, where, loc, target, offset, length in regions:
        check_allocation(length, where)
        with open(target, "rb") as fh:
            fh.seek(offset)
            data = fh.read(length)
        if len(data) != length:
            raise ONNXImportError(f"{where}: {loc!r} ended early")
        t.raw_data = data
        del t.external_data[:]
        t.data_location = onnx.TensorProto.DEFAULT


def _nodes_and_branches(graph, prefix: str = "", depth: int = 0):
    """``(node, name)`` of every node of ``graph`` and of the bodies of its ``If`` / ``Loop`` nodes (named
    ``If_node/then_branch/node``), so that the ops of a body are checked with the others. Raises
    ONNXImportError for bodies nested deeper than :data:`MAX_BRANCH_DEPTH` (which could not be imported)."""
    if depth > MAX_BRANCH_DEPTH:
        raise ONNXImportError(f"from_onnx: If / Loop bodies nested deeper than {MAX_BRANCH_DEPTH} ({prefix})")
    for i, node in enumerate(graph.node):
        name = prefix + _node_name(node, i)
        yield node, name
        if _op_key(node) in ("If", "Loop"):
            for a in node.attribute:
                if a.HasField("g"):
                    yield from _nodes_and_branches(a.g, f"{prefix}{node.name or f'{node.op_type}_{i}'}/{a.name}/",
                                                   depth + 1)


def _all_tensors(graph):
    """Every TensorProto of ``graph``: initializers and tensor attributes, in subgraphs too (walked without
    recursion: a ModelProto built in Python may nest graphs any depth before the checks)."""
    graphs = [graph]
    while graphs:
        g = graphs.pop()
        yield from g.initializer
        for node in g.node:
            for a in node.attribute:
                if a.HasField("t"):
                    yield a.t
                yield from a.tensors
                if a.HasField("g"):
                    graphs.append(a.g)
                graphs.extend(a.graphs)


#: The oldest default-domain opset converted (to ``OPSETS[0]``, by ``onnx.version_converter``) before import.
OLDEST_CONVERTED_OPSET = 7


def _opset(model) -> int:
    versions = [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")]
    if not versions:
        raise ONNXImportError("from_onnx: the model imports no opset of the default ONNX domain")
    v = int(versions[0])
    if not OPSETS[0] <= v <= OPSETS[1]:
        raise ONNXImportError(f"from_onnx: opset {v} is not supported (opsets {OPSETS[0]} to {OPSETS[1]}, and "
                              f"{OLDEST_CONVERTED_OPSET} to {OPSETS[0] - 1} converted)")
    return v


def _upgraded(model):
    """``model`` itself, or, for a default-domain opset in ``[OLDEST_CONVERTED_OPSET, OPSETS[0])`` (the ONNX
    model zoo's ResNet / BERT-SQuAD era), the model converted to ``OPSETS[0]`` by ONNX's own
    ``version_converter`` and checked again. Raises ONNXImportError when the converter cannot convert it."""
    onnx = _onnx()
    versions = [int(o.version) for o in model.opset_import if o.domain in ("", "ai.onnx")]
    if not versions or not OLDEST_CONVERTED_OPSET <= versions[0] < OPSETS[0]:
        return model
    from onnx import version_converter

    try:
        upgraded = version_converter.convert_version(model, OPSETS[0])
        onnx.checker.check_model(upgraded)
    except Exception as e:
        raise ONNXImportError(f"from_onnx: opset {versions[0]} could not be converted to {OPSETS[0]} by "
                              f"onnx.version_converter: {str(e).splitlines()[0] if str(e) else type(e).__name__}") from e
    return upgraded


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


_IDENT = re.compile(r"[^0-9A-Za-z_]")


# ------------------------------------------------------------------------------------------------
# The importer
# ------------------------------------------------------------------------------------------------

class _Importer:
    def __init__(self, model, opset: int, source_opset: int | None = None) -> None:
        self.model = model
        self.opset = opset
        #: the default-domain opset the file was written for, before ``onnx.version_converter`` (the
        #: converters of ops whose meaning changed without a converter adapter read it: Hardmax)
        self.source_opset = opset if source_opset is None else source_opset
        self.env: dict[str, Any] = {}
        self.depth = 0    # If / Loop bodies being imported, one inside the other (subgraph)
        #: nodes imported from If branches and Loop bodies so far, all nesting levels and iterations together
        #: (at most :data:`MAX_UNROLLED_NODES`, :meth:`subgraph`)
        self.unrolled = 0
        self.dims: dict[str, E.Var] = {}
        self.dim_names: set[str] = set()
        self.const_cache: dict[int, tuple[np.ndarray, Tensor]] = {}
        #: tensors that are a symbolic integer cast to float (id -> (tensor, the integer value)): a Range can
        #: still take them as a bound (``torch.arange(x.shape[1], dtype=torch.float32)`` exports that way)
        self.float_of_sym: dict[int, tuple[Tensor, _Sym]] = {}
        self.uses: dict[str, int] = {}
        for n in model.graph.node:
            for name in n.input:
                self.uses[name] = self.uses.get(name, 0) + 1
        for o in model.graph.output:
            self.uses[o.name] = self.uses.get(o.name, 0) + 1
        self.gelu_at, self.gelu_skip = _find_gelus(model.graph, self.uses)

    # -- dims and inputs ---------------------------------------------------------------------------
    def dim_var(self, key: str) -> E.Var:
        if key not in self.dims:
            name = _IDENT.sub("_", key) or "dim"
            if name[0].isdigit():
                name = "d_" + name
            base, k = name, 1
            while name in self.dim_names:
                k += 1
                name = f"{base}_{k}"
            self.dim_names.add(name)
            self.dims[key] = E.Var(name, "int64")
        return self.dims[key]

    def input_var(self, vi, shape_override, dtype_override) -> rx.Var:
        onnx = _onnx()
        t = vi.type
        if not t.HasField("tensor_type"):
            raise ONNXImportError(f"from_onnx: input {vi.name!r} is not a tensor (sequences, maps and "
                                  "optionals are not supported)")
        tt = t.tensor_type
        dtype = dtype_override if dtype_override is not None else _np_dtype_name(tt.elem_type)
        if dtype not in DTYPES:
            raise ONNXImportError(f"from_onnx: dtype_dict[{vi.name!r}] = {dtype!r} is not a dtype ({', '.join(DTYPES)})")
        if not tt.HasField("shape") and shape_override is None:
            raise ONNXImportError(f"from_onnx: input {vi.name!r} has no shape (not even its rank); give it in "
                                  "shape_dict")
        model_dims = list(tt.shape.dim) if tt.HasField("shape") else []
        if shape_override is not None:
            if isinstance(shape_override, (str, bytes)) or not isinstance(shape_override, Sequence):
                raise TypeError(f"from_onnx: shape_dict[{vi.name!r}] must be a list of dims")
            if model_dims and len(shape_override) != len(model_dims):
                raise ONNXImportError(f"from_onnx: shape_dict[{vi.name!r}] has {len(shape_override)} dims, the "
                                      f"model's input has {len(model_dims)}")
        n = len(shape_override) if shape_override is not None else len(model_dims)
        if n > MAX_NDIM:
            raise ONNXImportError(f"from_onnx: input {vi.name!r} has {n} dims, more than the limit of {MAX_NDIM} "
                                  "(schemas.limits.MAX_NDIM)")
        shape = []
        for i in range(n):
            over = shape_override[i] if shape_override is not None else None
            if over is not None:
                if isinstance(over, bool) or not isinstance(over, (int, np.integer, str)):
                    raise TypeError(f"from_onnx: shape_dict[{vi.name!r}][{i}] must be an int, a name or None, "
                                    f"got {over!r}")
                if isinstance(over, str):
                    shape.append(self.dim_var(over))
                elif int(over) < 0:
                    raise ONNXImportError(f"from_onnx: shape_dict[{vi.name!r}][{i}] = {over} is negative")
                else:
                    shape.append(int(over))
                continue
            d = model_dims[i]
            if d.HasField("dim_value") and d.dim_value >= 0:
                shape.append(int(d.dim_value))
            elif d.HasField("dim_param") and d.dim_param:
                shape.append(self.dim_var(d.dim_param))
            else:
                shape.append(self.dim_var(f"{vi.name}_dim{i}"))
        del onnx
        return rx.Var(_IDENT.sub("_", vi.name) or "input", TensorStructInfo(shape, dtype))

    # -- values ------------------------------------------------------------------------------------
    def const(self, arr: np.ndarray) -> Tensor:
        """A static array as a constant Tensor (one Constant per array object)."""
        hit = self.const_cache.get(id(arr))
        if hit is not None and hit[0] is arr:
            return hit[1]
        t = Tensor(_expr=rx.Constant(np.ascontiguousarray(arr).reshape(np.shape(arr))))   # keeps 0-d arrays 0-d
        self.const_cache[id(arr)] = (arr, t)
        return t

    def tensor(self, v) -> Tensor:
        """Any value as a Tensor: static -> constant, symbolic -> computed from the shape variables."""
        if isinstance(v, Tensor):
            return v
        if isinstance(v, np.ndarray):
            return self.const(v)
        if isinstance(v, _Sym):
            parts = []
            for e in v.vals.ravel():
                if isinstance(e, int):
                    parts.append(rx.const(np.array([e], dtype=v.dtype)))
                else:
                    s = symbolic_scalar(e, v.dtype)
                    parts.append(rx.Call(rx.Op.get("reshape"), [s, rx.ShapeExpr([1])], {}))
            if v.vals.ndim == 0:
                return wrap_nested(rx.Call(rx.Op.get("reshape"), [parts[0], rx.ShapeExpr([])], {}), "shape_value")
            flat = parts[0] if len(parts) == 1 else rx.Call(rx.Op.get("concat"), [rx.Tuple(parts)], {"axis": 0})
            return wrap_nested(rx.Call(rx.Op.get("reshape"), [flat, rx.ShapeExpr(list(v.vals.shape))], {}),
                               "shape_value")
        if isinstance(v, _Sequence):
            raise ONNXImportError("a sequence cannot be used as a tensor (sequences are supported as "
                                  "SplitToSequence / SequenceConstruct ... SequenceAt / ConcatFromSequence)")
        raise ONNXImportError(f"a value of type {type(v).__name__} cannot be used as a tensor")

    @staticmethod
    def shape_of(v) -> list:
        if isinstance(v, Tensor):
            return [_simp(d) for d in v.shape]
        return list(v.shape)

    @staticmethod
    def dtype_of(v) -> str:
        if isinstance(v, Tensor):
            return v.dtype
        if isinstance(v, _Sym):
            return v.dtype
        return str(v.dtype)

    def shape_list(self, v, what: str) -> list:
        """A 1-D shape-like value (static or symbolic) as a list of ints / PrimExprs."""
        if isinstance(v, Tensor):
            raise ONNXImportError(f"{what} is computed from tensor data, not from shapes; data-dependent "
                                  "shapes are not supported")
        if v is None:
            raise ONNXImportError(f"{what} is missing")
        return [_simp(e) for e in _objects(v).ravel()]

    def static(self, v, what: str) -> np.ndarray:
        if not isinstance(v, np.ndarray):
            raise ONNXImportError(f"{what} must be a constant (known at import time)")
        return v

    def ints(self, v, what: str) -> list[int]:
        return [int(x) for x in self.static(v, what).ravel()]

    # -- the graph ---------------------------------------------------------------------------------
    def run(self, shape_dict, dtype_dict) -> rx.IRModule:
        graph = self.model.graph
        init_names = {t.name for t in graph.initializer}
        inputs = [vi for vi in graph.input if vi.name not in init_names]
        known = {vi.name for vi in inputs}
        for what, d in (("shape_dict", shape_dict), ("dtype_dict", dtype_dict)):
            unknown = sorted(set(d or {}) - known)
            if unknown:
                raise ONNXImportError(f"from_onnx: {what} names {unknown}, which are not graph inputs "
                                      f"({sorted(known)})")
        for t in graph.initializer:
            self.env[t.name] = _to_array(t)
        bb = BlockBuilder()
        params = [self.input_var(vi, (shape_dict or {}).get(vi.name), (dtype_dict or {}).get(vi.name))
                  for vi in inputs]
        with bb.function("main", attrs={"num_input": len(params)}):
            with bb.dataflow():
                for vi, p in zip(inputs, params):
                    self.env[vi.name] = Tensor(_expr=p)
                for i, node in enumerate(graph.node):
                    if i not in self.gelu_skip:
                        self.node(node, i)
                outs = []
                for o in graph.output:
                    if o.name not in self.env:
                        raise ONNXImportError(f"from_onnx: graph output {o.name!r} is computed by no node")
                    outs.append(self.tensor(self.env[o.name])._expr)
                gv = bb.emit_output(outs[0] if len(outs) == 1 else rx.Tuple(outs))
            bb.emit_func_output(gv, params=params)
        return verify(bb.get())

    def subgraph(self, graph, nout: int) -> list:
        """The values of ``graph``'s outputs (an ``If`` branch, ``nout`` of them), its initializers and nodes
        imported into this graph's scope (ONNX names are unique across a model and its subgraphs; their ops
        were checked with the model's, :func:`_nodes_and_branches`). Every node imported here counts against
        one budget for the whole model, :data:`MAX_UNROLLED_NODES` (``self.unrolled``: every nesting level, every
        Loop iteration and every If branch taken; a body without nodes counts 1), so that Loops nested in Loops
        cannot multiply their trip counts into an unbounded import. Raises ONNXImportError for outputs that do
        not match, subgraphs nested deeper than :data:`MAX_BRANCH_DEPTH`, or the node past the budget (named)."""
        self.depth += 1
        try:
            if self.depth > MAX_BRANCH_DEPTH:
                raise ONNXImportError(f"If / Loop bodies nested deeper than {MAX_BRANCH_DEPTH}")
            if len(graph.output) != nout:
                raise ONNXImportError(f"the branch has {len(graph.output)} outputs, the node {nout}")
            if not graph.node:
                self._charge(f"the empty body {graph.name!r}")
            for t in graph.initializer:
                self.env[t.name] = _to_array(t)
            for k, n in enumerate(graph.node):
                self._charge(f"node {_node_name(n, k)!r} ({n.op_type}) of the body {graph.name!r}")
                self.node(n, k, body=graph.name)
            outs = []
            for o in graph.output:
                if o.name not in self.env:
                    raise ONNXImportError(f"the branch output {o.name!r} is computed by no node")
                outs.append(self.env[o.name])
            return outs
        finally:
            self.depth -= 1

    def _charge(self, what: str) -> None:
        """Count one more node imported from an If / Loop body; ONNXImportError naming ``what`` past
        :data:`MAX_UNROLLED_NODES`."""
        self.unrolled += 1
        if self.unrolled > MAX_UNROLLED_NODES:
            raise ONNXImportError(f"{what} would be node {self.unrolled} imported from If / Loop bodies (Loops "
                                  f"unrolled, nested ones multiplied), more than the limit of {MAX_UNROLLED_NODES} "
                                  "for the whole model (MAX_UNROLLED_NODES)")

    def node(self, node, i: int, body: str | None = None) -> None:
        """Import ``node``, the ``i``-th of the main graph or (``body``: the subgraph's name) of an If / Loop
        body; errors name it by its name, else its op type and index (``Loop_3 (-> y)``), and the body."""
        conv = _CONVERTERS[_op_key(node)]
        gelu = self.gelu_at if body is None else {}   # (GELU patterns are found in the main graph only)
        who = f"node {_node_name(node, i)!r} ({node.op_type})" + ("" if body is None else f" of the body {body!r}")
        ins = []
        for name in ([] if i in gelu else node.input):
            if name == "":
                ins.append(None)
            elif name not in self.env:
                raise ONNXImportError(f"from_onnx: {who} reads {name!r}, "
                                      "which no earlier node or input defines (nodes must be topologically sorted)")
            else:
                ins.append(self.env[name])
        try:
            if i in gelu:
                x = self.env[gelu[i]]
                outs = op.gelu(self.tensor(x))
            else:
                outs = conv(self, node, ins, _attrs(node))
        except ONNXImportError as e:
            raise ONNXImportError(f"from_onnx: {who}: {e}") from e
        except (ValueError, TypeError, NotImplementedError) as e:
            raise ONNXImportError(f"from_onnx: {who} cannot be "
                                  f"translated: {e}") from e
        except (MemoryError, RecursionError):
            raise
        except Exception as e:   # a malformed node (a required input left empty, ranks that do not fit)
            raise ONNXImportError(f"from_onnx: {who} cannot be "
                                  f"translated: {type(e).__name__}: {e}") from e
        if not isinstance(outs, (list, tuple)):
            outs = [outs]
        for name, v in zip(node.output, outs):
            if isinstance(v, (Tensor, np.ndarray, _Sym)) and len(v.shape) > MAX_NDIM:
                raise ONNXImportError(f"from_onnx: {who} makes {name!r} of "
                                      f"{len(v.shape)} dims, more than the limit of {MAX_NDIM} (schemas.limits.MAX_NDIM)")
            if name:   # numpy folds of 0-d arrays give numpy scalars: kept as 0-d arrays
                self.env[name] = np.asarray(v) if isinstance(v, np.generic) else v
        for name in node.output[len(outs):]:
            if name:
                self.env[name] = _Unavailable(node, name)


def _scalar_is(v, target: float, rel: float = 1e-6) -> bool:
    return (isinstance(v, np.ndarray) and v.dtype.kind == "f" and v.size == 1
            and abs(float(v.ravel()[0]) - target) <= rel * abs(target))


def _find_gelus(graph, uses: dict[str, int]) -> tuple[dict[int, str], set[int]]:
    """Exact GELU chains as exporters write them: ``0.5 * (x * (1 + erf(x / sqrt(2))))`` (operands of
    Mul / Add in either order; ``x * sqrt(1/2)`` for the division; also ``(0.5 * x) * (1 + ...)``),
    every intermediate used once. Returns ({index of the last Mul: name of x}, {indices of the
    other nodes of the chains}): the import emits one ``gelu(x)`` at the last Mul and skips the rest,
    so the pipeline fuses GELU into the matmul's epilogue as it does for ``nn.gelu``."""
    consts: dict[str, np.ndarray] = {}
    for t in graph.initializer:
        if t.data_type == 1 and math.prod(t.dims) == 1:
            consts[t.name] = _to_array(t)
    producer: dict[str, tuple[int, Any]] = {}
    for i, n in enumerate(graph.node):
        if n.op_type == "Constant" and n.domain in ("", "ai.onnx"):
            at = _attrs(n)
            v = at.get("value", np.array(at["value_float"], "float32") if "value_float" in at else None)
            if isinstance(v, np.ndarray) and v.size == 1:
                consts[n.output[0]] = v
        for o in n.output:
            producer[o] = (i, n)

    def single(name, op_type):
        hit = producer.get(name)
        ok = hit is not None and uses.get(name, 0) == 1 and hit[1].op_type == op_type and hit[1].domain in ("", "ai.onnx")
        return hit if ok else None

    def other(n, value: float):
        """The input name of binary node n beside the scalar constant ``value``, or None."""
        if len(n.input) != 2:
            return None
        for i in (0, 1):
            if _scalar_is(consts.get(n.input[i]), value):
                return n.input[1 - i]
        return None

    def erf_branch(name, x):
        """Nodes of ``1 + erf(x / sqrt 2)`` producing ``name`` for the given x, or None."""
        add = single(name, "Add")
        e_name = other(add[1], 1.0) if add else None
        erf = single(e_name, "Erf") if e_name else None
        if erf is None:
            return None
        div = single(erf[1].input[0], "Div")
        if div is not None and div[1].input[0] == x and _scalar_is(consts.get(div[1].input[1]), math.sqrt(2.0)):
            return [add[0], erf[0], div[0]]
        mul = single(erf[1].input[0], "Mul")
        if mul is not None and other(mul[1], math.sqrt(0.5)) == x:
            return [add[0], erf[0], mul[0]]
        return None

    last: dict[int, str] = {}
    skip: set[int] = set()
    for i, n in enumerate(graph.node):
        if n.op_type != "Mul" or n.domain not in ("", "ai.onnx") or len(n.input) != 2:
            continue
        found = None
        rest = other(n, 0.5)
        inner = single(rest, "Mul") if rest else None
        if inner is not None:                       # 0.5 * (x * (1 + erf))
            for j in (0, 1):
                x = inner[1].input[j]
                chain = erf_branch(inner[1].input[1 - j], x)
                if chain:
                    found = (x, chain + [inner[0]])
                    break
        else:                                       # (0.5 * x) * (1 + erf)
            for j in (0, 1):
                half = single(n.input[j], "Mul")
                x = other(half[1], 0.5) if half else None
                chain = erf_branch(n.input[1 - j], x) if x else None
                if chain:
                    found = (x, chain + [half[0]])
                    break
        if found:
            last[i] = found[0]
            skip.update(found[1])
    return last, skip


class _Unavailable:
    """An optional output this importer does not compute; reading it fails with a clear error."""

    def __init__(self, node, name: str) -> None:
        self.node, self.name = node, name


# ------------------------------------------------------------------------------------------------
# Converters: fn(importer, node, inputs, attrs) -> output value(s)
# ------------------------------------------------------------------------------------------------

_CONVERTERS: dict[str, Callable] = {}


def _op_key(node) -> str:
    """A node's converter key: its op type in the default domain, ``domain:op`` elsewhere
    (``com.microsoft:MatMulNBits``)."""
    return node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}:{node.op_type}"


def _register(*names: str):
    def deco(fn):
        for n in names:
            _CONVERTERS[n] = fn
        return fn
    return deco


def _check_inputs(ins: list, node) -> None:
    for v in ins:
        if isinstance(v, _Unavailable):
            raise ONNXImportError(f"reads the optional output {v.name!r} of {v.node.op_type}, which is not "
                                  "computed by this importer")


def _fold_ok(*shapes) -> bool:
    return all(isinstance(d, int) for s in shapes for d in s) and all(
        math.prod(s) <= MAX_FOLD_ELEMENTS for s in shapes)


# -- elementwise ---------------------------------------------------------------------------------

_UNARY = {"Relu": op.relu, "Sigmoid": op.sigmoid, "Tanh": op.tanh, "Exp": op.exp, "Log": op.log,
          "Sqrt": op.sqrt, "Erf": op.erf, "Neg": op.negative, "Abs": op.abs, "Sin": op.sin, "Cos": op.cos,
          "Floor": op.floor, "Ceil": op.ceil, "Round": op.round, "Sign": op.sign, "Tan": op.tan, "Atan": op.atan,
          "Asin": op.asin, "Acos": op.acos}
#: The unary ops that are exact on every dtype, folded when their input is a constant (shape arithmetic
#: such as ``ceil(h / p) * p`` written in float): their numpy forms.
_UNARY_EXACT_NP = {"Relu": lambda x: np.maximum(x, 0).astype(x.dtype), "Neg": np.negative, "Abs": np.abs,
                   "Sign": np.sign, "Floor": np.floor, "Ceil": np.ceil, "Round": np.round}


@_register(*_UNARY)
def _unary(im: _Importer, node, ins, at):
    _check_inputs(ins, node)
    (x,) = ins
    if isinstance(x, _Sym) and node.op_type in ("Neg", "Abs"):
        f = (lambda e: -e) if node.op_type == "Neg" else (lambda e: e if _nonneg(e) else None)
        vals = np.vectorize(f, otypes=[object])(x.vals)
        if not any(v is None for v in vals.ravel()):
            return _shape_value(vals, x.dtype)
    if isinstance(x, np.ndarray) and node.op_type in _UNARY_EXACT_NP \
            and (x.dtype.kind in "iu" or (x.dtype.kind == "f" and _fold_ok(x.shape))):
        return _UNARY_EXACT_NP[node.op_type](x).astype(x.dtype)
    return _UNARY[node.op_type](im.tensor(x))


_HYPERBOLIC = {"Sinh": sinh, "Cosh": cosh, "Asinh": asinh, "Acosh": acosh, "Atanh": atanh}


@_register(*_HYPERBOLIC)
def _hyperbolic(im, node, ins, at):
    """The hyperbolic functions and their inverses as compositions of exp / log / sqrt (the torch
    translations': :func:`builder.frontend.common.asinh` ...)."""
    _check_inputs(ins, node)
    return _HYPERBOLIC[node.op_type](None, im.tensor(ins[0]))


@_register("HardSigmoid", "HardSwish", "LeakyRelu", "Elu", "Selu", "Celu", "Softplus", "Softsign", "Mish")
def _activation(im, node, ins, at):
    """The ONNX activations with attributes (their spec defaults), as :mod:`builder.nn.op`'s composites."""
    _check_inputs(ins, node)
    x = im.tensor(ins[0])
    kind = node.op_type
    if kind == "HardSigmoid":
        return op.hardsigmoid(x, float(at.get("alpha", 0.2)), float(at.get("beta", 0.5)))
    if kind == "HardSwish":
        return op.hardswish(x)
    if kind == "LeakyRelu":
        return op.leaky_relu(x, float(at.get("alpha", 0.01)))
    if kind == "Elu":
        return op.elu(x, float(at.get("alpha", 1.0)))
    if kind == "Selu":
        return op.elu(x, float(at.get("alpha", 1.67326319217681884765625)),
                      float(at.get("gamma", 1.05070102214813232421875)))
    if kind == "Celu":
        return op.celu(x, float(at.get("alpha", 1.0)))
    if kind == "Softplus":
        return op.softplus(x, 1.0, float("inf"))
    if kind == "Softsign":
        return op.softsign(x)
    return op.mish(x)


@_register("PRelu")
def _prelu(im, node, ins, at):
    """``PRelu``: ``x`` where ``x >= 0``, else ``slope * x`` (``slope`` broadcast to ``x``)."""
    _check_inputs(ins, node)
    x = im.tensor(ins[0])
    slope = ins[1].astype(x.dtype) if isinstance(ins[1], np.ndarray) else ins[1]
    return op.where(op.greater_equal(x, 0.0), x, op.multiply(x, im.tensor(slope)))


@_register("Reciprocal")
def _reciprocal(im, node, ins, at):
    _check_inputs(ins, node)
    x = im.tensor(ins[0])
    return op.divide(im.const(np.ones((), dtype=x.dtype)), x)


@_register("Gelu")
def _gelu(im, node, ins, at):
    _check_inputs(ins, node)
    approx = at.get("approximate", "none")
    if approx not in ("none", "tanh"):
        raise ONNXImportError(f"unknown approximate={approx!r}")
    return op.gelu(im.tensor(ins[0]), approximate=None if approx == "none" else "tanh")


def _int_div(a, b):
    if isinstance(a, int) and isinstance(b, int):
        if b == 0:
            raise ONNXImportError("integer division by zero in a shape computation")
        q = abs(a) // abs(b)
        return q if (a >= 0) == (b > 0) else -q
    if _nonneg(a) and isinstance(b, int) and b > 0 or _nonneg(a) and _nonneg(b):
        return E.FloorDiv(E.convert(a, "int64"), E.convert(b, "int64"))
    raise ONNXImportError(f"cannot divide the symbolic dims {a} / {b} (the sign is unknown)")


_SYM_BINARY = {"Add": lambda a, b: a + b, "Sub": lambda a, b: a - b, "Mul": lambda a, b: a * b, "Div": _int_div}
_NP_BINARY = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": None, "Pow": None,
              "Max": np.maximum, "Min": np.minimum}
_BINARY = {"Add": op.add, "Sub": op.subtract, "Mul": op.multiply, "Div": op.divide, "Pow": op.power,
           "Max": op.maximum, "Min": op.minimum}


@_register("Add", "Sub", "Mul", "Div", "Pow")
def _binary(im: _Importer, node, ins, at):
    _check_inputs(ins, node)
    a, b = ins
    kind = node.op_type
    shape_like = lambda v: isinstance(v, _Sym) or isinstance(v, np.ndarray) and v.dtype.kind in "iu"
    if kind in _SYM_BINARY and shape_like(a) and shape_like(b) and (isinstance(a, _Sym) or isinstance(b, _Sym)):
        oa, ob = np.broadcast_arrays(_objects(a), _objects(b))
        vals = np.empty(oa.shape, dtype=object)
        vals.ravel()[:] = [_SYM_BINARY[kind](x, y) for x, y in zip(oa.ravel(), ob.ravel())]
        return _shape_value(vals, im.dtype_of(a))
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and _fold_ok(np.broadcast_shapes(a.shape, b.shape)):
        if kind == "Div" and a.dtype.kind in "iu":
            if np.any(b == 0):
                raise ONNXImportError("integer division by zero in constants")
            return np.array([_int_div(int(x), int(y)) for x, y in zip(*[t.ravel() for t in np.broadcast_arrays(a, b)])],
                            dtype=a.dtype).reshape(np.broadcast_shapes(a.shape, b.shape))
        if kind == "Div":
            return np.divide(a, b).astype(a.dtype)
        if kind == "Pow":
            return np.power(a, b.astype(a.dtype)).astype(a.dtype)
        return _NP_BINARY[kind](a, b).astype(a.dtype)
    ta = im.tensor(a)
    if kind == "Pow" and isinstance(b, np.ndarray) and str(b.dtype) != ta.dtype:
        b = b.astype(ta.dtype)   # ONNX Pow allows an exponent of another type
    tb = im.tensor(b)
    if kind == "Pow" and isinstance(b, np.ndarray) and b.size == 1 and float(b.ravel()[0]) == 2.0:
        return op.multiply(ta, ta)
    return _BINARY[kind](ta, tb)


@_register("Mod")
def _mod(im, node, ins, at):
    """``Mod``: ``fmod=0`` the sign of the divisor (integers; ``floor_mod``), ``fmod=1`` the sign of the
    dividend (C's ``fmod``: ``a - trunc(a / b) * b``, and ``a`` itself for a finite ``a`` over an infinite
    ``b``)."""
    _check_inputs(ins, node)
    a, b = ins
    shape_like = lambda v: isinstance(v, _Sym) or isinstance(v, np.ndarray) and v.dtype.kind in "iu"
    if shape_like(a) and shape_like(b) and (isinstance(a, _Sym) or isinstance(b, _Sym)):
        # shape arithmetic ((w - h % w) % w: padding to a multiple): dims are never negative, so
        # floor and C modulo agree
        oa, ob = np.broadcast_arrays(_objects(a), _objects(b))
        vals = np.empty(oa.shape, dtype=object)
        vals.ravel()[:] = [_mod_value(x, y) for x, y in zip(oa.ravel(), ob.ravel())]
        return _shape_value(vals, im.dtype_of(a))
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.dtype.kind in "iu" and b.dtype.kind in "iu" \
            and _fold_ok(np.broadcast_shapes(a.shape, b.shape)):
        if np.any(b == 0):
            raise ONNXImportError("integer modulo by zero in constants")
        return (np.fmod(a, b) if int(at.get("fmod", 0)) else np.mod(a, b)).astype(a.dtype)
    a, b = im.tensor(a), im.tensor(b)
    if int(at.get("fmod", 0)):
        if a.dtype.startswith(("int", "uint")):
            return op.subtract(a, op.multiply(op.divide(a, b), b))      # integer divide truncates
        r = op.subtract(a, op.multiply(op.trunc(op.divide(a, b)), b))
        # C's fmod of a finite dividend by an infinite divisor is the dividend (C11 F.10.7.1), where the
        # formula gives 0 * inf = NaN
        return op.where(op.equal(op.abs(b), float("inf")), op.where(op.less(op.abs(a), float("inf")), a, r), r)
    if E.is_float_dtype(a.dtype):
        raise ONNXImportError("Mod of floats needs fmod=1 (the ONNX spec)")
    return op.floor_mod(a, b)


def _mod_value(x, y):
    """``x % y`` of two shape values (ints or int64 expressions of the symbolic dims)."""
    if isinstance(x, int) and isinstance(y, int):
        if y == 0:
            raise ONNXImportError("modulo by zero in shape arithmetic")
        return x % y
    return E.simplify(E.convert(x) % E.convert(y))


@_register("ArgMax", "ArgMin")
def _argmax(im, node, ins, at):
    _check_inputs(ins, node)
    x = im.tensor(ins[0])
    nd = len(x.shape)
    axis = int(at.get("axis", 0))
    if not -nd <= axis < nd:
        raise ONNXImportError(f"axis {axis} is out of range for a {nd}-d input")
    if int(at.get("select_last_index", 0)):
        raise ONNXImportError("select_last_index=1 is not supported (the first extreme is taken)")
    fn = op.argmax if node.op_type == "ArgMax" else op.argmin
    return fn(x, axis=axis % nd, keepdims=bool(int(at.get("keepdims", 1))))


def _axis_attr(at: dict, nd: int, default: int = -1) -> int:
    """A node's ``axis`` attribute normalized into ``[0, nd)``; ONNXImportError when out of range."""
    axis = int(at.get("axis", default))
    if not -nd <= axis < nd:
        raise ONNXImportError(f"axis {axis} is out of range for a {nd}-d input")
    return axis % nd


@_register("LpNormalization")
def _lp_normalization(im, node, ins, at):
    """``LpNormalization``: ``x / ||x||_p`` along ``axis`` (p 1 or 2; :func:`builder.nn.op.normalize` with a
    zero norm guarded by the smallest normal float instead of a division by 0)."""
    _check_inputs(ins, node)
    x = im.tensor(ins[0])
    p = int(at.get("p", 2))
    if p not in (1, 2):
        raise ONNXImportError(f"LpNormalization with p={p} (1 or 2)")
    return op.normalize(x, float(p), int(at.get("axis", -1)), eps=float(np.finfo(np.float32).tiny))


@_register("Hardmax")
def _hardmax(im, node, ins, at):
    """``Hardmax``: 1 at the first maximum along ``axis``, 0 elsewhere, in the input's dtype; ``x`` any rank
    >= 1, any float dtype. Opset 13 (and later) takes the maximum along the one dim ``axis`` (default -1).
    Opsets 1 to 12 define it on ``x`` coerced to 2-D, ``[prod(dims[:axis]), prod(dims[axis:])]`` (default
    axis 1): the maximum over all the trailing dims from ``axis`` on (Hardmax-11's text). ONNX's
    ``version_converter`` has no 12 -> 13 adapter for Hardmax (it has for Softmax / LogSoftmax) and passes
    the node on unchanged, so the file's own opset (:attr:`_Importer.source_opset`) decides here.
    Raises ONNXImportError for an axis out of range."""
    _check_inputs(ins, node)
    x = im.tensor(ins[0])
    nd = len(x.shape)
    if im.source_opset < 13:
        axis = _axis_attr(at, nd, default=1)
        shape = [_simp(d) for d in x.shape]
        rows = _simp(math.prod(shape[:axis], start=E.IntImm(1, "int64")))
        cols = _simp(math.prod(shape[axis:], start=E.IntImm(1, "int64")))
        flat = op.reshape(x, [rows, cols])
        return op.reshape(_hardmax_along(flat, 1), shape)
    return _hardmax_along(x, _axis_attr(at, nd))


def _hardmax_along(x: Tensor, axis: int) -> Tensor:
    """1 at the first maximum of ``x`` along ``axis`` (in ``[0, ndim)``), 0 elsewhere, in ``x``'s dtype."""
    nd = len(x.shape)
    d = _simp(x.shape[axis])
    idx = op.argmax(x, axis=axis, keepdims=True)
    pos = op.arange(0, d, 1, dtype="int64")
    pos = op.reshape(pos, [d if i == axis else 1 for i in range(nd)])
    return op.astype(op.equal(idx, pos), x.dtype)


@_register("OneHot")
def _one_hot(im, node, ins, at):
    """``OneHot(indices, depth, values)``: ``values[1]`` where the (wrapped, for negative) index equals the
    position along the new ``axis``, ``values[0]`` elsewhere; ``depth`` must be known at import time."""
    _check_inputs(ins, node)
    depth = int(np.asarray(im.static(ins[1], "depth")).ravel()[0])
    vals = im.static(ins[2], "values").ravel()
    if depth < 1 or vals.size != 2:
        raise ONNXImportError(f"OneHot needs depth >= 1 and two values, got depth {depth}, {vals.size} values")
    nd = len(im.shape_of(ins[0])) + 1
    axis = int(at.get("axis", -1))
    if not -nd <= axis < nd:
        raise ONNXImportError(f"axis {axis} is out of range for a {nd}-d output")
    axis %= nd
    if isinstance(ins[0], np.ndarray) and _fold_ok(list(ins[0].shape) + [depth]):   # (shape arithmetic: folded)
        i = ins[0].astype(np.int64)
        i = np.where(i < 0, i + depth, i)
        pos = np.arange(depth).reshape([depth if d == axis else 1 for d in range(nd)])
        return np.where(np.expand_dims(i, axis) == pos, vals[1], vals[0]).astype(vals.dtype)
    idx = im.tensor(ins[0])
    idx = op.astype(idx, "int64") if idx.dtype != "int64" else idx
    idx = op.where(op.less(idx, 0), op.add(idx, im.const(np.array(depth, np.int64))), idx)
    pos = op.reshape(op.arange(0, depth, 1, dtype="int64"), [depth if i == axis else 1 for i in range(nd)])
    hit = op.equal(op.unsqueeze(idx, axis), pos)
    return op.where(hit, im.const(vals[1:2].reshape(())), im.const(vals[0:1].reshape(())))


@_register("GatherElements")
def _gather_elements(im, node, ins, at):
    _check_inputs(ins, node)
    x, idx = im.tensor(ins[0]), im.tensor(ins[1])
    return op.gather_elements(x, idx, axis=int(at.get("axis", 0)))


@_register("TopK")
def _topk(im, node, ins, at):
    """``TopK``: the ``K`` (a constant, or shape arithmetic that folds to an int) largest / smallest values
    along ``axis`` and their int64 positions, sorted, ties by the lower position (:func:`builder.nn.op.topk`;
    ``sorted=0`` allows any order, so sorted is right too)."""
    _check_inputs(ins, node)
    x = im.tensor(ins[0])
    k = im.shape_list(ins[1], "K")
    if len(k) != 1 or not isinstance(k[0], int):
        raise ONNXImportError(f"K must be one int known at import time, got {k}")
    return op.topk(x, k[0], axis=int(at.get("axis", -1)), largest=bool(int(at.get("largest", 1))), dtype="int64")


# -- quantization (ONNX's linear quantization: ``x = (q - zero_point) * scale``) -------------------------------

_QRANGE = {"uint8": (0, 255), "int8": (-128, 127), "uint16": (0, 65535), "int16": (-32768, 32767),
           "int32": (-2 ** 31, 2 ** 31 - 1)}


def _q_param(v, axis: int, ndim: int):
    """A scale / zero point shaped to broadcast against an ``ndim``-d value: a scalar (per tensor) as it is,
    a 1-d one (per ``axis``) with ones elsewhere."""
    shape = list(np.shape(v)) if isinstance(v, np.ndarray) else list(v.shape)
    if len(shape) == 0 or (len(shape) == 1 and shape[0] == 1):
        return v.reshape(()) if isinstance(v, np.ndarray) else op.reshape(v, [])
    if len(shape) != 1:
        raise ONNXImportError(f"a scale / zero point of shape {shape}: blocked quantization is not supported")
    target = [1] * ndim
    target[axis % ndim] = shape[0]
    return v.reshape(target) if isinstance(v, np.ndarray) else op.reshape(v, target)


def _dequantize(im, x, scale, zero_point, axis: int):
    """``(x - zero_point) * scale`` in the scale's dtype; folded when every operand is static (a quantized
    weight becomes a float constant, which the linear kernels then take)."""
    nd = len(im.shape_of(x))
    sc = _q_param(scale, axis, nd)
    zp = None if zero_point is None else _q_param(zero_point, axis, nd)
    out_dt = str(scale.dtype) if isinstance(scale, np.ndarray) else scale.dtype
    if all(isinstance(v, np.ndarray) or v is None for v in (x, sc, zp)):
        q = x.astype(np.float64) - (0.0 if zp is None else zp.astype(np.float64))
        return (q * sc.astype(np.float64)).astype(out_dt)
    q = op.astype(im.tensor(x), out_dt)
    if zp is not None:
        q = op.subtract(q, op.astype(im.tensor(zp), out_dt))
    return op.multiply(q, im.tensor(sc) if not isinstance(sc, np.ndarray) else im.const(sc.astype(out_dt)))


def _quantize(im, x, scale, zero_point, axis: int, dtype: str):
    """``saturate(round_half_even(x / scale) + zero_point)`` as ``dtype`` (ONNX ``QuantizeLinear``)."""
    if dtype not in _QRANGE:
        raise ONNXImportError(f"quantizing to {dtype} is not supported (uint8, int8, uint16, int16, int32)")
    lo, hi = _QRANGE[dtype]
    t = im.tensor(x)
    nd = len(t.shape)
    sc = im.tensor(_q_param(scale, axis, nd))
    q = op.round(op.divide(t, op.astype(sc, t.dtype) if sc.dtype != t.dtype else sc))
    if zero_point is not None:
        q = op.add(q, op.astype(im.tensor(_q_param(zero_point, axis, nd)), t.dtype))
    return op.astype(op.minimum(op.maximum(q, float(lo)), float(hi)), dtype)


@_register("DequantizeLinear")
def _dequantize_linear(im, node, ins, at):
    """``DequantizeLinear``: per tensor or per ``axis`` (a 1-d scale); ``block_size`` (opset 21) is refused."""
    _check_inputs(ins, node)
    if int(at.get("block_size", 0)):
        raise ONNXImportError("blocked dequantization (block_size) is not supported")
    zp = ins[2] if len(ins) > 2 and ins[2] is not None else None
    y = _dequantize(im, ins[0], ins[1], zp, int(at.get("axis", 1)))
    if int(at.get("output_dtype", 0)):   # (opset 23: another float type than the scale's)
        dt = _np_dtype_name(int(at["output_dtype"]))
        y = y.astype(dt) if isinstance(y, np.ndarray) else (y if y.dtype == dt else op.astype(y, dt))
    return y


@_register("QuantizeLinear")
def _quantize_linear(im, node, ins, at):
    """``QuantizeLinear`` to the zero point's dtype (uint8 without one, or ``output_dtype``), per tensor or per
    ``axis``; the rounding is half to even and the result saturates, as the spec says."""
    _check_inputs(ins, node)
    if int(at.get("block_size", 0)):
        raise ONNXImportError("blocked quantization (block_size) is not supported")
    zp = ins[2] if len(ins) > 2 and ins[2] is not None else None
    dtype = im.dtype_of(zp) if zp is not None else (
        _np_dtype_name(int(at["output_dtype"])) if int(at.get("output_dtype", 0)) else "uint8")
    return _quantize(im, ins[0], ins[1], zp, int(at.get("axis", 1)), dtype)


@_register("DynamicQuantizeLinear")
def _dynamic_quantize_linear(im, node, ins, at):
    """``DynamicQuantizeLinear`` (what onnxruntime's dynamic quantization puts before each ``MatMulInteger``):
    ``scale = (max(0, max x) - min(0, min x)) / 255``, ``zero_point = saturate(round(-min(0, min x) /
    scale))``, ``y = saturate(round(x / scale) + zero_point)``, all uint8 (an all-zero ``x`` has scale 0 and
    quantizes to 0)."""
    _check_inputs(ins, node)
    x = im.tensor(ins[0])
    lo = op.minimum(op.min(x), 0.0)
    hi = op.maximum(op.max(x), 0.0)
    scale = op.divide(op.subtract(hi, lo), 255.0)
    safe = op.where(op.equal(scale, 0.0), im.const(np.ones((), np.float32)), scale)
    zp = op.minimum(op.maximum(op.round(op.divide(op.negative(lo), safe)), 0.0), 255.0)
    y = op.minimum(op.maximum(op.add(op.round(op.divide(x, safe)), zp), 0.0), 255.0)
    return op.astype(y, "uint8"), scale, op.astype(zp, "uint8")


def _integer_operand(im, v, zp, dtype: str = "float32"):
    """``v - zp`` as ``dtype`` (float32, exact for 8-bit values, or int32): a folded constant when both are
    static."""
    if isinstance(v, np.ndarray) and (zp is None or isinstance(zp, np.ndarray)):
        return (v.astype(np.int64) - (0 if zp is None else zp.astype(np.int64))).astype(dtype)
    t = op.astype(im.tensor(v), dtype)
    return t if zp is None else op.subtract(t, op.astype(im.tensor(zp), dtype))


#: Every integer of magnitude up to 2**24 is a float32: sums of 8-bit products below it are exact in float32.
_F32_EXACT_INTEGERS = 1 << 24


def _integer_bound(im, v, zp) -> int:
    """The largest ``|v - zp|`` an 8-bit operand ``v`` can give: from its values when it is a constant (and so is
    ``zp``), else from its dtype's range and the zero point's values (or its dtype's range)."""
    if isinstance(v, np.ndarray) and (zp is None or isinstance(zp, np.ndarray)):
        d = v.astype(np.int64) - (0 if zp is None else zp.astype(np.int64))
        return max(1, int(np.abs(d).max(initial=0)))
    info = np.iinfo(im.dtype_of(v))
    if zp is None:
        return max(abs(info.min), abs(info.max))
    zinfo = np.iinfo(im.dtype_of(zp))
    zlo, zhi = (int(zp.min()), int(zp.max())) if isinstance(zp, np.ndarray) else (zinfo.min, zinfo.max)
    return max(info.max - zlo, zhi - info.min)


def _exact_integer_sum(im, k: int, per_product: int, chunk_product):
    """The int32 sum of integer products over ``k`` terms, exact: ``chunk_product(lo, hi)`` is the float32 sum of the
    terms ``lo:hi`` (an importer value); the terms are split into runs whose sums stay within float32's exact
    integers (``run * per_product <= 2**24``, ``per_product`` the largest ``|product|``), each rounded to int32
    and the runs added in int32 (the spec's int32 accumulation; float32 over all ``k`` terms rounds past 2**24)."""
    run = max(1, _F32_EXACT_INTEGERS // max(1, per_product))
    total = None
    for lo in range(0, k, run):
        y = chunk_product(lo, min(k, lo + run))
        y = op.astype(op.round(im.tensor(y)), "int32")
        total = y if total is None else op.add(total, y)
    return total


def _zero_point_of(v, which: str, ndim: int):
    if v is None:
        return None
    if isinstance(v, np.ndarray) and v.size > 1:
        if v.ndim != 1 or which == "a":
            raise ONNXImportError(f"a per-row zero point of {which} is not supported")
        return v.reshape([1] * (ndim - 1) + [v.size])   # per output column of b
    return v.reshape(()) if isinstance(v, np.ndarray) else op.reshape(v, [])


@_register("MatMulInteger")
def _matmul_integer(im, node, ins, at):
    """``MatMulInteger``: ``(A - a_zero_point) @ (B - b_zero_point)`` as int32, exactly. The 8-bit operands minus
    their zero points are exact in float32 and the product runs on the float kernels (a constant ``B`` is the
    linear kernels' weight), over runs of K short enough that no float32 sum passes 2**24
    (:func:`_exact_integer_sum`; one run for K up to 2**24 / (255 * 128) = 514 with uint8 x int8 operands, or
    from the constants' own values), added in int32. A symbolic K has no static runs: the product runs in
    int32 (the spec's accumulator, exact; wrapping past 2**31 as int32 sums do)."""
    _check_inputs(ins, node)
    a, b = ins[0], ins[1]
    nb = len(im.shape_of(b))
    za, zb = (ins[2] if len(ins) > 2 else None), (ins[3] if len(ins) > 3 else None)
    a_zp = _zero_point_of(za, "a", 1)
    b_zp = _zero_point_of(zb, "b", nb)
    k = _simp(im.shape_of(a)[-1])
    if not isinstance(k, int):   # (a symbolic K: no static runs; the product in int32, the spec's accumulator)
        return _matmul_operands(im, _integer_operand(im, a, a_zp, "int32"), _integer_operand(im, b, b_zp, "int32"))
    fa, fb = _integer_operand(im, a, a_zp), _integer_operand(im, b, b_zp)
    bk = 0 if nb == 1 else nb - 2

    def part(lo, hi):
        ca = fa[..., lo:hi] if isinstance(fa, np.ndarray) else op.strided_slice(fa, [len(im.shape_of(a)) - 1], [lo], [hi])
        cb = (fb[lo:hi] if nb == 1 else fb[..., lo:hi, :]) if isinstance(fb, np.ndarray) \
            else op.strided_slice(fb, [bk], [lo], [hi])
        return _matmul_operands(im, ca, cb)

    return _exact_integer_sum(im, k, _integer_bound(im, a, za) * _integer_bound(im, b, zb), part)


@_register("QLinearMatMul")
def _qlinear_matmul(im, node, ins, at):
    """``QLinearMatMul``: ``quantize(dequantize(a) @ dequantize(b), y_scale, y_zero_point)`` in float32 (a
    constant ``b`` folds to a float weight for the linear kernels); the integer product onnxruntime rounds
    once agrees within one step of the output's quantization where a value lands on a rounding tie."""
    _check_inputs(ins, node)
    a, a_s, a_zp, b, b_s, b_zp, y_s, y_zp = ins[:8]
    fa = _dequantize(im, a, a_s, a_zp, 1)
    fb = _dequantize(im, b, b_s, b_zp, -1)
    return _quantize(im, _matmul_operands(im, fa, fb), y_s, y_zp, 1, im.dtype_of(y_zp))


@_register("QLinearConv")
def _qlinear_conv(im, node, ins, at):
    """``QLinearConv``: the float ``Conv`` of the dequantized input and weight (per output channel scales
    allowed) plus the int32 bias at scale ``x_scale * w_scale``, quantized to ``y_zero_point``'s dtype."""
    _check_inputs(ins, node)
    x, x_s, x_zp, w, w_s, w_zp, y_s, y_zp = ins[:8]
    fx = _dequantize(im, x, x_s, x_zp, 1)
    fw = _dequantize(im, w, w_s, w_zp, 0)
    conv_ins = [fx, fw]
    if len(ins) > 8 and ins[8] is not None:
        xs = x_s if isinstance(x_s, np.ndarray) else None
        ws = w_s if isinstance(w_s, np.ndarray) else None
        if xs is None or ws is None:
            raise ONNXImportError("a bias needs constant x_scale and w_scale")
        conv_ins.append(_dequantize(im, ins[8], (xs.astype(np.float64) * ws.astype(np.float64)).astype(xs.dtype)
                                    .reshape(-1), None, 0))
    y = _CONVERTERS["Conv"](im, node, conv_ins, at)
    return _quantize(im, y, y_s, y_zp, 1, im.dtype_of(y_zp))


@_register("com.microsoft:QGemm")
def _qgemm(im, node, ins, at):
    """onnxruntime's ``QGemm`` (com.microsoft; what its static quantization writes for ``Gemm`` in the
    QOperator format): ``alpha * dequantize(A) @ dequantize(B) + C * a_scale * b_scale`` (``transA`` /
    ``transB``), quantized by ``y_scale`` / ``y_zero_point`` when given, else float."""
    _check_inputs(ins, node)
    opt = lambda i: ins[i] if len(ins) > i and ins[i] is not None else None  # noqa: E731
    a, a_s, a_zp, b, b_s, b_zp = ins[:6]
    c, y_s, y_zp = opt(6), opt(7), opt(8)
    fa = _dequantize(im, a, a_s, a_zp, 1)
    if int(at.get("transA", 0)):
        fa = op.permute_dims(im.tensor(fa), [1, 0]) if not isinstance(fa, np.ndarray) else fa.T
    trans_b = int(at.get("transB", 0))
    fb = _dequantize(im, b, b_s, b_zp, 0 if trans_b else 1)
    if trans_b:
        fb = fb.T if isinstance(fb, np.ndarray) else op.permute_dims(fb, [1, 0])
    alpha = float(at.get("alpha", 1.0))
    if alpha != 1.0:
        fb = (fb * np.float32(alpha)).astype(fb.dtype) if isinstance(fb, np.ndarray) else op.multiply(fb, alpha)
    y = _matmul_operands(im, fa, fb)
    if c is not None:
        if not (isinstance(a_s, np.ndarray) and isinstance(b_s, np.ndarray)):
            raise ONNXImportError("a bias needs constant a_scale and b_scale")
        bias_scale = (a_s.astype(np.float64) * b_s.astype(np.float64) * alpha).astype(np.float32).reshape(-1)
        y = op.add(im.tensor(y), im.tensor(_dequantize(im, c, bias_scale, None, -1)))
    return y if y_s is None else _quantize(im, y, y_s, y_zp, 1, im.dtype_of(y_zp) if y_zp is not None else "uint8")


@_register("ConvInteger")
def _conv_integer(im, node, ins, at):
    """``ConvInteger``: ``Conv(x - x_zero_point, w - w_zero_point)`` as int32, exactly: in float32 on the float
    convolution kernels, over runs of each group's input channels short enough that no float32 sum passes 2**24
    (:func:`_exact_integer_sum`: channels x kernel size x the largest product), added in int32. A symbolic
    channel count (or kernel) has no static runs: the convolution runs in int32, the spec's accumulator."""
    _check_inputs(ins, node)
    x, w = ins[0], ins[1]
    zx, zw = (ins[2] if len(ins) > 2 else None), (ins[3] if len(ins) > 3 else None)
    x_zp = _zero_point_of(zx, "a", 1)
    w_zp = zw
    if isinstance(w_zp, np.ndarray) and w_zp.size > 1:
        w_zp = w_zp.reshape([-1] + [1] * (len(im.shape_of(w)) - 1))
    wshape = [_simp(d) for d in im.shape_of(w)]
    if not all(isinstance(d, int) for d in wshape[1:]):   # (a symbolic kernel: the convolution in int32)
        return _CONVERTERS["Conv"](im, node, [_integer_operand(im, x, x_zp, "int32"),
                                              _integer_operand(im, w, w_zp, "int32")], at)
    fx, fw = _integer_operand(im, x, x_zp), _integer_operand(im, w, w_zp)
    cg, window = wshape[1], int(np.prod(wshape[2:]))
    groups = int(at.get("group", 1))
    per = _integer_bound(im, x, zx) * _integer_bound(im, w, zw.reshape(-1) if isinstance(zw, np.ndarray) else zw)
    run = _F32_EXACT_INTEGERS // max(1, per * window)   # input channels per run

    def part(lo, hi):
        if (lo, hi) == (0, cg):
            return _CONVERTERS["Conv"](im, node, [fx, fw], at)
        idx = np.concatenate([np.arange(g * cg + lo, g * cg + hi) for g in range(groups)]).astype(np.int64)
        cx = fx[:, idx] if isinstance(fx, np.ndarray) else op.take(im.tensor(fx), im.const(idx), axis=1)
        cw = fw[:, lo:hi] if isinstance(fw, np.ndarray) else op.strided_slice(im.tensor(fw), [1], [lo], [hi])
        return _CONVERTERS["Conv"](im, node, [cx, cw], at)

    if run >= cg:
        return op.astype(op.round(im.tensor(part(0, cg))), "int32")
    return _exact_integer_sum(im, cg, per * window, part)   # (a term: one input channel's window)


@_register("GatherND")
def _gather_nd(im, node, ins, at):
    """``GatherND``: each row of ``indices`` (``(..., q)``) picks a slice of ``data`` by its first
    ``batch_dims + q`` coordinates (the batch ones from the row's own position): one ``take`` from the data
    with those dims flattened, at the row's linear index (negative indices count from the end; one out of
    range is an error when run)."""
    _check_inputs(ins, node)
    x, idx = im.tensor(ins[0]), im.tensor(ins[1])
    b = int(at.get("batch_dims", 0))
    q = _simp(idx.shape[-1]) if len(idx.shape) else None
    if not isinstance(q, int) or b < 0 or b + q > len(x.shape) or b >= len(idx.shape):
        raise ONNXImportError(f"indices {list(idx.shape)} with batch_dims {b} do not fit data {list(x.shape)}")
    lead = list(idx.shape[:-1])
    idx = op.astype(idx, "int64") if idx.dtype != "int64" else idx
    linear = None
    for j in range(b + q):
        dim = wrap_nested(symbolic_scalar(x.shape[j], "int64"), "dim") if not isinstance(_simp(x.shape[j]), int) \
            else im.const(np.array(_simp(x.shape[j]), np.int64))
        if j < b:   # the row's own batch coordinate
            c = op.reshape(op.arange(0, x.shape[j], 1, dtype="int64"), [1] * j + [x.shape[j]] + [1] * (len(lead) - j - 1))
        else:
            c = op.squeeze(op.strided_slice(idx, [len(lead)], [j - b], [j - b + 1]), [len(lead)])
            c = op.where(op.less(c, im.const(np.zeros((), np.int64))), op.add(c, dim), c)
        linear = c if linear is None else op.add(op.multiply(linear, dim), c)
    size = x.shape[0]
    for d in x.shape[1:b + q]:
        size = size * d
    flat = op.reshape(x, [E.simplify(size) if isinstance(size, E.PrimExpr) else size] + list(x.shape[b + q:]))
    return op.take(flat, op.broadcast_to(linear, lead), axis=0)


#: The widest LRN window (channels summed per output) translated as shifted slices.
_LRN_MAX_SLICES = 1024


@_register("LRN")
def _lrn(im, node, ins, at):
    """``LRN`` (AlexNet's local response normalization, Krizhevsky et al. 2012): ``x / (bias + alpha / size *
    sum of x**2 over the channels c - (size - 1) // 2 .. c + size // 2) ** beta``, the sum as ``size``
    shifted slices of the zero-padded squares."""
    _check_inputs(ins, node)
    x = im.tensor(ins[0])
    size = int(at["size"])
    if size < 1 or len(x.shape) < 3:
        raise ONNXImportError(f"LRN needs size >= 1 and an (N, C, ...) input, got size {size}, {len(x.shape)}-d")
    alpha, beta, bias = float(at.get("alpha", 1e-4)), float(at.get("beta", 0.75)), float(at.get("bias", 1.0))
    lo, hi = (size - 1) // 2, size // 2
    channels = _simp(x.shape[1])
    if isinstance(channels, int):   # a window past every channel adds zeros only: at most 2C - 1 slices
        lo, hi = min(lo, channels - 1), min(hi, channels - 1)
    elif size > _LRN_MAX_SLICES:
        raise ONNXImportError(f"LRN of size {size} over a symbolic channel count (at most {_LRN_MAX_SLICES})")
    if lo + hi + 1 > _LRN_MAX_SLICES:
        raise ONNXImportError(f"LRN window of {lo + hi + 1} channels (at most {_LRN_MAX_SLICES})")
    sq = op.multiply(x, x)
    padded = op.pad(sq, [0, 0, lo, hi] + [0, 0] * (len(x.shape) - 2))
    total = None
    for k in range(lo + hi + 1):
        part = op.strided_slice(padded, [1], [k], [k + x.shape[1]])
        total = part if total is None else op.add(total, part)
    denom = op.power(op.add(op.multiply(total, alpha / size), bias), beta)
    return op.divide(x, denom)


@_register("MeanVarianceNormalization")
def _mvn(im, node, ins, at):
    """``MeanVarianceNormalization`` (the spec's function): ``(x - mean) / (sqrt(E[x**2] - mean**2) + 1e-9)``
    over ``axes`` (default 0, 2, 3)."""
    _check_inputs(ins, node)
    x = im.tensor(ins[0])
    nd = len(x.shape)
    axes = [int(a) % nd for a in at.get("axes", [0, 2, 3])]
    mean = op.mean(x, axis=axes, keepdims=True)
    var = op.subtract(op.mean(op.multiply(x, x), axis=axes, keepdims=True), op.multiply(mean, mean))
    return op.divide(op.subtract(x, mean), op.add(op.sqrt(var), 1e-9))


@_register("Shrink", "ThresholdedRelu")
def _shrink(im, node, ins, at):
    """``Shrink``: ``x + bias`` below ``-lambd``, ``x - bias`` above ``lambd``, else 0; ``ThresholdedRelu``:
    ``x`` above ``alpha``, else 0."""
    _check_inputs(ins, node)
    x = im.tensor(ins[0])
    zero = im.const(np.zeros((), x.dtype))
    if node.op_type == "ThresholdedRelu":
        return op.where(op.greater(x, float(at.get("alpha", 1.0))), x, zero)
    lambd, bias = float(at.get("lambd", 0.5)), float(at.get("bias", 0.0))
    return op.where(op.less(x, -lambd), op.add(x, bias), op.where(op.greater(x, lambd), op.subtract(x, bias), zero))


@_register("EyeLike")
def _eye_like(im, node, ins, at):
    """``EyeLike``: ones on the ``k``-th diagonal of a 2-d shape like the input's, in ``dtype`` (default the
    input's)."""
    _check_inputs(ins, node)
    x = ins[0]
    shape = im.shape_of(x)
    if len(shape) != 2:
        raise ONNXImportError(f"EyeLike needs a 2-d input, got {len(shape)}-d")
    dtype = _np_dtype_name(int(at["dtype"])) if "dtype" in at else im.dtype_of(x)
    k = int(at.get("k", 0))
    rows, cols = (_simp(d) for d in shape)
    if isinstance(rows, int) and isinstance(cols, int) and _fold_ok([rows, cols]):
        return np.eye(rows, cols, k, dtype=dtype)
    r = op.unsqueeze(op.arange(0, shape[0], 1, dtype="int64"), 1)
    c = op.unsqueeze(op.arange(0, shape[1], 1, dtype="int64"), 0)
    return op.astype(op.equal(op.subtract(c, r), im.const(np.array(k, np.int64))), dtype)


@_register("GlobalLpPool")
def _global_lp_pool(im, node, ins, at):
    """``GlobalLpPool``: ``(sum over the spatial dims of |x| ** p) ** (1 / p)``, kept as dims of 1."""
    _check_inputs(ins, node)
    x = im.tensor(ins[0])
    p = int(at.get("p", 2))
    axes = list(range(2, len(x.shape)))
    if p == 2:
        return op.sqrt(op.sum(op.multiply(x, x), axis=axes, keepdims=True))
    return op.power(op.sum(op.power(op.abs(x), float(p)), axis=axes, keepdims=True), 1.0 / p)


@_register("ReverseSequence")
def _reverse_sequence(im, node, ins, at):
    """``ReverseSequence``: along ``time_axis`` the first ``sequence_lens[b]`` elements of each batch entry
    reversed, the rest kept: one ``gather_elements`` at ``L - 1 - t`` where ``t < L``."""
    _check_inputs(ins, node)
    x, lens = im.tensor(ins[0]), im.tensor(ins[1])
    ta, ba = int(at.get("time_axis", 0)), int(at.get("batch_axis", 1))
    if {ta, ba} != {0, 1}:
        raise ONNXImportError(f"time_axis / batch_axis must be 0 and 1, got {ta}, {ba}")
    nd = len(x.shape)
    t = op.reshape(op.arange(0, x.shape[ta], 1, dtype="int64"), [x.shape[ta] if d == ta else 1 for d in range(nd)])
    n = op.reshape(op.astype(lens, "int64"), [x.shape[ba] if d == ba else 1 for d in range(nd)])
    src = op.where(op.less(t, n), op.subtract(op.subtract(n, im.const(np.array(1, np.int64))), t), t)
    return op.gather_elements(x, op.broadcast_to(src, list(x.shape)), axis=ta)


_RNN_DEFAULT_ACTIVATIONS = {"LSTM": ["Sigmoid", "Tanh", "Tanh"], "GRU": ["Sigmoid", "Tanh"], "RNN": ["Tanh"]}


@_register("LSTM", "GRU", "RNN")
def _recurrent(im, node, ins, at):
    """``LSTM`` / ``GRU`` / ``RNN`` (forward, reverse or bidirectional; ``layout`` 0 or 1): per direction the
    input projection as one matmul and the recurrence as one kernel (:func:`builder.nn.op.recurrent_layer`;
    ONNX's gate order, GRU's ``linear_before_reset``; RNN with Relu activations). Raises ONNXImportError for
    other activations,
    ``clip``, ``input_forget``, peepholes, and ``sequence_lens`` other than the full length."""
    _check_inputs(ins, node)
    kind = node.op_type
    opt = lambda i: ins[i] if len(ins) > i and ins[i] is not None else None  # noqa: E731
    acts = [a.decode() if isinstance(a, bytes) else a for a in at.get("activations", [])]
    direction = at.get("direction", "forward")
    direction = direction.decode() if isinstance(direction, bytes) else direction
    dirs = {"forward": [False], "reverse": [True], "bidirectional": [False, True]}.get(direction)
    if dirs is None:
        raise ONNXImportError(f"unknown direction {direction!r}")
    relu = kind == "RNN" and acts and all(a.lower() == "relu" for a in acts)
    if acts and not relu and [a.lower() for a in acts] != [a.lower() for a in _RNN_DEFAULT_ACTIVATIONS[kind] * len(dirs)]:
        raise ONNXImportError(f"activations {acts} are not supported (the defaults, or Relu for RNN)")
    if "clip" in at or int(at.get("input_forget", 0)) or opt(7) is not None:
        raise ONNXImportError("clip, input_forget and peepholes are not supported")
    x = im.tensor(ins[0])
    layout = int(at.get("layout", 0))
    if layout:
        x = op.permute_dims(x, [1, 0, 2])                     # (S, B, I)
    lens = opt(4)
    if lens is not None:
        full = _simp(x.shape[0])
        if not (isinstance(lens, np.ndarray) and isinstance(full, int) and (lens == full).all()):
            raise ONNXImportError("sequence_lens shorter than the sequence are not supported")
    cell = "rnn_relu" if relu else kind.lower()
    gates = {"lstm": 4, "gru": 3, "rnn": 1, "rnn_relu": 1}[cell]
    H = int(at["hidden_size"])
    w, r, b = ins[1], ins[2], opt(3)
    h0, c0 = opt(5), opt(6)
    batch = x.shape[1]
    ys, hs, cs = [], [], []
    for d, reverse in enumerate(dirs):
        pick = lambda v: v[d] if isinstance(v, np.ndarray) else op.squeeze(  # noqa: E731
            op.strided_slice(im.tensor(v), [0], [d], [d + 1]), [0])
        wd, rd = pick(w), pick(r)
        wb = rb = None
        if b is not None:
            bd = pick(b)
            wb = bd[:gates * H] if isinstance(bd, np.ndarray) else op.strided_slice(bd, [0], [0], [gates * H])
            rb = bd[gates * H:] if isinstance(bd, np.ndarray) else op.strided_slice(bd, [0], [gates * H], [2 * gates * H])
        zero_state = op.zeros([batch, H], dtype=x.dtype)
        h0d = pick(h0) if h0 is not None else zero_state
        c0d = (pick(c0) if c0 is not None else zero_state) if cell == "lstm" else None
        out = op.recurrent_layer(x, im.tensor(wd), im.tensor(rd), None if wb is None else im.tensor(wb),
                                 None if rb is None else im.tensor(rb), im.tensor(h0d),
                                 None if c0d is None else im.tensor(c0d), cell=cell, reverse=reverse,
                                 linear_before_reset=bool(int(at.get("linear_before_reset", 0))))
        ys.append(op.unsqueeze(out[0], 1))
        hs.append(op.unsqueeze(out[1], 0))
        if cell == "lstm":
            cs.append(op.unsqueeze(out[2], 0))
    cat = lambda parts, axis: parts[0] if len(parts) == 1 else op.concat(parts, axis)  # noqa: E731
    y, y_h = cat(ys, 1), cat(hs, 0)                        # (S, D, B, H), (D, B, H)
    if layout:
        y, y_h = op.permute_dims(y, [2, 0, 1, 3]), op.permute_dims(y_h, [1, 0, 2])
    outs = [y, y_h]
    if cell == "lstm":
        y_c = cat(cs, 0)
        outs.append(op.permute_dims(y_c, [1, 0, 2]) if layout else y_c)
    return tuple(outs)


_SCATTER_REDUCTION = {"none": "update", "add": "add", "mul": "mul", "max": "max", "min": "min"}


def _scatter_reduction(at) -> str:
    r = at.get("reduction", "none")
    r = r.decode() if isinstance(r, bytes) else r
    if r not in _SCATTER_REDUCTION:
        raise ONNXImportError(f"reduction {r!r} is not one of {sorted(_SCATTER_REDUCTION)}")
    return _SCATTER_REDUCTION[r]


@_register("ScatterElements", "Scatter")
def _scatter_elements(im, node, ins, at):
    """``ScatterElements`` (``Scatter``: its opset 9-10 name) with its ``reduction`` (opset 16 / 18):
    :func:`builder.nn.op.scatter_elements`; duplicates apply in order, as onnxruntime does."""
    _check_inputs(ins, node)
    x, idx, upd = (im.tensor(v) for v in ins[:3])
    return op.scatter_elements(x, idx, upd, axis=int(at.get("axis", 0)),
                               reduction=_scatter_reduction(at))


@_register("ScatterND")
def _scatter_nd(im, node, ins, at):
    """``ScatterND`` with its ``reduction`` (opset 16 / 18): :func:`builder.nn.op.scatter_nd` (what exporters
    write for an assignment into a slice)."""
    _check_inputs(ins, node)
    x, idx, upd = (im.tensor(v) for v in ins[:3])
    return op.scatter_nd(x, idx, upd, reduction=_scatter_reduction(at))


@_register("Einsum")
def _einsum(im, node, ins, at):
    _check_inputs(ins, node)
    eq = at.get("equation", "")
    eq = eq.decode() if isinstance(eq, bytes) else eq
    try:
        return op.einsum(eq, [im.tensor(v) for v in ins])
    except ValueError as e:
        raise ONNXImportError(str(e)) from e


@_register("Tile")
def _tile(im, node, ins, at):
    _check_inputs(ins, node)
    x = im.tensor(ins[0])
    reps = im.shape_list(ins[1], "repeats")
    if len(reps) != len(x.shape) or any(isinstance(r, int) and r < 0 for r in reps):
        raise ONNXImportError(f"Tile needs one non-negative repeat per dim ({len(x.shape)}), got {reps}")
    return op.tile(x, reps)


@_register("Sum", "Mean")
def _sum_mean(im, node, ins, at):
    """Variadic ``Sum`` / ``Mean`` with numpy broadcasting."""
    _check_inputs(ins, node)
    out = im.tensor(ins[0])
    for v in ins[1:]:
        out = op.add(out, im.tensor(v))
    return op.divide(out, float(len(ins))) if node.op_type == "Mean" and len(ins) > 1 else out


@_register("CumSum")
def _cumsum(im, node, ins, at):
    """``CumSum`` along a constant axis (``exclusive``: the sum before each element); of a constant, folded
    (a ``Range`` bound may come from it: torch's ``repeat_interleave`` with constant repeats)."""
    _check_inputs(ins, node)
    (axis,) = im.ints(ins[1], "axis")
    nd = len(im.shape_of(ins[0]))
    if not -nd <= axis < nd:
        raise ONNXImportError(f"axis {axis} is out of range for a {nd}-d input")
    if int(at.get("reverse", 0)):
        raise ONNXImportError("CumSum with reverse=1 is not supported")
    exclusive = bool(int(at.get("exclusive", 0)))
    if isinstance(ins[0], np.ndarray) and ins[0].dtype.kind in "iuf":
        x = np.moveaxis(ins[0], axis % nd, -1)
        c = np.cumsum(x, axis=-1, dtype=x.dtype)
        if exclusive:    # the sums before each element, as the scan adds them (not c - x)
            c = np.concatenate([np.zeros_like(x[..., :1]), c[..., :-1]], axis=-1)[..., :x.shape[-1]]
        return np.ascontiguousarray(np.moveaxis(c, -1, axis % nd))
    return op.cumsum(im.tensor(ins[0]), axis=axis % nd, exclusive=exclusive or None)


@_register("NonZero")
def _nonzero(im, node, ins, at):
    """``NonZero``: the (rank, n) int64 indices of the nonzero elements in row-major order, ``n`` known when
    the model runs (:func:`builder.nn.op.nonzero`, a symbolic dim bound then); a 0-d input is taken as
    one element (as onnxruntime does); of a constant, folded."""
    _check_inputs(ins, node)
    (x,) = ins
    if isinstance(x, np.ndarray) and _fold_ok(x.shape):
        return np.stack(np.nonzero(np.atleast_1d(x))).astype(np.int64)
    x = im.tensor(x)
    return op.nonzero(op.reshape(x, [1]) if x.ndim == 0 else x)


@_register("Compress")
def _compress(im, node, ins, at):
    """``Compress``: the slices along ``axis`` (the flattened input without one) where the 1-D condition is
    true (``numpy.compress``: a shorter condition leaves out the rest; a true element past the dim is an
    error when the model runs): a gather at the condition's nonzero indices, their count bound then."""
    _check_inputs(ins, node)
    data, cond = im.tensor(ins[0]), im.tensor(ins[1])
    if cond.ndim != 1:
        raise ONNXImportError(f"the condition must be 1-D, got {cond.ndim}-d")
    if "axis" in at:
        nd = data.ndim
        axis = int(at["axis"])
        if not -nd <= axis < nd:
            raise ONNXImportError(f"axis {axis} is out of range for a {nd}-d input")
        axis %= nd
    else:
        data, axis = op.reshape(data, [-1]), 0
    idx = op.nonzero(cond)
    return op.take(data, op.reshape(idx, [idx.shape[1]]), axis=axis)


#: The most ``If`` nodes nested in one another that the importer follows (each is one Python frame deeper).
MAX_BRANCH_DEPTH = 32


@_register("Unique")
def _unique(im, node, ins, at):
    """``Unique`` without an axis: the distinct values of the flattened input (ascending with ``sorted`` 1,
    the default, else in the order they first occur), the first index of each, the inverse indices and the
    counts (:func:`builder.nn.op.unique`: their count is bound when the model runs)."""
    _check_inputs(ins, node)
    if "axis" in at:
        raise ONNXImportError("Unique along an axis is not supported (only the flattened form)")
    return list(op.unique(im.tensor(ins[0]), sorted=bool(int(at.get("sorted", 1)))))


#: The most nodes imported from ``Loop`` bodies (iterations times the body's nodes) and ``If`` branches in the
#: whole model, all nesting levels together (:meth:`_Importer.subgraph`): trip counts from the model never make
#: an unbounded graph, nested Loops included.
MAX_UNROLLED_NODES = 4096


@_register("Loop")
def _loop(im, node, ins, at):
    """``Loop`` with a trip count known at import time (a constant, or shape arithmetic that folds) and a
    condition that stays known (absent, or a constant each iteration computes): unrolled, the body imported
    once per iteration with the iteration number and the loop-carried values bound to its inputs; the scan
    outputs are stacked along a new first axis. At most :data:`MAX_UNROLLED_NODES` body nodes in the whole
    model (nested Loops and If branches share the budget); a trip
    count or condition computed when the model runs is refused (the graph has no control flow)."""
    _check_inputs(ins, node)
    body = at.get("body")
    if body is None or not body.HasField("g"):
        raise ONNXImportError("the body graph is missing")
    g = body.g
    trip, cond, carried = (ins + [None, None])[0], (ins + [None, None])[1], list(ins[2:])
    if trip is None:
        raise ONNXImportError("a Loop without a trip count runs until a condition computed when the model runs")
    if not isinstance(trip, np.ndarray) or trip.size != 1:
        raise ONNXImportError("its trip count is computed when the model runs; a Loop is imported only when its "
                              "trip count is known at import time, by unrolling it")
    n = max(int(trip.ravel()[0]), 0)
    if cond is not None and not isinstance(cond, np.ndarray):
        raise ONNXImportError("its condition is computed when the model runs")
    if len(g.input) != 2 + len(carried) or len(g.output) < 1 + len(carried):
        raise ONNXImportError(f"the body takes {len(g.input)} inputs and gives {len(g.output)} outputs for "
                              f"{len(carried)} loop-carried values")
    if n * max(len(g.node), 1) > MAX_UNROLLED_NODES:
        raise ONNXImportError(f"unrolling {n} iterations of {len(g.node)} nodes exceeds the limit of "
                              f"{MAX_UNROLLED_NODES} nodes (MAX_UNROLLED_NODES)")
    going = True if cond is None else bool(cond.ravel()[0])
    nscan = len(g.output) - 1 - len(carried)
    scans: list[list] = [[] for _ in range(nscan)]
    for i in range(n):
        if not going:
            break
        im.env[g.input[0].name] = np.array(i, np.int64)
        im.env[g.input[1].name] = np.array(going)
        for vi_, v in zip(g.input[2:], carried):
            im.env[vi_.name] = v
        outs = im.subgraph(g, len(g.output))
        c = outs[0]
        if not isinstance(c, np.ndarray):
            raise ONNXImportError("the body's condition is computed when the model runs")
        going = bool(c.ravel()[0])
        carried = outs[1:1 + len(carried)]
        for k, v in enumerate(outs[1 + len(carried):]):
            scans[k].append(v)
    results = list(carried)
    for k, vals in enumerate(scans):
        if not vals:
            raise ONNXImportError("a scan output of a Loop that runs no iteration has no shape to give")
        if all(isinstance(v, np.ndarray) for v in vals):
            results.append(np.stack(vals))
        else:
            results.append(op.concat([op.unsqueeze(im.tensor(v), 0) for v in vals], dim=0))
    return results


@_register("If")
def _if(im, node, ins, at):
    """``If`` whose condition is known at import time (a constant, or shape arithmetic that folds to one):
    the branch it selects is imported in place of the node, its nodes reading the outer graph's values as
    ONNX scopes them; a condition computed when the model runs is refused (both branches would run as
    control flow, which the graph does not have)."""
    _check_inputs(ins, node)
    cond = ins[0]
    if not isinstance(cond, np.ndarray):
        raise ONNXImportError("its condition is computed when the model runs; an If is imported only when its "
                              "condition is known at import time (a constant, or shape arithmetic that folds), "
                              "by taking the branch it selects")
    if cond.size != 1:
        raise ONNXImportError(f"the condition must hold one value, got shape {cond.shape}")
    key = "then_branch" if bool(cond.ravel()[0]) else "else_branch"
    branch = at.get(key)
    if branch is None or not branch.HasField("g"):
        raise ONNXImportError(f"the {key} graph is missing")
    return im.subgraph(branch.g, len(node.output))


@_register("InstanceNormalization")
def _instance_norm(im, node, ins, at):
    """``InstanceNormalization``: each (sample, channel) normalized over its spatial dims (group norm with
    one channel per group), then ``scale[c]`` and ``B[c]``."""
    _check_inputs(ins, node)
    x = im.tensor(ins[0])
    if len(x.shape) < 3:
        raise ONNXImportError(f"InstanceNormalization needs an (N, C, ...) input, got a {len(x.shape)}-d one")
    c = _simp(x.shape[1])
    if not isinstance(c, int):
        raise ONNXImportError("InstanceNormalization needs a static channel count")
    scale, bias = (im.tensor(v.astype(x.dtype) if isinstance(v, np.ndarray) else v) for v in ins[1:3])
    return op.group_norm(x, c, scale, bias, eps=float(at.get("epsilon", 1e-5)))


@_register("Trilu")
def _trilu(im, node, ins, at):
    _check_inputs(ins, node)
    x = im.tensor(ins[0])
    k = im.ints(ins[1], "k")[0] if len(ins) > 1 and ins[1] is not None else 0
    return (op.triu if int(at.get("upper", 1)) else op.tril)(x, k)


@_register("DepthToSpace", "SpaceToDepth")
def _depth_space(im, node, ins, at):
    """``DepthToSpace`` (modes DCR, the default, and CRD = ``torch.nn.PixelShuffle``) and ``SpaceToDepth``
    (DCR order) of NCHW data: reshapes around one transpose."""
    _check_inputs(ins, node)
    x = im.tensor(ins[0])
    if len(x.shape) != 4:
        raise ONNXImportError(f"{node.op_type} needs a 4-d (NCHW) input, got a {len(x.shape)}-d one")
    b = int(at.get("blocksize", 0))
    if b < 1:
        raise ONNXImportError(f"blocksize must be >= 1, got {b}")
    n, c, h, w = x.shape
    if node.op_type == "SpaceToDepth":
        t = op.reshape(x, [n, c, E.simplify(E.convert(h) // b), b, E.simplify(E.convert(w) // b), b])
        t = op.permute_dims(t, [0, 3, 5, 1, 2, 4])
        return op.reshape(t, [n, c * b * b if isinstance(c, int) else E.simplify(c * (b * b)), t.shape[4], t.shape[5]])
    mode = at.get("mode", "DCR")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    cb = E.simplify(E.convert(c) // (b * b))
    if mode == "DCR":
        t = op.permute_dims(op.reshape(x, [n, b, b, cb, h, w]), [0, 3, 4, 1, 5, 2])
    elif mode == "CRD":
        t = op.permute_dims(op.reshape(x, [n, cb, b, b, h, w]), [0, 1, 4, 2, 5, 3])
    else:
        raise ONNXImportError(f"unknown DepthToSpace mode {mode!r}")
    return op.reshape(t, [n, cb, E.simplify(E.convert(h) * b), E.simplify(E.convert(w) * b)])


@_register("Max", "Min")
def _variadic(im, node, ins, at):
    _check_inputs(ins, node)
    if all(isinstance(v, np.ndarray) for v in ins) and _fold_ok(np.broadcast_shapes(*[v.shape for v in ins])):
        out = ins[0]
        for v in ins[1:]:
            out = _NP_BINARY[node.op_type](out, v)
        return out
    out = im.tensor(ins[0])
    for v in ins[1:]:
        out = _BINARY[node.op_type](out, im.tensor(v))
    return out


_CMP = {"Equal": (op.equal, lambda s: s == 0), "Less": (op.less, lambda s: s < 0),
        "LessOrEqual": (op.less_equal, lambda s: s <= 0), "Greater": (op.greater, lambda s: s > 0),
        "GreaterOrEqual": (op.greater_equal, lambda s: s >= 0)}


@_register(*_CMP)
def _compare(im, node, ins, at):
    _check_inputs(ins, node)
    a, b = ins
    fn, decide = _CMP[node.op_type]
    if not isinstance(a, Tensor) and not isinstance(b, Tensor) and (isinstance(a, _Sym) or isinstance(b, _Sym)):
        oa, ob = np.broadcast_arrays(_objects(a), _objects(b))
        return np.array([decide(_sign(_simp(x), _simp(y), node.op_type)) for x, y in zip(oa.ravel(), ob.ravel())],
                        dtype=bool).reshape(oa.shape)
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and _fold_ok(np.broadcast_shapes(a.shape, b.shape)):
        return {"Equal": np.equal, "Less": np.less, "LessOrEqual": np.less_equal, "Greater": np.greater,
                "GreaterOrEqual": np.greater_equal}[node.op_type](a, b)
    return fn(im.tensor(a), im.tensor(b))


@_register("And", "Or", "Xor", "Not")
def _logical(im, node, ins, at):
    _check_inputs(ins, node)
    if all(isinstance(v, np.ndarray) for v in ins) and _fold_ok(*[v.shape for v in ins]):
        f = {"And": np.logical_and, "Or": np.logical_or, "Xor": np.logical_xor, "Not": np.logical_not}[node.op_type]
        return f(*ins)
    t = [im.tensor(v) for v in ins]
    true, false = im.const(np.array(True)), im.const(np.array(False))
    if node.op_type == "Not":
        return op.where(t[0], false, true)
    if node.op_type == "And":
        return op.where(t[0], t[1], false)
    if node.op_type == "Or":
        return op.where(t[0], true, t[1])
    return op.not_equal(t[0], t[1])


@_register("IsInf")
def _isinf(im, node, ins, at):
    """``IsInf`` (``detect_positive`` / ``detect_negative``, both on by default); integers are never inf."""
    _check_inputs(ins, node)
    x = im.tensor(ins[0])
    pos, neg = int(at.get("detect_positive", 1)), int(at.get("detect_negative", 1))
    if not E.is_float_dtype(x.dtype) or not (pos or neg):
        return op.not_equal(x, x) if not E.is_float_dtype(x.dtype) else op.less(x, float("-inf"))   # all False
    big = op.greater(op.abs(x), float(np.finfo(np.float32).max) if x.dtype != "float64" else float(np.finfo(np.float64).max))
    if pos and neg:
        return big
    return op.where(big, op.greater(x, 0.0) if pos else op.less(x, 0.0), big)


@_register("IsNaN")
def _isnan(im, node, ins, at):
    _check_inputs(ins, node)
    x = ins[0]
    if isinstance(x, np.ndarray):
        return np.isnan(x)
    x = im.tensor(x)
    if x.dtype not in ("float16", "float32", "float64"):
        return im.const(np.zeros([int(d) for d in x.shape], dtype=bool)) if all(
            isinstance(d, int) for d in x.shape) else op.not_equal(x, x)
    return op.not_equal(x, x)   # NaN is the only value unequal to itself (no nnan fast-math in codegen)


@_register("Where")
def _where(im, node, ins, at):
    _check_inputs(ins, node)
    c, x, y = ins
    if isinstance(c, np.ndarray) and not isinstance(x, Tensor) and not isinstance(y, Tensor) \
            and _fold_ok(np.broadcast_shapes(c.shape, im.shape_of(x), im.shape_of(y))):
        if isinstance(x, _Sym) or isinstance(y, _Sym):
            vals = np.where(c, _objects(x), _objects(y))
            return _shape_value(np.asarray(vals, dtype=object), im.dtype_of(x))
        return np.where(c, x, y).astype(x.dtype)
    return op.where(im.tensor(c), im.tensor(x), im.tensor(y))


@_register("Cast", "CastLike")
def _cast(im, node, ins, at):
    """``Cast`` to ``to``; ``CastLike`` to the dtype of its second input (opset 15+, what torch's exporters
    write for a scalar's promotion)."""
    _check_inputs(ins, node)
    x = ins[0]
    dtype = im.dtype_of(ins[1]) if node.op_type == "CastLike" else _np_dtype_name(int(at["to"]))
    if isinstance(x, np.ndarray):
        if x.dtype.kind == "f" and dtype != "bool" and np.dtype(dtype).kind in "iu":
            return np.trunc(x).astype(dtype)
        return x.astype(dtype)
    if isinstance(x, _Sym) and np.dtype(dtype).kind in "iu":
        return _Sym(x.vals, dtype)
    t = im.tensor(x)
    out = t if t.dtype == dtype else op.astype(t, dtype)
    if isinstance(x, _Sym) and np.dtype(dtype).kind == "f" and x.vals.size == 1:
        im.float_of_sym[id(out)] = (out, x)
    return out


@_register("Identity", "Dropout")
def _identity(im, node, ins, at):
    _check_inputs(ins, node)
    x = ins[0]
    if node.op_type == "Dropout":
        if len(ins) > 2 and ins[2] is not None:
            mode = ins[2]
            if not isinstance(mode, np.ndarray) or bool(mode.ravel()[0]):
                raise ONNXImportError("training_mode must be a constant false (inference only)")
        if len(node.output) > 1 and node.output[1]:
            shape = im.shape_of(x)
            mask = (np.ones(shape, dtype=bool) if _fold_ok(shape)
                    else op.full([d for d in shape], True, dtype="bool"))
            return [x, mask]
    return x


# -- linear algebra --------------------------------------------------------------------------------

def _linear(im: _Importer, x: Tensor, w_nk: np.ndarray) -> Tensor:
    """``x @ w_nk.T`` as nn.Linear writes it: ``matmul(x, permute_dims(W))`` with ``W (N, K)`` constant."""
    w = im.const(np.ascontiguousarray(w_nk))
    return op.matmul(x, op.permute_dims(w))


@_register("MatMul")
def _matmul(im, node, ins, at):
    _check_inputs(ins, node)
    return _matmul_operands(im, *ins)


def _matmul_operands(im, a, b):
    """``a @ b`` (numpy's matmul) of two importer values: a constant 2-d float ``b`` is a linear layer's
    weight (the linear kernels), two small constants fold."""
    if isinstance(b, np.ndarray) and b.ndim == 2 and b.dtype.kind == "f" and not isinstance(a, np.ndarray) \
            and len(im.shape_of(a)) >= 2:
        ta = im.tensor(a)
        if ta.dtype == str(b.dtype):
            return _linear(im, ta, b.T)
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.ndim >= 1 and b.ndim >= 1 and \
            _fold_ok(a.shape, b.shape) and a.size * b.size <= MAX_FOLD_ELEMENTS:
        return np.matmul(a, b).astype(a.dtype)
    return op.matmul(im.tensor(a), im.tensor(b))


@_register("Gemm")
def _gemm(im, node, ins, at):
    _check_inputs(ins, node)
    a, b = ins[0], ins[1]
    c = ins[2] if len(ins) > 2 else None
    alpha, beta = float(at.get("alpha", 1.0)), float(at.get("beta", 1.0))
    ta = im.tensor(a)
    if int(at.get("transA", 0)):
        ta = op.permute_dims(ta, [1, 0])
    if isinstance(b, np.ndarray) and b.ndim == 2 and b.dtype.kind == "f" and str(b.dtype) == ta.dtype:
        w = b if int(at.get("transB", 0)) else b.T
        if alpha != 1.0:
            w = (w * np.asarray(alpha, dtype=b.dtype)).astype(b.dtype)
        out = _linear(im, ta, w)
    else:
        tb = im.tensor(b)
        if int(at.get("transB", 0)):
            tb = op.permute_dims(tb, [1, 0])
        out = op.matmul(ta, tb)
        if alpha != 1.0:
            out = op.multiply(out, im.const(np.asarray(alpha, dtype=out.dtype)))
    if c is not None and beta != 0.0:
        if isinstance(c, np.ndarray):
            if beta != 1.0:
                c = (c * np.asarray(beta, dtype=c.dtype)).astype(c.dtype)
            out = op.add(out, im.const(c))
        else:
            tc = im.tensor(c)
            if beta != 1.0:
                tc = op.multiply(tc, im.const(np.asarray(beta, dtype=tc.dtype)))
            out = op.add(out, tc)
    return out


# -- normalization and activations ---------------------------------------------------------------------

@_register("Softmax")
def _softmax(im, node, ins, at):
    _check_inputs(ins, node)
    return op.softmax(im.tensor(ins[0]), axis=int(at.get("axis", -1)))


@_register("LogSoftmax")
def _log_softmax(im, node, ins, at):
    """``x - max - log(sum(exp(x - max)))`` along ``axis`` (opset 13; the max keeps it finite where the
    softmax itself would underflow to 0, as onnxruntime's and PyTorch's kernels do)."""
    _check_inputs(ins, node)
    x = im.tensor(ins[0])
    return op.log_softmax(x, axis=_axis_attr(at, len(x.shape)))


@_register("Pad")
def _pad(im, node, ins, at):
    """``Pad`` (opset 13 on: ``pads`` input, all begins then all ends, optional ``constant_value`` and, from
    opset 18, ``axes``) in ``constant``, ``reflect``, ``edge`` or (opset 19) ``wrap`` mode; negative pads
    crop first (:func:`builder.nn.op.pad`, as onnxruntime does). Raises ONNXImportError for another mode or
    a computed pad value."""
    _check_inputs(ins, node)
    x = im.tensor(ins[0])
    nd = len(x.shape)
    mode = at.get("mode", "constant")
    if mode not in ("constant", "reflect", "edge", "wrap"):
        raise ONNXImportError(f"mode {mode!r} is not supported (constant, reflect, edge, wrap)")
    pads = im.shape_list(ins[1], "pads")       # constants, or shape arithmetic that folds to ints
    if not all(isinstance(p, int) for p in pads):
        raise ONNXImportError(f"pads {pads} must be known at import time (they depend on symbolic dims)")
    axes = im.ints(ins[3], "axes") if len(ins) > 3 and ins[3] is not None else list(range(nd))
    if any(not -nd <= a < nd for a in axes) or len({a % nd for a in axes}) != len(axes):
        raise ONNXImportError(f"axes {axes} are out of range or repeated for a {nd}-d input")
    if len(pads) != 2 * len(axes):
        raise ONNXImportError(f"{len(pads)} pads for {len(axes)} axes (need 2 per axis)")
    width = [0] * (2 * nd)
    for i, a in enumerate(axes):
        width[2 * (a % nd)], width[2 * (a % nd) + 1] = pads[i], pads[i + len(axes)]
    value = ins[2] if len(ins) > 2 and ins[2] is not None else np.zeros(())
    if not isinstance(value, np.ndarray) or value.size > 1:
        raise ONNXImportError("constant_value must be a constant scalar")
    return op.pad(x, width, mode=mode, value=float(value.ravel()[0]) if value.size else 0.0)


#: The largest finite value of each float dtype (``numeric_limits<T>::max()``; ``lowest()`` is its negative).
_FLOAT_MAX = {"float16": 65504.0, "bfloat16": 3.3895313892515355e38, "float32": float(np.finfo(np.float32).max),
              "float64": float(np.finfo(np.float64).max)}


@_register("Clip")
def _clip(im, node, ins, at):
    """``min(max(x, lo), hi)``, the bounds optional scalar inputs (opset 11 on); with ``lo > hi`` every value
    is ``hi``, as ONNX specifies. A bound left out is the dtype's ``numeric_limits<T>::lowest()`` / ``max()``
    (Clip-11 / 12 / 13's defaults), so a float ``+-inf`` becomes ``+-max`` (``FLT_MAX`` for float32, as
    onnxruntime gives) and NaN stays NaN; integers are within their own limits already."""
    _check_inputs(ins, node)
    x = ins[0]
    lo = ins[1] if len(ins) > 1 else None
    hi = ins[2] if len(ins) > 2 else None
    t = im.tensor(x)
    limit = _FLOAT_MAX.get(t.dtype)
    for bound, fn, default in ((lo, op.maximum, None if limit is None else -limit), (hi, op.minimum, limit)):
        if bound is None:
            if default is not None:
                t = fn(t, default)
            continue
        if isinstance(bound, np.ndarray):
            if bound.size != 1:
                raise ONNXImportError(f"a Clip bound must be a scalar, got shape {bound.shape}")
            bound = bound.reshape(()).astype(t.dtype)
        b = im.tensor(bound)
        if b.dtype != t.dtype or len(b.shape) not in (0, 1):
            raise ONNXImportError(f"a Clip bound must be a scalar of the input's dtype {t.dtype}")
        t = fn(t, b)
    return t


@_register("GroupNormalization")
def _group_norm_onnx(im, node, ins, at):
    """``GroupNormalization`` (opset 21: ``scale`` / ``bias`` per channel; the per-group form of opset 18 is
    deprecated and refused by the checker) as :func:`builder.nn.op.group_norm`."""
    _check_inputs(ins, node)
    x = im.tensor(ins[0])
    if len(x.shape) < 3 or not isinstance(_simp(x.shape[1]), int):
        raise ONNXImportError("GroupNormalization needs an (N, C, ...) input with a static channel count")
    c, g = _simp(x.shape[1]), int(at.get("num_groups", 0))
    if g < 1 or c % g:
        raise ONNXImportError(f"num_groups={g} does not divide the {c} channels")
    scale, bias = (im.tensor(v.astype(x.dtype) if isinstance(v, np.ndarray) else v) for v in ins[1:3])
    return op.group_norm(x, g, scale, bias, eps=float(at.get("epsilon", 1e-5)))


@_register("LayerNormalization")
def _layer_norm(im, node, ins, at):
    _check_inputs(ins, node)
    if any(n for n in node.output[1:]):
        raise ONNXImportError("the Mean / InvStdDev outputs are not supported (inference only)")
    x = im.tensor(ins[0])
    scale = ins[1]
    bias = ins[2] if len(ins) > 2 else None
    _, norm = _normalized_dims(x, at)
    return op.layer_norm(x, norm, _norm_param(im, scale, norm, x.dtype, 1.0), _norm_param(im, bias, norm, x.dtype, None),
                         eps=float(at.get("epsilon", 1e-5)))


def _normalized_dims(x, at) -> tuple[int, list[int]]:
    """LayerNormalization's / RMSNormalization's ``axis`` (non-negative) and the static dims it normalizes
    over (``axis`` to the end); float32 statistics only (``stash_type`` 1)."""
    if int(at.get("stash_type", 1)) != 1:
        raise ONNXImportError("stash_type other than 1 (float32 statistics) is not supported")
    axis = int(at.get("axis", -1))
    nd = len(x.shape)
    if not -nd <= axis < nd:
        raise ONNXImportError(f"axis {axis} is out of range for a {nd}-d input")
    axis %= nd
    norm = [_simp(d) for d in x.shape[axis:]]
    if not all(isinstance(d, int) for d in norm):
        raise ONNXImportError(f"the normalized dims {norm} must be static")
    return axis, norm


def _norm_param(im, v, norm: list, dtype: str, default):
    """A normalization's scale / bias broadcast to the normalized dims ``norm`` in ``dtype`` (``default``
    filled when absent; None stays None)."""
    if v is None:
        return None if default is None else im.const(np.full(norm, default, dtype=dtype))
    if isinstance(v, np.ndarray):
        return im.const(np.ascontiguousarray(np.broadcast_to(v, norm)).astype(dtype))
    t = im.tensor(v)
    if [_simp(d) for d in t.shape] != norm:
        t = op.broadcast_to(t, norm)
    return t


@_register("RMSNormalization")
def _rms_norm(im, node, ins, at):
    """``RMSNormalization`` (opset 23): ``x / sqrt(mean(x**2 over axis..end) + epsilon) * scale``, float32
    statistics (``stash_type`` 1)."""
    _check_inputs(ins, node)
    x = im.tensor(ins[0])
    axis, norm = _normalized_dims(x, at)
    return op.rms_norm(x, _norm_param(im, ins[1], norm, x.dtype, 1.0), list(range(axis, len(x.shape))),
                       float(at.get("epsilon", 1e-5)))


@_register("Swish")
def _swish(im, node, ins, at):
    """``Swish`` (opset 24): ``x * sigmoid(alpha * x)``."""
    _check_inputs(ins, node)
    x = im.tensor(ins[0])
    alpha = float(at.get("alpha", 1.0))
    return op.silu(x) if alpha == 1.0 else op.multiply(x, op.sigmoid(op.multiply(x, alpha)))


@_register("RotaryEmbedding")
def _rotary_embedding(im, node, ins, at):
    """``RotaryEmbedding`` (opset 23; Su et al. 2021, RoFormer): the first ``rotary_embedding_dim`` (all when 0)
    features of each head rotated by the cos / sin caches, gathered by ``position_ids`` when given (else
    caches of shape (batch, seq, dim / 2)); halves (``interleaved=0``, HF Llama's ``rotate_half``) or
    even / odd pairs (``interleaved=1``, GPT-J's). Input (B, H, S, D), or (B, S, H * D) with ``num_heads``."""
    _check_inputs(ins, node)
    x = im.tensor(ins[0])
    cos, sin = im.tensor(ins[1]), im.tensor(ins[2])
    pos = ins[3] if len(ins) > 3 and ins[3] is not None else None
    nd = len(x.shape)
    if nd == 4:
        xs = op.permute_dims(x, [0, 2, 1, 3])                       # (B, S, H, D)
    elif nd == 3:
        heads = int(at.get("num_heads", 0))
        hidden = _simp(x.shape[2])
        if heads <= 0 or not isinstance(hidden, int) or hidden % heads:
            raise ONNXImportError(f"a 3-d input needs num_heads dividing its hidden size {hidden}, got {heads}")
        xs = op.reshape(x, [x.shape[0], x.shape[1], heads, hidden // heads])
    else:
        raise ONNXImportError(f"the input must be 3-d or 4-d, got {nd}-d")
    d = _simp(xs.shape[3])
    rd = int(at.get("rotary_embedding_dim", 0)) or d
    if not isinstance(d, int) or rd % 2 or rd > d:
        raise ONNXImportError(f"rotary_embedding_dim {rd} must be even and at most the head size {d}")
    if pos is not None:
        cos, sin = op.take(cos, im.tensor(pos), axis=0), op.take(sin, im.tensor(pos), axis=0)   # (B, S, rd / 2)
    cos, sin = (op.unsqueeze(op.astype(c, x.dtype) if c.dtype != x.dtype else c, 2) for c in (cos, sin))
    rot = op.strided_slice(xs, [3], [0], [rd]) if rd < d else xs
    if int(at.get("interleaved", 0)):
        x1, x2 = (op.strided_slice(rot, [3], [k], [rd], [2]) for k in (0, 1))
    else:
        x1, x2 = op.strided_slice(rot, [3], [0], [rd // 2]), op.strided_slice(rot, [3], [rd // 2], [rd])
    real = op.subtract(op.multiply(cos, x1), op.multiply(sin, x2))
    imag = op.add(op.multiply(sin, x1), op.multiply(cos, x2))
    if int(at.get("interleaved", 0)):
        rot = op.reshape(op.concat([op.unsqueeze(real, 4), op.unsqueeze(imag, 4)], 4),
                         [xs.shape[0], xs.shape[1], xs.shape[2], rd])
    else:
        rot = op.concat([real, imag], 3)
    out = op.concat([rot, op.strided_slice(xs, [3], [rd], [d])], 3) if rd < d else rot
    return op.permute_dims(out, [0, 2, 1, 3]) if nd == 4 else op.reshape(out, list(x.shape))


@_register("Attention")
def _attention_op(im, node, ins, at):
    """``Attention`` (opsets 23 / 24): scaled dot-product attention (:func:`builder.nn.op.scaled_dot_product_attention`)
    of (B, H, S, D) inputs, or (B, S, H * D) with ``q_num_heads`` / ``kv_num_heads``; GQA; a bool or additive
    ``attn_mask``; ``is_causal`` aligned bottom-right to the past (``j <= i + past``); ``past_key`` /
    ``past_value`` concatenated into ``present_key`` / ``present_value``. A fully masked row gives zeros, as
    the spec's errata says. Raises ONNXImportError for ``softcap``, the ``qk_matmul_output`` output,
    ``nonpad_kv_seqlen``, and a causal mask between different query and key lengths."""
    _check_inputs(ins, node)
    opt = lambda i: ins[i] if len(ins) > i and ins[i] is not None else None  # noqa: E731
    q, k, v = (im.tensor(t) for t in ins[:3])
    mask, past_k, past_v = opt(3), opt(4), opt(5)
    if opt(6) is not None:
        raise ONNXImportError("nonpad_kv_seqlen is not supported")
    if float(at.get("softcap", 0.0)):
        raise ONNXImportError("softcap is not supported")
    if len(node.output) > 3 and node.output[3]:
        raise ONNXImportError("the qk_matmul_output output is not supported")
    if (past_k is None) != (past_v is None):
        raise ONNXImportError("past_key and past_value go together")
    three = len(q.shape) == 3
    if three:
        hq, hk = int(at.get("q_num_heads", 0)), int(at.get("kv_num_heads", 0))
        if hq <= 0 or hk <= 0:
            raise ONNXImportError("3-d inputs need q_num_heads and kv_num_heads")

        def heads(t, h):   # (B, S, H * D) -> (B, H, S, D)
            size = _simp(t.shape[2])
            if not isinstance(size, int) or size % h:
                raise ONNXImportError(f"a hidden size {size} is not a multiple of {h} heads")
            return op.permute_dims(op.reshape(t, [t.shape[0], t.shape[1], h, size // h]), [0, 2, 1, 3])

        q, k, v = heads(q, hq), heads(k, hk), heads(v, hk)
    elif len(q.shape) != 4 or len(k.shape) != 4 or len(v.shape) != 4:
        raise ONNXImportError("Q, K and V must all be 3-d or all 4-d")
    causal = None
    if int(at.get("is_causal", 0)):
        if past_k is None:
            causal = "TopLeft"
        elif E.prove_equal(E.convert(q.shape[2]), E.convert(k.shape[2])):
            causal = "BottomRight"   # j <= i + past: the new keys end where the queries do
        else:
            raise ONNXImportError(f"a causal mask with a past needs as many new keys ({k.shape[2]}) as queries "
                                  f"({q.shape[2]})")
    if past_k is not None:
        k = op.concat([im.tensor(past_k), k], 2)
        v = op.concat([im.tensor(past_v), v], 2)
    scale = at.get("scale")
    bias = None if mask is None else im.tensor(mask)
    y = op.scaled_dot_product_attention(op.permute_dims(q, [0, 2, 1, 3]), op.permute_dims(k, [0, 2, 1, 3]),
                                        op.permute_dims(v, [0, 2, 1, 3]), attn_mask=bias,
                                        scale=None if scale is None else float(scale), causal_mask=causal)  # BSHD
    if three:
        y = op.reshape(y, [y.shape[0], y.shape[1], y.shape[2] * y.shape[3]])
    else:
        y = op.permute_dims(y, [0, 2, 1, 3])
    outs = [y]
    if len(node.output) > 1 and any(node.output[1:3]):
        outs += [k, v]
    return tuple(outs) if len(outs) > 1 else y


def _float_dtype(dtype: str) -> bool:
    return dtype.startswith("float") or dtype == "bfloat16"


def _np_extreme(fn, lowest: bool):
    """numpy's max / min with the ONNX identity for an empty set: -inf / +inf for floats, the dtype's
    minimum / maximum for integers (ReduceMax-18 / ReduceMin-18)."""
    def f(x, axis, keepdims):
        if x.dtype.kind == "f":
            init = -np.inf if lowest else np.inf
        elif x.dtype.kind == "b":
            init = not lowest
        else:
            info = np.iinfo(x.dtype)
            init = info.min if lowest else info.max
        return fn(x, axis=axis, keepdims=keepdims, initial=init)
    return f


def _extreme(largest: bool):
    """ReduceMax (``largest``) / ReduceMin of a tensor along ``axis``. The compiled reduction starts from the
    dtype's lowest (highest) finite value, which for floats is -FLT_MAX (+FLT_MAX) where the spec (ReduceMax-18:
    "Reduction over an empty set of values yields minus infinity (if supported by the datatype) or the minimum
    value of the data type otherwise", ReduceMin alike) and onnxruntime give -inf (+inf): for an empty set and
    for a set holding nothing but -inf (+inf). Those results are put right by counting the elements other than
    -inf (+inf, NaN counted: NaN propagates) and taking the infinity where there are none. Integer dtypes need
    nothing (their minimum / maximum is the identity).

    NaN: a set holding a NaN gives NaN (numpy's ``max`` / ``min``, PyTorch's ``amax`` / ``amin``). The spec
    does not say how a NaN compares; onnxruntime's CPU kernel skips a NaN that is not first (``x > max``)."""
    def f(x, axis, keepdims):
        r = (op.max if largest else op.min)(x, axis=axis, keepdims=keepdims)
        if not _float_dtype(x.dtype):
            return r
        inf = Tensor(_expr=rx.const(np.array(-np.inf if largest else np.inf, dtype=x.dtype)))
        others = op.sum(op.astype(op.not_equal(x, inf), "int64"), axis=axis, keepdims=keepdims)
        none = op.equal(others, Tensor(_expr=rx.const(np.array(0, np.int64))))
        return op.where(none, inf, r)
    return f


def _logsumexp(x, axis, keepdims):
    """``m + log(sum(exp(x - m)))`` with ``m`` the maximum where it is finite, else 0 (SciPy's
    ``logsumexp``): all -inf (or an empty set) gives ``log(0) = -inf`` as the spec (ReduceLogSumExp-18,
    "Reduction over an empty set of values yields minus infinity") and onnxruntime, +inf gives +inf (the
    plain ``m - m`` shift gives NaN for both)."""
    m = op.max(x, axis=axis, keepdims=True)
    inf = Tensor(_expr=rx.const(np.array(np.inf, dtype=x.dtype)))
    m = op.where(op.less(op.abs(m), inf), m, Tensor(_expr=rx.const(np.array(0, dtype=x.dtype))))
    y = op.add(op.log(op.sum(op.exp(op.subtract(x, m)), axis=axis, keepdims=True)), m)
    return y if keepdims else op.squeeze(y, list(axis))


def _np_logsumexp(x, axis, keepdims):
    m = np.max(x, axis=axis, keepdims=True, initial=-np.inf)
    m = np.where(np.isfinite(m), m, 0)
    with np.errstate(divide="ignore"):
        y = np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)) + m
    return y if keepdims else np.squeeze(y, axis)


#: ONNX reduction -> (compiled, numpy fold) as ``f(x, axis, keepdims)``.
_REDUCE = {"ReduceMean": (op.mean, np.mean), "ReduceSum": (op.sum, np.sum),
           "ReduceMax": (_extreme(True), _np_extreme(np.max, True)),
           "ReduceMin": (_extreme(False), _np_extreme(np.min, False)), "ReduceProd": (op.prod, np.prod),
           "ReduceSumSquare": (lambda x, axis, keepdims: op.sum(op.multiply(x, x), axis=axis, keepdims=keepdims),
                               lambda x, axis, keepdims: np.sum(x * x, axis=axis, keepdims=keepdims)),
           "ReduceL1": (lambda x, axis, keepdims: op.sum(op.abs(x), axis=axis, keepdims=keepdims),
                        lambda x, axis, keepdims: np.sum(np.abs(x), axis=axis, keepdims=keepdims)),
           "ReduceL2": (lambda x, axis, keepdims: op.sqrt(op.sum(op.multiply(x, x), axis=axis, keepdims=keepdims)),
                        lambda x, axis, keepdims: np.sqrt(np.sum(x * x, axis=axis, keepdims=keepdims))),
           "ReduceLogSumExp": (_logsumexp, _np_logsumexp),
           "ReduceLogSum": (lambda x, axis, keepdims: op.log(op.sum(x, axis=axis, keepdims=keepdims)),
                            lambda x, axis, keepdims: np.log(np.sum(x, axis=axis, keepdims=keepdims)))}

#: What the composite reductions still compute with ``noop_with_empty_axes`` and no axes (the reduction over
#: an empty set of axes is the identity, "composite-reduction operators will still perform the non-reduction
#: steps": ReduceLogSum is log(x), ReduceSumSquare x * x; onnx's ReferenceEvaluator and onnxruntime alike).
#: ReduceLogSumExp is log(exp(x)) = x exactly (onnxruntime's result, also at +-inf).
_REDUCE_ELEMENTWISE = {"ReduceSumSquare": (lambda x: op.multiply(x, x), lambda x: x * x),
                       "ReduceL1": (op.abs, np.abs),
                       "ReduceL2": (lambda x: op.sqrt(op.multiply(x, x)), lambda x: np.sqrt(x * x)),
                       "ReduceLogSum": (op.log, np.log)}


@_register(*_REDUCE)
def _reduce(im, node, ins, at):
    """The ONNX reductions (opsets 13 to 18: ``axes`` an attribute or an input): ``x`` any shape and dtype the
    op takes -> the reduced shape (``keepdims`` 1 keeps reduced dims as 1). Over an empty set (a reduced dim of
    0): ReduceSum / L1 / L2 / SumSquare 0, ReduceProd 1, ReduceMax -inf (the dtype's minimum for integers),
    ReduceMin +inf, ReduceLogSum and ReduceLogSumExp -inf, as the spec says; ReduceMean, "undefined" in the spec,
    is 0 / 0 = NaN (numpy's and onnx's ReferenceEvaluator's result; onnxruntime returns 0). No axes with
    ``noop_with_empty_axes`` is the identity for ReduceSum / Mean / Max / Min / Prod / LogSumExp and the
    element function for the others (:data:`_REDUCE_ELEMENTWISE`). Raises ONNXImportError for axes out of
    range or not known at import time."""
    _check_inputs(ins, node)
    x = ins[0]
    if "axes" in at:
        axes = [int(a) for a in at["axes"]]
    elif len(ins) > 1 and ins[1] is not None:
        axes = im.ints(ins[1], "axes")
    else:
        axes = []
    keep = bool(int(at.get("keepdims", 1)))
    nd = len(im.shape_of(x))
    if not axes:
        if int(at.get("noop_with_empty_axes", 0)):
            if node.op_type not in _REDUCE_ELEMENTWISE:
                return x
            fn, npf = _REDUCE_ELEMENTWISE[node.op_type]
            if isinstance(x, np.ndarray):
                with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                    return np.asarray(npf(x)).astype(x.dtype)
            return fn(im.tensor(x))
        axes = list(range(nd))
    if any(not -nd <= a < nd for a in axes):
        raise ONNXImportError(f"axes {axes} out of range for a {nd}-d input")
    axes = sorted({a % nd for a in axes})
    fn, npf = _REDUCE[node.op_type]
    if isinstance(x, np.ndarray) and _fold_ok(x.shape):
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            return np.asarray(npf(x, axis=tuple(axes), keepdims=keep)).astype(x.dtype)
    return fn(im.tensor(x), axis=axes, keepdims=keep)


def _spatial_pads(x, kernel: list[int], strides: list[int], dilations: list[int], at: dict, what: str) -> list[int]:
    """ONNX ``pads`` (``[begin..., end...]``, TVM's order too) of a convolution / pooling node over the
    spatial dims of ``x`` (N, C, *spatial), from ``pads`` or ``auto_pad`` (``SAME_UPPER`` puts the odd
    pad at the end, ``SAME_LOWER`` at the beginning; both need static lengths)."""
    nsp = len(kernel)
    auto = at.get("auto_pad", "NOTSET")
    if isinstance(auto, bytes):
        auto = auto.decode()
    if auto == "NOTSET":
        pads = [int(p) for p in at.get("pads", [0] * (2 * nsp))]
    elif auto == "VALID":
        pads = [0] * (2 * nsp)
    elif auto in ("SAME_UPPER", "SAME_LOWER"):
        lo, hi = [], []
        for i in range(nsp):
            length = _simp(x.shape[2 + i])
            if not isinstance(length, int):
                raise ONNXImportError(f"{what}: auto_pad={auto} needs static input lengths")
            out = -(-length // strides[i])
            # the spec's formula, not clamped at 0: a kernel shorter than the stride gives negative pads,
            # which crop the input (onnxruntime's windows); :func:`_crop_negative_pads` applies them
            total = (out - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - length
            half = total if auto == "SAME_UPPER" else total + 1
            first = half // 2 if half >= 0 else -(-half // 2)      # C's division, as onnxruntime's
            lo.append(first)
            hi.append(total - first)
        pads = lo + hi
    else:
        raise ONNXImportError(f"{what}: unknown auto_pad {auto!r}")
    if len(pads) != 2 * nsp or (auto == "NOTSET" and min(pads, default=0) < 0):
        raise ONNXImportError(f"{what}: pads {pads} must be {2 * nsp} non-negative values")
    return pads


def _crop_negative_pads(x: Tensor, pads: list[int]) -> tuple[Tensor, list[int]]:
    """``x`` with its spatial dims cropped where ``pads`` (ONNX order) are negative, and the pads with
    those set to 0: a negative pad (``auto_pad`` SAME with a kernel shorter than the stride) starts or
    ends the windows inside the input."""
    nsp = len(pads) // 2
    if min(pads, default=0) >= 0:
        return x, pads
    axes, begin, end = [], [], []
    for i in range(nsp):
        lo, hi = pads[i], pads[nsp + i]
        if lo < 0 or hi < 0:
            d = x.shape[2 + i]
            axes.append(2 + i)
            begin.append(max(0, -lo))
            end.append(E.simplify(E.convert(d) + min(0, hi)))
    return op.strided_slice(x, axes, begin, end, [1] * len(axes)), [max(0, p) for p in pads]


def _window(at: dict, nsp: int, what: str, kernel: list[int] | None = None):
    """``(kernel, strides, dilations)`` of a convolution / pooling node with ``nsp`` spatial dims."""
    if kernel is None:
        if "kernel_shape" not in at:
            raise ONNXImportError(f"{what}: kernel_shape is required")
        kernel = [int(v) for v in at["kernel_shape"]]
    elif "kernel_shape" in at and [int(v) for v in at["kernel_shape"]] != kernel:
        raise ONNXImportError(f"{what}: kernel_shape {list(at['kernel_shape'])} does not match the weight's {kernel}")
    strides = [int(v) for v in at.get("strides") or [1] * nsp]
    dilations = [int(v) for v in at.get("dilations") or [1] * nsp]
    if len(kernel) != nsp or len(strides) != nsp or len(dilations) != nsp:
        raise ONNXImportError(f"{what}: kernel_shape / strides / dilations need {nsp} values, got {kernel}, "
                              f"{strides}, {dilations}")
    return kernel, strides, dilations


@_register("Conv")
def _conv(im, node, ins, at):
    _check_inputs(ins, node)
    x, w = im.tensor(ins[0]), ins[1]
    b = ins[2] if len(ins) > 2 else None
    tw = im.tensor(w)
    if len(x.shape) not in (3, 4) or len(tw.shape) != len(x.shape):
        raise ONNXImportError(f"only 1-D and 2-D convolutions (3-d or 4-d input and weight) are supported, got a "
                              f"{len(x.shape)}-d input and a {len(tw.shape)}-d weight")
    nsp = len(x.shape) - 2
    ks = [_simp(d) for d in tw.shape[2:]]
    if not all(isinstance(k, int) for k in ks):
        raise ONNXImportError(f"the kernel size {ks} must be static")
    ks, strides, dilations = _window(at, nsp, "Conv", ks)
    x, pads = _crop_negative_pads(x, _spatial_pads(x, ks, strides, dilations, at, "Conv"))
    tb = None if b is None else im.tensor(b)
    groups = int(at.get("group", 1))
    if nsp == 1:
        return op.conv1d(x, tw, tb, stride=strides[0], padding=pads, dilation=dilations[0], groups=groups)
    return op.conv2d(x, tw, tb, stride=strides, padding=pads, dilation=dilations, groups=groups)


@_register("ConvTranspose")
def _conv_transpose(im, node, ins, at):
    """1-D and 2-D ``ConvTranspose`` (weight ``(C, O / group, *k)``), explicit pads and ``output_padding``."""
    _check_inputs(ins, node)
    x, w = im.tensor(ins[0]), im.tensor(ins[1])
    b = im.tensor(ins[2]) if len(ins) > 2 and ins[2] is not None else None
    if len(x.shape) not in (3, 4) or len(w.shape) != len(x.shape):
        raise ONNXImportError(f"only 1-D and 2-D transposed convolutions are supported, got a {len(x.shape)}-d input")
    nsp = len(x.shape) - 2
    auto = at.get("auto_pad", "NOTSET")
    if (auto.decode() if isinstance(auto, bytes) else auto) != "NOTSET" or "output_shape" in at:
        raise ONNXImportError("ConvTranspose with auto_pad or output_shape is not supported (give pads)")
    ks = [_simp(d) for d in w.shape[2:]]
    ks, strides, dilations = _window(at, nsp, "ConvTranspose", ks)
    pads = [int(p) for p in at.get("pads", [0] * (2 * nsp))]
    out_pad = [int(p) for p in at.get("output_padding", [0] * nsp)]
    if len(pads) != 2 * nsp or len(out_pad) != nsp:
        raise ONNXImportError(f"pads {pads} / output_padding {out_pad} do not fit {nsp} spatial dims")
    if nsp == 1:
        return op.conv1d_transpose(x, w, b, stride=strides[0], padding=pads, output_padding=out_pad[0],
                                   dilation=dilations[0], groups=int(at.get("group", 1)))
    return op.conv2d_transpose(x, w, b, stride=strides, padding=pads, output_padding=out_pad, dilation=dilations,
                               groups=int(at.get("group", 1)))


@_register("MaxPool", "AveragePool")
def _pool(im, node, ins, at):
    """1-D and 2-D ``MaxPool`` / ``AveragePool`` of ``(N, C, *spatial)`` data: ``kernel_shape``, ``strides``,
    ``dilations``, ``pads`` or ``auto_pad``, ``ceil_mode``, ``count_include_pad``; the Indices output and
    ``storage_order=1`` are refused (ONNXImportError).

    NaN: a MaxPool window holding a NaN gives NaN. The spec (MaxPool-22: "computing the max on all values of a
    subset of the input tensor") does not say how a NaN compares; we take numpy's ``max``, which is how onnx's
    ReferenceEvaluator computes ReduceMax and GlobalMaxPool and how onnxruntime computes GlobalMaxPool, so that
    a window covering the whole input equals GlobalMaxPool. onnxruntime's MaxPool keeps or drops a NaN by where
    it stands in the window (``x > max`` comparisons: a NaN first is kept, a NaN later skipped), and the
    ReferenceEvaluator's MaxPool drops every NaN (it marks padding with NaN); neither is a rule to follow."""
    _check_inputs(ins, node)
    if any(n for n in node.output[1:]):
        raise ONNXImportError("the Indices output of MaxPool is not supported")
    x = im.tensor(ins[0])
    nsp = len(x.shape) - 2
    if nsp not in (1, 2):
        raise ONNXImportError(f"only 1-D and 2-D pooling (3-d or 4-d input) is supported, got a {len(x.shape)}-d input")
    if int(at.get("storage_order", 0)) != 0:
        raise ONNXImportError("storage_order=1 (column major) is not supported")
    ks, strides, dilations = _window(at, nsp, node.op_type)
    x, pads = _crop_negative_pads(x, _spatial_pads(x, ks, strides, dilations, at, node.op_type))
    ceil = bool(int(at.get("ceil_mode", 0)))
    kind = "max" if node.op_type == "MaxPool" else "avg"
    name = f"nn.{kind}_pool{nsp}d"
    layout = "NCW" if nsp == 1 else "NCHW"
    return wrap_nested(op_call(name, [x._expr], pool_size=ks, strides=strides, padding=pads, dilation=dilations,
                               ceil_mode=ceil, count_include_pad=bool(int(at.get("count_include_pad", 0))),
                               layout=layout, out_layout=layout), kind + "_pool")


_RESIZE_ROUNDING = {"round_prefer_floor": "round_prefer_floor", "round_prefer_ceil": "round_prefer_ceil",
                    "floor": "floor", "ceil": "ceil"}


@_register("Resize", "Upsample")
def _resize(im, node, ins, at):
    """``Resize`` (opsets 11+; ``Upsample`` is its older scales-only form) of NCHW data, or NCW data as NCHW with
    H = 1 (which every mode and coordinate transformation maps onto itself), in nearest, linear or cubic mode
    (``cubic_coeff_a``, ``exclude_outside``; :func:`builder.nn.op.interpolate`): output ``sizes``, or ``scales``
    of 1 on N and C that give whole sizes (coordinates then follow the in / out ratio, which equals ``1 /
    scale``). ``nearest`` reads the input at indices computed exactly in integers
    (:func:`_nearest_source_index`), so that exact ``.5`` ties round as ``nearest_mode`` says.
    ``keep_aspect_ratio_policy`` other than ``stretch`` is refused (ONNXImportError)."""
    _check_inputs(ins, node)
    x = im.tensor(ins[0])
    nd = len(x.shape)
    if nd not in (3, 4):
        raise ONNXImportError(f"only 3-d (NCW) and 4-d (NCHW) inputs are supported, got a {nd}-d one")
    if nd == 3:
        x = op.unsqueeze(x, 2)
    text = lambda k, d: at.get(k, d).decode() if isinstance(at.get(k, d), bytes) else at.get(k, d)
    mode, coord = text("mode", "nearest"), text("coordinate_transformation_mode", "half_pixel")
    if node.op_type == "Upsample":
        coord = "asymmetric"
    nearest = text("nearest_mode", "round_prefer_floor")
    if mode not in ("nearest", "linear", "cubic"):
        raise ONNXImportError(f"mode {mode!r} is not supported (nearest, linear, cubic)")
    if int(at.get("antialias", 0)):
        raise ONNXImportError("antialias is not supported")
    if int(at.get("exclude_outside", 0)) and mode != "cubic":
        raise ONNXImportError("exclude_outside is supported in cubic mode only")
    if coord not in ("asymmetric", "half_pixel", "pytorch_half_pixel", "align_corners"):
        raise ONNXImportError(f"coordinate_transformation_mode {coord!r} is not supported")
    if mode == "nearest" and nearest not in _RESIZE_ROUNDING:
        raise ONNXImportError(f"nearest_mode {nearest!r} is not supported")
    if "axes" in at:
        raise ONNXImportError("the axes attribute is not supported")
    if text("keep_aspect_ratio_policy", "stretch") != "stretch":
        raise ONNXImportError(f"keep_aspect_ratio_policy {text('keep_aspect_ratio_policy', '')!r} is not supported "
                              "(stretch)")
    opt = lambda i: ins[i] if len(ins) > i and ins[i] is not None else None
    scales, sizes = (opt(1), None) if node.op_type == "Upsample" else (opt(2), opt(3))
    if sizes is not None and not (isinstance(sizes, np.ndarray) and sizes.size == 0):
        out = im.shape_list(sizes, "sizes")
        if len(out) != nd:
            raise ONNXImportError(f"sizes {out} must have {nd} values")
        out = out[:2] + [1] + out[2:] if nd == 3 else out
        for d, o in zip(x.shape[:2], out[:2]):
            if isinstance(_simp(d), int) and isinstance(o, int) and _simp(d) != o:
                raise ONNXImportError(f"sizes {out} may not change N or C of {[_simp(v) for v in x.shape]}")
        hw = out[2:]
    elif scales is not None:
        sc = [float(v) for v in np.asarray(im.static(scales, "scales")).ravel()]
        if len(sc) != nd or sc[0] != 1.0 or sc[1] != 1.0:
            raise ONNXImportError(f"scales {sc} must have {nd} values with 1 for N and C")
        sc = sc[:2] + [1.0] + sc[2:] if nd == 3 else sc
        try:
            hw = [exact_scaled_size(d, f) for d, f in zip(x.shape[2:], sc[2:])]
        except ValueError as e:
            raise ONNXImportError(str(e)) from e
    else:
        raise ONNXImportError("Resize needs scales or sizes")
    if mode == "nearest":
        y = x
        for k, n_out in enumerate(hw):
            n_in = _simp(x.shape[2 + k])
            n_out = _simp(n_out)
            if _simp(n_in - n_out) == 0:
                continue    # every coordinate transformation maps i to i
            y = op.take(y, _nearest_source_index(im, n_in, n_out, coord, nearest), axis=2 + k)
    elif mode == "cubic":
        y = op.interpolate(x, size=hw, mode="bicubic", coordinate_transformation_mode=coord,
                           cubic_alpha=float(at.get("cubic_coeff_a", -0.75)),
                           cubic_exclude=bool(int(at.get("exclude_outside", 0))))
    else:
        y = op.interpolate(x, size=hw, mode="bilinear", coordinate_transformation_mode=coord)
    return op.squeeze(y, [2]) if nd == 3 else y


def _nearest_source_index(im, n_in, n_out, coord: str, rounding: str):
    """The int64 indices ``(n_out,)`` of the input elements that ONNX ``Resize`` in ``nearest`` mode reads
    along one axis of ``n_in`` elements resized to ``n_out`` (ints, or symbolic dims), computed exactly.

    The spec (Resize-19) maps output index ``i`` to the input coordinate ``x`` (scale ``n_out / n_in``;
    given ``scales`` equal that ratio here, :func:`builder.ir.op.exact_scaled_size`): ``asymmetric``
    ``i * n_in / n_out``; ``half_pixel`` ``(i + 1/2) * n_in / n_out - 1/2``; ``pytorch_half_pixel`` the
    same, 0 when ``n_out == 1``; ``align_corners`` ``i * (n_in - 1) / (n_out - 1)`` (0 when ``n_out ==
    1``). ``x`` is a fraction ``num / den`` of integers, rounded by ``nearest_mode`` in integer
    arithmetic: ``floor``, ``ceil``, ``round_prefer_floor`` (halves down: ``ceil(x - 1/2)``),
    ``round_prefer_ceil`` (halves up: ``floor(x + 1/2)``); then clamped to ``[0, n_in - 1]``. Exact
    ``.5`` ties stay ties, where float32 coordinates (``(i + 0.5) * (n_in / n_out) - 0.5``) land just
    above or below them (4 -> 6 half_pixel: ``0.5000001``, rounded up by round_prefer_floor); this
    agrees with onnxruntime wherever its float computation is exact."""
    if isinstance(n_in, int) and isinstance(n_out, int):
        i = np.arange(n_out, dtype=np.int64)
        a, b = n_in, n_out
        fdiv, where = np.floor_divide, (lambda c, u, v: u if c else v)
        big = lambda v: max(v, 1)
        clamp = lambda v: np.clip(v, 0, max(n_in - 1, 0))
        gt1 = b > 1
    else:
        def scalar(e):
            return (im.const(np.array(e, np.int64)) if isinstance(e, int)
                    else wrap_nested(symbolic_scalar(e, "int64"), "dim"))

        i = op.arange(0, n_out, 1, dtype="int64")
        a, b = scalar(n_in), scalar(n_out)
        one, zero = im.const(np.array(1, np.int64)), im.const(np.array(0, np.int64))
        fdiv, where = op.floor_divide, op.where
        big = lambda v: op.maximum(v, one)
        clamp = lambda v: op.minimum(op.maximum(v, zero), op.maximum(a - one, zero))
        gt1 = op.greater(b, one)
    if coord == "asymmetric":
        num, den = i * a, b
    elif coord == "align_corners":
        num, den = i * (a - 1), big(b - 1)
    else:
        num, den = (i * 2 + 1) * a - b, b * 2
        if coord == "pytorch_half_pixel":
            num = where(gt1, num, i * 0)
    if rounding == "floor":
        idx = fdiv(num, den)
    elif rounding == "ceil":
        idx = -fdiv(-num, den)
    elif rounding == "round_prefer_ceil":
        idx = fdiv(num * 2 + den, den * 2)
    elif rounding == "round_prefer_floor":
        idx = -fdiv(den - num * 2, den * 2)
    else:
        raise ONNXImportError(f"nearest_mode {rounding!r} is not supported")
    idx = clamp(idx)
    return im.const(np.ascontiguousarray(idx, dtype=np.int64)) if isinstance(idx, np.ndarray) else idx


@_register("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(im, node, ins, at):
    _check_inputs(ins, node)
    x = im.tensor(ins[0])
    if len(x.shape) < 3:
        raise ONNXImportError(f"{node.op_type} needs an (N, C, *spatial) input, got a {len(x.shape)}-d one")
    fn = op.mean if node.op_type == "GlobalAveragePool" else op.max
    return fn(x, axis=list(range(2, len(x.shape))), keepdims=True)


@_register("BatchNormalization")
def _batch_norm(im, node, ins, at):
    _check_inputs(ins, node)
    if int(at.get("training_mode", 0)) or any(n for n in node.output[1:]):
        raise ONNXImportError("BatchNormalization in training mode (running statistics outputs) is not supported")
    if len(ins) != 5 or any(v is None for v in ins):
        raise ONNXImportError("BatchNormalization needs its five inputs X, scale, B, input_mean, input_var")
    x = im.tensor(ins[0])
    if len(x.shape) < 2:
        raise ONNXImportError(f"BatchNormalization needs an (N, C, ...) input, got a {len(x.shape)}-d one")
    stats = []
    for v in ins[1:]:
        if isinstance(v, np.ndarray):
            v = v.astype(x.dtype)
        stats.append(im.tensor(v))
    scale, bias, mean, var = stats
    return op.batch_norm(x, mean, var, scale, bias, axis=1, eps=float(at.get("epsilon", 1e-5)))


# -- onnxruntime's fused transformer ops (com.microsoft; what onnxruntime.transformers' optimizer writes) -----

def _add_bias(im, x: Tensor, b) -> Tensor:
    return x if b is None else op.add(x, im.tensor(b.astype(x.dtype) if isinstance(b, np.ndarray) else b))


@_register("com.microsoft:Gelu", "com.microsoft:BiasGelu", "com.microsoft:FastGelu", "com.microsoft:QuickGelu")
def _ms_gelu(im, node, ins, at):
    """onnxruntime's GELUs: ``Gelu`` (exact), ``BiasGelu`` (exact, of ``A + B``), ``FastGelu`` (the tanh
    approximation, of ``X + bias``), ``QuickGelu`` (``x * sigmoid(alpha x)``, alpha 1.702 by default)."""
    _check_inputs(ins, node)
    x = _add_bias(im, im.tensor(ins[0]), ins[1] if len(ins) > 1 and ins[1] is not None else None)
    if node.op_type == "QuickGelu":
        return op.multiply(x, op.sigmoid(op.multiply(x, float(at.get("alpha", 1.702)))))
    return op.gelu(x, approximate="tanh" if node.op_type == "FastGelu" else None)


@_register("com.microsoft:SkipLayerNormalization", "com.microsoft:SkipSimplifiedLayerNormalization")
def _skip_layer_norm(im, node, ins, at):
    """onnxruntime's ``SkipLayerNormalization`` (``LayerNorm(input + skip + bias)`` over the last dim, gamma,
    optional beta) and ``SkipSimplifiedLayerNormalization`` (the RMS norm, gamma only); outputs the
    normalized value and, when asked (output 3), the sum ``input + skip + bias``. Raises ONNXImportError for
    the mean / inverse-deviation outputs."""
    _check_inputs(ins, node)
    simplified = node.op_type == "SkipSimplifiedLayerNormalization"
    opt = lambda i: ins[i] if len(ins) > i and ins[i] is not None else None  # noqa: E731
    x = op.add(im.tensor(ins[0]), im.tensor(ins[1]))
    gamma, beta = ins[2], None if simplified else opt(3)
    x = _add_bias(im, x, opt(3) if simplified else opt(4))
    if any(node.output[1:3]):
        raise ONNXImportError("the mean / inverse standard deviation outputs are not supported")
    eps = float(at.get("epsilon", 1e-12 if not simplified else 1e-6))
    norm = [_simp(x.shape[-1])]
    if not isinstance(norm[0], int):
        raise ONNXImportError(f"the normalized dim {norm[0]} must be static")
    if simplified:
        y = op.rms_norm(x, _norm_param(im, gamma, norm, x.dtype, 1.0), [len(x.shape) - 1], eps)
    else:
        y = op.layer_norm(x, norm, _norm_param(im, gamma, norm, x.dtype, 1.0), _norm_param(im, beta, norm, x.dtype, None),
                          eps=eps)
    if len(node.output) > 3 and node.output[3]:
        return y, _Unavailable(node, "mean"), _Unavailable(node, "inv_std_var"), x
    return y


@_register("com.microsoft:EmbedLayerNormalization")
def _embed_layer_norm(im, node, ins, at):
    """onnxruntime's ``EmbedLayerNormalization`` (BERT's embeddings fused): ``LayerNorm(word[input_ids] +
    position[position_ids, default 0 .. S-1] + segment[segment_ids])`` with gamma / beta; output 1 the
    ``mask_index`` (int32, per row the count of mask ones, the right-padded lengths ``Attention`` reads; zeros
    without a mask), output 2 the sum before the norm."""
    _check_inputs(ins, node)
    opt = lambda i: ins[i] if len(ins) > i and ins[i] is not None else None  # noqa: E731
    ids = im.tensor(ins[0])
    word, pos_table = im.tensor(ins[2]), im.tensor(ins[3])
    h = op.take(word, ids, axis=0)
    positions = opt(8)
    if positions is None:
        p = op.take(pos_table, op.arange(0, ids.shape[1], 1, dtype="int64"), axis=0)        # (S, H)
    else:
        p = op.take(pos_table, im.tensor(positions), axis=0)
    h = op.add(h, p)
    if opt(1) is not None and opt(4) is not None:
        h = op.add(h, op.take(im.tensor(ins[4]), im.tensor(ins[1]), axis=0))
    norm = [_simp(h.shape[-1])]
    y = op.layer_norm(h, norm, _norm_param(im, ins[5], norm, h.dtype, 1.0), _norm_param(im, ins[6], norm, h.dtype, None),
                      eps=float(at.get("epsilon", 1e-12)))
    mask = opt(7)
    if mask is not None:
        mask_index = op.astype(op.sum(op.astype(im.tensor(mask), "int32"), axis=[1]), "int32")
    else:
        mask_index = op.zeros([ids.shape[0]], dtype="int32")
    return y, mask_index, h


@_register("com.microsoft:Attention")
def _ms_attention(im, node, ins, at):
    """onnxruntime's fused ``Attention`` (BERT / GPT-2 self-attention): ``qkv = input @ weights + bias`` split
    by ``qkv_hidden_sizes`` (default three equal parts) into ``num_heads`` heads, scaled dot-product
    attention (``scale``, default ``1 / sqrt(head size)``; ``unidirectional``: causal) with a ``mask_index``
    of right-padded lengths (B,), a raw 0 / 1 mask (B, T) or (B, S, T), and an additive ``attention_bias``.
    Raises ONNXImportError for ``past`` / ``present``, the (2B,) start / end mask and rotary attributes."""
    _check_inputs(ins, node)
    opt = lambda i: ins[i] if len(ins) > i and ins[i] is not None else None  # noqa: E731
    if opt(4) is not None or (len(node.output) > 1 and node.output[1]):
        raise ONNXImportError("past / present states are not supported")
    if int(at.get("do_rotary", 0)):
        raise ONNXImportError("do_rotary is not supported")
    x = im.tensor(ins[0])
    heads = int(at["num_heads"])
    w, b = ins[1], opt(2)
    if isinstance(w, np.ndarray) and w.ndim == 2 and w.dtype.kind == "f":
        qkv = _linear(im, x, w.T.astype(x.dtype))
    else:
        qkv = op.matmul(x, im.tensor(w))
    qkv = _add_bias(im, qkv, b)
    total = _simp(qkv.shape[-1])
    sizes = [int(v) for v in at.get("qkv_hidden_sizes", [])] or ([total // 3] * 3 if isinstance(total, int) else [])
    if len(sizes) != 3 or not isinstance(total, int) or sum(sizes) != total or sizes[0] != sizes[1] or \
            any(v % heads for v in sizes):
        raise ONNXImportError(f"qkv sizes {sizes} do not split {total} features into {heads} heads")
    bsz, seq = x.shape[0], x.shape[1]
    starts = [0, sizes[0], sizes[0] + sizes[1]]
    q, k, v = (op.reshape(op.strided_slice(qkv, [2], [a], [a + n]), [bsz, seq, heads, n // heads])
               for a, n in zip(starts, sizes))
    mask = None
    m = opt(3)
    if m is not None:
        mt = im.tensor(m)
        if len(mt.shape) == 1:
            if isinstance(_simp(mt.shape[0]), int) and isinstance(_simp(bsz), int) and _simp(mt.shape[0]) != _simp(bsz):
                raise ONNXImportError("a (2 * batch,) mask_index (end and start positions) is not supported")
            keys = op.arange(0, seq, 1, dtype="int64")
            mask = op.less(op.reshape(keys, [1, 1, 1, seq]), op.reshape(op.astype(mt, "int64"), [bsz, 1, 1, 1]))
        elif len(mt.shape) in (2, 3):
            raw = op.greater(mt, im.const(np.zeros((), mt.dtype)))
            mask = op.unsqueeze(op.unsqueeze(raw, 1), 1) if len(mt.shape) == 2 else op.unsqueeze(raw, 1)
        else:
            raise ONNXImportError(f"a {len(mt.shape)}-d mask_index is not supported")
    bias = opt(5)
    if bias is not None:
        additive = im.tensor(bias)
        mask = additive if mask is None else op.where(mask, additive, im.const(np.array(-np.inf, additive.dtype)))
    scale = at.get("scale")
    y = op.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=None if not scale else float(scale),
                                        is_causal=bool(int(at.get("unidirectional", 0))))
    return op.reshape(y, [bsz, seq, sizes[2]])


# -- shapes and data movement ------------------------------------------------------------------------------

@_register("com.microsoft:MatMulNBits")
def _matmul_nbits(im, node, ins, at):
    """onnxruntime's ``MatMulNBits`` (com.microsoft; 4-bit weights in blocks along K): ``y = A @ B^T``
    with ``B`` (N, K / block, block / 2) uint8, value ``2j`` of a block in the low nibble of byte ``j``,
    dequantized ``(q - zero_point) * scale``. Without ``zero_points`` (ORT's default 8) the bytes of a row
    read as little-endian uint32 words are exactly :func:`builder.nn.op.group_dequantize`'s packing, so
    the weight stays 4-bit (``bits=4, group_size=block, zero_point=8``, row tiles when N allows) and
    runs on the quantized kernels; ``accuracy_level`` 4 (int8 activations in ORT) maps to
    ``activation_quantization="int8"``. Per-block ``zero_points`` are dequantized here to a float
    weight (exact). ``g_idx`` is not supported."""
    _check_inputs(ins, node)
    from runtime.weights import tile_rows

    from ..ir.op.quantize import ROW_TILE

    x = im.tensor(ins[0])
    b = im.static(ins[1], "B")
    scales = im.static(ins[2], "scales")
    zp = ins[3] if len(ins) > 3 else None
    if len(ins) > 4 and ins[4] is not None:
        raise ONNXImportError("MatMulNBits with g_idx is not supported")
    bias = ins[5] if len(ins) > 5 else None
    k, n = int(at.get("K", 0)), int(at.get("N", 0))
    bits, block = int(at.get("bits", 4)), int(at.get("block_size", 0))
    if bits != 4:
        raise ONNXImportError(f"MatMulNBits with bits={bits} is not supported (4 only)")
    if block < 16 or block & (block - 1):
        raise ONNXImportError(f"block_size must be a power of 2 >= 16, got {block}")
    nblocks = -(-k // block)
    if b.dtype != np.uint8 or b.size != n * nblocks * block // 2 or scales.size != n * nblocks:
        raise ONNXImportError(f"B {b.shape} {b.dtype} / scales {scales.shape} do not fit K={k}, N={n}, "
                              f"block_size={block}")
    if _simp(x.shape[-1]) != k and isinstance(_simp(x.shape[-1]), int):
        raise ONNXImportError(f"A's last dim {_simp(x.shape[-1])} is not K={k}")
    dt = x.dtype
    scale = scales.reshape(n, nblocks).astype(dt)
    if zp is None:
        words = np.ascontiguousarray(b.reshape(n, nblocks * block // 2)).view(np.uint32)
        tile = ROW_TILE if n % ROW_TILE == 0 else 0
        level = int(at.get("accuracy_level", 0))
        w = op.group_dequantize(im.const(tile_rows(words, tile)), im.const(tile_rows(scale, tile)), bits=4,
                                group_size=block, zero_point=8, in_features=k,
                                activation_quantization="int8" if level == 4 else "none", row_tile=tile)
    else:
        zps = im.static(zp, "zero_points")
        if zps.dtype == np.uint8 and zps.size == n * (-(-nblocks // 2)):
            zb = zps.reshape(n, -1)
            zvals = np.stack([zb & 0xF, zb >> 4], axis=-1).reshape(n, -1)[:, :nblocks].astype(np.float32)
        elif zps.size == n * nblocks:
            zvals = zps.reshape(n, nblocks).astype(np.float32)
        else:
            raise ONNXImportError(f"zero_points {zps.shape} {zps.dtype} do not fit N={n} and {nblocks} blocks")
        q = b.reshape(n, nblocks, block // 2)
        vals = np.stack([q & 0xF, q >> 4], axis=-1).reshape(n, nblocks, block).astype(np.float32)
        deq = (vals - zvals[..., None]) * scales.reshape(n, nblocks, 1).astype(np.float32)
        w = im.const(np.ascontiguousarray(deq.reshape(n, nblocks * block)[:, :k]).astype(dt))
    y = op.matmul(x, op.permute_dims(w, [1, 0]))
    if bias is not None:
        y = op.add(y, im.tensor(bias.astype(dt) if isinstance(bias, np.ndarray) else bias))
    return y


@_register("Constant")
def _constant(im, node, ins, at):
    if "value" in at and isinstance(at["value"], np.ndarray):
        return at["value"]
    for key, dtype in (("value_float", "float32"), ("value_int", "int64")):
        if key in at:
            return np.array(at[key], dtype=dtype)
    for key, dtype in (("value_floats", "float32"), ("value_ints", "int64")):
        if key in at:
            return np.array(list(at[key]), dtype=dtype)
    raise ONNXImportError(f"only dense tensor / float / int values are supported, got {sorted(at)}")


@_register("Shape")
def _shape(im, node, ins, at):
    _check_inputs(ins, node)
    dims = im.shape_of(ins[0])
    n = len(dims)
    start = int(at.get("start", 0))
    end = int(at.get("end", n))
    start, end = (max(0, min(n, s + n if s < 0 else s)) for s in (start, end))
    vals = np.empty(max(0, end - start), dtype=object)
    vals[:] = dims[start:end]
    return _shape_value(vals)


@_register("Size")
def _size(im, node, ins, at):
    _check_inputs(ins, node)
    total = 1
    for d in im.shape_of(ins[0]):
        total = total * d
    return _shape_value(np.array(_simp(total) if not isinstance(total, int) else total, dtype=object))


@_register("ConstantOfShape")
def _constant_of_shape(im, node, ins, at):
    _check_inputs(ins, node)
    value = at.get("value", np.zeros(1, dtype="float32"))
    if not isinstance(value, np.ndarray) or value.size != 1:
        raise ONNXImportError("value must be a one-element tensor")
    shape = im.shape_list(ins[0], "the shape")
    if any(isinstance(d, int) and d < 0 for d in shape):
        raise ONNXImportError(f"negative dim in the shape {shape}")
    if _fold_ok(shape):
        return np.full(shape, value.ravel()[0], dtype=value.dtype)
    fill = value.ravel()[0].item()
    return op.full(shape, fill, dtype=str(value.dtype))


@_register("Range")
def _range(im, node, ins, at):
    _check_inputs(ins, node)
    vals = []
    dtype = im.dtype_of(ins[0])
    for v, what in zip(ins, ("start", "limit", "delta")):
        if isinstance(v, Tensor) and id(v) in im.float_of_sym:    # a symbolic integer cast to float
            v = im.float_of_sym[id(v)][1]
        if isinstance(v, Tensor):
            raise ONNXImportError(f"{what} is computed from tensor data; only constant or shape-derived "
                                  "bounds are supported")
        vals.append(_objects(v).ravel()[0] if isinstance(v, _Sym) else v.ravel()[0])
    if all(not isinstance(v, E.PrimExpr) for v in vals):
        start, limit, delta = (v.item() if isinstance(v, np.generic) else v for v in vals)
        if delta == 0:
            raise ONNXImportError("delta must not be 0")
        n = max(0, math.ceil((limit - start) / delta))
        if n <= MAX_FOLD_ELEMENTS:
            return (start + np.arange(n, dtype="float64" if np.dtype(dtype).kind == "f" else "int64") * delta
                    ).astype(dtype)
        return op.arange(start, limit, delta, dtype=dtype)
    as_int = [v.item() if isinstance(v, np.generic) else v for v in vals]
    if np.dtype(dtype).kind == "f":   # float bounds around a symbolic one: whole numbers only, counted in int64
        if any(isinstance(v, float) and not v.is_integer() for v in as_int):
            raise ONNXImportError(f"a symbolic Range with the fractional float bounds {as_int}")
        as_int = [int(v) if isinstance(v, float) else v for v in as_int]
    elif np.dtype(dtype).kind not in "iu":
        raise ONNXImportError("a symbolic Range needs integer bounds")
    start, limit, delta = (_simp(v) for v in as_int)
    if not isinstance(delta, int) or delta == 0:
        raise ONNXImportError(f"delta must be a constant non-zero integer, got {delta}")
    if np.dtype(dtype).kind == "f":
        return op.astype(op.arange(start, limit, delta, dtype="int64"), dtype)
    return op.arange(start, limit, delta, dtype=dtype)


def _reshape_dims(in_shape: list, target: list, allowzero: bool) -> list:
    out = []
    for i, d in enumerate(target):
        if isinstance(d, int) and d == 0 and not allowzero:
            if i >= len(in_shape):
                raise ONNXImportError(f"shape {target}: a 0 at position {i} copies a dim the {len(in_shape)}-d "
                                      "input does not have")
            out.append(in_shape[i])
        else:
            out.append(d)
    if sum(1 for d in out if isinstance(d, int) and d == -1) > 1:
        raise ONNXImportError(f"shape {target} has more than one -1")
    if any(isinstance(d, int) and d < -1 for d in out):
        raise ONNXImportError(f"shape {target} has a negative dim")
    if -1 in [d for d in out if isinstance(d, int)]:
        out = [_infer_dim(in_shape, out, target) if isinstance(d, int) and d == -1 else d for d in out]
    return [_simp(d) for d in out]


def _factors(e) -> list:
    """The factors of a product of dims (``batch * seq * 384`` -> ``[batch, seq, 384]``)."""
    if isinstance(e, E.Mul):
        return _factors(_simp(e.a)) + _factors(_simp(e.b))
    return [e]


def _infer_dim(in_shape: list, out: list, target: list):
    """The dim a ``-1`` stands for: the input's element count over the other dims', with symbolic
    factors cancelled (``batch * seq * 384 / (batch * seq * 32)`` is 12, not a floordiv)."""
    total = [f for d in in_shape for f in _factors(_simp(d))]
    known = [f for d in out if not (isinstance(d, int) and d == -1) for f in _factors(_simp(d))]
    rest_known = []
    for f in known:
        if isinstance(f, int):
            rest_known.append(f)
            continue
        for i, g in enumerate(total):
            if not isinstance(g, int) and arith.prove_equal(f, g):
                del total[i]
                break
        else:
            rest_known.append(f)
    n_total = math.prod(f for f in total if isinstance(f, int))
    n_known = math.prod(f for f in rest_known if isinstance(f, int))
    sym_total = [f for f in total if not isinstance(f, int)]
    sym_known = [f for f in rest_known if not isinstance(f, int)]
    if not sym_known:
        if n_known == 0 or n_total % n_known:
            raise ONNXImportError(f"cannot reshape {in_shape} to {target}")
        missing = n_total // n_known
        for f in sym_total:
            missing = missing * f
        return _simp(missing)
    num, den = n_total, n_known
    for f in sym_total:
        num = num * f
    for f in sym_known:
        den = den * f
    return _simp(E.FloorDiv(E.convert(num, "int64"), E.convert(den, "int64")))


def _reshape_value(im, x, dims: list):
    if isinstance(x, Tensor):
        return op.reshape(x, dims)
    if not all(isinstance(d, int) for d in dims):
        return op.reshape(im.tensor(x), dims)
    if isinstance(x, _Sym):
        return _Sym(x.vals.reshape(dims), x.dtype)
    return x.reshape(dims)


@_register("Reshape")
def _reshape(im, node, ins, at):
    _check_inputs(ins, node)
    x = ins[0]
    dims = _reshape_dims(im.shape_of(x), im.shape_list(ins[1], "the target shape"), bool(int(at.get("allowzero", 0))))
    return _reshape_value(im, x, dims)


@_register("Flatten")
def _flatten(im, node, ins, at):
    _check_inputs(ins, node)
    x = ins[0]
    shape = im.shape_of(x)
    nd = len(shape)
    axis = int(at.get("axis", 1))
    if not -nd <= axis <= nd:
        raise ONNXImportError(f"axis {axis} out of range for a {nd}-d input")
    if axis < 0:
        axis += nd
    a, b = 1, 1
    for d in shape[:axis]:
        a = a * d
    for d in shape[axis:]:
        b = b * d
    return _reshape_value(im, x, [_simp(a), _simp(b)])


def _axes_arg(im, node, ins, at, what="axes") -> list[int] | None:
    if "axes" in at:
        return [int(a) for a in at["axes"]]
    if len(ins) > 1 and ins[1] is not None:
        return im.ints(ins[1], what)
    return None


@_register("Unsqueeze")
def _unsqueeze(im, node, ins, at):
    _check_inputs(ins, node)
    x = ins[0]
    axes = _axes_arg(im, node, ins, at)
    if axes is None:
        raise ONNXImportError("axes are required")
    shape = im.shape_of(x)
    nd = len(shape) + len(axes)
    norm = sorted({a % nd if -nd <= a < nd else -1 for a in axes})
    if -1 in norm or len(norm) != len(axes):
        raise ONNXImportError(f"axes {axes} are out of range or repeated for a {nd}-d result")
    it = iter(shape)
    dims = [1 if i in norm else next(it) for i in range(nd)]
    return _reshape_value(im, x, dims)


@_register("Squeeze")
def _squeeze(im, node, ins, at):
    _check_inputs(ins, node)
    x = ins[0]
    shape = im.shape_of(x)
    nd = len(shape)
    axes = _axes_arg(im, node, ins, at)
    if axes is None:
        if any(not isinstance(d, int) for d in shape):
            raise ONNXImportError(f"Squeeze without axes on the symbolic shape {shape} is ambiguous")
        axes = [i for i, d in enumerate(shape) if d == 1]
    if any(not -nd <= a < nd for a in axes):
        raise ONNXImportError(f"axes {axes} out of range for a {nd}-d input")
    axes = {a % nd for a in axes}
    for a in axes:
        if not (isinstance(shape[a], int) and shape[a] == 1):
            raise ONNXImportError(f"cannot squeeze axis {a} of size {shape[a]}")
    return _reshape_value(im, x, [d for i, d in enumerate(shape) if i not in axes])


@_register("Transpose")
def _transpose(im, node, ins, at):
    _check_inputs(ins, node)
    x = ins[0]
    nd = len(im.shape_of(x))
    perm = [int(p) for p in at.get("perm", list(range(nd))[::-1])]
    if sorted(perm) != list(range(nd)):
        raise ONNXImportError(f"perm {perm} is not a permutation of {nd} axes")
    if isinstance(x, np.ndarray):
        return np.ascontiguousarray(np.transpose(x, perm))
    if isinstance(x, _Sym):
        return _Sym(np.transpose(x.vals, perm), x.dtype)
    return op.permute_dims(x, perm)


@_register("Concat")
def _concat(im, node, ins, at):
    _check_inputs(ins, node)
    axis = int(at["axis"])
    nd = len(im.shape_of(ins[0]))
    if not -nd <= axis < nd:
        raise ONNXImportError(f"axis {axis} out of range for {nd}-d inputs")
    axis %= nd
    if not any(isinstance(v, Tensor) for v in ins):
        if any(isinstance(v, _Sym) for v in ins):
            return _shape_value(np.concatenate([_objects(v) for v in ins], axis=axis), im.dtype_of(ins[0]))
        return np.concatenate(ins, axis=axis)
    parts = [v for v in ins if not (isinstance(v, np.ndarray) and v.shape[axis] == 0)]
    if len(parts) == 1:
        return im.tensor(parts[0])
    return op.concat([im.tensor(v) for v in parts], dim=axis)


def _split_axis(im, x, at) -> tuple[list, int]:
    """``(shape, axis)`` of a Split / SplitToSequence input and its ``axis`` attribute (made non-negative)."""
    shape = im.shape_of(x)
    nd = len(shape)
    axis = int(at.get("axis", 0))
    if not -nd <= axis < nd:
        raise ONNXImportError(f"axis {axis} out of range for a {nd}-d input")
    return shape, axis % nd


#: The most pieces one Split / SplitToSequence makes (each is an op of its own).
MAX_SPLIT_PIECES = 4096


def _split_pieces(im, x, shape: list, axis: int, sizes: list) -> list:
    """``x`` cut along ``axis`` into pieces of ``sizes`` (checked: non-negative, adding up to a static dim, at
    most :data:`MAX_SPLIT_PIECES`): constants and shape values split at import time, tensors by one split."""
    if len(sizes) > MAX_SPLIT_PIECES:
        raise ONNXImportError(f"{len(sizes)} pieces (at most {MAX_SPLIT_PIECES})")
    if any(s < 0 for s in sizes) or (isinstance(shape[axis], int) and sum(sizes) != shape[axis]):
        raise ONNXImportError(f"split sizes {sizes} do not add up to the dim {shape[axis]}")
    cuts = [int(c) for c in np.cumsum(sizes)[:-1]]
    if isinstance(x, np.ndarray):
        return list(np.split(x, cuts, axis=axis))
    if isinstance(x, _Sym):
        return [_shape_value(p, x.dtype) for p in np.split(x.vals, cuts, axis=axis)]
    return [im.tensor(x)] if len(sizes) == 1 else list(op.split(im.tensor(x), cuts, axis=axis))


@_register("Split")
def _split(im, node, ins, at):
    _check_inputs(ins, node)
    x = ins[0]
    shape, axis = _split_axis(im, x, at)
    n = len(node.output)
    if len(ins) > 1 and ins[1] is not None:
        sizes = im.ints(ins[1], "split")
    elif "split" in at:
        sizes = [int(s) for s in at["split"]]
    else:
        dim = shape[axis]
        if not isinstance(dim, int):
            raise ONNXImportError(f"splitting the symbolic dim {dim} needs explicit sizes")
        parts = int(at.get("num_outputs", n))
        if not 1 <= parts <= MAX_SPLIT_PIECES:
            raise ONNXImportError(f"num_outputs {parts} (1 to {MAX_SPLIT_PIECES})")
        chunk = -(-dim // parts)
        sizes = [min(chunk, dim - i * chunk) for i in range(parts)]
    if len(sizes) != n:
        raise ONNXImportError(f"split sizes {sizes} do not give the node's {n} outputs")
    return _split_pieces(im, x, shape, axis, sizes)


class _Sequence:
    """An ONNX sequence known at import time: a Python list of values (tensors, constants, shape values)
    whose length is static (what exporters make with ``SplitToSequence`` / ``SequenceConstruct``)."""

    def __init__(self, items: list) -> None:
        self.items = list(items)

    shape = ()   # (not a tensor: ``tensor()`` refuses it with a clear message)


def _seq(v, what: str) -> list:
    if not isinstance(v, _Sequence):
        raise ONNXImportError(f"{what} is not a sequence")
    return v.items


def _position(im, v, n: int, what: str, end_ok: bool = False) -> int:
    (pos,) = im.ints(v, what)
    if not -n <= pos < n + int(end_ok):
        raise ONNXImportError(f"{what} {pos} is out of range for a sequence of {n}")
    return pos % (n + int(end_ok)) if pos < 0 else pos


@_register("SplitToSequence")
def _split_to_sequence(im, node, ins, at):
    """``SplitToSequence``: ``split`` a scalar (chunks of that size, the last smaller), a 1-D list of sizes, or
    absent (pieces of 1, the split dim dropped when ``keepdims=0``); static sizes, at most
    :data:`MAX_SPLIT_PIECES` pieces."""
    _check_inputs(ins, node)
    x = ins[0]
    shape, axis = _split_axis(im, x, at)
    dim = shape[axis]
    split = ins[1] if len(ins) > 1 else None
    squeeze = False
    if split is None or (isinstance(split, np.ndarray) and split.ndim == 0):
        step = 1 if split is None else int(split)
        if not isinstance(dim, int) or step < 1 or -(-dim // step) > MAX_SPLIT_PIECES:
            raise ONNXImportError(f"the dim {dim} in pieces of {step} (static, at most {MAX_SPLIT_PIECES} pieces)")
        sizes = [min(step, dim - i) for i in range(0, dim, step)]
        squeeze = split is None and not int(at.get("keepdims", 1))
    else:
        sizes = im.ints(split, "split")
    parts = _split_pieces(im, x, shape, axis, sizes)
    if squeeze:
        parts = [p.squeeze(axis) if isinstance(p, np.ndarray) else op.squeeze(im.tensor(p), [axis]) for p in parts]
    return _Sequence(parts)


@_register("SequenceConstruct")
def _sequence_construct(im, node, ins, at):
    _check_inputs(ins, node)
    return _Sequence(ins)


@_register("SequenceEmpty")
def _sequence_empty(im, node, ins, at):
    return _Sequence([])


@_register("SequenceAt")
def _sequence_at(im, node, ins, at):
    """``SequenceAt`` at a constant position (negative counts from the end)."""
    _check_inputs(ins, node)
    items = _seq(ins[0], "input")
    return items[_position(im, ins[1], len(items), "position")]


@_register("SequenceLength")
def _sequence_length(im, node, ins, at):
    _check_inputs(ins, node)
    return np.array(len(_seq(ins[0], "input")), np.int64)


@_register("SequenceInsert", "SequenceErase")
def _sequence_insert_erase(im, node, ins, at):
    """``SequenceInsert`` (at the end, or a constant position) / ``SequenceErase`` (the last, or a constant
    position): a new sequence."""
    _check_inputs(ins, node)
    items = list(_seq(ins[0], "input"))
    if node.op_type == "SequenceInsert":
        pos = _position(im, ins[2], len(items), "position", end_ok=True) if len(ins) > 2 and ins[2] is not None \
            else len(items)
        items.insert(pos, ins[1])
    else:
        if not items:
            raise ONNXImportError("SequenceErase of an empty sequence")
        pos = _position(im, ins[1], len(items), "position") if len(ins) > 1 and ins[1] is not None else -1
        del items[pos]
    return _Sequence(items)


@_register("ConcatFromSequence")
def _concat_from_sequence(im, node, ins, at):
    """``ConcatFromSequence``: the elements concatenated along ``axis`` (``new_axis=1``: stacked there)."""
    _check_inputs(ins, node)
    items = _seq(ins[0], "input")
    if not items:
        raise ONNXImportError("ConcatFromSequence of an empty sequence")
    ts = [im.tensor(v) for v in items]
    nd = len(ts[0].shape) + int(at.get("new_axis", 0))
    axis = int(at["axis"])
    if not -nd <= axis < nd:
        raise ONNXImportError(f"axis {axis} out of range")
    axis %= nd
    if int(at.get("new_axis", 0)):
        ts = [op.unsqueeze(t, axis) for t in ts]
    return ts[0] if len(ts) == 1 else op.concat(ts, dim=axis)


@_register("Slice")
def _slice(im, node, ins, at):
    _check_inputs(ins, node)
    x = ins[0]
    shape = im.shape_of(x)
    nd = len(shape)
    starts = im.shape_list(ins[1], "starts")
    ends = im.shape_list(ins[2], "ends")
    axes = im.ints(ins[3], "axes") if len(ins) > 3 and ins[3] is not None else list(range(len(starts)))
    steps = im.ints(ins[4], "steps") if len(ins) > 4 and ins[4] is not None else [1] * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise ONNXImportError("starts, ends, axes and steps differ in length")
    if any(not -nd <= a < nd for a in axes):
        raise ONNXImportError(f"axes {axes} out of range for a {nd}-d input")
    axes = [a % nd for a in axes]
    if len(set(axes)) != len(axes):
        raise ONNXImportError(f"repeated axes {axes}")
    if any(s == 0 for s in steps):
        raise ONNXImportError("a step of 0")
    static = all(isinstance(v, int) for v in starts + ends) and all(isinstance(shape[a], int) for a in axes)
    if static and not isinstance(x, Tensor):
        index = [slice(None)] * nd
        for a, s, e, st in zip(axes, starts, ends, steps):
            index[a] = _slice_index(s, e, st, shape[a])
        if isinstance(x, _Sym):
            return _shape_value(np.asarray(x.vals[tuple(index)], dtype=object), x.dtype)
        return np.ascontiguousarray(x[tuple(index)])
    t = im.tensor(x)
    begin, end, strides, out_axes = [], [], [], []
    for a, s, e, st in zip(axes, starts, ends, steps):
        d = shape[a]
        if st < 0:      # a gather of the indices in their (descending) order, or the whole dim reversed
            if isinstance(d, int) and isinstance(s, int) and isinstance(e, int):
                s, e = _slice_bounds(s, e, st, d)
                t = op.take(t, im.const(np.arange(s, e, st, dtype=np.int64)), axis=a)
            elif st == -1 and isinstance(s, int) and isinstance(e, int) and (s == -1 or s >= _BIG) and e <= -_BIG:
                t = op.flip(t, a)       # x[::-1] of a symbolic dim, as exporters write it
            else:
                raise ONNXImportError("a negative step on a symbolic dim is supported only to reverse the whole dim")
            continue
        if isinstance(d, int) and isinstance(s, int) and isinstance(e, int):
            s, e = _slice_bounds(s, e, st, d)
            e = max(e, s)
        else:
            s = _clamp_sym(s, d)
            e = _nonempty_end(s, _clamp_sym(e, d))
        begin.append(s)
        end.append(e)
        strides.append(st)
        out_axes.append(a)
    return op.strided_slice(t, out_axes, begin, end, strides) if out_axes else t


def _slice_bounds(start: int, end: int, step: int, dim: int) -> tuple[int, int]:
    """ONNX ``Slice``'s ``(start, end)`` on one static dim of ``dim`` elements (``step`` non-zero), clamped
    as the spec (Slice-13) defines it: a negative bound gets ``dim`` added once; then for ``step > 0``
    both are clamped to ``[0, dim]``, for ``step < 0`` ``start`` to ``[0, dim - 1]`` and ``end`` to
    ``[-1, dim - 1]`` (``-1``: past index 0, not the last element). The selected indices are
    ``range(start, end, step)``. This differs from Python's ``slice(...).indices(dim)``, which clamps a
    start below ``-dim`` to ``-1`` (nothing) for a negative step where the spec gives index 0.

    An ``end`` of INT32_MAX or INT64_MAX (the spec's "slice to the end" sentinel) means the end in the
    step's direction for either sign of step, as onnxruntime's ``SliceBase`` reads it (numpy's ``None``):
    with a negative step it ends past index 0. INT64_MIN and every other value are clamped as above."""
    sentinel = end in _END_SENTINELS
    if start < 0:
        start += dim
    if end < 0:
        end += dim
    if step > 0:
        return min(max(start, 0), dim), dim if sentinel else min(max(end, 0), dim)
    return min(max(start, 0), dim - 1), -1 if sentinel else min(max(end, -1), dim - 1)


def _slice_index(start: int, end: int, step: int, dim: int) -> slice:
    """A Python slice selecting exactly ``range(*_slice_bounds(...), step)`` (a stop of -1 is written
    as ``None``, which Python would otherwise read as the last element)."""
    s, e = _slice_bounds(start, end, step, dim)
    if dim == 0 or (step < 0 and s < 0):
        return slice(0, 0, 1)
    return slice(s, None if e < 0 else e, step)


def _provably_nonnegative(v) -> bool:
    """Whether the dim expression ``v`` is >= 0 for every value of its vars (dims, all >= 0): an int >= 0, or a
    polynomial in bare vars whose coefficients are all >= 0 (:func:`builder.ir.arith.poly_form`)."""
    v = _simp(v)
    if isinstance(v, int):
        return v >= 0
    form = arith.poly_form(v)
    return form is not None and all(c >= 0 and all(isinstance(a.e, E.Var) for a in key)
                                    for key, c in form.items())


def _nonempty_end(start, end):
    """A Slice end (step > 0) on a symbolic dim raised to at least ``start``, so the extent is ``max(0, end -
    start)`` as the spec's clamping gives (Slice-13: an end before the start selects nothing; ``starts=-1,
    ends=0`` on a dim of 5 is empty, not of length -4). Left as it is where ``end - start`` is provably >= 0 (the
    dims stay as simple as they were) or grows with the dims (``x[1:]``: only a dim below the start makes it
    negative, which the VM refuses when run)."""
    span = _simp(E.convert(end) - start) if isinstance(end, E.PrimExpr) or isinstance(start, E.PrimExpr) \
        else end - start
    if _provably_nonnegative(span):
        return end
    if isinstance(span, int):
        return start
    form = arith.poly_form(span)
    if form is not None and all(c >= 0 for key, c in form.items() if key):   # (only the constant term negative)
        return end
    return _simp(E.Max(E.convert(end), E.convert(start)))


def _clamp_sym(v, d):
    """A Slice bound on a dim that is symbolic (or a symbolic bound): ``>= 2**62`` -> the dim, a
    negative int counts from the end; the rest is assumed in range (checked when the code runs)."""
    if isinstance(v, int):
        if v >= _BIG:
            return d
        if v < 0:
            if v <= -_BIG:
                return 0
            return _simp(d + v)
    return v


@_register("Gather")
def _gather(im, node, ins, at):
    _check_inputs(ins, node)
    data, idx = ins
    shape = im.shape_of(data)
    nd = len(shape)
    axis = int(at.get("axis", 0))
    if not -nd <= axis < nd:
        raise ONNXImportError(f"axis {axis} out of range for a {nd}-d input")
    axis %= nd
    dim = shape[axis]
    if isinstance(idx, _Sym):
        idx = im.tensor(idx)
    if isinstance(idx, np.ndarray):
        if idx.dtype.kind not in "iu":
            raise ONNXImportError(f"indices must be integers, got {idx.dtype}")
        if isinstance(dim, int):
            if np.any((idx < -dim) | (idx >= dim)):
                raise ONNXImportError(f"indices {idx.ravel()[:8].tolist()} out of range for a dim of {dim}")
            idx = np.where(idx < 0, idx + dim, idx).astype(idx.dtype)
            if not isinstance(data, Tensor) and _fold_ok(shape[:axis] + list(idx.shape) + shape[axis + 1:]):
                if isinstance(data, _Sym):
                    return _shape_value(np.take(data.vals, idx, axis=axis), data.dtype)
                return np.take(data, idx, axis=axis)
            return op.take(im.tensor(data), im.const(idx), axis=axis)
        if np.any(idx < 0):
            vals = np.empty(idx.shape, dtype=object)
            vals.ravel()[:] = [int(i) if i >= 0 else _simp(dim + int(i)) for i in idx.ravel()]
            return op.take(im.tensor(data), im.tensor(_shape_value(vals)), axis=axis)
        return op.take(im.tensor(data), im.const(idx), axis=axis)
    ti = im.tensor(idx)
    if ti.dtype not in ("int32", "int64", "int16", "int8", "uint8", "uint16", "uint32", "uint64"):
        raise ONNXImportError(f"indices must be integers, got {ti.dtype}")
    if ti.dtype.startswith("int"):   # negative indices count from the end (an index out of range fails when run)
        zero = im.const(np.zeros((), dtype=ti.dtype))
        size = (im.const(np.array(dim, dtype=ti.dtype)) if isinstance(dim, int)
                else wrap_nested(symbolic_scalar(dim, ti.dtype), "dim"))
        ti = op.where(op.less(ti, zero), op.add(ti, size), ti)
    return op.take(im.tensor(data), ti, axis=axis)


@_register("Expand")
def _expand(im, node, ins, at):
    _check_inputs(ins, node)
    x = ins[0]
    target = im.shape_list(ins[1], "the shape")
    xs = im.shape_of(x)
    n = max(len(xs), len(target))
    xs_p = [1] * (n - len(xs)) + xs
    tg_p = [1] * (n - len(target)) + target
    out = []
    for a, b in zip(xs_p, tg_p):
        if isinstance(b, int) and b == 1:
            out.append(a)
        elif isinstance(a, int) and a == 1:
            out.append(b)
        elif _sign(a, b, "Expand") == 0:
            out.append(a)
        else:
            raise ONNXImportError(f"cannot broadcast the shape {xs} to {target}")
    if not isinstance(x, Tensor) and _fold_ok(out):
        if isinstance(x, _Sym):
            return _Sym(np.broadcast_to(x.vals, out).copy(), x.dtype)
        return np.ascontiguousarray(np.broadcast_to(x, out))
    t = im.tensor(x)
    if [_simp(d) for d in t.shape] == out:
        return t
    return op.broadcast_to(t, out)


#: The ONNX op types that :func:`from_onnx` translates (default domain; others as ``domain:Op``).
SUPPORTED_OPS = tuple(sorted(_CONVERTERS))


# ------------------------------------------------------------------------------------------------
# Entry point
# ------------------------------------------------------------------------------------------------

def from_onnx(model_or_path, shape_dict: Mapping[str, Sequence] | None = None,
              dtype_dict: Mapping[str, str] | None = None) -> rx.IRModule:
    """Translate an ONNX model into an IRModule whose ``main`` computes the graph.

    ``model_or_path``: an ``onnx.ModelProto``, its serialized bytes (what ``onnxruntime.InferenceSession``
    also takes) or the path of a ``.onnx`` file (at most :data:`MAX_MODEL_BYTES`; checked with
    ``onnx.checker.check_model`` before use; tensors in external data files are read from the file's
    folder, checked, and refused in a ModelProto or bytes). Default-domain
    opsets 13 to 24 (7 to 12 converted to 13 by
    ``onnx.version_converter``).

    ``main``'s parameters are the graph inputs that are not initializers, in the graph's order,
    each ``R.Tensor(shape, dtype)``: a ``dim_value`` is a static dim, a ``dim_param`` a symbolic
    int64 dim of that name (the same name is the same dim), an unnamed dim a new symbolic dim
    ``<input>_dim<i>``. ``shape_dict`` ({input: [dim, ...]}) overrides dims: an int fixes one, a
    string names a symbolic dim, ``None`` keeps the model's; ``dtype_dict`` ({input: dtype})
    overrides dtypes (``"float32"``, ``"int64"``, ...). ``main`` returns the graph output (a tuple
    of them when there are several); initializers and Constant nodes are constants in the module.

    Raises :class:`UnsupportedOpsError` (one message naming every unsupported op type and its
    nodes, found before anything is translated), :class:`ONNXImportError` for a model that fails
    the checks or a node that cannot be translated (the message names the node),
    :class:`runtime.memory.MemoryLimitError` for external data larger than the memory available, TypeError for
    arguments of the wrong type, FileNotFoundError for a missing file and ImportError without the
    ``onnx`` package.
    """
    loaded = _load(model_or_path)
    source = [int(o.version) for o in loaded.opset_import if o.domain in ("", "ai.onnx")]
    model = _upgraded(loaded)
    opset = _opset(model)
    missing: dict[str, list[str]] = {}
    for node, name in _nodes_and_branches(model.graph):
        key = _op_key(node)
        if key not in _CONVERTERS:
            missing.setdefault(key, []).append(name)
    if missing:
        raise UnsupportedOpsError(missing)
    for what, d in (("shape_dict", shape_dict), ("dtype_dict", dtype_dict)):
        if d is not None and not isinstance(d, Mapping):
            raise TypeError(f"from_onnx: {what} must be a mapping from input names, got {type(d).__name__}")
    return _Importer(model, opset, source[0] if source else None).run(shape_dict, dtype_dict)
