"""The VM's builtins: the runtime functions that ``R.call_pure_packed`` / ``R.call_inplace_packed`` /
``R.call_packed`` call (``["call_builtin", dst, name, [arg specs]]`` in the bytecode), by name in ``_BUILTINS``:
``vm.builtin.attention_kv_cache_*`` (:class:`AttentionKVCache`, a one-sequence case of the paged KV
cache), the paged KV cache's ``vm.builtin.kv_cache_*`` (:mod:`runtime.kv_cache`),
``vm.builtin.prim_value_to_tensor``, the
builtins of data-dependent shapes (``vm.builtin.nonzero``, ``repeat_indices``, ``unique``: their
results' sizes are bound by a ``match_shape`` after them, :mod:`runtime.vm_plan`) and the debug
prints (``vm.builtin.invoke_debug_func``, ``effect.print``). TVM's names, TVM's semantics.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from .externs import _EXTERNS
from .kv_cache import BUILTINS as _KV_CACHE_BUILTINS
from .kv_cache import PagedKVCache
from .memory import CHECKED_ALLOCATION, check_allocation

__all__ = ["AttentionKVCache"]

#: Results of the data-dependent builtins above this many bytes are checked against the memory
#: available before they are made (a module global, so that tests can lower it).
_CHECKED_ALLOCATION = CHECKED_ALLOCATION


class AttentionKVCache:
    """The object behind ``vm.builtin.attention_kv_cache_*`` (TVM's ``AttentionKVCache``, the state of the
    ``nn.KVCache`` effect): one growable sequence of rows of ``unit_shape``, a thin case of
    :class:`runtime.PagedKVCache` (one sequence, layer 0, implicit mode: its blocks, growth, memory checks
    and budget), each row stored as one key of ``prod(unit_shape)`` values (its value a single unused element).

    ``AttentionKVCache(init_data, reserve_shape, init_fill_count)``: ``init_data`` (rows, *unit_shape);
    ``reserve_shape`` (capacity, *unit_shape) only fixes the row shape (the pool grows in blocks as rows
    come, so no reservation is allocated up front); the first ``init_fill_count`` rows of ``init_data``
    count as filled (all of them when negative). ``fill_count`` is the number of rows held. Raises
    ValueError when ``init_data`` does not fit ``reserve_shape``.
    """

    def __init__(self, init_data: np.ndarray, reserve_shape, init_fill_count: int) -> None:
        reserve = [int(d) for d in reserve_shape]
        if len(reserve) != init_data.ndim or reserve[1:] != list(init_data.shape[1:]):
            raise ValueError(f"attention_kv_cache_create: initial data {init_data.shape} does not fit the "
                             f"reserved shape {tuple(reserve)}")
        self._unit = tuple(init_data.shape[1:])
        self._dtype = init_data.dtype
        self._cache = PagedKVCache(max_layers=1)
        self.fill_count = 0
        n = init_data.shape[0] if init_fill_count < 0 else min(int(init_fill_count), init_data.shape[0])
        if n:
            self.append(init_data[:n])

    @property
    def unit_shape(self) -> tuple:
        """The shape of one row."""
        return self._unit

    @property
    def dtype(self) -> np.dtype:
        """The rows' dtype."""
        return self._dtype

    def append(self, value: np.ndarray) -> "AttentionKVCache":
        """Append ``value`` ((k, *unit_shape), or one row of ``unit_shape``); returns self.
        Raises ValueError naming both sides on a dtype or shape mismatch (and what
        :meth:`PagedKVCache.update` raises when memory runs out)."""
        if not isinstance(value, np.ndarray):
            raise TypeError(f"attention_kv_cache_append: the value must be a numpy array, got {type(value).__name__}")
        if value.dtype != self._dtype:
            raise ValueError(f"attention_kv_cache_append: dtype mismatch: cache {self._dtype}, "
                             f"value {value.dtype}")
        if value.shape == self._unit:
            value = value.reshape((1, *value.shape))
        if value.shape[1:] != self._unit:
            raise ValueError(f"attention_kv_cache_append: value of shape {value.shape} does not fit rows "
                             f"of shape {self._unit} (expected (k, {', '.join(map(str, self._unit))}))")
        rows = value.shape[0]
        if rows:
            keys = np.ascontiguousarray(value).reshape(1, rows, 1, math.prod(self._unit))
            self._cache.update(0, keys, np.zeros((1, rows, 1, 1), self._dtype), self.fill_count + rows)
            self.fill_count += rows
        return self

    def view(self, shape=None) -> np.ndarray:
        """The filled rows, a read-only array of ``shape`` (default (fill_count, *unit_shape)) that later
        appends do not change. Raises ValueError when ``shape[0]`` is not the fill count or a row dim differs."""
        if shape is None:
            shape = (self.fill_count, *self._unit)
        shape = tuple(int(d) for d in shape)
        if shape[0] != self.fill_count:
            raise ValueError(f"attention_kv_cache_view: requested {shape[0]} rows, but the cache holds "
                             f"{self.fill_count}")
        if shape[1:] != self._unit:
            raise ValueError(f"attention_kv_cache_view: requested rows of shape {shape[1:]}, the cache "
                             f"holds rows of shape {self._unit}")
        if self.fill_count == 0:
            out = np.empty(shape, self._dtype)
            out.flags.writeable = False
            return out
        keys, _ = self._cache.view(0)
        return keys.reshape(shape)


