"""Pieces of attention layers: rotary position embeddings built from other ops
(``rotary_embedding``), the calls of the runtime KV cache (``kv_cache_append``, ``kv_cache_positions``,
``kv_cache_query_positions``; the builtins named in ``core.kv_cache_builtins``, ``runtime.kv_cache``) and padding
removal (``unpad_input`` / ``pad_input``: the position-wise layers of a padded batch run on its real tokens only).
The attention itself is ``scaled_dot_product_attention`` / ``paged_attention`` (:mod:`.nn`); the layers that put
them together are :class:`builder.nn.attention.Attention` and :class:`builder.nn.kv_cache.KVCacheLayer`. (The
builtins ``vm.builtin.kv_cache_update`` / ``kv_cache_attention_mask``, padded copies of the keys and their mask,
are no longer emitted: the runtime keeps them for executables saved before issue 43.)"""
from __future__ import annotations

import weakref

import numpy as np

from core.kv_cache_builtins import KV_CACHE_APPEND, KV_CACHE_POSITIONS, KV_CACHE_QUERY_POSITIONS

from ...ir import expr as E
from ...ir import relax as rx
from ...ir.op.common import definitely_different, fmt_shape, static_int
from ...ir.struct_info import TensorStructInfo, TupleStructInfo
from ..core import Object, Tensor, wrap_nested
from .common import builtin_call, impure_builtin_call, op_call, recipe_function

__all__ = ["rotary_embedding", "rope_scaled_inv_freq", "kv_cache_append", "kv_cache_query_positions",
           "kv_cache_positions", "unpad_input", "pad_input"]


#: RoPE scalings (HF transformers' ``rope_type``) :func:`rope_scaled_inv_freq` applies, with the keys each needs.
ROPE_SCALINGS = {"linear": ("factor",),
                 "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")}


def rope_scaled_inv_freq(inv_freq: np.ndarray, scaling: dict | None) -> np.ndarray:
    """``inv_freq`` (the default rotary inverse frequencies) under a RoPE ``scaling`` (None: unchanged), in
    ``inv_freq``'s dtype and operation order as HF transformers' ``modeling_rope_utils`` computes them:

    * ``linear`` (``_compute_linear_scaling_rope_parameters``; Chen et al. 2023, position interpolation):
      ``inv_freq / factor``;
    * ``llama3`` (``_compute_llama3_parameters``; Meta's Llama 3.1): with ``wavelen = 2 pi / inv_freq``,
      low / high frequency wavelengths ``original_max_position_embeddings / low_freq_factor`` / ``/
      high_freq_factor``: long waves (``> low``) divided by ``factor``, short ones (``< high``) kept, the
      ones between interpolated with ``s = (original / wavelen - low_freq_factor) / (high_freq_factor -
      low_freq_factor)``: ``(1 - s) * inv / factor + s * inv``.

    Raises ValueError for another ``rope_type``, a missing key, or factors that are not positive finite
    numbers (``high_freq_factor`` above ``low_freq_factor``)."""
    if scaling is None:
        return inv_freq
    kind = scaling.get("rope_type")
    if kind not in ROPE_SCALINGS:
        raise ValueError(f"rotary embedding: rope_type must be one of {sorted(ROPE_SCALINGS)}, got {kind!r}")
    missing = [k for k in ROPE_SCALINGS[kind] if scaling.get(k) is None]
    if missing:
        raise ValueError(f"rotary embedding: {kind} scaling needs {missing}")
    vals = {k: scaling[k] for k in ROPE_SCALINGS[kind]}
    for k, v in vals.items():
        if isinstance(v, bool) or not isinstance(v, (int, float, np.number)) or not 0 < float(v) < np.inf:
            raise ValueError(f"rotary embedding: {k} must be a positive finite number, got {v!r}")
    ft = inv_freq.dtype.type
    factor = ft(vals["factor"])
    if kind == "linear":
        return (inv_freq / factor).astype(inv_freq.dtype)
    low, high = float(vals["low_freq_factor"]), float(vals["high_freq_factor"])
    if not high > low:
        raise ValueError(f"rotary embedding: high_freq_factor ({high}) must exceed low_freq_factor ({low})")
    old = float(vals["original_max_position_embeddings"])
    low_wavelen, high_wavelen = ft(old / low), ft(old / high)
    wavelen = ft(2 * np.pi) / inv_freq
    scaled = np.where(wavelen > low_wavelen, inv_freq / factor, inv_freq).astype(inv_freq.dtype)
    smooth = ((ft(old) / wavelen - ft(low)) / ft(high - low)).astype(inv_freq.dtype)
    smoothed = ((ft(1) - smooth) * scaled / factor + smooth * scaled).astype(inv_freq.dtype)
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return np.where(medium, smoothed, scaled).astype(inv_freq.dtype)


