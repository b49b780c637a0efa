"""The byte layout of x in the integer-activation kernels (:class:`Int8Rows`: int8 values, or the
int16 ones of the float-activation tiles) and when the int8 kernels apply (:func:`int8_gemv_supported`)."""
from __future__ import annotations

from dataclasses import dataclass



__all__ = ["Int8Rows", "int8_gemv_supported", "TILE_ZERO_POINT_BOUND"]


#: The largest ``|zero_point|`` the row-tiled integer kernels take: their int32 sums of a group start at
#: ``-zero_point * sum q`` (``|sum q| <= 256 * 127`` for int8 x), which must stay far inside int32 with the
#: products added (``2**15 * 256 * 127 + 256 * 255 * 127 < 2**31``).
TILE_ZERO_POINT_BOUND = 1 << 15


def int8_gemv_supported(storage: str, bits: int, group_size: int, k: int, row_tile: int = 0,
                        zero_point: int = 0) -> bool:
    """Whether the int8-activation kernels apply: 4-bit values in unsigned words (any layout), or
    8-bit values in row tiles of uint32 words (``row_tile``: the row-tiled kernel only), groups
    that tile 64-column steps (``group_size`` a multiple of 8 dividing 64, or a multiple of 64 up
    to 256: x's quantization reads 8 values at a time), at least one whole step of ``k``
    columns, and for row tiles a ``zero_point`` of at most :data:`TILE_ZERO_POINT_BOUND` in magnitude."""
    if row_tile and abs(zero_point) > TILE_ZERO_POINT_BOUND:
        return False
    if not (storage == "uint32" and bits == 8 and row_tile) and (
            storage not in ("uint8", "uint16", "uint32") or bits != 4):
        return False
    if group_size % 8 or group_size > 256:
        return False
    if 64 % group_size and group_size % 64:
        return False
    return Int8Rows(k, group_size).steps > 0


@dataclass(frozen=True)
class Int8Rows:
    """Byte layout of one row of x in the integer-activation buffer (``k`` columns, groups of
    ``group_size``, steps of ``step`` = 64 columns for 256-bit kernels or 128 for 512-bit ones):
    ``steps`` = whole steps inside whole groups; int8 values (``steps * step`` bytes, each step
    even columns then odd -- the 4-bit kernels' low and high nibbles --, or in column order with
    ``natural``, for 8-bit weights; ``wide`` with ``natural``: the same int8 values stored as int16, each
    4 columns in the order ``0 2 1 3``, the byte pairs ``vpmaddwd`` takes of an 8-bit word without VNNI,
    :meth:`~.tiles.GemvTiles._tile_fn_i8`) or, with ``bits = 16``, int16 values (``2 * steps * step``
    bytes, each 8 columns in the order ``0 4 1 5 2 6 3 7``: the pairs a 4-bit word's nibbles ``p``
    and ``p + 4`` meet in one ``vpmaddwd`` lane, :meth:`~.tiles.GemvTiles._tile_fn_x16`; with
    ``natural``, each 4 in the order ``0 2 1 3``, as ``wide``), then per
    covered group ``d`` (``max|x| / qmax``), ``1/d`` and ``d * sum q``
    (float32; the last for the weights' zero point) and ``-zero_point * sum q`` (int32, for the
    row-tiled kernel). The GEMV multiplies a step's weight scales by its groups' ``d`` and spreads
    the products over the dot product's lanes (a per-lane copy of ``d`` was as many bytes per
    step as the weights and made the GEMV read x at up to 3 bytes per weight byte: K = 11008 rows
    streamed 19 GB/s with it, 22 without, Zen 4)."""

    k: int
    group_size: int
    step: int = 64
    natural: bool = False
    bits: int = 8
    wide: bool = False

    @property
    def qmax(self) -> int:
        """The largest ``|q|``: 127 for int8 values, 32767 for int16 ones."""
        return (1 << (self.bits - 1)) - 1

    @property
    def value_bytes(self) -> int:
        """Bytes per stored value: 2 for int16 values and for ``wide`` int8 ones, else 1."""
        return 2 if self.bits == 16 or self.wide else 1

    @classmethod
    def for_lanes(cls, k: int, group_size: int, lanes: int) -> "Int8Rows":
        """The layout of a kernel with ``lanes`` float32 lanes: 128-column steps (one 512-bit
        vector of nibbles per step) for 16 lanes when they quantize the same columns as 64-column
        steps (so every batch size and the int8 GEMM compute the same), else 64-column steps."""
        if lanes >= 16:
            wide = cls(k, group_size, 128)
            if wide.columns == cls(k, group_size).columns:
                return wide
        return cls(k, group_size)

    @property
    def lanes(self) -> int:
        """int32 lanes of one step's dot product (``step / 8``: 8 columns per lane)."""
        return self.step // 8

    @property
    def steps(self) -> int:
        """Whole steps inside whole groups (``(k // group_size) * group_size // step``)."""
        return (self.k // self.group_size) * self.group_size // self.step

    @property
    def columns(self) -> int:
        """Columns quantized (``steps * step``); the rest of a row stays float."""
        return self.steps * self.step

    @property
    def groups(self) -> int:
        """Groups the steps cover (``columns // group_size``)."""
        return self.columns // self.group_size

    @property
    def d_off(self) -> int:
        """Byte offset of the per-group ``d`` (float32, padded by one step's groups)."""
        return self.columns * self.value_bytes

    @property
    def _pad(self) -> int:
        """Bytes after each per-group table: one step's worth of groups, so that a vector load
        of a step's groups never reads past the table."""
        return 4 * max(1, self.step // self.group_size)

    @property
    def inv_off(self) -> int:
        """Byte offset of the per-group ``qmax / max|x|`` (float32)."""
        return self.d_off + 4 * self.groups + self._pad

    @property
    def dsum_off(self) -> int:
        """Byte offset of the per-group ``d * sum q`` (float32)."""
        return self.inv_off + 4 * self.groups + self._pad

    @property
    def zsum_off(self) -> int:
        """Byte offset of the per-group ``-zero_point * sum q`` (int32; filled for the row-tiled
        kernel, whose integer sums start there)."""
        return self.dsum_off + 4 * self.groups + self._pad

    @property
    def row_bytes(self) -> int:
        """Bytes per row of x, rounded up to 64."""
        end = self.zsum_off + 4 * self.groups + self._pad
        return -(-end // 64) * 64