def _debug_print(line_info: str, array: np.ndarray) -> None:
    print(f"{line_info}: shape = {array.shape}, dtype = {array.dtype}, data =\n{array}")


def _invoke_debug_func(io: Any, func_name: str, line_info: str, *args: Any) -> None:
    fn = _DEBUG_FUNCS.get(func_name) or _EXTERNS.get(func_name)
    if fn is None:
        raise ValueError(f"debug function '{func_name}' is not registered; register it with "
                         f"runtime.register_extern('{func_name}', fn) (called as fn(line_info, *args))")
    fn(line_info, *args)
    return None


def _effect_print(io: Any, array: np.ndarray) -> None:
    print(f"effect.print: shape = {array.shape}, dtype = {array.dtype}, data =\n{array}")
    return None


def _prim_value_to_tensor(value: Any) -> np.ndarray:
    """The VM builtin ``vm.builtin.prim_value_to_tensor``: ``value`` (an int, what a ``["dim", tree]``
    argument evaluates to: a symbolic int of the bound dims, e.g. ``total_seq_len - seq``) as a 0-d
    int64 array, which kernels can read (they get tensors only; ``builder.nn.op.common.symbolic_scalar``
    emits it). Any int64 value, negative ones included. Raises TypeError for anything but an int
    (a malformed executable), ValueError for an int outside int64."""
    if not isinstance(value, (int, np.integer)) or isinstance(value, (bool, np.bool_)):
        raise TypeError(f"prim_value_to_tensor: expected an int, got {type(value).__name__}")
    if not -(1 << 63) <= int(value) < (1 << 63):
        raise ValueError(f"prim_value_to_tensor: {int(value)} does not fit int64")
    return np.array(int(value), dtype=np.int64)


def _nonzero(x: Any) -> np.ndarray:
    """The VM builtin ``vm.builtin.nonzero`` (``builder.nn.op.nonzero``; ONNX ``NonZero``, TVM's
    ``R.nonzero``): the indices of the nonzero elements of the array ``x`` (any dtype, at least 1-D) as
    an int64 array of shape ``(x.ndim, n)``, ``n`` the number of nonzero elements, in row-major
    order (``numpy.nonzero`` stacked). Its ``n`` is a shape known only when the function runs: the
    VM binds it (``match_shape``) for the instructions after. Raises TypeError for anything but an
    array of at least one dim (a malformed executable), :class:`runtime.memory.MemoryLimitError` when
    the indices would not fit in memory (counted first)."""
    if not isinstance(x, np.ndarray) or x.ndim == 0:
        raise TypeError(f"nonzero: expected an array of at least one dim, got "
                        f"{type(x).__name__}{'' if not isinstance(x, np.ndarray) else ' of 0 dims'}")
    if 8 * x.ndim * x.size > _CHECKED_ALLOCATION:   # (8 bytes per dim per element: up to 64x a bool input)
        check_allocation(8 * x.ndim * int(np.count_nonzero(x)), f"nonzero: the indices of a {x.shape} array")
    if x.ndim == 1:   # (the common case, a flattened mask: no stack)
        return np.nonzero(x)[0].astype(np.int64, copy=False).reshape(1, -1)
    return np.ascontiguousarray(np.stack(np.nonzero(x)).astype(np.int64, copy=False))


