"""``nn.op.rnn_recurrence`` (one direction of an LSTM / GRU / RNN, the loops of ``topi.recurrent``) against a
float64 numpy recurrence written from the formulas (ONNX's gate order), forward and reverse, GRU with and
without ``linear_before_reset``, symbolic sequence and batch lengths; and its shape checks."""
import numpy as np
import pytest

from builder.nn import op
from helpers.functional import export, jit

GATES = {"lstm": 4, "gru": 3, "rnn": 1, "rnn_relu": 1}


def sigmoid(v):
    return 1 / (1 + np.exp(-v))


def reference(cell, xw, r, rb, h0, c0, reverse, lbr):
    H = h0.shape[1]
    h, c = h0.astype(np.float64), None if c0 is None else c0.astype(np.float64)
    r, rb = r.astype(np.float64), rb.astype(np.float64)
    ys = np.zeros(xw.shape[:2] + (H,))
    for t in (range(len(xw) - 1, -1, -1) if reverse else range(len(xw))):
        x = xw[t].astype(np.float64)
        hr = h @ r.T + rb
        part = lambda a, q: a[:, q * H:(q + 1) * H]  # noqa: E731
        if cell == "lstm":
            i, o, f, g = (part(x, q) + part(hr, q) for q in range(4))
            c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
            h = sigmoid(o) * np.tanh(c)
        elif cell == "gru":
            z, rr = sigmoid(part(x, 0) + part(hr, 0)), sigmoid(part(x, 1) + part(hr, 1))
            if lbr:
                n = np.tanh(part(x, 2) + rr * part(hr, 2))
            else:
                n = np.tanh(part(x, 2) + (rr * h) @ r[2 * H:].T + rb[2 * H:])
            h = (1 - z) * n + z * h
        elif cell == "rnn_relu":
            h = np.maximum(x + hr, 0.0)
        else:
            h = np.tanh(x + hr)
        ys[t] = h
    return [ys, h] + ([c] if cell == "lstm" else [])


@pytest.mark.parametrize("cell,lbr", [("lstm", False), ("gru", False), ("gru", True), ("rnn", False), ("rnn_relu", False)])
@pytest.mark.parametrize("reverse", [False, True])
def test_recurrence_matches_numpy(cell, lbr, reverse):
    H, G = 4, GATES[cell]
    ins = dict(xw=(["s", "b", G * H], "float32"), r=([G * H, H], "float32"), rb=([G * H], "float32"),
               h0=(["b", H], "float32"))
    if cell == "lstm":
        ins["c0"] = (["b", H], "float32")
    f = jit(lambda *a: op.rnn_recurrence(*a, cell=cell, reverse=reverse, linear_before_reset=lbr), **ins)
    rng = np.random.default_rng(1)
    for s, b in ((1, 1), (6, 3)):
        args = [rng.standard_normal((s, b, G * H)), rng.standard_normal((G * H, H)) * 0.5,
                rng.standard_normal(G * H), rng.standard_normal((b, H))]
        if cell == "lstm":
            args.append(rng.standard_normal((b, H)))
        args = [a.astype(np.float32) for a in args]
        got = f(*args)
        want = reference(cell, *args[:4], args[4] if cell == "lstm" else None, reverse, lbr)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_recurrence_shape_checks():
    with pytest.raises(ValueError, match="does not fit 4 gates of 4 hidden units"):
        export(lambda x, r, b, h, c: op.rnn_recurrence(x, r, b, h, c), x=([2, 1, 12], "float32"),
               r=([16, 4], "float32"), b=([16], "float32"), h=([1, 4], "float32"), c=([1, 4], "float32"))
    with pytest.raises(ValueError, match="a lstm takes 5 inputs"):
        export(lambda x, r, b, h: op.rnn_recurrence(x, r, b, h), x=([2, 1, 16], "float32"), r=([16, 4], "float32"),
               b=([16], "float32"), h=([1, 4], "float32"))
    with pytest.raises(ValueError, match="cell must be one of"):
        export(lambda x, r, b, h: op.rnn_recurrence(x, r, b, h, cell="mgu"), x=([2, 1, 4], "float32"),
               r=([4, 4], "float32"), b=([4], "float32"), h=([1, 4], "float32"))


def test_recurrence_checks_symbolic_shapes_when_it_runs():
    """Weights whose sizes are symbolic cannot be checked when the graph is built: a recurrent weight with
    too few rows (or columns) is an error when the function runs, never a read past it."""
    f = jit(lambda x, r, b, h: op.rnn_recurrence(x, r, b, h, cell="rnn"), x=([2, 1, 4], "float32"),
            r=(["g", "k"], "float32"), b=([4], "float32"), h=([1, 4], "float32"))
    xw, rb, h0 = np.zeros((2, 1, 4), np.float32), np.zeros(4, np.float32), np.zeros((1, 4), np.float32)
    y, h = f(xw, np.eye(4, dtype=np.float32), rb, h0)
    np.testing.assert_allclose(y, 0.0)
    for bad in (np.zeros((3, 4), np.float32), np.zeros((4, 2), np.float32)):
        with pytest.raises(ValueError, match="do not fit the hidden size"):
            f(xw, bad, rb, h0)
