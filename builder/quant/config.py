"""Quantization specs (the pydantic models live in :mod:`schemas`, which the recipe validates
against) and the layout they give a weight.

A spec is one of :class:`GroupQuantization` (``kind: group``), :class:`PerChannelQuantization`
(``kind: per_channel``) or :class:`NoQuantization` (``kind: none``, a dtype cast); presets are
named specs (``q4f16_1``) registered in :data:`PRESETS`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from schemas import (
    QUANTIZATION_KINDS, QUANTIZATION_PRESETS, STORAGE_BITS, GroupQuantization, NoQuantization,
    PerChannelQuantization, QuantizationSpec, register_quantization_preset, resolve_quantization,
)

from ..ir.op.quantize import ROW_TILE

__all__ = [
    "GroupQuantization", "PerChannelQuantization", "NoQuantization", "QuantizationSpec", "PRESETS", "KINDS",
    "STORAGE_BITS", "register_preset", "resolve", "preset_name", "describe", "QuantLayout", "is_quantizing",
    "GroupSizeError", "ROW_TILE",
]


class GroupSizeError(ValueError):
    """The quantization's ``group_size`` is larger than a weight's input features (a group would be
    mostly padding: a 2 MB model padded to 1 GB)."""

PRESETS = QUANTIZATION_PRESETS
"""Preset name -> spec (shared with :mod:`schemas`, so a registered preset is valid in recipes)."""

KINDS = QUANTIZATION_KINDS
"""``kind`` -> spec model."""

QuantizedSpec = Union[GroupQuantization, PerChannelQuantization]


def register_preset(name: str, spec: QuantizationSpec) -> None:
    """Register ``spec`` under ``name`` (usable as ``quantization: name`` in recipes and overrides).

    Raises ValueError when ``name`` already means a different spec, TypeError for a non-spec.
    """
    register_quantization_preset(name, spec)


def resolve(value: Union[str, QuantizationSpec]) -> QuantizationSpec:
    """The spec of a preset name (a copy) or the spec itself. Raises ValueError for an unknown
    name, listing the valid ones."""
    return resolve_quantization(value)


def preset_name(spec: Union[str, QuantizationSpec]) -> str | None:
    """The name of the first preset equal to ``spec`` (a name is returned as is), else None."""
    if isinstance(spec, str):
        return spec
    for name, preset in PRESETS.items():
        if preset == spec:
            return name
    return None


def describe(spec: Union[str, QuantizationSpec]) -> str:
    """Short text for summaries: the preset name, else the spec's fields (``group(bits=4, group_size=64, model_dtype=float16)``)."""
    name = preset_name(spec)
    if name is not None:
        return name
    always = {"bits", "group_size", "model_dtype"}
    fields = {k: v for k, v in spec.model_dump(exclude={"kind"}).items()
              if k in always or v != type(spec).model_fields[k].default}
    return f"{spec.kind}(" + ", ".join(f"{k}={v}" for k, v in fields.items()) + ")"


def is_quantizing(spec: QuantizationSpec) -> bool:
    """True for the kinds that replace weights by ``q_weight`` / ``q_scale``."""
    return isinstance(spec, (GroupQuantization, PerChannelQuantization))


@dataclass(frozen=True)
class QuantLayout:
    """How a (rows, in_features) weight is stored under a quantizing spec.

    ``group_size`` (the spec's, or ``in_features`` for per-channel), ``num_groups =
    ceil(in_features / group_size)``, ``padded_in = num_groups * group_size`` (zero columns are
    appended at quantization time), ``words = padded_in / elements_per_word``: ``q_weight`` is
    (rows, words) of ``storage_dtype`` and ``q_scale`` (rows, num_groups) of ``model_dtype``.
    ``zero_point`` is the stored value of 0 (``max_int`` for group, 0 for per-channel).
    ``activation_quantization`` is the spec's (``"none"`` or ``"int8"``, see
    :class:`schemas.GroupQuantization`). ``row_tile`` (0: none): the weight is stored in tiles of
    that many rows, each transposed (:func:`runtime.weights.tile_rows`): ``q_weight``
    (rows / T, words, T), ``q_scale`` (rows / T, num_groups, T) -- chosen by :meth:`of` for 4- and
    8-bit weights in uint32 words whose rows fill whole tiles of :data:`ROW_TILE`, the layout of the
    row-tiled kernels (every weight row of a tile in one vector lane).
    """

    in_features: int
    bits: int
    group_size: int
    elements_per_word: int
    storage_dtype: str
    model_dtype: str
    max_int: int
    zero_point: int
    activation_quantization: str = "none"
    row_tile: int = 0

    @staticmethod
    def of(spec: QuantizedSpec, in_features: int, rows=None) -> "QuantLayout":
        """The layout of a weight with ``in_features`` columns and ``rows`` rows (given for a
        Linear's weight, which may then be row-tiled; an Embedding's never is). Raises ValueError
        for a non-positive or non-integer ``in_features`` (a symbolic size cannot be grouped),
        :class:`GroupSizeError` for a ``group_size`` larger than ``in_features``."""
        if not isinstance(in_features, int) or isinstance(in_features, bool) or in_features <= 0:
            raise ValueError(f"cannot quantize a weight with in_features={in_features!r}: group "
                             "quantization needs a fixed positive number of input features")
        group_size = spec.group_size if isinstance(spec, GroupQuantization) else in_features
        if group_size > in_features:
            raise GroupSizeError(f"group_size {group_size} is larger than the weight's {in_features} input "
                                 "features")
        act = getattr(spec, "activation_quantization", "none")
        tiled = (spec.bits in (4, 8) and spec.storage_dtype == "uint32" and group_size % spec.elements_per_word == 0
                 and isinstance(rows, int) and not isinstance(rows, bool) and rows > 0 and rows % ROW_TILE == 0)
        return QuantLayout(in_features, spec.bits, group_size, spec.elements_per_word, spec.storage_dtype,
                           spec.model_dtype, spec.max_int, spec.zero_point, act, ROW_TILE if tiled else 0)

    @property
    def num_groups(self) -> int:
        """``ceil(in_features / group_size)``."""
        return -(-self.in_features // self.group_size)

    @property
    def padded_in(self) -> int:
        """``num_groups * group_size``: in_features rounded up to whole groups."""
        return self.num_groups * self.group_size

    @property
    def words(self) -> int:
        """Storage words per row: ``padded_in / elements_per_word``."""
        return self.padded_in // self.elements_per_word

    def q_weight_shape(self, rows) -> tuple:
        """``(rows, words)``; ``(rows / row_tile, words, row_tile)`` when tiled."""
        if self.row_tile:
            return (rows // self.row_tile, self.words, self.row_tile)
        return (rows, self.words)

    def q_scale_shape(self, rows) -> tuple:
        """``(rows, num_groups)``; ``(rows / row_tile, num_groups, row_tile)`` when tiled."""
        if self.row_tile:
            return (rows // self.row_tile, self.num_groups, self.row_tile)
        return (rows, self.num_groups)

    @property
    def op_attrs(self) -> dict:
        """The attributes of ``R.group_dequantize`` for this layout (``activation_quantization``
        only when not ``"none"``)."""
        attrs = {"bits": self.bits, "group_size": self.group_size, "zero_point": self.zero_point,
                 "in_features": self.in_features}
        if self.activation_quantization != "none":
            attrs["activation_quantization"] = self.activation_quantization
        if self.row_tile:
            attrs["row_tile"] = self.row_tile
        return attrs