def _repeat_indices(repeats: Any) -> np.ndarray:
    """The VM builtin ``vm.builtin.repeat_indices`` (``builder.nn.op.repeat_interleave_indices``;
    ``torch.repeat_interleave(repeats)``): index ``i`` repeated ``repeats[i]`` times, an int64 array of
    shape ``(sum(repeats),)``, a length known only when the function runs (bound by ``match_shape``).
    Raises TypeError for anything but a 1-D integer array, ValueError for a negative repeat, and
    :class:`runtime.memory.MemoryLimitError` when the result would not fit in memory (checked before
    it is made: repeats are data)."""
    if not isinstance(repeats, np.ndarray) or repeats.ndim != 1 or repeats.dtype.kind not in "iu":
        raise TypeError(f"repeat_indices: expected a 1-D integer array, got "
                        f"{type(repeats).__name__ if not isinstance(repeats, np.ndarray) else repeats.dtype}")
    r = repeats.astype(np.int64, copy=False)
    if r.size and int(r.min()) < 0:
        raise ValueError(f"repeat_interleave: repeats must be non-negative, got {int(r.min())}")
    total = int(r.sum(dtype=np.uint64)) if r.size else 0   # (no int64 wrap for huge repeats)
    if 8 * total > _CHECKED_ALLOCATION:
        check_allocation(8 * total, f"repeat_interleave: {total} indices")
    return np.repeat(np.arange(r.size, dtype=np.int64), r)


def _unique(x: Any, sorted_: Any = 1) -> tuple:
    """The VM builtin ``vm.builtin.unique`` (``builder.nn.op.unique``; ``numpy.unique``, ONNX ``Unique``
    without an axis): the distinct values of the flattened array ``x`` (ascending, or in the order they
    first occur when ``sorted_`` is 0), the flat index of each one's first occurrence, the index into them
    of every element of ``x`` and each one's count: ``(values (n,), first (n,) int64, inverse (x.size,)
    int64, counts (n,) int64)``, ``n`` bound by ``match_shape``. NaNs count as one value (numpy >= 1.21).
    Raises TypeError for anything but an array, MemoryLimitError when the results would not fit."""
    if not isinstance(x, np.ndarray):
        raise TypeError(f"unique: expected an array, got {type(x).__name__}")
    flat = x.reshape(-1)
    nbytes = 8 * 3 * flat.size + flat.nbytes
    if nbytes > _CHECKED_ALLOCATION:
        check_allocation(2 * nbytes, f"unique: the values and indices of a {x.shape} array")
    values, first, inverse, counts = np.unique(flat, return_index=True, return_inverse=True, return_counts=True)
    if not int(sorted_):   # in the order of first occurrence
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        values, first, counts, inverse = values[order], first[order], counts[order], rank[inverse.reshape(-1)]
    return (np.ascontiguousarray(values), first.astype(np.int64), inverse.reshape(-1).astype(np.int64),
            counts.astype(np.int64))


_DEBUG_FUNCS: dict[str, Any] = {"vm.builtin.debug_print": _debug_print}

_BUILTINS: dict[str, Any] = {
    "vm.builtin.attention_kv_cache_create": AttentionKVCache,
    "vm.builtin.attention_kv_cache_append": lambda cache, value: cache.append(value),
    "vm.builtin.attention_kv_cache_view": lambda cache, shape=None: cache.view(shape),
    "vm.builtin.invoke_debug_func": _invoke_debug_func,
    # the paged KV cache (runtime.kv_cache.PagedKVCache, an R.Object argument): update, positions, mask
    **_KV_CACHE_BUILTINS,
    # a symbolic int (a ["dim", tree] argument) -> 0-d int64 array, for kernels (tensors only)
    "vm.builtin.prim_value_to_tensor": _prim_value_to_tensor,
    # data-dependent shape: (x) -> (x.ndim, n) indices of its nonzero elements
    "vm.builtin.nonzero": _nonzero,
    # data-dependent shape: (repeats) -> (sum(repeats),) index i repeated repeats[i] times
    "vm.builtin.repeat_indices": _repeat_indices,
    # data-dependent shape: (x, sorted) -> (values, first index, inverse, counts) of its distinct values
    "vm.builtin.unique": _unique,
    "effect.print": _effect_print,
}


def _call_builtin(func_name: str, builtin: str, args: list) -> Any:
    fn = _BUILTINS.get(builtin)
    if fn is None:
        raise ValueError(f"{func_name}: the VM has no builtin '{builtin}'; it has {sorted(_BUILTINS)}")
    return fn(*args)

