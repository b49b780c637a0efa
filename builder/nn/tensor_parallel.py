"""Tensor parallelism of the built-in layers: how a layer splits across ``tensor_parallel_shards`` workers.

Megatron-LM's scheme (Shoeybi et al. 2019, "Megatron-LM: Training Multi-Billion Parameter Language Models
Using Model Parallelism", section 3), as MLC-LLM applies it to inference: a *column-parallel* Linear keeps
a contiguous slice of the output features on each worker (its weight rows, ``(out / N, in)``), a
*row-parallel* Linear keeps the matching slice of the input features (weight columns, ``(out, in / N)``)
and sums the workers' partial products with ``ccl_allreduce(sum)`` before adding its (replicated) bias.
A column-parallel layer followed by elementwise ops and a row-parallel one (q/k/v -> attention ->
o_proj; gate / up -> SiLU * -> down) needs one all-reduce per pair. Attention splits by heads: worker
``r`` of ``N`` holds query heads ``[r H/N, (r+1) H/N)`` and KV heads ``[r H_kv/N, (r+1) H_kv/N)``, so
each GQA group stays on one worker.

Which recipe layers split is each layer type's tensor-parallel rule (``builder.layers.TensorParallelRule``:
a ``Linear`` with ``tensor_parallel: column / row``, every ``Attention``), which hands the layer the number of
workers; the layer cuts its own parameters with the helpers here. Every worker builds the same module tree
(the local shapes) and exports the same IR; only the weights differ. Each sharded :class:`Parameter` records how it was cut from the checkpoint's full tensor in
``attrs["shard_strategy"]`` (a :class:`ShardSingleDim`, MLC-LLM's name), which the weight loader reads to
load only its slice (:func:`param_shards`).
"""
from __future__ import annotations

from dataclasses import dataclass

from . import op
from .core import Module, Parameter, Tensor

__all__ = ["ShardSingleDim", "ShardError", "SHARD_ATTR", "check_shards", "split_size", "shard_parameter",
           "param_shards", "reduce_partial_sums"]

SHARD_ATTR = "shard_strategy"
"""The :attr:`Parameter.attrs` key of a parameter's :class:`ShardSingleDim`."""

TENSOR_PARALLEL_KINDS = ("column", "row")


@dataclass(frozen=True)
class ShardSingleDim:
    """A parameter cut into ``shards`` equal contiguous slices along axis ``dim`` of the full tensor;
    each worker holds one (worker ``r`` the ``r``-th). ``dim`` counts axes of the parameter
    (0 = rows of a Linear weight)."""

    dim: int
    shards: int


class ShardError(ValueError):
    """A size that does not split evenly across the workers. ``field`` names the layer setting at fault
    (``out_features``, ``num_kv_heads``, ...), so a recipe error can point at it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def check_shards(shards) -> int:
    """``shards`` as a positive int. Raises ValueError otherwise."""
    if isinstance(shards, bool) or not isinstance(shards, int) or shards < 1:
        raise ValueError(f"tensor_parallel_shards must be a positive int, got {shards!r}")
    return shards


def split_size(size, shards: int, field: str, what: str = "") -> int:
    """``size // shards``, the per-worker part of ``size``. Raises :class:`ShardError` (naming ``field``)
    when ``size`` is not an int multiple of ``shards`` (a symbolic size cannot be split)."""
    if shards == 1:
        return size
    if isinstance(size, bool) or not isinstance(size, int):
        raise ShardError(field, f"{field} is {size!r}: a tensor-parallel layer needs a fixed size to split "
                                f"across {shards} workers")
    if size % shards:
        raise ShardError(field, f"{field} ({size}) is not divisible by tensor_parallel_shards ({shards})"
                                + (f": {what}" if what else ""))
    return size // shards


def shard_parameter(param: Parameter | None, dim: int, shards: int) -> None:
    """Record on ``param`` that it is one of ``shards`` slices along ``dim`` (nothing for one shard or
    no parameter)."""
    if param is not None and shards > 1:
        param.attrs[SHARD_ATTR] = ShardSingleDim(dim, shards)


def param_shards(module: Module) -> dict[str, ShardSingleDim]:
    """Parameter name -> :class:`ShardSingleDim` for every sharded parameter of ``module`` (names as
    ``named_parameters`` gives them)."""
    return {name: p.attrs[SHARD_ATTR] for name, p in module.named_parameters() if SHARD_ATTR in p.attrs}


def reduce_partial_sums(x: Tensor, layer) -> Tensor:
    """The output of a row-parallel layer summed over the workers (``ccl_allreduce(x, "sum")``); ``x``
    unchanged for any other layer. ``layer`` carries ``tensor_parallel`` ("column" / "row" / None) and
    ``tensor_parallel_shards``: the Linear and its quantized replacement share this one rule."""
    if getattr(layer, "tensor_parallel", None) == "row" and getattr(layer, "tensor_parallel_shards", 1) > 1:
        return op.ccl_allreduce(x, "sum", name="allreduce")
    return x
