"""Linear algebra: ``matmul`` (``numpy.matmul`` semantics) and ``einsum`` (lowered to it)."""
from __future__ import annotations

from typing import Sequence

from ..core import Tensor, wrap_nested
from .common import op_call


def matmul(a: Tensor, b: Tensor, out_dtype: str | None = None, name: str = "matmul") -> Tensor:
    """``numpy.matmul(a, b)``: ``(..., m, k) @ (..., k, n) -> (..., m, n)``, batch dims broadcast.

    ``out_dtype`` (default: the inputs' dtype) is the result dtype; float16 inputs accumulate
    in float32. Raises ValueError when the reduction dims differ.
    """
    return wrap_nested(op_call("matmul", [a._expr, b._expr], out_dtype=out_dtype or "void"), name)


def _diagonal(x: Tensor, i: int, j: int) -> Tensor:
    """The diagonal of dims ``i`` < ``j`` of ``x`` (equal static sizes ``n``) as its last dim, the other dims
    in order: the two dims moved last and flattened, then positions ``k * (n + 1)`` taken."""
    import numpy as np

    from ...ir import relax as rx
    from .manipulation import permute_dims, reshape, take

    n, m = x.shape[i], x.shape[j]
    if not isinstance(n, int) or not isinstance(m, int):
        raise ValueError(f"einsum: a repeated label over the symbolic sizes {n} and {m} (diagonals need static sizes)")
    if n != m:
        raise ValueError(f"einsum: a repeated label has sizes {n} and {m}")
    rest = [d for d in range(x.ndim) if d not in (i, j)]
    flat = reshape(permute_dims(x, rest + [i, j]), [x.shape[d] for d in rest] + [n * n])
    positions = Tensor(_expr=rx.Constant(np.arange(n, dtype=np.int64) * (n + 1), "int64"))
    return take(flat, positions, axis=len(rest))


def einsum(subscripts: str, operands: Sequence[Tensor], name: str = "einsum") -> Tensor:
    """Einstein summation (``numpy.einsum`` / ``torch.einsum`` / ONNX ``Einsum``) of one or two operands,
    lowered to the ops kernel selection knows: labels in one operand only and not in the output are
    summed first; then, for two operands, the labels of both and the output are batch dims, those of
    both but not the output are contracted, and the rest are each operand's free dims::

        a -> permute / reshape (batch, free_a, contracted)    b -> (batch, contracted, free_b)
        out = reshape(matmul(a, b), batch + free_a + free_b) permuted to the output's order

    ``subscripts``: ``"bij,bjk->bik"`` (explicit output) or without ``->`` (the output is the labels
    seen once, sorted, as numpy does); ``...`` for leading broadcast dims of the same rank in each
    operand; a label repeated within one operand takes the diagonal of its dims first (``"ii->"``, the
    trace; ``"bii->bi"``; static sizes). Raises ValueError for more than two operands, differing sizes of a
    label, a repeated label over symbolic sizes, or an output label no operand has."""
    import numpy as np

    from .manipulation import permute_dims, reshape

    operands = list(operands)
    from .reduction import sum as reduce_sum

    if not 1 <= len(operands) <= 2:
        raise ValueError(f"einsum: one or two operands are supported, got {len(operands)}")
    eq = subscripts.replace(" ", "")
    lhs, arrow, out = eq.partition("->")
    ins = lhs.split(",")
    if len(ins) != len(operands):
        raise ValueError(f"einsum: {subscripts!r} names {len(ins)} operands, got {len(operands)}")
    # '...' -> fresh labels for the broadcast dims (upper-case digits would collide: use chr offsets)
    ell = None
    for i, (sub, x) in enumerate(zip(ins, operands)):
        if "..." in sub:
            n = x.ndim - (len(sub) - 3)
            if ell is not None and ell != n or n < 0:
                raise ValueError(f"einsum: '...' covers different ranks in {subscripts!r}")
            ell = n
    dots = "".join(chr(0x3b1 + i) for i in range(ell or 0))      # greek letters: never in an equation
    ins = [sub.replace("...", dots) for sub in ins]
    if arrow:
        out = out.replace("...", dots)
    else:
        counts = {c: sum(s.count(c) for s in ins) for c in set("".join(ins))}
        out = dots + "".join(sorted(c for c, n in counts.items() if n == 1 and c not in dots))
    for sub, x in zip(ins, operands):
        if len(sub) != x.ndim:
            raise ValueError(f"einsum: {sub!r} has {len(sub)} labels for a {x.ndim}-D operand")
    for k, (sub, x) in enumerate(zip(ins, operands)):
        while len(set(sub)) != len(sub):      # a repeated label: the diagonal of its two dims
            c = next(c for c in sub if sub.count(c) > 1)
            i, j = sub.index(c), sub.index(c, sub.index(c) + 1)
            x = _diagonal(x, i, j)
            sub = "".join(l for m, l in enumerate(sub) if m not in (i, j)) + c
        ins[k], operands[k] = sub, x
    sizes: dict = {}
    for sub, x in zip(ins, operands):
        for c, d in zip(sub, x.shape):
            if c in sizes and isinstance(d, int) and isinstance(sizes[c], int) and d != sizes[c] and 1 not in (d, sizes[c]):
                raise ValueError(f"einsum: label {c!r} has sizes {sizes[c]} and {d}")
            if c not in sizes or sizes[c] == 1:
                sizes[c] = d
    if any(c not in sizes for c in out) or len(set(out)) != len(out):
        raise ValueError(f"einsum: the output {out!r} names a label no operand has, or one twice")

    def reduce_only(x, sub, keep):
        axes = [i for i, c in enumerate(sub) if c not in keep]
        if not axes:
            return x, sub
        return reduce_sum(x, axis=axes), "".join(c for c in sub if c in keep)

    if len(operands) == 1:
        x, sub = reduce_only(operands[0], ins[0], set(out))
        return permute_dims(x, [sub.index(c) for c in out], name=name) if sub != out else x
    (a, sa), (b, sb) = [reduce_only(x, s, set(out) | set(other))
                        for x, s, other in ((operands[0], ins[0], ins[1]), (operands[1], ins[1], ins[0]))]
    batch = [c for c in sa if c in sb and c in out]
    contr = [c for c in sa if c in sb and c not in out]
    free_a = [c for c in sa if c not in sb]
    free_b = [c for c in sb if c not in sa]

    def prod(labels):
        dims = [sizes[c] for c in labels]
        if all(isinstance(d, int) for d in dims):
            return int(np.prod(dims, dtype=np.int64)) if dims else 1
        p = dims[0] if dims else 1
        for d in dims[1:]:
            p = p * d
        return p

    a3 = reshape(permute_dims(a, [sa.index(c) for c in batch + free_a + contr]),
                 [sizes[c] for c in batch] + [prod(free_a), prod(contr)])
    b3 = reshape(permute_dims(b, [sb.index(c) for c in batch + contr + free_b]),
                 [sizes[c] for c in batch] + [prod(contr), prod(free_b)])
    y = reshape(matmul(a3, b3), [sizes[c] for c in batch + free_a + free_b])
    got = batch + free_a + free_b
    return permute_dims(y, [got.index(c) for c in out], name=name) if got != list(out) else y
