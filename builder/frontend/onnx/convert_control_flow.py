"""Converters of If (the branch taken known at import time) and Loop (unrolled at import time, within
:data:`~.importer.MAX_UNROLLED_NODES`).
"""
from __future__ import annotations

import numpy as np

from ...nn import op
from .errors import ONNXImportError
from .importer import MAX_UNROLLED_NODES
from .registry import _check_inputs, _register


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
