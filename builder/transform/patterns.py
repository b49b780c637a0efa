"""The pattern matcher both fusion passes use (the tree of single-use elementwise ops rooted at a
binding, with matmul leaves where kernel selection asks for them) and their shared driver,
:class:`FusionPass`.

A tree node is an :class:`~builder.ir.kernel.EpilogueOp` (a registered op whose pattern is
``ELEMWISE`` or ``BROADCAST`` and that has a fusion ``compute``), an
:class:`~builder.ir.kernel.EpilogueLinear` (``matmul(x, permute_dims(W))`` with a 2-D float ``W`` or
``W = group_dequantize(q, s)``, all with the same ``x``: at most two; or a weight read as stored,
``(in, out)`` or one matrix per batch of two activations, :func:`stored_weight`, the only one) or an
:class:`~builder.ir.kernel.EpilogueTensor` (any other tensor that broadcasts to the result without
changing it). Inner values must be dataflow bindings used exactly once and of the result's shape
(only leaves broadcast), so no value is computed twice; a path holds at most ``max_fuse_depth`` ops
(TVM's ``max_fuse_depth``), so a kernel's expression stays bounded. With matmul leaves the root may
also be a ``permute_dims`` of such a tree: the kernel stores its outputs transposed.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from ..ir import expr as E
from ..ir import relax as rx
from ..ir.block_builder import BlockBuilder
from ..ir.kernel import DenseWeight, EpilogueLinear, EpilogueOp, EpilogueTensor, GroupWeight
from ..ir.op import OpPattern
from ..ir.struct_info import TensorStructInfo
from .dce import dead_code_elimination
from .pass_infra import FunctionPass

__all__ = ["FusionPass", "Match", "FusionMatcher", "fusable", "linear_weight", "stored_weight", "kernel_name",
           "rewrite_bindings", "MAX_FUSE_DEPTH", "FLOATS", "void_dtype", "same_shape", "tensor_sinfo", "call_op",
           "permute_axes"]

#: The default bound on the ops along one path of a fused group.
MAX_FUSE_DEPTH = 32

FLOATS = ("float16", "bfloat16", "float32")


def void_dtype(dtype) -> str | None:
    """An ``out_dtype`` attribute as a dtype, None for unset (``None``, ``""``, ``"void"``)."""
    return None if dtype in (None, "", "void") else dtype


def same_shape(a, b) -> bool:
    """Whether shapes ``a`` and ``b`` have the same rank and dims the simplifier proves equal (the same
    dim object, or two equal static dims, without the simplifier: the matcher asks this of every node it
    visits)."""
    return len(a) == len(b) and all(x is y or _same_static(x, y) or E.prove_equal(x, y) for x, y in zip(a, b))


def _same_static(x, y) -> bool:
    """Both ``x`` and ``y`` static (int or IntImm) and equal."""
    vx = x if isinstance(x, int) else x.value if isinstance(x, E.IntImm) else None
    vy = y if isinstance(y, int) else y.value if isinstance(y, E.IntImm) else None
    return vx is not None and vx == vy


def tensor_sinfo(e: rx.Expr) -> TensorStructInfo | None:
    """``e``'s tensor struct info when it has a known shape, else None."""
    s = getattr(e, "struct_info", None)
    return s if isinstance(s, TensorStructInfo) and s.shape is not None else None


def call_op(name: str, args, **attrs) -> rx.Call:
    """A call of the registered op ``name`` (its struct info inferred); raises as the op's inference does."""
    return rx.Call(rx.Op.get(name), list(args), attrs)


def permute_axes(call: rx.Call, ndim: int) -> list[int]:
    """The axes of a ``permute_dims`` call on an ``ndim``-D tensor, non-negative (``axes=None``: reversed)."""
    axes = call.attrs.get("axes")
    return list(range(ndim))[::-1] if axes is None else [int(a) % ndim for a in axes]


