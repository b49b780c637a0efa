"""QuantFormat: the one description of a quantized weight's storage format.

Every user derives what it needs from a :class:`QuantFormat`: the quantized layers
(:mod:`builder.quant`) its parameter shapes and the attributes of the ``R.group_dequantize`` they
emit (:meth:`QuantFormat.to_attrs`), the op's struct-info rule and the topi computes the format of a
call (:meth:`QuantFormat.from_attrs`, which refuses any attribute it does not know, naming it), kernel
selection the :class:`~builder.ir.kernel.GroupWeight` that carries those attributes verbatim, the
planner of the fast kernels whether it implements the format (it refuses what it does not know, so a
new format runs on the reference loops), and the tests the numpy float64 reference
(:meth:`QuantFormat.dequantize_reference`).

The layout (MLC-LLM's ``q4f16_1`` family, NK layout; llama.cpp's ``Q4_0`` for the row tiles):

* a weight of ``rows`` x ``in_features`` is quantized in groups of ``group_size`` consecutive columns of
  a row (``in_features`` padded with zero columns to ``groups = ceil(in_features / group_size)`` whole
  groups); ``group_size`` 0 in a declared format means one group per row (per-channel), resolved by
  :meth:`QuantFormat.for_weight`;
* ``q_weight`` (rows, words) of ``storage_dtype`` packs ``elements_per_word = storage bits / bits``
  values per word, value ``i`` of a word in bits ``[i * bits, (i + 1) * bits)`` (``int8`` storage holds
  one signed value per element); ``words = groups * group_size / elements_per_word``;
* ``q_scale`` (rows, groups) of ``scale_dtype`` (a float dtype: the model dtype) holds one scale per
  group;
* column ``k`` of row ``n`` with stored value ``v`` is ``(v - zero_point) * scale[n, k // group_size]``,
  or with a ``codebook`` (a table of ``2 ** bits`` floats, QLoRA's NF4) ``codebook[v] * scale[n, k //
  group_size]``; computed in float32 by the kernels (exact: a small integer or a float32 table entry
  times a 16-bit float, or one rounding of a float32 product);
* ``row_tile = T`` (16) stores both in tiles of ``T`` rows, each tile transposed: ``q_weight`` (rows / T,
  words, T), ``q_scale`` (rows / T, groups, T), word ``w`` of row ``n`` at ``[n // T, w, n % T]`` (one
  vector holds the same word of ``T`` rows, as llama.cpp's repacked ``Q4_0`` blocks interleave rows);
* ``activation = "int8"`` lets the matmul kernels quantize their input to int8 per group as well
  (llama.cpp's ``Q4_0 x Q8_0``; see :class:`schemas.GroupQuantization`); the reference loops ignore it.

The op attributes (:data:`ATTR_NAMES`, the printed order): ``bits``, ``group_size``, ``zero_point``,
``in_features`` always; ``activation_quantization`` when not ``"none"``, ``row_tile`` when not 0,
``codebook`` (the registered format's name) when the format has one. The storage and scale dtypes are
those of the op's two operands.

Sources: MLC-LLM ``python/mlc_llm/quantization/group_quantization.py`` (``q4f16_1``), llama.cpp
``ggml-quants.c`` (``Q4_0`` / ``Q8_0``, the repacked ``Q4_0_8x8``), Dettmers et al., *QLoRA* (2023),
appendix E (the NF4 table).
"""
from __future__ import annotations

import operator
from dataclasses import dataclass, field, replace
from typing import Mapping

import numpy as np

from core.dtypes import STORAGE_BITS  # the one storage-bits table (the recipe schema reads it too)

__all__ = ["QuantFormat", "STORAGE_BITS", "ROW_TILE", "ROW_TILES", "ACTIVATIONS", "ATTR_NAMES", "QUANT_FORMATS",
           "register_quant_format", "unregister_quant_format", "get_quant_format"]

ROW_TILE = 16
"""Rows per tile of a row-tiled weight (one 512-bit vector of 4-byte words; two 256-bit ones)."""

