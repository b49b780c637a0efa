"""The graph walk of :func:`from_onnx`: inputs as ``main``'s parameters, initializers as constants,
nodes in order through the converter table (:mod:`.registry`), If / Loop bodies imported into the
same scope within :data:`MAX_BRANCH_DEPTH` and :data:`MAX_UNROLLED_NODES`.
"""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import numpy as np
from core.limits import MAX_NDIM

from ...ir import expr as E
from ...ir import relax as rx
from ...ir.block_builder import BlockBuilder
from ...ir.struct_info import DTYPES, TensorStructInfo
from ...ir.verifier import verify
from ...nn import op
from ...nn.core import Tensor, wrap_nested
from ...nn.op.common import symbolic_scalar
from .errors import ONNXImportError, UnsupportedOpsError
from .gelu_chains import _find_gelus
from .loading import _load, _opset, _upgraded
from .proto import _attrs, _node_name, _np_dtype_name, _onnx, _to_array
from .registry import _CONVERTERS, _op_key
from .shape_folding import _objects, _simp
from .values import _Sequence, _Sym, _Unavailable


#: The most ``If`` nodes nested in one another that the importer follows (each is one Python frame deeper).
MAX_BRANCH_DEPTH = 32


#: The most nodes imported from ``Loop`` bodies (iterations times the body's nodes) and ``If`` branches in the
#: whole model, all nesting levels together (:meth:`_Importer.subgraph`): trip counts from the model never make
#: an unbounded graph, nested Loops included.
MAX_UNROLLED_NODES = 4096


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


_IDENT = re.compile(r"[^0-9A-Za-z_]")


class _Importer:
    """The import of one ONNX model: ``env`` maps every value name seen so far to its value (a numpy array when static,
    a :class:`~.values._Sym` when symbolic, an ``nn.Tensor`` for graph values, a :class:`~.values._Sequence` or
    :class:`~.values._Unavailable`), the symbolic dims by their ONNX names, the constants made so far, and the GELU
    chains found up front (:func:`~.gelu_chains._find_gelus`). The converters get it as their first argument
    (``im``) and use :meth:`tensor`, :meth:`const`, :meth:`static`, :meth:`ints` and :meth:`shape_list` to read
    their inputs."""
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
        """The int64 symbolic dim for the ONNX dim name ``key`` (one per name), named as an identifier and made unique."""
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
        """``main``'s parameter for the graph input ``vi``: ``R.Tensor(shape, dtype)`` from the model, with
        ``shape_override`` (ints, names, None) and ``dtype_override`` from ``shape_dict`` / ``dtype_dict``. Raises
        ONNXImportError for a non-tensor input, an unknown dtype, a missing shape, a wrong rank, a negative dim or
        more than ``core.limits.MAX_NDIM`` dims, TypeError for an override of the wrong type."""
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
                                  "(core.limits.MAX_NDIM)")
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
        """The dims of any value (static, symbolic or tensor): ints and simplified PrimExprs."""
        if isinstance(v, Tensor):
            return [_simp(d) for d in v.shape]
        return list(v.shape)

    @staticmethod
    def dtype_of(v) -> str:
        """The dtype name of any value (static, symbolic or tensor)."""
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
        """``v`` itself when it is a numpy array (known at import time). Raises ONNXImportError naming ``what``
        otherwise."""
        if not isinstance(v, np.ndarray):
            raise ONNXImportError(f"{what} must be a constant (known at import time)")
        return v

    def ints(self, v, what: str) -> list[int]:
        """A constant input (``what``) as a list of Python ints (flattened). Raises ONNXImportError when it is not a
        constant."""
        return [int(x) for x in self.static(v, what).ravel()]

    # -- the graph ---------------------------------------------------------------------------------
    def run(self, shape_dict, dtype_dict) -> rx.IRModule:
        """Import the main graph: initializers as constants, inputs as ``main``'s parameters (``shape_dict`` /
        ``dtype_dict`` applied), every node in order (GELU chains as one ``gelu``); returns the verified IRModule.
        Raises ONNXImportError for names in the dicts that are not inputs, a node that fails (named) or an output no
        node computes."""
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
                                      f"{len(v.shape)} dims, more than the limit of {MAX_NDIM} (core.limits.MAX_NDIM)")
            if name:   # numpy folds of 0-d arrays give numpy scalars: kept as 0-d arrays
                self.env[name] = np.asarray(v) if isinstance(v, np.generic) else v
        for name in node.output[len(outs):]:
            if name:
                self.env[name] = _Unavailable(node, name)


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