def _broadcasts_into(shape, into) -> bool:
    """``shape`` broadcasts to ``into`` without changing it."""
    if len(shape) > len(into):
        return False
    for d, o in zip(reversed(shape), reversed(into)):
        if not (isinstance(E.simplify(d), E.IntImm) and E.simplify(d).value == 1) and not E.prove_equal(d, o):
            return False
    return True


def fusable(op: rx.Op) -> bool:
    """Whether fusion may inline ``op``: an elementwise or broadcast op with a fusion compute."""
    return op.pattern in (OpPattern.ELEMWISE, OpPattern.BROADCAST) and op.compute is not None


def linear_weight(bindings: dict, b: rx.Expr, tensors: list, offset: int = 1):
    """The weight of ``b`` when it is ``permute_dims(W)`` of a 2-D float ``W`` or of
    ``group_dequantize(q, s)``: a :class:`DenseWeight` / :class:`GroupWeight` (carrying the op's
    attributes as they are, :meth:`GroupWeight.of_attrs`) whose indices are
    positions in ``tensors`` (to which the weight's tensors are appended) plus ``offset`` (the
    kernel's parameters start with ``x``). None for anything else."""
    def bound(e: rx.Expr, op: str):
        v = bindings.get(e) if isinstance(e, rx.Var) else None
        ok = isinstance(v, rx.Call) and isinstance(v.op, rx.Op) and v.op.name == op
        return v if ok else None

    def index(t: rx.Expr) -> int:
        for i, u in enumerate(tensors):
            if u is t:
                return i + offset
        tensors.append(t)
        return len(tensors) - 1 + offset

    perm = bound(b, "relax.permute_dims")
    if perm is None or perm.attrs.get("axes") not in (None, [1, 0]):
        return None
    w = perm.args[0]
    wsi = w.struct_info
    if not isinstance(wsi, TensorStructInfo) or wsi.ndim != 2:
        return None
    dq = bound(w, "relax.group_dequantize")
    if dq is not None:
        q, s = dq.args
        return GroupWeight.of_attrs(index(q), index(s), dq.attrs)   # every attribute, as the op has it
    if wsi.dtype not in FLOATS:
        return None
    return DenseWeight(index(w))


def stored_weight(bindings: dict, a: rx.Expr, b: rx.Expr, tensors: list, offset: int = 1):
    """The weight of ``matmul(a, b)`` read as stored, where :func:`linear_weight` finds no ``(out, in)``
    matrix: a :class:`DenseWeight` (its index as :func:`linear_weight` counts) that is

    - one matrix per batch (``batched``; a matmul of two activations: attention's ``q @ k.T`` and
      ``p @ v``, ``torch.bmm``) when ``a`` ``(*B, M, K)`` and ``b`` have the same rank (at least 3), one
      float dtype and batch dims and ``K`` the shapes prove equal (no broadcast): ``b =
      permute_dims(t)`` swapping the last two dims of ``t`` ``(*B, N, K)`` reads ``t`` (``kn = 0``), any
      other ``b`` is read ``(*B, K, N)`` (``kn = 1``);
    - or a 2-D float ``b`` ``(K, N)`` read as it is (``kn = 1``: ONNX MatMul's ``B``, GPT-2's
      ``Conv1D`` weights, ``x @ W`` in a recipe) with ``K`` provably ``a``'s last dim.

    None otherwise (the ``R.matmul`` loops)."""
    asi, bsi = a.struct_info, b.struct_info
    if not (isinstance(asi, TensorStructInfo) and isinstance(bsi, TensorStructInfo) and asi.shape is not None
            and bsi.shape is not None and asi.ndim >= 1 and asi.dtype in FLOATS and bsi.dtype == asi.dtype):
        return None
    nd = asi.ndim
    if bsi.ndim == 2 and E.prove_equal(asi.shape[-1], bsi.shape[0]):
        src, batched, kn = b, 0, 1
    elif nd >= 3 and bsi.ndim == nd and same_shape(list(asi.shape)[:-2] + [asi.shape[-1]],
                                                     list(bsi.shape)[:-2] + [bsi.shape[-2]]):
        src, batched, kn = b, 1, 1
        perm = bindings.get(b) if isinstance(b, rx.Var) else None
        if (isinstance(perm, rx.Call) and isinstance(perm.op, rx.Op) and perm.op.name == "relax.permute_dims"
                and perm.attrs.get("axes") is not None
                and [int(x) % nd for x in perm.attrs["axes"]] == list(range(nd - 2)) + [nd - 1, nd - 2]):
            src, kn = perm.args[0], 0
    else:
        return None
    for i, u in enumerate(tensors):
        if u is src:
            return DenseWeight(i + offset, batched=batched, kn=kn)
    tensors.append(src)
    return DenseWeight(len(tensors) - 1 + offset, batched=batched, kn=kn)


