"""Recurrent layers (ONNX ``LSTM`` / ``GRU`` / ``RNN``, ``torch.nn.LSTM`` / ``GRU`` / ``RNN``): the recurrence of
one direction as a PrimFunc. The input projection ``x @ W^T + W_bias`` of every step is one matmul in the
graph, before (the linear kernels run it); what cannot leave the loop -- the hidden state times ``R``, the
gates, the state updates -- is written here as loops, serial over time (as TVM's relay frontends unroll
them, but for any, also symbolic, sequence length).

Gates follow ONNX's layout of ``R`` and of the projected input (``G * H`` features per step): LSTM ``i, o,
f, c`` (Hochreiter & Schmidhuber 1997, with the forget gate of Gers et al. 2000), GRU ``z, r, h`` (Cho et al.
2014), RNN one (Elman 1990); the default activations (sigmoid for gates, tanh otherwise)::

    LSTM  i, o, f = sigmoid(xw + h R^T + rb);  c~ = tanh(...);  c' = f * c + i * c~;  h' = o * tanh(c')
    GRU   z, r = sigmoid(...);  h~ = tanh(xw_h + r * (h R_h^T + rb_h))   (linear_before_reset, PyTorch's)
                                h~ = tanh(xw_h + (r * h) R_h^T + rb_h)   (ONNX's default)
          h' = (1 - z) * h~ + z * h
    RNN   h' = tanh(xw + h R^T + rb)        (rnn_relu: max(0, ...))

Sums run in float32 (float64 for float64 data). Shapes: ``xw`` (S, B, G * H), ``r`` (G * H, H), ``rb``
(G * H,), ``h0`` / ``c0`` (B, H); outputs ``y`` (S, B, H) (each step's hidden state, in input order when
``reverse``), ``h`` (B, H), and for the LSTM ``c`` (B, H).
"""
from __future__ import annotations

from ...ir import expr as E
from ...ir import tir
from ...ir.op.nn import RNN_CELLS
from ..tensor import Tensor
from .common import assert_dims_le, cast_value, compute_dtype

__all__ = ["rnn_prim_func"]