def _rope_inv_freq(head_dim: int, theta: float, dtype: str = "float32", scaling: dict | None = None) -> np.ndarray:
    """The inverse frequencies of rotary embeddings, (head_dim // 2,) of ``dtype``::

        inv_freq[i] = 1 / theta ** (2 i / head_dim)

    computed as HF transformers' ``_compute_default_rope_parameters`` does (float32: ``arange(0,
    head_dim, 2)`` as float32, divided by ``head_dim``, ``theta ** that`` and its reciprocal in
    float32), then ``scaling`` (:func:`rope_scaled_inv_freq`); ``dtype="float64"`` computes in float64.
    Raises ValueError for an odd or non-positive ``head_dim``, a ``theta`` that is not a positive finite
    number, or a bad ``scaling``.
    """
    if isinstance(head_dim, bool) or not isinstance(head_dim, (int, np.integer)) or head_dim <= 0 or head_dim % 2:
        raise ValueError(f"rotary embedding: head_dim must be a positive even int, got {head_dim!r}")
    if isinstance(theta, bool) or not isinstance(theta, (int, float, np.number)) or not 0 < float(theta) < np.inf:
        raise ValueError(f"rotary embedding: theta must be a positive finite number, got {theta!r}")
    if dtype not in ("float32", "float64"):
        raise ValueError(f"rotary embedding: inv_freq is computed in float32 or float64, not {dtype}")
    ft = np.dtype(dtype).type
    exponent = np.arange(0, int(head_dim), 2, dtype=np.int64).astype(dtype) / ft(head_dim)
    return rope_scaled_inv_freq((ft(1.0) / (ft(theta) ** exponent)).astype(dtype), scaling)


