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
    QUANTIZATION_KINDS, QUANTIZATION_PRESETS, GroupQuantization, NoQuantization,
    PerChannelQuantization, QuantizationSpec, register_quantization_preset, resolve_quantization,
)

from ..ir.quant_format import ROW_TILE, STORAGE_BITS, QuantFormat, get_quant_format

__all__ = [
    "GroupQuantization", "PerChannelQuantization", "NoQuantization", "QuantizationSpec", "PRESETS", "KINDS",
    "STORAGE_BITS", "register_preset", "resolve", "preset_name", "describe", "QuantLayout", "is_quantizing",
    "GroupSizeError", "ROW_TILE", "QuantFormat", "spec_format",
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


def spec_format(spec: QuantizedSpec) -> QuantFormat:
    """The :class:`~builder.ir.quant_format.QuantFormat` a quantizing spec declares (per-channel: group size
    0, one group per row; the row tiles are chosen per weight, :meth:`QuantFormat.for_weight`)."""
    return QuantFormat(spec.bits, spec.group_size if isinstance(spec, GroupQuantization) else 0,
                       spec.storage_dtype, spec.model_dtype, spec.zero_point,
                       activation=getattr(spec, "activation_quantization", "none"))


@dataclass(frozen=True)
class QuantLayout:
    """How a (rows, in_features) weight is stored: its :class:`~builder.ir.quant_format.QuantFormat`
    ``format`` (group size and row tiles resolved for this weight) and ``in_features``.

    ``group_size`` (the format's, or ``in_features`` for per-channel), ``num_groups =
    ceil(in_features / group_size)``, ``padded_in = num_groups * group_size`` (zero columns are
    appended at quantization time), ``words = padded_in / elements_per_word``: ``q_weight`` is
    (rows, words) of ``storage_dtype`` and ``q_scale`` (rows, num_groups) of ``model_dtype`` (the
    format's scale dtype). ``zero_point`` is the stored value of 0 (``max_int`` for group, 0 for
    per-channel and codebook formats). ``row_tile`` (0: none): the weight is stored in tiles of
    that many rows, each transposed (:func:`runtime.weights.tile_rows`): ``q_weight``
    (rows / T, words, T), ``q_scale`` (rows / T, num_groups, T) -- chosen by :meth:`of` for 4- and
    8-bit weights in uint32 words whose rows fill whole tiles of :data:`ROW_TILE`, the layout of the
    row-tiled kernels (every weight row of a tile in one vector lane).
    """

    in_features: int
    format: QuantFormat

    @staticmethod
    def of(spec: Union[QuantizedSpec, QuantFormat, str], in_features: int, rows=None) -> "QuantLayout":
        """The layout of a weight with ``in_features`` columns and ``rows`` rows (given for a
        Linear's weight, which may then be row-tiled; an Embedding's never is) under a quantizing spec, a
        :class:`QuantFormat` or the name of a registered one. Raises ValueError for a non-positive or
        non-integer ``in_features`` (a symbolic size cannot be grouped), :class:`GroupSizeError` for a
        ``group_size`` larger than ``in_features``, KeyError for an unknown format name."""
        if not isinstance(in_features, int) or isinstance(in_features, bool) or in_features <= 0:
            raise ValueError(f"cannot quantize a weight with in_features={in_features!r}: group "
                             "quantization needs a fixed positive number of input features")
        fmt = (get_quant_format(spec) if isinstance(spec, str) else spec if isinstance(spec, QuantFormat)
               else spec_format(spec))
        if fmt.group_size > in_features:
            raise GroupSizeError(f"group_size {fmt.group_size} is larger than the weight's {in_features} input "
                                 "features")
        return QuantLayout(in_features, fmt.for_weight(in_features, rows))

    @property
    def bits(self) -> int:
        """Bits per stored value."""
        return self.format.bits

    @property
    def group_size(self) -> int:
        """Columns per scale."""
        return self.format.group_size_for(self.in_features)

    @property
    def elements_per_word(self) -> int:
        """Values per storage word."""
        return self.format.elements_per_word

    @property
    def storage_dtype(self) -> str:
        """dtype of ``q_weight``."""
        return self.format.storage_dtype

    @property
    def model_dtype(self) -> str:
        """dtype of ``q_scale`` (the model dtype)."""
        return self.format.scale_dtype

    @property
    def max_int(self) -> int:
        """The largest magnitude the symmetric quantizer stores (``2 ** (bits - 1) - 1``)."""
        return self.format.max_int

    @property
    def zero_point(self) -> int:
        """The stored value of 0."""
        return self.format.zero_point

    @property
    def activation_quantization(self) -> str:
        """``"none"`` or ``"int8"`` (see :class:`schemas.GroupQuantization`)."""
        return self.format.activation

    @property
    def row_tile(self) -> int:
        """Rows per tile (0: the row layout)."""
        return self.format.row_tile

    @property
    def num_groups(self) -> int:
        """``ceil(in_features / group_size)``."""
        return self.format.groups(self.in_features)

    @property
    def padded_in(self) -> int:
        """``num_groups * group_size``: in_features rounded up to whole groups."""
        return self.num_groups * self.group_size

    @property
    def words(self) -> int:
        """Storage words per row: ``padded_in / elements_per_word``."""
        return self.format.words(self.in_features)

    def q_weight_shape(self, rows) -> tuple:
        """``(rows, words)``; ``(rows / row_tile, words, row_tile)`` when tiled."""
        return self.format.q_weight_shape(rows, self.in_features)

    def q_scale_shape(self, rows) -> tuple:
        """``(rows, num_groups)``; ``(rows / row_tile, num_groups, row_tile)`` when tiled."""
        return self.format.q_scale_shape(rows, self.in_features)

    @property
    def op_attrs(self) -> dict:
        """The attributes of ``R.group_dequantize`` for this layout (:meth:`QuantFormat.to_attrs`)."""
        return self.format.to_attrs(self.in_features)
