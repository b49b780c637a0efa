"""Converter of the ONNX recurrent layers LSTM, GRU and RNN (``nn.op`` recurrent cells).
"""
from __future__ import annotations

import numpy as np

from ...nn import op
from .errors import ONNXImportError
from .registry import _check_inputs, _register
from .shape_folding import _simp


_RNN_DEFAULT_ACTIVATIONS = {"LSTM": ["Sigmoid", "Tanh", "Tanh"], "GRU": ["Sigmoid", "Tanh"], "RNN": ["Tanh"]}


@_register("LSTM", "GRU", "RNN")
def _recurrent(im, node, ins, at):
    """``LSTM`` / ``GRU`` / ``RNN`` (forward, reverse or bidirectional; ``layout`` 0 or 1): per direction the
    input projection as one matmul and the recurrence as one kernel (:func:`builder.nn.op.recurrent_layer`;
    ONNX's gate order, GRU's ``linear_before_reset``; RNN with Relu activations). Raises ONNXImportError for
    other activations,
    ``clip``, ``input_forget``, peepholes, and ``sequence_lens`` other than the full length."""
    _check_inputs(ins, node)
    kind = node.op_type
    opt = lambda i: ins[i] if len(ins) > i and ins[i] is not None else None  # noqa: E731
    acts = [a.decode() if isinstance(a, bytes) else a for a in at.get("activations", [])]
    direction = at.get("direction", "forward")
    direction = direction.decode() if isinstance(direction, bytes) else direction
    dirs = {"forward": [False], "reverse": [True], "bidirectional": [False, True]}.get(direction)
    if dirs is None:
        raise ONNXImportError(f"unknown direction {direction!r}")
    relu = kind == "RNN" and acts and all(a.lower() == "relu" for a in acts)
    if acts and not relu and [a.lower() for a in acts] != [a.lower() for a in _RNN_DEFAULT_ACTIVATIONS[kind] * len(dirs)]:
        raise ONNXImportError(f"activations {acts} are not supported (the defaults, or Relu for RNN)")
    if "clip" in at or int(at.get("input_forget", 0)) or opt(7) is not None:
        raise ONNXImportError("clip, input_forget and peepholes are not supported")
    x = im.tensor(ins[0])
    layout = int(at.get("layout", 0))
    if layout:
        x = op.permute_dims(x, [1, 0, 2])                     # (S, B, I)
    lens = opt(4)
    if lens is not None:
        full = _simp(x.shape[0])
        if not (isinstance(lens, np.ndarray) and isinstance(full, int) and (lens == full).all()):
            raise ONNXImportError("sequence_lens shorter than the sequence are not supported")
    cell = "rnn_relu" if relu else kind.lower()
    gates = {"lstm": 4, "gru": 3, "rnn": 1, "rnn_relu": 1}[cell]
    H = int(at["hidden_size"])
    w, r, b = ins[1], ins[2], opt(3)
    h0, c0 = opt(5), opt(6)
    batch = x.shape[1]
    ys, hs, cs = [], [], []
    for d, reverse in enumerate(dirs):
        pick = lambda v: v[d] if isinstance(v, np.ndarray) else op.squeeze(  # noqa: E731
            op.strided_slice(im.tensor(v), [0], [d], [d + 1]), [0])
        wd, rd = pick(w), pick(r)
        wb = rb = None
        if b is not None:
            bd = pick(b)
            wb = bd[:gates * H] if isinstance(bd, np.ndarray) else op.strided_slice(bd, [0], [0], [gates * H])
            rb = bd[gates * H:] if isinstance(bd, np.ndarray) else op.strided_slice(bd, [0], [gates * H], [2 * gates * H])
        zero_state = op.zeros([batch, H], dtype=x.dtype)
        h0d = pick(h0) if h0 is not None else zero_state
        c0d = (pick(c0) if c0 is not None else zero_state) if cell == "lstm" else None
        out = op.recurrent_layer(x, im.tensor(wd), im.tensor(rd), None if wb is None else im.tensor(wb),
                                 None if rb is None else im.tensor(rb), im.tensor(h0d),
                                 None if c0d is None else im.tensor(c0d), cell=cell, reverse=reverse,
                                 linear_before_reset=bool(int(at.get("linear_before_reset", 0))))
        ys.append(op.unsqueeze(out[0], 1))
        hs.append(op.unsqueeze(out[1], 0))
        if cell == "lstm":
            cs.append(op.unsqueeze(out[2], 0))
    cat = lambda parts, axis: parts[0] if len(parts) == 1 else op.concat(parts, axis)  # noqa: E731
    y, y_h = cat(ys, 1), cat(hs, 0)                        # (S, D, B, H), (D, B, H)
    if layout:
        y, y_h = op.permute_dims(y, [2, 0, 1, 3]), op.permute_dims(y_h, [1, 0, 2])
    outs = [y, y_h]
    if cell == "lstm":
        y_c = cat(cs, 0)
        outs.append(op.permute_dims(y_c, [1, 0, 2]) if layout else y_c)
    return tuple(outs)