@recipe_function
def rotary_embedding(x: Tensor, positions: Tensor, theta: float, name: str = "rotary_embedding",
                     scaling: dict | None = None) -> Tensor:
    """Rotary position embedding (Su et al. 2021, RoFormer) in HF transformers' Llama convention
    (``modeling_llama.apply_rotary_pos_emb`` with ``rotate_half``: the two halves of the head dim
    are the pairs rotated, not interleaved elements)::

        inv_freq = 1 / theta ** (arange(0, D, 2) / D)                    (D / 2,)
        angle[.., s, :] = concat(pos[.., s] * inv_freq, pos[.., s] * inv_freq)   (.., S, D)
        rotate_half(x) = concat(-x[..., D/2:], x[..., :D/2])
        out = x * cos(angle) + rotate_half(x) * sin(angle)

    ``x`` (batch, seq, heads, head_dim) (BSNH, as the attention op), a float dtype; ``positions``
    an integer tensor (seq,) (shared by the batch) or (batch, seq). Returns a tensor of ``x``'s shape
    and dtype. ``inv_freq``, the angles, cos and sin are float32 whatever ``x``'s dtype (HF's
    ``LlamaRotaryEmbedding.forward`` computes them in float32 with autocast off), then cast to
    ``x``'s dtype. Built from astype, expand_dims, multiply, concat, cos, sin (the tables, shared by every
    layer after ``eliminate_common_subexpr``) and ``R.nn.rope`` (the rotation: one kernel).

    Raises TypeError for a non-float ``x``, non-integer ``positions`` or a ``scaling`` that is not a dict;
    ValueError when ``x`` is not 4-D, its head dim is not a static even int, ``positions`` is not 1-D /
    2-D or its seq (or batch) differs from ``x``'s, or ``theta`` is not a positive finite number.

    A recipe's ``forward:`` calls it too, on q / k it computed itself: ``q = rotary_embedding(q,
    positions, 10000.0)`` (positions ``kv_cache_positions(cache, batch, seq, total_seq_len)`` over a KV cache,
    as ``recipes/llama.yaml`` computes them).

    ``scaling``: a RoPE scaling of the frequencies, HF's ``rope_parameters`` / ``rope_scaling`` keys
    (``{"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192}`` for Llama 3.1 / 3.2, or ``linear``; see
    :func:`rope_scaled_inv_freq`).
    """
    if scaling is not None and not isinstance(scaling, dict):
        raise TypeError(f"rotary_embedding: scaling must be a dict of HF's rope_scaling keys or None, got "
                        f"{type(scaling).__name__}")
    if x.ndim != 4:
        raise ValueError(f"rotary_embedding: x must be 4-D (batch, seq, heads, head_dim), got "
                         f"{fmt_shape(x.shape)}")
    if not E.is_float_dtype(x.dtype):
        raise TypeError(f"rotary_embedding: x must be a float tensor, got {x.dtype}")
    if not E.is_int_dtype(positions.dtype):
        raise TypeError(f"rotary_embedding: positions must be an integer tensor, got {positions.dtype}")
    if positions.ndim not in (1, 2):
        raise ValueError(f"rotary_embedding: positions must be (seq,) or (batch, seq), got "
                         f"{fmt_shape(positions.shape)}")
    head_dim = static_int(x.shape[3])
    if head_dim is None or head_dim % 2:
        raise ValueError(f"rotary_embedding: the head dim of x {fmt_shape(x.shape)} must be a static even int")
    if definitely_different(positions.shape[-1], x.shape[1]):
        raise ValueError(f"rotary_embedding: positions {fmt_shape(positions.shape)} do not match the seq "
                         f"of x {fmt_shape(x.shape)}")
    if positions.ndim == 2 and definitely_different(positions.shape[0], x.shape[0]):
        raise ValueError(f"rotary_embedding: positions {fmt_shape(positions.shape)} do not match the batch "
                         f"of x {fmt_shape(x.shape)}")
    adt = "float32"
    inv_freq = rx.Constant(_rope_inv_freq(head_dim, theta, adt, scaling), adt)
    pos = op_call("expand_dims", [op_call("astype", [positions._expr], dtype=adt)], axis=[-1])
    freqs = wrap_nested(op_call("multiply", [pos, inv_freq]), f"{name}_freqs")          # (.., S, D/2)
    angle = op_call("concat", [rx.Tuple([freqs._expr, freqs._expr])], axis=-1)         # (.., S, D)
    angle = wrap_nested(op_call("expand_dims", [angle], axis=[-2]), f"{name}_angle")   # (.., S, 1, D)
    cos = op_call("cos", [angle._expr])
    sin = op_call("sin", [angle._expr])
    if adt != x.dtype:
        cos = op_call("astype", [cos], dtype=x.dtype)
        sin = op_call("astype", [sin], dtype=x.dtype)
    cos = wrap_nested(cos, f"{name}_cos")
    sin = wrap_nested(sin, f"{name}_sin")
    return wrap_nested(op_call("nn.rope", [x._expr, cos._expr, sin._expr]), name)


def _cache_args(opname: str, cache, layer_id) -> None:
    if not isinstance(cache, Object):
        raise TypeError(f"{opname}: cache must be an nn.Object (a spec.Object() input), got "
                        f"{type(cache).__name__}")
    if isinstance(layer_id, bool) or not isinstance(layer_id, (int, np.integer)):
        raise TypeError(f"{opname}: layer_id must be an int, got {type(layer_id).__name__}")
    if layer_id < 0:
        raise ValueError(f"{opname}: layer_id must be >= 0, got {layer_id}")