ROW_TILES = (0, ROW_TILE)
"""Row tiles a format may name (0: the plain row layout)."""

ACTIVATIONS = ("none", "int8")
"""Activation quantizations a format may allow its matmul kernels."""

ATTR_NAMES = ("bits", "group_size", "zero_point", "in_features", "activation_quantization", "row_tile", "codebook")
"""The attributes of ``R.group_dequantize`` a format is written to, in their printed order."""

_REQUIRED = ("bits", "group_size", "zero_point", "in_features")
_SCALE_DTYPES = ("float16", "bfloat16", "float32", "float64")


def _int(value, key: str, name: str) -> int:
    """``value`` as a Python int (an int, numpy integer or IntImm); ValueError naming ``key`` otherwise."""
    value = getattr(value, "value", value)   # an IntImm
    if isinstance(value, bool):
        raise ValueError(f"{name}: {key} must be an integer, got {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise ValueError(f"{name}: {key} must be an integer, got {value!r}") from None


@dataclass(frozen=True)
class QuantFormat:
    """A quantized weight format (see the module docstring for the layout).

    ``bits`` per value; ``group_size`` columns per scale (0: one group per row, resolved per weight by
    :meth:`for_weight`); ``storage_dtype`` of the packed words (a key of :data:`STORAGE_BITS`);
    ``scale_dtype`` of the scales (float16 / bfloat16 / float32 / float64); ``zero_point`` the stored value
    of 0; ``codebook`` (optional) the ``2 ** bits`` float values a stored value indexes (a list or tuple,
    kept as a tuple of the values rounded to float32, which the kernels compute with; then
    ``zero_point`` is 0 and the format needs a ``name`` and :func:`register_quant_format`, since the op
    attributes carry the name); ``activation`` (``"none"`` / ``"int8"``); ``row_tile`` (0 or
    :data:`ROW_TILE`); ``name`` (a preset-style name, not part of equality).

    Raises TypeError for a storage dtype not in :data:`STORAGE_BITS` or a non-float scale dtype,
    ValueError for bits the storage cannot hold, a group size that is negative or not a multiple of the
    values per word, a zero point that is not an integer, a codebook of the wrong length or with a zero
    point, an unknown activation quantization or row tile.
    """

    bits: int
    group_size: int
    storage_dtype: str = "uint32"
    scale_dtype: str = "float32"
    zero_point: int = 0
    codebook: tuple | None = None
    activation: str = "none"
    row_tile: int = 0
    name: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if isinstance(self.codebook, (list, tuple, np.ndarray)):   # the kernels' float32 constants
            try:
                object.__setattr__(self, "codebook", tuple(float(np.float32(c)) for c in self.codebook))
            except (TypeError, ValueError):
                raise ValueError(f"{self.name or 'QuantFormat'}: a codebook must hold numbers, got "
                                 f"{self.codebook!r}") from None
        self._validate(self.name or "QuantFormat")

    def _validate(self, name: str) -> None:
        if self.row_tile not in ROW_TILES:
            raise ValueError(f"{name}: row_tile must be one of {ROW_TILES}, got {self.row_tile}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"{name}: activation_quantization must be \"none\" or \"int8\", got {self.activation!r}")
        if self.storage_dtype not in STORAGE_BITS:
            raise TypeError(f"{name}: q_weight dtype must be one of {', '.join(STORAGE_BITS)}, got {self.storage_dtype}")
        if self.scale_dtype not in _SCALE_DTYPES:
            raise TypeError(f"{name}: q_scale must be floating point, got {self.scale_dtype}")
        sbits = STORAGE_BITS[self.storage_dtype]
        if (not isinstance(self.bits, int) or self.bits <= 0 or sbits % self.bits
                or (self.storage_dtype.startswith("int") and self.bits != sbits)):
            raise ValueError(f"{name}: cannot store {self.bits}-bit values in {self.storage_dtype}")
        if not isinstance(self.zero_point, int) or isinstance(self.zero_point, bool):
            raise ValueError(f"{name}: zero_point must be an integer, got {self.zero_point!r}")
        per_word = sbits // self.bits
        if not isinstance(self.group_size, int) or self.group_size < 0 or self.group_size % per_word:
            raise ValueError(f"{name}: group_size {self.group_size} must be a positive multiple of the "
                             f"{per_word} values per {self.storage_dtype} word")
        if self.codebook is not None:
            if not isinstance(self.codebook, tuple) or len(self.codebook) != 1 << self.bits or not all(
                    np.isfinite(c) for c in self.codebook):
                raise ValueError(f"{name}: a codebook must be a tuple of {1 << self.bits} finite floats "
                                 f"(one per {self.bits}-bit value)")
            if self.zero_point:
                raise ValueError(f"{name}: a codebook format has no zero point, got {self.zero_point}")

    # -- derived numbers
    @property
    def storage_bits(self) -> int:
        """Bits of one storage word (:data:`STORAGE_BITS`)."""
        return STORAGE_BITS[self.storage_dtype]

    @property
    def elements_per_word(self) -> int:
        """Values per storage word: ``storage_bits // bits`` (8 for 4 bits in uint32, 1 for int8)."""
        return self.storage_bits // self.bits

    @property
    def signed(self) -> bool:
        """Whether the words hold signed values (``int8``)."""
        return self.storage_dtype.startswith("int")

    @property
    def max_int(self) -> int:
        """``2 ** (bits - 1) - 1``: the largest magnitude the symmetric quantizer stores (7 for 4 bits)."""
        return 2 ** (self.bits - 1) - 1

    def group_size_for(self, in_features: int) -> int:
        """The group size of a weight with ``in_features`` columns (``in_features`` when per-channel)."""
        return self.group_size or in_features

    def groups(self, in_features: int) -> int:
        """Scales per row: ``ceil(in_features / group_size)``."""
        return -(-in_features // self.group_size_for(in_features))

    def words(self, in_features: int) -> int:
        """Storage words per row: ``groups * group_size / elements_per_word``."""
        return self.groups(in_features) * self.group_size_for(in_features) // self.elements_per_word

    def q_weight_shape(self, rows, in_features: int) -> tuple:
        """``(rows, words)``; ``(rows / row_tile, words, row_tile)`` when tiled."""
        words = self.words(in_features)
        return (rows // self.row_tile, words, self.row_tile) if self.row_tile else (rows, words)

    def q_scale_shape(self, rows, in_features: int) -> tuple:
        """``(rows, groups)``; ``(rows / row_tile, groups, row_tile)`` when tiled."""
        groups = self.groups(in_features)
        return (rows // self.row_tile, groups, self.row_tile) if self.row_tile else (rows, groups)

    def for_weight(self, in_features: int, rows=None) -> "QuantFormat":
        """The format of one weight of ``in_features`` columns and ``rows`` rows: the group size resolved
        (per-channel: ``in_features``) and the row tiles chosen -- :data:`ROW_TILE` for 4- and 8-bit values
        in uint32 words when ``rows`` is a positive multiple of it (a Linear's weight; an Embedding's,
        ``rows=None``, never), the layout of the row-tiled kernels. A format that names a row tile keeps it."""
        gs = self.group_size_for(in_features)
        tile = self.row_tile
        if (not tile and self.bits in (4, 8) and self.storage_dtype == "uint32" and isinstance(rows, int)
                and not isinstance(rows, bool) and rows > 0 and rows % ROW_TILE == 0):
            tile = ROW_TILE
        return replace(self, group_size=gs, row_tile=tile)

    # -- the op attributes
    def to_attrs(self, in_features: int) -> dict:
        """The attributes of ``R.group_dequantize`` of a weight of this format with ``in_features``
        columns, in the printed order (see the module docstring). Raises ValueError for a codebook
        format without a name."""
        attrs = {"bits": self.bits, "group_size": self.group_size_for(in_features), "zero_point": self.zero_point,
                 "in_features": int(in_features)}
        if self.activation != "none":
            attrs["activation_quantization"] = self.activation
        if self.row_tile:
            attrs["row_tile"] = self.row_tile
        if self.codebook is not None:
            if not self.name:
                raise ValueError("a codebook format needs a name (the op attributes carry it)")
            attrs["codebook"] = self.name
        return attrs

    @classmethod
    def from_attrs(cls, attrs: Mapping, storage_dtype: str, scale_dtype: str,
                   name: str = "R.group_dequantize") -> "QuantFormat":
        """The format an ``R.group_dequantize``'s attributes describe, with its operands' dtypes
        (``storage_dtype`` of ``q_weight``, ``scale_dtype`` of ``q_scale``); ``in_features`` is checked
        (a positive integer) but is the weight's, read as ``attrs["in_features"]``.

        Raises ValueError naming any attribute not in :data:`ATTR_NAMES` (a format this code does not
        know: never silently dropped), a missing one, a non-integer number, an unknown activation
        quantization, row tile or codebook name (not registered, or a format without a codebook), and
        what the constructor raises; ``name`` (the op or function) starts each message."""
        unknown = [k for k in attrs if k not in ATTR_NAMES]
        if unknown:
            raise ValueError(f"{name}: unknown quantization attribute(s) {', '.join(map(repr, unknown))} (a "
                             f"QuantFormat reads {', '.join(ATTR_NAMES)}; declare a new one in "
                             "builder/ir/quant_format.py)")
        missing = [k for k in _REQUIRED if k not in attrs]
        if missing:
            raise ValueError(f"{name}: missing attribute {missing[0]!r} (needs {', '.join(_REQUIRED)})")
        bits, gs, zp, k = (_int(attrs[key], key, name) for key in _REQUIRED)
        try:
            tile = _int(attrs.get("row_tile", 0), "row_tile", name)
        except ValueError:
            raise ValueError(f"{name}: row_tile must be an integer, got {attrs.get('row_tile')!r}") from None
        act = attrs.get("activation_quantization", "none")
        if act not in ACTIVATIONS:
            raise ValueError(f"{name}: activation_quantization must be \"none\" or \"int8\", got {act!r}")
        if tile not in ROW_TILES:
            raise ValueError(f"{name}: row_tile must be one of {ROW_TILES}, got {tile}")
        if k <= 0:
            raise ValueError(f"{name}: in_features must be positive, got {k}")
        if gs <= 0:
            raise ValueError(f"{name}: group_size must be positive, got {gs}")
        codebook, fmt_name = None, ""
        if "codebook" in attrs:
            fmt_name = attrs["codebook"]
            known = QUANT_FORMATS.get(fmt_name) if isinstance(fmt_name, str) else None
            if known is None or known.codebook is None:
                have = [n for n, f in QUANT_FORMATS.items() if f.codebook is not None]
                raise ValueError(f"{name}: codebook {fmt_name!r} is not a registered codebook format "
                                 f"(registered: {', '.join(have) or 'none'}; see register_quant_format)")
            codebook = known.codebook
        fmt = cls.__new__(cls)
        for key, value in (("bits", bits), ("group_size", gs), ("storage_dtype", storage_dtype),
                           ("scale_dtype", scale_dtype), ("zero_point", zp), ("codebook", codebook),
                           ("activation", act), ("row_tile", tile), ("name", fmt_name)):
            object.__setattr__(fmt, key, value)
        fmt._validate(name)   # the constructor's checks, with the op's name in the messages
        return fmt

    # -- the numpy reference
    def values(self, q_weight: np.ndarray) -> np.ndarray:
        """The stored values of row-major packed words ``q_weight`` (rows, words) as int64 (rows, words *
        elements_per_word), value ``i`` of a word from bits ``[i * bits, (i + 1) * bits)``."""
        words = np.asarray(q_weight)
        if self.signed:
            return words.astype(np.int64)
        per = self.elements_per_word
        shifts = np.arange(per, dtype=np.uint64) * np.uint64(self.bits)
        vals = (words.astype(np.uint64)[..., None] >> shifts) & np.uint64((1 << self.bits) - 1)
        return vals.reshape(*words.shape[:-1], words.shape[-1] * per).astype(np.int64)

    def scales_float64(self, q_scale: np.ndarray) -> np.ndarray:
        """Scales as float64 (exact); bfloat16 ones as their uint16 bits."""
        s = np.asarray(q_scale)
        if self.scale_dtype == "bfloat16":
            return (s.astype(np.uint32) << np.uint32(16)).view(np.float32).astype(np.float64)
        return s.astype(np.float64)

    def dequantize_reference(self, q_weight: np.ndarray, q_scale: np.ndarray, in_features: int) -> np.ndarray:
        """float64 (rows, in_features): the weight ``q_weight`` / ``q_scale`` stand for (row tiles undone,
        padding columns dropped) -- ``(v - zero_point) * scale`` or ``codebook[v] * scale``, exact. The
        reference the tests compare the kernels with. Raises ValueError for arrays of the wrong shapes."""
        q, s = np.asarray(q_weight), np.asarray(q_scale)
        if self.row_tile:
            if q.ndim != 3 or s.ndim != 3:
                raise ValueError(f"row-tiled arrays must be 3-D, got {q.shape} and {s.shape}")
            q = q.transpose(0, 2, 1).reshape(-1, q.shape[1])
            s = s.transpose(0, 2, 1).reshape(-1, s.shape[1])
        if q.shape != (s.shape[0], self.words(in_features)) or s.shape[1:] != (self.groups(in_features),):
            raise ValueError(f"q_weight {q.shape} / q_scale {s.shape} do not fit in_features={in_features}")
        v = self.values(q)
        w = (np.asarray(self.codebook, np.float64)[v] if self.codebook is not None
             else (v - self.zero_point).astype(np.float64))
        w = w * np.repeat(self.scales_float64(s), self.group_size_for(in_features), axis=1)
        return w[:, :in_features]


QUANT_FORMATS: dict[str, QuantFormat] = {}
"""Registered formats by name: the built-in presets' formats (MLC-LLM's names) and any a user adds
(:func:`register_quant_format`); an op's ``codebook`` attribute names one."""


def register_quant_format(fmt: QuantFormat) -> QuantFormat:
    """Register ``fmt`` under ``fmt.name`` and return it. Raises ValueError for a format without a name or
    a name registered for a different format, TypeError for a non-format."""
    if not isinstance(fmt, QuantFormat):
        raise TypeError(f"register_quant_format needs a QuantFormat, got {type(fmt).__name__}")
    if not fmt.name:
        raise ValueError("register_quant_format: the format needs a name")
    have = QUANT_FORMATS.get(fmt.name)
    if have is not None and have != fmt:
        raise ValueError(f"quantization format {fmt.name!r} is registered already as {have!r}")
    QUANT_FORMATS[fmt.name] = fmt
    return fmt


def unregister_quant_format(name: str) -> None:
    """Remove the format registered as ``name`` (KeyError when there is none)."""
    del QUANT_FORMATS[name]


def get_quant_format(name: str) -> QuantFormat:
    """The format registered as ``name``. Raises KeyError listing the registered names."""
    if name not in QUANT_FORMATS:
        raise KeyError(f"unknown quantization format {name!r}; registered: {', '.join(QUANT_FORMATS)}")
    return QUANT_FORMATS[name]


for _fmt in (
        QuantFormat(4, 32, "uint32", "float16", 7, name="q4f16_1"),
        QuantFormat(4, 32, "uint32", "float32", 7, name="q4f32_1"),
        QuantFormat(4, 32, "uint32", "bfloat16", 7, name="q4bf16_1"),
        QuantFormat(8, 32, "uint32", "float16", 127, name="q8f16_1"),
        QuantFormat(8, 32, "uint32", "float32", 127, name="q8f32_1"),
        QuantFormat(8, 0, "int8", "float16", 0, name="q8f16_pc"),
        QuantFormat(8, 0, "int8", "float32", 0, name="q8f32_pc")):
    register_quant_format(_fmt)
del _fmt