@dataclass
class Match:
    """A matched tree: its root ``tree``, the kernel's ``tensors``, the ``weights`` of its matmul
    leaves, their common ``x`` and ``out_dtype``, the op names (``ops``, for the kernel name) and the
    inner bindings it replaces (``consumed``). Indices in the tree and the weights are positions in
    the kernel's inputs: ``(x, *tensors)`` when ``offset`` is 1 (a matmul kernel), ``tensors`` when 0."""

    root_shape: list
    offset: int = 0
    tree: object = None
    tensors: list = field(default_factory=list)
    weights: list = field(default_factory=list)
    x: rx.Expr | None = None
    out_dtype: str | None = None
    ops: list = field(default_factory=list)
    consumed: list = field(default_factory=list)

    def tensor(self, e: rx.Expr) -> int:
        """The input index of tensor ``e`` in the kernel (added to ``tensors`` when new)."""
        for i, t in enumerate(self.tensors):
            if t is e:
                return i + self.offset
        self.tensors.append(e)
        return len(self.tensors) - 1 + self.offset

    def mark(self) -> tuple:
        """A snapshot of the match's state (the lengths of its lists, ``x`` and ``out_dtype``), which
        :meth:`undo` restores when a tried subtree does not match."""
        return (len(self.tensors), len(self.weights), len(self.ops), len(self.consumed), self.x, self.out_dtype)

    def undo(self, mark: tuple) -> None:
        """Restore the state :meth:`mark` returned: drop what was appended since and put back ``x`` and
        ``out_dtype``."""
        nt, nw, no, nc, x, od = mark
        del self.tensors[nt:], self.weights[nw:], self.ops[no:], self.consumed[nc:]
        self.x, self.out_dtype = x, od


