"""The KV cache calls the compiler emitted before issue 43 and emits no more: ``vm.builtin.kv_cache_update``
(padded copies of every key and value a layer holds) and ``vm.builtin.kv_cache_attention_mask`` (their padding).
The runtime keeps both builtins registered for executables saved before; these emit the same IR so that tests
(and ``benchmarks/bench_paged_decode.py``, the copy it compares with) can build such an executable. Arguments are
checked as :func:`builder.nn.op.kv_cache_append` checks its own."""
from __future__ import annotations

from builder.ir import expr as E
from builder.ir import relax as rx
from builder.ir.struct_info import TensorStructInfo, TupleStructInfo
from builder.nn.core import Object, Tensor, wrap_nested
from builder.nn.op.attention import _cache_args, _check_append, _int64
from builder.nn.op.common import builtin_call, impure_builtin_call
from core.kv_cache_builtins import KV_CACHE_ATTENTION_MASK, KV_CACHE_UPDATE


def kv_cache_update(cache: Object, layer_id: int, k: Tensor, v: Tensor, total_seq_len: int | E.PrimExpr,
                    name: str = "kv_cache") -> tuple[Tensor, Tensor]:
    """``k_all, v_all = R.call_packed("vm.builtin.kv_cache_update", cache, R.prim_value(layer_id), k, v,
    R.prim_value(total_seq_len), sinfo_args=R.Tuple(R.Tensor((b, total_seq_len, h, d)), R.Tensor((b,
    total_seq_len, h, dv))))``, an impure call: append ``k`` / ``v`` (batch, seq, kv_heads, head_dim[_v]) to
    layer ``layer_id`` and get every key and value it holds, row ``r``'s right-aligned, zeros before them
    (``runtime.PagedKVCache.update``). Raises what :func:`builder.nn.op.kv_cache_append` raises."""
    total = _check_append("kv_cache_update", cache, layer_id, k, v, total_seq_len)
    b, _, heads, d = k.shape
    sinfo = TupleStructInfo([TensorStructInfo((b, total, heads, d), k.dtype),
                             TensorStructInfo((b, total, heads, v.shape[3]), v.dtype)])
    call = impure_builtin_call(KV_CACHE_UPDATE, [cache._expr, rx.PrimValue(int(layer_id), "int64"), k._expr, v._expr,
                                                 rx.PrimValue(total, "int64")], sinfo)
    k_all, v_all = wrap_nested(call, name)
    return k_all, v_all


def kv_cache_attention_mask(cache: Object, batch: int | E.PrimExpr, total_seq_len: int | E.PrimExpr,
                            name: str = "kv_mask") -> Tensor:
    """``R.call_pure_packed("vm.builtin.kv_cache_attention_mask", cache, R.prim_value(batch),
    R.prim_value(total_seq_len), sinfo_args=(R.Tensor((batch, total_seq_len), dtype="bool"),))``: True at the
    real keys of :func:`kv_cache_update`'s rows, False at their left padding (``runtime.PagedKVCache.attention_mask``).
    Raises TypeError / ValueError for a bad ``cache`` or sizes."""
    opname = "kv_cache_attention_mask"
    _cache_args(opname, cache, 0)
    b, total = _int64(opname, "batch", batch), _int64(opname, "total_seq_len", total_seq_len)
    call = builtin_call(KV_CACHE_ATTENTION_MASK, [cache._expr, rx.PrimValue(b, "int64"), rx.PrimValue(total, "int64")],
                        TensorStructInfo((b, total), "bool"))
    return wrap_nested(call, name)
