"""Converters of the ONNX normalizations: Batch-, Instance-, Group-, Layer-, RMS- and LpNormalization,
LRN, MeanVarianceNormalization.
"""
from __future__ import annotations

import numpy as np

from ...nn import op
from .errors import ONNXImportError
from .registry import _check_inputs, _register
from .shape_folding import _simp


@_register("LpNormalization")
def _lp_normalization(im, node, ins, at):
    """``LpNormalization``: ``x / ||x||_p`` along ``axis`` (p 1 or 2; :func:`builder.nn.op.normalize` with a
    zero norm guarded by the smallest normal float instead of a division by 0)."""
    _check_inputs(ins, node)
    x = im.tensor(ins[0])
    p = int(at.get("p", 2))
    if p not in (1, 2):
        raise ONNXImportError(f"LpNormalization with p={p} (1 or 2)")
    return op.normalize(x, float(p), int(at.get("axis", -1)), eps=float(np.finfo(np.float32).tiny))


#: The widest LRN window (channels summed per output) translated as shifted slices.
_LRN_MAX_SLICES = 1024


@_register("LRN")
def _lrn(im, node, ins, at):
    """``LRN`` (AlexNet's local response normalization, Krizhevsky et al. 2012): ``x / (bias + alpha / size *
    sum of x**2 over the channels c - (size - 1) // 2 .. c + size // 2) ** beta``, the sum as ``size``
    shifted slices of the zero-padded squares."""
    _check_inputs(ins, node)
    x = im.tensor(ins[0])
    size = int(at["size"])
    if size < 1 or len(x.shape) < 3:
        raise ONNXImportError(f"LRN needs size >= 1 and an (N, C, ...) input, got size {size}, {len(x.shape)}-d")
    alpha, beta, bias = float(at.get("alpha", 1e-4)), float(at.get("beta", 0.75)), float(at.get("bias", 1.0))
    lo, hi = (size - 1) // 2, size // 2
    channels = _simp(x.shape[1])
    if isinstance(channels, int):   # a window past every channel adds zeros only: at most 2C - 1 slices
        lo, hi = min(lo, channels - 1), min(hi, channels - 1)
    elif size > _LRN_MAX_SLICES:
        raise ONNXImportError(f"LRN of size {size} over a symbolic channel count (at most {_LRN_MAX_SLICES})")
    if lo + hi + 1 > _LRN_MAX_SLICES:
        raise ONNXImportError(f"LRN window of {lo + hi + 1} channels (at most {_LRN_MAX_SLICES})")
    sq = op.multiply(x, x)
    padded = op.pad(sq, [0, 0, lo, hi] + [0, 0] * (len(x.shape) - 2))
    total = None
    for k in range(lo + hi + 1):
        part = op.strided_slice(padded, [1], [k], [k + x.shape[1]])
        total = part if total is None else op.add(total, part)
    denom = op.power(op.add(op.multiply(total, alpha / size), bias), beta)
    return op.divide(x, denom)


@_register("MeanVarianceNormalization")
def _mvn(im, node, ins, at):
    """``MeanVarianceNormalization`` (the spec's function): ``(x - mean) / (sqrt(E[x**2] - mean**2) + 1e-9)``
    over ``axes`` (default 0, 2, 3)."""
    _check_inputs(ins, node)
    x = im.tensor(ins[0])
    nd = len(x.shape)
    axes = [int(a) % nd for a in at.get("axes", [0, 2, 3])]
    mean = op.mean(x, axis=axes, keepdims=True)
    var = op.subtract(op.mean(op.multiply(x, x), axis=axes, keepdims=True), op.multiply(mean, mean))
    return op.divide(op.subtract(x, mean), op.add(op.sqrt(var), 1e-9))


@_register("InstanceNormalization")
def _instance_norm(im, node, ins, at):
    """``InstanceNormalization``: each (sample, channel) normalized over its spatial dims (group norm with
    one channel per group), then ``scale[c]`` and ``B[c]``."""
    _check_inputs(ins, node)
    x = im.tensor(ins[0])
    if len(x.shape) < 3:
        raise ONNXImportError(f"InstanceNormalization needs an (N, C, ...) input, got a {len(x.shape)}-d one")
    c = _simp(x.shape[1])
    if not isinstance(c, int):
        raise ONNXImportError("InstanceNormalization needs a static channel count")
    scale, bias = (im.tensor(v.astype(x.dtype) if isinstance(v, np.ndarray) else v) for v in ins[1:3])
    return op.group_norm(x, c, scale, bias, eps=float(at.get("epsilon", 1e-5)))


