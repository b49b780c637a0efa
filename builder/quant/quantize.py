"""The quantization Mutators: they replace ``nn.Linear`` (and ``nn.Embedding`` when the spec
says ``quantize_embedding``) by :class:`QuantizedLinear` / :class:`QuantizedEmbedding` and record
the parameter mapping ``<layer>.weight -> [<layer>.q_weight, <layer>.q_scale]``.

A module is left as it is (in the model dtype), with everything below it, when its dotted path
matches a glob of the spec's ``exclude`` (``fnmatch`` on the full path: ``lm_head``,
``*.norm*``, ``layers.0.*``) or when it has a true ``no_quantization`` attribute (as in MLC-LLM).
"""
from __future__ import annotations

import fnmatch

import numpy as np

from .. import nn
from ..layers import quantize_rule
from .config import GroupQuantization, PerChannelQuantization, QuantizedSpec, QuantLayout
from .mapping import QuantizeMapping
from .modules import QuantizedEmbedding, QuantizedLinear
from .packing import quantize_weight

__all__ = ["QuantizeMutator", "GroupQuantizeMutator", "PerChannelQuantizeMutator", "quantize_mutator",
           "quantize_func"]


def quantize_func(layout: QuantLayout):
    """The mapping function of a weight with ``layout``: float32 (rows, in) -> ``[q_weight, q_scale]``."""
    def func(w: np.ndarray) -> list[np.ndarray]:
        return list(quantize_weight(w, layout))

    return func


class QuantizeMutator(nn.Mutator):
    """Base of the quantization Mutators (see the module docstring). ``mapping`` (optional)
    receives the parameter mapping; ``quantized`` lists the replaced module paths."""

    spec_type: type = object

    def __init__(self, spec: QuantizedSpec, mapping: QuantizeMapping | None = None) -> None:
        if not isinstance(spec, self.spec_type):
            raise TypeError(f"{type(self).__name__} needs a {self.spec_type.__name__}, got {type(spec).__name__}")
        self.spec = spec
        self.mapping = mapping
        self.quantized: list[str] = []

    def excluded(self, name: str, node: nn.Module) -> bool:
        """True when ``node`` at path ``name`` stays unquantized (``exclude`` glob or ``no_quantization``)."""
        if getattr(node, "no_quantization", False):
            return True
        return any(fnmatch.fnmatchcase(name, pattern) for pattern in self.spec.exclude)

    def visit_module(self, name: str, node: nn.Module):
        """Replace a module whose layer type has a quantization rule that the spec enables
        (:func:`builder.layers.quantize_rule`: ``Linear``, and ``Embedding`` under ``quantize_embedding``),
        unless excluded; recurse into other modules."""
        if self.excluded(name, node):
            return node
        rule = quantize_rule(node)
        if rule is not None and rule.enabled(self.spec):
            return self._replace(name, node, node.weight, rule.replace)
        return self.visit(name, node)

    def _replace(self, name: str, node: nn.Module, weight: nn.Parameter, make):
        try:
            new = make(node, self.spec)
        except ValueError as exc:   # the same type: a GroupSizeError stays one
            raise type(exc)(f"cannot quantize '{name}' ({type(node).__name__}, weight {tuple(weight.shape)}): "
                             f"{exc}; add it to the quantization's exclude list to keep it in "
                             f"{self.spec.model_dtype}") from None
        if self.mapping is not None:
            prefix = f"{name}." if name else ""
            self.mapping.add(f"{prefix}weight", [f"{prefix}q_weight", f"{prefix}q_scale"],
                             quantize_func(new.layout), tuple(weight.shape), weight.dtype)
            if new.layout.row_tile:
                for part in ("q_weight", "q_scale"):
                    self.mapping.row_tiles[f"{prefix}{part}"] = new.layout.row_tile
        self.quantized.append(name)
        return new


class GroupQuantizeMutator(QuantizeMutator):
    """Group quantization (``kind: group``, the ``q4f16_1`` family)."""

    spec_type = GroupQuantization


class PerChannelQuantizeMutator(QuantizeMutator):
    """Per-channel int8 quantization (``kind: per_channel``, ``q8f32_pc``)."""

    spec_type = PerChannelQuantization


def quantize_mutator(spec: QuantizedSpec, mapping: QuantizeMapping | None = None) -> QuantizeMutator:
    """The Mutator of ``spec``'s kind. Raises TypeError for a spec that does not quantize."""
    for cls in (GroupQuantizeMutator, PerChannelQuantizeMutator):
        if isinstance(spec, cls.spec_type):
            return cls(spec, mapping)
    raise TypeError(f"no quantization Mutator for {type(spec).__name__}")