def _int64(opname: str, what: str, value) -> E.PrimExpr:
    """An int or integer PrimExpr argument as an int64 PrimExpr; TypeError / ValueError otherwise."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        if value < 0:
            raise ValueError(f"{opname}: {what} must be >= 0, got {value}")
        return E.IntImm(int(value), "int64")
    if isinstance(value, E.PrimExpr) and E.is_int_dtype(value.dtype):
        return value if value.dtype == "int64" else value.astype("int64")
    raise TypeError(f"{opname}: {what} must be an int or an integer PrimExpr (a spec.Int input or a dim), "
                    f"got {type(value).__name__}")


def kv_cache_query_positions(cache: Object, layer_id: int, seq: int | E.PrimExpr, total_seq_len: int | E.PrimExpr,
                             name: str = "positions") -> Tensor:
    """The positions of ``seq`` new tokens in layer ``layer_id`` of the runtime KV cache, shared by every
    row: int64 (seq,), ``arange(held, total_seq_len)`` where ``held = total_seq_len - seq`` is what the layer
    holds before the new tokens are appended (MLC-LLM's ``get_query_positions``; a ragged batch, whose
    rows hold different lengths, needs :func:`kv_cache_positions`)::

        R.call_pure_packed("vm.builtin.kv_cache_query_positions", cache, R.prim_value(layer_id),
                           R.prim_value(seq), R.prim_value(total_seq_len),
                           sinfo_args=(R.Tensor((seq,), dtype="int64"),))

    At run time the cache raises ValueError (naming the layer) when it does not hold
    ``total_seq_len - seq`` tokens. Raises TypeError / ValueError, as :func:`kv_cache_append`, for a
    bad ``cache``, ``layer_id``, ``seq`` or ``total_seq_len``.
    """
    opname = "kv_cache_query_positions"
    _cache_args(opname, cache, layer_id)
    n = _int64(opname, "seq", seq)
    total = _int64(opname, "total_seq_len", total_seq_len)
    call = builtin_call(KV_CACHE_QUERY_POSITIONS, [cache._expr, rx.PrimValue(int(layer_id), "int64"),
                                              rx.PrimValue(n, "int64"), rx.PrimValue(total, "int64")],
                   TensorStructInfo((n,), "int64"))
    return wrap_nested(call, name)


@recipe_function
def kv_cache_positions(cache: Object, batch: int | E.PrimExpr, seq: int | E.PrimExpr,
                       total_seq_len: int | E.PrimExpr, name: str = "positions") -> Tensor:
    """The positions of the call's new tokens from the runtime KV cache, int64 (batch, seq): row ``r``'s
    ``arange(held_r, held_r + seq)``, ``held_r`` the tokens its sequence holds before the call (a ragged
    batch: ``runtime.PagedKVCache.begin_forward``; without it ``arange(total_seq_len - seq,
    total_seq_len)`` for every row)::

        R.call_pure_packed("vm.builtin.kv_cache_positions", cache, R.prim_value(batch), R.prim_value(seq),
                           R.prim_value(total_seq_len), sinfo_args=(R.Tensor((batch, seq), dtype="int64"),))

    Layer-independent (one call per function, after ``eliminate_common_subexpr``); a recipe's prefill /
    decode computes ``positions = kv_cache_positions(cache, batch, seq, total_seq_len)``. At run time the
    cache raises ValueError when the sizes differ from the declared call. Raises TypeError for a ``cache``
    that is not an ``nn.Object`` or sizes that are neither ints nor integer PrimExprs; ValueError for
    negative sizes."""
    opname = "kv_cache_positions"
    _cache_args(opname, cache, 0)
    b, n, total = (_int64(opname, w, x) for w, x in (("batch", batch), ("seq", seq), ("total_seq_len", total_seq_len)))
    call = builtin_call(KV_CACHE_POSITIONS, [cache._expr, rx.PrimValue(b, "int64"), rx.PrimValue(n, "int64"),
                                             rx.PrimValue(total, "int64")], TensorStructInfo((b, n), "int64"))
    return wrap_nested(call, name)


def _check_append(opname: str, cache, layer_id, k: Tensor, v: Tensor, total_seq_len) -> E.PrimExpr:
    """The checks of :func:`kv_cache_append`'s arguments; ``total_seq_len`` as an int64 PrimExpr."""
    _cache_args(opname, cache, layer_id)
    total = _int64(opname, "total_seq_len", total_seq_len)
    for t, what in ((k, "k"), (v, "v")):
        if t.ndim != 4:
            raise ValueError(f"{opname}: {what} must be 4-D (batch, seq, kv_heads, head_dim), got "
                             f"{fmt_shape(t.shape)}")
    if k.dtype != v.dtype or not E.is_float_dtype(k.dtype):
        raise TypeError(f"{opname}: k and v must have one float dtype, got {k.dtype} and {v.dtype}")
    for axis, what in ((0, "batch size"), (1, "sequence length"), (2, "number of heads")):
        if definitely_different(k.shape[axis], v.shape[axis]):
            raise ValueError(f"{opname}: the {what} of k {fmt_shape(k.shape)} differs from that of v "
                             f"{fmt_shape(v.shape)}")
    return total


