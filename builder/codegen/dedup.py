"""Identical kernels compiled once: :class:`KernelTwins` finds, for a PrimFunc, a function emitted
already that is structurally equal to it (:func:`builder.ir.structural_equal`: the same loops,
expressions, dtypes, shapes up to the renaming of buffers and variables, and the same attributes but
the symbol name). The code generator then emits the new function as an alias of the twin's entry
(:func:`builder.codegen.emit_llvm_ir`), so a model whose layers repeat (32 identical decoder
layers) pays LLVM for one copy of each distinct kernel.

Candidates are found by :func:`structural_key`, a hash of the function's structure with every
variable and buffer numbered by its first occurrence (names, and the symbol name, left out), and
confirmed by :func:`builder.ir.structural_equal`: the key only has to agree on equal functions
for the lookup to find them, and two functions share code only when the comparison says they
are equal. A model with N identical layers therefore costs one key per kernel and one comparison
per twin, not a comparison with every kernel seen before.

:func:`specialization` finds the other kind of sharing: a kernel that is an emitted one with some of its
symbolic dims fixed to constants (a decode step's linears, norms and rotary kernels, ``seq = 1``, and the
prefill ones; kernel-family kernels and loops alike), shown by equal structure tokens once those vars are
written as the constants; its entry then calls the general body with them.
"""
from __future__ import annotations

import hashlib

from ..ir import expr as E
from ..ir import tir
from ..ir.arith import simplify, substitute
from ..ir.structural import structural_equal
from ..ir.tir import PrimFunc

__all__ = ["KernelTwins", "structural_key", "specialization"]


def _anonymous(func: PrimFunc) -> PrimFunc:
    """``func`` without its name (the ``global_symbol`` attribute and the name hint)."""
    attrs = {k: v for k, v in func.attrs.items() if k != "global_symbol"}
    return PrimFunc(func.params, func.body, attrs, "kernel")