class FusionMatcher:
    """Pattern matching over one graph-level function (see the module docstring).

    ``linear``: whether matmul leaves are matched (kernel selection) or are plain tensors (elementwise
    fusion)."""

    def __init__(self, func: rx.Function, linear: bool, max_fuse_depth: int = MAX_FUSE_DEPTH) -> None:
        if max_fuse_depth < 1:
            raise ValueError(f"max_fuse_depth must be at least 1, got {max_fuse_depth}")
        self.linear = linear
        self.max_fuse_depth = max_fuse_depth
        self.defs: dict[rx.Var, rx.Expr] = {}
        self.uses: Counter = Counter()
        self.order: list[rx.VarBinding] = []
        for block in func.body.blocks:
            for b in block.bindings:
                self.defs[b.var] = b.value
                self.order.append(b)
                for v in rx.used_vars(b.value):
                    self.uses[v] += 1
        for v in rx.used_vars(func.body.body):
            self.uses[v] += 1
        self.dataflow = {b.var for block in func.body.blocks if block.is_dataflow for b in block.bindings}

    def call(self, e: rx.Expr) -> rx.Call | None:
        """The op call bound to ``e``, else None."""
        v = self.defs.get(e) if isinstance(e, rx.Var) else None
        return v if isinstance(v, rx.Call) and isinstance(v.op, rx.Op) else None

    def match(self, var: rx.Var) -> Match | None:
        """The tree rooted at binding ``var`` (a float tensor op call in a dataflow block), or None."""
        call = self.call(var)
        if call is None or var not in self.dataflow:
            return None
        sinfo = var.struct_info
        if not isinstance(sinfo, TensorStructInfo) or sinfo.dtype not in FLOATS or sinfo.shape is None:
            return None
        if self.linear and call.op.name == "relax.permute_dims":
            return self._transposed(call)
        m = Match(list(sinfo.shape), offset=1 if self.linear else 0)
        m.tree = self._node(var, m, root=True, depth=0)
        return None if m.tree is None or isinstance(m.tree, EpilogueTensor) else m

    def _transposed(self, call: rx.Call) -> Match | None:
        """``permute_dims(t)`` of a single-use tree ``t`` with matmul leaves (kernel selection only):
        the tree with the transpose as its root, which the kernel applies as it stores its outputs
        (a Conv1D's NCW result straight from its NWC GEMM, no transpose pass), else None."""
        inner = call.args[0]
        s = inner.struct_info
        if (not self._inner_ok(inner) or not isinstance(s, TensorStructInfo) or s.shape is None
                or s.dtype not in FLOATS):
            return None
        skipped = []
        through = self.call(inner)   # a reshape to the same shape (ONNX exports have them): looked through
        if (through is not None and through.op.name == "relax.reshape" and self._inner_ok(through.args[0])
                and isinstance(through.args[0].struct_info, TensorStructInfo)
                and same_shape(through.args[0].struct_info.shape or (), s.shape)):
            skipped, inner = [inner], through.args[0]
        axes = tuple(permute_axes(call, s.ndim))
        m = Match(list(s.shape), offset=1)
        node = self._node(inner, m, root=False, depth=1)
        if node is None or not m.weights:
            return None
        m.consumed.extend(skipped)
        m.ops.append("permute_dims")
        m.tree = EpilogueOp(call.op.name, (node,), (("axes", axes),))
        return m

    def _inner_ok(self, var: rx.Expr) -> bool:
        return isinstance(var, rx.Var) and self.uses[var] == 1 and var in self.dataflow

    def _node(self, e: rx.Expr, m: Match, root: bool, depth: int):
        call = self.call(e)
        if (call is not None and (root or self._inner_ok(e)) and depth < self.max_fuse_depth
                and isinstance(e.struct_info, TensorStructInfo) and same_shape(e.struct_info.shape or (), m.root_shape)):
            if call.op.name == "relax.matmul":
                leaf = self._linear_leaf(call, m)
                if leaf is not None:
                    if not root:
                        m.consumed.append(e)
                    return leaf
            elif fusable(call.op) and e.struct_info.dtype in FLOATS:
                return self._op_node(e, call, m, root, depth)
        return self._leaf(e, m)

    def _op_node(self, e: rx.Expr, call: rx.Call, m: Match, root: bool, depth: int):
        mark = m.mark()
        args = []
        for a in call.args:
            node = self._node(a, m, root=False, depth=depth + 1)
            if node is None:
                m.undo(mark)
                return self._leaf(e, m)
            args.append(node)
        m.ops.append(call.op.name.split(".")[-1])
        if not root:
            m.consumed.append(e)
        attrs = tuple((k, call.attrs[k]) for k in call.op.attr_names if k in call.attrs)
        return EpilogueOp(call.op.name, tuple(args), attrs)

    def _linear_leaf(self, call: rx.Call, m: Match):
        """``matmul(x, permute_dims(W))`` -> an :class:`EpilogueLinear`, else None."""
        if not self.linear or len(m.weights) >= 2:
            return None
        a, b = call.args
        asi = a.struct_info
        if not isinstance(asi, TensorStructInfo) or asi.ndim < 1 or asi.dtype not in FLOATS:
            return None
        if m.x is not None and m.x is not a:
            return None
        out_dtype = void_dtype(call.attrs.get("out_dtype"))
        if m.weights and out_dtype != m.out_dtype:
            return None
        tensors: list = list(m.tensors)
        weight = linear_weight(self.defs, b, tensors, m.offset)
        if weight is None and not m.weights:   # (a weight read as stored is its kernel's only one)
            weight = stored_weight(self.defs, a, b, tensors, m.offset)
        if weight is None or any(getattr(w, "batched", 0) or getattr(w, "kn", 0) for w in m.weights):
            return None
        m.tensors[:] = tensors
        m.x = a
        m.out_dtype = out_dtype
        m.weights.append(weight)
        m.ops.append("matmul")
        return EpilogueLinear(len(m.weights) - 1)

    def _leaf(self, e: rx.Expr, m: Match):
        s = e.struct_info
        if not isinstance(s, TensorStructInfo) or s.shape is None or not isinstance(e, (rx.Var, rx.Constant)):
            return None
        if not _broadcasts_into(list(s.shape), m.root_shape):
            return None
        return EpilogueTensor(m.tensor(e))


