"""Normalizations and softmax: layer_norm, rms_norm, group_norm, softmax (each one pass per row where
the schedule allows).
"""
from __future__ import annotations


from ...ir import expr as E
from ...ir import tir
from ...ir.op.common import fmt_shape, static_int
from ...ir.op.reduction import reduced_shape
from .. import tensor as _te
from ..tensor import Tensor
from .common import (
    cast_value, element_count, full_index, kept_index, norm_acc_dtype, normalize_axes, normalize_axis, reduce_axes,
)

__all__ = ["group_norm", "layer_norm", "rms_norm", "softmax"]


def _check_param(p: Tensor | None, x: Tensor, axes: list[int], what: str) -> None:
    if p is None:
        return
    expected = [x.shape[a] for a in axes]
    if p.ndim != len(expected):
        raise ValueError(f"{what} shape {fmt_shape(p.shape)} does not match the normalized dims "
                         f"{fmt_shape(expected)} of {fmt_shape(x.shape)}")
    for d, e in zip(p.shape, expected):
        sd, se = static_int(d), static_int(e)
        if sd is not None and se is not None and sd != se:
            raise ValueError(f"{what} shape {fmt_shape(p.shape)} does not match the normalized "
                             f"dims {fmt_shape(expected)} of {fmt_shape(x.shape)}")


def layer_norm(x: Tensor, gamma: Tensor | None, beta: Tensor | None, axes, epsilon: float = 1e-5
               ) -> Tensor:
    """Layer normalization over ``axes`` (``torch.nn.LayerNorm``,
    https://pytorch.org/docs/stable/generated/torch.nn.LayerNorm.html)::

        y = (x - mean) / sqrt(var + eps) * gamma + beta

    with the mean and the biased variance (divide by N) over ``axes`` (negative allowed).
    ``gamma`` / ``beta`` have the shape of the normalized dims (in axis order) and may be None.
    Two-pass and in float32 (float64 for float64 inputs): ``T_layer_norm_sum`` -> ``_mean`` ->
    ``_var`` (sum of squared deviations) -> ``_rstd`` -> ``T_layer_norm``.
    """
    acc = norm_acc_dtype(x.dtype)
    ax = normalize_axes(axes, x.ndim, "layer_norm")
    _check_param(gamma, x, ax, "layer_norm: gamma")
    _check_param(beta, x, ax, "layer_norm: beta")
    red_shape = reduced_shape(x.shape, ax, False)
    n = element_count([x.shape[a] for a in ax], acc)
    nd = x.ndim

    def fsum(*idx):
        rv = reduce_axes(x.shape, ax)
        return _te.sum(cast_value(x[full_index(idx, ax, nd, rv, False)], acc), axis=rv)

    total = _te.compute(red_shape, fsum, name="T_layer_norm_sum")
    mu = _te.compute(red_shape, lambda *i: total[i] / n, name="T_layer_norm_mean")

    def fvar(*idx):
        rv = reduce_axes(x.shape, ax)
        d = cast_value(x[full_index(idx, ax, nd, rv, False)], acc) - mu[idx]
        return _te.sum(d * d, axis=rv)

    var = _te.compute(red_shape, fvar, name="T_layer_norm_var")
    eps = E.const(float(epsilon), acc)
    rstd = _te.compute(red_shape, lambda *i: 1.0 / tir.sqrt(var[i] / n + eps),
                       name="T_layer_norm_rstd")

    def fout(*idx):
        k = kept_index(idx, ax)
        p = tuple(idx[a] for a in ax)
        v = (cast_value(x[idx], acc) - mu[k]) * rstd[k]
        if gamma is not None:
            v = v * cast_value(gamma[p], acc)
        if beta is not None:
            v = v + cast_value(beta[p], acc)
        return cast_value(v, x.dtype)

    return _te.compute(x.shape, fout, name="T_layer_norm")


def rms_norm(x: Tensor, weight: Tensor | None, axes=-1, epsilon: float = 1e-5) -> Tensor:
    """RMS normalization (Zhang & Sennrich 2019; ``torch.nn.RMSNorm``)::

        y = x / sqrt(mean(x^2 over axes) + eps) * weight

    ``weight`` has the shape of the normalized dims (may be None). In float32 (float64 for
    float64): ``T_rms_norm_sumsq`` -> ``T_rms_norm_rstd`` -> ``T_rms_norm``.
    """
    acc = norm_acc_dtype(x.dtype)
    ax = normalize_axes(axes, x.ndim, "rms_norm")
    _check_param(weight, x, ax, "rms_norm: weight")
    red_shape = reduced_shape(x.shape, ax, False)
    n = element_count([x.shape[a] for a in ax], acc)
    nd = x.ndim

    def fsq(*idx):
        rv = reduce_axes(x.shape, ax)
        v = cast_value(x[full_index(idx, ax, nd, rv, False)], acc)
        return _te.sum(v * v, axis=rv)

    sumsq = _te.compute(red_shape, fsq, name="T_rms_norm_sumsq")
    eps = E.const(float(epsilon), acc)
    rstd = _te.compute(red_shape, lambda *i: 1.0 / tir.sqrt(sumsq[i] / n + eps),
                       name="T_rms_norm_rstd")

    def fout(*idx):
        v = cast_value(x[idx], acc) * rstd[kept_index(idx, ax)]
        if weight is not None:
            v = v * cast_value(weight[tuple(idx[a] for a in ax)], acc)
        return cast_value(v, x.dtype)

    return _te.compute(x.shape, fout, name="T_rms_norm")