class _KeyWriter:
    """Writes the tokens of a PrimFunc's structure; variables and buffers become ``v<k>`` /
    ``b<k>`` by order of first occurrence. With ``unit_iters`` the var of a loop or block iterator of
    extent 1 is written as its start (the only value it takes), so that a kernel whose shapes fix a dim
    to 1 (and whose index expressions say ``0`` there) reads like the general one with that dim
    fixed."""

    def __init__(self, unit_iters: bool = False, fixed: dict | None = None, canonical: bool = False) -> None:
        self.out: list[str] = []
        self.ids: dict[int, str] = {}
        self.unit_iters = unit_iters
        self.units: dict[int, object] = {}   # id(iterator var) -> its start, when its extent is 1
        # Var -> IntImm: substituted into every expression before it is written, its constants refolded as
        # the expression builders fold them (``max_blocks * block_size - seq + 1`` at seq = 1 reads
        # ``max_blocks * block_size``, as a function built with that constant says it)
        self.fixed = fixed or {}
        # integer expressions written in :func:`builder.ir.arith.simplify`'s canonical form (exact integer
        # arithmetic), so that the two sides of :func:`specialization` agree however their builders folded
        self.canonical = canonical
        self._substituting = False

    def _fix(self, e):
        """``e`` with the fixed vars substituted (a PrimExpr; anything else as it is)."""
        return substitute(e, self.fixed) if self.fixed and isinstance(e, E.PrimExpr) else e

    def _canonical(self, e):
        """``e`` simplified when :attr:`canonical` is on and it is an integer expression (not a lone var or
        constant); as it is otherwise, or when it is too large to simplify."""
        if (self.canonical and isinstance(e, E.PrimExpr) and not isinstance(e, (E.Var, E.IntImm, tir.BufferLoad))
                and e.dtype.startswith(("int", "uint"))):
            try:
                return simplify(e)
            except ValueError:
                return e
        return e

    def iterator(self, var: E.Var, start, extent) -> None:
        """Record ``var`` as a unit iterator (written as ``start``) when ``unit_iters`` is on and
        ``extent`` is 1 (a constant, or an expression of the fixed vars that is 1)."""
        extent = self._canonical(self._fix(extent))
        if self.unit_iters and isinstance(extent, E.IntImm) and extent.value == 1:
            self.units[id(var)] = start

    def ref(self, obj, prefix: str) -> str:
        name = self.ids.get(id(obj))
        if name is None:
            name = self.ids[id(obj)] = f"{prefix}{len(self.ids)}"
        return name

    def buffer(self, buf: tir.Buffer) -> None:
        known = id(buf) in self.ids
        self.out.append(self.ref(buf, "b"))
        if not known:
            self.out.append(buf.dtype)
            for d in buf.shape:
                self.expr(d)
            self.out.append(";")

    def expr(self, e) -> None:
        if self.fixed and not self._substituting and isinstance(e, E.PrimExpr):
            self._substituting = True   # once per expression tree: its subtrees are substituted already
            try:
                self.expr(self._fix(e))
            finally:
                self._substituting = False
            return
        e = self._canonical(e)   # each integer node simplified (its children in turn, below)
        out = self.out
        if isinstance(e, E.Var):
            if id(e) in self.units:
                self.expr(self.units[id(e)])
            else:
                out.append(self.ref(e, "v") + ":" + e.dtype)
            return
        if isinstance(e, (E.IntImm, E.FloatImm, E.StringImm)):
            out.append(f"{type(e).__name__}:{e.dtype}:{e.value!r}")
            return
        if isinstance(e, tir.BufferLoad):
            out.append("load(")
            self.buffer(e.buffer)
            for i in e.indices:
                self.expr(i)
            out.append(")")
            return
        if not isinstance(e, E.PrimExpr):
            out.append(repr(e))
            return
        out.append(f"{type(e).__name__}:{e.dtype}")
        if isinstance(e, E.Call):
            out.append(str(getattr(e.op, "name", e.op)))
        if isinstance(e, E.Let):
            self.expr(e.var)
        out.append("(")
        for c in E._children(e):
            self.expr(c)
        out.append(")")

    def stmt(self, s) -> None:
        out = self.out
        if s is None:
            out.append("none")
            return
        out.append(type(s).__name__ + "{")
        if isinstance(s, tir.Block):
            out.append(s.name)
            for iv in s.iter_vars:
                out.append(iv.kind)
                self.iterator(iv.var, iv.dom.min, iv.dom.extent)
                self.expr(iv.var)
                self.expr(iv.dom.min)
                self.expr(iv.dom.extent)
            for buf in s.alloc_buffers:
                self.buffer(buf)
            for region in (*s.reads, *s.writes):
                self.buffer(region.buffer)
            out.append(repr(sorted(s.annotations.items())))
            self.stmt(s.init)
            self.stmt(s.body)
        elif isinstance(s, tir.For):
            out.append(s.kind)
            self.iterator(s.loop_var, s.min, s.extent)
            self.expr(s.loop_var)
            out.append(repr(sorted(s.annotations.items())))
            self.expr(s.min)
            self.expr(s.extent)
            self.stmt(s.body)
        elif isinstance(s, tir.Allocate):
            self.buffer(s.buffer)
            self.stmt(s.body)
        elif isinstance(s, tir.BufferStore):
            self.buffer(s.buffer)
            for e in (*s.indices, s.value):
                self.expr(e)
        elif isinstance(s, tir.LetStmt):
            self.expr(s.var)
            self.expr(s.value)
            self.stmt(s.body)
        else:   # SeqStmt, IfThenElse, Evaluate, BlockRealize: expressions, then statements
            for e in tir.stmt_exprs(s):
                self.expr(e)
            for c in tir.stmt_children(s):
                self.stmt(c)
        out.append("}")


def _tokens(func: PrimFunc, unit_iters: bool = False, fixed: dict | None = None,
            canonical: bool = False) -> list[str]:
    """The structure tokens of ``func`` (see :func:`structural_key`); ``fixed`` (``Var -> IntImm``) substitutes
    those variables into every expression first (constants refolded), ``canonical`` writes integer expressions
    simplified, ``unit_iters`` writes the iterators of extent 1 as their start."""
    w = _KeyWriter(unit_iters, fixed, canonical)
    for p in func.params:
        w.buffer(p)
    w.out.append(repr(sorted((k, repr(v)) for k, v in func.attrs.items() if k != "global_symbol")))
    w.stmt(func.body)
    return w.out