#: The dims of a cache's pools and block table, by the cache's graph variable: one ``(num_blocks, block_size,
#: max_blocks)`` for every layer of a function (``runtime.PagedKVCache`` keeps every layer's pool the same number of
#: blocks and hands all layers of a call one table), so that the layers' attentions are one PrimFunc.
_PAGED_DIMS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _paged_dims(cache: Object) -> tuple:
    dims = _PAGED_DIMS.get(cache._expr)
    if dims is None:
        dims = _PAGED_DIMS[cache._expr] = tuple(E.SizeVar(n, "int64") for n in ("num_blocks", "block_size",
                                                                                 "max_blocks"))
    return dims


def kv_cache_append(cache: Object, layer_id: int, k: Tensor, v: Tensor, total_seq_len: int | E.PrimExpr,
                    name: str = "kv_cache") -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Append the keys / values of new tokens to layer ``layer_id`` of the runtime KV cache and get what
    :func:`~builder.nn.op.paged_attention` reads, the cache's own blocks (no copy)::

        k_pool, v_pool, block_table, lengths = R.call_packed(
            "vm.builtin.kv_cache_append", cache, R.prim_value(layer_id), k, v, R.prim_value(total_seq_len),
            sinfo_args=R.Tuple(R.Tensor((num_blocks, block_size, h, d)), R.Tensor((num_blocks, block_size, h, dv)),
                               R.Tensor((b, max_blocks), "int32"), R.Tensor((b,), "int32")))

    an impure call (it writes the cache: no pass drops, merges or moves it, and the exported function is
    ``pure=False``). ``num_blocks``, ``block_size``
    and ``max_blocks`` are new dims, one set per cache input shared by its layers, bound from the first layer's
    results when the call runs (``match_shape``; the later layers' are checked against them); the pools
    are the layer's arrays as they are after the append, ``block_table`` row ``r``'s block ids in token
    order, ``lengths`` the keys row ``r`` holds after the call (``held_r + seq``; ``runtime.PagedKVCache.append``).

    ``cache``: an ``nn.Object`` (a ``spec.Object()`` input; at run time a ``runtime.PagedKVCache``);
    ``layer_id``: a non-negative int; ``k`` (batch, seq, kv_heads, head_dim), ``v`` (batch, seq, kv_heads,
    head_dim_v) of one float dtype; ``total_seq_len``: the most tokens a row holds after the append (an int or
    an int64 PrimExpr, typically a ``spec.Int`` input). At run time the cache raises ValueError (naming the
    layer) when the call differs from the one ``begin_forward`` declared (without one: when the held tokens
    plus ``seq`` are not ``total_seq_len``), or the shapes / dtype differ from what the layer holds.

    Raises TypeError for a ``cache`` that is not an ``nn.Object``, a ``layer_id`` that is not an int,
    a ``total_seq_len`` that is neither an int nor an integer PrimExpr, or ``k`` / ``v`` of different
    or non-float dtypes; ValueError for a negative ``layer_id`` or ``total_seq_len``, ``k`` / ``v``
    that are not 4-D or differ in batch, seq or heads."""
    opname = "kv_cache_append"
    total = _check_append(opname, cache, layer_id, k, v, total_seq_len)
    b, _, heads, d = k.shape
    blocks, size, width = _paged_dims(cache)
    sinfo = TupleStructInfo([TensorStructInfo((blocks, size, heads, d), k.dtype),
                             TensorStructInfo((blocks, size, heads, v.shape[3]), v.dtype),
                             TensorStructInfo((b, width), "int32"), TensorStructInfo((b,), "int32")])
    call = impure_builtin_call(KV_CACHE_APPEND, [cache._expr, rx.PrimValue(int(layer_id), "int64"), k._expr,
                                                 v._expr, rx.PrimValue(total, "int64")], sinfo)
    k_pool, v_pool, table, lengths = wrap_nested(call, name)
    return k_pool, v_pool, table, lengths


def _padding_mask(attention_mask: Tensor, opname: str) -> None:
    if attention_mask.ndim != 2 or E.is_float_dtype(attention_mask.dtype):
        raise ValueError(f"{opname}: attention_mask must be a bool / integer padding mask (batch, seq), got "
                         f"{attention_mask.dtype} {fmt_shape(attention_mask.shape)}")


@recipe_function
def unpad_input(hidden_states: Tensor, attention_mask: Tensor, name: str = "unpad") -> tuple[Tensor, Tensor]:
    """The real tokens of a padded batch, packed: ``(packed, indices)`` (flash-attn's
    ``bert_padding.unpad_input``, the "remove padding" of FasterTransformer and HF's BetterTransformer)::

        indices = flatnonzero(attention_mask)                  (num_nonzero,) int64
        packed  = hidden_states.reshape(batch * seq, ...)[indices]   (num_nonzero, ...)

    ``hidden_states`` (batch, seq, ...) of any dtype; ``attention_mask`` bool / integer (batch, seq),
    nonzero at the tokens (HF's ``attention_mask``). ``num_nonzero`` is the number of tokens, a symbolic
    dim bound when the function runs (:func:`~builder.nn.op.nonzero`): position-wise layers (Linear,
    LayerNorm, GELU, residuals) then compute no padding rows. :func:`pad_input` undoes it;
    :class:`builder.nn.Attention` takes ``token_indices`` to attend over packed tokens. Raises
    ValueError for a mask that is not 2-D integer / bool or shapes whose (batch, seq) differ."""
    from .manipulation import nonzero, reshape, take
    opname = "unpad_input"
    _padding_mask(attention_mask, opname)
    x = hidden_states
    if x.ndim < 2 or any(definitely_different(x.shape[i], attention_mask.shape[i]) for i in (0, 1)):
        raise ValueError(f"{opname}: hidden_states {fmt_shape(x.shape)} must start with attention_mask's "
                         f"(batch, seq) {fmt_shape(attention_mask.shape)}")
    batch, seq = attention_mask.shape
    indices = reshape(nonzero(reshape(attention_mask, [batch * seq])), [-1], name=name + "_indices")
    return take(reshape(x, [batch * seq, *x.shape[2:]]), indices, axis=0, name=name), indices


@recipe_function
def pad_input(packed: Tensor, indices: Tensor, batch, seq, name: str = "pad") -> Tensor:
    """The padded batch of packed tokens (flash-attn's ``bert_padding.pad_input``), zeros at the
    padding::

        out = zeros(batch * seq, ...);  out[indices] = packed;  out.reshape(batch, seq, ...)

    ``packed`` (n, ...) of any dtype and ``indices`` (n,) int64 from :func:`unpad_input` (distinct,
    in [0, batch * seq): an index outside is an error when the code runs); ``batch`` / ``seq`` ints or
    symbolic dims (a recipe's ``batch`` / ``seq``) -> (batch, seq, ...). Raises ValueError when ``indices``
    is not 1-D or its length differs from ``packed``'s."""
    from .creation import zeros
    from .manipulation import reshape, scatter_nd
    if indices.ndim != 1 or packed.ndim < 1 or definitely_different(indices.shape[0], packed.shape[0]):
        raise ValueError(f"pad_input: indices {fmt_shape(indices.shape)} must be 1-D with one index per packed "
                         f"row {fmt_shape(packed.shape)}")
    rest = list(packed.shape[1:])
    out = scatter_nd(zeros([batch * seq, *rest], dtype=packed.dtype), reshape(indices, [indices.shape[0], 1]),
                     packed, name=name + "_rows")
    return reshape(out, [batch, seq, *rest], name=name)
