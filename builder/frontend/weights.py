"""Weights of an imported PyTorch program bound as named constants of ``main``: a torch tensor's data as a
numpy array of our dtype (:func:`to_numpy`), its PyTorch dotted name as a Relax variable name
(:func:`weight_identifier`), and the table of one graph's weights, each bound once on first use
(:class:`WeightTable`). torch is never imported here.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np

from ..ir import relax as rx
from ..ir.block_builder import BlockBuilder
from ..nn.core import Tensor
from .dtypes import torch_dtype
from .errors import FrontendError

__all__ = ["WeightTable", "to_numpy", "weight_identifier"]


def to_numpy(value) -> tuple[np.ndarray, str]:
    """A torch tensor's data as a numpy array and our dtype name (bfloat16 is given as float32
    values, which :class:`builder.ir.relax.Constant` rounds back to bfloat16 bits); the shape is the
    tensor's. Raises FrontendError for a dtype we do not have (:func:`~builder.frontend.dtypes.torch_dtype`)."""
    value = value.detach().cpu()
    dtype = torch_dtype(value.dtype)
    if dtype == "bfloat16":
        return value.float().numpy(), dtype
    return value.contiguous().numpy(), dtype


def weight_identifier(name: str) -> str:
    """The variable name a weight is bound under: its PyTorch dotted name with every non-word
    character made ``_`` (``layers.0.weight`` -> ``layers_0_weight``), ``w_`` in front when that is
    empty or starts with a digit."""
    out = re.sub(r"\W", "_", name)
    return out if out and not out[0].isdigit() else "w_" + out


class WeightTable:
    """The weights of one graph: declared by name with a getter (:meth:`declare`, so a weight the graph
    never reads is never copied), bound as a constant of the function ``bb`` is building on first use
    (:meth:`bind`), once per name."""

    def __init__(self, bb: BlockBuilder) -> None:
        self.bb = bb
        self._bound: dict[str, Tensor] = {}
        self._declared: dict[str, Callable[[], Any]] = {}

    def declare(self, name: str, get: Callable[[], Any]) -> None:
        """Declare the weight ``name``; ``get()`` returns its torch tensor when it is first used."""
        self._declared[name] = get

    def bind(self, name: str, value=None) -> Tensor:
        """The weight ``name`` (a PyTorch dotted name) as a constant emitted once under
        :func:`weight_identifier` of it; ``value`` is its torch tensor (else the declared one's).
        The Tensor has the weight's shape and dtype (:func:`to_numpy`). Raises FrontendError for a
        name neither given a value nor declared, or a dtype we do not have."""
        if name not in self._bound:
            if value is None:
                if name not in self._declared:
                    raise FrontendError(f"unknown weight '{name}'")
                value = self._declared[name]()
            arr, dtype = to_numpy(value)
            var = self.bb.emit(rx.Constant(arr, dtype), weight_identifier(name))
            self._bound[name] = Tensor(_expr=var)
        return self._bound[name]
