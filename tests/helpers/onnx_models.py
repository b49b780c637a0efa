"""ONNX test models: a ModelProto from nodes (checked), and our compiled result against onnxruntime's on
every output."""
from __future__ import annotations

import numpy as np


def make_model(nodes, inputs, outputs, inits=(), opset: int = 17, ir_version: int = 8):
    """A checked ``onnx.ModelProto`` of one graph: ``inits`` are ``(name, array)`` initializers; the default
    domain at ``opset``."""
    import onnx
    from onnx import helper, numpy_helper

    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=[numpy_helper.from_array(a, n) for n, a in inits])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = ir_version
    onnx.checker.check_model(model)
    return model


def runner_of_both(model):
    """``run(feeds) -> (ours, onnxruntime's)``, every output as a list, ``model`` compiled once by us."""
    import onnxruntime as ort

    import runtime
    from builder import compile as build
    from builder.frontend.onnx import from_onnx

    main = runtime.VirtualMachine(build(from_onnx(model)))["main"]
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])

    def run(feeds: dict):
        got = main(*feeds.values())
        got = [np.asarray(g) for g in (got if isinstance(got, (list, tuple)) else [got])]
        want = sess.run(None, feeds)
        assert len(got) == len(want)
        return got, want

    return run


def outputs_of_both(model, feeds: dict) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """``(ours, onnxruntime's)``: every output of ``model`` on ``feeds``."""
    return runner_of_both(model)(feeds)


def check_against_onnxruntime(model, feeds_list, tol: float = 2e-6) -> None:
    """Import and compile ``model`` once, run each feed dict, and compare every output with onnxruntime's
    (same shapes and dtypes, within ``tol`` absolute and relative)."""
    run = runner_of_both(model)
    for feeds in feeds_list:
        for g, w in zip(*run(feeds)):
            assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, g.dtype, w.shape, w.dtype)
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=tol, atol=tol)
