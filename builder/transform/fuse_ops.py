"""FuseOps: merge a matmul with the elementwise ops that consume it, and elementwise chains, into
single ``R.call_tir`` kernels (graph level, before :class:`~builder.transform.LegalizeOps`).

Patterns (every intermediate value must be used exactly once, by the next op of the pattern):

* **linear + epilogue** -- a tree of elementwise ops whose leaves include one or two linears
  ``matmul(x, permute_dims(W))`` with the same ``x``; ``W`` is a 2-D float tensor or
  ``group_dequantize(q, s)`` (a quantized weight, read packed). Epilogue ops:
  :data:`builder.te.topi.EPILOGUE_UNARY` (``relu``, ``silu``, ``gelu``, ``gelu_tanh``, ...),
  :data:`~builder.te.topi.EPILOGUE_BINARY` (``add``, ``multiply``, ...) and ``astype``; other
  leaves are any tensors that broadcast to the output (a bias ``(out,)``, a residual of the
  output's shape). Examples: ``x @ W.T``, ``x @ W.T + b``, ``silu(x @ Wg.T) * (x @ Wu.T)``
  (LLaMA's gated MLP: both weights stream in one pass and only the product is written),
  ``r + gelu(x @ W.T + b)``. The result is a :func:`builder.te.topi.linear_kernel` PrimFunc with
  ``attrs["mb.kernel"]``, so the matmul kernel emitter
  (:mod:`builder.codegen.kernels.linear`) compiles it to a GEMV / GEMM with the epilogue
  applied per output tile;
* **elementwise chains** -- at least two elementwise ops (the ones above) with no matmul, e.g.
  ``silu(a) * b``: one loop nest, every intermediate inlined
  (:func:`builder.te.topi.inline_injective`).

Inner ops must produce the shape of the pattern's result (only leaves broadcast), so no value
is recomputed for several outputs. The fused semantics are those of the ops it replaces
(the same topi definitions, float16 / bfloat16 roundings of the intermediates included).
Bindings the fusion leaves unused are removed (:func:`dead_code_elimination`).

A group holds at most ``max_fuse_depth`` ops along any path from its result to a leaf (default
:data:`MAX_FUSE_DEPTH`, as TVM's ``relax.transform.FuseOps(fuse_opt_level, max_fuse_depth)``): a
longer chain (2,000 ``silu`` ops in a row) becomes several kernels, each of bounded size, so that
compile time stays linear and no pass recurses deeper than a kernel.

Usage: ``FuseOps()(mod)``; ``FuseOps(linear=False)`` / ``FuseOps(elementwise=False)`` turn a
family off; ``FuseOps(max_fuse_depth=8)`` bounds groups more tightly.
"""
from __future__ import annotations

from collections import Counter

from ..ir import expr as E
from ..ir import relax as rx
from ..ir.block_builder import BlockBuilder
from ..ir.struct_info import TensorStructInfo
from ..te import topi
from .legalize import call_te, dead_code_elimination, linear_kernel_call, linear_weight

__all__ = ["FuseOps", "MAX_FUSE_DEPTH"]

#: The default bound on the ops along one path of a fused group (see the module docstring).
MAX_FUSE_DEPTH = 32

_UNARY = {f"relax.nn.{n}": n for n in ("relu", "silu", "gelu", "gelu_tanh")}
_UNARY.update({f"relax.{n}": n for n in ("sigmoid", "tanh", "exp", "negative")})
_BINARY = {f"relax.{n}": n for n in topi.EPILOGUE_BINARY}
_FLOATS = ("float16", "bfloat16", "float32")


def _void(dtype) -> str | None:
    return None if dtype in (None, "", "void") else dtype


def _same_shape(a, b) -> bool:
    return len(a) == len(b) and all(E.prove_equal(x, y) for x, y in zip(a, b))


def _broadcasts_into(shape, into) -> bool:
    """``shape`` broadcasts to ``into`` without changing it."""
    if len(shape) > len(into):
        return False
    for d, o in zip(reversed(shape), reversed(into)):
        if not (isinstance(E.simplify(d), E.IntImm) and E.simplify(d).value == 1) and not E.prove_equal(d, o):
            return False
    return True