@_register("GroupNormalization")
def _group_norm_onnx(im, node, ins, at):
    """``GroupNormalization`` (opset 21: ``scale`` / ``bias`` per channel; the per-group form of opset 18 is
    deprecated and refused by the checker) as :func:`builder.nn.op.group_norm`."""
    _check_inputs(ins, node)
    x = im.tensor(ins[0])
    if len(x.shape) < 3 or not isinstance(_simp(x.shape[1]), int):
        raise ONNXImportError("GroupNormalization needs an (N, C, ...) input with a static channel count")
    c, g = _simp(x.shape[1]), int(at.get("num_groups", 0))
    if g < 1 or c % g:
        raise ONNXImportError(f"num_groups={g} does not divide the {c} channels")
    scale, bias = (im.tensor(v.astype(x.dtype) if isinstance(v, np.ndarray) else v) for v in ins[1:3])
    return op.group_norm(x, g, scale, bias, eps=float(at.get("epsilon", 1e-5)))


@_register("LayerNormalization")
def _layer_norm(im, node, ins, at):
    """ONNX ``LayerNormalization`` (opset 17): over the dims from ``axis`` (default -1) with ``epsilon``, optional
    scale and bias. Raises ONNXImportError for the Mean / InvStdDev outputs (inference only)."""
    _check_inputs(ins, node)
    if any(n for n in node.output[1:]):
        raise ONNXImportError("the Mean / InvStdDev outputs are not supported (inference only)")
    x = im.tensor(ins[0])
    scale = ins[1]
    bias = ins[2] if len(ins) > 2 else None
    _, norm = _normalized_dims(x, at)
    return op.layer_norm(x, norm, _norm_param(im, scale, norm, x.dtype, 1.0), _norm_param(im, bias, norm, x.dtype, None),
                         eps=float(at.get("epsilon", 1e-5)))


def _normalized_dims(x, at) -> tuple[int, list[int]]:
    """LayerNormalization's / RMSNormalization's ``axis`` (non-negative) and the static dims it normalizes
    over (``axis`` to the end); float32 statistics only (``stash_type`` 1)."""
    if int(at.get("stash_type", 1)) != 1:
        raise ONNXImportError("stash_type other than 1 (float32 statistics) is not supported")
    axis = int(at.get("axis", -1))
    nd = len(x.shape)
    if not -nd <= axis < nd:
        raise ONNXImportError(f"axis {axis} is out of range for a {nd}-d input")
    axis %= nd
    norm = [_simp(d) for d in x.shape[axis:]]
    if not all(isinstance(d, int) for d in norm):
        raise ONNXImportError(f"the normalized dims {norm} must be static")
    return axis, norm


def _norm_param(im, v, norm: list, dtype: str, default):
    """A normalization's scale / bias broadcast to the normalized dims ``norm`` in ``dtype`` (``default``
    filled when absent; None stays None)."""
    if v is None:
        return None if default is None else im.const(np.full(norm, default, dtype=dtype))
    if isinstance(v, np.ndarray):
        return im.const(np.ascontiguousarray(np.broadcast_to(v, norm)).astype(dtype))
    t = im.tensor(v)
    if [_simp(d) for d in t.shape] != norm:
        t = op.broadcast_to(t, norm)
    return t


@_register("RMSNormalization")
def _rms_norm(im, node, ins, at):
    """``RMSNormalization`` (opset 23): ``x / sqrt(mean(x**2 over axis..end) + epsilon) * scale``, float32
    statistics (``stash_type`` 1)."""
    _check_inputs(ins, node)
    x = im.tensor(ins[0])
    axis, norm = _normalized_dims(x, at)
    return op.rms_norm(x, _norm_param(im, ins[1], norm, x.dtype, 1.0), list(range(axis, len(x.shape))),
                       float(at.get("epsilon", 1e-5)))


@_register("BatchNormalization")
def _batch_norm(im, node, ins, at):
    """ONNX ``BatchNormalization`` (opset 15) in inference mode: ``(x - mean) / sqrt(var + epsilon) * scale + B`` along
    dim 1 of ``(N, C, ...)``. Raises ONNXImportError in training mode, with the running-statistics outputs, or
    without the five inputs."""
    _check_inputs(ins, node)
    if int(at.get("training_mode", 0)) or any(n for n in node.output[1:]):
        raise ONNXImportError("BatchNormalization in training mode (running statistics outputs) is not supported")
    if len(ins) != 5 or any(v is None for v in ins):
        raise ONNXImportError("BatchNormalization needs its five inputs X, scale, B, input_mean, input_var")
    x = im.tensor(ins[0])
    if len(x.shape) < 2:
        raise ONNXImportError(f"BatchNormalization needs an (N, C, ...) input, got a {len(x.shape)}-d one")
    stats = []
    for v in ins[1:]:
        if isinstance(v, np.ndarray):
            v = v.astype(x.dtype)
        stats.append(im.tensor(v))
    scale, bias, mean, var = stats
    return op.batch_norm(x, mean, var, scale, bias, axis=1, eps=float(at.get("epsilon", 1e-5)))
