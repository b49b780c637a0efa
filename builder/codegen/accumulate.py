"""Reductions accumulate in a register: a rewrite of lowered PrimFuncs (after
:func:`builder.codegen.lower.lower`, before :mod:`builder.codegen.llvm_emit`).

:func:`~builder.codegen.lower.lower` writes a reduction whose init it could hoist as::

    C[idx] = init
    for k0, k1, ...:                  # serial loops, none of whose vars occur in idx
        C[idx] = f(C[idx], ...)

Each iteration then loads and stores ``C[idx]`` through memory. When the loop nest is fully
unrolled (the 32-wide dot product of an attention score), LLVM's ``LoopLoadElimination`` and
``LoopStrengthReduce`` analyse every one of those memory accesses against every other in the
enclosing loop: measured on the attention kernel of a MiniLM layer, those two passes took 2.0 of
the 2.45 s LLVM spent on it. :func:`promote_accumulators` rewrites the pattern to::

    Allocate acc[1]                   # a 1-element stack slot: LLVM's SROA makes it a register
    acc[0] = init
    for k0, k1, ...:
        acc[0] = f(acc[0], ...)
    C[idx] = acc[0]

which computes the same values in the same order (``acc`` has ``C``'s dtype, so a bfloat16 or
float16 accumulator still rounds after each step exactly as the store to ``C`` did) and leaves
the optimizer one store per reduction.

That alone does not stop the blow-up: LLVM fully unrolls a reduction of constant extent (32),
and the loop vectorizer then vectorizes the *enclosing* loop instead, as interleaved groups of
32 strided loads (900 lines of IR for ``S[i, j] = sum_d q[i, d] * k[j, d]``), which is what those
two passes choke on. So the innermost loop of a promoted reduction with a constant extent
between :data:`MIN_KEPT_LOOP` and :data:`MAX_KEPT_LOOP` is annotated ``NO_UNROLL``
(``llvm.loop.unroll.disable``, see :mod:`builder.codegen.llvm_emit`): LLVM vectorizes the
reduction itself (``<8 x float>`` multiply-adds along ``d``) and unrolls the loop around it.
Measured (2-core AMD EPYC): the attention score alone 1.42 s of optimization -> 0.06 s; the whole
attention kernel of MiniLM (12 heads of 32) 2.6 s -> 0.42 s to compile, and as fast to run
(8.2-8.6 ms -> 7.2-8.5 ms at 128 tokens).

The rewrite applies only when it is exact: the nest is a perfect chain of non-parallel ``For``
loops ending in one ``BufferStore`` to ``C`` at indices structurally equal to the init's,
``C`` is read inside only at those indices, the init value does not read ``C``, and the loop
bounds do not read ``C``. Anything else is left as it is.
"""
from __future__ import annotations

from ..ir import expr as E
from ..ir import tir
from ..ir.structural import structural_equal
from ..ir.tir import Allocate, Buffer, BufferLoad, BufferStore, For, PrimFunc, SeqStmt, Stmt
from .llvm_emit import NO_UNROLL

__all__ = ["promote_accumulators", "MIN_KEPT_LOOP", "MAX_KEPT_LOOP"]

#: The innermost loop of a promoted reduction with a constant extent in
#: ``[MIN_KEPT_LOOP, MAX_KEPT_LOOP]`` iterations is annotated
#: :data:`~builder.codegen.llvm_emit.NO_UNROLL` (see the module docstring). Shorter ones are fine
#: as straight-line code; longer ones LLVM never unrolls fully, and there the unroller's partial
#: unrolling of the vectorized loop is worth keeping (measured: RMSNorm over 4096 values 7%
#: slower with the annotation).
MIN_KEPT_LOOP = 8
MAX_KEPT_LOOP = 256


def _same_indices(a, b) -> bool:
    return len(a) == len(b) and all(x is y or structural_equal(x, y) for x, y in zip(a, b))


def _reads(e, buf: Buffer) -> list[BufferLoad]:
    return [ld for ld in tir.buffer_loads(e) if ld.buffer is buf]


class _ToAccumulator(tir.ExprMutator):
    """Replaces loads of ``buf`` at ``indices`` with loads of ``acc[0]``; ``ok`` turns False when
    ``buf`` is read at other indices."""

    def __init__(self, buf: Buffer, indices, acc: Buffer) -> None:
        self.buf, self.indices, self.acc = buf, indices, acc
        self.ok = True

    def visit_buffer_load(self, e: BufferLoad):
        if e.buffer is self.buf:
            if not _same_indices(e.indices, self.indices):
                self.ok = False
                return e
            return BufferLoad(self.acc, [0])
        return self.generic_visit_expr(e)


def _promote(init: BufferStore, nest: For) -> Stmt | None:
    """The register form of ``init; nest`` (see the module docstring), or None when it does not
    apply."""
    buf, idx = init.buffer, init.indices
    if _reads(init.value, buf) or any(_reads(i, buf) for i in idx):
        return None
    chain = [nest]
    while isinstance(chain[-1].body, For):
        chain.append(chain[-1].body)
    leaf = chain[-1].body
    if not isinstance(leaf, BufferStore) or leaf.buffer is not buf or not _same_indices(leaf.indices, idx):
        return None
    loop_vars = {id(c.loop_var) for c in chain}
    for c in chain:
        if c.kind == "parallel" or _reads(c.min, buf) or _reads(c.extent, buf):
            return None
    if any(id(v) in loop_vars for i in idx for v in E.free_vars(i)):
        return None
    acc = Buffer(f"{buf.name}_acc", (1,), buf.dtype)
    rewrite = _ToAccumulator(buf, idx, acc)
    value = rewrite.visit_expr(leaf.value)
    if not rewrite.ok or any(_reads(i, buf) for i in leaf.indices):
        return None
    body: Stmt = BufferStore(acc, value, [0])
    for c in reversed(chain):
        notes = c.annotations
        if (c is chain[-1] and isinstance(c.extent, E.IntImm)
                and MIN_KEPT_LOOP <= c.extent.value <= MAX_KEPT_LOOP):
            notes = {**notes, NO_UNROLL: True}
        body = For(c.loop_var, c.min, c.extent, c.kind, body, notes)
    return Allocate(acc, SeqStmt([BufferStore(acc, init.value, [0]), body,
                                  BufferStore(buf, BufferLoad(acc, [0]), list(idx))]))


class _Promoter(tir.StmtExprMutator):
    def visit_expr(self, e):
        return e

    def visit_seq_stmt(self, s: SeqStmt) -> Stmt:
        items = [self.visit_stmt(c) for c in s.seq]
        out: list[Stmt] = []
        i = 0
        while i < len(items):
            a = items[i]
            if (i + 1 < len(items) and isinstance(a, BufferStore) and isinstance(items[i + 1], For)):
                promoted = _promote(a, items[i + 1])
                if promoted is not None:
                    out.append(promoted)
                    i += 2
                    continue
            out.append(a)
            i += 1
        return SeqStmt.flatten(out)


def promote_accumulators(func: PrimFunc) -> PrimFunc:
    """``func`` (lowered: no blocks) with its hoisted reductions accumulating in 1-element local
    buffers (see the module docstring); a new PrimFunc with the same params, attrs and name. The
    result computes bit-identical values."""
    body = _Promoter().visit_stmt(func.body)
    return PrimFunc(func.params, body, dict(func.attrs), func.name)
