"""Converters of the ONNX sequence ops (SplitToSequence, SequenceConstruct ... ConcatFromSequence), on
sequences whose length is known at import time (:class:`~.values._Sequence`).
"""
from __future__ import annotations

import numpy as np

from ...nn import op
from .convert_manipulation import MAX_SPLIT_PIECES, _split_axis, _split_pieces
from .errors import ONNXImportError
from .registry import _check_inputs, _register
from .values import _Sequence


def _seq(v, what: str) -> list:
    """The tensors of the sequence ``v``. Raises ONNXImportError when ``v`` is not a sequence (``what`` names the
    input)."""
    if not isinstance(v, _Sequence):
        raise ONNXImportError(f"{what} is not a sequence")
    return v.items


def _position(im, v, n: int, what: str, end_ok: bool = False) -> int:
    """A constant sequence position (``SequenceAt`` / ``SequenceInsert`` / ``SequenceErase``) as an index into ``n``
    items, negative ones counting from the end, ``n`` itself allowed with ``end_ok``. Raises ONNXImportError for a
    position out of range."""
    (pos,) = im.ints(v, what)
    if not -n <= pos < n + int(end_ok):
        raise ONNXImportError(f"{what} {pos} is out of range for a sequence of {n}")
    return pos % (n + int(end_ok)) if pos < 0 else pos


@_register("SplitToSequence")
def _split_to_sequence(im, node, ins, at):
    """``SplitToSequence``: ``split`` a scalar (chunks of that size, the last smaller), a 1-D list of sizes, or
    absent (pieces of 1, the split dim dropped when ``keepdims=0``); static sizes, at most
    :data:`MAX_SPLIT_PIECES` pieces."""
    _check_inputs(ins, node)
    x = ins[0]
    shape, axis = _split_axis(im, x, at)
    dim = shape[axis]
    split = ins[1] if len(ins) > 1 else None
    squeeze = False
    if split is None or (isinstance(split, np.ndarray) and split.ndim == 0):
        step = 1 if split is None else int(split)
        if not isinstance(dim, int) or step < 1 or -(-dim // step) > MAX_SPLIT_PIECES:
            raise ONNXImportError(f"the dim {dim} in pieces of {step} (static, at most {MAX_SPLIT_PIECES} pieces)")
        sizes = [min(step, dim - i) for i in range(0, dim, step)]
        squeeze = split is None and not int(at.get("keepdims", 1))
    else:
        sizes = im.ints(split, "split")
    parts = _split_pieces(im, x, shape, axis, sizes)
    if squeeze:
        parts = [p.squeeze(axis) if isinstance(p, np.ndarray) else op.squeeze(im.tensor(p), [axis]) for p in parts]
    return _Sequence(parts)


@_register("SequenceConstruct")
def _sequence_construct(im, node, ins, at):
    """ONNX ``SequenceConstruct`` (opset 11): the sequence of its inputs."""
    _check_inputs(ins, node)
    return _Sequence(ins)


@_register("SequenceEmpty")
def _sequence_empty(im, node, ins, at):
    """ONNX ``SequenceEmpty`` (opset 11): an empty sequence (its ``dtype`` is not needed)."""
    return _Sequence([])


@_register("SequenceAt")
def _sequence_at(im, node, ins, at):
    """``SequenceAt`` at a constant position (negative counts from the end)."""
    _check_inputs(ins, node)
    items = _seq(ins[0], "input")
    return items[_position(im, ins[1], len(items), "position")]


@_register("SequenceLength")
def _sequence_length(im, node, ins, at):
    """ONNX ``SequenceLength`` (opset 11): the number of tensors, an int64 scalar known at import time. Raises
    ONNXImportError for an input that is not a sequence."""
    _check_inputs(ins, node)
    return np.array(len(_seq(ins[0], "input")), np.int64)


@_register("SequenceInsert", "SequenceErase")
def _sequence_insert_erase(im, node, ins, at):
    """``SequenceInsert`` (at the end, or a constant position) / ``SequenceErase`` (the last, or a constant
    position): a new sequence."""
    _check_inputs(ins, node)
    items = list(_seq(ins[0], "input"))
    if node.op_type == "SequenceInsert":
        pos = _position(im, ins[2], len(items), "position", end_ok=True) if len(ins) > 2 and ins[2] is not None \
            else len(items)
        items.insert(pos, ins[1])
    else:
        if not items:
            raise ONNXImportError("SequenceErase of an empty sequence")
        pos = _position(im, ins[1], len(items), "position") if len(ins) > 1 and ins[1] is not None else -1
        del items[pos]
    return _Sequence(items)


@_register("ConcatFromSequence")
def _concat_from_sequence(im, node, ins, at):
    """``ConcatFromSequence``: the elements concatenated along ``axis`` (``new_axis=1``: stacked there)."""
    _check_inputs(ins, node)
    items = _seq(ins[0], "input")
    if not items:
        raise ONNXImportError("ConcatFromSequence of an empty sequence")
    ts = [im.tensor(v) for v in items]
    nd = len(ts[0].shape) + int(at.get("new_axis", 0))
    axis = int(at["axis"])
    if not -nd <= axis < nd:
        raise ONNXImportError(f"axis {axis} out of range")
    axis %= nd
    if int(at.get("new_axis", 0)):
        ts = [op.unsqueeze(t, axis) for t in ts]
    return ts[0] if len(ts) == 1 else op.concat(ts, dim=axis)