def specialization(general: PrimFunc, func: PrimFunc) -> list | None:
    """How ``func`` is ``general`` with some of its symbolic dims fixed: for each of ``general.sym_vars``
    (in that order) either an int (the constant ``func`` has in its place) or the Var of ``func`` that
    stands there; None unless at least one var is fixed and ``general`` with those vars written as the
    constants (substituted into every expression, constants refolded, the integer expressions of both sides
    in :func:`builder.ir.arith.simplify`'s canonical form) has exactly ``func``'s structure tokens
    (:func:`structural_key`'s, unhashed), the vars of iterators of extent 1 written as their start on both sides (the legalized ``seq = 1`` kernel indexes
    ``0`` where the general one has the iterator over ``[0, seq)``; both take only that value). A decode
    step's kernel (``seq`` = 1) is then the prefill kernel called with ``seq = 1``."""
    if len(general.params) != len(func.params):
        return None
    fixed: dict[int, int] = {}
    same: dict[int, E.Var] = {}
    for gp, fp in zip(general.params, func.params):
        if gp.dtype != fp.dtype or len(gp.shape) != len(fp.shape):
            return None
        for gd, fd in zip(gp.shape, fp.shape):
            if isinstance(gd, E.Var) and isinstance(fd, E.IntImm):
                if fixed.setdefault(id(gd), fd.value) != fd.value:
                    return None
            elif isinstance(gd, E.Var) and isinstance(fd, E.Var):
                if same.setdefault(id(gd), fd) is not fd:
                    return None
            elif isinstance(gd, E.IntImm) and isinstance(fd, E.IntImm) and gd.value != fd.value:
                return None
    if not fixed:
        return None
    order = []
    for v in general.sym_vars:
        if id(v) in fixed:
            order.append(fixed[id(v)])
        elif id(v) in same:
            order.append(same[id(v)])
        else:
            return None
    values = {v: E.IntImm(fixed[id(v)], v.dtype) for v in general.sym_vars if id(v) in fixed}
    if _tokens(_anonymous(general), True, values, True) != _tokens(_anonymous(func), True, canonical=True):
        return None
    return order


def structural_key(func: PrimFunc) -> str:
    """A hex digest of ``func``'s structure, names aside: the parameters' dtypes and shapes, the
    attributes but ``global_symbol``, and every statement and expression with variables and buffers
    numbered by first occurrence. Functions that :func:`builder.ir.structural_equal` finds equal
    because they were built the same way (the layers of a model) get the same key; a key is not a
    proof of equality (:class:`KernelTwins` confirms with the comparison)."""
    return hashlib.blake2b("\x00".join(_tokens(func)).encode(), digest_size=16).hexdigest()


class KernelTwins:
    """The functions emitted so far, by :func:`structural_key`. ``find(func)`` returns the name of
    an emitted function structurally equal to ``func`` (or None); ``add(name, func)`` records one.
    The key of the last ``find`` is kept, so ``find`` then ``add`` of the same function hashes it
    once."""

    def __init__(self) -> None:
        self._seen: dict[str, list[tuple[str, PrimFunc]]] = {}
        self._last: tuple[PrimFunc, str] | None = None

    def _key(self, func: PrimFunc) -> str:
        if self._last is not None and self._last[0] is func:
            return self._last[1]
        key = structural_key(func)
        self._last = (func, key)
        return key

    def find(self, func: PrimFunc) -> str | None:
        """The name of an emitted function structurally equal to ``func`` (free variables mapped, names
        aside: :func:`builder.ir.structural_equal` of the anonymized functions under the same
        :func:`structural_key`), or None when there is none."""
        anon = None
        for name, other in self._seen.get(self._key(func), ()):
            anon = anon or _anonymous(func)
            if structural_equal(anon, other, map_free_vars=True):
                return name
        return None

    def add(self, name: str, func: PrimFunc) -> None:
        """Record that ``func`` was emitted as ``name`` (later :meth:`find` calls of a structurally equal
        function return ``name``)."""
        self._seen.setdefault(self._key(func), []).append((name, _anonymous(func)))