def _hint(ops: list[str]) -> str:
    """The name hint of a fused kernel: ``fused_`` and its ops, the first few of a long group."""
    if len(ops) > 8:
        ops = ops[:4] + [f"and_{len(ops) - 4}_more"]
    return "fused_" + "_".join(ops)


class _Match:
    """State of one pattern match rooted at a binding."""

    def __init__(self, root_shape) -> None:
        self.root_shape = root_shape
        self.tensors: list[rx.Expr] = []
        self.weights: list[dict] = []
        self.x: rx.Expr | None = None
        self.out_dtype: str | None = None
        self.ops: list[str] = []
        self.consumed: list[rx.Var] = []

    def tensor(self, e: rx.Expr) -> int:
        for i, t in enumerate(self.tensors):
            if t is e:
                return i
        self.tensors.append(e)
        return len(self.tensors) - 1


class FuseOps:
    """Pass: see the module docstring. ``FuseOps(linear=True, elementwise=True)(mod)``."""

    def __init__(self, linear: bool = True, elementwise: bool = True, max_fuse_depth: int = MAX_FUSE_DEPTH) -> None:
        if max_fuse_depth < 1:
            raise ValueError(f"max_fuse_depth must be at least 1, got {max_fuse_depth}")
        self.linear = linear
        self.elementwise = elementwise
        self.max_fuse_depth = max_fuse_depth

    def __call__(self, mod: rx.IRModule) -> rx.IRModule:
        out = rx.IRModule({}, mod.attrs)
        bb = BlockBuilder(out)
        for name, func in mod.functions.items():
            if not isinstance(func, rx.Function):
                bb.add_func(func, name)
        for name, func in mod.functions.items():
            if isinstance(func, rx.Function):
                out[name] = self._function(bb, func)
        return dead_code_elimination(out)

    # ------------------------------------------------------------------------------------------
    def _function(self, bb: BlockBuilder, func: rx.Function) -> rx.Function:
        self.defs: dict[rx.Var, rx.Expr] = {}
        self.uses: Counter = Counter()
        order: list[rx.VarBinding] = []
        for block in func.body.blocks:
            for b in block.bindings:
                self.defs[b.var] = b.value
                order.append(b)
                for v in rx.used_vars(b.value):
                    self.uses[v] += 1
        for v in rx.used_vars(func.body.body):
            self.uses[v] += 1
        self.dataflow = {b.var for block in func.body.blocks if block.is_dataflow
                         for b in block.bindings}
        replaced: dict[rx.Var, rx.Expr] = {}
        consumed: set = set()
        for b in reversed(order):
            if b.var in consumed:
                continue
            new = self._fuse(bb, b.var)
            if new is not None:
                value, used = new
                replaced[b.var] = value
                consumed.update(used)
        if not replaced:
            return func
        blocks = []
        for block in func.body.blocks:
            nb = type(block)()
            for b in block.bindings:
                nb.bindings.append(rx.VarBinding(b.var, replaced.get(b.var, b.value)))
            blocks.append(nb)
        body = rx.SeqExpr(blocks, func.body.body)
        return rx.Function(func.params, body, func.ret_struct_info, func.attrs, func.is_pure,
                           name=func.name)

    def _call(self, e: rx.Expr) -> rx.Call | None:
        v = self.defs.get(e) if isinstance(e, rx.Var) else None
        if isinstance(v, rx.Call) and isinstance(v.op, rx.Op):
            return v
        return None

    def _inner_ok(self, var: rx.Expr) -> bool:
        """An intermediate of a pattern: a dataflow-block binding used exactly once."""
        return isinstance(var, rx.Var) and self.uses[var] == 1 and var in self.dataflow

    # ------------------------------------------------------------------------------------------
    def _fuse(self, bb: BlockBuilder, var: rx.Var):
        call = self._call(var)
        if call is None or var not in self.dataflow:
            return None
        sinfo = var.struct_info
        if not isinstance(sinfo, TensorStructInfo) or sinfo.dtype not in _FLOATS or sinfo.shape is None:
            return None
        m = _Match(list(sinfo.shape))
        tree = self._node(var, m, root=True)
        if tree is None or tree[0] == "tensor":
            return None
        if m.weights and self.linear:
            return self._emit_linear(bb, tree, m)
        if not m.weights and self.elementwise and len(m.ops) >= 2:
            return self._emit_elementwise(bb, tree, m)
        return None

    def _linear_leaf(self, call: rx.Call, m: _Match):
        """``matmul(x, permute_dims(W))`` -> a weight description, else None."""
        if call.op.name != "relax.matmul" or not self.linear or len(m.weights) >= 2:
            return None
        a, b = call.args
        asi = a.struct_info
        if not isinstance(asi, TensorStructInfo) or asi.ndim < 1 or asi.dtype not in _FLOATS:
            return None
        if m.x is not None and m.x is not a:
            return None
        out_dtype = _void(call.attrs.get("out_dtype"))
        if m.weights and out_dtype != m.out_dtype:
            return None
        tensors: list = []
        desc = linear_weight(self.defs, b, tensors)
        if desc is None:
            return None
        for key in ("w", "q", "scale"):
            if key in desc:
                desc[key] = m.tensor(tensors[desc[key]])
        m.x = a
        m.out_dtype = out_dtype
        m.weights.append(desc)
        m.ops.append("matmul")
        return ("linear", len(m.weights) - 1)

    def _node(self, e: rx.Expr, m: _Match, root: bool = False, depth: int = 0):
        call = self._call(e)
        inner_ok = root or self._inner_ok(e)
        if call is not None and inner_ok and depth < self.max_fuse_depth and isinstance(e.struct_info, TensorStructInfo) \
                and _same_shape(e.struct_info.shape or (), m.root_shape):
            if call.op.name == "relax.matmul":
                leaf = self._linear_leaf(call, m)
                if leaf is not None:
                    if not root:
                        m.consumed.append(e)
                    return leaf
            elif call.op.name in _UNARY or call.op.name in _BINARY or call.op.name == "relax.astype":
                if e.struct_info.dtype in _FLOATS:
                    return self._op_node(e, call, m, root, depth)
        return self._leaf(e, m)

    def _op_node(self, e, call: rx.Call, m: _Match, root: bool, depth: int):
        name = call.op.name
        mark = (len(m.tensors), len(m.weights), len(m.ops), len(m.consumed), m.x, m.out_dtype)
        if name == "relax.astype":
            dtype = call.attrs.get("dtype")
            child = self._node(call.args[0], m, depth=depth + 1)
            node = None if child is None else ("astype", dtype, child)
            op = "cast"
        elif name in _UNARY:
            child = self._node(call.args[0], m, depth=depth + 1)
            node = None if child is None else (_UNARY[name], child)
            op = _UNARY[name]
        else:
            a = self._node(call.args[0], m, depth=depth + 1)
            b = self._node(call.args[1], m, depth=depth + 1) if a is not None else None
            node = None if b is None else (_BINARY[name], a, b)
            op = _BINARY[name]
        if node is None:
            self._undo(m, mark)
            return self._leaf(e, m)
        m.ops.append(op)
        if not root:
            m.consumed.append(e)
        return node

    @staticmethod
    def _undo(m: _Match, mark) -> None:
        nt, nw, no, nc, x, od = mark
        del m.tensors[nt:], m.weights[nw:], m.ops[no:], m.consumed[nc:]
        m.x, m.out_dtype = x, od

    def _leaf(self, e: rx.Expr, m: _Match):
        s = e.struct_info
        if not isinstance(s, TensorStructInfo) or s.shape is None:
            return None
        if not isinstance(e, (rx.Var, rx.Constant)):
            return None
        if not _broadcasts_into(list(s.shape), m.root_shape):
            return None
        return ("tensor", m.tensor(e))

    # ------------------------------------------------------------------------------------------
    def _emit_linear(self, bb: BlockBuilder, tree, m: _Match):
        epi = [op for op in m.ops if op != "matmul"]
        hint = "matmul" if not epi else _hint(["matmul", *epi])
        try:
            call = linear_kernel_call(bb, m.x, list(m.tensors), [dict(w) for w in m.weights],
                                      epilogue=tree, out_dtype=m.out_dtype, name=hint)
        except (ValueError, TypeError):
            return None
        return call, m.consumed

    def _emit_elementwise(self, bb: BlockBuilder, tree, m: _Match):
        def fused(*ts):
            return topi.inline_injective(topi._replay(tree, [], ts))

        try:
            call = call_te(bb, fused, tuple(m.tensors), {}, _hint(m.ops))
        except (ValueError, TypeError):
            return None
        return call, m.consumed
