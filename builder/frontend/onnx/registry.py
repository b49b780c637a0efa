"""The converter table: ONNX op type (``domain:Op`` outside the default domain) -> ``fn(importer, node,
inputs, attrs)`` returning the node's output value(s); each converter registers itself once with
:func:`_register` (the ``convert_*`` modules, imported by the package).
"""
from __future__ import annotations

from collections.abc import Callable

from .errors import ONNXImportError
from .values import _Unavailable


_CONVERTERS: dict[str, Callable] = {}


def _op_key(node) -> str:
    """A node's converter key: its op type in the default domain, ``domain:op`` elsewhere
    (``com.microsoft:MatMulNBits``)."""
    return node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}:{node.op_type}"


def _register(*names: str):
    """Decorator: register the converter ``fn(importer, node, inputs, attrs)`` for each op type in ``names``
    (``domain:Op`` outside the default domain). A converter returns the node's output value(s): numpy arrays
    (static), :class:`~.values._Sym` (symbolic), ``nn.Tensor`` or :class:`~.values._Sequence`; it raises
    ONNXImportError (or ValueError / TypeError, which the importer wraps naming the node).

    Raises ValueError (at import) for an op type registered twice: one converter per op type, never a later
    one silently replacing another."""
    def deco(fn):
        for n in names:
            if n in _CONVERTERS:
                raise ValueError(f"ONNX op {n!r} has two converters: {_CONVERTERS[n].__qualname__} in "
                                 f"{_CONVERTERS[n].__module__} and {fn.__qualname__} in {fn.__module__}")
        for n in names:
            _CONVERTERS[n] = fn
        return fn
    return deco


def _check_inputs(ins: list, node) -> None:
    """Raise ONNXImportError when one of ``ins`` is an optional output this importer does not compute
    (:class:`~.values._Unavailable`), naming it and its producer."""
    for v in ins:
        if isinstance(v, _Unavailable):
            raise ONNXImportError(f"reads the optional output {v.name!r} of {v.node.op_type}, which is not "
                                  "computed by this importer")