def rnn_prim_func(xw: Tensor, r: Tensor, rb: Tensor, h0: Tensor, c0: Tensor | None = None, cell: str = "lstm",
                  reverse: bool = False, linear_before_reset: bool = False, name: str = "rnn") -> tir.PrimFunc:
    """The PrimFunc ``(xw, r, rb, h0, [c0], y, h, [c])`` of one direction of ``cell`` (see the module
    docstring). Raises ValueError for an unknown cell, a missing / extra ``c0``, or gate counts that do not
    match ``r``'s rows (when static)."""
    if cell not in RNN_CELLS:
        raise ValueError(f"rnn: cell must be one of {sorted(RNN_CELLS)}, got {cell!r}")
    if (c0 is not None) != (cell == "lstm"):
        raise ValueError("rnn: an LSTM needs c0, the other cells take none")
    gates = RNN_CELLS[cell]
    dt = xw.dtype
    cd = compute_dtype(dt)
    S, B = xw.shape[0], xw.shape[1]
    H = h0.shape[1]
    y = tir.Buffer("T_rnn_y", [S, B, H], dt)
    h_out = tir.Buffer("T_rnn_h", [B, H], dt)
    c_out = tir.Buffer("T_rnn_c", [B, H], dt) if cell == "lstm" else None
    h = tir.Buffer("rnn_h", [B, H], cd)
    c = tir.Buffer("rnn_c", [B, H], cd) if cell == "lstm" else None
    hr = tir.Buffer("rnn_hr", [B, H * gates], cd)        # h R^T + rb of this step
    rh = tir.Buffer("rnn_rh", [B, H], cd)                # GRU without linear_before_reset: r * h
    b, j, k, t, g = (E.Var(v, "int64") for v in ("b", "j", "k", "t", "g"))
    tt = E.Var("tt", "int64")
    one_c = E.const(1.0, cd)
    zero = E.const(0.0, cd)

    def ld(buf, *idx):
        return tir.BufferLoad(buf, list(idx))

    def up(v):
        return cast_value(v, cd)

    def x_at(gate):
        return up(xw.buffer[tt, b, H * gate + j])

    def hr_at(gate):
        return ld(hr, b, H * gate + j)

    def matvec(src, row0, rows):
        """``hr[b, row0 + g] = sum_k src[b, k] * r[row0 + g, k] + rb[row0 + g]`` for ``g < rows``."""
        acc = tir.Buffer("rnn_acc", [1], cd)
        z = E.IntImm(0, "int64")
        body = tir.SeqStmt([
            tir.BufferStore(acc, up(rb.buffer[row0 + g]), [z]),
            tir.For(k, 0, H, "serial", tir.BufferStore(
                acc, ld(acc, z) + ld(src, b, k) * up(r.buffer[row0 + g, k]), [z])),
            tir.BufferStore(hr, ld(acc, z), [b, row0 + g])])
        return tir.Allocate(acc, tir.For(b, 0, B, "serial", tir.For(g, 0, rows, "serial", body)))

    stmts: list[tir.Stmt] = [matvec(h, 0, H * gates)]
    if cell == "lstm":
        i_g, o_g, f_g = (tir.sigmoid(x_at(q) + hr_at(q)) for q in (0, 1, 2))
        cand = tir.tanh(x_at(3) + hr_at(3))
        c_new = f_g * ld(c, b, j) + i_g * cand
        update = tir.SeqStmt([tir.BufferStore(c, c_new, [b, j]),
                              tir.BufferStore(h, o_g * tir.tanh(ld(c, b, j)), [b, j])])
    elif cell == "gru":
        z_g = tir.sigmoid(x_at(0) + hr_at(0))
        if linear_before_reset:
            cand = tir.tanh(x_at(2) + tir.sigmoid(x_at(1) + hr_at(1)) * hr_at(2))
        else:   # (r * h) R_h^T + rb_h, once every r of the step is known, replaces h R_h^T + rb_h
            stmts.append(tir.For(b, 0, B, "serial", tir.For(j, 0, H, "serial", tir.BufferStore(
                rh, tir.sigmoid(x_at(1) + hr_at(1)) * ld(h, b, j), [b, j]))))
            stmts.append(matvec(rh, 2 * H, H))
            cand = tir.tanh(x_at(2) + hr_at(2))
        update = tir.BufferStore(h, (one_c - z_g) * cand + z_g * ld(h, b, j), [b, j])
    elif cell == "rnn_relu":
        update = tir.BufferStore(h, tir.maximum(x_at(0) + hr_at(0), zero), [b, j])
    else:
        update = tir.BufferStore(h, tir.tanh(x_at(0) + hr_at(0)), [b, j])
    stmts.append(tir.For(b, 0, B, "serial", tir.For(j, 0, H, "serial", tir.SeqStmt([
        update, tir.BufferStore(y, cast_value(ld(h, b, j), dt), [tt, b, j])]))))
    step = tir.LetStmt(tt, (S - 1 - t) if reverse else t, tir.SeqStmt(stmts))
    init = [tir.For(b, 0, B, "serial", tir.For(j, 0, H, "serial", tir.BufferStore(h, up(h0.buffer[b, j]), [b, j])))]
    fini = [tir.For(b, 0, B, "serial", tir.For(j, 0, H, "serial", tir.BufferStore(h_out, cast_value(ld(h, b, j), dt),
                                                                                [b, j])))]
    if cell == "lstm":
        init.append(tir.For(b, 0, B, "serial", tir.For(j, 0, H, "serial", tir.BufferStore(c, up(c0.buffer[b, j]),
                                                                                       [b, j]))))
        fini.append(tir.For(b, 0, B, "serial", tir.For(j, 0, H, "serial", tir.BufferStore(
            c_out, cast_value(ld(c, b, j), dt), [b, j]))))
    # every read within its buffer whatever the shapes (symbolic dims the graph could not relate)
    G = H * gates
    pairs = [(G, xw.shape[2]), (G, r.shape[0]), (H, r.shape[1]), (G, rb.shape[0]), (B, h0.shape[0])]
    if c0 is not None:
        pairs += [(B, c0.shape[0]), (H, c0.shape[1])]
    checks = assert_dims_le(pairs, "rnn: the weights, bias or states do not fit the hidden size")
    body: tir.Stmt = tir.SeqStmt(checks + init + [tir.For(t, 0, S, "serial", step)] + fini)
    needs_rh = cell == "gru" and not linear_before_reset
    for buf in (rh if needs_rh else None, hr, c, h):
        if buf is not None:
            body = tir.Allocate(buf, body)
    params = [xw.buffer, r.buffer, rb.buffer, h0.buffer] + ([c0.buffer] if c0 is not None else [])
    outs = [y, h_out] + ([c_out] if c_out is not None else [])
    func = tir.PrimFunc(params + outs, body, {"global_symbol": name, "tir.noalias": True}, name)
    tir.verify(func)
    return func
