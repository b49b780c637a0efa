"""The exact GELU chains exporters write (``0.5 * x * (1 + erf(x / sqrt 2))``), found before the graph is
imported so that each becomes one ``gelu`` (which the pipeline fuses into a matmul's epilogue).
"""
from __future__ import annotations

import math

import numpy as np

from .proto import _attrs, _to_array


def _scalar_is(v, target: float, rel: float = 1e-6) -> bool:
    """Whether ``v`` is a one-element float constant within ``rel`` of ``target``."""
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
