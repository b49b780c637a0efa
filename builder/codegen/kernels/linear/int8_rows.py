"""The byte layout of x in the int8-activation kernels (:class:`Int8Rows`) and when they apply
(:func:`int8_gemv_supported`)."""
from __future__ import annotations

from dataclasses import dataclass



__all__ = ["Int8Rows", "int8_gemv_supported"]


def int8_gemv_supported(storage: str, bits: int, group_size: int, k: int) -> bool:
    """Whether the int8-activation GEMV applies: 4-bit values in unsigned words, groups that
    tile 64-column steps (``group_size`` a multiple of 8 dividing 64, or a multiple of 64 up to
    256) and at least one whole step of ``k`` columns."""
    if storage not in ("uint8", "uint16", "uint32") or bits != 4 or group_size % 8 or group_size > 256:
        return False
    if 64 % group_size and group_size % 64:
        return False
    return Int8Rows(k, group_size).steps > 0


@dataclass(frozen=True)
class Int8Rows:
    """Byte layout of one row of x in the int8-activation buffer (``k`` columns, groups of
    ``group_size``): ``steps`` = whole 64-column steps inside whole groups; int8 values
    (``steps * 64`` bytes, each step even columns then odd), ``xsv`` (``steps * 8`` float32:
    per step and 32-bit lane, the group's ``d``), ``xsum`` (``steps * 8`` int32: the group's
    ``sum q`` in its first lane, else 0), then per covered group ``d``, ``1/d`` (float32) and
    ``sum q`` (int32)."""

    k: int
    group_size: int

    @property
    def steps(self) -> int:
        """Whole 64-column steps inside whole groups (``(k // group_size) * group_size // 64``)."""
        return (self.k // self.group_size) * self.group_size // 64

    @property
    def columns(self) -> int:
        """Columns quantized to int8 (``steps * 64``); the rest of a row stays float."""
        return self.steps * 64

    @property
    def groups(self) -> int:
        """Groups the steps cover (``steps * 64 // group_size``)."""
        return self.steps * 64 // self.group_size

    @property
    def xsv_off(self) -> int:
        """Byte offset of the per-lane ``d`` table (float32, ``steps * 8``)."""
        return self.steps * 64

    @property
    def xsum_off(self) -> int:
        """Byte offset of the per-lane ``sum q`` table (int32, ``steps * 8``)."""
        return self.steps * 96

    @property
    def d_off(self) -> int:
        """Byte offset of the per-group ``d`` (float32, padded by one vector)."""
        return self.steps * 128

    @property
    def inv_off(self) -> int:
        """Byte offset of the per-group ``127 / max|x|`` (float32)."""
        return self.d_off + 4 * self.groups + 4 * max(1, 64 // self.group_size)

    @property
    def sum_off(self) -> int:
        """Byte offset of the per-group ``sum q`` (int32)."""
        return self.inv_off + 4 * self.groups + 4 * max(1, 64 // self.group_size)

    @property
    def row_bytes(self) -> int:
        """Bytes per row of x, rounded up to 64."""
        end = self.sum_off + 4 * self.groups + 4 * max(1, 64 // self.group_size)
        return -(-end // 64) * 64