def kernel_name(ops: list[str]) -> str:
    """The name hint of a fused kernel: ``fused_`` and its ops, the first few of a long group."""
    if len(ops) > 8:
        ops = ops[:4] + [f"and_{len(ops) - 4}_more"]
    return "fused_" + "_".join(ops)


def rewrite_bindings(func: rx.Function, replaced: dict) -> rx.Function:
    """``func`` with the values of the bindings in ``replaced`` (variable -> new value) swapped in;
    ``func`` itself when there are none."""
    if not replaced:
        return func
    blocks = [type(block)([rx.VarBinding(b.var, replaced.get(b.var, b.value)) for b in block.bindings])
              for block in func.body.blocks]
    return rx.Function(func.params, rx.SeqExpr(blocks, func.body.body), func.ret_struct_info, func.attrs,
                       func.is_pure, name=func.name)


class FusionPass(FunctionPass):
    """The driver of the tree-fusing passes (FuseOps, SelectKernels; as TVM's ``FuseOpsByPattern``):
    for each binding, outermost first, the tree :class:`FusionMatcher` matches there becomes the
    call :meth:`emit` returns (None: left alone); :meth:`rewrite_rest` may then rewrite single bindings
    the trees left; the bindings the trees consumed are removed (dead code elimination).

    Subclasses set ``name`` and ``linear`` (whether trees may contain matmuls) and implement
    :meth:`emit`. ``max_fuse_depth`` bounds a tree's depth (ValueError below 1)."""

    linear = False

    def __init__(self, max_fuse_depth: int = MAX_FUSE_DEPTH) -> None:
        if max_fuse_depth < 1:
            raise ValueError(f"max_fuse_depth must be at least 1, got {max_fuse_depth}")
        self.max_fuse_depth = max_fuse_depth

    def emit(self, bb: BlockBuilder, m: Match) -> rx.Expr | None:
        """The call that computes the matched tree ``m``, or None to leave it."""
        raise NotImplementedError

    def rewrite_rest(self, bb: BlockBuilder, matcher: FusionMatcher, replaced: dict, consumed: set) -> None:
        """Add rewrites of single bindings (neither replaced nor consumed) to ``replaced``."""

    def transform_module(self, mod: rx.IRModule) -> rx.IRModule:
        """The module with every graph-level function's matched trees rewritten (:meth:`transform_function`),
        then the bindings the trees consumed (now unused) and unreferenced PrimFuncs removed."""
        return dead_code_elimination(super().transform_module(mod))

    def transform_function(self, bb: BlockBuilder, func: rx.Function, name: str) -> rx.Function:
        """``func`` with each tree matched at a binding (outermost binding first; a binding a tree already
        consumed is skipped) replaced by the call :meth:`emit` returns, then the single-binding rewrites of
        :meth:`rewrite_rest`; ``func`` itself when nothing changed."""
        matcher = FusionMatcher(func, linear=self.linear, max_fuse_depth=self.max_fuse_depth)
        replaced: dict[rx.Var, rx.Expr] = {}
        consumed: set = set()
        for b in reversed(matcher.order):
            if b.var in consumed:
                continue
            m = matcher.match(b.var)
            call = None if m is None else self.emit(bb, m)
            if call is not None:
                replaced[b.var] = call
                consumed.update(m.consumed)
        self.rewrite_rest(bb, matcher, replaced, consumed)
        return rewrite_bindings(func, replaced)