def softmax(x: Tensor, axis: int = -1) -> Tensor:
    """Numerically stable softmax along ``axis`` (``torch.softmax``)::

        y = exp(x - max(x)) / sum(exp(x - max(x)))

    Stages (float32 for 16-bit floats): ``T_softmax_maxelem``, ``T_softmax_exp``,
    ``T_softmax_expsum``, ``T_softmax_norm`` (TVM's names).
    """
    acc = norm_acc_dtype(x.dtype)
    a = normalize_axis(axis, x.ndim, "softmax")
    ax = [a]
    red_shape = reduced_shape(x.shape, ax, False)
    nd = x.ndim

    def fmax(*idx):
        rv = reduce_axes(x.shape, ax)
        return _te.max(cast_value(x[full_index(idx, ax, nd, rv, False)], acc), axis=rv)

    mx = _te.compute(red_shape, fmax, name="T_softmax_maxelem")
    ex = _te.compute(x.shape, lambda *i: tir.exp(cast_value(x[i], acc) - mx[kept_index(i, ax)]),
                     name="T_softmax_exp")

    def fsum(*idx):
        rv = reduce_axes(x.shape, ax)
        return _te.sum(ex[full_index(idx, ax, nd, rv, False)], axis=rv)

    s = _te.compute(red_shape, fsum, name="T_softmax_expsum")
    return _te.compute(x.shape, lambda *i: cast_value(ex[i] / s[kept_index(i, ax)], x.dtype),
                       name="T_softmax_norm")


def group_norm(x: Tensor, gamma: Tensor | None, beta: Tensor | None, num_groups: int,
               channel_axis: int = 1, axes=None, epsilon: float = 1e-5) -> Tensor:
    """Group normalization (Wu & He 2018; ``torch.nn.GroupNorm``,
    https://pytorch.org/docs/stable/generated/torch.nn.GroupNorm.html)::

        y = (x - mean) / sqrt(var + eps) * gamma[c] + beta[c]

    The channels (``channel_axis``, C of them) split into ``num_groups`` groups of C / G; mean
    and biased variance run over the channels of a group and over ``axes`` (default: all dims
    but the first two), separately for every other index. ``gamma`` / ``beta`` are (C,) or
    None. Two-pass in float32 (float64 for float64): ``T_group_norm_sum`` -> ``_mean`` -> ``_var``
    -> ``_rstd`` -> ``T_group_norm``. Raises ValueError when C is not divisible by G or
    ``axes`` contains the channel axis.
    """
    acc = norm_acc_dtype(x.dtype)
    nd = x.ndim
    ca = normalize_axis(channel_axis, nd, "group_norm")
    ax = normalize_axes(list(range(2, nd)) if axes is None else axes, nd, "group_norm")
    if ca in ax:
        raise ValueError(f"group_norm: axes {axes} must not contain the channel axis {channel_axis}")
    G = int(num_groups)
    chans = x.shape[ca]
    sch = static_int(chans)
    if G < 1 or (sch is not None and sch % G):
        raise ValueError(f"group_norm: {chans} channels of {fmt_shape(x.shape)} are not divisible "
                         f"by num_groups={num_groups}")
    _check_param(gamma, x, [ca], "group_norm: gamma")
    _check_param(beta, x, [ca], "group_norm: beta")
    cpg = E.simplify(chans // G) if G > 1 else chans
    kept = [dd for dd in range(nd) if dd not in ax]       # includes the channel axis
    stat_shape = [E.IntImm(G, "int64") if dd == ca else x.shape[dd] for dd in kept]
    n = element_count([cpg] + [x.shape[a] for a in ax], acc)

    def stat_index(full):
        return tuple(full[dd] // cpg if dd == ca else full[dd] for dd in kept)

    def full_index(sidx, rc, rv):
        pos = {dd: i for i, dd in enumerate(kept)}
        it = iter(rv)
        out = []
        for dd in range(nd):
            if dd == ca:
                out.append(sidx[pos[dd]] * cpg + rc.var)
            elif dd in ax:
                out.append(next(it).var)
            else:
                out.append(sidx[pos[dd]])
        return tuple(out)

    def fsum(*sidx):
        rc = _te.reduce_axis((0, cpg), name="rc")
        rv = reduce_axes(x.shape, ax)
        return _te.sum(cast_value(x[full_index(sidx, rc, rv)], acc), axis=[rc] + rv)

    total = _te.compute(stat_shape, fsum, name="T_group_norm_sum")
    mu = _te.compute(stat_shape, lambda *i: total[i] / n, name="T_group_norm_mean")

    def fvar(*sidx):
        rc = _te.reduce_axis((0, cpg), name="rc")
        rv = reduce_axes(x.shape, ax)
        dv = cast_value(x[full_index(sidx, rc, rv)], acc) - mu[sidx]
        return _te.sum(dv * dv, axis=[rc] + rv)

    var = _te.compute(stat_shape, fvar, name="T_group_norm_var")
    eps = E.const(float(epsilon), acc)
    rstd = _te.compute(stat_shape, lambda *i: 1.0 / tir.sqrt(var[i] / n + eps),
                       name="T_group_norm_rstd")

    def fout(*idx):
        si = stat_index(idx)
        v = (cast_value(x[idx], acc) - mu[si]) * rstd[si]
        if gamma is not None:
            v = v * cast_value(gamma[idx[ca]], acc)
        if beta is not None:
            v = v + cast_value(beta[idx[ca]], acc)
        return cast_value(v, x.dtype)

    return _te.compute(x.shape, fout, name="T_group_norm")
